"""A reused stage is checked again before anything trusts it. A stage-cache entry is a folder anyone can
edit: a new artifact with its matching sha256 in stage.json passed every check of the cache itself, its
recorded accuracy (cosine 1.000000) was shown, and the stages after it took it as their FP32 reference,
while the model's outputs were wrong (issue 30, item 6).

So a reused artifact is measured now against the user's model as given on the command line (PyTorch
eager, or the user's own ONNX), never against another cached stage: on the rows its stage judges its
output on (its held-out rows, Stage.heldout_rows), else on the run's fixed random inputs (the pipeline's
reference, also the user's model). The entry is rebuilt, and the report says why, where:
- its record has no accuracy figures (optcli always writes them),
- its artifact does not run, or does worse now than its record says (beyond measurement drift),
- or it is not what its stage makes (Stage.reuse_check): a stage that keeps the model's function
  (export, simplify, fuse, unpad) must match the model to float32 rounding, a stage with a tolerance
  must meet it. A record cannot talk its way past this: its figures only ever make the check stricter.
The figures the report then shows are the ones measured now, and the stage's gate applies to them."""
from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from optcli.accuracy_summary import AccuracySummary
from optcli.artifact import Artifact
from optcli.errors import model_error_line
from optcli.stages import Stage, StageContext

if TYPE_CHECKING:
    from optcli.plan.run_state import Reference

# How far a measurement may drift from its record and still be the same artifact: the reference is the
# user's model now (the record's held-out figures were against the FP32 ONNX, ~1e-6 away), and the
# session may run at another optimization level or thread count (float sums in another order).
COSINE_SLACK = 1e-4
MAX_ABS_FACTOR, MAX_ABS_SLACK_REL = 1.5, 1e-5  # the slack is relative to the outputs' largest magnitude
TOP1_SLACK = 0.01
FIGURES = ("cosine_min", "max_abs_err")  # what every record optcli writes has


def user_model_outputs(ctx: StageContext, samples: Any) -> list[np.ndarray]:
    """The user's model, as given on the command line, on `samples` (once per run and sample set)."""
    from optcli.quantize.evaluate import run_model, runner_outputs

    memo = ctx.state.user_model_outputs
    key = samples.digest()
    if key not in memo:
        if ctx.torch_model is not None:
            from optcli.backends.torch.runner import TorchRunner

            with TorchRunner(ctx.torch_model.module, ctx.inputs, threads=ctx.config.bench.threads) as runner:
                memo[key] = runner_outputs(runner, samples)
        else:
            memo[key] = run_model(ctx.source.path, samples, runner_options={"threads": ctx.config.bench.threads},
                                  pool=ctx.runners)[0]
    return memo[key]


def measure_again(measure: Any, ctx: StageContext, stage: Stage, before: Artifact, made: Artifact,
                  reference: Reference, optimization: str) -> AccuracySummary:
    """The reused artifact's accuracy now, against the user's model (see the module's docstring), at the
    setting its row was measured at (the same session as then: an untouched entry measures as recorded)."""
    rows = stage.heldout_rows(before)
    if rows is None:
        return measure.accuracy(ctx, made, reference, optimization=optimization)
    from optcli.cpu.measure import runner_accuracy

    expected = user_model_outputs(ctx, rows)
    runner = measure.artifact_runner(ctx, made, optimization)
    try:
        summary = runner_accuracy(runner, expected, [o.name for o in runner.outputs], rows)
    finally:
        ctx.runners.release(runner)
    summary["reference"] = "the user's model (re-checked)"
    return summary


def _number(value: Any) -> float | None:
    """A finite number of a record, or None (a bool is not one)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def disagreement(fresh: Mapping[str, object], recorded: Mapping[str, object]) -> str | None:
    """Why `fresh` is not the accuracy `recorded` claims (worse beyond measurement drift), or None."""
    outputs = fresh.get("outputs", {})
    scale = max((e.get("scale", 0.0) for e in outputs.values()), default=0.0) if isinstance(outputs, dict) else 0.0
    checks = [("cosine_min", lambda f, r: f >= r - COSINE_SLACK),
              ("max_abs_err", lambda f, r: f <= r * MAX_ABS_FACTOR + MAX_ABS_SLACK_REL * max(scale, 1.0)),
              ("top1_agreement", lambda f, r: f >= r - TOP1_SLACK)]
    for key, holds in checks:
        f, r = _number(fresh.get(key)), _number(recorded.get(key))
        if f is None or r is None:
            continue
        if not holds(f, r):
            return f"its artifact measures {key} {f:.6g} against the user's model, its record says {r:.6g}"
    return None


def recheck(measure: Any, ctx: StageContext, stage: Stage, before: Artifact, made: Artifact,
            reference: Reference, recorded: Any,
            optimization: str) -> tuple[AccuracySummary | None, str | None]:
    """(the accuracy measured now, None) for an entry that holds; (None, why) for one to rebuild."""
    if not isinstance(recorded, dict) or any(_number(recorded.get(k)) is None for k in FIGURES):
        return None, "its record has no accuracy figures"
    try:
        fresh = measure_again(measure, ctx, stage, before, made, reference, optimization)
    except Exception as exc:  # it does not even run: a runtime or a shape check says so, in any type
        return None, f"its artifact does not run: {model_error_line(exc)}"
    # the record's notes (a deferred gate) under the figures measured now
    why = disagreement(fresh, recorded) or stage.reuse_check(cast("AccuracySummary", {**recorded, **fresh}))
    return (None, why) if why else (fresh, None)
