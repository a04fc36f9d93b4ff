"""`optcli compare`: build every variant, measure them all in one interleaved run, pick one.

Accuracy of each variant is the one its pipeline recorded for the final artifact: a quantize stage
evaluates on calibration/evaluation data against the FP32 model; other stages check against the
FP32 reference (PyTorch eager or the input ONNX) on fixed random inputs. Where no stage recorded
one, the variant's outputs are compared with the fp32 variant's on random inputs.
"""
from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from optcli.accuracy import check_tolerance, compare_outputs
from optcli.atomic_write import write_text_atomic
from optcli.benchmark.feeds import FeedSource
from optcli.benchmark.sweep import NOISY_CV
from optcli.comparison.interleave import InterleaveSettings, measure_interleaved
from optcli.comparison.result import CompareResult, VariantResult, pareto_set, recommend
from optcli.comparison.variants import Variant, VariantBase, VariantBuild, build_variant, variant_config
from optcli.config import model_stem
from optcli.environment import environment
from optcli.loaded_model import ResolvedArtifact, open_artifact, resolve_artifact
from optcli.report import AccuracyResult, ErrorRecord, QuantizeInt8Details, StageRecord
from optcli.report.records import significant

DEFAULT_TOLERANCE = {"cosine": 0.99}
_ACC_KEYS = ("cosine_mean", "cosine_min", "max_abs_err", "top1_agreement", "top1_accuracy",
             "top1_accuracy_reference", "samples", "data", "reference", "outputs")
IDENTICAL = {"cosine_mean": 1.0, "cosine_min": 1.0, "max_abs_err": 0.0, "outputs": {}, "reference": "itself"}
# ("variant_start" | "variant_end" | "phase", what to show): the payload is only shown, never acted on.
Event = Callable[[str, dict[str, object]], None]


def default_out(model: str) -> Path:
    return Path("optcli-out") / f"{model_stem(model)}-compare"


def _accuracy_of(stage: StageRecord) -> AccuracyResult:
    measured = stage.accuracy.to_json() if stage.accuracy is not None else {}
    return AccuracyResult.from_json({k: measured[k] for k in _ACC_KEYS if k in measured})


def _final_stage(build: VariantBuild) -> Any:
    """The stage record that made the final artifact (None when no stage changed the model)."""
    report = build.report
    final = report.final.artifact if report.final is not None else None
    return next((s for s in reversed(report.stages) if s.status in ("ok", "cached") and s.artifact == final), None)


def _gate_failure(build: VariantBuild) -> Any:
    """The stage whose accuracy gate stopped the build, when its artifact was still written: compare
    measures it anyway, to show what the accuracy would cost."""
    report = build.report
    if report is None or report.error is None or report.error.type != "AccuracyError":
        return None
    stage = report.stage(report.error.stage or "")
    if stage is None or not stage.artifact or not stage.accuracy or not (Path(build.out) / stage.artifact).exists():
        return None
    return stage


def _measured_accuracy(candidate: ResolvedArtifact, reference: ResolvedArtifact) -> dict[str, object]:
    """Outputs of `candidate` against `reference` on the same random inputs (batch 8)."""
    outs = []
    for art in (reference, candidate):
        runner = open_artifact(art, concurrency=1)
        try:
            feeds = FeedSource.for_runner(runner, seed=5).batch(8)
            outs.append((runner.run_normalized(runner.normalize(feeds)), [o.name for o in runner.outputs]))
        finally:
            runner.close()
    summary: Mapping[str, object] = compare_outputs(outs[0][0], outs[1][0], outs[1][1])
    return {k: summary[k] for k in _ACC_KEYS if k in summary} | {"reference": "fp32 variant", "samples": 8}


def _variant_result(build: VariantBuild) -> VariantResult:
    v = build.variant
    res = VariantResult(v.name, v.precision, "ok" if build.ok else "failed", wall_seconds=build.wall_seconds)
    if build.report is not None:  # what building it costs: cached stages count their first build
        res.build_seconds = round(sum(s.seconds or 0.0 for s in build.report.stages), 3)
    gated = None if build.ok else _gate_failure(build)
    if not build.ok and gated is None:
        res.error = build.error or ErrorRecord(message="?")
        res.verdict = f"build failed: {res.error.message}"
        return res
    if gated is not None:  # built, but its stage's own gate refused it: measured, never recommended
        res.status = "gate-failed"
        res.error = build.error
        res.artifact = str(Path(build.out) / gated.artifact)
        res.accuracy, res.accuracy_source = _accuracy_of(gated), f"{gated.name} stage (gate failed)"
        why = build.error.message if build.error else None
        res.notes.append(f"the {gated.name} stage's accuracy gate failed: {why}")
    else:
        res.artifact = str(Path(build.out) / build.report.final.artifact)
        stage = _final_stage(build)
        if stage is not None and stage.accuracy:
            res.accuracy, res.accuracy_source = _accuracy_of(stage), f"{stage.name} stage"
        elif stage is None:  # every stage skipped or off: the artifact is the FP32 model itself
            res.accuracy, res.accuracy_source = AccuracyResult.from_json(IDENTICAL), "the input model itself"
        if stage is not None and isinstance(stage.details, QuantizeInt8Details) and stage.details.quantized_nodes == 0:
            res.notes.append(f"the {stage.name} stage kept every node in float to meet the tolerance: "
                             "nothing is quantized")
    resolved = resolve_artifact(res.artifact)
    res.precision = resolved.precision
    res.size_bytes = resolved.size_bytes
    if res.precision != v.precision:
        res.notes.append(f"asked for {v.precision} but the pipeline built a {res.precision} artifact "
                         f"(no {v.precision} stage ran)")
    return res


def _gate(res: VariantResult, tolerance: dict[str, float]) -> None:
    if res.artifact is None:
        return
    if res.accuracy is None:
        res.meets_tolerance, res.verdict = False, "no accuracy figure"
        return
    message = check_tolerance(res.accuracy.summary(), tolerance.get("cosine"), tolerance.get("max_abs"),
                              tolerance.get("top1"))
    res.meets_tolerance = message is None
    res.verdict = "within tolerance" if message is None else f"misses: {message}"


def run_compare(model: str, variants: list[Variant], *, out: Path | None = None, inputs: list[Any] | None = None,
                target: str = "auto", calib: Path | None = None, eval_dir: Path | None = None,
                tolerance: dict[str, float] | None = None, force: bool = False,
                measure: InterleaveSettings | None = None, on_event: Event | None = None) -> CompareResult:
    """Build, measure and rank the variants; writes compare.json and compare.md into `out`."""
    emit = on_event or (lambda _e, _d: None)
    out = Path(out) if out else default_out(model)
    tol = dict(tolerance) if tolerance else dict(DEFAULT_TOLERANCE)
    # The quantize stages gate (and fall back) on the same tolerance compare ranks by, so a variant
    # their gate refuses is exactly one that misses it here.
    base = VariantBase(inputs=inputs, target=target, force=force, calib=calib, eval=eval_dir, tolerance=tol)
    configs = [(v, variant_config(model, v, out / v.name, base)) for v in variants]
    builds: list[VariantBuild] = []
    seed_from: Path | None = None
    for i, (v, config) in enumerate(configs, 1):
        emit("variant_start", {"name": v.name, "index": i, "total": len(configs)})
        build = build_variant(config, v, seed_from)
        if build.ok and seed_from is None:
            seed_from = build.out
        builds.append(build)
        status = "ok" if build.ok else ("gate-failed" if _gate_failure(build) is not None else "failed")
        emit("variant_end", {"name": v.name, "status": status, "seconds": build.wall_seconds,
                             "error": build.error.message if build.error else None})
    results = [_variant_result(b) for b in builds]
    artifacts = {r.name: resolve_artifact(r.artifact) for r in results if r.artifact is not None}
    fp32 = next((r for r in results if r.status == "ok" and r.precision == "fp32"), None)
    for r in results:  # no stage recorded one: measure against the fp32 variant
        if r.artifact is not None and r.accuracy is None and fp32 is not None and r is not fp32:
            measured_now = _measured_accuracy(artifacts[r.name], artifacts[fp32.name])
            r.accuracy, r.accuracy_source = AccuracyResult.from_json(measured_now), "measured"
    settings = measure or InterleaveSettings()
    measured = {}
    if artifacts:
        emit("phase", {"text": f"measuring {', '.join(artifacts)} interleaved"})
        measured = measure_interleaved(artifacts, settings)
    runtime = None
    for r in results:
        m = measured.get(r.name)
        if m:
            b1, b8 = m[settings.batches[0]], m[settings.batches[-1]]
            # rounded as the records' p50 is (significant), so the written p50 stays inside its interval
            r.latency_b1, r.p50_ci_ms = b1.stats, (significant(b1.ci[0]), significant(b1.ci[1]))
            r.latency_b8, r.p50_ci_b8_ms = b8.stats, (significant(b8.ci[0]), significant(b8.ci[1]))
            runtime = runtime or b1.stats.runtime
        _gate(r, tol)
    measured_rows = [r for r in results if r.latency_b1 is not None]
    result = CompareResult(model=model, out=str(out), variants=results, tolerance=tol,
                           settings={**settings.__dict__, "order": list(artifacts), "runtime": runtime},
                           environment=environment(), pareto=pareto_set(measured_rows))
    result.recommended, result.reason = recommend(results)
    chosen = result.variant(result.recommended) if result.recommended else None
    if chosen is not None:
        chosen.verdict = "recommended"
    noisy = [r.name for r in measured_rows if r.latency_b1 is not None and r.latency_b1.cv > NOISY_CV]
    if noisy:
        result.warnings.append(f"noisy measurements (latency CV above {NOISY_CV:.0%}: {', '.join(noisy)}); "
                               "compare the 95% CIs, not just the p50s")
    result.variants.sort(key=lambda r: [v.name for v in variants].index(r.name))
    out.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out / "compare.json", json.dumps(result.to_json(), indent=2, default=str) + "\n")
    write_text_atomic(out / "compare.md", result.to_markdown())
    return result
