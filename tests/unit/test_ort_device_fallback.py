"""onnxruntime falls back to the CPU with only a warning when the provider asked for cannot run (a
CPU-only onnxruntime, or onnxruntime-gpu without usable CUDA libraries): a latency labelled
"onnxruntime-cuda" would then be the CPU's. The runner refuses instead, naming the extra to install;
where CUDA does work (a GPU machine with onnxruntime-gpu), the session must really be on it."""
from __future__ import annotations

import pytest

from compile_testkit import make_matmul_add_relu, run_main
from optcli.backends.onnxruntime.runner import OnnxRuntimeRunner
from optcli.errors import EXIT_MISSING_DEPENDENCY, DeviceUnavailableError

ort = pytest.importorskip("onnxruntime")


def _cuda_works(path) -> bool:
    session = ort.InferenceSession(str(path), providers=["CUDAExecutionProvider", "CPUExecutionProvider"])
    return session.get_providers()[0] == "CUDAExecutionProvider"


def test_cuda_asked_for_is_cuda_or_refused(tmp_path) -> None:
    model = make_matmul_add_relu(tmp_path / "m.onnx")
    if _cuda_works(model):
        with OnnxRuntimeRunner(model, device="cuda") as runner:
            assert runner.backend == "onnxruntime-cuda"
            assert runner.settings["providers"][0] == "CUDAExecutionProvider"
        return
    with pytest.raises(DeviceUnavailableError) as err:
        OnnxRuntimeRunner(model, device="cuda")
    assert "CUDAExecutionProvider" in err.value.message and "onnxruntime-gpu" in err.value.hint


def test_bench_on_a_device_onnxruntime_cannot_use_exits_with_one_line(tmp_path) -> None:
    model = make_matmul_add_relu(tmp_path / "m.onnx")
    if _cuda_works(model):
        pytest.skip("CUDA works here: nothing to refuse")
    code, _, err = run_main("bench", str(model), "--device", "cuda", "--runs", "2", "--min-seconds", "0")
    assert code == EXIT_MISSING_DEPENDENCY, err
    lines = err.strip().splitlines()
    assert lines[0].startswith("error: ") and "could not use CUDAExecutionProvider" in lines[0]
    assert lines[1].startswith("hint: ") and "Traceback" not in err
