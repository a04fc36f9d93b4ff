"""The same `compile` on models optcli's authors did not write: a transformers BERT built from a small config
with random weights, saved the way its users save it (.pt2 exported with keyword inputs, TorchScript
traced, ONNX from torch's legacy exporter)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from compile_testkit import core_stages, core_statuses, read_report, run_main

pytestmark = pytest.mark.slow

SEQ = 16


@pytest.fixture(scope="module")
def bert_files(torch_mod: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    transformers = pytest.importorskip("transformers")
    torch = torch_mod
    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                     intermediate_size=64, max_position_embeddings=64, return_dict=False)
    model = transformers.BertModel(config).eval()
    ids = torch.randint(0, 100, (2, SEQ))
    mask = torch.ones_like(ids)
    d = tmp_path_factory.mktemp("bert")
    batch = torch.export.Dim("batch", min=1, max=64)
    ep = torch.export.export(model, (), kwargs={"input_ids": ids, "attention_mask": mask},
                             dynamic_shapes={"input_ids": {0: batch}, "attention_mask": {0: batch}})
    torch.export.save(ep, str(d / "bert.pt2"))
    with pytest.warns(Warning):  # transformers' trace warnings; keep them out of the test log
        traced = torch.jit.trace(model, (ids, mask), strict=False)
    torch.jit.save(traced, str(d / "bert_ts.pt"))
    import contextlib
    import io
    import warnings

    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        onnx_program = torch.onnx.export(model, (), kwargs={"input_ids": ids, "attention_mask": mask},
                                         dynamo=True, dynamic_shapes={"input_ids": {0: batch},
                                                                      "attention_mask": {0: batch}})
        onnx_program.save(str(d / "bert.onnx"))
    return {"pt2": d / "bert.pt2", "torchscript": d / "bert_ts.pt", "onnx": d / "bert.onnx"}


INPUTS = ["--input", f"input_ids:1x{SEQ}:int64", "--input", f"attention_mask:1x{SEQ}:int64"]


@pytest.mark.parametrize("fmt", ["pt2", "torchscript", "onnx"])
def test_bert_compiles(bert_files: dict[str, Path], tmp_path: Path, fmt: str) -> None:
    out = tmp_path / "out"
    extra = INPUTS if fmt == "torchscript" else []
    code, stdout, stderr = run_main("compile", str(bert_files[fmt]), *extra, "--out", str(out), "--no-bench",
                                    "--target", "cpu")
    assert code == 0, stderr + stdout
    report = read_report(out)
    assert report["model"]["format"] == fmt
    assert core_statuses(report) == (["skipped", "ok", "ok"] if fmt == "onnx" else ["ok"] * 3)
    for s in core_stages(report)[1:]:
        assert s["accuracy"]["cosine_min"] > 0.9999 and s["accuracy"]["max_abs_err"] < 1e-4
    fuse = report["stages"][3]
    assert fuse["details"]["transformer_fusions"], "an encoder gets onnxruntime's transformer fusions"
    assert any(op.startswith("com.microsoft.") for op in fuse["graph"]["ops_after"])
    import onnxruntime as ort

    sess = ort.InferenceSession(str(out / "04-fuse" / "model.onnx"), providers=["CPUExecutionProvider"])
    ids = np.random.default_rng(0).integers(0, 100, (4, SEQ)).astype(np.int64)
    feeds = {i.name: (ids if "ids" in i.name else np.ones_like(ids)) for i in sess.get_inputs()}
    hidden = sess.run(None, feeds)[0]
    assert hidden.shape == (4, SEQ, 32)  # batch 4 although every example had batch 1 or 2
