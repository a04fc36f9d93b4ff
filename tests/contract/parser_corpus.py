"""Small ONNX graphs, each on one side of a line TensorRT's ONNX parser draws (and twins that are not):
the corpus the fake-vs-real test runs both parsers on. Built inline with onnx.helper; each builder
returns a ModelProto. Names say what the graph does, not what either parser answers: the test asks."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from onnx import TensorProto, helper, numpy_helper

F, F16, I64, I32, U8, I8, BOOL = (TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.INT64, TensorProto.INT32,
                                  TensorProto.UINT8, TensorProto.INT8, TensorProto.BOOL)


def model(nodes: list[Any], inputs: list[Any], outputs: list[Any], inits: tuple = (), opset: int = 17,
          domains: tuple = ()) -> Any:
    m = helper.make_model(helper.make_graph(nodes, "g", inputs, outputs, list(inits)),
                          opset_imports=[helper.make_opsetid("", opset)] + [helper.make_opsetid(d, 1) for d in domains])
    m.ir_version = 8 if opset <= 18 else 10
    return m


def vi(name: str, elem: int = F, shape: tuple = ("N", 4)) -> Any:
    return helper.make_tensor_value_info(name, elem, list(shape))


def const(name: str, value: Any) -> Any:
    return numpy_helper.from_array(np.asarray(value), name)


def _qdq(zp_dtype: Any = np.int8, zp: int = 0, axis: int | None = None, scales: int = 1, bias_int32: bool = False,
         x_type: int = F) -> Any:
    s = const("s", np.full(scales, 0.1, np.float32) if scales > 1 else np.float32(0.1))
    z = const("zp", np.full(scales, zp, zp_dtype) if scales > 1 else zp_dtype(zp))
    kw = {} if axis is None else {"axis": axis}
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "zp"], ["q"], name="q", **kw),
             helper.make_node("DequantizeLinear", ["q", "s", "zp"], ["y"], name="dq", **kw)]
    inits = [s, z]
    out = "y"
    if bias_int32:
        inits += [const("b_q", np.arange(4, dtype=np.int32)), const("b_s", np.float32(0.01))]
        nodes += [helper.make_node("DequantizeLinear", ["b_q", "b_s"], ["b"], name="bias_dq"),
                  helper.make_node("Add", ["y", "b"], ["z"], name="add")]
        out = "z"
    return model(nodes, [vi("x", x_type)], [vi(out, x_type)], inits)


def _pool(op: str, shape: tuple, out: tuple, **attrs: Any) -> Any:
    return model([helper.make_node(op, ["x"], ["y"], name="pool", **attrs)], [vi("x", shape=shape)],
                 [vi("y", shape=out)])


def _matmul(elem: int) -> Any:
    w = const("w", np.ones((4, 3), helper.tensor_dtype_to_np_dtype(elem)))
    return model([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], [vi("x", elem)], [vi("y", elem, ("N", 3))],
                 [w])


def _unsqueeze_computed_axes() -> Any:
    return model([helper.make_node("Shape", ["x"], ["s"], name="shape"),
                  helper.make_node("Slice", ["s", "st", "en"], ["a"], name="slice_axes"),
                  helper.make_node("Sub", ["a", "a"], ["a0"], name="zero_axes"),
                  helper.make_node("Unsqueeze", ["x", "a0"], ["y"], name="u")],
                 [vi("x")], [vi("y", shape=("N", 1, 4))], [const("st", np.array([0], np.int64)),
                                                          const("en", np.array([1], np.int64))])


def _resize(mode: str, **attrs: Any) -> Any:
    scales = const("scales", np.array([1, 1, 2, 2], np.float32))
    return model([helper.make_node("Resize", ["x", "", "scales"], ["y"], name="resize", mode=mode, **attrs)],
                 [vi("x", shape=("N", 3, 4, 4))], [vi("y", shape=("N", 3, 8, 8))], [scales])


def _custom_domain() -> Any:
    return model([helper.make_node("FusedConv", ["x"], ["y"], name="fused", domain="com.microsoft")],
                 [vi("x")], [vi("y")], domains=("com.microsoft",))


def _einsum(eq: str, shapes: tuple, out: tuple) -> Any:
    ins = [vi(f"x{i}", shape=s) for i, s in enumerate(shapes)]
    return model([helper.make_node("Einsum", [f"x{i}" for i in range(len(shapes))], ["y"], equation=eq, name="e")],
                 ins, [vi("y", shape=out)])


def _topk_computed_k() -> Any:
    return model([helper.make_node("Shape", ["x"], ["s"], name="shape"),
                  helper.make_node("Slice", ["s", "one", "two"], ["k"], name="k"),
                  helper.make_node("TopK", ["x", "k"], ["v", "i"], name="topk", axis=-1)],
                 [vi("x", shape=(2, 4))], [vi("v", shape=(2, "K")), vi("i", I64, (2, "K"))],
                 [const("one", np.array([1], np.int64)), const("two", np.array([2], np.int64))])


def _conv_dynamic_weights() -> Any:
    return model([helper.make_node("Conv", ["x", "w"], ["y"], name="conv")],
                 [vi("x", shape=("N", 3, 8, 8)), vi("w", shape=(4, 3, 3, 3))], [vi("y", shape=("N", 4, 6, 6))])


def _cast_to(elem: int) -> Any:
    return model([helper.make_node("Cast", ["x"], ["y"], to=elem, name="cast")], [vi("x")], [vi("y", elem)])


def _plain() -> Any:
    return model([helper.make_node("MatMul", ["x", "w"], ["m"], name="mm"),
                  helper.make_node("Relu", ["m"], ["y"], name="r")],
                 [vi("x")], [vi("y", shape=("N", 3))], [const("w", np.ones((4, 3), np.float32))])


def _newer(op: str, opset: int, inputs: list[Any], inits: list[Any], out: Any, **attrs: Any) -> Any:
    return model([helper.make_node(op, [i.name for i in inputs] + [t.name for t in inits], [out.name], name="n",
                                   **attrs)], inputs, [out], inits, opset=opset)


# name -> builder. Kept small: each graph is parsed by both parsers in the default test run.
CORPUS: dict[str, Callable[[], Any]] = {
    "plain_matmul_relu": _plain,
    "custom_domain_op": _custom_domain,
    "unique_op": lambda: model([helper.make_node("Unique", ["x"], ["y"], name="uniq")], [vi("x")],
                               [vi("y", shape=("K",))]),
    "matmul_int64": lambda: _matmul(I64),
    "matmul_int32": lambda: _matmul(I32),
    "relu_uint8": lambda: model([helper.make_node("Relu", ["x"], ["y"], name="r")], [vi("x", U8)], [vi("y", U8)]),
    "identity_uint32": lambda: model([helper.make_node("Identity", ["x"], ["y"], name="id")],
                                     [vi("x", TensorProto.UINT32)], [vi("y", TensorProto.UINT32)]),
    "cast_to_int16": lambda: _cast_to(TensorProto.INT16),
    "cast_to_double": lambda: _cast_to(TensorProto.DOUBLE),
    "qdq_s8_symmetric": _qdq,
    "qdq_int32_bias": lambda: _qdq(bias_int32=True),
    "qdq_u8_zero_point_128": lambda: _qdq(np.uint8, 128),
    "qdq_s8_zero_point_3": lambda: _qdq(np.int8, 3),
    "qdq_per_channel_axis_ok": lambda: _qdq(axis=1, scales=4),
    "qdq_per_channel_wrong_count": lambda: _qdq(axis=1, scales=3),
    "qdq_fp16_input": lambda: model(
        [helper.make_node("QuantizeLinear", ["x", "s", "zp"], ["q"], name="q"),
         helper.make_node("DequantizeLinear", ["q", "s", "zp"], ["y"], name="dq")],
        [vi("x", F16)], [vi("y", F16)], [const("s", np.float16(0.1)), const("zp", np.int8(0))], opset=19),
    "unsqueeze_computed_axes": _unsqueeze_computed_axes,
    "topk_computed_k": _topk_computed_k,
    "maxpool_2d": lambda: _pool("MaxPool", ("N", 3, 8, 8), ("N", 3, 7, 7), kernel_shape=[2, 2]),
    "maxpool_dilated": lambda: _pool("MaxPool", ("N", 3, 8, 8), ("N", 3, 6, 6), kernel_shape=[2, 2], dilations=[2, 2]),
    "maxpool_1d": lambda: _pool("MaxPool", ("N", 3, 8), ("N", 3, 7), kernel_shape=[2]),
    "maxpool_indices_used": lambda: model(
        [helper.make_node("MaxPool", ["x"], ["y", "i"], kernel_shape=[2, 2], name="pool"),
         helper.make_node("Cast", ["i"], ["c"], to=F, name="c")], [vi("x", shape=("N", 3, 8, 8))],
        [vi("y", shape=("N", 3, 7, 7)), vi("c", shape=("N", 3, 7, 7))]),
    "averagepool_64x64": lambda: _pool("AveragePool", ("N", 3, 64, 64), ("N", 3, 1, 1), kernel_shape=[64, 64]),
    # HF EfficientNet's AvgPool2d(hidden_dim, ceil_mode=True) over a small map: the zoo's refused family.
    "averagepool_320x320_ceil": lambda: _pool("AveragePool", ("N", 3, 8, 8), ("N", 3, 1, 1), kernel_shape=[320, 320],
                                              strides=[320, 320], ceil_mode=1),
    "averagepool_3x3": lambda: _pool("AveragePool", ("N", 3, 8, 8), ("N", 3, 6, 6), kernel_shape=[3, 3]),
    "lppool_2d": lambda: _pool("LpPool", ("N", 3, 8, 8), ("N", 3, 7, 7), kernel_shape=[2, 2]),
    "eyelike_dynamic": lambda: model([helper.make_node("EyeLike", ["x"], ["y"], name="eye")],
                                     [vi("x", shape=("N", "M"))], [vi("y", shape=("N", "M"))]),
    "nonzero": lambda: model([helper.make_node("NonZero", ["x"], ["y"], name="nz")], [vi("x")],
                             [vi("y", I64, (2, "K"))]),
    "resize_linear": lambda: _resize("linear"),
    "resize_cubic": lambda: _resize("cubic"),
    "resize_antialias": lambda: _resize("linear", antialias=1),
    "einsum_matmul": lambda: _einsum("ij,jk->ik", ((2, 3), (3, 4)), (2, 4)),
    "einsum_ellipsis": lambda: _einsum("...ij,...jk->...ik", ((2, 2, 3), (2, 3, 4)), (2, 2, 4)),
    "conv_weights_as_input": _conv_dynamic_weights,
    "rmsnormalization_opset23": lambda: _newer("RMSNormalization", 23, [vi("x", shape=("N", 8))],
                                               [const("scale", np.ones(8, np.float32))], vi("y", shape=("N", 8))),
    "swish_opset24": lambda: _newer("Swish", 24, [vi("x")], [], vi("y")),
    "cumsum_int64": lambda: model([helper.make_node("CumSum", ["x", "axis"], ["y"], name="positions")],
                                  [vi("x", I64, ("N", 8))], [vi("y", I64, ("N", 8))], [const("axis", np.int64(1))]),
    "relu_opset25": lambda: model([helper.make_node("Relu", ["x"], ["y"], name="r")], [vi("x")], [vi("y")], opset=25),
}
