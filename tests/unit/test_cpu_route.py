"""The fast search's route on a CPU (optcli/cpu/route.py), as the run's plan holds it (optcli/plan/): where the
priors say onnxruntime's INT8 route cannot win, simplify, fuse and the quantize stage are left out; everywhere
else they run. Real graphs (onnx.helper), the real priors and plan; the CPU's INT8 instruction set is the one
thing set by the test."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from compile_testkit import make_masked_encoder
from optcli.artifact import Artifact
from optcli.backends.torch.loader import ModelSource
from optcli.config import CompileConfig
from optcli.cpu.route import ONNXRUNTIME_ROUTE, Route
from optcli.onnx_model import io_specs, load_onnx, save_onnx
from optcli.plan import ModelFeatures, RunPlan, StageName, plan_run
from optcli.stages.base import StageContext

pytest.importorskip("openvino")
pytest.importorskip("nncf")


def _encoder(path: Path, large: bool = True) -> Path:
    """A masked encoder; large: 17.9 MB of weights (the route is for models of 16 MB or more)."""
    return make_masked_encoder(path, vocab=70000, hidden=64) if large else make_masked_encoder(path)


def _conv(path: Path, out_channels: int) -> Path:
    """One Conv + Relu; out_channels=1024 makes weights of 16.8 MB: a `large` model for the priors."""
    w = np.random.default_rng(0).standard_normal((out_channels, 64, 8, 8)).astype(np.float32) * 0.01
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"]), helper.make_node("Relu", ["c"], ["y"])]
    graph = helper.make_graph(nodes, "conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 64, 16, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", out_channels, 9, 9])],
                              [numpy_helper.from_array(w, "w")])
    save_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), path)
    return path


def _ctx(path: Path, tmp_path: Path, *, target: str = "cpu", precision: str = "int8", **cpu: object) -> StageContext:
    config = CompileConfig(model=str(path), out=tmp_path / "out")
    config.quantize.precision = precision
    if cpu:
        config.extra["cpu"] = dict(cpu)
    return StageContext(config=config, source=ModelSource(str(path), path, "onnx"), inputs=io_specs(load_onnx(path))[0],
                        target=target, out_dir=tmp_path / "out")


def _plan(ctx: StageContext, graph: Artifact) -> RunPlan:
    """The run's plan, completed with `graph` (the first ONNX graph of the run), as the pipeline makes it."""
    return plan_run(ctx.config, ModelFeatures(ctx.source.is_torch, graph), target=ctx.target)


def cpu_route(ctx: StageContext, graph: Artifact) -> Route:
    route = _plan(ctx, graph).route
    assert route is not None
    return route


def stage_skip(ctx: StageContext, graph: Artifact, stage: str) -> str | None:
    return _plan(ctx, graph).skip_reason(stage)


@pytest.fixture()
def vnni(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("optcli.quantize.flavour.u8s8_saturates", lambda: False)


@pytest.fixture()
def plain(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("optcli.quantize.flavour.u8s8_saturates", lambda: True)


def test_an_encoder_on_a_vnni_cpu_leaves_onnxruntimes_route_out(tmp_path: Path, vnni: None) -> None:
    path = _encoder(tmp_path / "enc.onnx")
    ctx = _ctx(path, tmp_path)
    r = cpu_route(ctx, Artifact(path, "onnx"))
    assert r.skip is not None and r.details["predicted_winner"].startswith("openvino-int8-nncf")
    assert r.details["features"] == {"precision": "int8", "kind": "encoder", "size": "large", "int8_isa": "vnni"}
    assert "onnxruntime-int8-dynamic predicted 1.35x" in r.skip  # the prior that decided, named
    for stage in ONNXRUNTIME_ROUTE:
        why = stage_skip(ctx, Artifact(path, "onnx"), stage)
        assert why and why.startswith("fast search:") and "--search thorough runs it" in why
    assert stage_skip(ctx, Artifact(path, "onnx"), "unpad") is None
    assert stage_skip(ctx, Artifact(path, "onnx"), "build") is None
    assert r.to_json()["onnxruntime_route"] == "skipped"


def test_a_small_encoder_keeps_it_onnxruntime_won_there(tmp_path: Path, vnni: None) -> None:
    # Per-call overhead decides on a small model: on the zoo's ALBERT (0.34 MB) onnxruntime's INT8 ran at
    # 0.44x NNCF's latency, and the route would not have built it.
    path = _encoder(tmp_path / "enc.onnx", large=False)
    r = cpu_route(_ctx(path, tmp_path), Artifact(path, "onnx"))
    assert r.skip is None and r.details["because"] == "a small model: every stage runs"
    assert r.details["features"]["size"] == "small"


def test_an_encoder_without_vnni_keeps_it_onnxruntime_can_win_there(tmp_path: Path, plain: None) -> None:
    path = _encoder(tmp_path / "enc.onnx")
    r = cpu_route(_ctx(path, tmp_path), Artifact(path, "onnx"))
    assert r.skip is None and "onnxruntime-int8-dynamic could win" in r.details["because"]
    assert r.to_json()["onnxruntime_route"] == "runs"


def test_a_small_cnn_keeps_it_onnxruntime_is_the_predicted_winner(tmp_path: Path, vnni: None) -> None:
    path = _conv(tmp_path / "small.onnx", 8)
    r = cpu_route(_ctx(path, tmp_path), Artifact(path, "onnx"))
    assert r.skip is None and r.details["features"]["kind"] == "conv" and r.details["features"]["size"] == "small"


@pytest.mark.parametrize("isa", ["vnni", "plain"])
def test_a_large_cnn_leaves_it_out_on_any_cpu(tmp_path: Path, isa: str, request: pytest.FixtureRequest) -> None:
    request.getfixturevalue(isa)
    path = _conv(tmp_path / "large.onnx", 1024)
    r = cpu_route(_ctx(path, tmp_path), Artifact(path, "onnx"))
    assert r.details["features"]["size"] == "large"
    assert r.skip is not None and r.details["predicted_winner"] == "openvino-int8-nncf"
    # both candidates of the quantize stage's graph are named as unable to win
    assert "onnxruntime-int8-qdq-u8s8 predicted" in r.skip and "openvino-int8-qdq-u8s8 predicted" in r.skip


@pytest.mark.parametrize("request_", [
    {"search": "thorough"}, {"backend": "onnxruntime"}, {"target": "tensorrt"}, {"precision": "fp16"},
    {"exclude_nodes": ["n0"]}, {"flavour": "dynamic"}, {"nncf": "off"}])
def test_requests_that_keep_every_stage(tmp_path: Path, vnni: None, request_: dict) -> None:
    # {"nncf": "off"}: the predicted winner is then s8/s8, which the evidence had less accurate (MiniLM
    # cosine 0.83): the route does not bet on it passing the tolerance.
    path = _encoder(tmp_path / "enc.onnx")
    opts = dict(request_)
    exclude, flavour = opts.pop("exclude_nodes", None), opts.pop("flavour", None)
    ctx = _ctx(path, tmp_path, **opts)
    if exclude:
        ctx.config.quantize.exclude_nodes = exclude
    if flavour:
        ctx.config.quantize.flavour = flavour
    r = cpu_route(ctx, Artifact(path, "onnx"))
    assert r.skip is None, request_
    if "nncf" in request_:
        assert "was less accurate in the evidence" in r.details["because"]
    assert all(stage_skip(ctx, Artifact(path, "onnx"), s) is None for s in ONNXRUNTIME_ROUTE)


def test_a_model_too_large_for_openvinos_builds_keeps_it(tmp_path: Path, vnni: None,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    # Over HEAVY_BUILD_BYTES the fast search builds no OpenVINO candidate: onnxruntime's is the only route.
    monkeypatch.setattr("optcli.cpu.search_run.HEAVY_BUILD_BYTES", 1)
    path = _encoder(tmp_path / "enc.onnx")
    r = cpu_route(_ctx(path, tmp_path), Artifact(path, "onnx"))
    assert r.skip is None and r.details["because"] == "no other route"


def test_the_plan_waits_for_the_first_graph_once_and_then_holds(tmp_path: Path, vnni: None) -> None:
    enc, cnn = _encoder(tmp_path / "enc.onnx"), _conv(tmp_path / "small.onnx", 8)
    ctx = _ctx(enc, tmp_path)
    names = [StageName.EXPORT, StageName.SIMPLIFY, StageName.FUSE, StageName.QUANTIZE_INT8, StageName.BUILD]
    before = plan_run(ctx.config, ModelFeatures(False), target="cpu", stages=names)
    assert before.route is None and before.skip_reason(StageName.SIMPLIFY) is None
    # only a stage the route governs, asked about an ONNX graph, completes it
    assert before.needs_graph(StageName.SIMPLIFY, Artifact(enc, "onnx"))
    assert not before.needs_graph(StageName.EXPORT, Artifact(enc, "onnx"))
    assert not before.needs_graph(StageName.SIMPLIFY, Artifact(tmp_path / "m.pt2", "pt2"))
    plan = plan_run(ctx.config, ModelFeatures(False, Artifact(enc, "onnx")), target="cpu", stages=names)
    assert not plan.needs_graph(StageName.FUSE, Artifact(cnn, "onnx"))  # later graphs of the run do not re-decide
    assert set(plan.skipped) == {StageName.SIMPLIFY, StageName.FUSE, StageName.QUANTIZE_INT8}
    assert plan.last_resort is not None and plan.last_resort.label == "last resort"
    assert plan.candidates[StageName.BUILD] and all(n.startswith(("onnxruntime", "openvino"))
                                                         for n in plan.candidates[StageName.BUILD])
    # a run without the route's stages has no route to wait for
    bare = plan_run(ctx.config, ModelFeatures(False), target="cpu", stages=[StageName.EXPORT, StageName.BUILD])
    assert not bare.route_pending and not bare.needs_graph(StageName.SIMPLIFY, Artifact(enc, "onnx"))


def test_openvino_starts_from_the_unpad_stages_graph_where_it_rewrote_the_exporters(tmp_path: Path) -> None:
    # On the route, unpad's input is the exporter's graph: its output is the graph NNCF needs (before, a
    # second rewrite of the exporter's graph was made and proven for the OpenVINO candidates).
    import shutil

    from optcli.backends.recipe import RecipeContext

    first = Artifact(_encoder(tmp_path / "enc.onnx"), "onnx")
    shutil.copy(first.path, tmp_path / "unpadded.onnx")
    unpad = Artifact(tmp_path / "unpadded.onnx", "onnx", stage="unpad", parent=first.sha256, meta={"unpad_bucket": 8})
    rctx = RecipeContext(stage=_ctx(first.path, tmp_path), artifact=unpad, lineage=[unpad, first], calib=None,
                         eval=None, precision="int8", tolerance=None, cpu=None, workdir=tmp_path, folder=tmp_path / "c",
                         candidates=[])
    assert rctx.first_float_onnx() is unpad


FLOAT_ROUTE = ("simplify", "fuse")


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("model", ["encoder", "cnn"])
def test_a_large_float_model_leaves_simplify_and_fuse_out(tmp_path: Path, vnni: None, precision: str,
                                                          model: str) -> None:
    # onnxruntime optimizes at load what the two stages do offline, and OpenVINO starts from the exporter's
    # graph: at FP32 / BF16 nothing the fast search builds reads what they write.
    path = _encoder(tmp_path / "m.onnx") if model == "encoder" else _conv(tmp_path / "m.onnx", 1024)
    ctx = _ctx(path, tmp_path, precision=precision)
    r = cpu_route(ctx, Artifact(path, "onnx"))
    if precision == "bf16" and r.details.get("because", "").startswith("no candidate starts"):
        pytest.skip("this CPU has no BF16 arithmetic: OpenVINO plans no BF16 candidate, every stage runs")
    assert r.skip is not None and r.stages == FLOAT_ROUTE and not r.skips_quantize
    assert r.details["features"]["precision"] == precision and r.details["features"]["size"] == "large"
    assert r.details["from_exporters_graph"] == [f"openvino-{precision}"]
    for stage in FLOAT_ROUTE:
        why = stage_skip(ctx, Artifact(path, "onnx"), stage)
        assert why == ("fast search: onnxruntime does this itself at load and OpenVINO starts from the exporter's "
                       "graph; --search thorough runs it")
    for stage in ("quantize-int8", "unpad", "build"):
        assert stage_skip(ctx, Artifact(path, "onnx"), stage) is None
    assert r.to_json()["onnxruntime_route"] == "skipped"


@pytest.mark.parametrize("request_", [{"size": "small"}, {"backend": "onnxruntime"}, {"search": "thorough"},
                                      {"target": "tensorrt"}, {"openvino": "missing"}])
def test_float_requests_that_keep_simplify_and_fuse(tmp_path: Path, vnni: None, request_: dict,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    opts = dict(request_)
    path = _encoder(tmp_path / "m.onnx", large=opts.pop("size", "large") == "large")
    if opts.pop("openvino", None):
        from optcli.backends import registry
        real = registry.is_installed
        monkeypatch.setattr(registry, "is_installed", lambda package: package != "openvino" and real(package))
    ctx = _ctx(path, tmp_path, precision="fp32", **opts)
    r = cpu_route(ctx, Artifact(path, "onnx"))
    assert r.skip is None, (request_, r.details)
    assert all(stage_skip(ctx, Artifact(path, "onnx"), s) is None for s in FLOAT_ROUTE)
    if "size" in request_:
        assert r.details["because"] == "a small model: every stage runs"
    if "backend" in request_ or "openvino" in request_:
        assert r.details["because"].startswith("no candidate starts from the exporter's graph")


def test_the_int8_route_still_owes_build_cpu_a_last_resort(tmp_path: Path, vnni: None) -> None:
    path = _encoder(tmp_path / "enc.onnx")
    assert cpu_route(_ctx(path, tmp_path), Artifact(path, "onnx")).skips_quantize
    assert not cpu_route(_ctx(path, tmp_path / "f", precision="fp32"), Artifact(path, "onnx")).skips_quantize
