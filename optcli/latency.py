"""Latency measurement: warm-up, timed runs with perf_counter, and the statistics reported."""
from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from optcli.report.records import LatencyStats  # the report's record; measured here


def stats_from_samples(samples_ms: list[float] | np.ndarray, batch: int, runtime: str,
                       settings: Mapping[str, object] | None = None) -> LatencyStats:
    a = np.asarray(samples_ms, dtype=np.float64)
    if a.size == 0:
        raise ValueError("no latency samples")
    p50, p90, p99 = np.percentile(a, [50, 90, 99])
    return LatencyStats(p50=float(p50), p90=float(p90), p99=float(p99), mean=float(a.mean()),
                        min=float(a.min()), max=float(a.max()), std=float(a.std()), runs=int(a.size),
                        batch=batch, runtime=runtime, settings=dict(settings or {}))


def time_calls(fn: Callable[[], Any], *, warmup_runs: int = 5, warmup_seconds: float = 0.2,
               runs: int = 50, min_seconds: float = 0.5, max_seconds: float = 5.0,
               settle: float | None = None, settle_min_runs: int | None = None,
               settle_min_seconds: float = 0.0) -> list[float]:
    """Call `fn` for warm-up (by count AND time), then time at least `runs` calls and `min_seconds`,
    stopping at `max_seconds` (but never before 3 timed calls). With `settle` (e.g. 0.025) it also
    stops, from `settle_min_runs` (SETTLE_MIN_RUNS) calls and `settle_min_seconds` on, once the median's
    95% interval is within +-settle of it. Returns milliseconds per call."""
    first_check = max(settle_min_runs or SETTLE_MIN_RUNS, 3)
    start = time.perf_counter()
    done = 0
    while done < warmup_runs or time.perf_counter() - start < warmup_seconds:
        fn()
        done += 1
    samples: list[float] = []
    t_begin = time.perf_counter()
    while True:
        t0 = time.perf_counter()
        fn()
        t1 = time.perf_counter()
        samples.append((t1 - t0) * 1000.0)
        elapsed = t1 - t_begin
        if len(samples) >= 3 and elapsed >= max_seconds:
            break
        if len(samples) >= runs and elapsed >= min_seconds:
            break
        if settle and len(samples) >= first_check and len(samples) % 5 == 0 and elapsed >= settle_min_seconds \
                and _settled(samples, settle):
            break
    return samples


SETTLE_MIN_RUNS = 10


def _settled(samples: list[float], settle: float) -> bool:
    lo, hi = median_ci(samples, resamples=200)
    mid = float(np.median(samples))
    return mid > 0 and (hi - lo) / 2 <= settle * mid


def time_concurrent(fn: Callable[[], Any], concurrency: int, *, warmup_runs: int = 5, warmup_seconds: float = 0.2,
                    runs: int = 50, min_seconds: float = 0.5, max_seconds: float = 5.0) -> tuple[list[float], float]:
    """`concurrency` threads call `fn` back to back (each warms up by count AND time first, then all
    start together); timing stops once `runs` calls and `min_seconds` are done, or at `max_seconds`.
    Returns (milliseconds per call, wall seconds from the common start to the last call's end).
    With one thread it is time_calls in the caller's thread."""
    if concurrency == 1:
        samples = time_calls(fn, warmup_runs=warmup_runs, warmup_seconds=warmup_seconds, runs=runs,
                             min_seconds=min_seconds, max_seconds=max_seconds)
        return samples, sum(samples) / 1000.0
    start_gate = threading.Barrier(concurrency + 1)
    stop = threading.Event()
    per_thread: list[list[float]] = [[] for _ in range(concurrency)]
    ends = [0.0] * concurrency
    errors: list[BaseException] = []

    def worker(i: int) -> None:
        try:
            t0, done = time.perf_counter(), 0
            while done < warmup_runs or time.perf_counter() - t0 < warmup_seconds:
                fn()
                done += 1
        except BaseException as exc:  # re-raised in the caller's thread
            errors.append(exc)
            stop.set()
        try:
            start_gate.wait()
        except threading.BrokenBarrierError:
            return
        mine = per_thread[i]
        try:
            while not stop.is_set():
                a = time.perf_counter()
                fn()
                b = time.perf_counter()
                mine.append((b - a) * 1000.0)
        except BaseException as exc:
            errors.append(exc)
            stop.set()
        ends[i] = time.perf_counter()

    threads = [threading.Thread(target=worker, args=(i,), daemon=True, name=f"optcli-bench-{i}")
               for i in range(concurrency)]
    for t in threads:
        t.start()
    start_gate.wait()
    t_begin = time.perf_counter()
    try:
        while not stop.is_set():
            time.sleep(0.005)
            elapsed = time.perf_counter() - t_begin
            calls = sum(len(s) for s in per_thread)
            if (elapsed >= max_seconds and calls >= 3) or (calls >= runs and elapsed >= min_seconds) or errors:
                break
    finally:
        stop.set()
        for t in threads:
            t.join()
    if errors:
        raise errors[0]
    return [x for s in per_thread for x in s], max(ends) - t_begin


def median_ci(samples_ms: list[float] | np.ndarray, confidence: float = 0.95, resamples: int = 1000,
              seed: int = 0) -> tuple[float, float]:
    """Bootstrap confidence interval of the median, drawn without building the resamples.

    The median of a resample (n draws with replacement) is an order statistic of the sorted samples:
    the k-th smallest of n uniform indices is floor(n * U) with U ~ Beta(k, n - k + 1), and the next
    one up is U + (1 - U) * Beta(1, n - k). Sampling those gives exactly the bootstrap distribution in
    O(n log n), where resampling explicitly costs O(resamples * n): seconds for 10^5 samples.
    """
    a = np.sort(np.asarray(samples_ms, dtype=np.float64))
    n = a.size
    if n == 0:
        raise ValueError("no latency samples")
    rng = np.random.default_rng(seed)
    k = (n + 1) // 2                      # the (lower) median's rank, 1-based
    u_k = rng.beta(k, n - k + 1, size=resamples)
    lower = a[np.minimum((n * u_k).astype(np.int64), n - 1)]
    if n % 2:
        medians = lower
    else:                                 # even n: the mean of the k-th and (k+1)-th order statistics
        u_next = u_k + (1.0 - u_k) * rng.beta(1, n - k, size=resamples)
        medians = (lower + a[np.minimum((n * u_next).astype(np.int64), n - 1)]) / 2.0
    lo, hi = np.percentile(medians, [(1 - confidence) / 2 * 100, (1 + confidence) / 2 * 100])
    return float(lo), float(hi)


def ratio(a: float, b: float) -> float:
    """a / b, NaN-safe for reporting speedups."""
    return a / b if b and not math.isnan(b) else float("nan")
