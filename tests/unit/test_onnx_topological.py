"""Every ONNX optcli writes passes onnx.checker, which demands topological order: save_onnx sorts what
a converter left out of order (onnxruntime's float16 appends its input casts at the end)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from optcli.onnx_model import save_onnx, sort_topologically


def _unsorted() -> onnx.ModelProto:
    w = numpy_helper.from_array(np.ones((4, 3), np.float32), "W")
    nodes = [helper.make_node("Relu", ["XW"], ["Y"], name="relu"),
             helper.make_node("MatMul", ["Xc", "W"], ["XW"], name="matmul"),
             helper.make_node("Identity", ["X"], ["Xc"], name="graph_input_cast_0")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", 4])],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["N", 3])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def test_an_unsorted_graph_fails_the_checker_and_is_sorted_on_save(tmp_path: Path) -> None:
    model = _unsorted()
    with pytest.raises(onnx.checker.ValidationError, match="topologically sorted"):
        onnx.checker.check_model(model)
    save_onnx(model, tmp_path / "m.onnx")
    saved = onnx.load(str(tmp_path / "m.onnx"))
    onnx.checker.check_model(saved, full_check=True)
    assert [n.name for n in saved.graph.node] == ["graph_input_cast_0", "matmul", "relu"]


def test_a_sorted_graph_is_left_as_it_is() -> None:
    model = _unsorted()
    sort_topologically(model.graph)
    before = [n.name for n in model.graph.node]
    assert sort_topologically(model.graph) is False
    assert [n.name for n in model.graph.node] == before


def test_outer_scope_inputs_of_a_subgraph_count_as_dependencies() -> None:
    """An If branch reading a value from the enclosing graph must come after that value's producer."""
    then_g = helper.make_graph([helper.make_node("Identity", ["inner"], ["t"])], "then", [],
                               [helper.make_tensor_value_info("t", TensorProto.FLOAT, [1])])
    else_g = helper.make_graph([helper.make_node("Neg", ["inner"], ["e"])], "else", [],
                               [helper.make_tensor_value_info("e", TensorProto.FLOAT, [1])])
    nodes = [helper.make_node("If", ["cond"], ["Y"], then_branch=then_g, else_branch=else_g, name="if"),
             helper.make_node("Relu", ["X"], ["inner"], name="producer")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("X", TensorProto.FLOAT, [1]),
                                           helper.make_tensor_value_info("cond", TensorProto.BOOL, [])],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [1])])
    assert sort_topologically(graph) is True
    assert [n.name for n in graph.node] == ["producer", "if"]
