"""INT8 with calibration, an accuracy gate against FP32 on held-out data, and the fallback search that
keeps the units that break INT8 in float: the work of the quantize-int8 stage, as a function that
stage and the CPU build (its s8/s8 candidate) both call, so no stage imports another.

Quantize -> evaluate -> if the tolerance holds, done; else the fallback search (quantize/fallback.py)
finds the compute units to keep in float within --fallback-budget, and the report names them in
the user's module paths. Missing the tolerance even then: the closest result stays in the folder,
and with --target cpu the CPU build's own INT8 candidates (NNCF, ...) try before the run gives up.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from optcli.accuracy import check_tolerance
from optcli.accuracy_summary import AccuracySummary, headline
from optcli.artifact import Artifact
from optcli.backends.registry import ONNX, graph_needs
from optcli.calibration.dataset import SampleSet
from optcli.calibration.split import cap_note, split_calibration
from optcli.latency import stats_from_samples, time_calls
from optcli.onnx_model import graph_view, io_specs, looks_like_encoder, op_histogram, remove_onnx
from optcli.plan.stage_names import StageName
from optcli.quantize.calibrate import compute_ranges
from optcli.quantize.evaluate import evaluate, reference_outputs
from optcli.quantize.fallback import Quantizer, closest_summary, run_fallback
from optcli.quantize.flavour import reduce_range, resolve_flavour
from optcli.quantize.int8 import candidate_nodes, int8_op_counts, name_nodes
from optcli.quantize.module_names import check_exclude_ops, node_modules, resolve_excludes
from optcli.quantize.units import compute_units


def _quick_latency(path: Path, samples: SampleSet, options: dict[str, Any] | None = None) -> float:
    """p50 ms at batch 1 (ORT, all optimizations): the before/after figure of the fallback."""
    from optcli.backends.onnxruntime.runner import OnnxRuntimeRunner

    runner = OnnxRuntimeRunner(path, **(options or {}))
    try:
        feeds = runner.normalize(samples.take(slice(0, 1)).arrays)
        stats = stats_from_samples(time_calls(lambda: runner.run_normalized(feeds), runs=30, min_seconds=0.3,
                                              max_seconds=2.0), 1, runner.backend)
    finally:
        runner.close()
    return round(stats.p50, 4)


def quantize_int8(ctx: Any, artifact: Artifact, workdir: Path, tol: Any, stage_name: str = StageName.QUANTIZE_INT8,
                  defer_fallback: bool = False) -> tuple[Artifact, dict[str, Any], AccuracySummary]:
    """The FP32 ONNX `artifact` -> (INT8 artifact in `workdir`, the stage details, its accuracy).
    `defer_fallback` (the plan's int8_fallback_deferred): on a miss, no fallback search here; the CPU build's other
    candidates go first and it runs this fallback only if none of them meets the tolerance."""
    q = ctx.config.quantize
    fp32 = workdir / "fp32-named.onnx"
    name_nodes(artifact.path, fp32)
    model = graph_view(fp32)
    graph = model.graph
    specs, _ = io_specs(model)
    calib, ev = split_calibration(q, specs, holdout_needed=True)
    flavour = resolve_flavour(q.flavour, ctx.target, looks_like_encoder(op_histogram(model)))
    candidates = candidate_nodes(fp32, flavour)
    units, total_flops = compute_units(fp32, flavour, earlier_onnx(ctx))
    ops = check_exclude_ops(q.exclude_ops, {n.op_type for n in graph.node}, earlier_op_types(ctx, q.exclude_ops))
    manual = sorted(set(user_excludes(ctx, model)) | {n.name for n in graph.node if n.op_type in ops})
    ranges, calib_info = (None, {"method": None, "samples": len(calib),
                                 "note": "dynamic INT8 computes ranges at run time"})
    if flavour.static:
        ranges, calib_info = compute_ranges(fp32, artifact.sha256, calib, q.calib_method,
                                            flavour.activation_symmetric, flavour.op_types,
                                            ctx.out_dir / "calibration-cache", force=ctx.config.force)
    calib_info = {**calib_info, **cap_note(calib, q)}
    reference, _ = reference_outputs(ctx.state.fp32_outputs, fp32, artifact.sha256, ev, ctx.runners,
                                     ctx.config.bench.threads)
    out = workdir / "model.onnx"
    qz = Quantizer(fp32, flavour, ranges, q.calib_method, manual, {u.node: u.nodes for u in units},
                   fp16_base=fp16_base(ctx, flavour))
    session = {"runner_options": {"threads": ctx.config.bench.threads, **(qz.runner_options or {})},
               "pool": ctx.runners}  # the row's
    counts = qz.write(out, [])
    first = evaluate(out, reference, ev, **session)
    failure = check_tolerance(first, tol.cosine, tol.max_abs, tol.top1)
    fp16_missed = None
    if failure is not None and qz.fp16_base:
        # FP16 cannot hold every model's activations (a random-weights MobileNetV2's outputs are ~1e-26,
        # zero in FP16): before searching units to keep in float, try the float parts in FP32.
        fp16_missed = {"accuracy": headline(first), "failure": failure}
        qz.fp16_base = False
        counts = qz.write(out, [])
        first = evaluate(out, reference, ev, **session)
        failure = check_tolerance(first, tol.cosine, tol.max_abs, tol.top1)
    fallback = None
    excluded: list[str] = []
    float_nodes: set[str] = set()
    deferred = failure is not None and q.fallback and bool(units) and defer_fallback
    if failure is not None and q.fallback and units and not deferred:
        latency = {"fp32": _quick_latency(fp32, ev), "before": _quick_latency(out, ev, qz.runner_options)}
        result, fallback = run_fallback(qz, out, units, total_flops, reference, ev, tol, q.fallback_budget, workdir)
        excluded = sorted(result.best.excluded)
        float_nodes = {n for u in units if u.node in result.best.excluded for n in u.nodes}
        if excluded:
            counts = qz.write(out, excluded)
        latency["after"] = _quick_latency(out, ev, qz.runner_options) if excluded else latency["before"]
        fallback.update(accuracy_before=headline(first), latency_p50_ms_fp32=latency["fp32"],
                        latency_p50_ms_before=latency["before"], latency_p50_ms_after=latency["after"])
        if excluded and latency["after"] >= latency["fp32"]:
            # Float units between INT8 ones cost layout changes and Q/DQ: on ResNet-50 (u8s8) 18
            # units in float ran at 0.88x FP32 while plain INT8 ran at 2.07x (docs/benchmarks/fallback.md).
            fallback["warning"] = (f"the result ran no faster than FP32 (p50 {latency['after']} ms vs "
                                   f"{latency['fp32']} ms, a quick measurement): loosen the tolerance, or "
                                   "keep whole blocks in float with --exclude")
    final_acc = evaluate(out, reference, ev, **session) if excluded else first.copy()
    final_acc["reference"] = "fp32-onnx"
    if fallback is not None:
        fallback["accuracy_after"] = headline(final_acc)
        missed = check_tolerance(final_acc, tol.cosine, tol.max_abs, tol.top1)
        if missed:
            final_acc["fallback_closest"] = closest_summary(fallback)
            if ctx.plan.int8_gate_deferred:
                final_acc["gate_deferred_to"] = StageName.BUILD
    if deferred:
        final_acc["gate_deferred_to"] = StageName.BUILD
    elif failure is not None and fallback is None and ctx.plan.int8_gate_deferred:
        # No fallback search ran (--no-fallback, or nothing to exclude): the CPU build's own INT8 candidates,
        # or the FP32 graph under --allow-float, still get their turn before the run fails.
        final_acc["gate_deferred_to"] = StageName.BUILD
    if excluded:
        c = int8_op_counts(out)
        final_acc["int8_ops_after_fallback"] = c["quantize_linear"] + c["dynamic_quantize"]
    remove_onnx(fp32)
    details = {"flavour": {**flavour.to_json(), "weights_7bit": reduce_range(flavour),
                           "float_parts": "fp16" if qz.fp16_base else "fp32",
                           **({"fp16_missed": fp16_missed} if fp16_missed else {})}, "calibration": calib_info,
               "evaluation": {"samples": len(ev), "data": ev.source, "labels": ev.labels is not None,
                              "reference": "fp32 onnx (the stage input, verified against PyTorch at export)"},
               "tolerance": tol.to_json(), "excluded_by_user": manual, "fallback": fallback,
               **({"fallback_deferred": "to the CPU build: its other INT8 candidates go first; it runs this fallback "
                                        "only if none meets the tolerance (--search fast; thorough runs it here)"}
                  if deferred else {}),
               "attempts": [{"round": 0, "excluded": len(manual), "accuracy": headline(first),
                             "passed": failure is None, **counts}],
               "quantized_nodes": len([c for c in candidates if c not in set(manual) | float_nodes])}
    # caught here, on any machine, not by the target's parser on a GPU
    graph_needs(ctx.target).check_graph(out, "the INT8 ONNX")
    return (Artifact(out, ONNX, precision="int8", stage=stage_name, parent=artifact.sha256,
                     meta={"flavour": f"int8-{flavour.name}" + ("+fp16" if qz.fp16_base else ""),
                           **({"runner_options": qz.runner_options} if qz.runner_options else {}),
                           **({"fallback_deferred": True} if deferred else {}),
                           "accuracy": judged(final_acc, artifact.sha256, ev)}),
            details, final_acc)


def fp16_base(ctx: Any, flavour: Any) -> bool:
    """--int8 on a target whose builder says so (TensorRT): FP16 where no Q/DQ stands, unless --no-fp16
    (issue 29, F6)."""
    return bool(flavour.static and graph_needs(ctx.target).int8_fp16(ctx.config))


def judged(accuracy: AccuracySummary, reference_sha: str, ev: SampleSet) -> AccuracySummary:
    """The accuracy an artifact was judged at, and against what (the FP32 model, the held-out data): the CPU build
    reuses it for the same artifact instead of running the held-out set again."""
    kept = accuracy.copy()
    kept.pop("reference", None)
    kept.pop("fallback_closest", None)
    kept.pop("gate_deferred_to", None)
    kept["judged"] = {"reference": reference_sha, "eval": ev.digest()}
    return kept


def user_excludes(ctx: Any, model: Any) -> list[str]:
    """--exclude patterns (ONNX node names, PyTorch module paths, globs) as node names of `model` (a graph,
    or a file read only where there are patterns); module paths come from the run's earlier graphs too (a
    rewrite may drop the exporter's metadata)."""
    patterns = ctx.config.quantize.exclude_nodes
    if not patterns:
        return []
    if isinstance(model, Path):
        model = graph_view(model)
    modules = node_modules(model, *[graph_view(p) for p in earlier_onnx(ctx)])
    return resolve_excludes(patterns, [n.name for n in model.graph.node], modules)


def earlier_op_types(ctx: Any, wanted: list[str]) -> set[str]:
    """Op types of the run's earlier graphs (read only when --exclude-op names some)."""
    return {n.op_type for p in earlier_onnx(ctx) for n in graph_view(p).graph.node} if wanted else set()


def earlier_onnx(ctx: Any) -> list[Path]:
    """Earlier ONNX graphs of this run (the exporter's keeps module metadata a rewrite may drop)."""
    seen = ctx.state.artifacts.values()
    return [a.path for a in seen if getattr(a, "format", None) == ONNX and a.path.exists()]
