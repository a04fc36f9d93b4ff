"""The class behind the unpad stage's stale proof: a stage whose cache key names a data folder (calib,
eval) or a reader plugin file must key on its bytes too, or an edit in place reuses work made on data
that is no longer there. Every stage optcli has is checked, so a new one cannot forget."""
from __future__ import annotations

import importlib
import json
import pkgutil
from pathlib import Path

import numpy as np
import pytest

import optcli.stages
from compile_testkit import make_matmul_add_relu
from optcli.backends.torch.loader import ModelSource
from optcli.config import CompileConfig
from optcli.onnx_model import io_specs, load_onnx
from optcli.stages import Stage, StageContext


def _all_stage_classes() -> list[type[Stage]]:
    for mod in pkgutil.iter_modules(optcli.stages.__path__):
        importlib.import_module(f"optcli.stages.{mod.name}")
    found, todo = [], list(Stage.__subclasses__())
    while todo:
        cls = todo.pop()
        todo.extend(cls.__subclasses__())
        if not getattr(cls, "__abstractmethods__", None):
            found.append(cls)
    return found


def _ctx(tmp_path: Path) -> StageContext:
    model = make_matmul_add_relu(tmp_path / "m.onnx")
    for part in ("calib", "eval"):
        (tmp_path / part).mkdir()
        np.savez(tmp_path / part / "part-000.npz", X=np.ones((4, 4), np.float32))
    (tmp_path / "reader.py").write_text("class Reader:\n    pass\n")
    config = CompileConfig(model=str(model), out=tmp_path / "out")
    config.quantize.calib, config.quantize.eval = tmp_path / "calib", tmp_path / "eval"
    config.quantize.calib_reader = f"{tmp_path / 'reader.py'}:Reader"
    inputs, _ = io_specs(load_onnx(model))
    return StageContext(config=config, source=ModelSource(str(model), model, "onnx"), inputs=inputs, target="cpu",
                        out_dir=tmp_path / "out")


def test_the_stages_are_found() -> None:
    names = {cls.name for cls in _all_stage_classes()}
    assert {"export", "simplify", "fuse", "unpad", "quantize-int8", "quantize-fp16", "build"} <= names


@pytest.mark.parametrize("cls", _all_stage_classes(), ids=lambda c: c.name)
def test_a_key_that_names_data_changes_when_the_data_is_edited_in_place(cls: type[Stage], tmp_path: Path) -> None:
    ctx = _ctx(tmp_path)
    stage = cls(ctx)
    edits = {"calib": lambda: np.savez(tmp_path / "calib" / "part-000.npz", X=np.zeros((4, 4), np.float32)),
             "eval": lambda: np.savez(tmp_path / "eval" / "part-000.npz", X=np.zeros((4, 4), np.float32)),
             "reader.py": lambda: (tmp_path / "reader.py").write_text("class Reader:\n    scale = 2\n")}
    names_data = False
    for needle, edit in edits.items():
        before = json.dumps(stage.fingerprint(), sort_keys=True, default=str)
        if str(tmp_path / needle) not in before:
            continue
        names_data = True
        edit()
        after = json.dumps(stage.fingerprint(), sort_keys=True, default=str)
        assert after != before, f"{cls.name}: its cache key names {needle} but not its contents"
    if cls.name in ("unpad", "quantize-int8", "quantize-fp16", "build"):
        assert names_data, f"{cls.name} reads the data: its key must name it"
