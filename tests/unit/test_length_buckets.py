"""Length bucketing: which rows run together, that the answers come back in the caller's order, and
what it refuses."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper

import optcli
from compile_testkit import make_matmul_add_relu
from optcli.errors import UsageError
from optcli.length_buckets import bucket_options, group_rows
from optcli.length_groups import BucketOptions


def _mask(extents: list[int], length: int = 64) -> np.ndarray:
    return (np.arange(length)[None, :] < np.array(extents)[:, None]).astype(np.int64)


def test_rows_are_grouped_by_bucket_shortest_first() -> None:
    groups = group_rows(_mask([40, 3, 17, 5, 64, 0]), BucketOptions(bucket=16, max_groups=8))
    # buckets 16, 32, 48, 64; a row of padding only goes with the longest: the unpad rewrite computes any
    # batch holding one at full length (only there are its outputs the original's)
    assert [g.tolist() for g in groups] == [[1, 3], [2], [0], [4, 5]]


def test_groups_merge_where_it_adds_the_least_padded_work() -> None:
    # buckets: 16 (1 row), 32 (4 rows), 64 (1 row): merging 16 into 32 adds 1 x 16 positions, 32 into 64
    # adds 4 x 32; with two groups allowed, the first merge is the cheap one
    groups = group_rows(_mask([3, 20, 21, 22, 23, 60]), BucketOptions(bucket=16, max_groups=2))
    assert [sorted(g.tolist()) for g in groups] == [[0, 1, 2, 3, 4], [5]]


def test_options() -> None:
    assert bucket_options(True) == BucketOptions() and bucket_options(8).bucket == 8
    assert bucket_options({"bucket": 32, "max_groups": 2}) == BucketOptions(32, 2)
    for bad in ({"bucket": 0}, {"size": 8}, "yes", 2.5):
        with pytest.raises(UsageError):
            bucket_options(bad)


def _masked_sum(path: Path) -> Path:
    """tokens (batch, seq) float, mask (batch, seq) int64 -> per-token tokens*mask, and the row sum."""
    x = helper.make_tensor_value_info("tokens", TensorProto.FLOAT, ["batch", 8])
    m = helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", 8])
    per = helper.make_tensor_value_info("per_token", TensorProto.FLOAT, ["batch", 8])
    total = helper.make_tensor_value_info("total", TensorProto.FLOAT, ["batch", 1])
    nodes = [helper.make_node("Cast", ["attention_mask"], ["mf"], to=TensorProto.FLOAT),
             helper.make_node("Mul", ["tokens", "mf"], ["per_token"]),
             helper.make_node("ReduceSum", ["per_token", "axes"], ["total"], keepdims=1)]
    axes = helper.make_tensor("axes", TensorProto.INT64, [1], [1])
    model = helper.make_model(helper.make_graph(nodes, "g", [x, m], [per, total], [axes]),
                              opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    path.write_bytes(model.SerializeToString())
    return path


def test_answers_come_back_in_the_callers_row_order(tmp_path: Path) -> None:
    model = _masked_sum(tmp_path / "m.onnx")
    rng = np.random.default_rng(0)
    feeds = {"tokens": rng.standard_normal((6, 8)).astype(np.float32), "attention_mask": _mask([8, 1, 5, 2, 8, 3], 8)}
    with optcli.load(model) as plain, optcli.load(model, length_buckets={"bucket": 2}) as bucketed:
        want, got = plain.predict(feeds), bucketed.predict(feeds)
        assert bucketed.stats()["sub_batches"] == 4 and bucketed.settings["length_buckets"]["bucket"] == 2
        assert bucketed.predict_async(feeds).result()["total"].tolist() == want["total"].tolist()
    for name in want:
        np.testing.assert_array_equal(got[name], want[name])


def test_a_model_without_a_mask_input_is_refused(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="no attention-mask input"):
        optcli.load(make_matmul_add_relu(tmp_path / "m.onnx"), length_buckets=True)


def test_valid_lengths_right_pad_the_mask_and_zero_the_tokens_past_it() -> None:
    from optcli.benchmark.valid_lengths import apply_valid_lengths, parse_valid_lengths

    feeds = {"input_ids": np.full((64, 128), 7, np.int64), "attention_mask": np.ones((64, 128), np.int64),
             "pixel": np.ones((64, 3), np.float32)}
    for text, lo, hi in (("short", 5, 40), ("uniform", 16, 128), ("8-20", 8, 20), ("full", 128, 128)):
        out = apply_valid_lengths(feeds, parse_valid_lengths(text), seed=1)
        lengths = out["attention_mask"].sum(1)
        assert lengths.min() >= lo and lengths.max() <= hi, text
        assert (out["attention_mask"][np.arange(64), lengths - 1] == 1).all()
        assert ((out["input_ids"] != 0) == (out["attention_mask"] == 1)).all()  # right padding, pad id 0
        assert out["pixel"] is feeds["pixel"]
    assert np.median(apply_valid_lengths(feeds, parse_valid_lengths("short"))["attention_mask"].sum(1)) < 20
    for bad in ("long", "20-8", "0-4", "8"):
        with pytest.raises(UsageError):
            parse_valid_lengths(bad)


def test_bench_with_valid_lengths_and_length_buckets(tmp_path: Path) -> None:
    import json

    from compile_testkit import run_main

    model = _masked_sum(tmp_path / "m.onnx")
    code, out, err = run_main("bench", str(model), "--batch", "8", "--valid-lengths", "1-8", "--length-buckets",
                              "--runs", "3", "--min-seconds", "0", "--warmup", "0", "--warmup-seconds", "0", "--json")
    assert code == 0, err
    result = json.loads(out)
    assert result["settings"]["valid_lengths"] == "1-8" and result["settings"]["length_buckets"] is True
    assert result["inputs"]["valid_lengths"] == "1-8"
    code, _, err = run_main("bench", str(model), "--valid-lengths", "long")
    assert code == 2 and "error: --valid-lengths 'long'" in err
