"""Take the activation Q/DQ pairs off the inputs of nodes kept in float.

ONNX Runtime's QDQ quantizer also quantizes a quantized op's *output* (unless told otherwise), so
the Q/DQ on a Conv's input is often placed by the Conv before it, and `nodes_to_exclude` alone
leaves it there: the excluded op then still reads INT8-rounded activations, and accuracy does not
move. Rewiring the op to read the float tensor before the pair is what "keep it in float" means.
"""
from __future__ import annotations

from pathlib import Path

from optcli.onnx_model import load_onnx, save_onnx


def strip_input_qdq(path: Path, nodes: set[str]) -> int:
    """Rewire `nodes`' activation inputs from DequantizeLinear(QuantizeLinear(x)) to x, drop pairs
    nothing reads any more, save in place; returns the number of inputs rewired."""
    model = load_onnx(path)
    graph = model.graph
    producer = {o: n for n in graph.node for o in n.output}
    rewired = 0
    for node in graph.node:
        if node.name not in nodes:
            continue
        for i, tensor in enumerate(node.input):
            dq = producer.get(tensor)
            q = producer.get(dq.input[0]) if dq is not None and dq.op_type == "DequantizeLinear" else None
            if q is not None and q.op_type == "QuantizeLinear":  # a weight's DQ reads an initializer: not a pair
                node.input[i] = q.input[0]
                rewired += 1
    if rewired:
        _drop_unread(graph)
        save_onnx(model, path)
    return rewired


def _drop_unread(graph) -> None:  # noqa: ANN001 (onnx GraphProto)
    outputs = {o.name for o in graph.output}
    while True:
        read = {t for n in graph.node for t in n.input} | outputs
        dead = [n for n in graph.node if n.op_type in ("QuantizeLinear", "DequantizeLinear")
                and not any(o in read for o in n.output)]
        if not dead:
            return
        for n in dead:
            graph.node.remove(n)
