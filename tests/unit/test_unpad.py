"""The unpad rewrite on tiny encoders built inline with onnx.helper, run with the real onnxruntime: it
computes only up to the batch's valid length, equals the original on valid positions, pads outputs with
0, and is refused (skipped, with the reason) where the model's outputs depend on the padding."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from compile_testkit import masked_self_attention
from optcli.accuracy import compare_outputs, sequence_mask
from optcli.artifact import Artifact
from optcli.backends.torch.loader import ModelSource
from optcli.config import CompileConfig
from optcli.errors import UsageError
from optcli.onnx_model import int_bounds_onnx, io_specs, load_onnx, save_onnx
from optcli.stages.base import StageContext
from optcli.stages.unpad import UnpadStage
from optcli.unpad.graph import find_plan, rewrite
from optcli.unpad.options import unpad_config
from optcli.unpad.verify import MAX_DATA_SAMPLES, right_padded, sequence_axes, spanning_rows, synthetic_samples

ort = pytest.importorskip("onnxruntime")
S, H, V = 32, 8, 50


def encoder(leak: bool = False, symbolic: bool = False, H: int = H) -> object:
    """Embeddings + a folded position constant + one masked self-attention + a Reshape with S in its
    shape; outputs: hidden (batch x S x H) and the first token's vector (batch x H). `leak` adds the
    mean over all positions, padding included, to the first token's vector: a model the rewrite must refuse."""
    rng = np.random.default_rng(0)
    seq = "sequence" if symbolic else S
    inits = [numpy_helper.from_array(rng.standard_normal((V, H)).astype(np.float32), "emb"),
             numpy_helper.from_array(rng.standard_normal((H, H)).astype(np.float32) * 0.3, "wq"),
             numpy_helper.from_array(np.array(1.0, np.float32), "one"),
             numpy_helper.from_array(np.array(-1e4, np.float32), "big"),
             numpy_helper.from_array(np.array([1], np.int64), "ax1"),
             numpy_helper.from_array(np.array(0, np.int64), "zero"),
             numpy_helper.from_array(np.array([-1, S, H], np.int64), "shape")]
    nodes = [helper.make_node("Gather", ["emb", "input_ids"], ["tok"])]
    if symbolic:
        nodes.append(helper.make_node("Identity", ["tok"], ["x"]))
    else:  # a position embedding folded to a constant of the padded length, as exporters leave it
        inits.append(numpy_helper.from_array(rng.standard_normal((1, S, H)).astype(np.float32), "pos"))
        nodes.append(helper.make_node("Add", ["tok", "pos"], ["x"]))
    nodes += masked_self_attention()
    if symbolic:
        nodes.append(helper.make_node("Identity", ["ctx"], ["hidden"]))
    else:
        nodes.append(helper.make_node("Reshape", ["ctx", "shape"], ["hidden"]))
    nodes.append(helper.make_node("Gather", ["hidden", "zero"], ["first" if leak else "cls"], axis=1))
    if leak:
        nodes += [helper.make_node("ReduceMean", ["hidden", "ax1"], ["mean"], keepdims=0),
                  helper.make_node("Add", ["first", "mean"], ["cls"])]
    graph = helper.make_graph(
        nodes, "tiny_encoder",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", seq]),
         helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", seq])],
        [helper.make_tensor_value_info("hidden", TensorProto.FLOAT, ["batch", seq, H]),
         helper.make_tensor_value_info("cls", TensorProto.FLOAT, ["batch", H])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def run(path: Path, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)


def right_padded_feeds(lengths: list[int], seed: int = 0) -> dict[str, np.ndarray]:
    ids = np.random.default_rng(seed).integers(1, V, (len(lengths), S))
    mask = (np.arange(S)[None, :] < np.array(lengths)[:, None]).astype(np.int64)
    return {"input_ids": np.where(mask == 1, ids, 0).astype(np.int64), "attention_mask": mask}


@pytest.fixture()
def tiny(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.onnx"
    save_onnx(encoder(), path)
    return path


def rewritten(path: Path, tmp_path: Path, bucket: int = 8, pad: bool = True) -> tuple[Path, object]:
    model = load_onnx(path)
    plan = find_plan(model, bucket)
    assert not isinstance(plan, str)
    if pad:
        plan.seq_axes = {"hidden": [1]}
    info = rewrite(model, plan, pad_outputs=pad)
    out = tmp_path / ("unpadded.onnx" if pad else "body.onnx")
    save_onnx(model, out)
    return out, info


def test_plan_finds_mask_sequence_inputs_and_length(tiny: Path) -> None:
    plan = find_plan(load_onnx(tiny), 8)
    assert (plan.mask, plan.sequence_inputs, plan.length) == ("attention_mask", ["input_ids", "attention_mask"], S)
    assert find_plan(load_onnx(tiny), 32) == "the padded length 32 is within one bucket (32): nothing to skip"


def test_plan_refuses_a_model_without_a_mask(tmp_path: Path) -> None:
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])])
    assert "no attention-mask input" in find_plan(helper.make_model(g), 8)


def test_body_runs_at_the_bucketed_valid_length(tiny: Path, tmp_path: Path) -> None:
    body, info = rewritten(tiny, tmp_path, pad=False)
    # the folded position constant is sliced; the Reshape's S follows L
    assert any("pos [1, 32, 8] sliced on axes [1]" in c for c in info["constants_changed"])
    assert any(c.startswith("shape [-1, 32, 8]") for c in info["constants_changed"])
    # A row of padding only computes the full length (see the test below).
    for lengths, computed in (([3, 5], 8), ([9, 1], 16), ([32], 32), ([0, 0], 32), ([0, 3], 32)):
        hidden, cls = run(body, right_padded_feeds(lengths))
        assert hidden.shape == (len(lengths), computed, H) and cls.shape == (len(lengths), H)
    feeds = synthetic_samples(io_specs(load_onnx(tiny))[0], "attention_mask", ["input_ids", "attention_mask"], S,
                              {"input_ids": V}, n=2, lengths=np.array([7, 1]))
    assert sequence_axes(tiny, body, feeds, S, 8) == {"hidden": [1]}


def test_rewritten_graph_equals_the_original_on_valid_positions_and_pads_with_zero(tiny: Path, tmp_path: Path) -> None:
    out, _ = rewritten(tiny, tmp_path)
    model = load_onnx(out)
    assert [o.name for o in model.graph.output] == ["hidden", "cls"]
    typed = {v.name for v in [*model.graph.value_info, *model.graph.input, *model.graph.output]}
    assert all(o in typed for n in model.graph.node for o in n.output)  # quantizers read these types
    for lengths in ([5, 12, 1], [32, 3], [32]):
        feeds = right_padded_feeds(lengths)
        ref, got = run(tiny, feeds), run(out, feeds)
        assert got[0].shape == ref[0].shape == (len(lengths), S, H)
        acc = compare_outputs(ref, got, ["hidden", "cls"], valid=sequence_mask(feeds))
        assert acc["max_abs_err"] < 1e-5, acc
        np.testing.assert_array_equal(got[0][:, -(-max(lengths) // 8) * 8:], 0.0)  # past L: 0


@pytest.mark.parametrize("opset", [17, 18])   # ReduceMax takes its axes as an attribute before 18
def test_a_row_of_padding_only_gives_exactly_the_original_outputs(tmp_path: Path, opset: int) -> None:
    """Its every key is masked alike, so the original attends to all S positions equally; computed at a
    shorter length it attended to fewer (a BERT's pooled output was 5.8e-3 off, the stage's own check saw
    cosine -0.999 on such rows). The class: such a row among short ones, alone, a batch of them."""
    model = encoder()
    model.opset_import[0].version = opset
    path = tmp_path / "tiny.onnx"
    save_onnx(model, path)
    out, _ = rewritten(path, tmp_path)
    for lengths in ([0, 5, 3], [0], [0, 0], [5, 0, 32], [7, 0]):
        feeds = right_padded_feeds(lengths)
        ref, got = run(path, feeds), run(out, feeds)
        for r, g in zip(ref, got):  # every position of every row, the padding row's included
            np.testing.assert_allclose(g, r, rtol=0, atol=1e-6 * float(np.abs(r).max()), err_msg=str(lengths))


def test_the_stage_proves_a_row_of_padding_only(tiny: Path, tmp_path: Path) -> None:
    """The synthetic proof includes such a row, so a rewrite that changed it would be refused."""
    feeds = synthetic_samples(io_specs(load_onnx(tiny))[0], "attention_mask", ["input_ids", "attention_mask"], S,
                              {"input_ids": V})
    assert (feeds["attention_mask"].sum(1) == 0).any() and (feeds["attention_mask"].sum(1) == S).any()


def test_symbolic_length_graph_needs_no_constant_change(tmp_path: Path) -> None:
    path = tmp_path / "sym.onnx"
    save_onnx(encoder(symbolic=True), path)
    out, info = rewritten(path, tmp_path)
    assert info["constants_changed"] == []
    feeds = right_padded_feeds([4, 20])
    acc = compare_outputs(run(path, feeds), run(out, feeds), ["hidden", "cls"], valid=sequence_mask(feeds))
    assert acc["max_abs_err"] < 1e-5


def stage_for(path: Path, tmp_path: Path, target: str = "cpu", unpad: dict | None = None,
              **quantize: object) -> tuple[UnpadStage, Artifact]:
    config = CompileConfig(model=str(path), out=tmp_path)
    config.extra["unpad"] = {"bucket": 8, **(unpad or {})}
    for key, value in quantize.items():
        setattr(config.quantize, key, value)
    inputs, _ = io_specs(load_onnx(path))
    ctx = StageContext(config=config, source=ModelSource(str(path), path, "onnx"), inputs=inputs, target=target,
                       out_dir=tmp_path, int_high=int_bounds_onnx(path))  # as the pipeline does
    return UnpadStage(ctx), Artifact(path, "onnx")


def run_stage(stage: UnpadStage, artifact: Artifact, tmp_path: Path) -> object:
    assert stage.skip_reason(artifact) is None
    work = tmp_path / "work"
    work.mkdir()
    return stage.run(artifact, work)


def test_stage_applies_and_proves_on_random_right_padded_samples(tiny: Path, tmp_path: Path) -> None:
    result = run_stage(*stage_for(tiny, tmp_path), tmp_path)
    d = result.details
    assert d["applied"] is True and "skipped" not in d
    assert d["sequence_outputs"] == {"hidden": [1]} and d["proof"][0]["max_abs_err"] < 1e-5


def test_the_unpadded_artifact_takes_any_length_up_to_the_exported_one(tiny: Path, tmp_path: Path) -> None:
    """Issue 31: the export fixed S; the artifact takes `1 x 14` unpadded (as sentence-transformers users
    send it) and gives that row's outputs, equal to the original's on the same row padded to S."""
    import optcli
    from optcli.sequence_axis import recorded_lengths

    artifact = run_stage(*stage_for(tiny, tmp_path), tmp_path).artifact
    model = load_onnx(artifact.path)
    assert [i.type.tensor_type.shape.dim[1].dim_param for i in model.graph.input] == ["sequence", "sequence"]
    assert recorded_lengths(model) == {"sequence": S}  # what the pipeline measures and calibrates at
    with optcli.load(artifact.path) as loaded:
        for lengths in ([14], [3, 1], [S, 20], [1]):
            padded = right_padded_feeds(lengths)
            n = max(lengths)
            got = loaded.predict({k: v[:, :n] for k, v in padded.items()})
            ref = run(tiny, padded)
            assert got["hidden"].shape == (len(lengths), n, H) and got["cls"].shape == (len(lengths), H)
            valid = padded["attention_mask"][:, :n, None] == 1
            np.testing.assert_allclose(np.where(valid, got["hidden"], 0), np.where(valid, ref[0][:, :n], 0),
                                       atol=1e-5)
            np.testing.assert_allclose(got["cls"], ref[1], atol=1e-5)


def test_stage_refuses_a_model_whose_outputs_read_the_padding(tmp_path: Path) -> None:
    path = tmp_path / "leak.onnx"
    save_onnx(encoder(leak=True), path)
    d = run_stage(*stage_for(path, tmp_path), tmp_path).details
    assert d["applied"] is False
    assert d["skipped"].startswith("output 'cls' differs on valid positions of random right-padded samples")


def test_stage_refuses_left_padded_data(tiny: Path, tmp_path: Path) -> None:
    feeds = right_padded_feeds([5, 9, 30, 2])
    left = {k: v[:, ::-1].copy() for k, v in feeds.items()}
    data = tmp_path / "eval"
    data.mkdir()
    np.savez(data / "part-000.npz", **left)
    d = run_stage(*stage_for(tiny, tmp_path, eval=data), tmp_path).details
    assert d["skipped"].startswith("the data") and "not right-padded" in d["skipped"]
    assert d["data_valid_length"]["computed_share_batch1"] == 1.0  # left padding: the extent is the whole length


def test_stage_reports_the_data_lengths_it_proved_on(tiny: Path, tmp_path: Path) -> None:
    data = tmp_path / "eval"
    data.mkdir()
    np.savez(data / "part-000.npz", **right_padded_feeds([5, 9, 12, 2]))
    d = run_stage(*stage_for(tiny, tmp_path, eval=data), tmp_path).details
    assert d["applied"] and d["data_valid_length"] == {"median": 7.0, "min": 2, "max": 12, "padded_length": 32,
                                                       "computed_share_batch1": 0.375}
    assert d["proof"][1]["data"].startswith("the held-out data")


def test_the_proof_spans_the_held_out_lengths_with_a_bounded_sample(tiny: Path, tmp_path: Path) -> None:
    """The proof costs two runs per sample at the padded length: held-out rows are chosen to cover the
    shortest, the longest and ranks between, not the first N (issue 16: 31 s of a BERT-base compile)."""
    lengths = [3] * 40 + list(range(4, 31))  # many short rows first, the long ones after row 40
    data = tmp_path / "eval"
    data.mkdir()
    np.savez(data / "part-000.npz", **right_padded_feeds(lengths))
    d = run_stage(*stage_for(tiny, tmp_path, eval=data), tmp_path).details
    held = d["proof"][1]
    assert d["applied"] and held["samples"] == MAX_DATA_SAMPLES
    assert held["mean_valid_length"] > 6  # the first 16 rows are all 3 long: a mean of 3
    assert d["data_valid_length"]["max"] == 30  # figures from every row


def test_spanning_rows_keep_the_extremes_shortest_first() -> None:
    # Shortest first: a proof batch then holds near lengths, and the rewrite computes each batch to its
    # longest row (in the data's order most batches reach near the padded length).
    mask = (np.arange(10)[None, :] < np.array([5, 1, 9, 3, 7, 2, 8, 4, 6, 10])[:, None]).astype(np.int64)
    rows = spanning_rows(mask, 4)
    lengths = mask.sum(1)[rows]
    assert len(rows) == 4 and len(set(rows.tolist())) == 4
    assert lengths.tolist() == sorted(lengths.tolist()) and lengths[0] == 1 and lengths[-1] == 10
    every = spanning_rows(mask, 20)
    assert sorted(every.tolist()) == list(range(10)) and mask.sum(1)[every].tolist() == list(range(1, 11))


def test_right_padded_and_sequence_mask() -> None:
    assert right_padded(np.array([[1, 1, 0], [0, 0, 0], [1, 1, 1]]))
    assert not right_padded(np.array([[0, 1, 1]]))
    feeds = {"input_ids": np.ones((2, 3)), "attention_mask": np.array([[1, 0, 0], [1, 1, 0]])}
    assert sequence_mask(feeds).tolist() == [[True, False, False], [True, True, False]]
    assert sequence_mask({"x": np.ones((2, 3))}) is None


def test_valid_positions_only_for_outputs_with_a_sequence_axis() -> None:
    mask = np.array([[1, 1, 0, 0]], bool)
    ref = np.ones((1, 4, 2))
    got = ref.copy()
    got[0, 2:] = 7.0  # garbage on the padding
    assert compare_outputs([ref], [got], ["h"], valid=mask)["max_abs_err"] == 0.0
    assert compare_outputs([ref], [got], ["h"])["max_abs_err"] == 6.0
    pooled = np.ones((1, 3))  # no sequence axis: every value counts
    assert compare_outputs([pooled], [pooled * 2], ["p"], valid=mask)["max_abs_err"] == 1.0


def test_unpad_config_section() -> None:
    config = CompileConfig(model="m.onnx")
    assert unpad_config(config).enabled and unpad_config(config).bucket == 16
    config.extra["unpad"] = {"bucket": 0}
    with pytest.raises(UsageError, match="bucket"):
        unpad_config(config)
    config.extra["unpad"] = {"buckets": 8}
    with pytest.raises(UsageError, match="unknown key 'buckets'"):
        unpad_config(config)


def test_tensorrt_target_is_opt_in_and_checked_by_the_preflight(tiny: Path, tmp_path: Path) -> None:
    stage, artifact = stage_for(tiny, tmp_path, target="tensorrt")
    assert stage.skip_reason(artifact).startswith("target is tensorrt: the rewrite reads a length from the mask's")
    # Issue 29, F5: the preflight passed the rewritten graph, whose outputs are shaped by the mask's values
    # (TensorRT builds that; optcli's runner cannot allocate such outputs). It is now refused with the reason.
    d = run_stage(*stage_for(tiny, tmp_path, target="tensorrt", unpad={"tensorrt": True}), tmp_path).details
    assert d["applied"] is False and "the tensorrt target refuses the rewritten graph" in d["skipped"]
    assert "[data-dependent;" in d["skipped"] and d["proof"]


def test_stage_refuses_when_the_hidden_size_equals_the_padded_length(tmp_path: Path) -> None:
    path = tmp_path / "square.onnx"
    save_onnx(encoder(H=S), path)  # S in a shape or a constant's dims no longer says "sequence"
    d = run_stage(*stage_for(path, tmp_path), tmp_path).details
    assert d["applied"] is False and d["skipped"].startswith("the graph does not run at a shorter length")


@pytest.mark.slow  # two whole pipeline runs
def test_pipeline_reports_a_refused_rewrite_as_skipped_and_goes_on_with_its_input(tmp_path: Path) -> None:
    from optcli.api import compile as api_compile

    path = tmp_path / "leak.onnx"
    save_onnx(encoder(leak=True), path)
    for expected_first in (True, False):  # the second run reuses the stage's cache entry: same verdict
        report = api_compile(path, out=tmp_path / "out", target="cpu", bench=False, backend="onnxruntime",
                             unpad={"bucket": 8}, check=True)
        unpad = report.stage("unpad")
        assert unpad.status == "skipped" and unpad.reason.startswith("output 'cls' differs on valid positions")
        fuse = report.stage("fuse")
        assert fuse.status == ("ok" if expected_first else "cached")
        assert fuse.graph["nodes_before"] == report.stage("simplify").graph["nodes_after"]  # not the rewrite


class RecordingRuns:
    """GraphRuns that remembers which graphs ran (the probe's body is one of them)."""

    def __init__(self) -> None:
        from optcli.unpad.verify import GraphRuns

        self.inner, self.ran = GraphRuns(), []

    def run(self, path: Path, feeds: dict[str, np.ndarray], batch: int) -> tuple[list[np.ndarray], list[str]]:
        self.ran.append(path.name)
        return self.inner.run(path, feeds, batch)

    def forget(self, path: Path) -> None:
        self.inner.forget(path)


def _twin(tiny: Path, tmp_path: Path, known: object, synthetic: int | None = 4) -> tuple[str | None, dict, list[str]]:
    from optcli.unpad.apply import rewrite_and_prove

    inputs, _ = io_specs(load_onnx(tiny))
    runs, details = RecordingRuns(), {}
    reason = rewrite_and_prove(tiny, tmp_path / "twin.onnx", inputs=inputs, int_high={"input_ids": V}, bucket=8,
                               runs=runs, details=details, known_axes=known, synthetic=synthetic)
    runs.inner.close()
    return reason, details, runs.ran


def test_known_sequence_axes_spare_the_probe_and_the_proof_still_runs(tiny: Path, tmp_path: Path) -> None:
    reason, details, ran = _twin(tiny, tmp_path, {"hidden": [1]})
    assert reason is None and (tmp_path / "twin.onnx").exists()
    assert not any(name.startswith("probe-") for name in ran) and "twin.onnx" in ran
    assert details["proof"][0]["samples"] == 4 and details["proof"][0]["max_abs_err"] < 1e-5


def test_wrong_known_axes_fail_the_proof_and_the_probe_finds_the_right_ones(tiny: Path, tmp_path: Path) -> None:
    reason, details, ran = _twin(tiny, tmp_path, {"hidden": [2]})
    assert reason is None and details["sequence_outputs"] == {"hidden": [1]}
    assert any(name.startswith("probe-") for name in ran) and (tmp_path / "twin.onnx").exists()


@pytest.mark.parametrize("known", [None, {"no_such_output": [1]}, {"hidden": ["1"]}, {"hidden": [True]},
                                   {"hidden": [99]}, ["hidden"], "hidden"])
def test_unusable_known_axes_fall_back_to_the_declared_shapes(known: object, tiny: Path, tmp_path: Path) -> None:
    """They are read back from a stage record: anything but {output of this graph: [small ints]} is
    ignored, and the outputs' declared shapes (hidden: batch x S x H) say where S is."""
    reason, details, ran = _twin(tiny, tmp_path, known)
    assert reason is None and details["sequence_outputs"] == {"hidden": [1]}
    assert not any(name.startswith("probe-") for name in ran)


def test_outputs_whose_declared_dims_are_unknown_are_probed(tmp_path: Path) -> None:
    model = encoder()
    for out in model.graph.output:
        for d in out.type.tensor_type.shape.dim:
            d.Clear()  # rank known, sizes not: the shapes say no output carries S, the proof disagrees
    save_onnx(model, tmp_path / "unknown.onnx")
    reason, details, ran = _twin(tmp_path / "unknown.onnx", tmp_path, None)
    assert reason is None and details["sequence_outputs"] == {"hidden": [1]}
    assert any(name.startswith("probe-") for name in ran)


def test_an_output_without_a_declared_rank_is_refused_with_a_reason(tmp_path: Path) -> None:
    model = encoder()
    model.graph.output[0].type.tensor_type.ClearField("shape")
    save_onnx(model, tmp_path / "shapeless.onnx")
    reason, _, _ = _twin(tmp_path / "shapeless.onnx", tmp_path, None)
    assert reason == "output 'hidden' declares no shape of that rank: its sequence axis cannot be padded back"
    assert not (tmp_path / "twin.onnx").exists()


def test_declared_axes_name_s_once_per_output_or_give_up() -> None:
    from optcli.unpad.apply import declared_axes

    assert declared_axes(encoder(), S) == {"hidden": [1]}
    assert declared_axes(encoder(symbolic=True), "sequence") == {"hidden": [1]}
    assert declared_axes(encoder(H=S), S) is None  # hidden size = S: S on two axes of `hidden`
    assert declared_axes(encoder(), S + 1) == {}  # S nowhere: no output carries the sequence


def test_evaluation_runs_padded_text_in_batches_of_similar_length_and_keeps_sample_order(tiny: Path,
                                                                                          tmp_path: Path) -> None:
    """The accuracy gate's outputs (FP32 reference, INT8 candidates) of an unpadded graph: rows grouped
    by valid length so each batch computes up to its own longest row; results in the data's order."""
    from optcli.backends.onnxruntime.runner import OnnxRuntimeRunner
    from optcli.calibration.dataset import SampleSet
    from optcli.quantize.evaluate import LENGTH_BATCH, runner_outputs

    path, _ = rewritten(tiny, tmp_path)
    lengths = [int(x) for x in np.random.default_rng(3).integers(1, S + 1, 3 * LENGTH_BATCH + 5)]
    samples = SampleSet(right_padded_feeds(lengths, seed=4), None, "test", "npz")

    class Recording(OnnxRuntimeRunner):
        seen: list[int] = []

        def run_normalized(self, feeds):  # the longest valid length of each batch run
            self.seen.append(int((np.asarray(feeds["attention_mask"]) != 0).sum(1).max()))
            return super().run_normalized(feeds)

    runner = Recording(path)
    try:
        outs = runner_outputs(runner, samples)
    finally:
        runner.close()
    assert Recording.seen == sorted(Recording.seen) and len(Recording.seen) == 4
    one_by_one = [run(path, {k: v[i:i + 1] for k, v in samples.arrays.items()}) for i in range(len(lengths))]
    valid = (samples.arrays["attention_mask"] != 0)[:, :, None]  # padded positions hold no result
    hidden, cls = outs
    np.testing.assert_allclose(hidden * valid, np.concatenate([o[0] for o in one_by_one]) * valid, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(cls, np.concatenate([o[1] for o in one_by_one]), rtol=1e-5, atol=1e-5)


def test_the_proof_leaves_the_rewrites_outputs_on_every_held_out_row_as_the_fp32_reference(tiny: Path,
                                                                                          tmp_path: Path) -> None:
    """The proof runs the rewrite on every held-out row (it compares the rows spanning the lengths): the
    run's FP32 reference on that data, keyed by the rewrite's bytes and the data's, equal to run_model's."""
    from optcli.calibration.split import evaluation_set
    from optcli.quantize.evaluate import reference_outputs, run_model

    data = tmp_path / "eval"
    data.mkdir()
    np.savez(data / "part-000.npz", **right_padded_feeds([3] * 20 + list(range(4, 31))))
    stage, artifact = stage_for(tiny, tmp_path, eval=data)
    made = run_stage(stage, artifact, tmp_path).artifact
    assert stage.ctx.state.fp32_outputs  # the stage filled it
    ev = evaluation_set(stage.ctx.config.quantize, stage.ctx.inputs, stage.ctx.inputs, stage.ctx.int_high)
    assert len(ev) == 47 and stage.ctx.state.fp32_outputs.keys() == {f"{made.sha256}:{ev.digest()}"}
    shared, names = reference_outputs(stage.ctx.state.fp32_outputs, made.path, made.sha256, ev)
    fresh, fresh_names = run_model(made.path, ev)
    assert names == fresh_names
    for a, b in zip(shared, fresh):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_a_refused_rewrite_leaves_no_reference(tmp_path: Path) -> None:
    path = tmp_path / "leak.onnx"
    save_onnx(encoder(leak=True), path)
    data = tmp_path / "eval"
    data.mkdir()
    np.savez(data / "part-000.npz", **right_padded_feeds([5, 9, 30, 2]))
    stage, artifact = stage_for(path, tmp_path, eval=data)
    assert run_stage(stage, artifact, tmp_path).details["applied"] is False
    assert not stage.ctx.state.fp32_outputs


def test_a_compile_runs_the_rewrite_on_the_held_out_rows_once(tmp_path: Path, monkeypatch) -> None:
    """The INT8 gate and build-cpu judge against the proof's outputs: neither runs the unpadded graph on
    the held-out rows again (1.3 s of a BERT-base compile, issue 16)."""
    import os

    import optcli.quantize.evaluate as evaluate
    from compile_testkit import make_masked_encoder, read_report, run_main

    model = make_masked_encoder(tmp_path / "enc.onnx", vocab=V, hidden=H, seq=S)
    for name, seed in (("calib", 1), ("eval", 2)):
        (tmp_path / name).mkdir()
        lengths = np.random.default_rng(seed).integers(1, S + 1, 24).tolist()
        np.savez(tmp_path / name / "part-000.npz", **right_padded_feeds(lengths, seed=seed))
    ran: list[int] = []
    real = evaluate.run_model

    def counting(path, *args, **kwargs):
        ran.append(os.stat(path).st_ino)
        return real(path, *args, **kwargs)

    monkeypatch.setattr(evaluate, "run_model", counting)
    out = tmp_path / "o"
    code, _, err = run_main("compile", str(model), "--int8", "--calib", str(tmp_path / "calib"), "--eval",
                            str(tmp_path / "eval"), "--out", str(out), "--backend", "onnxruntime",
                            "--search", "thorough", "--no-bench")
    report = read_report(out)
    unpad = next(s for s in report["stages"] if s["name"] == "unpad")
    assert unpad["status"] == "ok" and unpad["details"]["applied"], (code, err)
    assert next(s for s in report["stages"] if s["name"] == "quantize-int8")["status"] == "ok"
    rewrite = os.stat(out / unpad["artifact"]).st_ino
    assert rewrite not in ran
