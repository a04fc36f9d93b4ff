"""The TensorRT preflight: each rule on a tiny graph that breaks it (and a twin that does not),
onnxruntime's default Q/DQ graph flagged by node, optcli's own TensorRT graphs clean, and
`optcli check` exit codes."""
from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from compile_testkit import ort_default_int8, run_main
from optcli.backends.tensorrt.onnx_support import OPS, opset_window
from optcli.backends.tensorrt.preflight import check_file, check_model

F, I64, U8, I8 = TensorProto.FLOAT, TensorProto.INT64, TensorProto.UINT8, TensorProto.INT8


def model(nodes, inputs, outputs, inits=(), opset=17, domains=()):
    m = helper.make_model(helper.make_graph(nodes, "g", inputs, outputs, list(inits)),
                          opset_imports=[helper.make_opsetid("", opset)] + [helper.make_opsetid(d, 1) for d in domains])
    m.ir_version = 8
    return m


def vi(name, elem=F, shape=("N", 4)):
    return helper.make_tensor_value_info(name, elem, list(shape))


def rules(m) -> list[tuple[str, str]]:
    return [(f.node_name, f.rule) for f in check_model(m)]


def test_a_plain_graph_is_clean():
    w = numpy_helper.from_array(np.ones((4, 3), np.float32), "W")
    m = model([helper.make_node("MatMul", ["x", "W"], ["m"], name="mm"),
               helper.make_node("Relu", ["m"], ["y"], name="r")],
              [vi("x")], [vi("y", shape=("N", 3))], [w])
    assert check_model(m) == []


def test_custom_domain_and_unsupported_ops():
    m = model([helper.make_node("FusedConv", ["x"], ["a"], name="fused", domain="com.microsoft"),
               helper.make_node("Unique", ["a"], ["b"], name="uniq"),
               helper.make_node("NoSuchOp", ["b"], ["y"], name="what")],
              [vi("x")], [vi("y")], domains=["com.microsoft"])
    found = check_model(m)
    assert [(f.node, f.node_name, f.rule) for f in found] == [(0, "fused", "op"), (1, "uniq", "op"), (2, "what", "op")]
    assert "custom domain 'com.microsoft'" in found[0].reason and "not supported" in found[1].reason
    assert "not in TensorRT's ONNX support matrix" in found[2].reason
    assert OPS["Unique"][0] is False


def test_input_types_outside_the_ops_supported_types():
    # INT64 into MatMul (FP32/FP16/BF16 only), UINT8 into Relu: caught by the per-op type column.
    m = model([helper.make_node("MatMul", ["ids", "ids2"], ["m"], name="int_mm"),
               helper.make_node("Relu", ["u"], ["r"], name="u8_relu")],
              [vi("ids", I64), vi("ids2", I64, (4, 4)), vi("u", U8)], [vi("m", I64), vi("r", U8)])
    found = check_model(m)
    assert [(f.node_name, f.rule) for f in found] == [("int_mm", "type"), ("u8_relu", "type")]
    assert "INT64; TensorRT's MatMul takes FP32, FP16, BF16" in found[0].reason


def test_shape_inputs_are_not_held_to_the_type_column():
    # ConstantOfShape's column (FP32) is its value's type; its input is an INT64 shape.
    m = model([helper.make_node("Shape", ["x"], ["s"], name="shape"),
               helper.make_node("ConstantOfShape", ["s"], ["y"], name="zeros")], [vi("x")], [vi("y")])
    assert check_model(m) == []


def test_a_type_tensorrt_does_not_have():
    m = model([helper.make_node("Identity", ["x"], ["y"], name="id")], [vi("x", TensorProto.UINT32)],
              [vi("y", TensorProto.UINT32)])
    assert ("id", "dtype") in rules(m)


def qdq_graph(zero_point_type=I8, zp_value=0, x_type=F, bias_int32=False, axis=None, scale_len=1):
    scale = numpy_helper.from_array(np.full(scale_len, 0.1, np.float32) if scale_len > 1
                                    else np.array(0.1, np.float32), "s")
    np_zp = {I8: np.int8, U8: np.uint8}[zero_point_type]
    zp = numpy_helper.from_array(np.full(scale_len, zp_value, np_zp) if scale_len > 1
                                 else np.array(zp_value, np_zp), "zp")
    kw = {} if axis is None else {"axis": axis}
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "zp"], ["q"], name="q", **kw),
             helper.make_node("DequantizeLinear", ["q", "s", "zp"], ["y"], name="dq", **kw)]
    inits = [scale, zp]
    if bias_int32:
        inits += [numpy_helper.from_array(np.arange(4, dtype=np.int32), "b_q"),
                  numpy_helper.from_array(np.array(0.01, np.float32), "b_s")]
        nodes.append(helper.make_node("DequantizeLinear", ["b_q", "b_s"], ["b"], name="bias_dq"))
        nodes.append(helper.make_node("Add", ["y", "b"], ["z"], name="add"))
    return model(nodes, [vi("x", x_type)], [vi("z" if bias_int32 else "y")], inits)


def test_qdq_rules():
    assert check_model(qdq_graph()) == []
    int32 = check_model(qdq_graph(bias_int32=True))
    assert [(f.node_name, f.rule) for f in int32] == [("bias_dq", "q/dq")]
    assert "INT32" in int32[0].reason and "NVIDIA/TensorRT#4542" in int32[0].reason
    u8 = rules(qdq_graph(zero_point_type=U8, zp_value=128))
    assert ("q", "q/dq") in u8 and ("dq", "q/dq") in u8           # UINT8 output, non-zero zero point
    assert [r for r in rules(qdq_graph(zp_value=3))] == [("q", "q/dq"), ("dq", "q/dq")]
    assert rules(qdq_graph(axis=1, scale_len=4)) == []            # per-channel along a size-4 axis
    assert ("q", "q/dq") in rules(qdq_graph(axis=1, scale_len=3))  # 3 scales for 4 channels


def test_inputs_that_must_be_constants():
    axis = numpy_helper.from_array(np.array(1, np.int64), "axis")
    ok = model([helper.make_node("CumSum", ["x", "axis"], ["y"], name="c")], [vi("x")], [vi("y")], [axis])
    assert check_model(ok) == []
    computed = model([helper.make_node("Shape", ["x"], ["s"], name="shape"),
                      helper.make_node("Slice", ["s", "st", "en"], ["a"], name="slice_axis"),
                      helper.make_node("Squeeze", ["a"], ["a0"], name="scalar"),
                      helper.make_node("CumSum", ["x", "a0"], ["y"], name="c")],
                     [vi("x")], [vi("y")],
                     [numpy_helper.from_array(np.array([1], np.int64), "st"),
                      numpy_helper.from_array(np.array([2], np.int64), "en")])
    assert ("c", "constant") in rules(computed)


def test_pooling_rules():
    x = vi("x", shape=("N", 3, 8, 8))
    assert rules(model([helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2], name="p")], [x],
                       [vi("y", shape=("N", 3, 7, 7))])) == []
    indices = model([helper.make_node("MaxPool", ["x"], ["y", "i"], kernel_shape=[2, 2], name="p"),
                     helper.make_node("Cast", ["i"], ["c"], to=F, name="c")], [x],
                    [vi("y", shape=("N", 3, 7, 7)), vi("c", shape=("N", 3, 7, 7))])
    assert ("p", "pooling") in rules(indices)
    dilated = model([helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2], dilations=[2, 2], name="p")], [x],
                    [vi("y", shape=("N", 3, 6, 6))])
    assert ("p", "pooling") in rules(dilated)


def test_opset_range_and_data_dependent_shapes():
    lo, hi = opset_window()
    m = model([helper.make_node("NonZero", ["x"], ["y"], name="nz")], [vi("x")], [vi("y", I64, (2, "K"))], opset=hi + 1)
    found = check_model(m)
    assert [(f.node, f.rule) for f in found] == [(None, "opset"), (0, "data-dependent")]
    assert found[0].describe().startswith(f"model (-): opset {hi + 1} is outside")


def test_outputs_shaped_by_input_values_are_data_dependent_and_masks_used_as_values_are_not():
    # Issue 29, F5: the unpad rewrite slices by a length computed from the mask's values; its outputs
    # have shapes only the data decides. A mask that only scales scores (BERT) and a Reshape whose shape
    # comes from Shape (shapes, not values) are not data-dependent.
    ax = numpy_helper.from_array(np.array([1], np.int64), "ax")
    zero = numpy_helper.from_array(np.array([0], np.int64), "zero")
    mask = vi("mask", I64, ("N", "S"))
    sized = model([helper.make_node("ReduceSum", ["mask", "ax"], ["len"], keepdims=0, name="len"),
                   helper.make_node("ReduceMax", ["len"], ["extent"], keepdims=1, name="extent"),
                   helper.make_node("Slice", ["x", "zero", "extent", "ax"], ["s"], name="cut"),
                   helper.make_node("Relu", ["s"], ["y"], name="relu")],
                  [vi("x", shape=("N", "S")), mask], [vi("y", shape=("N", "L"))], [ax, zero])
    assert rules(sized) == [("cut", "data-dependent")]
    assert "output 'y' gets its shape from input values" in check_model(sized)[0].reason
    masked = model([helper.make_node("Cast", ["mask"], ["mf"], to=F, name="cast"),
                    helper.make_node("Mul", ["x", "mf"], ["xm"], name="mul"),
                    helper.make_node("Shape", ["xm"], ["shape"], name="shape"),
                    helper.make_node("Reshape", ["xm", "shape"], ["y"], name="reshape")],
                   [vi("x", shape=("N", "S")), mask], [vi("y", shape=("N", "S"))])
    assert rules(masked) == []


def test_onnxruntime_default_qdq_is_flagged_by_node_and_optcli_tensorrt_flavour_is_clean(tmp_path):

    from optcli.calibration.dataset import SampleSet
    from optcli.quantize.calibrate import compute_ranges
    from optcli.quantize.flavour import TABLE
    from optcli.quantize.int8 import quantize

    rng = np.random.default_rng(0)
    nodes, inits, x = [], [], "x"
    for i in range(5):
        c_in = 3 if i == 0 else 8
        inits += [numpy_helper.from_array((rng.standard_normal((8, c_in, 3, 3)) * 0.2).astype(np.float32), f"W{i}"),
                  numpy_helper.from_array((rng.standard_normal(8) * 0.1).astype(np.float32), f"B{i}")]
        nodes += [helper.make_node("Conv", [x, f"W{i}", f"B{i}"], [f"c{i}"], pads=[1, 1, 1, 1], name=f"conv{i}"),
                  helper.make_node("Relu", [f"c{i}"], [f"r{i}"], name=f"relu{i}")]
        x = f"r{i}"
    inits += [numpy_helper.from_array((rng.standard_normal((4, 8)) * 0.2).astype(np.float32), "Wf"),
              numpy_helper.from_array(np.zeros(4, np.float32), "Bf")]
    nodes += [helper.make_node("GlobalAveragePool", [x], ["p"], name="gap"),
              helper.make_node("Flatten", ["p"], ["f"], name="flat"),
              helper.make_node("Gemm", ["f", "Wf", "Bf"], ["y"], transB=1, name="fc")]
    fp32 = tmp_path / "cnn.onnx"
    onnx.save(model(nodes, [vi("x", shape=("N", 3, 16, 16))], [vi("y", shape=("N", 4))], inits), str(fp32))
    default = ort_default_int8(fp32, tmp_path / "ort-default.onnx", (1, 3, 16, 16))
    found = check_file(default)
    assert sorted(f.node_name for f in found) == sorted([f"B{i}_DequantizeLinear" for i in range(5)] +
                                                        ["Bf_DequantizeLinear"])
    assert {f.op for f in found} == {"DequantizeLinear"} and all("INT32" in f.reason for f in found)

    samples = SampleSet({"x": rng.standard_normal((8, 3, 16, 16)).astype(np.float32)}, None, "random", "random")
    ranges, _ = compute_ranges(fp32, "sha", samples, "minmax", True, TABLE["qdq-s8s8"].op_types, tmp_path / "r")
    ours = tmp_path / "optcli-s8s8.onnx"
    quantize(fp32, ours, TABLE["qdq-s8s8"], ranges, "minmax", [])
    assert check_file(ours) == []


# -- the command ---------------------------------------------------------------------------------------
def test_check_command_exit_codes_and_output_with_the_matrix(tmp_path):
    clean = tmp_path / "clean.onnx"
    onnx.save(qdq_graph(), str(clean))
    dirty = tmp_path / "dirty.onnx"
    onnx.save(qdq_graph(bias_int32=True), str(dirty))
    code, out, _ = run_main("check", str(clean), "--target", "tensorrt", "--matrix")
    assert code == 0 and "no findings for TensorRT" in out and "oracle: documented support matrix" in out
    code, out, _ = run_main("check", str(dirty), "--matrix")
    assert code == 1
    assert out.splitlines()[0].startswith("node 2 'bias_dq' (DequantizeLinear): input 'b_q' is INT32")
    assert "1 finding(s) in 1 node(s)" in out
    code, out, _ = run_main("check", str(dirty), "--json", "--matrix")
    data = json.loads(out)
    assert code == 1 and data["findings"][0]["node_name"] == "bias_dq" and data["findings"][0]["rule"] == "q/dq"
    assert data["oracle_kind"] == "matrix"


@pytest.mark.parametrize("make", [lambda p: p.with_suffix(".txt").write_text("x") or p.with_suffix(".txt"),
                                  lambda p: p,
                                  lambda p: p.write_bytes(b"not onnx") or p])
def test_check_command_bad_input_is_exit_2(tmp_path, make):
    path = make(tmp_path / "m.onnx")
    code, _, err = run_main("check", str(path))
    assert code == 2 and err.startswith("error: ") and "hint: " in err and "Traceback" not in err


def test_a_pooling_window_of_100000_elements_or_more():
    # HF EfficientNet pools with AvgPool2d(hidden_dim): a 320x320 window here, which TensorRT's addPoolingNd
    # refuses (the zoo sweep through TensorRT-RTX); the matrix said nothing (issue 29's false pass).
    x = vi("x", shape=("N", 3, 8, 8))
    for k, expected in ((316, []), (317, [("pool", "pooling")])):
        m = model([helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[k, k], strides=[k, k], ceil_mode=1,
                                    name="pool")], [x], [vi("y", shape=("N", 3, 1, 1))])
        assert rules(m) == expected


def test_a_findings_json_has_exactly_its_declared_keys() -> None:
    import dataclasses

    from optcli.backends.tensorrt.preflight import Finding, FindingJSON

    finding = Finding(3, "n", "Op", "rule", "why", "src")
    assert list(finding.to_json()) == [f.name for f in dataclasses.fields(Finding)] == list(FindingJSON.__annotations__)
    assert finding.to_json()["node"] == 3 and finding.to_json()["source"] == "src"
