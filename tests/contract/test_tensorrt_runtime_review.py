"""The second review's runtime findings (issue 29), one block each, against the TensorRT double.
Each test failed on the code before its fix. Nothing here ran on a GPU."""
from __future__ import annotations

import types
from pathlib import Path

import numpy as np
import onnx
import pytest
from fake_cuda import FakeGraph, TorchShim
from fake_tensorrt import make_tensorrt
from onnx import TensorProto, helper, numpy_helper
from test_tensorrt_runner_contract import MACHINE, engine_for, reference, save_model

torch = pytest.importorskip("torch")

import optcli.backends.tensorrt.runner as runner_module  # noqa: E402
from optcli import api  # noqa: E402
from optcli.errors import UsageError  # noqa: E402
from optcli.onnx_model import io_specs  # noqa: E402
from optcli.tensor_spec import parse_input_spec  # noqa: E402
from optcli.backends.tensorrt.builder import deserialize, make_logger, obtain_engine  # noqa: E402
from optcli.backends.tensorrt.options import TensorRTConfig  # noqa: E402
from optcli.backends.tensorrt.profiles import build_profiles  # noqa: E402


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
    monkeypatch.setattr(runner_module, "tensorrt_cuda_major", lambda trt: "12")
    with runner_module.TensorRTRunner(engine) as runner:
        assert runner.predict({"x": np.ones((2, 4), np.float32)})["y"].shape == (2, 3)
    monkeypatch.setattr(runner_module, "tensorrt_cuda_major", lambda trt: "13")
    with pytest.raises(UsageError, match="built by TensorRT for CUDA 12, the TensorRT here is for CUDA 13"):
        runner_module.TensorRTRunner(engine)


def test_f8_the_build_stage_records_tensorrts_cuda_major(monkeypatch):
    from optcli.backends.tensorrt import probe
    from optcli.stages.build_tensorrt import BuildTensorRTStage

    status = probe._interpret({"nvidia_smi_gpu": "NVIDIA L4", "cuda_device": "NVIDIA L4", "compute_capability": "8.9",
                               "tensorrt": "10.14.1.48", "tensorrt_cuda": "12", "torch": "2.13.0",
                               "torch_cuda": "13.0", "builder": True})
    assert status.usable and status.tensorrt_cuda == "12"
    monkeypatch.setattr(probe, "tensorrt_status", lambda: status)
    stage = types.SimpleNamespace(ctx=types.SimpleNamespace(facts={}))
    assert BuildTensorRTStage.machine(stage).cuda == "12"   # type: ignore[arg-type]


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


