"""The CPU build's candidates through the backend-agnostic search (optcli/search/): the runners that
measure them, and what the search learned written back onto each Candidate (prediction, seconds
per phase, latency, why one was not built)."""
from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, NotRequired, TypedDict

from optcli.backends.recipe import CandidateLatency
from optcli.cpu.candidates import Candidate
from optcli.cpu.options import CpuConfig
from optcli.latency import median_ci, stats_from_samples
from optcli.report.records import significant
from optcli.search.priors import SMALL_BYTES, Features, model_kind, predict
from optcli.search.search import Search, SearchResult

if TYPE_CHECKING:
    import numpy as np

    from optcli.runtime.base import BackendFeeds, Runner


class Measurement(TypedDict):
    """How the search measured (the build stage's `measurement`): interleaved blocks on the search's inputs."""

    rounds: int
    min_calls_per_block: int
    block_ms: float
    switch_ms: float
    seconds: float
    batch: int
    order: list[str]                    # the candidates measured
    features: dict[str, str]            # what the priors conditioned on (Features.to_json)
    inputs: NotRequired[str]            # evaluation samples | random inputs
    fallback: NotRequired[Measurement]  # the plan's INT8 last resort, measured after the others


def features(precision: str, ops: dict[str, int], encoder: bool, weight_bytes: int, u8s8_saturates: bool) -> Features:
    """What the priors condition on: precision, model kind, size, and the CPU's INT8 instructions."""
    return Features(precision, model_kind(ops, encoder), "small" if weight_bytes < SMALL_BYTES else "large",
                    "plain" if u8s8_saturates else "vnni")


def attempt(cand: Candidate, work: Callable[[], Any]) -> bool:
    """Run one phase of a candidate; a failure is this candidate's failure (the others still compete)."""
    from optcli.errors import OptcliError

    try:
        work()
        return True
    except OptcliError as exc:
        cand.failure = f"{'build' if cand.path is None else 'run'} failed: {exc.message}"
    except Exception as exc:  # noqa: BLE001 - a backend's own failure (OpenVINO's OpConversionFailure,
        # NNCF's) is this candidate's failure: the others still compete
        first = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ""
        cand.failure = f"{'build' if cand.path is None else 'run'} failed: {type(exc).__name__}: {first}"
    cand.accuracy = None
    return False


# Over protobuf's limit the weights dominate memory: a build that holds another copy of them pushes
# the compile past 3x the model's size (issue 15's bar). Measured on a 2.15 GB MLP: OpenVINO's and
# NNCF's candidates peaked at 8.3 GB (3.9x), took 137 s, and lost to onnxruntime's Q/DQ
# (docs/benchmarks/large-model.md).
HEAVY_BUILD_BYTES = 2**31


def skip_heavy_builds(cands: list[Candidate], search: str, weight_bytes: int) -> None:
    """In the fast search, on a model over HEAVY_BUILD_BYTES, mark the candidates of heavy-build
    backends not built, where another candidate remains to run the model."""
    from optcli.backends import registry

    if search != "fast" or weight_bytes < HEAVY_BUILD_BYTES:
        return
    heavy = [c for c in cands if not c.skip and registry.get(c.backend).heavy_builds]
    if len(heavy) == sum(not c.skip for c in cands):
        return  # nothing else would run the model: build them, the memory is the price
    for c in heavy:
        c.skip = (f"not built (fast search): the model's weights are {weight_bytes / 1e9:.1f} GB and "
                  f"{registry.get(c.backend).label}'s builds hold more copies of them (over 3x the model in "
                  "memory); --search thorough builds it")


def search_candidates(cands: list[Candidate], *, build: Callable[[Candidate], None],
                      check: Callable[[Candidate], None], open_runner: Callable[[Candidate], Any],
                      release_runner: Callable[[Any], None] = lambda r: r.close(),
                      arrays: Mapping[str, np.ndarray], batch: int, cfg: CpuConfig, feats: Features,
                      deadline: float | None,
                      budget_used: Callable[[Candidate], float | None] | None = None,
                      weight_bytes: int = 0) -> tuple[SearchResult, Measurement]:
    """Build (`build` fills cand.path), check (`check` fills cand.accuracy and cand.failure) and measure
    the candidates not skipped, fast or thorough per `cfg.search`; runners come from `open_runner` and
    go back through `release_runner`. Returns (result, measurement facts)."""
    from optcli.cpu.measure import time_block

    skip_heavy_builds(cands, cfg.search, weight_bytes)
    todo = {c.name: c for c in cands if not c.skip}
    runners: dict[str, Runner] = {}
    feeds: dict[str, BackendFeeds] = {}

    def built(name: str) -> Candidate | None:
        cand = todo[name]
        t0 = time.perf_counter()
        if not attempt(cand, lambda: build(cand)):
            return None
        cand.build["seconds"] = round(time.perf_counter() - t0, 3)
        return cand

    def passes(cand: Candidate) -> bool:
        """Whether it met the tolerance; False also where the check itself failed (recorded on cand)."""
        return bool(attempt(cand, lambda: check(cand))) and cand.failure is None

    def measure(cand: Candidate) -> list[float]:
        if cand.name not in runners:
            runners[cand.name] = open_runner(cand)
            feeds[cand.name] = runners[cand.name].normalize(arrays)
        return time_block(runners[cand.name], feeds[cand.name], cfg.calls_per_round, cfg.block_ms, cfg.switch_ms)

    search = Search(cfg.search, min_rounds=cfg.min_rounds, min_seconds=cfg.min_seconds, max_seconds=cfg.max_seconds,
                    deadline=deadline)
    try:
        result = search.run(list(todo), built, passes, measure,
                            {n: predict(feats, f"{c.backend}:{c.recipe}") for n, c in todo.items()},
                            free={n for n, c in todo.items() if c.recipe == "input"}, budget_used=budget_used)
    finally:
        for r in runners.values():
            release_runner(r)
    for e in result.entries:
        cand = todo[e.name]
        cand.search = e.facts()
        if e.status == "not built":
            cand.search.pop("reason", None)  # it is the candidate's reason
            cand.skip = f"not built ({cfg.search} search): {e.reason}"
        if e.samples:
            r = runners[e.name]
            stats = stats_from_samples(e.samples, batch, r.backend, getattr(r, "settings", {})).to_json()
            cand.latency = CandidateLatency(p50=stats["p50"], p90=stats["p90"], mean=stats["mean"], min=stats["min"],
                                            cv=stats["cv"], runs=stats["runs"],
                                            p50_ci=[significant(v) for v in median_ci(e.samples)])
    timing: Measurement = {"rounds": result.rounds, "min_calls_per_block": cfg.calls_per_round,
                           "block_ms": cfg.block_ms, "switch_ms": cfg.switch_ms,
                           "seconds": round(result.measure_seconds, 2), "batch": batch,
                           "order": [e.name for e in result.measured()], "features": feats.to_json()}
    return result, timing
