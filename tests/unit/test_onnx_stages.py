"""The simplify and fuse stages on tiny graphs built with onnx.helper, run with the real onnxsim and
onnxruntime: what they fuse or fold, that outputs are unchanged, and that the batch stays dynamic."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from optcli.artifact import Artifact
from optcli.backends.torch.loader import ModelSource
from optcli.config import CompileConfig
from optcli.onnx_model import io_specs, load_onnx, op_histogram
from optcli.stages.base import StageContext
from optcli.stages.fuse import FuseStage, fusions_made, looks_like_encoder
from optcli.stages.simplify import SimplifyStage

ort = pytest.importorskip("onnxruntime")


def make_ctx(path: Path, tmp_path: Path, target: str = "cpu", **fuse: str) -> StageContext:
    config = CompileConfig(model=str(path), out=tmp_path)
    for key, value in fuse.items():
        setattr(config.fuse, key, value)
    inputs, _ = io_specs(load_onnx(path))
    return StageContext(config=config, source=ModelSource(str(path), path, "onnx"), inputs=inputs, target=target,
                        out_dir=tmp_path)


def run_stage(stage_cls, path: Path, tmp_path: Path, **kw):
    workdir = tmp_path / f"work-{stage_cls.name}"
    workdir.mkdir()
    stage = stage_cls(make_ctx(path, tmp_path, **kw))
    assert stage.skip_reason(Artifact(path, "onnx")) is None
    return stage.run(Artifact(path, "onnx"), workdir)


def ort_run(path: Path, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # the file as it is
    so.intra_op_num_threads = 1
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"]).run(None, feeds)


def feeds_for(path: Path, batch: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(batch)
    inputs, _ = io_specs(load_onnx(path))
    return {s.name: rng.standard_normal(s.concrete(batch)).astype(np.float32) for s in inputs}


def assert_same_outputs(a: Path, b: Path, batches=(1, 5)) -> None:
    for batch in batches:
        feeds = feeds_for(a, batch)
        for x, y in zip(ort_run(a, feeds), ort_run(b, feeds)):
            assert x.shape[0] == batch
            np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-5)


def first_dim(path: Path) -> object:
    return io_specs(load_onnx(path))[0][0].shape[0]


# -- fuse ----------------------------------------------------------------------------------------------

def test_fuse_matmul_add_relu_extended(matmul_onnx: Path, tmp_path: Path) -> None:
    result = run_stage(FuseStage, matmul_onnx, tmp_path)
    out = result.artifact.path
    assert out == tmp_path / "work-fuse" / "model.onnx" and out.is_file()
    assert op_histogram(load_onnx(out)) == {"com.microsoft.FusedGemm": 1}  # MatMul+Add -> Gemm, + Relu
    assert result.details["level"] == "extended"
    assert result.details["fusions"] == {"added": {"com.microsoft.FusedGemm": 1},
                                         "removed": {"Add": 1, "MatMul": 1, "Relu": 1}}
    assert result.artifact.meta["flavour"] == "onnxruntime-extended"
    assert isinstance(first_dim(out), str)
    assert_same_outputs(matmul_onnx, out)
    assert sorted(p.name for p in out.parent.iterdir()) == ["model.onnx"]  # no leftovers in the stage folder


def test_fuse_basic_keeps_plain_onnx_ops(matmul_onnx: Path, tmp_path: Path) -> None:
    result = run_stage(FuseStage, matmul_onnx, tmp_path, level="basic")
    ops = op_histogram(load_onnx(result.artifact.path))
    assert ops == {"Gemm": 1, "Relu": 1}
    assert result.artifact.meta["flavour"] == "onnx-standard"
    assert_same_outputs(matmul_onnx, result.artifact.path)


def test_fuse_conv_bn_relu(conv_onnx: Path, tmp_path: Path) -> None:
    extended = run_stage(FuseStage, conv_onnx, tmp_path).artifact.path
    ops = op_histogram(load_onnx(extended))
    assert "BatchNormalization" not in ops  # folded into the conv
    assert ops.get("com.microsoft.FusedConv") == 1 and "Relu" not in ops
    assert_same_outputs(conv_onnx, extended)
    assert [s.shape[0] for s in io_specs(load_onnx(extended))[0]] == ["N", "N"]


def test_fuse_for_tensorrt_is_basic_whatever_was_asked(conv_onnx: Path, tmp_path: Path) -> None:
    # TensorRT's parser takes no com.microsoft ops: that target always gets the BASIC level.
    workdir = tmp_path / "w"
    workdir.mkdir()
    stage = FuseStage(make_ctx(conv_onnx, tmp_path, target="tensorrt", level="extended"))
    assert stage.level() == "basic" and stage.fingerprint()["effective_level"] == "basic"
    ops = op_histogram(load_onnx(stage.run(Artifact(conv_onnx, "onnx"), workdir).artifact.path))
    assert not any(op.startswith("com.microsoft") for op in ops)
    assert "BatchNormalization" not in ops


def test_fuse_skips_non_onnx(tmp_path: Path, matmul_onnx: Path) -> None:
    stage = FuseStage(make_ctx(matmul_onnx, tmp_path))
    assert stage.skip_reason(Artifact(tmp_path / "m.engine", "engine")) == "input is engine, not ONNX"


def test_fuse_fingerprint_changes_with_its_config(matmul_onnx: Path, tmp_path: Path) -> None:
    a = FuseStage(make_ctx(matmul_onnx, tmp_path)).fingerprint()
    b = FuseStage(make_ctx(matmul_onnx, tmp_path, level="basic")).fingerprint()
    c = FuseStage(make_ctx(matmul_onnx, tmp_path, transformer="off")).fingerprint()
    assert a != b and a != c


def test_fusions_made() -> None:
    assert fusions_made({"MatMul": 2, "Add": 3, "Relu": 1}, {"Gemm": 2, "Add": 1, "Relu": 1}) == {
        "added": {"Gemm": 2}, "removed": {"MatMul": 2, "Add": 2}}
    assert fusions_made({"Conv": 1}, {"Conv": 1}) == {"added": {}, "removed": {}}


@pytest.mark.parametrize("ops, expected", [
    ({"MatMul": 4, "Softmax": 1, "LayerNormalization": 2}, True),
    ({"MatMul": 4, "Softmax": 1, "ReduceMean": 2, "Pow": 1}, True),   # decomposed LayerNorm (legacy export)
    ({"MatMul": 4, "Softmax": 1}, False),                             # attention but no norm
    ({"Conv": 4, "Relu": 4, "Gemm": 1}, False),
])
def test_looks_like_encoder(ops: dict[str, int], expected: bool) -> None:
    assert looks_like_encoder(ops) is expected


def test_fuse_failure_is_a_stage_error(tmp_path: Path, matmul_onnx: Path) -> None:
    # Valid protobuf that ORT refuses: an op that does not exist.
    import onnx
    from onnx import TensorProto, helper

    from optcli.errors import StageError

    graph = helper.make_graph([helper.make_node("NoSuchOp", ["X"], ["Y"])], "g",
                              [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", 2])],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["N", 2])])
    bad = tmp_path / "bad.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(bad))
    workdir = tmp_path / "w"
    workdir.mkdir()
    with pytest.raises(StageError) as info:
        FuseStage(make_ctx(bad, tmp_path)).run(Artifact(bad, "onnx"), workdir)
    assert "optimizer failed" in info.value.message and "--no-fuse" in info.value.hint


# -- simplify ------------------------------------------------------------------------------------------

def test_simplify_folds_and_keeps_the_dynamic_batch(foldable_onnx: Path, tmp_path: Path) -> None:
    before = op_histogram(load_onnx(foldable_onnx))
    result = run_stage(SimplifyStage, foldable_onnx, tmp_path)
    out = result.artifact.path
    after = op_histogram(load_onnx(out))
    assert sum(after.values()) < sum(before.values())
    assert "Identity" not in after and "Neg" not in after  # no-op and dead node gone
    assert "Add" not in after                               # W1 + W2 folded into one initializer
    inputs, outputs = io_specs(load_onnx(out))
    assert inputs[0].shape == ("batch", 2, 2)               # still dynamic, same name
    assert outputs[0].shape == ("batch", 3)
    assert_same_outputs(foldable_onnx, out, batches=(1, 5, 16))
    assert result.details["tool"].startswith("onnxsim")
    assert result.artifact.format == "onnx" and result.artifact.meta["external_data"] == []


def test_simplify_two_inputs_keep_their_batch(conv_onnx: Path, tmp_path: Path) -> None:
    out = run_stage(SimplifyStage, conv_onnx, tmp_path).artifact.path
    assert [s.shape for s in io_specs(load_onnx(out))[0]] == [("N", 3, 8, 8), ("N", 4, 8, 8)]
    assert_same_outputs(conv_onnx, out)


def test_simplify_skips_non_onnx(foldable_onnx: Path, tmp_path: Path) -> None:
    stage = SimplifyStage(make_ctx(foldable_onnx, tmp_path))
    assert stage.skip_reason(Artifact(tmp_path / "m.pt2", "pt2")) == "input is pt2, not ONNX"
    cfg = CompileConfig(model="m.onnx")
    cfg.simplify.enabled = False
    assert SimplifyStage.enabled(cfg) is False


def test_the_session_probe_feeds_token_ids_inside_the_embedding_table(tmp_path: Path) -> None:
    """The probe (quantize-fp16 runs it on every FP16 graph) drew ids in [0, 100): a model with a
    vocabulary under 100 failed it with "Gather ... indices element out of data bounds", so --fp16 of
    such a model failed on every target (found by the TensorRT-RTX build tests, issue 29)."""
    from compile_testkit import make_masked_encoder
    from optcli.backends.onnxruntime.session_probe import probe

    path = make_masked_encoder(tmp_path / "small-vocab.onnx", vocab=20)
    ok, message = probe(path)
    assert ok, message
