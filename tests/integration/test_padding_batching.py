"""Padding-aware batching (optcli/batch_merge.py) on a real encoder: a BERT built from a transformers
config (random weights), exported by the TorchScript exporter with dynamic batch and sequence axes.
Concurrent batch-1 requests of different lengths share a batch padded to its longest member, and
each caller gets what the model gives it alone: its own length on outputs with a sequence axis,
equal at every position; the pooled output equal."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import optcli
from compile_testkit import call_together
from optcli.batch_merge import length, merge, merge_key, padding_plan, run_padded, split
from optcli.tensor_spec import TensorSpec
from serve_testkit import export_bert_encoder

LENGTHS = [5, 17, 9, 31, 3, 12, 24, 7]  # all different: without padding no two could share a batch
ATOL = 1e-4


@pytest.fixture(scope="module")
def encoder_onnx(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return export_bert_encoder(tmp_path_factory.mktemp("padding") / "encoder.onnx")


def request(n: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    ids = rng.integers(1, 200, (1, n)).astype(np.int64)
    types = (np.arange(n) >= n // 2).astype(np.int64)[None]  # two segments: a token type that is not 0
    return {"input_ids": ids, "attention_mask": np.ones((1, n), np.int64), "token_type_ids": types}


def alone(path: Path, requests: list[dict[str, np.ndarray]]) -> list[dict[str, np.ndarray]]:
    with optcli.load(path) as model:
        return [model.predict(r) for r in requests]


def assert_each_as_alone(got: list[dict[str, np.ndarray]], want: list[dict[str, np.ndarray]]) -> None:
    for g, w, n in zip(got, want, LENGTHS):
        assert g["last_hidden_state"].shape == w["last_hidden_state"].shape == (1, n, 32)
        np.testing.assert_allclose(g["last_hidden_state"], w["last_hidden_state"], atol=ATOL, rtol=1e-4)
        np.testing.assert_allclose(g["pooled"], w["pooled"], atol=ATOL, rtol=1e-4)


def test_mixed_lengths_share_a_batch_and_each_caller_gets_its_own_answer(encoder_onnx: Path) -> None:
    requests = [request(n, i) for i, n in enumerate(LENGTHS)]
    want = alone(encoder_onnx, requests)
    # A long delay: every caller is queued before the first batch goes, whatever the machine's load.
    policy = {"max_batch_size": len(LENGTHS), "max_queue_delay_microseconds": 2_000_000}
    with optcli.load(encoder_onnx, batching=policy) as model:
        got = call_together(model.predict, requests)
        stats = model.stats()
    assert_each_as_alone(got, want)
    assert max(stats["histogram"]) > 1, f"mixed lengths never shared a batch: {stats}"
    with optcli.load(encoder_onnx, batching={**policy, "padding": "off"}) as model:
        call_together(model.predict, requests)
        assert set(model.stats()["histogram"]) == {1}  # padding off: different lengths never mix


def test_a_batch_padded_to_its_longest_equals_each_request_alone(encoder_onnx: Path) -> None:
    """The merge itself, on the real model: one padded call, split and cut back per request."""
    requests = [request(n, i) for i, n in enumerate(LENGTHS)]
    want = alone(encoder_onnx, requests)
    with optcli.load(encoder_onnx) as model:
        plan = padding_plan(model.inputs, model.outputs)
        assert plan is not None and plan.inputs == {"input_ids", "attention_mask", "token_type_ids"}
        assert plan.outputs == {"last_hidden_state"}
        feeds = [model.normalize(r) for r in requests]
        batch = merge(feeds, plan)
        assert batch["input_ids"].shape == (len(LENGTHS), max(LENGTHS))
        assert batch["attention_mask"].sum() == sum(LENGTHS)  # padding is masked out
        outs = model.run_normalized(batch)
        parts = split(outs, [1] * len(LENGTHS), [o.name for o in model.outputs], [length(f, plan) for f in feeds],
                      plan)
    assert_each_as_alone([dict(zip(["last_hidden_state", "pooled"], p)) for p in parts], want)


def test_bucket_padding_groups_by_length(encoder_onnx: Path) -> None:
    requests = [request(n, i) for i, n in enumerate(LENGTHS)]
    want = alone(encoder_onnx, requests)
    policy = {"max_batch_size": len(LENGTHS), "max_queue_delay_microseconds": 2_000_000, "padding": "bucket",
              "padding_bucket": 16}
    with optcli.load(encoder_onnx, batching=policy) as model:
        got = call_together(model.predict, requests)
        stats = model.stats()
    assert max(stats["histogram"]) > 1
    # A gathered batch holding both buckets (3..12 and 17..31) runs as two calls: the stats count both.
    assert stats["calls"] > stats["batches"], stats
    assert_each_as_alone(got, want)
    with optcli.load(encoder_onnx) as model:
        widths: list[int] = []

        def run(feeds):  # type: ignore[no-untyped-def]
            widths.append(int(feeds["input_ids"].shape[1]))
            return model.run_normalized(feeds)

        names = [o.name for o in model.outputs]
        feeds = [model.normalize(r) for r in requests]
        parts = run_padded(run, feeds, names, padding_plan(model.inputs, model.outputs, "bucket", bucket=16))
        assert widths == [12, 31]  # buckets of 16: 3,5,7,9,12 | 17,24,31: a short request is not padded to 31
        assert_each_as_alone([dict(zip(names, p)) for p in parts], want)
        widths.clear()
        run_padded(run, feeds, names, padding_plan(model.inputs, model.outputs, "longest"))
        assert widths == [31]
        widths.clear()
        parts = run_padded(run, feeds, names, padding_plan(model.inputs, model.outputs))  # auto
        assert 1 < len(widths) < len(LENGTHS) and widths == sorted(widths) and widths[-1] == 31
        assert_each_as_alone([dict(zip(names, p)) for p in parts], want)


def test_what_padding_needs_from_a_model() -> None:
    ids = TensorSpec("input_ids", ("batch", "sequence"), "int64")
    mask = TensorSpec("attention_mask", ("batch", "sequence"), "int64")
    out = TensorSpec("h", ("batch", "sequence", 8))
    pooled = TensorSpec("p", ("batch", 8))
    assert padding_plan([ids, mask], [out, pooled]).outputs == {"h"}  # type: ignore[union-attr]
    assert padding_plan([ids], [out]) is None  # no mask: padding would change what the model computes
    assert padding_plan([TensorSpec("input_ids", ("batch", 128), "int64"),
                         TensorSpec("attention_mask", ("batch", 128), "int64")], [out]) is None  # fixed length
    assert padding_plan([ids, mask, TensorSpec("decoder_input_ids", ("batch", "d"), "int64")], [out]) is None
    plan = padding_plan([ids, mask], [out], "bucket", bucket=16)
    short = {"input_ids": np.ones((1, 5), np.int64), "attention_mask": np.ones((1, 5), np.int64)}
    other = {k: np.ones((1, 15), np.int64) for k in short}
    long = {k: np.ones((1, 17), np.int64) for k in short}
    assert merge_key(short, plan) == merge_key(other, plan) == merge_key(long, plan)
    assert merge_key(short) != merge_key(other)  # no plan: equal shapes only


def test_auto_grouping_pays_for_padding_only_where_a_call_costs_more() -> None:
    from optcli.batch_merge import cheapest_groups

    # Equal lengths: one call. One long request among short ones: it runs apart.
    assert cheapest_groups([20, 20, 20, 20], [1] * 4) == [[0, 1, 2, 3]]
    assert cheapest_groups([10, 12, 11, 120], [1] * 4) == [[0, 2, 1], [3]]
    # Close lengths share a call: padding 10 -> 12 costs less than a call of its own.
    assert cheapest_groups([10, 12], [1, 1]) == [[0, 1]]
    assert cheapest_groups([10, 40], [1, 1]) == [[0], [1]]
    # Every index exactly once, groups contiguous in length, for any input.
    rng = np.random.default_rng(0)
    for _ in range(50):
        lens = [int(x) for x in rng.integers(2, 129, int(rng.integers(1, 33)))]
        groups = cheapest_groups(lens, [1] * len(lens))
        assert sorted(i for g in groups for i in g) == list(range(len(lens)))
        tops = [max(lens[i] for i in g) for g in groups]
        assert all(max(lens[i] for i in a) <= min(lens[i] for i in b) for a, b in zip(groups, groups[1:]))
        assert tops == sorted(tops)
