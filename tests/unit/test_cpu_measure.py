"""The interleaved measurement: blocks in turn, untimed calls after each switch, stops when told apart."""
from __future__ import annotations

import time
from typing import Any

import numpy as np
import pytest

from optcli.cpu.measure import _separated, interleaved
from optcli.runtime.base import Runner
from optcli.tensor_spec import TensorSpec


class SleepRunner(Runner):
    """A runner whose every call takes `ms` (a stand-in for a model; counts its calls)."""

    backend = "sleep"

    def __init__(self, ms: float) -> None:
        super().__init__([TensorSpec("x", (1,), "float32")], [TensorSpec("y", (1,), "float32")])
        self.ms = ms
        self.calls = 0
        self._start()

    def _make_handle(self) -> Any:
        return object()

    def _run(self, handle: Any, feeds: dict[str, Any]) -> list[Any]:
        self.calls += 1
        end = time.perf_counter() + self.ms / 1000.0
        while time.perf_counter() < end:
            pass
        return [feeds["x"]]


class VirtualClock:
    """perf_counter for optcli.cpu.measure that moves only when a runner runs: the measurement logic is
    tested on exact latencies, so a loaded machine (which stretched the old busy-waits) cannot flake it."""

    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now


class ClockRunner(SleepRunner):
    def __init__(self, ms: float, clock: VirtualClock) -> None:
        super().__init__(ms)
        self.clock = clock

    def _run(self, handle: Any, feeds: dict[str, Any]) -> list[Any]:
        self.calls += 1
        self.clock.now += self.ms / 1000.0
        return [feeds["x"]]


def test_blocks_in_turn_with_untimed_switch_calls(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = VirtualClock()
    monkeypatch.setattr("optcli.cpu.measure.time", clock)
    fast, slow = ClockRunner(1.0, clock), ClockRunner(3.0, clock)
    runners = {"fast": fast, "slow": slow}
    feeds = {k: r.normalize({"x": [1.0]}) for k, r in runners.items()}
    stats, info = interleaved(runners, feeds, batch=1, min_rounds=3, calls_per_round=2, min_seconds=0.0,
                              max_seconds=5.0, block_ms=10.0, switch_ms=4.0, contenders=["fast", "slow"])
    assert info["rounds"] == 3 and info["order"] == ["fast", "slow"] and info["separated"] is True
    assert stats["fast"]["p50"] == pytest.approx(1.0) and stats["slow"]["p50"] == pytest.approx(3.0)
    assert stats["fast"]["p50_ci"][1] < stats["slow"]["p50_ci"][0]
    # Per block: switch calls until 4 ms have passed (untimed), then timed calls until 10 ms and >= 2 calls.
    assert stats["fast"]["runs"] == 3 * 10 and stats["slow"]["runs"] == 3 * 4
    assert fast.calls == 3 * (4 + 10) and slow.calls == 3 * (2 + 4)


def test_a_tie_keeps_measuring_until_max_seconds() -> None:
    a = SleepRunner(1.0)
    runners = {"a": a}
    feeds = {"a": a.normalize({"x": [1.0]})}
    t0 = time.perf_counter()
    # A contender against itself is a tie the measurement can never break: it must stop at max_seconds.
    _, info = interleaved(runners, feeds, batch=1, min_rounds=2, calls_per_round=1, min_seconds=0.0,
                          max_seconds=0.3, block_ms=5.0, switch_ms=0.0, contenders=["a", "a"])
    assert info["separated"] is False and time.perf_counter() - t0 >= 0.3 and info["rounds"] > 2


def test_separation_is_non_overlapping_median_intervals() -> None:
    rng = np.random.default_rng(0)
    apart = {"x": list(1.0 + rng.random(200) * 0.1), "y": list(2.0 + rng.random(200) * 0.1)}
    close = {"x": list(1.0 + rng.random(200)), "y": list(1.05 + rng.random(200))}
    assert _separated(apart, ["x", "y"]) is True
    assert _separated(close, ["x", "y"]) is False
    assert _separated(close, ["x"]) is True  # one contender: nothing to tell apart


@pytest.mark.parametrize("ms", [0.010734, 123.45678])
def test_the_written_p50_lies_inside_its_written_interval(monkeypatch: pytest.MonkeyPatch, ms: float) -> None:
    """The interval is rounded as the record's p50 is: at 4 fixed decimals a 0.010734 ms p50 (written with
    more digits since the record keeps 6 significant) fell above its interval's 0.0107."""
    clock = VirtualClock()
    monkeypatch.setattr("optcli.cpu.measure.time", clock)
    runners = {"a": ClockRunner(ms, clock)}
    feeds = {"a": runners["a"].normalize({"x": [1.0]})}
    stats, _ = interleaved(runners, feeds, batch=1, min_rounds=2, calls_per_round=3, min_seconds=0.0,
                           max_seconds=5.0, block_ms=0.05, switch_ms=0.0)
    lo, hi = stats["a"]["p50_ci"]
    assert lo <= stats["a"]["p50"] <= hi
    assert stats["a"]["p50"] == pytest.approx(ms, rel=1e-5)
