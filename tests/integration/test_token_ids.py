"""Random token ids stay inside the embedding table they index, for a user's ONNX as for PyTorch."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from optcli import api
from optcli.onnx_model import int_bounds_onnx


def small_vocab_onnx(path: Path, vocab: int = 10) -> Path:
    """ids [batch, 6] int64 -> Gather from a vocab x 8 table -> ReduceMean over the tokens."""
    table = numpy_helper.from_array(np.random.default_rng(0).standard_normal((vocab, 8)).astype(np.float32), "emb")
    axes = numpy_helper.from_array(np.array([1], dtype=np.int64), "axes")
    graph = helper.make_graph(
        [helper.make_node("Gather", ["emb", "ids"], ["h"], name="embed"),
         helper.make_node("ReduceMean", ["h", "axes"], ["y"], name="pool", keepdims=0)],
        "tokens", [helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 8])], [table, axes])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def test_gather_bounds_come_from_the_table(tmp_path: Path) -> None:
    assert int_bounds_onnx(small_vocab_onnx(tmp_path / "m.onnx", vocab=10)) == {"ids": 10}


def test_compile_an_onnx_with_a_vocab_smaller_than_the_default_id_range(tmp_path: Path) -> None:
    # Ids drawn from [0, 100) would index past a 10-row table: ONNX Runtime refuses them, and the
    # reference run, the accuracy check and every latency measurement would fail.
    model = small_vocab_onnx(tmp_path / "m.onnx", vocab=10)
    report = api.compile(model, out=tmp_path / "o", target="cpu", check=False, cpu={"backend": "onnxruntime"})
    assert report.status == "ok", report.error
    assert report.final["latency_ms"]["p50"] > 0
