"""Real TensorRT on a real GPU: build engines from tiny ONNX graphs, run them, compare with
onnxruntime (CPU). Skipped with the probe's reason where no usable GPU + TensorRT exists.

Written to pass unchanged on a machine with both; NOT yet run on one (see docs/tensorrt.md).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from compile_testkit import ort_default_int8
from optcli.backends.tensorrt.probe import tensorrt_status

pytestmark = pytest.mark.gpu

_STATUS = tensorrt_status()
if not _STATUS.usable:
    pytest.skip(f"needs an NVIDIA GPU with TensorRT: {_STATUS.summary()}", allow_module_level=True)

from optcli.backends.tensorrt.builder import Machine, obtain_engine  # noqa: E402
from optcli.backends.tensorrt.engine_cache import EngineCache  # noqa: E402
from optcli.backends.tensorrt.metadata import ENGINE_FILE, METADATA_FILE  # noqa: E402
from optcli.backends.tensorrt.options import TensorRTConfig  # noqa: E402
from optcli.backends.tensorrt.profiles import build_profiles  # noqa: E402
from optcli.backends.tensorrt.runner import TensorRTRunner  # noqa: E402
from optcli.errors import UsageError  # noqa: E402
from optcli.onnx_model import io_specs  # noqa: E402

trt = pytest.importorskip("tensorrt")
torch = pytest.importorskip("torch")
ort = pytest.importorskip("onnxruntime")
MACHINE = Machine(str(trt.__version__), _STATUS.gpu, _STATUS.compute_capability)


def conv_net(path: Path, dtype: int = TensorProto.FLOAT, round_to_fp16: bool = False) -> Path:
    """x[N,3,16,16] -> Conv 3x3 -> Relu -> GlobalAveragePool -> Flatten -> Gemm -> y[N,10]."""
    rng = np.random.default_rng(0)
    np_dtype = np.float16 if dtype == TensorProto.FLOAT16 else np.float32
    weights = {"W": rng.standard_normal((8, 3, 3, 3)) * 0.3, "B": rng.standard_normal(8) * 0.1,
               "W2": rng.standard_normal((10, 8)) * 0.3, "B2": rng.standard_normal(10) * 0.1}
    if round_to_fp16:  # the FP32 reference for the FP16 graph uses the same (rounded) weights
        weights = {k: v.astype(np.float16).astype(np.float32) for k, v in weights.items()}
    inits = [numpy_helper.from_array(v.astype(np_dtype), k) for k, v in weights.items()]
    nodes = [helper.make_node("Conv", ["x", "W", "B"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("GlobalAveragePool", ["r"], ["p"]),
             helper.make_node("Flatten", ["p"], ["f"]),
             helper.make_node("Gemm", ["f", "W2", "B2"], ["y"], transB=1)]
    graph = helper.make_graph(nodes, "net", [helper.make_tensor_value_info("x", dtype, ["batch", 3, 16, 16])],
                              [helper.make_tensor_value_info("y", dtype, ["batch", 10])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def ort_run(path: Path, x: np.ndarray) -> np.ndarray:
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": x})[0]


def build(tmp_path: Path, model: Path, batch=(1, 4, 32), **options) -> Path:
    cfg = TensorRTConfig(engine_cache=tmp_path / "engines", timing_cache=tmp_path / "timing.cache", **options)
    specs, _ = io_specs(onnx.load(str(model), load_external_data=False))
    got = obtain_engine(trt, model, build_profiles(specs, batch=batch), cfg, MACHINE)
    out = tmp_path / f"{model.stem}.engine"
    out.write_bytes(got.engine_bytes)
    got.metadata.write(out.with_name(out.name + ".json"))
    return out


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.ravel().astype(np.float64), b.ravel().astype(np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def test_fp32_engine_matches_onnxruntime_at_several_batches(tmp_path):
    model = conv_net(tmp_path / "net.onnx")
    engine = build(tmp_path, model)
    meta = json.loads(Path(str(engine) + ".json").read_text())
    assert meta["inputs"][0]["shape"] == [-1, 3, 16, 16] and meta["gpu"] == MACHINE.gpu
    with TensorRTRunner(engine, threads=4) as runner:   # threads is accepted and ignored
        for batch in (1, 4, 7, 32):
            x = np.random.default_rng(batch).standard_normal((batch, 3, 16, 16)).astype(np.float32)
            y = runner.predict({"x": x})["y"]
            ref = ort_run(model, x)
            assert y.shape == (batch, 10) and y.dtype == np.float32
            # TF32 may be on for FP32 convolutions: allow its rounding.
            np.testing.assert_allclose(y, ref, rtol=1e-2, atol=1e-2)


def test_batch_outside_the_profile_is_a_usage_error(tmp_path):
    engine = build(tmp_path, conv_net(tmp_path / "net.onnx"), batch=(1, 2, 4))
    with TensorRTRunner(engine) as runner:
        runner.predict({"x": np.zeros((4, 3, 16, 16), np.float32)})
        with pytest.raises(UsageError, match="outside the engine's profile"):
            runner.predict({"x": np.zeros((5, 3, 16, 16), np.float32)})


def test_fp16_onnx_builds_an_fp16_engine(tmp_path):
    model16 = conv_net(tmp_path / "net16.onnx", dtype=TensorProto.FLOAT16)
    ref32 = conv_net(tmp_path / "ref32.onnx", round_to_fp16=True)
    engine = build(tmp_path, model16)
    meta = json.loads(Path(str(engine) + ".json").read_text())
    assert meta["inputs"][0]["dtype"] == "float16" and meta["outputs"][0]["dtype"] == "float16"
    x = np.random.default_rng(1).standard_normal((4, 3, 16, 16)).astype(np.float16)
    with TensorRTRunner(engine) as runner:
        y = runner.predict({"x": x})["y"]
    ref = ort_run(ref32, x.astype(np.float32))
    assert y.dtype == np.float16 and cosine(y, ref) > 0.999
    np.testing.assert_allclose(y.astype(np.float32), ref, rtol=5e-2, atol=5e-2)


def _ort_default_qdq(model: Path, path: Path, seed: int) -> Path:
    pytest.importorskip("onnxruntime.quantization")
    return ort_default_int8(model, path, (1, 3, 16, 16), samples=16, seed=seed)


def _optcli_int8(model: Path, path: Path, rng: np.random.Generator) -> Path:
    from optcli.calibration.dataset import SampleSet
    from optcli.quantize.calibrate import compute_ranges
    from optcli.quantize.flavour import TABLE
    from optcli.quantize.int8 import quantize

    samples = SampleSet({"x": rng.standard_normal((16, 3, 16, 16)).astype(np.float32)}, None, "random", "random")
    ranges, _ = compute_ranges(model, "gpu-test", samples, "minmax", True, TABLE["qdq-s8s8"].op_types,
                               path.parent / "ranges")
    quantize(model, path, TABLE["qdq-s8s8"], ranges, "minmax", [])
    return path


def test_int8_from_optcli_tensorrt_flavour_builds_and_stays_close(tmp_path):
    model = conv_net(tmp_path / "net.onnx")
    rng = np.random.default_rng(2)
    qdq = _optcli_int8(model, tmp_path / "net_int8.onnx", rng)
    engine = build(tmp_path, qdq)
    x = rng.standard_normal((8, 3, 16, 16)).astype(np.float32)
    with TensorRTRunner(engine) as runner:
        y = runner.predict({"x": x})["y"]
    # The same Q/DQ graph on onnxruntime is the reference for TensorRT's INT8 kernels (the contract
    # double computes exactly that: 0.958 against FP32 for this random 5-layer net); FP32 is looser.
    assert cosine(y, ort_run(qdq, x)) > 0.99
    assert cosine(y, ort_run(model, x)) > 0.9


def test_onnxruntime_default_int32_bias_is_refused_as_the_preflight_says(tmp_path):
    """Review row 1 on real TensorRT: what the preflight flags, the parser refuses, node by node."""
    from optcli.backends.tensorrt.builder import ParserFailure
    from optcli.backends.tensorrt.preflight import check_file

    qdq = _ort_default_qdq(conv_net(tmp_path / "net.onnx"), tmp_path / "ort_int8.onnx", seed=2)
    flagged = {f.node_name for f in check_file(qdq)}
    assert flagged == {"B_DequantizeLinear", "B2_DequantizeLinear"}
    with pytest.raises(ParserFailure) as info:
        build(tmp_path, qdq)
    assert {i.op for i in info.value.issues} == {"DequantizeLinear"}


def test_cuda_graphs_per_shape_with_alternating_batches(tmp_path):
    """Review row 6: one graph per shape, replayed when the shape recurs, same results as plain runs."""
    engine = build(tmp_path, conv_net(tmp_path / "net.onnx"), batch=(1, 4, 8))
    rng = np.random.default_rng(5)
    with TensorRTRunner(engine) as plain, TensorRTRunner(engine, cuda_graph=True) as graphed:
        for batch in (2, 8, 2, 8, 2, 8):
            x = rng.standard_normal((batch, 3, 16, 16)).astype(np.float32)
            np.testing.assert_allclose(graphed.predict({"x": x})["y"], plain.predict({"x": x})["y"],
                                       rtol=1e-5, atol=1e-5)
        assert graphed.settings["cuda_graph"], graphed.settings["cuda_graph_note"]


def test_bf16_output_returns_float32_in_numpy_mode(tmp_path):
    """Review row 3: numpy has no bfloat16."""
    if tuple(int(p) for p in str(MACHINE.compute_capability).split(".")) < (8, 0):
        pytest.skip(f"BF16 needs compute capability 8.0+, this GPU is {MACHINE.compute_capability}")
    w = numpy_helper.from_array(np.random.default_rng(6).standard_normal((4, 3)).astype(np.float32), "W")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "W"], ["m"]),
                               helper.make_node("Cast", ["m"], ["y"], to=TensorProto.BFLOAT16)], "bf16",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
                              [helper.make_tensor_value_info("y", TensorProto.BFLOAT16, ["batch", 3])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(tmp_path / "bf16.onnx"))
    engine = build(tmp_path, tmp_path / "bf16.onnx", batch=(1, 2, 4))
    x = np.random.default_rng(7).standard_normal((2, 4)).astype(np.float32)
    with TensorRTRunner(engine) as runner:
        y = runner.predict({"x": x})["y"]
    want = torch.from_numpy(x @ numpy_helper.to_array(w)).to(torch.bfloat16).float().numpy()
    assert y.dtype == np.float32
    np.testing.assert_allclose(y, want, rtol=2e-2, atol=2e-2)


def test_shape_tensor_input_runs_from_host_memory(tmp_path):
    """Review row 4: set_shape_input at build, a host pointer for the HOST-located input at run time."""
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["r"]),
                               helper.make_node("Reshape", ["r", "shape"], ["y"])],
                              "reshape", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 6]),
                                          helper.make_tensor_value_info("shape", TensorProto.INT64, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["a", "b"])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = tmp_path / "reshape.onnx"
    onnx.save(model, str(path))
    specs, _ = io_specs(model)
    cfg = TensorRTConfig(engine_cache_enabled=False, timing_cache=tmp_path / "t.cache")
    got = obtain_engine(trt, path, build_profiles(specs, batch=(1, 2, 4)), cfg, MACHINE,
                        shape_values={"shape": ((1, 1), (2, 6), (24, 24))})
    engine = tmp_path / "reshape.engine"
    engine.write_bytes(got.engine_bytes)
    got.metadata.write(engine.with_name(engine.name + ".json"))
    x = np.arange(12, dtype=np.float32).reshape(2, 6) - 5
    with TensorRTRunner(engine) as runner:
        for shape in ((3, 4), (4, 3)):
            y = runner.predict({"x": x, "shape": np.array(shape, np.int64)})["y"]
            np.testing.assert_array_equal(y, np.maximum(x, 0).reshape(shape))


def test_plugin_engine_loads_in_a_fresh_process(tmp_path):
    """Review row 2: RoiAlign imports as the ROIAlign_TRT plugin; a new process must register the
    plugins before deserializing, or the engine loads as None."""
    graph = helper.make_graph([helper.make_node("RoiAlign", ["X", "rois", "idx"], ["y"], output_height=2,
                                                output_width=2)], "roi",
                              [helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, 2, 8, 8]),
                               helper.make_tensor_value_info("rois", TensorProto.FLOAT, [3, 4]),
                               helper.make_tensor_value_info("idx", TensorProto.INT64, [3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 2, 2, 2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 16)])
    model.ir_version = 8
    onnx.save(model, str(tmp_path / "roi.onnx"))
    engine = build(tmp_path, tmp_path / "roi.onnx", batch=None)
    code = ("import numpy as np, sys; from optcli.backends.tensorrt.runner import TensorRTRunner\n"
            f"r = TensorRTRunner({str(engine)!r})\n"
            "y = r.predict({'X': np.ones((1, 2, 8, 8), np.float32), 'rois': np.array([[0, 0, 4, 4]] * 3, np.float32),"
            " 'idx': np.zeros(3, np.int64)})['y']\n"
            "print(float(abs(y - 1).max()))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert float(proc.stdout.strip().splitlines()[-1]) < 1e-3


def test_profile_names_layers_and_types(tmp_path):
    """Review row 11: built with DETAILED verbosity, the inspector gives every layer a type."""
    from optcli.backends.tensorrt.profile import profile_engine
    from optcli.loaded_model import ResolvedArtifact

    engine = build(tmp_path, conv_net(tmp_path / "net.onnx"))
    result = profile_engine(ResolvedArtifact(engine, "engine"), batch=4, runs=5, warmup=2)
    assert result.layers and result.warnings == []
    assert all(layer.op_type != "?" for layer in result.layers if not layer.name.startswith("Reformatting"))


def test_outputs_can_stay_on_the_gpu_and_inputs_can_come_from_it(tmp_path):
    engine = build(tmp_path, conv_net(tmp_path / "net.onnx"))
    x = np.random.default_rng(3).standard_normal((4, 3, 16, 16)).astype(np.float32)
    with TensorRTRunner(engine) as host_runner, TensorRTRunner(engine, outputs="torch") as gpu_runner:
        on_host = host_runner.predict({"x": x})["y"]
        y = gpu_runner.predict({"x": torch.from_numpy(x).cuda()})["y"]
        assert isinstance(y, torch.Tensor) and y.is_cuda
        np.testing.assert_allclose(y.cpu().numpy(), on_host, rtol=1e-5, atol=1e-5)
        y2 = gpu_runner.predict({"x": x * 2})["y"]   # a second call must not overwrite the first result
        assert not torch.equal(y, y2)


def test_cuda_graph_replay_matches_plain_execution(tmp_path):
    engine = build(tmp_path, conv_net(tmp_path / "net.onnx"), batch=(4, 4, 4))
    rng = np.random.default_rng(4)
    with TensorRTRunner(engine) as plain, TensorRTRunner(engine, cuda_graph=True) as graphed:
        for _ in range(3):
            x = rng.standard_normal((4, 3, 16, 16)).astype(np.float32)
            np.testing.assert_allclose(graphed.predict({"x": x})["y"], plain.predict({"x": x})["y"],
                                       rtol=1e-5, atol=1e-5)
        assert graphed.settings["cuda_graph"] or graphed.settings["cuda_graph_note"]


def test_gpu_timing_with_cuda_events(tmp_path):
    engine = build(tmp_path, conv_net(tmp_path / "net.onnx"))
    with TensorRTRunner(engine) as runner:
        times = runner.time_gpu({"x": np.zeros((8, 3, 16, 16), np.float32)}, runs=20, warmup=3)
    assert len(times) == 20 and all(t > 0 for t in times)


def test_engine_cache_hit_then_corrupt_entry_rebuilt(tmp_path):
    import hashlib

    model = conv_net(tmp_path / "net.onnx")
    cfg = TensorRTConfig(engine_cache=tmp_path / "engines", timing_cache=tmp_path / "t.cache")
    specs, _ = io_specs(onnx.load(str(model)))
    profiles = build_profiles(specs, batch=(1, 4, 8))
    first = obtain_engine(trt, model, profiles, cfg, MACHINE)
    second = obtain_engine(trt, model, profiles, cfg, MACHINE)
    assert (first.cache["status"], second.cache["status"]) == ("miss", "hit")
    entry = EngineCache(cfg.engine_cache_dir()).entry(first.cache["key"])
    garbage = b"\x00" * 64
    (entry / ENGINE_FILE).write_bytes(garbage)
    meta = json.loads((entry / METADATA_FILE).read_text())
    meta["engine_sha256"] = hashlib.sha256(garbage).hexdigest()
    (entry / METADATA_FILE).write_text(json.dumps(meta))
    third = obtain_engine(trt, model, profiles, cfg, MACHINE)
    assert third.cache["status"] == "corrupt" and "cannot deserialize" in third.cache["reason"]
    with TensorRTRunner(entry) as runner:  # the rebuilt entry loads through the cache folder
        assert runner.predict({"x": np.zeros((2, 3, 16, 16), np.float32)})["y"].shape == (2, 10)


def test_optcli_compile_target_tensorrt_end_to_end(tmp_path):
    model = conv_net(tmp_path / "net.onnx")
    env = {**os.environ, "OPTCLI_CACHE_DIR": str(tmp_path / "cache")}
    cmd = [sys.executable, "-c", "from optcli.cli.main import main; main()", "compile", str(model),
           "--target", "tensorrt", "--out", str(tmp_path / "out"), "--bench-runs", "5", "--batch", "1/4/16", "--json"]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(proc.stdout)
    stage = next(s for s in report["stages"] if s["name"] == "build")
    assert stage["status"] == "ok", stage
    assert stage["accuracy"]["cosine_min"] > 0.999
    assert stage["latency_ms"]["after"]["runtime"] == "tensorrt"
    assert report["final"]["format"] == "engine" and report["final"]["artifact"].endswith("model.engine")
    assert (tmp_path / "out" / report["final"]["artifact"]).with_name("model.engine.json").is_file()
    again = subprocess.run(cmd[:-1] + ["--force", "--json"], capture_output=True, text=True, env=env, timeout=600)
    stage = next(s for s in json.loads(again.stdout)["stages"] if s["name"] == "build")
    assert stage["details"]["engine_cache"]["status"] == "forced"
