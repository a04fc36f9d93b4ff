"""One interleaved measurement of several artifacts: A B C A B C ..., so drift in the machine's load
(other processes, thermal state, frequency) lands on every variant alike instead of on whichever
happened to run last.

Each turn times a short block of back-to-back calls (about `turn_seconds`) so switching models
(cache eviction) does not dominate; turns rotate until every variant has `runs` calls and
`min_seconds` of timed calls, or `max_seconds` each. The runners use the same defaults as
`optcli bench` at concurrency 1, so the figures are comparable with its batch x 1 rows.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

from optcli.benchmark.feeds import FeedSource, check_batch
from optcli.latency import LatencyStats, median_ci, stats_from_samples
from optcli.loaded_model import ResolvedArtifact, open_artifact
from optcli.runtime.base import Runner


@dataclass
class InterleaveSettings:
    batches: tuple[int, ...] = (1, 8)
    warmup_runs: int = 10
    warmup_seconds: float = 0.3
    runs: int = 100
    min_seconds: float = 1.0        # of timed calls, per variant and batch
    max_seconds: float = 8.0
    turn_seconds: float = 0.02


@dataclass
class Measured:
    stats: LatencyStats
    ci: tuple[float, float]
    samples: list[float]

    @property
    def throughput(self) -> float:
        """Samples/s with one request in flight: as `optcli bench` reports at concurrency 1."""
        return self.stats.batch * 1000.0 * len(self.samples) / sum(self.samples) if self.samples else 0.0


def measure_interleaved(artifacts: dict[str, ResolvedArtifact], settings: InterleaveSettings,
                        seed: int = 0) -> dict[str, dict[int, Measured]]:
    """{variant: {batch: Measured}} from one interleaved run over all variants."""
    runners: dict[str, Runner] = {}
    results: dict[str, dict[int, Measured]] = {name: {} for name in artifacts}
    try:
        for name, resolved in artifacts.items():
            runners[name] = open_artifact(resolved, concurrency=1)
        sources = {name: FeedSource.for_runner(r, seed=seed) for name, r in runners.items()}
        for batch in settings.batches:
            feeds = {}
            for name, r in runners.items():
                check_batch(sources[name].specs, batch)
                feeds[name] = r.normalize(sources[name].batch(batch))
            calls = {name: (lambda r=r, f=feeds[name]: r.run_normalized(f)) for name, r in runners.items()}
            block = {}
            for name, fn in calls.items():  # warm-up by count and time; it also sizes each turn
                t0, n = time.perf_counter(), 0
                while n < settings.warmup_runs or time.perf_counter() - t0 < settings.warmup_seconds:
                    fn()
                    n += 1
                per_call = (time.perf_counter() - t0) / n
                block[name] = max(1, int(settings.turn_seconds / max(per_call, 1e-6)))
            samples: dict[str, list[float]] = {name: [] for name in calls}
            spent = {name: 0.0 for name in calls}
            while True:
                for name, fn in calls.items():
                    if spent[name] >= settings.max_seconds:
                        continue
                    out = samples[name]
                    for _ in range(block[name]):
                        a = time.perf_counter()
                        fn()
                        b = time.perf_counter()
                        out.append((b - a) * 1000.0)
                        spent[name] += b - a
                if all(len(samples[n]) >= settings.runs and spent[n] >= settings.min_seconds
                       or spent[n] >= settings.max_seconds for n in calls):
                    break
            for name, s in samples.items():
                r = runners[name]
                stats = stats_from_samples(s, batch, r.backend, dict(getattr(r, "settings", {}) or {}))
                results[name][batch] = Measured(stats, median_ci(s), s)
    finally:
        for r in runners.values():
            r.close()
    return results
