"""The defects a line-by-line review against TensorRT's real Python bindings found (issue 12), one
test per row, each run against the TensorRT double, which refuses what TensorRT refuses. Every
test here failed on the code before the fix (rows 1-8, 11 and 13 through the double's refusals;
rows 9, 10, 12 and 14 through optcli's own checks)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import optcli.backends.tensorrt.runner as runner_module
from compile_testkit import ort_default_int8
from fake_cuda import FakeGraph, TorchShim
from fake_tensorrt import make_tensorrt
from optcli.backends.tensorrt.builder import (
    Machine,
    ParserFailure,
    configure,
    create_network,
    load_timing_cache,
    make_logger,
    obtain_engine,
    parse_onnx,
    save_timing_cache,
)
from optcli.backends.tensorrt.engine_cache import cache_key
from optcli.backends.tensorrt.metadata import EngineMetadata, dtype_name
from optcli.backends.tensorrt.options import TensorRTConfig
from optcli.backends.tensorrt.profiles import build_profiles
from optcli.errors import StageError, UsageError
from optcli.onnx_model import io_specs
from test_tensorrt_runner_contract import engine_for, reference, save_model

torch = pytest.importorskip("torch")

MACHINE = Machine("10.8.0.43", "NVIDIA L4", "8.9")


@pytest.fixture
def fake(monkeypatch):
    trt = make_tensorrt()
    monkeypatch.setattr(runner_module, "require",
                        lambda module, purpose: {"tensorrt": trt, "torch": TorchShim(trt)}[module])
    return trt


def profiles_for(path: Path, batch=(1, 4, 16)):
    specs, _ = io_specs(onnx.load(str(path), load_external_data=False))
    dynamic = any(not isinstance(s.shape[0], int) for s in specs if s.shape)
    return build_profiles(specs, batch=batch if dynamic else None)


def save(path: Path, nodes: list, inputs: list, outputs: list, inits: list | None = None, opset: int = 17) -> Path:
    model = helper.make_model(helper.make_graph(nodes, "g", inputs, outputs, inits or []),
                              opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


# -- row 1: INT32 bias DequantizeLinear ------------------------------------------------------------
def small_cnn(path: Path) -> Path:
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array((rng.standard_normal((8, 3, 3, 3)) * 0.3).astype(np.float32), "W"),
             numpy_helper.from_array((rng.standard_normal(8) * 0.1).astype(np.float32), "B"),
             numpy_helper.from_array((rng.standard_normal((4, 8)) * 0.3).astype(np.float32), "W2"),
             numpy_helper.from_array((rng.standard_normal(4) * 0.1).astype(np.float32), "B2")]
    nodes = [helper.make_node("Conv", ["x", "W", "B"], ["c"], pads=[1, 1, 1, 1], name="conv"),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("GlobalAveragePool", ["r"], ["p"], name="pool"),
             helper.make_node("Flatten", ["p"], ["f"], name="flatten"),
             helper.make_node("Gemm", ["f", "W2", "B2"], ["y"], transB=1, name="fc")]
    return save(path, nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 8, 8])],
                [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])], inits)


def ranges_for(fp32: Path, tmp_path: Path) -> Path:
    """Calibration ranges the way the INT8 stage caches them (onnxruntime's calibration cache)."""
    from optcli.calibration.dataset import SampleSet
    from optcli.quantize.calibrate import compute_ranges

    rng = np.random.default_rng(1)
    samples = SampleSet({"x": rng.standard_normal((16, 3, 8, 8)).astype(np.float32)}, None, "random", "random")
    path, _ = compute_ranges(fp32, "sha", samples, "minmax", True, ("Conv", "MatMul", "Gemm"), tmp_path / "ranges")
    return path


def test_row1_tensorrt_int8_graph_builds_and_ort_default_is_refused_by_node(fake, tmp_path):

    from optcli.quantize.flavour import TABLE
    from optcli.quantize.int8 import quantize

    fp32 = small_cnn(tmp_path / "cnn.onnx")
    # onnxruntime's default: biases as INT32 DequantizeLinear inputs -> TensorRT's parser refuses each.
    default = ort_default_int8(fp32, tmp_path / "ort-default.onnx", (1, 3, 8, 8))
    cfg = TensorRTConfig(engine_cache_enabled=False, timing_cache=tmp_path / "t.cache")
    with pytest.raises(ParserFailure) as info:
        obtain_engine(fake, default, profiles_for(default), cfg, MACHINE)
    assert sorted(i.node_name for i in info.value.issues) == ["B2_DequantizeLinear", "B_DequantizeLinear"]
    assert all("INT32" in i.message for i in info.value.issues)
    # optcli's TensorRT flavour keeps biases in float: it parses, builds and runs.
    ranges = ranges_for(fp32, tmp_path)
    out = tmp_path / "int8.onnx"
    counts = quantize(fp32, out, TABLE["qdq-s8s8"], ranges, "minmax", [])
    assert counts["dequantize_linear"] > 0
    engine = engine_for(fake, tmp_path, out)
    x = np.random.default_rng(2).standard_normal((2, 3, 8, 8)).astype(np.float32)
    with runner_module.TensorRTRunner(engine) as runner:
        assert runner.predict({"x": x})["y"].shape == (2, 4)


def test_row1_the_other_flavours_keep_onnxruntimes_quantized_bias():
    from optcli.quantize.flavour import TABLE

    assert TABLE["qdq-s8s8"].quantize_bias is False
    assert TABLE["qdq-u8s8"].quantize_bias is True and TABLE["qdq-s8s8"].to_json()["bias"] == "float"


# -- row 2: plugins registered before every deserialize -------------------------------------------
def roi_align_model(path: Path) -> Path:
    nodes = [helper.make_node("RoiAlign", ["X", "rois", "idx"], ["y"], output_height=2, output_width=2,
                              name="roi")]
    return save(path, nodes, [helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, 2, 8, 8]),
                              helper.make_tensor_value_info("rois", TensorProto.FLOAT, [3, 4]),
                              helper.make_tensor_value_info("idx", TensorProto.INT64, [3])],
                [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 2, 2, 2])], opset=16)


def test_row2_plugin_engine_is_a_cache_hit_in_a_fresh_process(tmp_path):
    model = roi_align_model(tmp_path / "roi.onnx")
    cfg = TensorRTConfig(engine_cache=tmp_path / "engines", timing_cache=tmp_path / "t.cache")
    obtain_engine(make_tensorrt(), model, [], cfg, MACHINE)
    fresh = make_tensorrt()     # a new process: no plugin registered yet
    again = obtain_engine(fresh, model, [], cfg, MACHINE)
    assert again.cache["status"] == "hit", again.cache
    assert fresh.builds == 0 and ("init_libnvinfer_plugins", ("",)) in fresh.calls


def test_row2_plugin_engine_loads_in_the_runner_of_a_fresh_process(tmp_path, monkeypatch):
    model = roi_align_model(tmp_path / "roi.onnx")
    engine = engine_for(make_tensorrt(), tmp_path, model)
    fresh = make_tensorrt()
    monkeypatch.setattr(runner_module, "require", lambda m, p: {"tensorrt": fresh, "torch": TorchShim(fresh)}[m])
    feeds = {"X": np.ones((1, 2, 8, 8), np.float32), "rois": np.array([[0, 0, 4, 4]] * 3, np.float32),
             "idx": np.zeros(3, np.int64)}
    with runner_module.TensorRTRunner(engine) as runner:
        np.testing.assert_allclose(runner.predict(feeds)["y"], np.ones((3, 2, 2, 2)), rtol=1e-6)


# -- row 3: BF16 outputs in numpy mode -------------------------------------------------------------
def test_row3_bf16_output_comes_back_as_exact_float32(fake, tmp_path):
    w = numpy_helper.from_array((np.arange(12, dtype=np.float32).reshape(4, 3) - 6) / 7, "W")
    nodes = [helper.make_node("MatMul", ["x", "W"], ["m"]),
             helper.make_node("Cast", ["m"], ["y"], to=TensorProto.BFLOAT16)]
    model = save(tmp_path / "bf16.onnx", nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
                 [helper.make_tensor_value_info("y", TensorProto.BFLOAT16, ["N", 3])], [w])
    engine = engine_for(fake, tmp_path, model)
    x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    with runner_module.TensorRTRunner(engine) as runner:
        assert runner.outputs[0].dtype == "bfloat16"
        y = runner.predict({"x": x})["y"]
    want = torch.from_numpy(x @ ((np.arange(12, dtype=np.float32).reshape(4, 3) - 6) / 7)).to(torch.bfloat16).float()
    assert y.dtype == np.float32
    np.testing.assert_array_equal(y, want.numpy())


# -- row 4: shape tensors: set_shape_input, HOST memory --------------------------------------------
def reshape_model(path: Path) -> Path:
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Reshape", ["r", "shape"], ["y"])]
    return save(path, nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 6]),
                              helper.make_tensor_value_info("shape", TensorProto.INT64, [2])],
                [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["a", "b"])])


def test_row4_shape_tensor_input_needs_values_and_runs_from_host_memory(fake, tmp_path):
    model = reshape_model(tmp_path / "reshape.onnx")
    cfg = TensorRTConfig(engine_cache_enabled=False, timing_cache=tmp_path / "t.cache")
    with pytest.raises(StageError, match="'shape' is a shape tensor"):
        obtain_engine(fake, model, profiles_for(model), cfg, MACHINE)
    got = obtain_engine(fake, model, profiles_for(model), cfg, MACHINE,
                        shape_values={"shape": ((1, 1), (4, 3), (16, 16))})
    assert [a for w, a in fake.calls if w == "set_shape_input"] == [("shape", (1, 1), (4, 3), (16, 16))]
    engine = tmp_path / "model.engine"
    engine.write_bytes(got.engine_bytes)
    got.metadata.write(tmp_path / "model.engine.json")
    x = np.arange(12, dtype=np.float32).reshape(2, 6) - 5
    with runner_module.TensorRTRunner(engine) as runner:
        for shape in ((3, 4), (4, 3), (12, 1)):
            y = runner.predict({"x": x, "shape": np.array(shape, np.int64)})["y"]
            np.testing.assert_array_equal(y, np.maximum(x, 0).reshape(shape))


def test_row4_the_double_refuses_a_device_pointer_for_a_host_tensor(fake, tmp_path):
    model = reshape_model(tmp_path / "reshape.onnx")
    cfg = TensorRTConfig(engine_cache_enabled=False, timing_cache=tmp_path / "t.cache")
    got = obtain_engine(fake, model, profiles_for(model), cfg, MACHINE,
                        shape_values={"shape": ((1, 1), (4, 3), (16, 16))})
    from optcli.backends.tensorrt.builder import deserialize

    context = deserialize(fake, got.engine_bytes, make_logger(fake)).create_execution_context()
    device = TorchShim(fake).empty(4, dtype=torch.int64, device="cuda")
    assert context.set_tensor_address("shape", device.data_ptr()) is False
    assert context.set_tensor_address("x", torch.empty(4).data_ptr()) is False   # and the reverse


# -- row 5: a failed enqueue during capture --------------------------------------------------------
def test_row5_failed_enqueue_in_capture_never_replays_stale_outputs(fake, tmp_path):
    engine = engine_for(fake, tmp_path, save_model(tmp_path / "m.onnx"))
    rng = np.random.default_rng(0)
    with runner_module.TensorRTRunner(engine, cuda_graph=True) as runner:
        class Quiet(fake.IProfiler):
            def report_layer_time(self, layer_name: str, ms: float) -> None:
                pass

        runner.attach_profiler(Quiet())   # TensorRT cannot capture an enqueue with a profiler attached
        for _ in range(3):
            x = rng.standard_normal((4, 4)).astype(np.float32)
            np.testing.assert_allclose(runner.predict({"x": x})["y"], reference(x), rtol=1e-6)
        assert runner.settings["cuda_graph"] is False
        assert "the enqueue failed during capture" in runner.settings["cuda_graph_note"]
        assert "profiler" in runner.settings["cuda_graph_note"]


# -- row 6: one CUDA graph per shape ----------------------------------------------------------------
def test_row6_alternating_batches_capture_once_per_shape_without_device_sync(fake, tmp_path):
    engine = engine_for(fake, tmp_path, save_model(tmp_path / "m.onnx"))
    rng = np.random.default_rng(0)
    shim_syncs = []
    with runner_module.TensorRTRunner(engine, cuda_graph=True) as runner:
        for batch in (2, 4, 2, 4, 2, 4, 2):
            x = rng.standard_normal((batch, 4)).astype(np.float32)
            np.testing.assert_allclose(runner.predict({"x": x})["y"], reference(x), rtol=1e-6)
        shim_syncs.append(runner.torch.cuda.device_syncs)
    assert FakeGraph.captures == 2
    assert len([1 for w, _ in fake.calls if w == "execute_async_v3"]) == 2   # one real enqueue per new shape
    assert shim_syncs == [0]


# -- row 7: timing cache merged, not overwritten ---------------------------------------------------
def test_row7_concurrent_builds_keep_each_others_timing_entries(fake, tmp_path):
    timing = tmp_path / "timing.cache"
    first = save_model(tmp_path / "a.onnx")
    other = small_cnn(tmp_path / "b.onnx")
    # Build A loads the (empty) cache, then build B finishes and saves, then A saves.
    logger = make_logger(fake)
    builder = fake.Builder(logger)
    network = create_network(fake, builder)
    parser = parse_onnx(fake, network, logger, first)
    config = configure(fake, builder, network, {}, profiles_for(first))
    load_timing_cache(fake, config, timing)
    obtain_engine(fake, other, profiles_for(other), TensorRTConfig(engine_cache_enabled=False, timing_cache=timing),
                  MACHINE)
    assert builder.build_serialized_network(network, config) is not None
    del parser
    save_timing_cache(config, timing)
    entries = json.loads(timing.read_bytes()[len(b"FAKETC"):])["entries"]
    assert {"MatMul:0", "Relu:1", "Conv:conv", "Gemm:fc"} <= set(entries), entries


# -- row 8: one logger per process; no deserialization after a build ------------------------------
def test_row8_one_logger_and_no_deserialize_after_a_fresh_build(fake, tmp_path):
    assert make_logger(fake) is make_logger(fake)
    model = save_model(tmp_path / "m.onnx")
    cfg = TensorRTConfig(engine_cache=tmp_path / "engines", timing_cache=tmp_path / "t.cache")
    obtain_engine(fake, model, profiles_for(model), cfg, MACHINE)
    assert [a for w, a in fake.calls if w == "deserialize_cuda_engine"] == []
    obtain_engine(fake, model, profiles_for(model), cfg, MACHINE)      # a hit: validated once
    assert len([a for w, a in fake.calls if w == "deserialize_cuda_engine"]) == 1
    assert not [m for m in make_logger(fake).warnings if "logger passed into" in m]


def test_row8_errors_reach_the_message_after_earlier_builders(fake, tmp_path):
    engine = engine_for(fake, tmp_path, save_model(tmp_path / "m.onnx"))  # a Builder registered first
    (tmp_path / "model.engine.json").unlink()
    engine.write_bytes(b"garbage")
    with pytest.raises(UsageError, match="magic tag does not match"):
        runner_module.TensorRTRunner(engine)


# -- rows 9 and 10: what an engine is portable to ---------------------------------------------------
def meta(**options) -> EngineMetadata:
    return EngineMetadata("10.8.0.43", "NVIDIA L4", "8.9", "k", "o", "e", 1, [], [], [],
                          {"hardware_compat": "none", "version_compat": False, **options}, 1.0)


def test_row9_hardware_compatibility_levels():
    plain = meta()
    assert "tied to its GPU model" in plain.mismatch(tensorrt_version="10.8.0.43", gpu="NVIDIA L40S",
                                                     compute_capability="8.9")
    assert plain.mismatch(tensorrt_version="10.8.0.43", gpu="NVIDIA L4", compute_capability="8.9") is None
    same_cc = meta(hardware_compat="same-cc")
    assert same_cc.mismatch(tensorrt_version="10.8.0.43", gpu="NVIDIA L40S", compute_capability="8.9") is None
    assert same_cc.mismatch(tensorrt_version="10.8.0.43", gpu="NVIDIA H100", compute_capability="9.0")
    ampere = meta(hardware_compat="ampere+")
    assert ampere.mismatch(tensorrt_version="10.8.0.43", gpu="NVIDIA H100", compute_capability="9.0") is None
    assert "Ampere or newer" in ampere.mismatch(tensorrt_version="10.8.0.43", gpu="Tesla T4", compute_capability="7.5")


def test_row10_version_compatible_engines_run_forward_only():
    compat = meta(version_compat=True)
    here = dict(gpu="NVIDIA L4", compute_capability="8.9")
    assert compat.mismatch(tensorrt_version="10.13.0.35", **here) is None
    assert "later 10.x versions only" in compat.mismatch(tensorrt_version="10.3.0.26", **here)
    assert compat.mismatch(tensorrt_version="11.1.0.6", **here)
    assert meta().mismatch(tensorrt_version="10.13.0.35", **here) == \
        "built with TensorRT 10.8.0.43, this machine has 10.13.0.35"


# -- row 11: profiling verbosity, the profiler, the inspector ---------------------------------------
def test_row11_profile_names_layer_types(fake, tmp_path):
    from optcli.backends.tensorrt.profile import profile_engine
    from optcli.loaded_model import ResolvedArtifact

    engine = engine_for(fake, tmp_path, save_model(tmp_path / "m.onnx"))
    assert ("profiling_verbosity", ("DETAILED",)) in fake.calls
    result = profile_engine(ResolvedArtifact(engine, "engine"), batch=2, runs=3, warmup=1)
    types = {layer.name: layer.op_type for layer in result.layers}
    assert set(types.values()) == {"MatMul", "Relu"} and result.warnings == []
    assert all(layer.calls == 3 for layer in result.layers)


# -- rows 12-14 --------------------------------------------------------------------------------------
def test_row12_fp8_maps_to_a_torch_dtype(fake):
    assert dtype_name(fake.DataType.FP8) == "float8_e4m3fn" and hasattr(torch, dtype_name(fake.DataType.FP8))
    assert dtype_name(fake.DataType.BF16) == "bfloat16" and hasattr(torch, "bfloat16")


def test_row13_non_linear_io_formats_are_refused(fake, tmp_path):
    fake.io_format = "CHW32"
    engine = engine_for(fake, tmp_path, save_model(tmp_path / "m.onnx"))
    with pytest.raises(UsageError, match="uses the CHW32 format"):
        runner_module.TensorRTRunner(engine)


def test_row13_cache_key_has_the_cuda_major():
    args = ("sha", {}, [], "10.8.0.43", "NVIDIA L4", "8.9")
    assert cache_key(*args, cuda="12.4") == cache_key(*args, cuda="12.8")
    assert cache_key(*args, cuda="12.4") != cache_key(*args, cuda="13.0")


def test_row14_docs_state_the_real_minimum_gpu():
    from optcli.backends.tensorrt.probe import MIN_COMPUTE_CAPABILITY

    text = (Path(__file__).resolve().parents[2] / "docs" / "tensorrt.md").read_text()
    floor = ".".join(map(str, MIN_COMPUTE_CAPABILITY))
    assert "Volta or newer" not in text and f"compute capability {floor} or newer" in text


def test_row11_an_engine_built_without_detailed_verbosity_is_named_in_a_warning(fake, tmp_path):
    from optcli.backends.tensorrt.profile import profile_engine
    from optcli.loaded_model import ResolvedArtifact

    engine = engine_for(fake, tmp_path, save_model(tmp_path / "m.onnx"))
    plan = json.loads(engine.read_bytes()[len(b"FAKEPLAN"):])
    plan["verbosity"] = "LAYER_NAMES_ONLY"        # as another tool (or optcli before the fix) built it
    engine.write_bytes(b"FAKEPLAN" + json.dumps(plan).encode())
    result = profile_engine(ResolvedArtifact(engine, "engine"), batch=2, runs=2, warmup=0)
    assert {layer.op_type for layer in result.layers} == {"?"}
    assert "profiling verbosity LAYER_NAMES_ONLY" in result.warnings[0]
