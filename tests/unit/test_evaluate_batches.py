"""Evaluation runs a static-batch model in chunks of exactly its batch, padding the last one."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from optcli.calibration.dataset import SampleSet
from optcli.quantize.evaluate import run_model


def linear_onnx(path: Path, batch: int | str) -> Path:
    w = numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(4, 3) / 10, "w")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "lin",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 3])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    onnx.save(model, str(path))
    return path


def test_static_batch_gets_exact_chunks_and_the_padding_is_dropped(tmp_path: Path) -> None:
    x = np.random.default_rng(0).standard_normal((10, 4)).astype(np.float32)  # 10 = 4 + 4 + 2 (padded)
    samples = SampleSet({"x": x}, None, "test", "npz")
    [y_fixed], names = run_model(linear_onnx(tmp_path / "b4.onnx", 4), samples)
    [y_dynamic], _ = run_model(linear_onnx(tmp_path / "dyn.onnx", "batch"), samples)
    assert names == ["y"] and y_fixed.shape == (10, 3)
    np.testing.assert_allclose(y_fixed, x @ (np.arange(12, dtype=np.float32).reshape(4, 3) / 10), rtol=1e-5)
    np.testing.assert_allclose(y_fixed, y_dynamic, rtol=1e-6)
