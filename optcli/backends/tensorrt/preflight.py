"""TensorRT preflight: what TensorRT's ONNX parser will refuse, found on any machine, without TensorRT.

Every rule cites where TensorRT documents it. The support matrix itself is data
(optcli.backends.tensorrt.onnx_support, transcribed from onnx/onnx-tensorrt docs/operators.md); the rules
here apply it node by node, with the element types ONNX shape inference gives each tensor (rule: what is refused;
source):

- opset: a default-domain opset below 7 or above the installed major's newest (10.x: 20; 11.x, RTX: 25);
    source: onnx-tensorrt ModelImporter (warns below 7); operators.md per release
- op: an op marked N, an op the matrix does not list, a custom domain;
    source: operators.md; onnx-tensorrt ModelImporter "No importer registered for op"
- type: an input type outside the op's "Supported Types" (this is how INT64 into a float-only op, or UINT8/INT8
    into a compute op, is caught); source: operators.md, per op
- dtype: an element type TensorRT has no DataType for (INT16, UINT32, STRING, ...);
    source: operators.md, line 7; pyFoundationalTypes.cpp DataType
- q/dq: DequantizeLinear of a non INT8/FP8/INT4 input (onnxruntime's INT32 bias), a non-zero zero point, a UINT8
    QuantizeLinear, a per-channel axis outside the input, a scale of rank > 1 without block_size;
    source: operators.md rows DequantizeLinear/QuantizeLinear; NVIDIA/TensorRT#4542
- constant: inputs documented "must be an initializer / constant" that are computed at run time;
    source: operators.md restrictions (CumSum, Pad, Reduce*, Slice, Squeeze, Unsqueeze, OneHot)
- pooling: MaxPool's Indices output, dilations other than 1, pooling that is not 1D/2D/3D, a window of 100000+
    elements; source: operators.md rows AveragePool, MaxPool, LpPool; addPoolingNd (measured)
- attribute: Resize with antialias = 1; source: operators.md row Resize
- static: EyeLike on an input with a dynamic dim; source: operators.md row EyeLike
- data-dependent: a graph output whose shape comes from input values (NonZero, NMS, a Slice/Pad/Reshape sized by a
    computed value, as the unpad rewrite does): TensorRT builds it, optcli's runner refuses it (no IOutputAllocator);
    source: optcli/backends/tensorrt/runner.py `_set_shapes`; shape_flow.py
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict, cast

from optcli.backends.tensorrt.onnx_support import (
    NEWER_OPS,
    OPS,
    QUANTIZED_TYPES,
    RTX_REFUSED,
    SOURCE,
    opset_window,
    supports_newer_ops,
)

if TYPE_CHECKING:
    from onnx import TensorProto

# ONNX TensorProto element type -> the names operators.md uses. DOUBLE is accepted: "TensorRT will
# attempt to cast DOUBLE down to FLOAT" (operators.md notes), so it is checked as FP32.
_TYPE_NAMES = {1: "FP32", 10: "FP16", 16: "BF16", 6: "INT32", 7: "INT64", 9: "BOOL", 3: "INT8", 2: "UINT8",
               11: "FP32", 17: "FP8", 22: "INT4"}
_ONNX_TYPE = {0: "UNDEFINED", 1: "FLOAT", 2: "UINT8", 3: "INT8", 4: "UINT16", 5: "INT16", 6: "INT32", 7: "INT64",
              8: "STRING", 9: "BOOL", 10: "FLOAT16", 11: "DOUBLE", 12: "UINT32", 13: "UINT64", 14: "COMPLEX64",
              15: "COMPLEX128", 16: "BFLOAT16", 17: "FLOAT8E4M3FN", 18: "FLOAT8E4M3FNUZ", 19: "FLOAT8E5M2",
              20: "FLOAT8E5M2FNUZ", 21: "UINT4", 22: "INT4", 23: "FLOAT4E2M1"}
# Inputs operators.md requires to be build-time constants: op -> (input index, what it is).
# Squeeze/Unsqueeze axes computed at run time import since 10.7 (onnx-tensorrt changelog "dynamic axes
# support for Squeeze and Unsqueeze"; TensorRT-RTX 1.7.1 parsed them here): no longer listed.
_CONSTANT_INPUTS = {"CumSum": (1, "axis"), "Pad": (3, "axes"), "Slice": (3, "axes"), "OneHot": (1, "depth"),
                    **{op: (1, "axes") for op in ("ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp",
                                                  "ReduceMax", "ReduceMean", "ReduceMin", "ReduceProd", "ReduceSum",
                                                  "ReduceSumSquare")}}
_POOLS = ("AveragePool", "MaxPool", "LpPool")
# INetworkDefinition::addPoolingNd refuses a window of this many elements or more (316x316 built, 317x317 did
# not, TensorRT-RTX 1.7.1 here): the condition is volume(windowSize) < maxKernelDimsProduct.
MAX_POOL_WINDOW = 100_000
_DEFAULT_DOMAINS = ("", "ai.onnx")
# Ops whose first input is a shape, not the "T" the matrix's type column describes (ConstantOfShape's
# column is the type of its `value`), and NonZero, whose data-dependent finding already covers it.
_NO_INPUT_TYPE_CHECK = ("ConstantOfShape", "NonZero")


class FindingJSON(TypedDict):
    """Finding.to_json(): its fields, as written into `optcli check --json` and the preflight's errors."""

    node: int | None
    node_name: str
    op: str
    rule: str
    reason: str
    source: str


@dataclass(frozen=True)
class Finding:
    """One thing TensorRT's parser would refuse: where (node index, name, op), why, and the rule's source."""

    node: int | None
    node_name: str
    op: str
    rule: str
    reason: str
    source: str

    def describe(self) -> str:
        where = ("model" if self.node is None
                 else f"node {self.node}" + (f" {self.node_name!r}" if self.node_name else ""))
        return f"{where} ({self.op or '-'}): {self.reason} [{self.rule}; {self.source}]"

    def to_json(self) -> FindingJSON:
        return cast(FindingJSON, asdict(self))  # the same fields, by construction


class _Graph:
    """Element types, shapes and constant-ness of every tensor name (after ONNX shape inference)."""

    def __init__(self, model: Any) -> None:
        import onnx

        try:
            inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False)
        except Exception:  # inference is a help, not a requirement: fall back to what the file declares
            inferred = model
        g = inferred.graph
        self.types: dict[str, int] = {}
        self.shapes: dict[str, tuple[Any, ...]] = {}
        for vi in list(g.input) + list(g.value_info) + list(g.output):
            t = vi.type.tensor_type
            if t.elem_type:
                self.types[vi.name] = t.elem_type
            if t.HasField("shape"):
                self.shapes[vi.name] = tuple(d.dim_value if d.HasField("dim_value") else None for d in t.shape.dim)
        self.initializers = {i.name: i for i in g.initializer}
        for name, init in self.initializers.items():
            self.types[name] = init.data_type
            self.shapes[name] = tuple(init.dims)
        self.constants: dict[str, TensorProto | None] = dict(self.initializers)
        for node in g.node:
            if node.op_type == "Constant" and node.domain in _DEFAULT_DOMAINS:
                value = next((a.t for a in node.attribute if a.name == "value"), None)
                self.constants[node.output[0]] = value
                if value is not None:
                    self.types[node.output[0]] = value.data_type
                    self.shapes[node.output[0]] = tuple(value.dims)
        self.used = {i for n in g.node for i in n.input} | {o.name for o in g.output}

    def value(self, name: str) -> Any:
        """The numpy value of a constant tensor, or None when it is not one (or its data is external)."""
        from onnx import numpy_helper

        tensor = self.constants.get(name)
        if tensor is None or (tensor.data_location == 1 and not tensor.raw_data):
            return None
        try:
            return numpy_helper.to_array(tensor)
        except Exception:  # external data not loaded
            return None


def check_model(model: Any, toolkit: str | None = None, version: str | None = None,
                rules: tuple[str, ...] | None = None) -> list[Finding]:
    """All findings for an in-memory ONNX ModelProto, in graph order, for the installed `toolkit`
    ("tensorrt" / "tensorrt-rtx") and `version` (None: the newest known). `rules`: only these."""
    findings: list[Finding] = []
    opset = next((o.version for o in model.opset_import if o.domain in _DEFAULT_DOMAINS), None)
    lo, hi = opset_window(toolkit, version)
    if opset is not None and not lo <= opset <= hi:
        who = f"{toolkit} {version}" if toolkit and version else "the newest TensorRT"
        findings.append(Finding(None, "", "", "opset", f"opset {opset} is outside {lo}..{hi}, what {who} imports",
                                SOURCE))
    graph = _Graph(model)
    newer = supports_newer_ops(toolkit, version)
    for index, node in enumerate(model.graph.node):
        findings.extend(_check_node(index, node, graph, newer))
        if toolkit == "tensorrt-rtx" and node.op_type in RTX_REFUSED and node.domain in _DEFAULT_DOMAINS:
            findings.append(_finding(index, node, "op", RTX_REFUSED[node.op_type],
                                     "TensorRT-RTX 1.7.1 parser, measured"))
    findings.extend(_data_dependent(model))
    findings.sort(key=lambda f: -1 if f.node is None else f.node)
    return [f for f in findings if rules is None or f.rule in rules]


def _data_dependent(model: Any) -> list[Finding]:
    """One finding per node that makes graph outputs data-dependent in shape (shape_flow.py)."""
    from optcli.backends.tensorrt.shape_flow import data_dependent_outputs

    by_node: dict[int, list[str]] = {}
    for index, _, output in data_dependent_outputs(model):
        by_node.setdefault(index, []).append(output)
    found = []
    for index, outputs in sorted(by_node.items()):
        node = model.graph.node[index]
        names = ", ".join(repr(o) for o in outputs)
        found.append(_finding(index, node, "data-dependent", f"output {names} gets its shape from input values "
                              f"(this {node.op_type} decides it): TensorRT builds that, but at run time such an output "
                              "needs an IOutputAllocator, which optcli's TensorRT runner does not have",
                              "optcli/backends/tensorrt/runner.py _set_shapes; issue 29 F5"))
    return found


def check_file(path: Path, toolkit: str | None = None, version: str | None = None,
               rules: tuple[str, ...] | None = None) -> list[Finding]:
    """Findings for an ONNX file. External weights are not read: the only values a rule needs are
    zero points, small enough to sit inside the file."""
    from optcli.onnx_model import load_onnx

    return check_model(load_onnx(path, load_weights=False), toolkit, version, rules)


def _finding(index: int, node: Any, rule: str, reason: str, source: str = SOURCE) -> Finding:
    return Finding(index, node.name, node.op_type, rule, reason, source)


def _type_name(elem: int) -> str:
    return _ONNX_TYPE.get(elem, f"type {elem}")


def _check_node(index: int, node: Any, g: _Graph, newer: bool = True) -> list[Finding]:
    if node.domain not in _DEFAULT_DOMAINS:
        return [_finding(index, node, "op", f"custom domain {node.domain!r}: TensorRT's parser has no importer for it "
                         "(it needs a TensorRT plugin registered under that op name)",
                         "onnx-tensorrt ModelImporter: No importer registered for op")]
    entry = OPS.get(node.op_type)
    if newer and node.op_type in NEWER_OPS:
        entry = (True, NEWER_OPS[node.op_type], "")
    if entry is None or not entry[0]:
        what = "not supported (N in the support matrix)" if entry else "not in TensorRT's ONNX support matrix"
        return [_finding(index, node, "op", f"{node.op_type} is {what}")]
    found: list[Finding] = []
    for name in list(node.input) + list(node.output):
        elem = g.types.get(name)
        if name and elem is not None and elem not in _TYPE_NAMES:
            found.append(_finding(index, node, "dtype", f"tensor {name!r} is {_type_name(elem)}, a type TensorRT "
                                  "does not have", f"{SOURCE}, line 7"))
    if node.op_type == "DequantizeLinear":
        found.extend(_check_dequantize(index, node, g))
    elif node.op_type == "QuantizeLinear":
        found.extend(_check_quantize(index, node, g))
    elif node.op_type not in _NO_INPUT_TYPE_CHECK:
        found.extend(_check_input_type(index, node, g, entry[1]))
    if node.op_type in _CONSTANT_INPUTS:
        at, what = _CONSTANT_INPUTS[node.op_type]
        if len(node.input) > at and node.input[at] and node.input[at] not in g.constants:
            found.append(_finding(index, node, "constant", f"its {what} input {node.input[at]!r} is computed at run "
                                  f"time; TensorRT needs it as an initializer (restriction: {entry[2]})"))
    if node.op_type in _POOLS:
        found.extend(_check_pool(index, node, g))
    if node.op_type == "Resize" and any(a.name == "antialias" and a.i for a in node.attribute):
        found.append(_finding(index, node, "attribute", "antialias = 1; TensorRT's Resize does not antialias"))
    if node.op_type == "EyeLike" and None in g.shapes.get(node.input[0], (None,)):
        found.append(_finding(index, node, "static", "its input has a dynamic dim; TensorRT needs it static"))
    return found


def _check_input_type(index: int, node: Any, g: _Graph, allowed: tuple[str, ...]) -> list[Finding]:
    if not allowed or not node.input or not node.input[0]:
        return []
    elem = g.types.get(node.input[0])
    name = _TYPE_NAMES.get(elem) if elem is not None else None
    if elem is None or name is None or name in allowed:
        return []
    return [_finding(index, node, "type", f"input {node.input[0]!r} is {_type_name(elem)}; TensorRT's "
                     f"{node.op_type} takes {', '.join(allowed)}")]


def _zero_point_findings(index: int, node: Any, g: _Graph, label: str) -> list[Finding]:
    if len(node.input) < 3 or not node.input[2]:
        return []
    zp = node.input[2]
    value = g.value(zp)
    if zp not in g.constants:
        return [_finding(index, node, "q/dq", f"{label} {zp!r} is computed at run time; TensorRT needs a constant 0")]
    if value is not None and value.size and bool((value.astype("int64") != 0).any()):
        return [_finding(index, node, "q/dq", f"{label} {zp!r} is not zero (asymmetric quantization); TensorRT "
                         "takes symmetric Q/DQ only")]
    return []


def _check_axis(index: int, node: Any, g: _Graph) -> list[Finding]:
    scale = g.shapes.get(node.input[1]) if len(node.input) > 1 else None
    blocked = any(a.name == "block_size" and a.i > 0 for a in node.attribute)
    if scale is None or len(scale) == 0 or (len(scale) == 1 and scale[0] == 1):
        return []
    if len(scale) > 1 and not blocked:
        return [_finding(index, node, "q/dq", f"scale {node.input[1]!r} has rank {len(scale)}; TensorRT takes a "
                         "scalar or per-channel (1-D) scale, or block quantization with block_size")]
    if blocked:
        return []
    rank_shape = g.shapes.get(node.input[0])
    axis = next((a.i for a in node.attribute if a.name == "axis"), 1)
    if rank_shape is None:
        return []
    rank = len(rank_shape)
    if not -rank <= axis < rank:
        return [_finding(index, node, "q/dq", f"axis {axis} is outside its rank-{rank} input")]
    dim = rank_shape[axis % rank]
    if dim is not None and scale[0] not in (None, dim):
        return [_finding(index, node, "q/dq", f"per-channel scale of {scale[0]} values for axis {axis} of size {dim}")]
    return []


def _check_dequantize(index: int, node: Any, g: _Graph) -> list[Finding]:
    found = []
    elem = g.types.get(node.input[0])
    if elem is not None and _TYPE_NAMES.get(elem) not in QUANTIZED_TYPES:
        why = " (onnxruntime's quantize_static writes Conv/Gemm biases so; NVIDIA/TensorRT#4542)" if elem == 6 else ""
        found.append(_finding(index, node, "q/dq", f"input {node.input[0]!r} is {_type_name(elem)}{why}; TensorRT's "
                              f"DequantizeLinear takes {', '.join(QUANTIZED_TYPES)} only"))
    return found + _zero_point_findings(index, node, g, "x_zero_point") + _check_axis(index, node, g)


def _check_quantize(index: int, node: Any, g: _Graph) -> list[Finding]:
    found = _check_input_type(index, node, g, OPS["QuantizeLinear"][1])
    # The zero point's type is the output type (without one ONNX means UINT8, but TensorRT's importer
    # then quantizes to INT8: only an explicit zero point says anything).
    out = g.types.get(node.input[2]) if len(node.input) > 2 and node.input[2] else None
    if out is not None and _TYPE_NAMES.get(out) not in QUANTIZED_TYPES:
        found.append(_finding(index, node, "q/dq", f"quantizes to {_type_name(out)}; TensorRT quantizes to "
                              f"{', '.join(QUANTIZED_TYPES)} only (use the qdq-s8s8 flavour)"))
    return found + _zero_point_findings(index, node, g, "y_zero_point") + _check_axis(index, node, g)


def _check_pool(index: int, node: Any, g: _Graph) -> list[Finding]:
    found = []
    dilations = next((list(a.ints) for a in node.attribute if a.name == "dilations"), [])
    if any(d != 1 for d in dilations):
        found.append(_finding(index, node, "pooling", f"dilations {dilations}: TensorRT takes none or all ones"))
    if node.op_type == "MaxPool" and len(node.output) > 1 and node.output[1] in g.used:
        found.append(_finding(index, node, "pooling", "its Indices output is used; TensorRT does not produce it"))
    shape = g.shapes.get(node.input[0])
    # 1D pools import too (the importer pools them as 2D: TensorRT-RTX 1.7.1 parsed a 1D MaxPool here).
    if shape is not None and len(shape) not in (3, 4, 5):
        found.append(_finding(index, node, "pooling", f"{len(shape) - 2}D pooling; TensorRT pools 1D, 2D or 3D only"))
    kernel = next((list(a.ints) for a in node.attribute if a.name == "kernel_shape"), [])
    if kernel and math.prod(kernel) >= MAX_POOL_WINDOW:
        found.append(_finding(index, node, "pooling", f"window {'x'.join(map(str, kernel))} ({math.prod(kernel)} "
                              f"elements); TensorRT's pooling takes fewer than {MAX_POOL_WINDOW} (HF EfficientNet's "
                              "AvgPool2d(hidden_dim) is one)", "TensorRT-RTX 1.7.1 parser, measured: addPoolingNd "
                              "volume(windowSize) < maxKernelDimsProduct"))
    return found
