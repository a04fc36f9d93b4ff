"""How a gathered batch's calls are shared among sessions (optcli/batching.py, batch_merge.spread) and the
adaptive layout (`optcli.load(..., batching=..., concurrency="adaptive")`): one single-threaded onnxruntime
session per core, among which a gathered batch's calls are shared, plus one session with every core for a
request that runs alone. Real onnxruntime sessions; the core count is injected."""
from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import optcli
import optcli.session_layout
from compile_testkit import call_together, make_ids_times_mask
from optcli.batch_merge import cheapest_groups, padding_plan, spread
from optcli.errors import UsageError
from optcli.tensor_spec import TensorSpec

PLAN = padding_plan([TensorSpec("input_ids", ("batch", "sequence"), "int64"),
                     TensorSpec("attention_mask", ("batch", "sequence"), "int64")],
                    [TensorSpec("h", ("batch", "sequence"), "int64")])


def _request(n: int, rows: int = 1) -> dict[str, np.ndarray]:
    ids = np.tile(np.arange(1, n + 1), (rows, 1))
    return {"input_ids": ids, "attention_mask": np.ones_like(ids)}


def _cost(group: list[int], lengths: list[int]) -> int:
    return max(lengths[i] for i in group) * len(group)


def test_spread_cuts_the_costliest_call_where_the_halves_balance():
    lengths = [10, 10, 10, 10, 40, 40]
    requests = [_request(n) for n in lengths]
    assert spread([list(range(6))], requests, PLAN, 1) == [list(range(6))]       # one session: as gathered
    halves = spread([list(range(6))], requests, PLAN, 2)
    assert sorted(map(sorted, halves)) == [[0, 1, 2, 3], [4, 5]]  # 40 x 4 and 40 x 2 would be 160 and 80
    assert max(_cost(g, lengths) for g in halves) == 80
    # A call of one request is never cut, and more sessions than requests leave some idle.
    assert spread([[0], [1]], requests, PLAN, 4) == [[0], [1]]
    assert len(spread([list(range(6))], requests, PLAN, 16)) == 6


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1, 128), min_size=1, max_size=24), st.integers(1, 8))
def test_spread_runs_every_request_exactly_once_and_never_raises_the_costliest_call(lengths, workers):
    requests = [_request(n) for n in lengths]
    groups = cheapest_groups(lengths, [1] * len(lengths))
    got = spread(groups, requests, PLAN, workers)
    assert sorted(i for g in got for i in g) == list(range(len(lengths)))
    assert all(g for g in got)
    assert len(got) >= min(workers, len(lengths))
    assert max(_cost(g, lengths) for g in got) <= max(_cost(g, lengths) for g in groups)


@pytest.fixture(scope="module")
def encoder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_ids_times_mask(tmp_path_factory.mktemp("layout") / "ids.onnx")


@pytest.fixture
def four_cores(monkeypatch: pytest.MonkeyPatch) -> int:
    monkeypatch.setattr(optcli.session_layout.os, "cpu_count", lambda: 4)
    return 4


def test_adaptive_opens_a_single_threaded_session_per_core_and_one_wide_session(encoder, four_cores):
    with optcli.load(encoder, batching=True, concurrency="adaptive") as m:
        assert m.concurrency == four_cores
        assert m.settings["intra_op_threads"] == 1
        assert m.settings["wide_session"]["intra_op_threads"] == four_cores


def test_a_lone_request_runs_on_the_wide_session(encoder, four_cores):
    with optcli.load(encoder, batching=True, concurrency="adaptive") as m:
        for n in (3, 7, 5):
            np.testing.assert_array_equal(m.predict(_request(n))["h"], _request(n)["input_ids"])
        assert m.stats()["calls"] == m.stats()["wide_calls"] == 3


def test_a_gathered_batch_is_shared_among_the_single_threaded_sessions(encoder, four_cores):
    """Eight requests gathered into one batch (the delay holds them) run as at least four calls on the
    single-threaded sessions, each caller getting exactly its own rows back."""
    lengths = [4, 4, 4, 4, 9, 9, 9, 9]
    policy = {"max_batch_size": 8, "max_queue_delay_microseconds": 5_000_000}
    with optcli.load(encoder, batching=policy, concurrency="adaptive") as m:
        got = [f.result(timeout=60) for f in [m.predict_async(_request(n)) for n in lengths]]
        stats = m.stats()
    assert stats["batches"] == 1 and stats["wide_calls"] == 0 and stats["calls"] >= four_cores, stats
    for g, n in zip(got, lengths):
        np.testing.assert_array_equal(g["h"], _request(n)["input_ids"])


def test_many_callers_on_the_adaptive_layout_get_their_own_answers_and_no_session_is_lost(encoder, four_cores):
    """16 callers of mixed lengths, back to back: every answer is the caller's own, and every handle (the
    wide session holds them all) comes back: a lost one would slow the batcher down, then hang it."""
    lengths = [3, 17, 5, 64, 9, 2, 33, 12, 7, 48, 4, 21, 6, 11, 90, 8]
    with optcli.load(encoder, batching={"max_batch_size": 16}, concurrency="adaptive") as m:
        got = call_together(lambda n: [m.predict(_request(n))["h"] for _ in range(15)][-1], lengths)
        batcher = m._batcher  # the count of free handles is internal state
        with batcher.cond:
            batcher.cond.wait_for(lambda: batcher.idle == batcher.handles and not batcher.queue, timeout=10)
        assert batcher.idle == batcher.handles == four_cores and not batcher.calls_queued
        assert m.stats()["rows"] == 16 * 15
    for g, n in zip(got, lengths):
        np.testing.assert_array_equal(g, _request(n)["input_ids"])


def test_a_failing_call_fails_only_its_own_callers(encoder, four_cores):
    """A request the model cannot run (a mask longer than its ids) fails its own caller with the model's
    error; the requests queued with it are answered."""
    bad = {"input_ids": np.ones((1, 40), np.int64), "attention_mask": np.ones((1, 41), np.int64)}
    policy = {"max_batch_size": 8, "max_queue_delay_microseconds": 5_000_000, "padding": "off"}
    with optcli.load(encoder, batching=policy, concurrency="adaptive") as m:
        futures = [m.predict_async(r) for r in (_request(3), bad, _request(3), _request(5))]
        with pytest.raises(UsageError):
            futures[1].result(timeout=60)
        for f, n in zip((futures[0], futures[2], futures[3]), (3, 3, 5)):
            np.testing.assert_array_equal(f.result(timeout=60)["h"], _request(n)["input_ids"])


def test_adaptive_is_refused_where_it_cannot_apply(encoder):
    for kwargs in ({}, {"batching": True, "threads": 2}):
        with pytest.raises(UsageError) as err:
            optcli.load(encoder, concurrency="adaptive", **kwargs)
        assert err.value.hint
    for bad in ("wide", 0, True):
        with pytest.raises(UsageError, match=r"concurrency .*: must be a whole number >= 1 or 'adaptive'") as err:
            optcli.load(encoder, batching=True, concurrency=bad)
        assert "adaptive" in err.value.hint


def test_one_core_has_no_wide_session(encoder, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(optcli.session_layout.os, "cpu_count", lambda: 1)
    with optcli.load(encoder, batching=True, concurrency="adaptive") as m:
        assert m.concurrency == 1 and "wide_session" not in m.settings
        np.testing.assert_array_equal(m.predict(_request(4))["h"], _request(4)["input_ids"])
        assert m.stats()["wide_calls"] == 0


def test_close_closes_both_layouts_sessions(encoder, four_cores):
    m = optcli.load(encoder, batching=True, concurrency="adaptive")
    narrow, wide = m._batcher.runner, m._batcher.wide
    m.predict(_request(3))
    m.close()
    assert narrow._closed and wide is not None and wide._closed
    m.close()  # twice is fine


class _Recording:
    """A real onnxruntime runner that takes 30 ms a call and records which thread ran which requests when."""

    def __init__(self, runner) -> None:
        self.runner, self.calls, self.lock = runner, [], threading.Lock()

    def __getattr__(self, name):
        return getattr(self.runner, name)

    def run_normalized(self, feeds):
        start = time.perf_counter()
        time.sleep(0.03)
        out = self.runner.run_normalized(feeds)
        with self.lock:
            self.calls.append((threading.current_thread().name, set(feeds["input_ids"][:, 0].tolist()), start,
                               time.perf_counter()))
        return out


def test_a_caller_stops_running_calls_once_its_own_answer_is_ready(encoder):
    """Eight callers, lengths that cut into several calls, two sessions: a caller that leads runs its own
    call and then leaves the calls still queued to the pool's threads; its answer is not held back
    behind other callers' calls."""
    from optcli.batching import BatchedRunner, batching_options

    recording = _Recording(optcli.load(encoder, concurrency=2, threads=1))
    lengths = [2, 2, 20, 20, 60, 60, 120, 120]
    policy = batching_options({"max_batch_size": 8, "max_queue_delay_microseconds": 200_000})
    with BatchedRunner(recording, policy) as m:
        def call(k: int):
            threading.current_thread().name = f"caller-{k}"
            ids = np.full((1, lengths[k]), k + 1)
            return m.predict({"input_ids": ids, "attention_mask": np.ones_like(ids)})["h"]

        got = call_together(call, list(range(8)))
    for k, g in enumerate(got):
        np.testing.assert_array_equal(g, np.full((1, lengths[k]), k + 1))
    assert len(recording.calls) >= 3, recording.calls  # more calls than sessions: some were queued
    for k in range(8):
        own_end = next(end for _, ids, _, end in recording.calls if k + 1 in ids)
        late = [ids for name, ids, start, _ in recording.calls if name == f"caller-{k}" and start >= own_end]
        assert not late, f"caller-{k} ran {late} after its own answer was ready"
