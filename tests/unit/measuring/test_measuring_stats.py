"""Statistics behind bench/compare: the bootstrap CI of the median, concurrent timing, the knee."""
from __future__ import annotations

import threading

import numpy as np
import pytest

from optcli.benchmark.sweep import SweepPoint, find_knee
from optcli.latency import median_ci, stats_from_samples, time_concurrent


@pytest.mark.parametrize("n", [5, 8, 61, 400])
def test_median_ci_matches_an_explicit_bootstrap(n: int) -> None:
    rng = np.random.default_rng(n)
    a = rng.lognormal(0.0, 0.6, n)
    medians = np.median(a[rng.integers(0, n, size=(40000, n))], axis=1)
    want = np.percentile(medians, [2.5, 97.5])
    got = median_ci(a, resamples=40000)
    spread = want[1] - want[0]
    assert got[0] == pytest.approx(want[0], abs=0.05 * spread)
    assert got[1] == pytest.approx(want[1], abs=0.05 * spread)
    assert got[0] <= np.median(a) <= got[1]


def test_median_ci_of_constant_samples_is_a_point() -> None:
    assert median_ci([2.5] * 1000) == (2.5, 2.5)
    with pytest.raises(ValueError):
        median_ci([])


def test_time_concurrent_runs_that_many_callers_at_once() -> None:
    active, peak, lock = [0], [0], threading.Lock()
    barrier_hits = []

    def call() -> None:
        with lock:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
        threading.Event().wait(0.002)
        with lock:
            active[0] -= 1
        barrier_hits.append(1)

    samples, wall = time_concurrent(call, 3, warmup_runs=2, warmup_seconds=0.0, runs=30, min_seconds=0.05,
                                    max_seconds=2.0)
    assert len(samples) >= 30 and peak[0] == 3
    assert all(s >= 1.5 for s in samples)                 # each call slept 2 ms
    assert wall > 0 and len(barrier_hits) >= len(samples) + 3 * 2


def test_time_concurrent_reraises_a_failing_call() -> None:
    calls = [0]

    def call() -> None:
        calls[0] += 1
        if calls[0] > 10:
            raise RuntimeError("backend died")

    with pytest.raises(RuntimeError, match="backend died"):
        time_concurrent(call, 2, warmup_runs=1, warmup_seconds=0.0, runs=1000, min_seconds=5, max_seconds=5)


def _point(batch: int, conc: int, p99: float, throughput: float) -> SweepPoint:
    stats = stats_from_samples([p99 / 2, p99 / 2, p99], batch, "test")
    stats.p99, stats.p90 = p99, p99 / 2
    return SweepPoint(batch, conc, stats, throughput, (p99 / 2, p99 / 2))


def test_knee_with_a_latency_budget() -> None:
    points = [_point(1, 1, 1.0, 1000), _point(8, 1, 4.0, 3000), _point(8, 4, 9.0, 5000), _point(32, 4, 30.0, 5200)]
    knee = find_knee(points, budget_ms=10.0)
    assert (knee["batch"], knee["concurrency"]) == (8, 4)
    assert "p99 <= 10 ms" in knee["reason"]
    none = find_knee(points, budget_ms=0.5)
    assert none["batch"] is None and "lowest: 1.000 ms at batch 1, concurrency 1" in none["reason"]
    by_p90 = find_knee(points, budget_ms=16.0, percentile="p90")            # p90 = half the p99 here
    assert (by_p90["batch"], by_p90["concurrency"]) == (32, 4) and "p90 <= 16 ms" in by_p90["reason"]
    assert (find_knee(points, budget_ms=16.0)["batch"], find_knee(points, budget_ms=16.0)["concurrency"]) == (8, 4)


def test_knee_without_budget_is_where_more_stops_paying() -> None:
    points = [_point(1, 1, 1.0, 1000), _point(8, 1, 4.0, 4700), _point(32, 1, 20.0, 5000)]
    knee = find_knee(points, budget_ms=None)
    assert (knee["batch"], knee["concurrency"]) == (8, 1)     # 94% of the best at a fifth of the p99
