"""The unit of INT8 fallback: a quantized compute op with the Q/DQ that feed it.

Keeping a unit in float removes its weight and input quantization. Activations, reshapes and the
other ops a flavour quantizes only to keep chains in INT8 are never units of their own: taking the
Q/DQ off a Relu leaves the Conv beside it in INT8, so accuracy does not move (issue 13's ResNet-50
run). They belong to the unit they feed: a quantized Relu puts Q/DQ on its output, which is the next
op's input, so keeping that op in float takes the Relu (and any Flatten/Reshape chain) with it.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from optcli.onnx_model import graph_view
from optcli.quantize.flavour import Flavour
from optcli.quantize.module_names import node_modules

if TYPE_CHECKING:
    from onnx import NodeProto

# Ops that compute (weights, or arithmetic on two activations, or a window): quantizing their inputs
# is what costs accuracy and what buys speed.
COMPUTE_OPS = ("Conv", "ConvTranspose", "MatMul", "Gemm", "Attention", "MultiHeadAttention", "Add", "Mul",
               "MaxPool", "AveragePool", "GlobalAveragePool")


# A unit as the reports list it: node, module (or None), op_type, nodes, flops_share, and what the
# fallback and debug-int8 add beside them (local_damage, fp32_time_share, cosine_gain_in_float).
UnitRow = dict[str, str | float | list[str] | None]


@dataclass
class Unit:
    node: str               # ONNX node name of the compute op (the unit's id)
    op_type: str
    module: str | None      # PyTorch module path, where the exporter recorded it
    flops: float            # per sample (batch 1)
    order: int              # position in the graph
    nodes: tuple[str, ...] = ()  # what nodes_to_exclude gets: the op and the pass-through ops feeding it

    @property
    def label(self) -> str:
        return self.module or self.node

    def to_json(self, total_flops: float) -> UnitRow:
        return {"node": self.node, "module": self.module, "op_type": self.op_type, "nodes": list(self.nodes),
                "flops_share": round(self.flops / total_flops, 6) if total_flops else 0.0}


def compute_units(model_path: Path, flavour: Flavour, origins: Sequence[Path] = ()) -> tuple[list[Unit], float]:
    """(units in graph order, the model's total FLOPs per sample) for what `flavour` quantizes."""
    # Shapes and dims only: external weights stay on disk (a 2 GB model would be copied twice here,
    # and shape inference cannot serialize a proto over 2 GiB).
    model = graph_view(model_path)
    earlier = [graph_view(p) for p in origins if p.exists()]
    modules = node_modules(model, *earlier)
    flops = node_flops(model)
    total = float(sum(flops.values()))
    chosen = [(i, n) for i, n in enumerate(model.graph.node)
              if n.op_type in COMPUTE_OPS and n.op_type in flavour.op_types]
    missing = {n.name for _, n in chosen if not flops.get(n.name)}
    # A graph whose shapes follow the data (the unpad rewrite slices to the batch's valid length), or
    # that shape inference cannot follow (fused ops), has no static shapes to count: the same nodes in
    # an earlier graph of the run do, oldest first (the exporter's infers best).
    for origin in earlier:
        if not missing:
            break
        known = node_flops(origin)
        found = {name: known[name] for name in missing if known.get(name)}
        if found:
            flops.update(found)
            missing -= set(found)
            total = max(float(sum(flops.values())), float(sum(known.values())))
    producer = {o: n for n in model.graph.node for o in n.output}
    units = [Unit(n.name, n.op_type, modules.get(n.name), flops.get(n.name, 0.0), i,
                  (n.name, *_feeders(n, producer, flavour.op_types))) for i, n in chosen]
    return units, total


def _feeders(node: NodeProto, producer: dict[str, NodeProto], quantized: tuple[str, ...]) -> list[str]:
    """Quantized non-compute ops upstream of `node` (Relu, Flatten, Reshape ...) up to the previous
    compute op: the Q/DQ on their outputs are `node`'s input quantization."""
    out: list[str] = []
    stack = [t for t in node.input if t in producer]
    while stack:
        p = producer[stack.pop()]
        if p.op_type in COMPUTE_OPS or p.op_type not in quantized or p.name in out:
            continue
        out.append(p.name)
        stack += [t for t in p.input[:1] if t in producer]
    return out


def _shapes(model: Any) -> dict[str, list[int]]:
    """Static shapes of every tensor at batch 1. A symbolic sequence dim takes the length the export
    recorded (else DEFAULT_LENGTH): at length 1 a text model's attention and its projections would
    weigh nothing, and FLOP shares would rank units wrongly. Other symbolic dims are taken as 1."""
    import onnx

    from optcli.sequence_axis import recorded_lengths, symbolic_length

    recorded = recorded_lengths(model)
    m = onnx.ModelProto()
    m.CopyFrom(model)
    for vi in m.graph.input:
        for i, d in enumerate(vi.type.tensor_type.shape.dim):
            if not d.HasField("dim_value"):
                d.dim_value = symbolic_length(vi.name, i, d.dim_param, recorded) or 1
    m = _inferred(m)
    out = {}
    for vi in list(m.graph.input) + list(m.graph.value_info) + list(m.graph.output):
        dims = vi.type.tensor_type.shape.dim
        if dims and all(d.HasField("dim_value") for d in dims):
            out[vi.name] = [d.dim_value for d in dims]
    for init in m.graph.initializer:
        out[init.name] = list(init.dims)
    return out


def _inferred(model: Any) -> Any:
    """`model` with value_info for its tensors. onnxruntime's symbolic inference first: ONNX's stops at
    shapes computed in the graph (an Expand to a Concat of Shape values: on BERT-base 10 of 96 MatMuls
    had shapes, 95 with it, in 0.04 s); ONNX's where it fails (custom ops), and partial shapes beat none."""
    import onnx

    try:
        from optcli.optional_imports import without_package_init

        infer = without_package_init("onnxruntime.tools.symbolic_shape_infer").SymbolicShapeInference
        return infer.infer_shapes(model, auto_merge=True)
    except Exception:  # noqa: BLE001 - it asserts on graphs it cannot follow
        pass
    try:
        return onnx.shape_inference.infer_shapes(model, data_prop=True)
    except Exception:  # noqa: BLE001 - shape inference can fail on custom ops: FLOPs are then partial
        return model


def node_flops(model: Any) -> dict[str, float]:
    """{node: FLOPs per sample} for the compute ops (multiply-adds count 2), from static shapes."""
    shapes = _shapes(model)
    out: dict[str, float] = {}
    for node in model.graph.node:
        ins = [shapes.get(t) for t in node.input]
        res = shapes.get(node.output[0]) if node.output else None
        if res is None:
            continue
        n_out = float(np.prod(res)) if res else 1.0
        if node.op_type in ("Conv", "ConvTranspose") and len(ins) > 1 and ins[1]:
            w = ins[1]
            per_out = float(np.prod(w[1:]))  # Cin/group x kernel
            if node.op_type == "ConvTranspose" and ins[0]:
                n_out = float(np.prod(ins[0]))
                per_out = float(np.prod(w[1:]))
            out[node.name] = 2.0 * n_out * per_out
        elif node.op_type in ("MatMul", "Gemm") and ins and ins[0]:
            k = ins[0][-1]
            for a in node.attribute:
                if a.name == "transA" and a.i and len(ins[0]) >= 2:
                    k = ins[0][-2]
            out[node.name] = 2.0 * n_out * k
        elif node.op_type in COMPUTE_OPS:
            window = ins[0] and res and float(np.prod(ins[0])) / max(n_out, 1.0)
            out[node.name] = n_out * max(1.0, float(window or 1.0))
    return out
