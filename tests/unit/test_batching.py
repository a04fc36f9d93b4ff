"""In-process dynamic batching (optcli/batching.py) on real ONNX Runtime sessions: answers equal
unbatched ones, concurrent calls share batches, sequence lengths never mix, the knobs are Triton's."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import optcli
from compile_testkit import call_together, make_ids_times_mask
from optcli.batch_merge import merge_key
from optcli.batching import BatchingOptions, batching_options, parse_batching, pick_batch
from optcli.errors import UsageError

IR_VERSION = 8  # onnxruntime refuses the IR version onnx writes by default


def _seq_model(path: Path, batch: str | int = "batch") -> Path:
    """x [batch, seq] -> y = 2x [batch, seq] and s = sum over seq [batch]: rows must not mix."""
    two = helper.make_tensor("two", TensorProto.FLOAT, [], [2.0])
    axes = helper.make_tensor("axes", TensorProto.INT64, [1], [1])
    nodes = [helper.make_node("Mul", ["x", "two"], ["y"]),
             helper.make_node("ReduceSum", ["x", "axes"], ["s"], keepdims=0)]
    graph = helper.make_graph(nodes, "seq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, "seq"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, "seq"]),
                               helper.make_tensor_value_info("s", TensorProto.FLOAT, [batch])], [two, axes])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = IR_VERSION
    onnx.save(model, str(path))
    return path


@pytest.fixture(scope="module")
def seq_onnx(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _seq_model(tmp_path_factory.mktemp("batching") / "seq.onnx")


def _rows(n: int, seq: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((1, seq)).astype(np.float32) for _ in range(n)]


def test_options_use_tritons_names_and_refuse_bad_values():
    assert batching_options(True) == BatchingOptions()
    opts = batching_options({"max_batch_size": 16, "max_queue_delay_microseconds": 500, "preferred_batch_size": [8, 4]})
    assert opts.to_json() == {"max_batch_size": 16, "max_queue_delay_microseconds": 500, "preferred_batch_size": [4, 8],
                              "padding": "auto", "padding_bucket": 16}
    assert parse_batching("max=16,delay-us=500,preferred=4/8") == opts
    assert parse_batching("padding=Bucket,bucket=32") == BatchingOptions(padding="bucket", padding_bucket=32)
    assert parse_batching("max_batch_size=16,max_queue_delay_microseconds=500,preferred_batch_size=8/4") == opts
    for bad in ({"max_batch_size": 0}, {"preferred_batch_size": [32]}, {"max_queue_delay_microseconds": -1},
                {"queue": 3}, "max_batch_size=x", "size=4", 7, {"padding": "right"}, {"padding_bucket": 0},
                "padding_bucket=x"):
        with pytest.raises(UsageError) as err:
            batching_options(bad)
        assert err.value.hint


def test_pick_batch_follows_tritons_rule():
    plain = BatchingOptions(max_batch_size=4)
    assert pick_batch([1, 1], plain, expired=False) == 0            # waits for a fuller batch
    assert pick_batch([1, 1], plain, expired=True) == 2             # the delay is over: send what is there
    assert pick_batch([1, 1, 1, 1, 1], plain, expired=False) == 4   # full: send now, the rest waits
    assert pick_batch([3, 2], plain, expired=False) == 1            # the next one does not fit: send now
    assert pick_batch([8], plain, expired=False) == 1               # larger than the limit: alone
    preferred = BatchingOptions(max_batch_size=8, preferred_batch_size=(2, 4))
    assert pick_batch([1, 1, 1, 1, 1], preferred, expired=False) == 4  # the largest preferred size: now
    assert pick_batch([1, 1, 1], preferred, expired=False) == 0
    assert pick_batch([1, 1, 1], preferred, expired=True) == 2       # expired: the largest preferred that forms
    assert pick_batch([3], preferred, expired=True) == 1             # none forms: everything


def test_merge_key_separates_shapes_and_dtypes():
    a = {"x": np.zeros((1, 4), np.float32)}
    assert merge_key(a) == merge_key({"x": np.ones((3, 4), np.float32)})
    assert merge_key(a) != merge_key({"x": np.zeros((1, 5), np.float32)})
    assert merge_key(a) != merge_key({"x": np.zeros((1, 4), np.float16)})
    assert merge_key({"x": np.zeros((1, 4)), "m": np.zeros((2, 4))}) is None  # dim 0 disagrees: alone


def test_concurrent_calls_share_batches_and_match_unbatched(seq_onnx):
    xs = _rows(24, 6)
    with optcli.load(seq_onnx) as plain:
        want = [plain.predict(x) for x in xs]
    with optcli.load(seq_onnx, batching={"max_batch_size": 8, "max_queue_delay_microseconds": 20000}) as m:
        got = call_together(m.predict, xs)
        stats = m.stats()
    for g, w in zip(got, want):
        np.testing.assert_allclose(g["y"], w["y"], rtol=1e-6)
        np.testing.assert_allclose(g["s"], w["s"], rtol=1e-5)
        assert g["y"].shape == (1, 6) and g["s"].shape == (1,)
    assert stats["rows"] == 24 and max(stats["histogram"]) > 1, stats
    assert max(stats["histogram"]) <= 8


def test_sequence_lengths_are_never_merged(seq_onnx):
    xs = [x for pair in zip(_rows(8, 5, seed=1), _rows(8, 9, seed=2)) for x in pair]  # 5, 9, 5, 9, ...
    with optcli.load(seq_onnx, batching={"max_batch_size": 16, "max_queue_delay_microseconds": 20000}) as m:
        futures = [m.predict_async(x) for x in xs]
        got = [f.result(timeout=60) for f in futures]
        stats = m.stats()
    for g, x in zip(got, xs):
        np.testing.assert_allclose(g["y"], 2 * x, rtol=1e-6)
        np.testing.assert_allclose(g["s"], x.sum(axis=1), rtol=1e-5)
    # 8 requests of each length, queued together: one batch per length, never one of 16.
    assert stats["histogram"] == {8: 2}, stats


def test_fixed_batch_artifact_is_refused(tmp_path):
    fixed = _seq_model(tmp_path / "fixed.onnx", batch=1)
    with pytest.raises(UsageError) as err:
        optcli.load(fixed, batching=True)
    assert "fixed dim 0 of 1" in str(err.value) and "without batching" in err.value.hint


def test_bad_input_fails_in_the_caller_and_close_drains(seq_onnx):
    m = optcli.load(seq_onnx, batching={"max_batch_size": 4, "max_queue_delay_microseconds": 200000})
    with pytest.raises(UsageError):
        m.predict({"x": np.zeros((1, 3, 3), np.float32)})  # wrong rank: refused before queueing
    futures = [m.predict_async(x) for x in _rows(3, 4)]   # waits for a 4th that never comes...
    m.close()                                              # ...close runs it at once
    assert all(f.result(timeout=5)["y"].shape == (1, 4) for f in futures)
    with pytest.raises(UsageError, match="closed"):
        m.predict(_rows(1, 4)[0])
    m.close()


def test_concurrency_runs_batches_side_by_side(seq_onnx):
    """Many callers, two sessions, requests back to back: every session handed between callers comes
    back (a lost one would first slow the batcher down, then hang it)."""
    xs = _rows(16, 3, seed=4)
    with optcli.load(seq_onnx, concurrency=2, batching={"max_batch_size": 4}) as m:
        got = call_together(lambda x: [m.predict(x)["y"] for _ in range(25)][-1], xs)
        batcher = m._batcher  # the count of free sessions is internal state
        # A caller has its result before the leader gives its session back (the batch's results are set, then
        # the handle returns): wait for that, as close() does; a lost session never comes back.
        with batcher.cond:
            batcher.cond.wait_for(lambda: batcher.idle == batcher.handles and not batcher.queue, timeout=10)
        assert batcher.idle == batcher.handles == 2 and not batcher.queue
        assert m.stats()["rows"] == 16 * 25
    for g, x in zip(got, xs):
        np.testing.assert_allclose(g, 2 * x, rtol=1e-6)


@pytest.mark.parametrize(("padding", "calls"), [("bucket", 2), ("auto", 2), ("longest", 1)])
def test_stats_count_gathered_batches_and_the_runner_calls_they_ran_as(tmp_path, padding, calls):
    """One gathered batch of short and long requests runs as one call per length group: stats say both."""
    path = make_ids_times_mask(tmp_path / "masked.onnx")
    lengths = [2, 60, 2, 60, 2, 60]
    requests = [{"input_ids": np.arange(1, n + 1)[None], "attention_mask": np.ones((1, n), np.int64)} for n in lengths]
    policy = {"max_batch_size": len(lengths), "max_queue_delay_microseconds": 5_000_000, "padding": padding,
              "padding_bucket": 16}
    with optcli.load(path, batching=policy) as m:
        got = [f.result(timeout=60) for f in [m.predict_async(r) for r in requests]]
        stats = m.stats()
    assert stats == {"batches": 1, "calls": calls, "wide_calls": 0, "rows": 6, "histogram": {6: 1}}
    for g, n in zip(got, lengths):
        np.testing.assert_array_equal(g["h"], np.arange(1, n + 1)[None])  # cut back to its own length
