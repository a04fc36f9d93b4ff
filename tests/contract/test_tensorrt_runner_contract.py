"""Contract tests of the TensorRT runner's logic: shapes, profiles, buffers, copies, CUDA graph replay.

The TensorRT double (fake_tensorrt.py) stands in for the engine: its execution context reads the
inputs at the addresses the runner set and runs the engine's ONNX with onnxruntime. A small shim
stands in for torch.cuda (streams, events, graph capture) with real CPU torch tensors as "device"
memory. This checks the runner's bookkeeping against the API contract; it cannot show that CUDA
streams, pinned memory or graph capture behave on a GPU (tests/gpu/ does that, on a GPU).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from fake_cuda import TorchShim
from fake_tensorrt import make_tensorrt

torch = pytest.importorskip("torch")

import optcli.backends.tensorrt.runner as runner_module  # noqa: E402
from optcli.backends.tensorrt.builder import Machine, obtain_engine  # noqa: E402
from optcli.backends.tensorrt.options import TensorRTConfig  # noqa: E402
from optcli.backends.tensorrt.profiles import build_profiles  # noqa: E402
from optcli.backends.tensorrt.runner import TensorRTRunner  # noqa: E402
from optcli.errors import UsageError  # noqa: E402
from optcli.onnx_model import io_specs  # noqa: E402
from optcli.runtime import open_runner  # noqa: E402

MACHINE = Machine("10.8.0.43", "NVIDIA L4", "8.9")


@pytest.fixture
def fake(monkeypatch):
    trt = make_tensorrt()
    shim = TorchShim(trt)
    monkeypatch.setattr(runner_module, "require", lambda module, purpose: {"tensorrt": trt, "torch": shim}[module])
    return trt


def save_model(path: Path, batch: int | str = "batch") -> Path:
    w = numpy_helper.from_array((np.arange(12, dtype=np.float32).reshape(4, 3) - 6) / 10, "W")
    nodes = [helper.make_node("MatMul", ["x", "W"], ["m"]), helper.make_node("Relu", ["m"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 3])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def engine_for(trt: Any, tmp_path: Path, model: Path, batch=(1, 4, 16)) -> Path:
    specs, _ = io_specs(onnx.load(str(model)))
    got = obtain_engine(trt, model, build_profiles(specs, batch=batch if specs[0].shape[0] == "batch" else None),
                        TensorRTConfig(engine_cache_enabled=False, timing_cache=tmp_path / "t.cache"), MACHINE)
    path = tmp_path / "model.engine"
    path.write_bytes(got.engine_bytes)
    got.metadata.write(tmp_path / "model.engine.json")
    return path


def reference(x: np.ndarray) -> np.ndarray:
    w = (np.arange(12, dtype=np.float32).reshape(4, 3) - 6) / 10
    return np.maximum(x @ w, 0)


def test_runner_matches_reference_across_dynamic_batches(fake, tmp_path):
    engine = engine_for(fake, tmp_path, save_model(tmp_path / "m.onnx"))
    with open_runner(engine, "engine", threads=3) as runner:    # the pipeline's call; threads ignored
        assert [s.shape for s in runner.inputs] == [("batch", 4)] and runner.outputs[0].dtype == "float32"
        for batch in (1, 5, 16, 2):
            x = np.random.default_rng(batch).standard_normal((batch, 4)).astype(np.float32)
            y = runner.predict({"x": x})["y"]
            np.testing.assert_allclose(y, reference(x), rtol=1e-6)
    shapes = [args for what, args in fake.calls if what == "set_input_shape"]
    assert shapes == [("x", (16, 4)), ("x", (1, 4)), ("x", (5, 4)), ("x", (16, 4)), ("x", (2, 4))]


def test_results_are_copies_not_views_of_reused_buffers(fake, tmp_path):
    engine = engine_for(fake, tmp_path, save_model(tmp_path / "m.onnx"))
    with TensorRTRunner(engine) as runner:
        first = runner.predict({"x": np.ones((2, 4), np.float32)})["y"]
        runner.predict({"x": np.full((2, 4), 5, np.float32)})
        np.testing.assert_allclose(first, reference(np.ones((2, 4), np.float32)))


def test_batch_outside_profile_is_refused_with_the_range(fake, tmp_path):
    engine = engine_for(fake, tmp_path, save_model(tmp_path / "m.onnx"), batch=(2, 4, 8))
    with TensorRTRunner(engine) as runner:
        with pytest.raises(UsageError, match=r"shape 9x4 is outside the engine's profile 2x4 \.\. 8x4"):
            runner.predict({"x": np.zeros((9, 4), np.float32)})
        with pytest.raises(UsageError, match=r"has 5 on dim 1 \(shape 2x5\); this artifact takes exactly 4"):
            runner.predict({"x": np.zeros((2, 5), np.float32)})


def test_static_engine_and_torch_cpu_inputs(fake, tmp_path):
    engine = engine_for(fake, tmp_path, save_model(tmp_path / "m.onnx", batch=3))
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    with TensorRTRunner(engine) as runner:
        np.testing.assert_allclose(runner.predict({"x": torch.from_numpy(x)})["y"], reference(x))
        with pytest.raises(UsageError, match="is torch.float64, the engine takes torch.float32"):
            runner.predict({"x": torch.zeros((3, 4), dtype=torch.float64)})
    assert not [a for w, a in fake.calls if w == "set_input_shape"]


def test_cuda_graph_captures_once_and_replays_with_new_inputs(fake, tmp_path):
    engine = engine_for(fake, tmp_path, save_model(tmp_path / "m.onnx"))
    rng = np.random.default_rng(0)
    with TensorRTRunner(engine, cuda_graph=True) as runner:
        for _ in range(3):
            x = rng.standard_normal((4, 4)).astype(np.float32)
            np.testing.assert_allclose(runner.predict({"x": x})["y"], reference(x), rtol=1e-6)
        executes = len([1 for w, _ in fake.calls if w == "execute_async_v3"])
        assert executes == 1          # the enqueue before capture; later calls replayed the graph
        x = rng.standard_normal((6, 4)).astype(np.float32)   # new shapes: a new capture
        np.testing.assert_allclose(runner.predict({"x": x})["y"], reference(x), rtol=1e-6)
        assert len([1 for w, _ in fake.calls if w == "execute_async_v3"]) == 2
        assert runner.settings["cuda_graph"] is True and runner.settings["cuda_graph_note"] is None


def test_time_gpu_returns_one_sample_per_run(fake, tmp_path):
    engine = engine_for(fake, tmp_path, save_model(tmp_path / "m.onnx"))
    with TensorRTRunner(engine) as runner:
        times = runner.time_gpu({"x": np.zeros((4, 4), np.float32)}, runs=7, warmup=2)
    assert len(times) == 7 and all(t >= 0 for t in times)


def test_concurrent_handles_give_correct_results(fake, tmp_path):
    engine = engine_for(fake, tmp_path, save_model(tmp_path / "m.onnx"))
    xs = [np.random.default_rng(i).standard_normal((i + 1, 4)).astype(np.float32) for i in range(6)]
    with TensorRTRunner(engine, concurrency=2) as runner:
        futures = [runner.predict_async({"x": x}) for x in xs]
        for x, fut in zip(xs, futures):
            np.testing.assert_allclose(fut.result()["y"], reference(x), rtol=1e-6)


def test_engine_for_another_gpu_or_garbage_is_refused(fake, tmp_path):
    engine = engine_for(fake, tmp_path, save_model(tmp_path / "m.onnx"))
    meta = json.loads((tmp_path / "model.engine.json").read_text())
    meta["compute_capability"] = "9.0"
    (tmp_path / "model.engine.json").write_text(json.dumps(meta))
    with pytest.raises(UsageError, match="does not fit this machine: built for compute capability 9.0"):
        TensorRTRunner(engine)
    (tmp_path / "model.engine.json").unlink()
    engine.write_bytes(b"garbage")
    with pytest.raises(UsageError, match="TensorRT cannot load .*magic tag does not match"):
        TensorRTRunner(engine)
    with pytest.raises(UsageError, match="no TensorRT engine at"):
        TensorRTRunner(tmp_path / "missing.engine")


def test_pipeline_target_tensorrt_end_to_end_through_the_doubles(fake, tmp_path, monkeypatch):
    """`compile --target tensorrt` as far as it can go without a GPU: target resolution, the stage,
    the engine cache, the pipeline measuring the engine through open_runner, the report."""
    import optcli.backends.tensorrt.engine_build as stage_module
    import optcli.backends.tensorrt.probe as probe
    from optcli import api

    usable = probe.TensorRTStatus(True, gpu="NVIDIA L4", compute_capability="8.9", tensorrt_version="10.8.0.43")
    monkeypatch.setattr(probe, "tensorrt_status", lambda: usable)
    monkeypatch.setattr(stage_module, "require", lambda module, purpose: fake)
    monkeypatch.setenv("OPTCLI_CACHE_DIR", str(tmp_path / "cache"))
    model = save_model(tmp_path / "m.onnx")
    options = dict(runs=3, min_seconds=0.0, max_seconds=0.2, warmup_runs=1, warmup_seconds=0.0,
                   tensorrt={"batch": "1/2/8"})
    report = api.compile(model, out=tmp_path / "out", target="tensorrt", **options)
    stage = report.stage("build")
    assert report.status == "ok" and report.target == "tensorrt"
    assert stage.status == "ok" and stage.details["engine_cache"]["status"] == "miss"
    assert stage.latency_ms["after"]["runtime"] == "tensorrt" and stage.accuracy["cosine_min"] > 0.9999
    assert report.final["format"] == "engine" and report.final["artifact"].endswith("-build/model.engine")
    assert report.stage("fuse").details["level"] == "basic"   # plain ONNX ops for TensorRT's parser
    # A second run into a new folder takes the engine from the engine cache: no second build.
    again = api.compile(model, out=tmp_path / "out2", target="tensorrt", **options)
    assert again.stage("build").details["engine_cache"]["status"] == "hit" and fake.builds == 1
