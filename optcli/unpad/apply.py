"""Rewrite a graph and prove the rewrite, as one step: what the unpad stage does to its input, and what
the CPU build does on demand to the exporter's graph when an OpenVINO candidate starts from it (its
frontend reads none of onnxruntime's fused ops, so it cannot take the stage's own output)."""
from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

import numpy as np

from optcli.artifact import Artifact
from optcli.backends.registry import ONNX
from optcli.calibration.dataset import SampleSet
from optcli.onnx_model import load_onnx, save_onnx
from optcli.plan.stage_names import StageName
from optcli.tensor_spec import TensorSpec, random_inputs

if TYPE_CHECKING:
    from optcli.plan.run_state import UnpadTwin

# Beside the CPU build's candidates: the rewrite of the graph OpenVINO's candidates start from.
UNPADDED_SOURCE = "source-unpadded.onnx"


@dataclass
class HeldOut:
    """The held-out data the proof runs on. A proof that reaches it runs the rewritten graph on every
    row (`outputs`, as run_model gives them: the FP32 reference the INT8 gate and the CPU build judge
    against, which they would otherwise compute again: 1.3 s on BERT-base) and compares the rows that
    span the data's lengths with the original graph's."""

    samples: SampleSet
    outputs: tuple[list[np.ndarray], list[str]] | None = None


def padded_length(plan: Any, inputs: list[TensorSpec]) -> int:
    if isinstance(plan.length, int):
        return plan.length
    spec = next(s for s in inputs if s.name == plan.mask)
    return int(random_inputs([spec], 1, int_high={})[spec.name].shape[1])


def rewrite_and_prove(source: Path, out: Path, *, inputs: list[TensorSpec], int_high: dict[str, int], bucket: int,
                      runs: Any, details: dict[str, object],
                      held_out: HeldOut | None = None,
                      known_axes: dict[str, list[int]] | None = None, synthetic: int | None = None) -> str | None:
    """Rewrite `source` into `out` and prove it on right-padded random samples (`synthetic` of them,
    default SYNTHETIC_SAMPLES) and `held_out`; fills `details` (and `held_out.outputs` where the rewrite
    applies); returns the reason it does not apply (and leaves no `out`), or None.

    Which outputs carry the sequence (padded back to S) comes from `known_axes` ({output: axes}, found
    on another graph of the same model), else from the outputs' declared shapes where they name S on
    exactly one axis; the proof checks either. Where there is neither, or the proof fails on them, a
    probe finds them by running the original and the rewritten body at a shorter length (BERT-base:
    3.8 s of a 12 s stage when it always ran)."""
    from optcli.unpad.graph import find_plan

    model = load_onnx(source)
    plan = find_plan(model, bucket)
    if isinstance(plan, str):
        return plan
    length = padded_length(plan, inputs)
    if length <= plan.bucket:
        return f"the padded length {length} is within one bucket"
    outputs = {o.name for o in model.graph.output}
    guess = ({k: list(v) for k, v in known_axes.items()} if _valid_axes(known_axes, outputs)  # type: ignore[union-attr]
             else declared_axes(model, plan.length))
    reason: str | None = None
    if guess is not None:
        plan.seq_axes = guess
        reason = _rewrite_and_prove(model, plan, source, out, length, inputs, int_high, runs, details, held_out,
                                    synthetic)
        if reason is None:
            return None
        model = load_onnx(source)  # the rewrite changed it
        plan = find_plan(model, bucket)
        if isinstance(plan, str):  # the same graph planned above: cannot happen, but typed
            return plan
    axes = _probe_axes(model, plan, source, out, inputs, int_high, length, runs)
    if isinstance(axes, str):
        return axes
    if guess is not None and axes == guess:
        return reason  # the probe agrees: the proof's reason stands
    plan.seq_axes = axes
    return _rewrite_and_prove(model, plan, source, out, length, inputs, int_high, runs, details, held_out, synthetic)


def _rewrite_and_prove(model: Any, plan: Any, source: Path, out: Path, length: int, inputs: list[TensorSpec],
                       int_high: dict[str, int], runs: Any, details: dict[str, object],
                       held_out: HeldOut | None, synthetic: int | None) -> str | None:
    from optcli.unpad.graph import rewrite

    ranks = {o.name: len(o.type.tensor_type.shape.dim) for o in model.graph.output}
    shapeless = [name for name, axes in plan.seq_axes.items() if any(a >= ranks.get(name, 0) for a in axes)]
    if shapeless:
        return f"output {shapeless[0]!r} declares no shape of that rank: its sequence axis cannot be padded back"
    changed = rewrite(model, plan)
    save_onnx(model, out)
    details.update(plan.to_json(), **changed)
    reason = _prove(runs, source, out, plan, length, inputs, int_high, details, held_out, synthetic)
    if reason:
        if held_out is not None:
            held_out.outputs = None  # another graph's outputs
        runs.forget(out)
        out.unlink()
    return reason


def declared_axes(model: Any, length: int | str) -> dict[str, list[int]] | None:
    """{output: [axis]} where an output's declared shape has the padded length S (a number, or the
    input's symbol) on one axis after the batch; None where any output has no shape or S on two axes."""
    axes: dict[str, list[int]] = {}
    for out in model.graph.output:
        if not out.type.tensor_type.HasField("shape"):
            return None
        dims = out.type.tensor_type.shape.dim
        found = [a for a, d in enumerate(dims) if a > 0 and (
            (isinstance(length, int) and d.HasField("dim_value") and d.dim_value == length)
            or (isinstance(length, str) and d.dim_param == length))]
        if len(found) > 1:
            return None
        if found:
            axes[out.name] = found
    return axes


def _valid_axes(axes: Any, outputs: set[str]) -> bool:
    """`axes` is {output of this graph: [axis, ...]} (read back from a stage record: checked, not trusted)."""
    return (isinstance(axes, dict) and all(
        isinstance(k, str) and k in outputs and isinstance(v, list) and v
        and all(isinstance(a, int) and not isinstance(a, bool) and 0 <= a < 8 for a in v) for k, v in axes.items()))


def _probe_axes(model: Any, plan: Any, source: Path, out: Path, inputs: list[TensorSpec], int_high: dict[str, int],
                length: int, runs: Any) -> dict[str, list[int]] | str:
    """Which outputs carry the sequence: the rewritten body (outputs not padded back) run beside the
    original on two rows shorter than the padded length."""
    from optcli.unpad.graph import rewrite
    from optcli.unpad.verify import sequence_axes, synthetic_samples

    body = copy.deepcopy(model)
    changed = {c.split(" ", 1)[0] for c in rewrite(body, plan, pad_outputs=False)["constants_changed"]}
    probe = out.parent / f"probe-{out.name}"
    save_onnx(body, probe)
    del body
    feeds = synthetic_samples(inputs, plan.mask, plan.sequence_inputs, length, int_high, n=2,
                              lengths=np.array([plan.bucket - 1, 1]))
    axes = sequence_axes(source, probe, feeds, length, plan.bucket, runs)
    runs.forget(probe)
    probe.unlink()
    if isinstance(axes, str):
        from optcli.unpad.graph import failing_construct

        return failing_construct(load_onnx(source), axes, plan.length, changed)
    return axes


def _prove(runs: Any, original: Path, rewritten: Path, plan: Any, length: int, inputs: list[TensorSpec],
           int_high: dict[str, int], details: dict[str, object],
           held_out: HeldOut | None, synthetic: int | None = None) -> str | None:
    from optcli.unpad.verify import (
        PROOF_BATCH,
        SYNTHETIC_SAMPLES,
        prove,
        right_padded,
        spanning_rows,
        synthetic_samples,
    )

    lengths = None
    if synthetic:  # one batch whose longest row is short of the padded length: the slice must act
        lengths = np.linspace(1, max(length - plan.bucket - 1, 1), synthetic).round().astype(np.int64)
    samples = [("random right-padded samples", synthetic_samples(
        inputs, plan.mask, plan.sequence_inputs, length, int_high, n=synthetic or SYNTHETIC_SAMPLES,
        lengths=lengths), PROOF_BATCH)]
    every_row: dict[str, Callable[[], list[np.ndarray]]] = {}
    if held_out is not None:
        data, source = held_out.samples.arrays, held_out.samples.source
        mask = np.asarray(data[plan.mask])
        details["data_valid_length"] = length_figures(mask, length, plan.bucket)
        if not right_padded(mask):
            return f"the data ({source}) is not right-padded: padding must come last for the rewrite to skip it"
        rows = spanning_rows(mask)
        label = f"the held-out data ({source})"
        samples.append((label, {k: np.asarray(v)[rows] for k, v in data.items()}, PROOF_BATCH))

        def rewritten_rows() -> list[np.ndarray]:
            held_out.outputs = runs.run_samples(rewritten, held_out.samples)
            return [o[rows] for o in held_out.outputs[0]]
        every_row[label] = rewritten_rows
    proof = prove(original, rewritten, samples, plan.mask, runs, every_row)
    details["proof"] = proof["checks"]
    return proof["reason"]


class LengthFigures(TypedDict):
    """The data's valid lengths (median, min, max) and the share of positions computed at batch 1."""

    median: float
    min: int
    max: int
    padded_length: int
    computed_share_batch1: float


def length_figures(mask: np.ndarray, length: int, bucket: int) -> LengthFigures:
    """The data's valid lengths and the share of positions the rewrite computes at batch 1."""
    from optcli.length_groups import row_extents

    valid = (mask != 0).sum(1)
    extent = row_extents(mask)
    computed = np.minimum(-(-np.maximum(extent, 1) // bucket) * bucket, length)
    return {"median": float(np.median(valid)), "min": int(valid.min()), "max": int(valid.max()),
            "padded_length": length, "computed_share_batch1": round(float(computed.mean() / length), 4)}


# The twin is the same model as the graph the unpad stage proved on 12 random and 16 held-out rows, and
# the candidate built from it passes the accuracy gate on the held-out data: its own proof checks the
# rewrite's wiring on one batch of lengths from 1 to a bucket short of the padded length (so the batch's
# longest row is sliced too), not the model again.
TWIN_SAMPLES = 4


def unpadded_twin(first: Artifact, bucket: int, stage: Any, workdir: Path,
                  known_axes: dict[str, list[int]] | None = None) -> tuple[Artifact | None, UnpadTwin]:
    """The unpad rewrite of `first` (the exporter's graph), proven on random right-padded samples, made
    once per run in `workdir` (`stage.state.unpad_twins` remembers it, or why not): (the artifact or None, facts).
    `known_axes`: the outputs' sequence axes the unpad stage found (spares the probe)."""
    from optcli.unpad.verify import GraphRuns

    twins = stage.state.unpad_twins
    if first.sha256 not in twins:
        out = workdir / UNPADDED_SOURCE
        details: dict[str, object] = {"graph": first.path.name}
        with GraphRuns(stage.runners, stage.config.bench.threads) as runs:
            reason = rewrite_and_prove(first.path, out, inputs=stage.inputs, int_high=stage.int_high, bucket=bucket,
                                       runs=runs, details=details, known_axes=known_axes, synthetic=TWIN_SAMPLES)
            runs.forget(out)  # OpenVINO converts the twin from its file: no onnxruntime session of it is wanted
        proof = details.get("proof")
        twins[first.sha256] = ({"applied": False, "reason": reason, "proof": proof, "path": None} if reason
                               else {"applied": True, "proof": proof, "path": str(out)})
    facts = twins[first.sha256]
    path = facts["path"]
    if not facts["applied"] or path is None:
        return None, facts
    return Artifact(Path(path), ONNX, "fp32", stage=StageName.UNPAD, parent=first.sha256), facts
