"""The unpad graph rewrite: an encoder computes only up to the last valid position of the batch.

    L = min(S, round_up(max over the batch of the mask's last non-zero position + 1, bucket))
        (a row of padding only counts as S: see _valid_length)
    every sequence-shaped input[:, :L] -> the encoder body -> outputs padded back to S with 0

S is the padded length the model takes (the mask's dim 1). L is the mask's *extent*, not the sum of
its ones: with right padding the two agree; with any other layout the extent is just longer, so the
rewrite is never wrong about which positions hold tokens (it only saves nothing on left padding).

A graph exported at a fixed S carries S in its constants: reshape targets (`[-1, 128, 12, 64]`),
folded position ids or embeddings (`[1, 128, 768]`), folded mask helpers (`[1, 1, 128, 1]`), the
token_type_ids buffer expanded to a shape assembled from constants (`Expand(buffer[:, :128],
Where(Concat(batch, [128]) == -1, 1, ...))`), the stride of a flattened mask's index (`b * 128 + j`).
`despecialise` makes those follow L: an integer constant holding S gets S replaced by L where it
reaches a length slot (the shape of Reshape, Expand, ConstantOfShape, Tile, Pad, Split; Slice bounds,
Range bounds, Gather indices) through integer shape arithmetic (Concat, Where, Equal, Mul, Add,
Gather, Unsqueeze, Cast, ...: _SHAPE_ARITH); a data constant (not a weight, not a table a Gather
looks rows up in, unless its dim 0 is a broadcast 1) with axes of size S is sliced to L on them.
That is a value-based guess, so nothing here is trusted: optcli/unpad/verify.py runs the rewritten
graph against the original on data and the stage refuses the rewrite when any output differs on a
valid position (a hidden size equal to S, say, makes the guess wrong and the proof fail).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NotRequired, TypedDict

import numpy as np

PREFIX = "optcli_unpad/"
# Input slots that hold weights, never sequence-shaped data: op -> input indices.
_WEIGHT_SLOTS = {"MatMul": (1,), "Gemm": (1, 2), "Conv": (1, 2), "ConvTranspose": (1, 2),
                 "LayerNormalization": (1, 2), "BatchNormalization": (1, 2, 3, 4), "InstanceNormalization": (1, 2),
                 "SkipLayerNormalization": (2, 3, 4)}
# Input slots that take a shape, a length or a position: op -> input indices.
_SHAPE_SLOTS = {"Reshape": (1,), "Expand": (1,), "ConstantOfShape": (0,), "Slice": (1, 2), "Range": (0, 1, 2),
                "Tile": (1,), "Pad": (1,), "Split": (1,), "Resize": (3,), "OneHot": (1,), "TopK": (1,),
                "Gather": (1,), "GatherElements": (1,), "GatherND": (1,), "ScatterElements": (1,)}
# Integer arithmetic a shape or an index is computed with: a constant that reaches a slot above through
# these ops (any input) is a length too.
_SHAPE_ARITH = {"Concat", "Where", "Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "Not", "And",
                "Or", "Unsqueeze", "Squeeze", "Cast", "Gather", "Mul", "Add", "Sub", "Div", "Mod", "Neg", "Abs",
                "Min", "Max", "Slice", "Reshape", "Identity", "Expand", "Tile", "ReduceProd", "ReduceSum",
                "ReduceMax", "ReduceMin", "Flatten", "Transpose", "Range", "CumSum", "ConstantOfShape"}
_INT_TYPES = (np.int32, np.int64)


class PlanJSON(TypedDict):
    mask_input: str
    sequence_inputs: list[str]
    padded_length: int | str
    bucket: int
    sequence_outputs: dict[str, list[int]]


class Changes(TypedDict):
    """What rewrite() changed: the constants it made follow the valid length, and (a graph exported
    at a fixed S) the longest length the result takes."""

    constants_changed: list[str]
    takes_lengths_up_to: NotRequired[int | str]


@dataclass
class Plan:
    """What the rewrite acts on: the mask input, the inputs sliced with it, and the padded length."""

    mask: str
    sequence_inputs: list[str]
    length: int | str                   # S: an int when the graph fixes it, else the dim's symbol
    bucket: int
    seq_axes: dict[str, list[int]] = field(default_factory=dict)   # output -> axes padded back

    def to_json(self) -> PlanJSON:
        return {"mask_input": self.mask, "sequence_inputs": self.sequence_inputs, "padded_length": self.length,
                "bucket": self.bucket, "sequence_outputs": self.seq_axes}


def _dims(value_info: Any) -> list[int | str]:
    return [d.dim_param if d.HasField("dim_param") else (d.dim_value if d.HasField("dim_value") else "?")
            for d in value_info.type.tensor_type.shape.dim]


def find_plan(model: Any, bucket: int) -> Plan | str:
    """The Plan for `model`, or why it does not apply (no mask input, nothing to save)."""
    inputs = [i for i in model.graph.input if i.name not in {t.name for t in model.graph.initializer}]
    masks = [i for i in inputs if "mask" in i.name.lower() and len(_dims(i)) == 2]
    if not masks:
        return "no attention-mask input (an input named *mask* of shape batch x sequence)"
    mask = next((m for m in masks if m.name == "attention_mask"), masks[0])
    length = _dims(mask)[1]
    if length == "?" or length == 0:
        return f"the mask input {mask.name!r} has no sequence length (dim 1 unknown)"
    if isinstance(length, int) and length <= bucket:
        return f"the padded length {length} is within one bucket ({bucket}): nothing to skip"
    seq = [i.name for i in inputs if len(_dims(i)) >= 2 and _dims(i)[1] == length]
    return Plan(mask.name, seq, length, bucket)


class _Builder:
    """Appends nodes and initializers with unique names under PREFIX."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self.nodes: list[Any] = []
        self.count = 0

    def name(self, hint: str) -> str:
        self.count += 1
        return f"{PREFIX}{hint}_{self.count}"

    def const(self, value: np.ndarray, hint: str = "c") -> str:
        from onnx import numpy_helper

        name = self.name(hint)
        self.model.graph.initializer.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def node(self, op: str, inputs: list[str], hint: str | None = None, **attrs: Any) -> str:
        from onnx import helper

        out = self.name(hint or op.lower())
        self.nodes.append(helper.make_node(op, inputs, [out], name=out, **attrs))
        return out


def _valid_length(b: _Builder, plan: Plan, runtime: bool) -> tuple[str, str]:
    """(L as a 1-D int64 [1], S as an int64 scalar): the bucketed extent of the mask over the batch. S is
    the mask's length as given (`runtime`, or a symbolic length), else the fixed length as a constant."""
    from onnx import TensorProto

    def i64(value: int) -> str:
        return b.const(np.array(value, np.int64))

    mask = b.node("Cast", [plan.mask], "mask_i64", to=TensorProto.INT64)
    if isinstance(plan.length, int) and not runtime:
        full = b.const(np.array(plan.length, np.int64), "padded_length")
        positions = b.const(np.arange(1, plan.length + 1, dtype=np.int64), "positions")
    else:  # Shape's start/end attributes need opset 15: Gather works at every opset
        full = b.node("Gather", [b.node("Shape", [plan.mask], "mask_shape"), i64(1)], "padded_length", axis=0)
        positions = b.node("Range", [i64(1), b.node("Add", [full, i64(1)]), i64(1)], "positions")
    valid = b.node("Cast", [b.node("Greater", [mask, i64(0)])], to=TensorProto.INT64)
    rows = _reduce_max(b, b.node("Mul", [valid, positions]), axis=1)   # each row's extent, 0 for no token
    # A row of padding only attends to all S positions equally in the original (every key is masked
    # alike); at a shorter length it would attend to fewer and its outputs differ (5.8e-3 on a BERT's
    # pooled output). Such a row counts as S long, so its batch computes the full length, exactly.
    rows = b.node("Where", [b.node("Equal", [rows, i64(0)]), full, rows])
    extent = _reduce_max(b, rows, axis=None)
    extent = b.node("Max", [extent, i64(1)])
    k = b.const(np.array(plan.bucket, np.int64), "bucket")
    rounded = b.node("Mul", [b.node("Div", [b.node("Add", [extent, i64(plan.bucket - 1)]), k]), k])
    length = b.node("Min", [rounded, full], "valid_length")
    return b.node("Reshape", [length, b.const(np.array([1], np.int64))], "valid_length_1d"), full


def _reduce_max(b: _Builder, x: str, axis: int | None) -> str:
    """ReduceMax over `axis` (None: all), keepdims 0, in the form the graph's opset takes (axes became an
    input in opset 18)."""
    opset = next((o.version for o in b.model.opset_import if o.domain in ("", "ai.onnx")), 18)
    if axis is None:
        return b.node("ReduceMax", [x], "extent", keepdims=0)
    if opset >= 18:
        return b.node("ReduceMax", [x, b.const(np.array([axis], np.int64))], "row_extent", keepdims=0)
    return b.node("ReduceMax", [x], "row_extent", keepdims=0, axes=[axis])


def _constants(model: Any) -> dict[str, tuple[tuple[int, ...], np.dtype, Any]]:
    """Initializers and Constant values: name -> (shape, dtype, tensor proto). The values are read only
    where a shape constant may hold S (converting BERT-base's weights to numpy cost 0.16 s per rewrite)."""
    from onnx import helper

    tensors = [(t.name, t) for t in model.graph.initializer]
    tensors += [(n.output[0], n.attribute[0].t) for n in model.graph.node
                if n.op_type == "Constant" and n.attribute and n.attribute[0].name == "value"]
    return {name: (tuple(int(d) for d in t.dims), np.dtype(helper.tensor_dtype_to_np_dtype(t.data_type)), t)
            for name, t in tensors}


def _consumers(model: Any) -> dict[str, list[tuple[Any, int]]]:
    uses: dict[str, list[tuple[Any, int]]] = {}
    for n in model.graph.node:
        for i, name in enumerate(n.input):
            uses.setdefault(name, []).append((n, i))
    return uses


def _shape_tensors(model: Any) -> set[str]:
    """Tensors a shape, length or index is computed from: the slots' inputs, and back from them through
    integer shape arithmetic (_SHAPE_ARITH) to the graph's inputs, Shape nodes and constants."""
    producer = {o: n for n in model.graph.node for o in n.output}
    stack = [n.input[i] for n in model.graph.node for i in _SHAPE_SLOTS.get(n.op_type, ()) if i < len(n.input)]
    found: set[str] = set()
    while stack:
        name = stack.pop()
        if not name or name in found:
            continue
        found.add(name)
        p = producer.get(name)
        if p is not None and p.op_type in _SHAPE_ARITH:
            stack.extend(p.input)
    return found


def _length_uses(uses: list[tuple[Any, int]], shapes: set[str]) -> list[tuple[Any, int]]:
    """The uses of a constant that take it as a length: a length slot, or shape arithmetic whose
    result is a shape tensor."""
    return [(n, i) for n, i in uses if i in _SHAPE_SLOTS.get(n.op_type, ())
            or (n.op_type in _SHAPE_ARITH and any(o in shapes for o in n.output))]


def despecialise(model: Any, b: _Builder, plan: Plan, length: str) -> list[str]:
    """Make constants that hold the fixed length S follow L (see the module docstring); returns what
    was changed, for the report. A no-op when the graph's length is symbolic."""
    if not isinstance(plan.length, int):
        return []
    from onnx import helper, numpy_helper

    s = plan.length
    uses = _consumers(model)
    shapes = _shape_tensors(model)
    changed: list[str] = []
    for name, (shape, dtype, tensor) in _constants(model).items():
        slots = uses.get(name, [])
        value = numpy_helper.to_array(tensor) if dtype.type in _INT_TYPES and len(shape) <= 1 else None
        if value is not None and s in value.reshape(-1).tolist():
            shape_uses = _length_uses(slots, shapes)
            if not shape_uses:
                continue
            dyn = b.node("Cast", [length], to=helper.np_dtype_to_tensor_dtype(value.dtype))
            if value.ndim == 0:
                dyn = b.node("Squeeze", [dyn])
            else:
                dyn = b.node("Where", [b.const(value == s, "is_length"), dyn, name])
            for n, i in shape_uses:
                n.input[i] = dyn
            changed.append(f"{name} {value.tolist()}")
        elif len(shape) >= 2 and s in shape and (shape[0] == 1 or _data_only(slots)):
            if any(i in _WEIGHT_SLOTS.get(n.op_type, ()) for n, i in slots) or not slots:
                continue
            axes = [a for a in range(len(shape)) if shape[a] == s]
            ends = b.node("Concat", [length] * len(axes), axis=0) if len(axes) > 1 else length
            sliced = b.node("Slice", [name, b.const(np.zeros(len(axes), np.int64)), ends,
                                      b.const(np.array(axes, np.int64))], "sliced_const")
            for n, i in slots:
                n.input[i] = sliced
            changed.append(f"{name} {list(shape)} sliced on axes {axes}")
    return changed


def _data_only(uses: list[tuple[Any, int]]) -> bool:
    """A constant without a broadcast batch dim (a folded relative-position index `[heads, S, S]`, a
    causal mask `[S, S]`) is data, not a table, where nothing looks rows up in it (a Gather's data)."""
    return not any(i == 0 and n.op_type in ("Gather", "GatherElements", "GatherND") for n, i in uses)


def rewrite(model: Any, plan: Plan, pad_outputs: bool = True) -> Changes:
    """Rewrite `model` in place: slice the sequence inputs to L, make the body follow L, and (with
    `pad_outputs`) pad `plan.seq_axes` outputs back to S with 0. Returns what it changed.

    With `pad_outputs` a graph exported at a fixed S comes out taking any length up to S (its sequence
    inputs' and outputs' dim is the symbol SEQUENCE_SYMBOL, S recorded as the example length): a caller
    may send `1 x 14` unpadded, as sentence-transformers users do; the outputs then have that length."""
    b = _Builder(model)
    runtime = pad_outputs and isinstance(plan.length, int)
    length, full = _valid_length(b, plan, runtime)
    changed = despecialise(model, b, plan, length)
    uses = _consumers(model)
    zero, one = b.const(np.array([0], np.int64)), b.const(np.array([1], np.int64))
    for name in plan.sequence_inputs:
        sliced = b.node("Slice", [name, zero, length, one], f"{name}_sliced")
        for n, i in uses.get(name, []):
            n.input[i] = sliced
    if pad_outputs:
        _pad_outputs(model, b, plan, length, full)
    elif isinstance(plan.length, int):  # the body alone: its outputs are L long where they were S
        for o in model.graph.output:
            for d in o.type.tensor_type.shape.dim:
                if d.HasField("dim_value") and d.dim_value == plan.length:
                    d.dim_param = "unpadded_length"
    from optcli.onnx_model import sort_topologically

    model.graph.node.extend(b.nodes)
    sort_topologically(model.graph)  # rewrite nodes may read Constant nodes of the body
    if runtime:
        _any_length_up_to_s(model, plan, int(plan.length))
    _forget_lengths(model)
    out = Changes(constants_changed=changed)
    if runtime:
        out["takes_lengths_up_to"] = plan.length
    return out


SEQUENCE_SYMBOL = "sequence"  # optcli.sequence_axis's group name: its recorded length is the example's


def _any_length_up_to_s(model: Any, plan: Plan, length: int) -> None:
    """Declare dim 1 of the sequence inputs, and the sequence axes of the outputs, symbolic, and record S
    as the model's example length (what the pipeline measures and calibrates at)."""
    from optcli.input_limits import record_max_dims
    from optcli.sequence_axis import record_lengths

    for vi in model.graph.input:
        if vi.name in plan.sequence_inputs:
            vi.type.tensor_type.shape.dim[1].dim_param = SEQUENCE_SYMBOL
    for vi in model.graph.output:
        dims = vi.type.tensor_type.shape.dim
        for a in plan.seq_axes.get(vi.name, []):
            if a < len(dims):
                dims[a].dim_param = SEQUENCE_SYMBOL
    record_lengths(model, {SEQUENCE_SYMBOL: length})
    # The runner refuses a longer input (input_limits.py): the position constants stay S long.
    record_max_dims(model, {name: {1: length} for name in sorted(plan.sequence_inputs)})


def _forget_lengths(model: Any) -> None:
    """Recorded shapes said S; inside the body they are now L. Keep every tensor's type (quantizers
    and later fusions need them, and ONNX inference cannot see through com.microsoft ops), drop the
    dims, then let ONNX shape inference fill in what it can."""
    import onnx

    for vi in model.graph.value_info:
        for d in vi.type.tensor_type.shape.dim:
            d.Clear()
    # infer_shapes copies the model through protobuf: it gets a copy without the weights' bytes (their
    # dims and types are all it reads; the small int64 constants that shape Reshapes keep theirs).
    # BERT-base: 2.4 s -> 0.3 s, and no 440 MB copied out of the model and back in.
    from optcli.onnx_model import weightless_copy

    try:
        inferred = onnx.shape_inference.infer_shapes(weightless_copy(model, _KEEP_BYTES))
    except Exception:  # inference is a help: the types kept above are enough
        return
    del model.graph.value_info[:]
    model.graph.value_info.extend(inferred.graph.value_info)


_KEEP_BYTES = 4096  # initializers up to this size keep their bytes for shape inference (shape constants)


def _pad_outputs(model: Any, b: _Builder, plan: Plan, length: str, full: str) -> None:
    from onnx import helper

    missing = b.node("Sub", [full, b.node("Squeeze", [length])], "pad_amount")
    rank_of = {o.name: len(_dims(o)) for o in model.graph.output}
    for out_name, axes in plan.seq_axes.items():
        rank = rank_of[out_name]
        inner = f"{out_name}__unpadded"
        for n in model.graph.node:
            n.output[:] = [inner if o == out_name else o for o in n.output]
            n.input[:] = [inner if i == out_name else i for i in n.input]
        onehot = np.zeros(2 * rank, np.int64)
        onehot[[rank + a for a in axes]] = 1
        pads = b.node("Mul", [b.const(onehot, "pad_axes"), missing], "pad_amount")
        b.nodes.append(helper.make_node("Pad", [inner, pads], [out_name], name=f"{PREFIX}pad_{out_name}",
                                        mode="constant"))


def failing_construct(model: Any, reason: str, length: int | str, changed: set[str]) -> str:
    """`reason` (onnxruntime's, naming the node it failed at) with the construct behind it: the node's
    op and the constants holding S it is computed from that the rewrite left at S (not in `changed`)."""
    import re

    found = re.search(r"Name:'([^']*)'", reason)
    node = next((n for n in model.graph.node if found and found.group(1) and n.name == found.group(1)), None)
    if node is None:
        return reason
    producer = {o: n for n in model.graph.node for o in n.output}
    constants = _constants(model)
    holding: list[str] = []
    seen: set[str] = set()
    stack = list(node.input)
    while stack and len(seen) < 2000:
        name = stack.pop()
        if not name or name in seen:
            continue
        seen.add(name)
        if name in constants:
            if name in changed:
                continue
            shape, dtype, tensor = constants[name]
            if isinstance(length, int) and (length in shape or (dtype.type in _INT_TYPES and len(shape) <= 1 and
                                                                 length in _small_values(tensor))):
                holding.append(f"{name} {list(shape)}")
        elif name in producer:
            stack.extend(producer[name].input)
    what = (f"its inputs are computed from constant(s) holding S={length} that no rule re-expresses: "
            f"{', '.join(sorted(holding)[:4])}" if holding else "no constant holding S feeds it: the length comes "
            "from elsewhere (an input, a weight)")
    return f"node {node.name!r} ({node.op_type}) does not run at a shorter length: {what}; {reason}"


def _small_values(tensor: Any) -> list[int]:
    from onnx import numpy_helper

    return [int(v) for v in numpy_helper.to_array(tensor).reshape(-1)[:64]]
