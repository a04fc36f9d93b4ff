"""Contract tests: optcli's TensorRT build code against a test double of exactly the API slice it
uses (tests/contract/fake_tensorrt.py, written from NVIDIA's docs and bindings source). They check
that the right calls are made with the right arguments for TensorRT 10.x and 11.x; they say nothing
about what a real GPU does (tests/gpu/ does, where one exists)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from fake_tensorrt import make_tensorrt
from optcli.artifact import Artifact
from optcli.backends.tensorrt.builder import Machine, ParserFailure, build_engine, obtain_engine
from optcli.backends.tensorrt.engine_build import EngineBuild
from optcli.backends.tensorrt.engine_cache import EngineCache
from optcli.backends.tensorrt.metadata import ENGINE_FILE, METADATA_FILE
from optcli.backends.tensorrt.options import TensorRTConfig
from optcli.backends.tensorrt.profiles import build_profiles
from optcli.backends.torch.loader import ModelSource
from optcli.config import CompileConfig
from optcli.errors import StageError, UsageError
from optcli.onnx_model import io_specs
from optcli.plan.run_state import RunState
from optcli.stages.base import StageContext

MACHINE_10 = Machine("10.8.0.43", "NVIDIA L4", "8.9")
MACHINE_11 = Machine("11.1.0.6", "NVIDIA H100 80GB HBM3", "9.0")


def save_model(path: Path, *, batch: int | str = "batch", op: str = "Relu", domain: str = "") -> Path:
    """x[batch,4] @ W[4,3] -> op -> y[batch,3]; `op`/`domain` pick the second node."""
    w = numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(4, 3) / 10, "W")
    nodes = [helper.make_node("MatMul", ["x", "W"], ["m"], name="matmul"),
             helper.make_node(op, ["m"], ["y"], name="second", domain=domain)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 3])], [w])
    opsets = [helper.make_opsetid("", 17)] + ([helper.make_opsetid(domain, 1)] if domain else [])
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def calls(trt, what: str) -> list[tuple]:
    return [args for name, args in trt.calls if name == what]


@pytest.fixture
def cfg(tmp_path: Path) -> TensorRTConfig:
    return TensorRTConfig(engine_cache=tmp_path / "engines", timing_cache=tmp_path / "timing.cache")


def profiles_for(path: Path, batch=(1, 8, 32)):
    specs, _ = io_specs(onnx.load(str(path), load_external_data=False))
    return build_profiles(specs, batch=batch)


# -- strongly typed networks, no precision flags -----------------------------------------------
def test_10x_network_is_created_strongly_typed(tmp_path, cfg):
    trt = make_tensorrt("10.8.0.43")
    model = save_model(tmp_path / "m.onnx")
    obtain_engine(trt, model, profiles_for(model), cfg, MACHINE_10)
    assert calls(trt, "create_network") == [(1 << 1,)]  # 1 << STRONGLY_TYPED (= 1 in 10.x's NvInfer.h)
    assert not [f for (f,) in calls(trt, "set_flag") if f in ("FP16", "INT8", "BF16")]


def test_11x_network_gets_no_flags_and_build_succeeds(tmp_path, cfg):
    trt = make_tensorrt("11.1.0.6", compute_capability="9.0")
    model = save_model(tmp_path / "m.onnx")
    got = obtain_engine(trt, model, profiles_for(model), cfg, MACHINE_11)
    assert calls(trt, "create_network") == [(0,)]
    assert got.metadata.tensorrt_version == "11.1.0.6" and trt.builds == 1


def test_the_double_refuses_what_is_outside_the_slice():
    trt = make_tensorrt("11.1.0.6")
    with pytest.raises(AttributeError, match="contract"):
        _ = trt.BuilderFlag.FP16        # removed in 11.x
    with pytest.raises(AttributeError, match="contract"):
        _ = trt.IInt8EntropyCalibrator2  # calibrators are gone: precision comes from the ONNX
    builder = trt.Builder(trt.Logger(trt.Logger.WARNING))
    with pytest.raises(AttributeError, match="contract"):
        _ = builder.build_engine        # TensorRT 8 API
    config = builder.create_builder_config()
    with pytest.raises(AttributeError, match="contract"):
        config.int8_calibrator = object()
    with pytest.raises(AssertionError):
        config.builder_optimization_level = 7


# -- optimization profiles ---------------------------------------------------------------------
def test_dynamic_batch_profile_is_set_on_the_builder_config(tmp_path, cfg):
    trt = make_tensorrt()
    model = save_model(tmp_path / "m.onnx")
    got = obtain_engine(trt, model, profiles_for(model, batch=(2, 8, 64)), cfg, MACHINE_10)
    assert calls(trt, "set_shape") == [("x", (2, 4), (8, 4), (64, 4))]
    assert calls(trt, "add_optimization_profile") == [({"x": ((2, 4), (8, 4), (64, 4))},)]
    assert got.metadata.inputs[0]["profile"] == [[2, 4], [8, 4], [64, 4]]


def test_static_model_gets_no_profile(tmp_path, cfg):
    trt = make_tensorrt()
    model = save_model(tmp_path / "m.onnx", batch=4)
    got = obtain_engine(trt, model, profiles_for(model, batch=None), cfg, MACHINE_10)
    assert calls(trt, "set_shape") == [] and calls(trt, "add_optimization_profile") == []
    assert got.metadata.inputs == [{"name": "x", "dtype": "float32", "shape": [4, 4]}]


def test_dynamic_input_without_profile_is_refused_before_building(tmp_path, cfg):
    trt = make_tensorrt()
    model = save_model(tmp_path / "m.onnx")
    with pytest.raises(StageError, match="'x' is dynamic in TensorRT's network but has no profile"):
        build_engine(trt, model, [], cfg.build_options(), None)
    assert calls(trt, "build_serialized_network") == []


# -- builder options ---------------------------------------------------------------------------
def test_build_options_reach_the_builder_config(tmp_path):
    trt = make_tensorrt("10.13.0.35")
    model = save_model(tmp_path / "m.onnx")
    cfg = TensorRTConfig.from_dict({"workspace": "4G", "builder_opt_level": 5, "hardware_compat": "same-cc",
                                    "version_compat": True, "engine_cache": str(tmp_path / "e"),
                                    "timing_cache": str(tmp_path / "t.cache")})
    got = obtain_engine(trt, model, profiles_for(model), cfg, Machine("10.13.0.35", "NVIDIA L4", "8.9"))
    assert calls(trt, "set_memory_pool_limit") == [("WORKSPACE", 4 << 30)]
    assert calls(trt, "builder_optimization_level") == [(5,)]
    assert calls(trt, "hardware_compatibility_level") == [("SAME_COMPUTE_CAPABILITY",)]
    assert ("VERSION_COMPATIBLE",) in calls(trt, "set_flag")
    # A version-compatible engine only deserializes with host code allowed: the build path did that.
    assert got.metadata.options["version_compat"] is True


def test_same_cc_compat_on_a_tensorrt_without_it_is_a_usage_error(tmp_path):
    trt = make_tensorrt("10.8.0.43")
    model = save_model(tmp_path / "m.onnx")
    cfg = TensorRTConfig(hardware_compat="same-cc", engine_cache_enabled=False, timing_cache=tmp_path / "t")
    with pytest.raises(UsageError, match="no hardware compatibility level 'same-cc'"):
        obtain_engine(trt, model, profiles_for(model), cfg, MACHINE_10)


# -- timing cache ------------------------------------------------------------------------------
def test_timing_cache_is_created_saved_and_reloaded(tmp_path):
    trt = make_tensorrt()
    model = save_model(tmp_path / "m.onnx")
    timing = tmp_path / "timing.cache"
    cfg = TensorRTConfig(engine_cache_enabled=False, timing_cache=timing)
    first = obtain_engine(trt, model, profiles_for(model), cfg, MACHINE_10)
    assert first.timing_cache.endswith("(new)") and timing.is_file()
    size = timing.stat().st_size
    second = obtain_engine(trt, model, profiles_for(model), cfg, MACHINE_10)
    assert f"(loaded {size} bytes)" in second.timing_cache
    assert calls(trt, "set_timing_cache")[-1] == (2, False)   # the first build's 2 entries, mismatch not ignored
    # The same graph adds no new tactics: the merged file holds each entry once.
    assert json.loads(timing.read_bytes()[len(b"FAKETC"):])["entries"] == ["MatMul:matmul", "Relu:second"]


def test_unreadable_timing_cache_starts_fresh(tmp_path):
    trt = make_tensorrt()
    model = save_model(tmp_path / "m.onnx")
    timing = tmp_path / "timing.cache"
    timing.write_bytes(b"not a timing cache")
    got = obtain_engine(trt, model, profiles_for(model), TensorRTConfig(engine_cache_enabled=False,
                                                                        timing_cache=timing), MACHINE_10)
    assert "unreadable, started a new one" in got.timing_cache
    assert timing.read_bytes().startswith(b"FAKETC")  # replaced by a good one


def test_timing_cache_from_another_gpu_is_not_trusted(tmp_path):
    model = save_model(tmp_path / "m.onnx")
    timing = tmp_path / "timing.cache"
    cfg = TensorRTConfig(engine_cache_enabled=False, timing_cache=timing)
    obtain_engine(make_tensorrt(compute_capability="8.6"), model, profiles_for(model), cfg,
                  Machine("10.8.0.43", "NVIDIA A10", "8.6"))
    got = obtain_engine(make_tensorrt(compute_capability="8.9"), model, profiles_for(model), cfg, MACHINE_10)
    assert "made on another GPU or TensorRT version" in got.timing_cache


# -- engine cache ------------------------------------------------------------------------------
def test_engine_cache_miss_then_hit(tmp_path, cfg):
    trt = make_tensorrt()
    model = save_model(tmp_path / "m.onnx")
    first = obtain_engine(trt, model, profiles_for(model), cfg, MACHINE_10)
    second = obtain_engine(trt, model, profiles_for(model), cfg, MACHINE_10)
    assert first.cache["status"] == "miss" and second.cache["status"] == "hit"
    assert trt.builds == 1 and second.engine_bytes == first.engine_bytes
    assert second.cache["key"] == first.cache["key"]


def test_engine_cache_key_follows_options_and_profiles(tmp_path, cfg):
    trt = make_tensorrt()
    model = save_model(tmp_path / "m.onnx")
    a = obtain_engine(trt, model, profiles_for(model, batch=(1, 8, 32)), cfg, MACHINE_10)
    b = obtain_engine(trt, model, profiles_for(model, batch=(1, 8, 64)), cfg, MACHINE_10)
    cfg.builder_opt_level = 1
    c = obtain_engine(trt, model, profiles_for(model, batch=(1, 8, 64)), cfg, MACHINE_10)
    assert len({a.cache["key"], b.cache["key"], c.cache["key"]}) == 3 and trt.builds == 3


def _entry(cfg: TensorRTConfig, key: str) -> Path:
    return EngineCache(cfg.engine_cache_dir()).entry(key)


def test_truncated_cached_engine_is_detected_reported_and_rebuilt(tmp_path, cfg):
    trt = make_tensorrt()
    model = save_model(tmp_path / "m.onnx")
    key = obtain_engine(trt, model, profiles_for(model), cfg, MACHINE_10).cache["key"]
    engine = _entry(cfg, key) / ENGINE_FILE
    engine.write_bytes(engine.read_bytes()[:20])
    again = obtain_engine(trt, model, profiles_for(model), cfg, MACHINE_10)
    assert again.cache["status"] == "corrupt" and "sha256" in again.cache["reason"]
    assert trt.builds == 2
    assert obtain_engine(trt, model, profiles_for(model), cfg, MACHINE_10).cache["status"] == "hit"


def test_cached_engine_tensorrt_cannot_deserialize_is_rebuilt(tmp_path, cfg):
    import hashlib

    trt = make_tensorrt()
    model = save_model(tmp_path / "m.onnx")
    key = obtain_engine(trt, model, profiles_for(model), cfg, MACHINE_10).cache["key"]
    entry = _entry(cfg, key)
    garbage = b"\x00garbage engine bytes"
    (entry / ENGINE_FILE).write_bytes(garbage)
    meta = json.loads((entry / METADATA_FILE).read_text())
    meta["engine_sha256"] = hashlib.sha256(garbage).hexdigest()   # only TensorRT itself can tell now
    (entry / METADATA_FILE).write_text(json.dumps(meta))
    again = obtain_engine(trt, model, profiles_for(model), cfg, MACHINE_10)
    assert again.cache["status"] == "corrupt"
    assert "TensorRT cannot deserialize it" in again.cache["reason"] and "magic tag" in again.cache["reason"]
    assert trt.builds == 2


def test_unreadable_metadata_is_a_corrupt_entry(tmp_path, cfg):
    trt = make_tensorrt()
    model = save_model(tmp_path / "m.onnx")
    key = obtain_engine(trt, model, profiles_for(model), cfg, MACHINE_10).cache["key"]
    (_entry(cfg, key) / METADATA_FILE).write_text("{not json")
    again = obtain_engine(trt, model, profiles_for(model), cfg, MACHINE_10)
    assert again.cache["status"] == "corrupt" and "unreadable metadata" in again.cache["reason"]


def test_mismatching_metadata_is_reported_and_rebuilt(tmp_path, cfg):
    trt = make_tensorrt()
    model = save_model(tmp_path / "m.onnx")
    key = obtain_engine(trt, model, profiles_for(model), cfg, MACHINE_10).cache["key"]
    meta_path = _entry(cfg, key) / METADATA_FILE
    meta = json.loads(meta_path.read_text())
    meta["tensorrt_version"] = "10.3.0.26"
    meta_path.write_text(json.dumps(meta))
    again = obtain_engine(trt, model, profiles_for(model), cfg, MACHINE_10)
    assert again.cache["status"] == "mismatch"
    assert again.cache["reason"] == "built with TensorRT 10.3.0.26, this machine has 10.8.0.43"
    assert trt.builds == 2


def test_force_rebuilds_and_refreshes_the_entry(tmp_path, cfg):
    trt = make_tensorrt()
    model = save_model(tmp_path / "m.onnx")
    obtain_engine(trt, model, profiles_for(model), cfg, MACHINE_10)
    forced = obtain_engine(trt, model, profiles_for(model), cfg, MACHINE_10, force=True)
    assert forced.cache["status"] == "forced" and trt.builds == 2
    assert obtain_engine(trt, model, profiles_for(model), cfg, MACHINE_10).cache["status"] == "hit"


# -- parser failures ---------------------------------------------------------------------------
def test_parser_failure_names_node_op_and_message(tmp_path, cfg):
    trt = make_tensorrt()
    model = save_model(tmp_path / "m.onnx", op="FancyOp", domain="com.example")
    with pytest.raises(ParserFailure) as info:
        obtain_engine(trt, model, profiles_for(model), cfg, MACHINE_10)
    issue = info.value.issues[0]
    assert (issue.node, issue.node_name, issue.op) == (1, "second", "FancyOp")
    assert issue.message == "No importer registered for op: FancyOp"
    assert info.value.message == ("TensorRT's ONNX parser rejected the model: node 1 'second' (op FancyOp): "
                                  "No importer registered for op: FancyOp")
    assert isinstance(info.value, StageError) and trt.builds == 0


# -- the stage, end to end through the double ----------------------------------------------------
def _stage(tmp_path: Path, model: Path, trt, machine: Machine, section: dict | None = None) -> EngineBuild:
    section = section or {"engine_cache": str(tmp_path / "engines"), "timing_cache": str(tmp_path / "t.cache")}
    config = CompileConfig(model=str(model), target="tensorrt", extra={"tensorrt": section})
    ctx = StageContext(config=config, source=ModelSource(str(model), model, "onnx"), inputs=[], target="tensorrt",
                       out_dir=tmp_path, state=RunState(tensorrt_module=trt, tensorrt_machine=machine))
    return EngineBuild(ctx, "build")


def test_stage_writes_engine_and_metadata(tmp_path):
    trt = make_tensorrt()
    model = save_model(tmp_path / "m.onnx")
    stage = _stage(tmp_path, model, trt, MACHINE_10, {"batch": "1/4/16", "workspace": "1G",
                                                      "engine_cache": str(tmp_path / "engines"),
                                                      "timing_cache": str(tmp_path / "t.cache")})
    work = tmp_path / "work"
    work.mkdir()
    result = stage.run(Artifact(model, "onnx", precision="fp16"), work)
    art = result.artifact
    assert art.format == "engine" and art.backend == "tensorrt" and art.precision == "fp16"
    assert art.path == work / "model.engine" and art.path.read_bytes().startswith(b"FAKEPLAN")
    meta = json.loads((work / "model.engine.json").read_text())
    assert meta["format"] == "optcli-tensorrt-engine"
    assert (meta["tensorrt_version"], meta["gpu"], meta["compute_capability"]) == ("10.8.0.43", "NVIDIA L4", "8.9")
    assert meta["profiles"] == [{"name": "x", "min": [1, 4], "opt": [4, 4], "max": [16, 4], "dynamic_axes": [0]}]
    assert meta["inputs"] == [{"name": "x", "dtype": "float32", "shape": [-1, 4], "profile": [[1, 4], [4, 4], [16, 4]]}]
    assert meta["outputs"] == [{"name": "y", "dtype": "float32", "shape": [-1, 3]}]
    assert meta["options"] == {"workspace": 1 << 30, "builder_opt_level": None, "hardware_compat": "none",
                               "version_compat": False}
    assert meta["build_seconds"] >= 0 and meta["engine_bytes"] == art.path.stat().st_size
    assert result.details["engine_cache"]["status"] == "miss" and result.details["built_now"] is True
    assert result.details["profiles"] == ["x:1x4/4x4/16x4"]
    # A second run of the stage (a new output folder) takes the engine from the cache.
    work2 = tmp_path / "work2"
    work2.mkdir()
    again = stage.run(Artifact(model, "onnx"), work2)
    assert again.details["engine_cache"]["status"] == "hit" and again.details["built_now"] is False
    assert (work2 / "model.engine").read_bytes() == art.path.read_bytes() and trt.builds == 1


def test_stage_reports_parser_failure_as_stage_error(tmp_path):
    trt = make_tensorrt("11.1.0.6", compute_capability="9.0")
    model = save_model(tmp_path / "m.onnx", op="FancyOp", domain="com.example")
    stage = _stage(tmp_path, model, trt, MACHINE_11)
    (tmp_path / "w").mkdir()
    with pytest.raises(StageError, match=r"node 1 'second' \(op FancyOp\): No importer registered"):
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("OPTCLI_TENSORRT_PREFLIGHT", "off")   # the parser itself, not the preflight
            stage.run(Artifact(model, "onnx"), tmp_path / "w")


def test_stage_runs_the_preflight_before_any_tensorrt_call(tmp_path):
    trt = make_tensorrt("11.1.0.6", compute_capability="9.0")
    model = save_model(tmp_path / "m.onnx", op="FancyOp", domain="com.example")
    stage = _stage(tmp_path, model, trt, MACHINE_11)
    (tmp_path / "w").mkdir()
    # The oracle is NVIDIA's parser where one is installed (TensorRT-RTX in the test lock), else the matrix.
    with pytest.raises(StageError, match=r"TensorRT's ONNX parser refuses \(.*\): node 1 'second' \(FancyOp\): "
                                         r"(custom domain 'com.example'|.*Plugin not found)") as info:
        stage.run(Artifact(model, "onnx"), tmp_path / "w")
    assert "optcli check" in info.value.hint and trt.calls == []


def test_stage_refuses_a_batch_range_the_pipeline_cannot_measure(tmp_path):
    model = save_model(tmp_path / "m.onnx")
    stage = _stage(tmp_path, model, make_tensorrt(), MACHINE_10, {"batch": "4/8/16"})
    with pytest.raises(UsageError, match="the bench batch 1 is outside the batch range 4..16 of input 'x'"):
        stage.run(Artifact(model, "onnx"), tmp_path)


def test_stage_fingerprint_changes_with_machine_and_options(tmp_path):
    model = save_model(tmp_path / "m.onnx")
    a = _stage(tmp_path, model, make_tensorrt(), MACHINE_10).fingerprint()
    b = _stage(tmp_path, model, make_tensorrt(), Machine("10.8.0.43", "NVIDIA A10", "8.6")).fingerprint()
    c = _stage(tmp_path, model, make_tensorrt(), MACHINE_10, {"workspace": "2G"}).fingerprint()
    assert a != b and a != c
