"""Latency statistics and the timing loop's stopping rules (counts, not speed: no timed assertions)."""
from __future__ import annotations

import numpy as np
import pytest

from optcli.latency import LatencyStats, median_ci, ratio, stats_from_samples, time_calls


def test_stats_from_known_samples() -> None:
    samples = list(range(1, 101))  # 1..100 ms
    s = stats_from_samples(samples, batch=4, runtime="onnxruntime-cpu", settings={"graph_optimization": "disabled"})
    assert s.p50 == pytest.approx(50.5)
    assert s.p90 == pytest.approx(np.percentile(samples, 90))
    assert s.p99 == pytest.approx(np.percentile(samples, 99))
    assert (s.mean, s.min, s.max, s.runs, s.batch) == (50.5, 1, 100, 100, 4)
    assert s.throughput == pytest.approx(4 * 1000 / 50.5)
    assert s.cv == pytest.approx(np.std(samples) / 50.5)
    j = s.to_json()
    for key in ("p50", "p90", "p99", "mean", "batch", "runtime", "settings", "throughput", "cv", "runs"):
        assert key in j
    assert j["settings"] == {"graph_optimization": "disabled"}
    back = LatencyStats.from_json(j)
    assert back.p50 == s.p50 and back.runtime == s.runtime and back.batch == 4


def test_no_samples_is_an_error() -> None:
    with pytest.raises(ValueError):
        stats_from_samples([], 1, "x")


def test_time_calls_runs_warmup_then_at_least_runs() -> None:
    calls = []
    samples = time_calls(lambda: calls.append(1), warmup_runs=3, warmup_seconds=0.0, runs=10, min_seconds=0.0,
                         max_seconds=60.0)
    assert len(samples) == 10
    assert len(calls) == 13  # 3 warm-up calls are not timed
    assert all(x >= 0 for x in samples)


def test_time_calls_stops_at_max_seconds_but_after_three() -> None:
    import time

    samples = time_calls(lambda: time.sleep(0.02), warmup_runs=0, warmup_seconds=0.0, runs=1000,
                         min_seconds=0.0, max_seconds=0.01)
    assert len(samples) == 3
    assert min(samples) >= 15.0  # each call really slept ~20 ms


def test_median_ci_brackets_the_median() -> None:
    a = np.random.default_rng(0).normal(10, 1, 500)
    lo, hi = median_ci(a)
    assert lo <= np.median(a) <= hi
    assert hi - lo < 1.0


def test_ratio() -> None:
    assert ratio(4, 2) == 2
    assert np.isnan(ratio(1, 0))


def test_time_calls_with_settle_stops_once_the_median_is_known() -> None:
    import time

    def steady() -> None:
        t = time.perf_counter()
        while time.perf_counter() - t < 0.0005:
            pass

    samples = time_calls(steady, warmup_runs=1, warmup_seconds=0.0, runs=500, min_seconds=10.0, max_seconds=10.0,
                         settle=0.25)
    assert 10 <= len(samples) < 500  # stopped long before runs / min_seconds


def test_settle_waits_for_its_minimum_runs_and_zero_turns_it_off() -> None:
    import time

    def steady() -> None:
        t = time.perf_counter()
        while time.perf_counter() - t < 0.0002:
            pass

    # Steady calls settle at once: the first check, at settle_min_runs, stops it (a full measurement's 20).
    samples = time_calls(steady, warmup_runs=1, warmup_seconds=0.0, runs=500, min_seconds=10.0,
                         max_seconds=10.0, settle=0.5, settle_min_runs=20)
    assert len(samples) == 20
    # ... and not before settle_min_seconds: a fast model's first 20 calls are too short a window to trust
    # (The window is wall time from the first timed call: the calls' own durations sum to a little less,
    # 99.8 ms once in CI, so the check is on the wall clock around it.)
    t0 = time.perf_counter()
    samples = time_calls(steady, warmup_runs=1, warmup_seconds=0.0, runs=5000, min_seconds=10.0,
                         max_seconds=10.0, settle=0.5, settle_min_runs=20, settle_min_seconds=0.1)
    assert time.perf_counter() - t0 >= 0.1 and sum(samples) >= 50.0 and len(samples) < 5000
    for off in (None, 0.0):  # [bench] settle = 0: `runs` calls and min_seconds, as before
        samples = time_calls(lambda: None, warmup_runs=1, warmup_seconds=0.0, runs=60, min_seconds=0.0,
                             max_seconds=10.0, settle=off, settle_min_runs=20)
        assert len(samples) == 60


def test_the_stage_table_labels_each_rows_latency_setting() -> None:
    from optcli.report import STAGE_COLUMNS, RunReport, StageReport, stage_rows

    def lat(runtime: str, level: str | None = None) -> dict:
        return {"p50": 1.0, "runtime": runtime, "settings": {"graph_optimization": level} if level else {}}

    export = StageReport("export", status="ok",
                         latency_ms={"before": lat("torch-cpu"), "after": lat("onnxruntime-cpu", "disabled")})
    quant = StageReport("quantize-int8", status="ok",
                        latency_ms={"before": lat("onnxruntime-cpu", "all"), "after": lat("onnxruntime-cpu", "all")})
    report = RunReport("0", {"path": "m"}, "cpu", {}, {}, stages=[export, quant])
    col = STAGE_COLUMNS.index("measured with")
    assert [r[col] for r in stage_rows(report)] == ["eager -> ort disabled", "ort all"]
