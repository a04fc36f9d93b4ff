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


def sliced_to_batch_length_onnx(path: Path) -> Path:
    """What the unpad rewrite makes of a padded model: the batch is cut to its longest row (L) inside;
    `inner` is (batch, L), the output (batch,) does not depend on L."""
    starts = numpy_helper.from_array(np.array([0], np.int64), "starts")
    axes = numpy_helper.from_array(np.array([1], np.int64), "axes")
    nodes = [helper.make_node("ReduceSum", ["attention_mask", "axes"], ["lens"], keepdims=0),
             helper.make_node("ReduceMax", ["lens"], ["L"], keepdims=1),
             helper.make_node("Slice", ["x", "starts", "L", "axes"], ["inner"]),
             helper.make_node("ReduceSum", ["inner", "axes"], ["y"], keepdims=0)]
    graph = helper.make_graph(nodes, "unpadded", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 16]),
                              helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["b", 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b"])], [starts, axes])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    onnx.save(model, str(path))
    return path


def test_inner_tensors_of_an_unpadded_graph_join_across_length_batches(tmp_path: Path) -> None:
    # Padded text runs in length-sorted batches of 8: an inner tensor that follows each batch's computed
    # length had a different shape per batch, and the INT8 fallback's probe of inner tensors crashed
    # (ValueError in concatenate) on the pretrained MiniLM with --search thorough.
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 17, 20)
    mask = (np.arange(16)[None, :] < lengths[:, None]).astype(np.int64)
    x = (rng.standard_normal((20, 16)) * mask).astype(np.float32)
    [y, inner], names = run_model(sliced_to_batch_length_onnx(tmp_path / "u.onnx"),
                                  SampleSet({"x": x, "attention_mask": mask}, None, "test", "npz"),
                                  extra_outputs=["inner"])
    assert names == ["y", "inner"] and inner.shape == (20, lengths.max())
    np.testing.assert_allclose(y, x.sum(1), rtol=1e-5)   # in sample order
    for row, n in enumerate(lengths):
        np.testing.assert_array_equal(inner[row, :n], x[row, :n])
        assert not inner[row, n:].any()  # beyond the row: its batch's padding or the zero fill


def test_inner_tensors_are_exposed_with_their_own_type(tmp_path: Path) -> None:
    """The INT8 fallback exposes inner tensors to rank the units; they were declared float, so an INT8
    graph with an FP16 base (TensorRT's --int8, issue 29 F6) did not load: "Type (tensor(float)) of output
    arg ... does not match expected type (tensor(float16))" (MobileNetV2 in the zoo sweep)."""
    import onnx
    from onnx import TensorProto, helper

    from optcli.calibration.dataset import SampleSet
    from optcli.quantize.evaluate import run_model

    nodes = [helper.make_node("Cast", ["x"], ["h"], to=TensorProto.FLOAT16),
             helper.make_node("Relu", ["h"], ["r"]), helper.make_node("Cast", ["r"], ["y"], to=TensorProto.FLOAT)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])])
    path = tmp_path / "fp16-inside.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    samples = SampleSet({"x": np.array([[-1, 2, -3, 4]], np.float32)}, None, "test", "test")
    outs, names = run_model(path, samples, extra_outputs=["r"])
    assert names == ["y", "r"] and outs[1].dtype == np.float16 and outs[1].tolist() == [[0, 2, 0, 4]]
