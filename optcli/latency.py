"""Latency measurement: warm-up, timed runs with perf_counter, and the statistics reported."""
from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np


@dataclass
class LatencyStats:
    """Per-call latency in milliseconds over `runs` timed calls at `batch`."""

    p50: float
    p90: float
    p99: float
    mean: float
    min: float
    max: float
    std: float
    runs: int
    batch: int
    runtime: str
    settings: dict[str, Any] = field(default_factory=dict)

    @property
    def cv(self) -> float:
        """Coefficient of variation (std / mean): above ~0.1 the machine was noisy."""
        return self.std / self.mean if self.mean > 0 else 0.0

    @property
    def throughput(self) -> float:
        """Samples per second at this batch, from the mean."""
        return self.batch * 1000.0 / self.mean if self.mean > 0 else 0.0

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        for k in ("p50", "p90", "p99", "mean", "min", "max", "std"):
            d[k] = round(d[k], 4)
        d["throughput"] = round(self.throughput, 2)
        d["cv"] = round(self.cv, 4)
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> LatencyStats:
        names = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in d.items() if k in names})


def stats_from_samples(samples_ms: list[float] | np.ndarray, batch: int, runtime: str,
                       settings: dict[str, Any] | None = None) -> LatencyStats:
    a = np.asarray(samples_ms, dtype=np.float64)
    if a.size == 0:
        raise ValueError("no latency samples")
    p50, p90, p99 = np.percentile(a, [50, 90, 99])
    return LatencyStats(p50=float(p50), p90=float(p90), p99=float(p99), mean=float(a.mean()),
                        min=float(a.min()), max=float(a.max()), std=float(a.std()), runs=int(a.size),
                        batch=batch, runtime=runtime, settings=dict(settings or {}))


def time_calls(fn: Callable[[], Any], *, warmup_runs: int = 5, warmup_seconds: float = 0.2,
               runs: int = 50, min_seconds: float = 0.5, max_seconds: float = 5.0) -> list[float]:
    """Call `fn` for warm-up (by count AND time), then time at least `runs` calls and `min_seconds`,
    stopping at `max_seconds` (but never before 3 timed calls). Returns milliseconds per call."""
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
    return samples


def median_ci(samples_ms: list[float] | np.ndarray, confidence: float = 0.95, resamples: int = 1000,
              seed: int = 0) -> tuple[float, float]:
    """Bootstrap confidence interval of the median."""
    a = np.asarray(samples_ms, dtype=np.float64)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, a.size, size=(resamples, a.size))
    medians = np.median(a[idx], axis=1)
    lo, hi = np.percentile(medians, [(1 - confidence) / 2 * 100, (1 + confidence) / 2 * 100])
    return float(lo), float(hi)


def ratio(a: float, b: float) -> float:
    """a / b, NaN-safe for reporting speedups."""
    return a / b if b and not math.isnan(b) else float("nan")
