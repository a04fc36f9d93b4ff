"""The fast search's route through the pipeline on a CPU, decided once per run before the graph stages.

INT8 on a CPU has two routes to an artifact. onnxruntime's runs simplify -> fuse -> the quantize stage,
whose INT8 graph the CPU build runs as it is (or converts to an OpenVINO IR). OpenVINO's NNCF and re-quantized
candidates start from the exporter's graph and never read what those three stages write. Where the
priors (optcli/search/priors.py) say no candidate of the first route can win against the predicted
winner of the second (on a CPU with VNNI: BERT-base and MiniLM, where NNCF's transformer setting won;
ResNet-50), the fast search leaves the three stages out: on BERT-base they were 30 of a 93 s compile,
for a candidate measured 1.29x slower. `--search thorough` runs every stage and every candidate. Where
the bet loses (no OpenVINO candidate builds or passes), the CPU build runs the quantize stage's INT8 itself:
the plan's last resort (optcli/plan/run_plan.py), which holds the route and the stages it leaves out.

At FP32 and BF16 the route is simpler: simplify and fuse feed only onnxruntime's candidate, and
onnxruntime does at load (optimization "all") what they do offline: its latency on the exporter's graph,
the simplified and the fused one was 1.00 / 0.99 / 0.96x on BERT-base, 1.00 / 1.10 / 1.04x on MiniLM,
1.00 / 1.00 / 1.00x on ResNet-50 (docs/benchmarks/cpu.md). Where a candidate that starts from the
exporter's graph is planned (OpenVINO's: recipes say so with `starts_from_export`), the fast search
leaves the two out (BERT-base FP32: 15 of a 44 s compile) and onnxruntime's candidate starts from the
exporter's graph too; where the stages' graph is the only artifact (`--backend onnxruntime`, no
OpenVINO) they run.

Only for models with 16 MB of weights or more (the priors' `large`): on a small one per-call overhead
decides, and the stages cost little. Not taken where the user named nodes to exclude (those names are
the quantize stage's input graph's) or an INT8 flavour, asked for onnxruntime, where nothing of the
second route can be built here (OpenVINO missing, a model whose builds would not fit in memory), or
where its predicted winner was less accurate in the evidence (the route bets on it passing the tolerance).
"""
from __future__ import annotations

from typing import Any

from optcli.artifact import Artifact
from optcli.plan.build_choice import builds_on_cpu
from optcli.plan.route import FLOAT_ROUTE, ONNXRUNTIME_ROUTE, Route, RouteDetails

# The route's data and the stages it may leave out are the plan's (optcli/plan/route.py); deciding it is here.

# Precisions with no quantize stage on a CPU: the route leaves out the offline graph stages only.
FLOAT_PRECISIONS = ("fp32", "bf16")
SMALL = "a small model: every stage runs"

__all__ = ["FLOAT_ROUTE", "ONNXRUNTIME_ROUTE", "SMALL", "Route", "decide_route"]


def decide_route(config: Any, target: str, torch_source: bool, artifact: Artifact) -> Route:
    """The run's route on a CPU, from `artifact` (the first ONNX graph the graph stages get): the planner's
    (optcli/plan/run_plan.py), decided once per run."""
    from optcli.backends.registry import ONNX
    from optcli.cpu.options import cpu_config

    cfg = cpu_config(config)
    if not builds_on_cpu(target) or cfg.search != "fast":
        return Route()
    if config.quantize.precision in FLOAT_PRECISIONS:
        return _float_route(config, torch_source, artifact, cfg) if artifact.format == ONNX else Route()
    if config.quantize.precision != "int8":
        return Route()
    if config.quantize.exclude_nodes:
        return Route(details={"because": "--exclude names nodes of the quantize stage's input graph"})
    if config.quantize.flavour != "auto":
        return Route(details={"because": f"--int8-flavour {config.quantize.flavour} asks for the quantize stage's "
                                         "graph"})
    if artifact.format != ONNX:
        return Route()
    return _predict(config, torch_source, artifact, cfg)


def _predict(config: Any, torch_source: bool, artifact: Artifact, cfg: Any) -> Route:
    from optcli.onnx_model import graph_view, looks_like_encoder, op_histogram
    from optcli.quantize.flavour import resolve_flavour
    from optcli.search.priors import predict
    from optcli.search.search import cannot_win, effective_ratio

    ops = op_histogram(graph_view(artifact.path))
    encoder = looks_like_encoder(ops)
    flavour = resolve_flavour(config.quantize.flavour, "cpu", encoder)
    cands, feats = _planned(config, torch_source, artifact, cfg, ops, encoder, input_flavour=f"int8-{flavour.name}",
                            dynamic_input=not flavour.static)
    planned = tuple(c.name for c in cands if not c.skip)
    if feats.size != "large":
        # Per-call overhead decides on a small model, the benchmarks behind the route are of large ones,
        # and its stages cost seconds at most there: on the zoo's ALBERT (0.34 MB) the route's NNCF ran
        # at 2.3x the latency of onnxruntime's INT8, which it had not built.
        return Route(planned=planned, details={"features": feats.to_json(), "because": SMALL})
    live = [c for c in cands if not c.skip]
    preds = {c.name: predict(feats, f"{c.backend}:{c.recipe}") for c in live}
    needs = [c for c in live if c.builder is not None and c.builder.needs_int8_graph]
    others = [c for c in live if c not in needs]
    details: RouteDetails = {"features": feats.to_json(), "flavour": flavour.name,
                             "predictions": {n: p.to_json() for n, p in preds.items()}}
    if not needs or not others:
        details["because"] = "no other route" if not others else "no candidate needs the quantize stage's graph"
        return Route(planned=planned, details=details)
    lead = min(others, key=lambda c: (effective_ratio(preds[c.name]), others.index(c)))
    details["predicted_winner"] = lead.name
    if preds[lead.name].less_accurate:
        # The route bets on the predicted winner passing the tolerance: not on one the evidence had less accurate.
        details["because"] = f"the predicted winner, {lead.name}, was less accurate in the evidence"
        return Route(planned=planned, details=details)
    why = {c.name: cannot_win(preds[c.name], lead.name, preds[lead.name]) for c in needs}
    could = [n for n, reason in why.items() if reason is None]
    if could:
        details["because"] = f"{', '.join(could)} could win"
        return Route(planned=planned, details=details)
    losers = "; ".join(f"{c.name} predicted {preds[c.name].ratio:.2f}x (+-{preds[c.name].spread:.0%}) the "
                       f"winner's latency" for c in needs)
    return Route(f"{lead.name} is predicted to win and onnxruntime's INT8 route cannot ({losers}), so "
                 "only the exporter's graph is needed", details, planned=planned)


def _float_route(config: Any, torch_source: bool, artifact: Artifact, cfg: Any) -> Route:
    """FP32 / BF16: leave simplify and fuse out on a large model where a candidate that starts from the
    exporter's graph (OpenVINO's) is planned."""
    from optcli.onnx_model import graph_view, looks_like_encoder, op_histogram

    ops = op_histogram(graph_view(artifact.path))
    cands, feats = _planned(config, torch_source, artifact, cfg, ops, looks_like_encoder(ops),
                            input_flavour=artifact.meta.get("flavour"))
    planned = tuple(c.name for c in cands if not c.skip)
    details: RouteDetails = {"features": feats.to_json()}
    if feats.size != "large":
        return Route(planned=planned, details={**details, "because": SMALL})
    fresh = [c.name for c in cands if not c.skip and c.builder is not None and c.builder.starts_from_export]
    if not fresh:
        return Route(planned=planned, details={**details, "because": "no candidate starts from the exporter's graph: "
                                                               "the stages' graph is the artifact"})
    details["from_exporters_graph"] = fresh
    # The evidence (onnxruntime's latency on the exporter's, the simplified and the fused graph: within noise on
    # BERT-base, MiniLM and ResNet-50) is in docs/openvino.md, "The route": figures stay out of messages.
    return Route("onnxruntime optimizes at load what simplify and fuse do offline, and OpenVINO starts from the "
                 "exporter's graph, so onnxruntime's candidate starts from it too (docs/openvino.md, \"The route\")",
                 details,
                 stage_note="onnxruntime does this itself at load and OpenVINO starts from the exporter's graph",
                 stages=FLOAT_ROUTE, planned=planned)


def _planned(config: Any, torch_source: bool, artifact: Artifact, cfg: Any, ops: dict[str, int], encoder: bool,
             **request: Any) -> tuple[list[Any], Any]:
    """The candidates the CPU build would plan for this run's precision from `artifact` as the fast search
    does (heavy builds left out on a huge model), and the features the priors look them up by."""
    from optcli.backends.recipe import PlanRequest
    from optcli.cpu.candidates import backend_facts, plan
    from optcli.cpu.search_run import features, skip_heavy_builds
    from optcli.quantize.flavour import u8s8_saturates

    precision, size = config.quantize.precision, artifact.size_bytes
    cands = plan(PlanRequest(precision, cfg.backend, encoder=encoder, input_format=artifact.format,
                             torch_source=torch_source, batch=config.bench.batch,
                             facts=backend_facts(precision, cfg), **request))
    skip_heavy_builds(cands, "fast", size)
    return cands, features(precision, ops, encoder, size, u8s8_saturates())
