"""Accuracy of a runner on an evaluation set, and ONE interleaved latency run over several runners.

Interleaving (A B C A B C ...) spreads machine drift and other tenants' load over every candidate
alike; separate back-to-back runs on a shared machine can differ by 30% for the same model.

Each turn is a block: untimed calls for `switch_ms` first, then timed calls for at least `block_ms`.
Runtimes in one process disturb each other right after a switch: onnxruntime's pool threads
spin-wait after a call, and a 0.7 ms OpenVINO model measured 1.0-2.3 ms when timed right after
onnxruntime calls, 0.73 ms after 20 ms of untimed calls (0.68 ms alone).
"""
from __future__ import annotations

import time
from typing import Any

import numpy as np

from optcli.accuracy import compare_outputs, sequence_mask
from optcli.accuracy_summary import AccuracySummary
from optcli.calibration.dataset import SampleSet
from optcli.latency import median_ci, stats_from_samples
from optcli.quantize.evaluate import runner_outputs
from optcli.report.records import significant
from optcli.runtime.base import Runner


def runner_accuracy(runner: Runner, reference: list[np.ndarray], names: list[str],
                    samples: SampleSet) -> AccuracySummary:
    """compare_outputs of the runner against the FP32 reference on `samples` (labels give top-1)."""
    return reference_accuracy(reference, names, samples, runner_outputs(runner, samples))


def reference_accuracy(reference: list[np.ndarray], names: list[str], samples: SampleSet,
                       outputs: list[np.ndarray] | None = None) -> AccuracySummary:
    """compare_outputs of `outputs` (default: the reference's own, for the reference graph itself)
    against the FP32 reference on `samples`, as runner_accuracy reports it."""
    summary = compare_outputs(reference, reference if outputs is None else outputs, names, labels=samples.labels,
                              valid=sequence_mask(samples.arrays))
    summary["samples"] = len(samples)
    summary["data"] = samples.source
    return summary


def _separated(samples: dict[str, list[float]], contenders: list[str]) -> bool:
    """Whether the two fastest contenders' medians have non-overlapping 95% intervals."""
    if len(contenders) < 2:
        return True
    ranked = sorted(contenders, key=lambda n: float(np.median(samples[n])))
    lo_hi = [median_ci(samples[n], resamples=300) for n in ranked[:2]]
    return lo_hi[0][1] < lo_hi[1][0]


def time_block(runner: Runner, feeds: dict[str, Any], calls: int, block_ms: float, switch_ms: float) -> list[float]:
    """One turn of a runner: untimed calls for `switch_ms` (at least one), then timed calls for
    `block_ms` and at least `calls`. Returns milliseconds per timed call."""
    t_block = time.perf_counter()
    runner.run_normalized(feeds)  # untimed: absorbs the switch from the previous runtime
    while time.perf_counter() - t_block < switch_ms / 1000.0:
        runner.run_normalized(feeds)
    samples: list[float] = []
    t_block = time.perf_counter()
    while len(samples) < calls or time.perf_counter() - t_block < block_ms / 1000.0:
        t0 = time.perf_counter()
        runner.run_normalized(feeds)
        samples.append((time.perf_counter() - t0) * 1000.0)
    return samples


def interleaved(runners: dict[str, Runner], feeds: dict[str, dict[str, Any]], *, batch: int, min_rounds: int = 5,
                calls_per_round: int = 3, min_seconds: float = 5.0, max_seconds: float = 30.0, block_ms: float = 100.0,
                switch_ms: float = 20.0,
                contenders: list[str] | None = None) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    """Time every runner in rounds (one block of each per round, in turn: untimed calls for
    `switch_ms`, then timed calls for `block_ms` and at least `calls_per_round`) until at least
    `min_rounds` rounds and `min_seconds` have passed and the two fastest `contenders` (the ones
    that may be chosen) are told apart, or until `max_seconds` (after 2 rounds).
    Returns ({name: latency stats JSON with the median's 95% interval}, what was done)."""
    samples: dict[str, list[float]] = {name: [] for name in runners}
    rounds = 0
    start = time.perf_counter()
    while True:
        for name, runner in runners.items():
            samples[name] += time_block(runner, feeds[name], calls_per_round, block_ms, switch_ms)
        rounds += 1
        elapsed = time.perf_counter() - start
        if rounds >= min_rounds and elapsed >= min_seconds and _separated(samples, contenders or []):
            break
        if rounds >= 2 and elapsed >= max_seconds:
            break
    out = {}
    for name, runner in runners.items():
        stats = stats_from_samples(samples[name], batch, runner.backend, getattr(runner, "settings", {}))
        d = stats.to_json()
        d["p50_ci"] = [significant(v) for v in median_ci(samples[name])]  # as the record's p50 is rounded
        out[name] = d
    return out, {"rounds": rounds, "min_calls_per_block": calls_per_round, "block_ms": block_ms,
                 "switch_ms": switch_ms, "seconds": round(time.perf_counter() - start, 2), "batch": batch,
                 "order": list(runners), "separated": _separated(samples, contenders or [])}
