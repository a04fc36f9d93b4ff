"""Parsing onnxruntime's profiler trace and naming the ONNX nodes behind its kernels."""
from __future__ import annotations

from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from optcli.backends.onnxruntime.profile import GraphIndex, parse_trace
from optcli.profiling.result import LayerTime, ProfileResult, finish


def _run(ts: int, dur: int) -> dict:
    return {"cat": "Session", "name": "model_run", "ts": ts, "dur": dur, "args": {}}


def _kernel(name: str, op: str, ts: int, dur: int) -> dict:
    return {"cat": "Node", "name": f"{name}_kernel_time", "ts": ts, "dur": dur,
            "args": {"op_name": op, "provider": "CPUExecutionProvider"}}


def test_parse_trace_leaves_out_warmup_runs() -> None:
    events = [{"cat": "Session", "name": "session_initialization", "ts": 0, "dur": 50, "args": {}},
              _run(100, 100), _kernel("conv", "Conv", 110, 80),                       # warm-up: slow, left out
              _run(300, 30), _kernel("conv", "Conv", 305, 10), _kernel("relu_nchwc", "Conv", 316, 5),
              _kernel("conv", "Conv", 322, 1) | {"name": "conv_fence_before"},       # not a kernel time
              _run(400, 20), _kernel("conv", "Conv", 402, 12), _kernel("relu_nchwc", "Conv", 415, 4)]
    kernels, runs, mean_run = parse_trace(events, warmup=1)
    assert runs == 2 and mean_run == pytest.approx(25.0)
    assert kernels["conv"] == {"op_type": "Conv", "provider": "CPUExecutionProvider", "total_us": 22.0, "calls": 2,
                               "median_us": 11.0}
    assert kernels["relu_nchwc"]["total_us"] == 9.0


def test_parse_trace_median_ignores_one_stalled_run() -> None:
    events = []
    for i in range(5):
        events += [_run(1000 * i, 100), _kernel("a", "Conv", 1000 * i + 1, 5000 if i == 3 else 10),
                   _kernel("b", "Gemm", 1000 * i + 20, 20)]
    kernels, runs, _ = parse_trace(events, warmup=0)
    assert runs == 5 and kernels["a"]["median_us"] == 10.0 and kernels["a"]["total_us"] == 5040.0
    layers = finish([LayerTime(k, v["op_type"], [k], v["total_us"] / 1000, v["calls"], median_ms=v["median_us"] / 1000)
                     for k, v in kernels.items()], runs)
    assert [x.name for x in layers] == ["b", "a"] and layers[0].share == pytest.approx(2 / 3)
    assert parse_trace(events, warmup=5) == ({}, 0, None)


def test_graph_index_names_fused_and_added_kernels(tmp_path: Path) -> None:
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv1"),
             helper.make_node("Relu", ["c"], ["relu"], name="relu1"),
             helper.make_node("MaxPool", ["relu"], ["pool"], name="pool1", kernel_shape=[2, 2])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 4, 4]),
                                           helper.make_tensor_value_info("w", TensorProto.FLOAT, [1, 1, 1, 1])],
                              [helper.make_tensor_value_info("pool", TensorProto.FLOAT, None)])
    path = tmp_path / "g.onnx"
    onnx.save(helper.make_model(graph), str(path))
    index = GraphIndex(path)
    assert index.origin("pool1", "MaxPool") == (["pool1"], None)
    assert index.origin("conv1", "FusedConv") == (["conv1"], "Conv fused into FusedConv by onnxruntime")
    # NCHWc kernels are named after the tensor they compute; Conv+Relu computes "relu".
    assert index.origin("relu_nchwc", "Conv") == (["conv1", "relu1"], "NCHWc layout (onnxruntime ALL level)")
    assert index.origin("ReorderOutput_token_3", "ReorderOutput") == ([], "layout change added by onnxruntime")
    assert index.origin("something_else", "Cast") == ([], "added by onnxruntime's optimizer")


def test_profile_result_shares_and_op_types() -> None:
    layers = finish([LayerTime("a", "Conv", ["a"], 6.0, 3), LayerTime("b", "Conv", ["b"], 3.0, 3),
                     LayerTime("c", "Gemm", ["c"], 1.0, 3)], runs=3)
    result = ProfileResult({"path": "m.onnx"}, "onnxruntime-cpu", {}, 3, layers)
    assert [x.name for x in result.top(2)] == ["a", "b"] and layers[0].share == pytest.approx(0.6)
    assert result.by_op_type()[0] == {"op_type": "Conv", "per_run_ms": 3.0, "share": 0.9, "layers": 2}
    assert layers[0].typical_ms(3) == 2.0                      # no medians given: the mean per run
    assert result.kernel_ms_per_run == pytest.approx(10 / 3)
    assert len(result.to_json(top=1)["layers"]) == 1 and result.to_json()["layers_total"] == 3
