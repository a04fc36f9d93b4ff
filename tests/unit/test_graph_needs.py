"""What the ONNX stages prepare for a target's builder comes from its backend descriptor, field by field
(registry.GraphNeeds): a toy backend that owns a --target, registered by its one line, flips each field
and the stage that asks for it follows. The cpu target gets the defaults."""
from __future__ import annotations

import dataclasses
import itertools
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from compile_testkit import make_conv_calib, make_masked_encoder
from optcli.artifact import Artifact
from optcli.backends import registry
from optcli.backends.registry import Backend, GraphNeeds, graph_needs, load_object
from optcli.backends.torch.loader import ModelSource
from optcli.config import CompileConfig
from optcli.errors import StageError, UsageError
from optcli.onnx_model import int_bounds_onnx, io_specs, load_onnx, op_histogram
from optcli.quantize.flavour import FLAVOURS, TABLE, resolve_flavour
from optcli.quantize.int8_with_fallback import fp16_base
from optcli.sequence_axis import sequence_axis
from optcli.stages.base import StageContext
from optcli.stages.fuse import FuseStage
from optcli.stages.quantize_fp16 import QuantizeFp16Stage
from optcli.stages.quantize_int8 import QuantizeInt8Stage
from optcli.stages.simplify import CONTRIB_FUSIONS, SimplifyStage
from optcli.stages.unpad import UnpadStage
from optcli.tensor_spec import TensorSpec

pytest.importorskip("onnxruntime")

TOY = '''
"""A backend for tests that ends the pipeline for --target toy."""
from optcli.backends.registry import Backend
from optcli.errors import StageError

BACKEND = Backend(name="toyrt", label="ToyRT", formats=("toy",), target="toy", **{fields})


def refuse(path, what):
    raise StageError(f"{{what}} has what ToyRT refuses")


def fp16(config):
    return True
'''
_serial = itertools.count()


@pytest.fixture
def toy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, register_backend: Any) -> Any:
    """toy(**fields): register a backend owning --target toy with these descriptor fields."""
    folder = tmp_path / "plugins"
    folder.mkdir()
    monkeypatch.syspath_prepend(str(folder))
    registered = registry.BACKEND_MODULES

    def register(**fields: Any) -> GraphNeeds:
        module = f"toy_backend_{next(_serial)}"  # a fresh module each time: the import system caches them
        monkeypatch.setattr(registry, "BACKEND_MODULES", registered)  # the toy registered before goes
        refs = {k: v.replace("TOY:", f"{module}:") if isinstance(v, str) else v for k, v in fields.items()}
        (folder / f"{module}.py").write_text(TOY.format(fields=repr(refs)))
        monkeypatch.delitem(sys.modules, module, raising=False)
        register_backend(module)
        return graph_needs("toy")

    return register


def ctx_for(path: Path, tmp_path: Path, target: str, **fuse: str) -> StageContext:
    config = CompileConfig(model=str(path), out=tmp_path)
    config.extra["unpad"] = {"bucket": 8}
    for key, value in fuse.items():
        setattr(config.fuse, key, value)
    inputs, _ = io_specs(load_onnx(path))
    return StageContext(config=config, source=ModelSource(str(path), path, "onnx"), inputs=inputs, target=target,
                        out_dir=tmp_path, int_high=int_bounds_onnx(path))


def test_the_cpu_target_gets_the_defaults_and_every_need_is_a_descriptor_field() -> None:
    assert graph_needs("cpu") == graph_needs("auto") == GraphNeeds()
    backend_defaults = {f.name: f.default for f in dataclasses.fields(Backend)}
    for f in dataclasses.fields(GraphNeeds):
        if f.name != "label":  # the label is the descriptor's own
            assert f.name in backend_defaults and backend_defaults[f.name] == f.default, f.name


def test_what_the_descriptors_declare_exists() -> None:
    # A flavour name, a "module:function" that no longer resolves: caught here, not in a user's run.
    for backend in registry.all_backends():
        assert set(backend.int8_flavours) <= set(FLAVOURS), backend.name
        for ref in (backend.graph_check, backend.int8_fp16_setting):
            assert ref is None or callable(load_object(ref)), (backend.name, ref)
        if backend.toolkit:  # one fact, two records until the build stages read the descriptor's
            assert backend.build_needs_device == (not load_object(backend.toolkit).builds_without_gpu)
    for target in registry.targets():  # the TensorRT family's parser: plain ops, s8/s8, static sequence
        needs = graph_needs(target)
        assert not needs.takes_contrib_ops and needs.int8_flavours == ("qdq-s8s8",) and needs.graph_check


def test_no_contrib_ops_keeps_simplify_and_fuse_to_plain_onnx(toy: Any, conv_onnx: Path, tmp_path: Path) -> None:
    toy(takes_contrib_ops=True)
    assert FuseStage(ctx_for(conv_onnx, tmp_path, "toy", level="extended")).level() == "extended"
    assert SimplifyStage(ctx_for(conv_onnx, tmp_path, "toy")).skipped_optimizers() is None
    assert toy(takes_contrib_ops=False).label == "ToyRT"
    stage = FuseStage(ctx_for(conv_onnx, tmp_path, "toy", level="extended", transformer="on"))
    assert stage.level() == "basic" and not stage.transformer_fusions({})
    assert SimplifyStage(ctx_for(conv_onnx, tmp_path, "toy")).skipped_optimizers() == list(CONTRIB_FUSIONS)
    work = tmp_path / "w"
    work.mkdir()
    ops = op_histogram(load_onnx(stage.run(Artifact(conv_onnx, "onnx"), work).artifact.path))
    assert not any(op.startswith("com.microsoft") for op in ops) and "BatchNormalization" not in ops


@pytest.mark.parametrize("flavours, auto, qdq, refused", [
    (("qdq-s8s8",), "qdq-s8s8", "qdq-s8s8", "dynamic"),
    (("dynamic", "qdq-u8s8"), "dynamic", "qdq-u8s8", "qdq-s8s8"),
    (("dynamic",), "dynamic", None, "qdq-u8s8"),
])
def test_int8_flavours_decide_auto_and_refuse_the_rest(toy: Any, flavours: tuple[str, ...], auto: str,
                                                       qdq: str | None, refused: str) -> None:
    toy(int8_flavours=flavours)
    assert resolve_flavour("auto", "toy", is_encoder=False).name == auto
    if qdq is None:
        with pytest.raises(UsageError, match="INT8 flavour qdq does not build into ToyRT"):
            resolve_flavour("qdq", "toy", is_encoder=False)
    else:
        assert resolve_flavour("qdq", "toy", is_encoder=True).name == qdq
    with pytest.raises(UsageError, match=f"INT8 flavour {refused} does not build into ToyRT") as info:
        resolve_flavour(refused, "toy", is_encoder=True)
    assert info.value.hint.startswith(f"ToyRT takes {', '.join(flavours)} only")
    assert resolve_flavour("auto", "cpu", is_encoder=True).name == "dynamic"  # the CPU chooses per model


def test_unpad_default_off_skips_unpad_unless_asked(toy: Any, tmp_path: Path) -> None:
    model = make_masked_encoder(tmp_path / "enc.onnx")
    toy(unpad_default=True)
    assert UnpadStage(ctx_for(model, tmp_path, "toy")).skip_reason(Artifact(model, "onnx")) is None
    toy(unpad_default=False)
    reason = UnpadStage(ctx_for(model, tmp_path, "toy")).skip_reason(Artifact(model, "onnx"))
    assert reason is not None and reason.startswith("target is toy:") and "ToyRT runner" in reason
    asked = ctx_for(model, tmp_path, "toy")
    asked.config.extra["unpad"]["tensorrt"] = True
    assert UnpadStage(asked).skip_reason(Artifact(model, "onnx")) is None


def test_a_graph_check_refuses_unpads_rewrite_and_the_quantized_graphs(toy: Any, conv_onnx: Path,
                                                                   tmp_path: Path) -> None:
    model = make_masked_encoder(tmp_path / "enc.onnx")
    toy(graph_check="TOY:refuse")
    work = tmp_path / "unpad"
    work.mkdir()
    details = UnpadStage(ctx_for(model, tmp_path, "toy")).run(Artifact(model, "onnx"), work).details
    assert details["applied"] is False
    assert details["skipped"].startswith("the toy target refuses the rewritten graph: it has what ToyRT refuses")
    ctx = ctx_for(conv_onnx, tmp_path, "toy")
    ctx.config.quantize.precision = "fp16"
    work = tmp_path / "fp16"
    work.mkdir()
    with pytest.raises(StageError, match="the FP16 ONNX has what ToyRT refuses"):
        QuantizeFp16Stage(ctx).run(Artifact(conv_onnx, "onnx"), work)
    ctx = ctx_for(conv_onnx, tmp_path, "toy")
    ctx.config.quantize.precision, ctx.config.quantize.calib = "int8", make_conv_calib(tmp_path / "calib")
    work = tmp_path / "int8"
    work.mkdir()
    with pytest.raises(StageError, match="the INT8 ONNX has what ToyRT refuses"):
        QuantizeInt8Stage(ctx).run(Artifact(conv_onnx, "onnx"), work)


def test_int8_fp16_setting_puts_the_float_parts_of_int8_in_fp16(toy: Any) -> None:
    config = CompileConfig(model="m.onnx")
    assert toy().int8_fp16(config) is None
    assert not fp16_base(SimpleNamespace(target="toy", config=config), TABLE["qdq-s8s8"])
    assert toy(int8_fp16_setting="TOY:fp16").int8_fp16(config) is True
    assert fp16_base(SimpleNamespace(target="toy", config=config), TABLE["qdq-s8s8"])
    assert not fp16_base(SimpleNamespace(target="toy", config=config), TABLE["dynamic"])  # no Q/DQ to keep


def test_a_builder_without_a_sequence_axis_keeps_text_inputs_static(toy: Any) -> None:
    text = [TensorSpec("input_ids", ("batch", 16), "int64"), TensorSpec("attention_mask", ("batch", 16), "int64")]
    toy(dynamic_sequence=True)
    assert sequence_axis(text, [], object(), "toy") is not None
    toy(dynamic_sequence=False)
    assert sequence_axis(text, [], object(), "toy") is None
