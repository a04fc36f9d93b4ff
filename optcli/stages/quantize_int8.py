"""Stage quantize-int8: INT8 on the ONNX graph with calibration data, an accuracy gate against FP32
on held-out data, and automatic fallback that keeps the most damaging nodes in float.

Loop: quantize -> evaluate -> if the tolerance holds, done; else measure each quantized node's local
damage (sensitivity.py), keep the worst 1, 2, 4, ... in float, re-quantize, re-evaluate; stop when the
tolerance holds or nothing is left to exclude. Every attempt is in the report.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from optcli.accuracy import check_tolerance
from optcli.artifact import Artifact
from optcli.calibration.dataset import SampleSet, load_samples
from optcli.errors import UsageError
from optcli.latency import stats_from_samples, time_calls
from optcli.onnx_model import io_specs, load_onnx, looks_like_encoder, op_histogram
from optcli.quantize.calibrate import compute_ranges
from optcli.quantize.evaluate import evaluate, run_model
from optcli.quantize.flavour import resolve_flavour
from optcli.quantize.int8 import candidate_nodes, int8_op_counts, name_nodes, quantize
from optcli.quantize.sensitivity import node_damage
from optcli.quantize.tolerance import effective
from optcli.stages.base import Stage, StageResult, config_dict, register
from optcli.tensorrt.preflight import require_clean

MAX_FALLBACK_ROUNDS = 8
MAX_EVAL_SAMPLES = 512


def split_calibration(cfg: Any, specs: list, holdout_needed: bool) -> tuple[SampleSet, SampleSet]:
    """(calibration set, evaluation set): --eval DIR, else the calibration samples not used to calibrate."""
    q = cfg
    if q.eval is not None:
        calib = load_samples(Path(q.calib), specs, q.calib_reader, q.calib_options, limit=q.calib_samples,
                             minimum=q.calib_samples or 1)
        ev = load_samples(Path(q.eval), specs, None, {}, limit=MAX_EVAL_SAMPLES, minimum=1, what="evaluation")
        return calib, ev
    data = load_samples(Path(q.calib), specs, q.calib_reader, q.calib_options, minimum=(q.calib_samples or 1))
    n = len(data)
    n_calib = min(q.calib_samples or max(1, (n * 3) // 4), n)
    if n - n_calib < 2:
        if holdout_needed:
            raise UsageError(f"no held-out samples for the accuracy check: {n} samples, {n_calib} used to calibrate",
                             hint="pass --eval DIR, or lower --calib-samples so some samples are left over")
        return data, data
    return data.take(slice(0, n_calib)), data.take(slice(n_calib, min(n, n_calib + MAX_EVAL_SAMPLES)))


def _quick_latency(path: Path, samples: SampleSet) -> float:
    """p50 ms at batch 1 (ORT, all optimizations): the before/after figure of the fallback."""
    from optcli.runtime.onnxruntime_runner import OnnxRuntimeRunner

    runner = OnnxRuntimeRunner(path)
    try:
        feeds = runner.normalize(samples.take(slice(0, 1)).arrays)
        stats = stats_from_samples(time_calls(lambda: runner.run_normalized(feeds), runs=30, min_seconds=0.3,
                                              max_seconds=2.0), 1, runner.backend)
    finally:
        runner.close()
    return round(stats.p50, 4)


def _brief(acc: dict[str, Any]) -> dict[str, Any]:
    keys = ("cosine_mean", "cosine_min", "max_abs_err", "top1_agreement", "top1_accuracy", "top1_accuracy_reference")
    return {k: round(acc[k], 6) for k in keys if k in acc}


MAX_PRUNE_TRIES = 16


@register
class QuantizeInt8Stage(Stage):
    """FP32 ONNX -> INT8 ONNX (Q/DQ or dynamic), gated on accuracy, with automatic fallback."""

    name = "quantize-int8"
    order = 40
    measure_optimization = "all"

    @classmethod
    def enabled(cls, config: Any) -> bool:
        return config.quantize.precision == "int8"

    def skip_reason(self, artifact: Artifact) -> str | None:
        return None if artifact.format == "onnx" else f"input is {artifact.format}, not ONNX"

    def tolerance(self) -> Any:
        a = self.ctx.config.accuracy
        return effective("int8", a.cosine, a.max_abs, a.top1)

    def fingerprint(self) -> dict[str, Any]:
        q = config_dict(self.ctx.config.quantize)
        # The data's bytes, not just its path: edit a sample and the stage reruns.
        from optcli.artifact import sha256_file

        for key in ("calib", "eval"):
            if q.get(key):
                q[f"{key}_sha256"] = sha256_file(Path(q[key])) if Path(q[key]).exists() else None
        from optcli.quantize import flavour

        # Which ops each flavour quantizes is part of the output: a change must invalidate the cache.
        table = {n: list(f.op_types) for n, f in flavour.TABLE.items()}
        return {"quantize": q, "tolerance": self.tolerance().to_json(), "target": self.ctx.target,
                "flavours": table, "methods": {"bins": 2048, "percentile": 99.99}}

    def gate(self, accuracy: dict[str, Any]) -> str | None:
        t = self.tolerance()
        failure = check_tolerance(accuracy, t.cosine, t.max_abs, t.top1)
        if failure is None and accuracy.get("int8_ops_after_fallback") == 0:
            # Excluding everything "passes" with an FP32 model: that is not an INT8 result.
            return "no node could stay INT8 within the tolerance (the fallback excluded all of them)"
        return failure

    def _prune(self, fp32: Path, out: Path, flavour: Any, ranges: Path | None, manual: list[str],
               excluded: list[str], reference: list, ev: SampleSet, tol: Any, attempts: list) -> list[str]:
        """Exclusion doubles each round, so it overshoots: put nodes back (most recent first) while the
        tolerance still holds. Leaves `out` quantized with the final exclusion list."""
        keep = list(excluded)
        trial = out.with_name("prune.onnx")
        for node in list(reversed(excluded))[:MAX_PRUNE_TRIES]:
            candidate = [n for n in keep if n != node]
            quantize(fp32, trial, flavour, ranges, self.ctx.config.quantize.calib_method, manual + candidate)
            acc = evaluate(trial, reference, ev)
            ok = check_tolerance(acc, tol.cosine, tol.max_abs, tol.top1) is None
            attempts.append({"round": f"prune {node}", "excluded": len(manual) + len(candidate),
                             "accuracy": _brief(acc), "passed": ok})
            if ok:
                keep = candidate
                trial.replace(out)
        trial.unlink(missing_ok=True)  # `out` holds the last configuration that passed
        return keep

    def run(self, artifact: Artifact, workdir: Path) -> StageResult:
        q = self.ctx.config.quantize
        fp32 = workdir / "fp32-named.onnx"
        name_nodes(artifact.path, fp32)
        specs, _ = io_specs(load_onnx(fp32, load_weights=False))
        calib, ev = split_calibration(q, specs, holdout_needed=True)
        flavour = resolve_flavour(q.flavour, self.ctx.target, looks_like_encoder(op_histogram(load_onnx(fp32, False))))
        candidates = candidate_nodes(fp32, flavour)
        all_names = {n.name: n.op_type for n in load_onnx(fp32, load_weights=False).graph.node}
        unknown = [n for n in q.exclude_nodes if n not in all_names]
        if unknown:
            raise UsageError(f"--exclude {unknown[0]}: no node of that name",
                             hint=f"quantizable nodes include: {', '.join(candidates[:8])}{' ...' if len(candidates) > 8 else ''}")
        manual = sorted(set(q.exclude_nodes) | {n for n, op in all_names.items() if op in q.exclude_ops})
        ranges, calib_info = (None, {"method": None, "samples": len(calib), "note": "dynamic INT8 computes ranges at run time"})
        if flavour.static:
            ranges, calib_info = compute_ranges(fp32, artifact.sha256, calib, q.calib_method,
                                                flavour.activation_symmetric, flavour.op_types,
                                                self.ctx.out_dir / "calibration-cache", force=self.ctx.config.force)
        reference, _ = run_model(fp32, ev)
        tol = self.tolerance()
        out = workdir / "model.onnx"
        excluded_auto: list[str] = []
        attempts: list[dict[str, Any]] = []
        latency_first = None
        for round_no in range(MAX_FALLBACK_ROUNDS + 1):
            exclude = manual + excluded_auto
            counts = quantize(fp32, out, flavour, ranges, q.calib_method, exclude)
            acc = evaluate(out, reference, ev)
            failure = check_tolerance(acc, tol.cosine, tol.max_abs, tol.top1)
            attempts.append({"round": round_no, "excluded": len(exclude), "accuracy": _brief(acc),
                             "passed": failure is None, **counts})
            if round_no == 0:
                latency_first = _quick_latency(out, ev)
            if failure is None or not q.fallback:
                break
            remaining = [c for c in candidates if c not in exclude]
            if not remaining:
                break
            damage = node_damage(fp32, out, remaining, ev)
            ranked = [n for n, d in sorted(damage.items(), key=lambda kv: -kv[1]) if d > 0]
            if not ranked:
                ranked = remaining  # no local signal: fall back to graph order
            excluded_auto += ranked[:2 ** round_no]
        if excluded_auto and attempts[-1]["passed"]:
            excluded_auto = self._prune(fp32, out, flavour, ranges, manual, excluded_auto, reference, ev, tol, attempts)
        final_acc = evaluate(out, reference, ev)
        final_acc["reference"] = "fp32-onnx"
        if excluded_auto:
            counts = int8_op_counts(out)
            final_acc["int8_ops_after_fallback"] = counts["quantize_linear"] + counts["dynamic_quantize"]
        fallback = None
        if excluded_auto:
            fallback = {"excluded_nodes": excluded_auto,
                        "accuracy_before": attempts[0]["accuracy"], "accuracy_after": _brief(final_acc),
                        "latency_p50_ms_before": latency_first, "latency_p50_ms_after": _quick_latency(out, ev),
                        "rounds": len(attempts) - 1}
        fp32.unlink()
        details = {"flavour": flavour.to_json(), "calibration": calib_info,
                   "evaluation": {"samples": len(ev), "data": ev.source, "labels": ev.labels is not None,
                                  "reference": "fp32 onnx (the stage input, verified against PyTorch at export)"},
                   "tolerance": tol.to_json(), "excluded_by_user": manual, "fallback": fallback, "attempts": attempts,
                   "quantized_nodes": len([c for c in candidates if c not in manual + excluded_auto])}
        if self.ctx.target == "tensorrt":  # caught here, on any machine, not by the parser on a GPU
            require_clean(out, "the INT8 ONNX")
        return StageResult(Artifact(out, "onnx", precision="int8", stage=self.name, parent=artifact.sha256,
                                    meta={"flavour": f"int8-{flavour.name}"}), details, accuracy=final_acc)

