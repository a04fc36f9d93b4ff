"""Which graph outputs have a shape computed from input *values* (not only from input shapes).

TensorRT builds such graphs (the shapes are data-dependent: TensorRT-RTX 1.7 built the unpad rewrite
here, warning "Was not able to infer kOPT value(s) for tensor optcli_unpad/extent"), but at run time
an output whose shape only the data decides has no size before the enqueue: it needs an
IOutputAllocator, which optcli's TensorRT runner does not have (runner.py refuses -1 output dims).

The analysis: a tensor is value-derived when it depends on a graph input's values; Shape and Size
read only shapes, so what they give is not. A node whose shape-deciding input (Reshape's shape,
Slice's starts/ends, Pad's pads, ...) is value-derived makes its outputs' shapes data-dependent, and
so does everything computed from them, down to the graph outputs.
"""
from __future__ import annotations

from typing import Any

# op -> indices of the inputs that decide its output's shape (by their values)
SHAPE_INPUTS: dict[str, tuple[int, ...]] = {
    "Reshape": (1,), "Expand": (1,), "Tile": (1,), "ConstantOfShape": (0,), "Slice": (1, 2, 3, 4),
    "Pad": (1, 3), "Range": (0, 1, 2), "Resize": (2, 3), "Upsample": (1,), "TopK": (1,), "OneHot": (1,),
    "Split": (1,), "Squeeze": (1,), "Unsqueeze": (1,), "ReduceSum": (1,), "ReduceMean": (1,), "ReduceMax": (1,),
    "ReduceMin": (1,), "ReduceProd": (1,), "CenterCropPad": (1,),
}
# Ops whose output shape depends on the values of their data input itself.
DATA_SHAPED = ("NonZero", "NonMaxSuppression")
_SHAPE_ONLY = ("Shape", "Size")


def data_dependent_outputs(model: Any) -> list[tuple[int, str, str]]:
    """(index, name, output) per graph output whose shape depends on input values: the first node (in
    graph order) that made it so, and the output's name."""
    g = model.graph
    initializers = {i.name for i in g.initializer}
    value_derived = {i.name for i in g.input if i.name not in initializers}
    shaped_by: dict[str, int] = {}   # tensor -> index of the node whose value-derived shape input began it
    for index, node in enumerate(g.node):
        inputs = [t for t in node.input if t]
        if node.op_type not in _SHAPE_ONLY and any(t in value_derived for t in inputs):
            value_derived.update(o for o in node.output if o)
        origin = next((shaped_by[t] for t in inputs if t in shaped_by), None)
        if origin is None:
            deciding = [node.input[k] for k in SHAPE_INPUTS.get(node.op_type, ()) if k < len(node.input)]
            if any(t in value_derived for t in deciding if t) or node.op_type in DATA_SHAPED:
                origin = index
        if origin is not None and node.op_type not in _SHAPE_ONLY:
            shaped_by.update({o: origin for o in node.output if o})
    return [(shaped_by[o.name], g.node[shaped_by[o.name]].name, o.name) for o in g.output if o.name in shaped_by]
