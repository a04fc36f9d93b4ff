"""Local damage of each fallback unit (units.py): the first ranking of the fallback search.

Each unit's input and output tensors are exposed in the FP32 and the INT8 model and compared on a
few samples. A unit's local damage is the error at its output minus the worst error already present
at its float inputs (before their Q/DQ): the error its input and weight quantization added. Only
compute ops are scored, so a Q/DQ pair is credited to the op it feeds, not to a Relu beside it.
One pass over the probe samples; the search then measures the ranked units end to end.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from optcli.calibration.dataset import SampleSet
from optcli.onnx_model import graph_view
from optcli.quantize.evaluate import run_model

PROBE_SAMPLES = 16


def _err(a: np.ndarray, b: np.ndarray) -> float:
    """Mean over samples of 1 - cosine (0 = identical). Per sample, not over the flattened batch:
    an outlier channel that dominates some samples would otherwise hide samples where it is zero."""
    a = a.astype(np.float64).reshape(a.shape[0], -1) if a.ndim > 1 else a.astype(np.float64).reshape(1, -1)
    b = b.astype(np.float64).reshape(a.shape)
    na, nb = np.linalg.norm(a, axis=1), np.linalg.norm(b, axis=1)
    den = na * nb
    cos = np.where(den > 0, (a * b).sum(axis=1) / np.where(den > 0, den, 1.0), np.where(na == nb, 1.0, 0.0))
    return float(np.mean(1.0 - cos))


def node_damage(fp32: Path, int8: Path, candidates: list[str], samples: SampleSet) -> dict[str, float]:
    """{node name: local damage} for candidate nodes (float tensors that exist in both graphs)."""
    model = graph_view(fp32)
    # ONNX Runtime's QDQ quantizer removes a Relu after a quantized op and renames that op's output
    # to the Relu's (the uint8 range does the clamping): in the INT8 graph such a tensor holds the
    # value before the Relu, so compare it after one.
    relu_out = {o for n in model.graph.node if n.op_type == "Relu" for o in n.output}
    inits = {i.name for i in model.graph.initializer}
    graph_inputs = {i.name for i in model.graph.input}
    nodes = {n.name: n for n in model.graph.node}
    int8_tensors = {o for n in graph_view(int8).graph.node for o in n.output}
    io: dict[str, tuple[list[str], list[str]]] = {}
    for name in candidates:
        node = nodes.get(name)
        if node is None:
            continue
        ins = [t for t in node.input if t and t not in inits and (t in int8_tensors or t in graph_inputs)]
        outs = [t for t in node.output if t in int8_tensors]
        if not outs:  # the output was renamed to that of a Relu ONNX Runtime removed
            outs = [t for c in model.graph.node if c.op_type == "Relu" and c.input[0] in node.output
                    for t in c.output if t in int8_tensors]
        if outs:
            io[name] = (ins, outs)
    tensors = sorted({t for ins, outs in io.values() for t in ins + outs} - graph_inputs)
    probe = samples.take(slice(0, PROBE_SAMPLES))
    ref, ref_names = run_model(fp32, probe, extra_outputs=tensors, runner_options={"optimization": "disabled"})
    got, got_names = run_model(int8, probe, extra_outputs=tensors, runner_options={"optimization": "disabled"})
    ref_map, got_map = dict(zip(ref_names, ref)), dict(zip(got_names, got))
    for t in relu_out & got_map.keys():
        got_map[t] = np.maximum(got_map[t], 0)
    errors = {t: _err(ref_map[t], got_map[t]) for t in tensors if t in ref_map and t in got_map
              and ref_map[t].shape == got_map[t].shape}
    damage = {}
    for name, (ins, outs) in io.items():
        out_err = max((errors.get(t, 0.0) for t in outs), default=0.0)
        in_err = max((errors.get(t, 0.0) for t in ins), default=0.0)
        damage[name] = out_err - in_err
    return damage
