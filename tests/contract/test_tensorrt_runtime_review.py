"""The second review's runtime findings (issue 29: F1, F4, F7, F8, F9), one block each, against the
TensorRT double. Each test failed on the code before its fix: F1 through the double's CUDA graph
model (a replay runs what was captured, with the context's state as it is when replayed), the
others through optcli's own behaviour. Nothing here ran on a GPU."""
from __future__ import annotations

import types
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from fake_cuda import FakeGraph, TorchShim
from fake_tensorrt import make_tensorrt
from test_tensorrt_runner_contract import MACHINE, engine_for, reference, save_model

torch = pytest.importorskip("torch")

import optcli.backends.tensorrt.runner as runner_module  # noqa: E402
from optcli import api  # noqa: E402
from optcli.backends.tensorrt import engine_loader, handles, io_types  # noqa: E402
from optcli.backends.tensorrt.builder import deserialize, make_logger, obtain_engine  # noqa: E402
from optcli.backends.tensorrt.options import TensorRTConfig  # noqa: E402
from optcli.backends.tensorrt.profiles import build_profiles  # noqa: E402
from optcli.errors import UsageError  # noqa: E402
from optcli.onnx_model import io_specs  # noqa: E402
from optcli.plan.run_state import RunState  # noqa: E402
from optcli.tensor_spec import parse_input_spec  # noqa: E402


@pytest.fixture
def fake(monkeypatch):
    trt = make_tensorrt()
    shim = TorchShim(trt)
    monkeypatch.setattr(runner_module, "require", lambda module, purpose: {"tensorrt": trt, "torch": shim}[module])
    trt.shim = shim  # type: ignore[attr-defined]
    return trt


def calls(trt, what: str) -> list:
    return [args for w, args in trt.calls if w == what]


def save(path: Path, nodes: list, inputs: list, outputs: list, inits: list | None = None, opset: int = 17) -> Path:
    model = helper.make_model(helper.make_graph(nodes, "g", inputs, outputs, inits or []),
                              opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 9
    onnx.save(model, str(path))
    return path


def build(trt, tmp_path: Path, model: Path, pins: list[str] | None = None, batch=(1, 4, 16)) -> Path:
    specs, _ = io_specs(onnx.load(str(model)))
    profiles = build_profiles(specs, pinned=[parse_input_spec(p) for p in pins or []], batch=batch)
    got = obtain_engine(trt, model, profiles, TensorRTConfig(engine_cache_enabled=False,
                                                            timing_cache=tmp_path / "t.cache"), MACHINE)
    path = tmp_path / f"{model.stem}.engine"
    path.write_bytes(got.engine_bytes)
    got.metadata.write(path.with_name(path.name + ".json"))
    return path


def idle_handles(runner) -> list:
    held = [runner._handles.get() for _ in range(runner.concurrency)]
    for slot in held:
        runner._handles.put(slot)
    return held


# -- F1: one execution context per CUDA graph -------------------------------------------------------
def test_f1_the_double_replays_what_was_captured_with_the_state_of_the_replay(fake, tmp_path):
    """The double itself: TensorRT applies a shape change at the next enqueue and a replay skips it,
    so a graph captured at one shape, replayed after the context ran another, gives garbage."""
    engine = deserialize(fake, engine_for(fake, tmp_path, save_model(tmp_path / "m.onnx")).read_bytes(),
                         make_logger(fake))
    context = engine.create_execution_context()
    x, y = (fake.shim.empty(16 * n, dtype=torch.float32, device="cuda") for n in (4, 3))
    assert context.set_tensor_address("x", x.data_ptr()) and context.set_tensor_address("y", y.data_ptr())
    x[:8] = torch.arange(8, dtype=torch.float32)
    context.set_input_shape("x", (2, 4))
    graph = FakeGraph()
    graph.capture_begin()
    assert context.execute_async_v3(1) is False   # the first enqueue after a shape change cannot be captured
    graph.capture_end()
    assert context.execute_async_v3(1)
    graph = FakeGraph()
    graph.capture_begin()
    assert context.execute_async_v3(1)
    graph.capture_end()
    graph.replay()
    np.testing.assert_allclose(y[:6].numpy().reshape(2, 3), reference(x[:8].numpy().reshape(2, 4)), rtol=1e-6)
    context.set_input_shape("x", (4, 4))
    assert context.execute_async_v3(1)
    context.set_input_shape("x", (2, 4))
    graph.replay()
    assert np.isnan(y[:6].numpy()).all() and calls(fake, "stale_replay")


def test_f1_alternating_shapes_with_cuda_graphs_match_the_reference(fake, tmp_path):
    """The review's case: batch 2, then 4, then 2 again replayed the batch-2 graph on a context
    the batch-4 enqueue had set up (NaN from the double; wrong results on a GPU)."""
    engine = engine_for(fake, tmp_path, save_model(tmp_path / "m.onnx"))
    rng = np.random.default_rng(0)
    with runner_module.TensorRTRunner(engine, cuda_graph=True) as runner:
        for batch in (2, 4, 2, 4, 2, 7, 2):
            x = rng.standard_normal((batch, 4)).astype(np.float32)
            np.testing.assert_allclose(runner.predict({"x": x})["y"], reference(x), rtol=1e-6)
        slot, = idle_handles(runner)
        assert sorted(k[0][0][1][0] for k in slot.graphed) == [2, 4, 7]
        assert all(ctx.graph is not None for ctx in slot.graphed.values())
    assert not calls(fake, "stale_replay")
    assert FakeGraph.captures == 3 and len(calls(fake, "replay")) == 4
    # every context got its shapes once (the first, made for the largest shapes, was set to 16x4)
    assert calls(fake, "set_input_shape") == [("x", (16, 4)), ("x", (2, 4)), ("x", (4, 4)), ("x", (7, 4))]


def test_f1_contexts_of_a_handle_share_one_user_managed_allocation(fake, tmp_path):
    engine = engine_for(fake, tmp_path, save_model(tmp_path / "m.onnx"))
    xs = [np.random.default_rng(i).standard_normal((1 + i % 3, 4)).astype(np.float32) for i in range(12)]
    with runner_module.TensorRTRunner(engine, cuda_graph=True, concurrency=2) as runner:
        futures = [runner.predict_async({"x": x}) for x in xs]
        for x, fut in zip(xs, futures):
            np.testing.assert_allclose(fut.result()["y"], reference(x), rtol=1e-6)
        memories = [{ctx.context._memory for ctx in slot.contexts()} for slot in idle_handles(runner)]
    assert set(calls(fake, "create_execution_context")) == {("USER_MANAGED",)}
    assert set(calls(fake, "set_device_memory")) == {(4096,)}   # the engine's size for profile 0
    assert [len(m) for m in memories] == [1, 1] and memories[0] != memories[1]


def test_f1_least_recently_used_contexts_are_dropped_past_the_limit(fake, tmp_path, monkeypatch):
    monkeypatch.setattr(handles, "MAX_GRAPHS", 2)
    engine = engine_for(fake, tmp_path, save_model(tmp_path / "m.onnx"))
    rng = np.random.default_rng(1)
    with runner_module.TensorRTRunner(engine, cuda_graph=True) as runner:
        for batch in (1, 2, 3, 1, 2, 3):
            x = rng.standard_normal((batch, 4)).astype(np.float32)
            np.testing.assert_allclose(runner.predict({"x": x})["y"], reference(x), rtol=1e-6)
        slot, = idle_handles(runner)
        assert len(slot.graphed) == 2
    assert not calls(fake, "stale_replay") and FakeGraph.captures == 6


def test_f1_shapes_outside_the_profile_make_no_context(fake, tmp_path):
    engine = engine_for(fake, tmp_path, save_model(tmp_path / "m.onnx"), batch=(1, 4, 8))
    with runner_module.TensorRTRunner(engine, cuda_graph=True) as runner:
        before = len(calls(fake, "create_execution_context"))
        with pytest.raises(UsageError, match="outside the engine's profile"):
            runner.predict({"x": np.zeros((9, 4), np.float32)})
        assert len(calls(fake, "create_execution_context")) == before


# -- F4: fixed dims from the engine's profile --------------------------------------------------------
def seq_model(path: Path) -> Path:
    w = numpy_helper.from_array(np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3), "W")
    return save(path, [helper.make_node("MatMul", ["x", "W"], ["y"])],
                [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", 4])],
                [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", 3])], [w])


def test_f4_bench_and_profile_take_a_dim_the_profile_fixes(fake, tmp_path):
    engine = build(fake, tmp_path, seq_model(tmp_path / "seq.onnx"), pins=["x:batchx8x4"])
    with runner_module.TensorRTRunner(engine) as runner:
        assert runner.inputs[0].shape == ("batch", 8, 4)
    result = api.bench(engine, batch=[1, 3], runs=2, warmup_runs=0, warmup_seconds=0.0, min_seconds=0.0,
                       max_seconds=0.5)
    assert [p.batch for p in result.points] == [1, 3]
    layers = api.profile(engine, batch=2, runs=2, warmup=0)
    assert layers.layers


def test_f4_a_dim_with_a_range_still_asks_for_a_size_within_it(fake, tmp_path):
    engine = build(fake, tmp_path, seq_model(tmp_path / "seq.onnx"), pins=["x:1x1x4/4x12x4/16x32x4"], batch=None)
    with runner_module.TensorRTRunner(engine) as runner:
        assert runner.inputs[0].shape == ("batch", "x_dim1", 4)
    with pytest.raises(UsageError) as info:
        api.bench(engine, batch=[1], runs=2, warmup_runs=0, max_seconds=0.5)
    assert "--input x:4x12x4 (its profile takes 1x1x4 .. 16x32x4)" in info.value.hint


# -- F7: FP8 and 4-bit outputs reach numpy --------------------------------------------------------
def quantizing_model(path: Path, elem: int, opset: int) -> Path:
    w = numpy_helper.from_array(np.linspace(-2, 2, 12, dtype=np.float32).reshape(4, 3), "W")
    scale = numpy_helper.from_array(np.array(0.25, np.float32), "s")
    zero = helper.make_tensor("zp", elem, [], [0])
    return save(path, [helper.make_node("MatMul", ["x", "W"], ["m"]),
                       helper.make_node("QuantizeLinear", ["m", "s", "zp"], ["y"])],
                [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
                [helper.make_tensor_value_info("y", elem, ["batch", 3])], [w, scale, zero], opset=opset)


def test_f7_an_fp8_output_comes_back_as_float32(fake, tmp_path):
    engine = build(fake, tmp_path, quantizing_model(tmp_path / "fp8.onnx", TensorProto.FLOAT8E4M3FN, 19))
    x = np.random.default_rng(2).standard_normal((3, 4)).astype(np.float32)
    m = x @ np.linspace(-2, 2, 12, dtype=np.float32).reshape(4, 3) / 0.25
    want = torch.from_numpy(m).to(torch.float8_e4m3fn).float().numpy()
    with runner_module.TensorRTRunner(engine) as runner:
        assert runner.outputs[0].dtype == "float8_e4m3fn"
        y = runner.predict({"x": x})["y"]
    assert y.dtype == np.float32 and y.shape == (3, 3)
    np.testing.assert_array_equal(y, want)


def test_f7_a_packed_int4_output_is_unpacked(fake, tmp_path):
    engine = build(fake, tmp_path, quantizing_model(tmp_path / "int4.onnx", TensorProto.INT4, 21))
    x = np.random.default_rng(3).standard_normal((3, 4)).astype(np.float32)   # 9 values: an odd count
    m = x @ np.linspace(-2, 2, 12, dtype=np.float32).reshape(4, 3) / 0.25
    with runner_module.TensorRTRunner(engine) as runner:
        y = runner.predict({"x": x})["y"]
    assert y.dtype == np.int8
    np.testing.assert_array_equal(y, np.clip(np.rint(m), -8, 7))


def test_f7_fp4_and_int4_codes_decode_as_onnx_packs_them():
    import ml_dtypes

    values = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.5, -1, -1.5, -2, -3, -4, -6], np.float32)
    codes = values.astype(ml_dtypes.float4_e2m1fn).view(np.uint8)
    packed = np.concatenate([codes, [0]]).astype(np.uint8)
    packed = torch.from_numpy(packed[0::2] | (packed[1::2] << 4))
    np.testing.assert_array_equal(io_types.unpack(torch, packed, "float4_e2m1", len(values)).numpy(), values)
    ints = torch.tensor([0x21, 0xF8, 0x07], dtype=torch.uint8)   # 1, 2, -8, -1, 7
    assert io_types.unpack(torch, ints, "int4", 5).tolist() == [1, 2, -8, -1, 7]


# -- F8: TensorRT's CUDA major, not torch's ----------------------------------------------------------
def test_f8_the_runner_compares_tensorrts_cuda_major_not_torchs(fake, tmp_path, monkeypatch):
    """An engine built by TensorRT for CUDA 12 still loads after torch moves to CUDA 13: that
    TensorRT's CUDA did not change. It was refused as 'built with CUDA 12, this machine has 13'."""
    import json

    engine = engine_for(fake, tmp_path, save_model(tmp_path / "m.onnx"))
    meta_path = engine.with_name(engine.name + ".json")
    meta = json.loads(meta_path.read_text())
    meta["cuda"] = "12"
    meta_path.write_text(json.dumps(meta))
    fake.shim.version = types.SimpleNamespace(cuda="13.0")
    monkeypatch.setattr(engine_loader, "tensorrt_cuda_major", lambda trt: "12")
    with runner_module.TensorRTRunner(engine) as runner:
        assert runner.predict({"x": np.ones((2, 4), np.float32)})["y"].shape == (2, 3)
    monkeypatch.setattr(engine_loader, "tensorrt_cuda_major", lambda trt: "13")
    with pytest.raises(UsageError, match="built by TensorRT for CUDA 12, the TensorRT here is for CUDA 13"):
        runner_module.TensorRTRunner(engine)


def test_f8_the_build_stage_records_tensorrts_cuda_major(monkeypatch):
    from optcli.backends.tensorrt import probe
    from optcli.backends.tensorrt.engine_build import EngineBuild

    status = probe._interpret({"nvidia_smi_gpu": "NVIDIA L4", "cuda_device": "NVIDIA L4", "compute_capability": "8.9",
                               "tensorrt": "10.14.1.48", "tensorrt_cuda": "12", "torch": "2.13.0",
                               "torch_cuda": "13.0", "builder": True})
    assert status.usable and status.tensorrt_cuda == "12"
    monkeypatch.setattr(probe, "tensorrt_status", lambda: status)
    from optcli.backends.tensorrt.toolkit import TENSORRT

    stage = types.SimpleNamespace(ctx=types.SimpleNamespace(state=RunState()), toolkit=lambda: TENSORRT)
    assert EngineBuild.machine(stage).cuda == "12"   # type: ignore[arg-type]


def test_f8_the_cuda_major_is_read_from_the_installed_wheel(tmp_path, monkeypatch):
    from optcli.backends.tensorrt import cuda_build

    dist = tmp_path / "tensorrt_cu13_bindings-10.14.1.48.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: tensorrt_cu13_bindings\nVersion: 10.14.1.48\n")
    (dist / "top_level.txt").write_text("tensorrt\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    cuda_build._cuda_major_of.cache_clear()
    try:
        assert cuda_build.tensorrt_cuda_major(make_tensorrt()) == "13"
        assert cuda_build.tensorrt_cuda_major(types.ModuleType("not_installed_anywhere")) is None
    finally:
        cuda_build._cuda_major_of.cache_clear()


def test_f8_the_real_tensorrt_rtx_wheel_names_its_cuda_major():
    from optcli.backends.tensorrt.cuda_build import tensorrt_cuda_major

    rtx = pytest.importorskip("tensorrt_rtx_bindings")
    assert tensorrt_cuda_major(rtx) == "12"   # tensorrt-rtx-cu12-bindings


def test_f8_the_tensorrt_extras_follow_torchs_cuda_major():
    """`tensorrt-cuXX` installs TensorRT for CUDA XX; plain `tensorrt` is the CUDA major of the GPU
    lock's torch (PyPI's Linux torch wheel), so `pip install optcli[gpu,tensorrt]` never mixes two."""
    import re
    import tomllib

    from optcli.backends.tensorrt.cuda_build import EXTRAS, extra_for

    root = Path(__file__).resolve().parents[2]
    extras = tomllib.loads((root / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    for major, extra in EXTRAS.items():
        assert [r.split(">")[0] for r in extras[extra]] == [f"tensorrt-cu{major}"]
    runtime = re.search(r"^nvidia-cuda-runtime(?:-cu\d+)?==(\d+)\.", (root / "requirements/gpu.lock").read_text(), re.M)
    assert runtime and extras["tensorrt"] == extras[EXTRAS[runtime.group(1)]]
    assert (extra_for("13.0"), extra_for("12.8"), extra_for(None)) == ("tensorrt-cu13", "tensorrt-cu12", "tensorrt")
    from optcli.backends.tensorrt.probe import install_hint

    assert install_hint("12.8").startswith("pip install 'optcli[tensorrt-cu12]' (TensorRT for CUDA 12, as torch is")


# -- F9: NVTX verbosity lowered, except under `optcli profile` --------------------------------------
def test_f9_contexts_run_with_lowered_nvtx_verbosity(fake, tmp_path):
    engine = engine_for(fake, tmp_path, save_model(tmp_path / "m.onnx"))   # optcli builds DETAILED
    with runner_module.TensorRTRunner(engine, cuda_graph=True) as runner:
        for batch in (1, 2):
            runner.predict({"x": np.ones((batch, 4), np.float32)})
        contexts = [ctx for slot in idle_handles(runner) for ctx in slot.contexts()]
        assert contexts and {c.context.nvtx_verbosity for c in contexts} == {fake.ProfilingVerbosity.LAYER_NAMES_ONLY}


def test_f9_optcli_profile_keeps_the_engines_detailed_nvtx(fake, tmp_path):
    from optcli.backends.tensorrt.profile import profile_engine
    from optcli.loaded_model import ResolvedArtifact

    engine = engine_for(fake, tmp_path, save_model(tmp_path / "m.onnx"))
    result = profile_engine(ResolvedArtifact(engine, "engine"), batch=2, runs=2, warmup=0)
    assert result.layers and not calls(fake, "nvtx_verbosity")
