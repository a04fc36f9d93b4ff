"""`optcli bench`: latency and throughput of one artifact over a batch x concurrency sweep.

Each concurrency level gets its own runner with that many handles (sessions/contexts), and the
cores are split between them, as a server would run it. At each (batch, concurrency) point the
workers warm up (by count and by time), then call back to back; per-call latency gives the
percentiles and the bootstrap CI of the median, completed samples over wall time the throughput.
"""
from __future__ import annotations

import functools
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NotRequired, TypedDict

from optcli.backends.registry import for_format
from optcli.benchmark.feeds import FeedSource, batch_free_pins, check_batch
from optcli.environment import environment
from optcli.errors import UsageError
from optcli.latency import LatencyStats, median_ci, stats_from_samples, time_concurrent
from optcli.loaded_model import ResolvedArtifact, open_artifact
from optcli.report.records import significant
from optcli.runtime.base import BackendFeeds

if TYPE_CHECKING:
    from optcli.batching import BatchingJson

SCHEMA_VERSION = 1
NOISY_CV = 0.10          # std/mean above this: the figures moved a lot between calls
KNEE_SHARE = 0.90        # without a budget: the lowest-latency point within 10% of the best throughput
PERCENTILES = ("p50", "p90", "p99")


class DeviceTime(TypedDict):
    """GPU milliseconds per call from CUDA events (a point's `device_ms`)."""
    p50: float
    p90: float
    p99: float
    mean: float
    runs: int
    timer: str


class BatchesRun(TypedDict):
    """With --batching: the batches the point ran (its `batches`)."""
    mean: float                  # rows per batch
    histogram: dict[str, int]    # batch size -> batches of that size
    options: BatchingJson        # BatchingOptions.to_json()
    sessions: int | str          # N, or "adaptive" (optcli/session_layout.py)


class Knee(TypedDict):
    """The point `find_knee` chose (batch and concurrency None when none fits the budget), and why."""
    batch: int | None
    concurrency: int | None
    batched: NotRequired[bool]
    reason: str


class RegressionRow(TypedDict):
    """One point matched against the baseline: [baseline, now] pairs and the relative changes."""
    batch: int
    concurrency: int
    p50_ms: list[float]
    p50_change: float
    throughput: list[float]
    throughput_change: float
    beyond_noise: bool      # outside each other's 95% intervals of the median
    regressed: bool


class Regression(TypedDict):
    """A --compare-baseline check (optcli/benchmark/baseline.py): the bound, the rows and the verdict."""
    bound: float
    metric: str
    rows: list[RegressionRow]
    regressed: bool
    notes: list[str]


@dataclass
class BenchSettings:
    """What to measure and for how long (the `optcli bench` flags)."""

    batches: list[int] = field(default_factory=lambda: [1])
    concurrency: list[int] = field(default_factory=lambda: [1])
    warmup_runs: int = 10
    warmup_seconds: float = 0.5
    runs: int = 100
    min_seconds: float = 1.0
    max_seconds: float = 10.0
    latency_budget_ms: float | None = None
    budget_percentile: str = "p99"      # which latency the budget bounds: p50 | p90 | p99
    threads: int | None = None          # intra-op threads per handle; None = cores / concurrency
    device: str | None = None
    inputs_dir: Path | None = None
    pins: list[str] = field(default_factory=list)
    runner_options: dict[str, object] = field(default_factory=dict)
    # Triton's dynamic_batching knobs (optcli/batching.py): each point is measured again with the
    # concurrent calls batched, on `batching_sessions` sessions (the cores split between them), or on the
    # adaptive layout (optcli/session_layout.py).
    batching: dict[str, object] | None = None
    batching_sessions: int | str = 1
    # Realistic attention masks (optcli/benchmark/valid_lengths.py) and, on top, a padded batch run as
    # sub-batches of similar length (optcli/length_buckets.py).
    valid_lengths: str | None = None
    length_buckets: bool = False

    def validate(self) -> None:
        if not self.batches or any(b < 1 for b in self.batches):
            raise UsageError("batch sizes must be >= 1", hint="e.g. --batch 1,8,32")
        if not self.concurrency or any(c < 1 for c in self.concurrency):
            raise UsageError("concurrency levels must be >= 1", hint="e.g. --concurrency 1,2,4")
        if self.runs < 1 or self.min_seconds < 0 or self.max_seconds <= 0 or self.warmup_runs < 0:
            raise UsageError("runs must be >= 1 and the time limits positive")
        if self.latency_budget_ms is not None and self.latency_budget_ms <= 0:
            raise UsageError("--latency-budget-ms must be positive")
        from optcli.session_layout import check_layout

        check_layout(self.batching_sessions, True, self.threads, "--batching-sessions")
        if self.batching is not None:
            from optcli.batching import batching_options

            self.batching = dict(batching_options(self.batching).to_json())  # fail before measuring
        if self.valid_lengths is not None:
            from optcli.benchmark.valid_lengths import parse_valid_lengths

            parse_valid_lengths(self.valid_lengths)  # fail before measuring
        if self.budget_percentile not in PERCENTILES:
            raise UsageError(f"unknown budget percentile {self.budget_percentile!r}",
                             hint=f"use one of: {', '.join(PERCENTILES)}")

    def to_json(self) -> dict[str, object]:
        d = asdict(self)
        d["inputs_dir"] = str(self.inputs_dir) if self.inputs_dir else None
        return d


@dataclass
class SweepPoint:
    batch: int
    concurrency: int
    latency: LatencyStats
    throughput: float                    # samples/s over the wall time of the timed window
    median_ci_ms: tuple[float, float]
    device_ms: DeviceTime | None = None       # GPU time per call from CUDA events, where the runner has them
    batches: BatchesRun | None = None         # with --batching: the batches run ({"mean": rows, "histogram"})

    @property
    def batched(self) -> bool:
        return self.batches is not None

    @property
    def key(self) -> tuple[int, int]:
        return (self.batch, self.concurrency)

    def to_json(self) -> dict[str, object]:
        return {"batch": self.batch, "concurrency": self.concurrency, "latency_ms": self.latency.to_json(),
                "throughput": significant(self.throughput, 2),
                "p50_ci95_ms": [significant(self.median_ci_ms[0]), significant(self.median_ci_ms[1])],
                "device_ms": self.device_ms, "batches": self.batches}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> SweepPoint:
        lo, hi = d.get("p50_ci95_ms") or (d["latency_ms"]["p50"], d["latency_ms"]["p50"])
        return cls(int(d["batch"]), int(d["concurrency"]), LatencyStats.from_json(d["latency_ms"]),
                   float(d["throughput"]), (float(lo), float(hi)), d.get("device_ms"), d.get("batches"))


@dataclass
class BenchResult:
    """Everything `optcli bench` measured; `to_json()` is what --json prints and --save-baseline saves."""

    artifact: dict[str, str | int | None]   # ResolvedArtifact.to_json()
    runtime: str
    settings: dict[str, object]
    inputs: dict[str, object]
    environment: dict[str, object]
    points: list[SweepPoint]
    knee: Knee | None
    warnings: list[str] = field(default_factory=list)
    regression: Regression | None = None         # filled by a --compare-baseline check

    def point(self, batch: int, concurrency: int, batched: bool = False) -> SweepPoint | None:
        return next((p for p in self.points if p.key == (batch, concurrency) and p.batched == batched), None)

    def to_json(self) -> dict[str, object]:
        return {"schema_version": SCHEMA_VERSION, "kind": "optcli-bench", "artifact": self.artifact,
                "runtime": self.runtime, "settings": self.settings, "inputs": self.inputs,
                "environment": self.environment, "points": [p.to_json() for p in self.points],
                "knee": self.knee, "warnings": self.warnings, "regression": self.regression}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> BenchResult:
        return cls(d.get("artifact", {}), d.get("runtime", "?"), d.get("settings", {}), d.get("inputs", {}),
                   d.get("environment", {}), [SweepPoint.from_json(p) for p in d.get("points", [])],
                   d.get("knee"), list(d.get("warnings", [])), d.get("regression"))


def find_knee(points: list[SweepPoint], budget_ms: float | None, percentile: str = "p99") -> Knee | None:
    """With a budget: the best throughput whose `percentile` latency fits in it. Without: the point
    with the lowest `percentile` latency that reaches 90% of the best throughput (where more batch
    or concurrency stops paying)."""
    if not points:
        return None

    def lat(p: SweepPoint) -> float:
        return float(getattr(p.latency, percentile))

    if budget_ms is not None:
        fitting = [p for p in points if lat(p) <= budget_ms]
        if not fitting:
            best = min(points, key=lat)
            return {"batch": None, "concurrency": None,
                    "reason": f"no point has {percentile} within {budget_ms:g} ms (lowest: {lat(best):.3f} ms "
                              f"at batch {best.batch}, concurrency {best.concurrency})"}
        k = max(fitting, key=lambda p: p.throughput)
        return {"batch": k.batch, "concurrency": k.concurrency, "batched": k.batched,
                "reason": f"best throughput with {percentile} <= {budget_ms:g} ms"}
    top = max(p.throughput for p in points)
    k = min((p for p in points if p.throughput >= KNEE_SHARE * top), key=lat)
    return {"batch": k.batch, "concurrency": k.concurrency, "batched": k.batched,
            "reason": f"lowest {percentile} within {100 - KNEE_SHARE * 100:.0f}% of the best throughput ({top:.1f}/s)"}


def _noise_warnings(points: list[SweepPoint], load_before: float | None) -> list[str]:
    warnings = []
    cores = os.cpu_count() or 1
    if load_before is not None and load_before > cores:
        warnings.append(f"the machine was busy before the run (load average {load_before:.1f} on {cores} cores): "
                        "figures are pessimistic and noisy")
    noisy = [p for p in points if p.latency.cv > NOISY_CV]
    if noisy:
        worst = max(noisy, key=lambda p: p.latency.cv)
        warnings.append(f"noisy measurements: latency CV above {NOISY_CV:.0%} at {len(noisy)} of {len(points)} "
                        f"points (worst {worst.latency.cv:.0%} at batch {worst.batch}, concurrency "
                        f"{worst.concurrency}); close other work or raise --min-seconds, and trust the p50 "
                        "and its CI over the mean")
    return warnings


def _loadavg() -> float | None:
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None


def _device_time(runner: Any, feeds: BackendFeeds, settings: BenchSettings) -> DeviceTime | None:
    """GPU milliseconds per call from CUDA events (the TensorRT runner's time_gpu): the device work
    alone, where perf_counter also counts host copies and launch overhead."""
    time_gpu = getattr(runner, "time_gpu", None)
    if time_gpu is None:
        return None
    samples = time_gpu(feeds, runs=max(settings.runs, 20), warmup=settings.warmup_runs)
    stats = stats_from_samples(samples, 0, runner.backend)
    return {"p50": round(stats.p50, 4), "p90": round(stats.p90, 4), "p99": round(stats.p99, 4),
            "mean": round(stats.mean, 4), "runs": stats.runs, "timer": "cuda events"}


def _bucketed(runner: Any, settings: BenchSettings) -> Any:
    if not settings.length_buckets:
        return runner
    from optcli.length_buckets import LengthBucketedRunner
    from optcli.length_groups import BucketOptions

    return LengthBucketedRunner(runner, BucketOptions())


def _batched_points(resolved: ResolvedArtifact, settings: BenchSettings, conc: int,
                    extra: dict[str, object]) -> list[SweepPoint]:
    """`conc` callers whose calls are batched (optcli/batching.py) onto `batching_sessions` sessions."""
    from optcli.batching import BatchedRunner, batching_options
    from optcli.session_layout import open_layout

    options = batching_options(settings.batching)
    sessions, wide = open_layout(resolved, settings.batching_sessions, threads=settings.threads,
                                 device=settings.device, **extra)
    runner = BatchedRunner(_bucketed(sessions, settings), options, _bucketed(wide, settings) if wide else None)
    points = []
    try:
        feeds_source = FeedSource.for_runner(runner, settings.inputs_dir, settings.pins,
                                             valid_lengths=settings.valid_lengths)
        for batch in sorted(set(settings.batches)):
            feeds = runner.normalize(feeds_source.batch(batch))
            before = runner.stats()
            samples, wall = time_concurrent(
                functools.partial(runner.run_normalized, feeds), conc, warmup_runs=settings.warmup_runs,
                warmup_seconds=settings.warmup_seconds, runs=settings.runs, min_seconds=settings.min_seconds,
                max_seconds=settings.max_seconds)
            stats = stats_from_samples(samples, batch, runner.backend, {**runner.settings, "concurrency": conc})
            ran = runner.stats()  # warm-up batches included: the mix is what matters, not the count
            count = ran["batches"] - before["batches"]
            hist = {k: v - before["histogram"].get(k, 0) for k, v in ran["histogram"].items()
                    if v - before["histogram"].get(k, 0)}
            batches: BatchesRun = {"mean": round((ran["rows"] - before["rows"]) / count, 2) if count else 0.0,
                       "histogram": {str(k): v for k, v in sorted(hist.items())}, "options": options.to_json(),
                       "sessions": settings.batching_sessions}
            points.append(SweepPoint(batch, conc, stats, len(samples) * batch / wall if wall > 0 else 0.0,
                                     median_ci(samples), None, batches))
    finally:
        runner.close()
    return points


def run_sweep(resolved: ResolvedArtifact, settings: BenchSettings) -> BenchResult:
    """Measure every (batch, concurrency) point of `settings` on the artifact."""
    settings.validate()
    load_before = _loadavg()
    points: list[SweepPoint] = []
    runtime, inputs_json = "?", {}
    for conc in sorted(set(settings.concurrency)):
        extra = dict(settings.runner_options)
        if settings.pins and resolved.format in for_format(resolved.format).shapeless:
            extra.setdefault("inputs", batch_free_pins(settings.pins))  # e.g. TorchScript records no shapes
        runner = _bucketed(open_artifact(resolved, concurrency=conc, threads=settings.threads,
                                         device=settings.device, **extra), settings)
        try:
            runtime = runner.backend
            runner_settings = dict(getattr(runner, "settings", {}) or {})  # per point: threads vary
            feeds_source = FeedSource.for_runner(runner, settings.inputs_dir, settings.pins,
                                                 valid_lengths=settings.valid_lengths)
            inputs_json = feeds_source.to_json()
            for batch in sorted(set(settings.batches)):
                check_batch(feeds_source.specs, batch)
                feeds = runner.normalize(feeds_source.batch(batch))
                samples, wall = time_concurrent(
                    functools.partial(runner.run_normalized, feeds), conc, warmup_runs=settings.warmup_runs,
                    warmup_seconds=settings.warmup_seconds, runs=settings.runs,
                    min_seconds=settings.min_seconds, max_seconds=settings.max_seconds)
                stats = stats_from_samples(samples, batch, runner.backend, {**runner_settings, "concurrency": conc})
                throughput = len(samples) * batch / wall if wall > 0 else 0.0
                points.append(SweepPoint(batch, conc, stats, throughput, median_ci(samples),
                                         _device_time(runner, feeds, settings) if conc == 1 else None))
        finally:
            runner.close()
        if settings.batching is not None:
            points += _batched_points(resolved, settings, conc, extra)
    points.sort(key=lambda p: (*p.key, p.batched))
    env = environment()
    env["load_average_before"] = load_before
    return BenchResult(artifact=resolved.to_json(), runtime=runtime, settings=settings.to_json(), inputs=inputs_json,
                       environment=env, points=points,
                       knee=find_knee(points, settings.latency_budget_ms, settings.budget_percentile),
                       warnings=_noise_warnings(points, load_before))
