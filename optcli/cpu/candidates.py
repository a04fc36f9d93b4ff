"""The CPU build's candidates: planned from every registered backend's recipes, then chosen by measurement.

Which candidates exist for a precision is each recipe's answer (optcli/backends/<name>/recipes/, listed
in the backend's descriptor); a backend that is not installed or not allowed by --backend turns its
candidates into skipped ones with the reason, so the report says why they are absent. Today:

| precision | onnxruntime                   | openvino                                                      |
| fp32      | the input ONNX                | FP32 IR (INFERENCE_PRECISION_HINT f32)                        |
| bf16      | - (no BF16 CPU path)          | IR with the bf16 hint (CPUs with BF16 only)                   |
| fp16      | the input ONNX                | - (no FP16 arithmetic on CPUs)                                |
| int8      | the quantize stage's graph    | that graph as IR (static Q/DQ only); NNCF (defaults, and the  |
|           |                               | transformer setting for encoders); qdq-s8s8 re-quantized      |

The choice: the fastest (median of one interleaved measurement) among the candidates that meet the
accuracy tolerance on held-out data; a candidate that misses it is never chosen.
"""
from __future__ import annotations

from typing import Any

from optcli.backends.recipe import Candidate, PlanFacts, PlanRequest
from optcli.search.elimination import TIE_BAND  # one tie rule for the search and the choice

__all__ = ["Candidate", "backend_facts", "choose", "plan"]


def plan(req: PlanRequest) -> list[Candidate]:
    """Every registered backend's candidates for the request, in registration and recipe order (pure given
    `req`: what is installed comes from req.installed where it says, and facts from req.facts)."""
    from optcli.backends.registry import ONNX, all_backends, load_object

    cands: list[Candidate] = []
    for backend in all_backends():
        installed = req.installed.get(backend.name)
        for ref in backend.cpu_recipes:
            recipe = load_object(ref)
            for cand in recipe.plan(req):
                if cand.skip is None and recipe.needs_onnx and req.input_format != ONNX:
                    cand.skip = "the run has no ONNX (the export to ONNX failed or was not needed)"
                if cand.skip is None and req.no_int8_graph and req.precision == "int8" and recipe.needs_int8_graph:
                    cand.skip = req.no_int8_graph
                if cand.skip is None and req.backend not in ("auto", backend.name):
                    cand.skip = f"--backend {req.backend}"
                if cand.skip is None and not (backend.installed() if installed is None else installed):
                    cand.skip = f"{backend.package} is not installed ({backend.install_hint})"
                cands.append(cand)
    return cands


def backend_facts(precision: str, cfg: Any) -> dict[str, PlanFacts]:
    """Each registered backend's planning facts (PlanRequest.facts) for `precision` under [cpu] `cfg`."""
    from optcli.backends import registry

    return {b.name: registry.load_object(b.cpu_facts)(precision, cfg) for b in registry.all_backends() if b.cpu_facts}


COSINE_TIE = 1e-4


def choose(candidates: list[Candidate]) -> tuple[Candidate | None, str]:
    """The fastest candidate that met the tolerance, and a sentence saying why."""
    measured = [c for c in candidates if c.passed and c.p50 is not None]
    if not measured:
        failed = [c for c in candidates if not c.skip]
        if not failed:
            return None, "no candidate could be built"
        return None, "no candidate meets the tolerance: " + "; ".join(f"{c.name}: {c.failure}" for c in failed)
    ranked = sorted(measured, key=lambda c: (_p50(c), c.name))
    fastest = ranked[0]
    if len(ranked) == 1:
        return fastest, f"the only candidate within tolerance ({fastest.p50:.3f} ms p50)"
    # Candidates the measurement cannot tell from the fastest (overlapping 95% intervals of the
    # median, or within TIE_BAND of it) are ties. Among ties the more accurate wins (cosines within
    # COSINE_TIE count as equal), then the simpler recipe, then the name: no accuracy is traded for an
    # unmeasurable gain, and repeated compiles of one model choose the same artifact.
    ties = [c for c in ranked if _overlaps(fastest, c) or _p50(c) <= _p50(fastest) * (1 + TIE_BAND)]
    best = min(ties, key=lambda c: (-round(_cosine(c) / COSINE_TIE), c.simplicity, c.name))
    others = [c for c in ranked if c is not best]
    runner_up = others[0]
    ratio = _p50(runner_up) / _p50(best) if best.p50 else float("inf")
    if best is fastest:
        note = (f"fastest of {len(ranked)} within tolerance: {best.p50:.3f} ms p50, "
                f"{ratio:.2f}x the speed of {runner_up.name}")
        if len(ties) > 1:
            note += f" (within noise of {', '.join(c.name for c in ties if c is not best)}, and the most accurate)"
    else:
        note = (f"{best.name} ({best.p50:.3f} ms p50) is within noise of the fastest, {fastest.name} "
                f"({fastest.p50:.3f} ms), and "
                + (f"more accurate (mean cosine {_cosine(best):.5f} vs {_cosine(fastest):.5f})"
                   if round(_cosine(best) / COSINE_TIE) > round(_cosine(fastest) / COSINE_TIE)
                   else "as accurate and simpler"))
    return best, note


def _cosine(c: Candidate) -> float:
    return float((c.accuracy or {}).get("cosine_mean", 0.0))


def _p50(c: Candidate) -> float:
    """A measured candidate's p50 (choose() ranks only those)."""
    assert c.p50 is not None
    return c.p50


def _overlaps(a: Candidate, b: Candidate) -> bool:
    if a is b:
        return True
    ci, ci2 = (a.latency.get("p50_ci") if a.latency else None), (b.latency.get("p50_ci") if b.latency else None)
    return bool(ci and ci2 and ci[1] >= ci2[0] and ci2[1] >= ci[0])
