"""GPU/TensorRT detection in a subprocess, and what `optcli compile` does with --target tensorrt/auto
on a machine without them (this CPU machine). Tests that only make sense without a GPU skip on one."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from optcli.backends.tensorrt.probe import TensorRTUnavailableError, _interpret, probe_subprocess, tensorrt_status
from optcli.cli.main import main
from optcli.environment import gpu_name
from optcli.errors import EXIT_MISSING_DEPENDENCY, MissingDependencyError

needs_no_gpu = pytest.mark.skipif(gpu_name() is not None, reason="this machine has an NVIDIA GPU")


@pytest.fixture
def tiny_onnx(tmp_path: Path) -> Path:
    w = numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(4, 3), "W")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "W"], ["m"]), helper.make_node("Relu", ["m"], ["y"])],
                              "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = tmp_path / "tiny.onnx"
    onnx.save(model, str(path))
    return path


def run_cli(args: list[str], capsys) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as info:
        main(args)
    out = capsys.readouterr()
    return int(info.value.code or 0), out.out, out.err


# -- the probe ---------------------------------------------------------------------------------
@needs_no_gpu
def test_probe_child_runs_and_reports_no_gpu_here():
    status = probe_subprocess()
    assert not status.usable
    assert status.facts["python"] == sys.version.split()[0]          # the child really ran
    assert status.missing[0] == "no NVIDIA GPU (nvidia-smi and torch.cuda find none)"
    assert status.gpu is None and status.compute_capability is None


def test_probe_survives_a_child_that_aborts():
    status = probe_subprocess([sys.executable, "-c", "import os; os.abort()"])
    assert not status.usable
    assert status.missing == ("the TensorRT probe crashed (SIGABRT): TensorRT or the GPU driver is not usable here",)


def test_probe_reports_a_child_that_fails_or_hangs():
    failed = probe_subprocess([sys.executable, "-c", "import sys; print('boom', file=sys.stderr); sys.exit(3)"])
    assert failed.missing == ("the TensorRT probe failed (exit 3): boom",)
    hung = probe_subprocess([sys.executable, "-c", "import time; time.sleep(30)"], timeout=1)
    assert hung.missing == ("the TensorRT probe hung for 1 s (GPU or driver unresponsive)",)


def test_probe_reads_the_last_marked_line():
    code = "print('noise'); print('OPTCLI_TENSORRT_PROBE ' + __import__('json').dumps(" \
           "{'nvidia_smi_gpu': 'NVIDIA L4', 'cuda_device': 'NVIDIA L4', 'compute_capability': '8.9', " \
           "'tensorrt': '10.8.0.43', 'torch': '2.13.0', 'torch_cuda': '12.8', 'builder': True}))"
    status = probe_subprocess([sys.executable, "-c", code])
    assert status.usable and status.summary() == "NVIDIA L4 (compute 8.9) with TensorRT 10.8.0.43"


def test_interpret_names_each_missing_piece():
    cpu_torch = _interpret({"nvidia_smi_gpu": "NVIDIA L4", "tensorrt": "10.8.0.43", "torch": "2.13.0+cpu",
                            "torch_cuda": None})
    assert cpu_torch.missing == ("torch 2.13.0+cpu is a CPU build (TensorRT buffers need a CUDA build of torch)",)
    broken = _interpret({"nvidia_smi_gpu": "NVIDIA L4", "cuda_device": "NVIDIA L4", "tensorrt": None,
                         "tensorrt_error": "OSError: libnvinfer.so.10: cannot open shared object file",
                         "torch": "2.13.0", "torch_cuda": "12.8"})
    assert broken.missing == ("TensorRT not installed (no tensorrt Python package (OSError: libnvinfer.so.10: "
                              "cannot open shared object file))",)
    no_builder = _interpret({"nvidia_smi_gpu": "X", "cuda_device": "X", "tensorrt": "11.1.0.6", "torch": "2",
                             "torch_cuda": "13.0", "builder": False, "builder_error": "RuntimeError: CUDA error 35"})
    assert no_builder.missing == ("TensorRT cannot create a builder on this GPU (RuntimeError: CUDA error 35)",)


@needs_no_gpu
def test_status_here_is_not_usable_and_the_error_exits_4():
    tensorrt_status.cache_clear()
    status = tensorrt_status()
    assert not status.usable and status.missing[0] == "no NVIDIA GPU (nvidia-smi finds none)"
    err = TensorRTUnavailableError(status)
    assert isinstance(err, MissingDependencyError) and err.exit_code == EXIT_MISSING_DEPENDENCY == 4
    assert "pip install 'optcli[tensorrt]'" in err.hint


def test_engine_runner_without_tensorrt_is_a_missing_dependency(tmp_path):
    pytest.importorskip("torch")
    if __import__("importlib.util").util.find_spec("tensorrt") is not None:
        pytest.skip("tensorrt is installed here")
    from optcli.runtime import open_runner

    (tmp_path / "model.engine").write_bytes(b"x")
    with pytest.raises(MissingDependencyError, match="tensorrt is not installed") as info:
        open_runner(tmp_path / "model.engine", "engine", threads=2)
    assert info.value.hint == "pip install 'optcli[tensorrt]'"


# -- the CLI on a machine without a GPU --------------------------------------------------------
@needs_no_gpu
def test_target_tensorrt_exits_4_with_one_error_line(tiny_onnx, tmp_path, capsys):
    code, out, err = run_cli(["compile", str(tiny_onnx), "--target", "tensorrt", "--out", str(tmp_path / "o")], capsys)
    assert code == 4
    lines = err.strip().splitlines()
    assert lines[0] == ("error: --target tensorrt needs an NVIDIA GPU and TensorRT: no NVIDIA GPU (nvidia-smi finds "
                        "none); TensorRT not installed (no tensorrt Python package)")
    assert lines[1].startswith("hint: on a machine with an NVIDIA GPU and driver: pip install 'optcli[tensorrt]'")
    assert len(lines) == 2 and "Traceback" not in err and out == ""


@needs_no_gpu
def test_target_auto_without_tensorrt_builds_for_the_cpu_and_says_why(tiny_onnx, tmp_path, capsys):
    out_dir = tmp_path / "o"
    code, _, _ = run_cli(["compile", str(tiny_onnx), "--target", "auto", "--out", str(out_dir), "--no-bench",
                          "--no-simplify", "--no-fuse"], capsys)
    assert code == 0
    report = json.loads((out_dir / "report.json").read_text())
    stage = next(s for s in report["stages"] if s["name"] == "build")
    assert report["status"] == "ok" and report["target"] == "cpu"
    assert report["target_reason"] == ("no NVIDIA GPU (nvidia-smi finds none); TensorRT not installed "
                                       "(no tensorrt Python package)")
    assert [s["name"] for s in report["stages"]].count("build") == 1  # one build stage, whatever the target
    assert stage["status"] in ("ok", "skipped") and "tensorrt" not in (stage["reason"] or "").lower()


def test_target_cpu_runs_the_cpu_build(tiny_onnx, tmp_path, capsys):
    out_dir = tmp_path / "o"
    code, _, _ = run_cli(["compile", str(tiny_onnx), "--target", "cpu", "--out", str(out_dir), "--no-bench",
                          "--no-simplify", "--no-fuse"], capsys)
    report = json.loads((out_dir / "report.json").read_text())
    stage = next(s for s in report["stages"] if s["name"] == "build")
    assert code == 0 and report["target_reason"] == "asked for cpu"
    # the CPU search: it chose among the CPU candidates, or had only the input to run as it is
    assert stage["details"].get("chosen") or stage["reason"].startswith("nothing to choose"), stage


def test_tensorrt_flags_reach_the_config(tiny_onnx, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "optcli.toml").write_text('[tensorrt]\nworkspace = "1G"\nbuilder_opt_level = 1\n')
    code, out, _ = run_cli(["compile", str(tiny_onnx), "--target", "cpu", "--out", "o", "--no-bench", "--no-simplify",
                            "--no-fuse", "--json", "--batch", "1/8/32", "--workspace", "4G", "--hardware-compat",
                            "--version-compat", "--timing-cache", "t.cache", "--no-engine-cache", "--max-seq", "256",
                            "--no-fp16"], capsys)
    assert code == 0
    section = json.loads(out)["config"]["extra"]["tensorrt"]
    assert section == {"batch": [1, 8, 32], "workspace": 4 << 30, "builder_opt_level": 1, "hardware_compat": "ampere+",
                       "version_compat": True, "timing_cache": "t.cache", "engine_cache": None,
                       "engine_cache_enabled": False, "max_seq": 256, "int8_fp16": False}


@pytest.mark.parametrize("args,message", [
    (["--batch", "8/1/32"], "need 1 <= MIN <= OPT <= MAX"),
    (["--workspace", "lots"], "bad size 'lots'"),
    (["--builder-opt-level", "6"], "6 is not in the range 0<=x<=5"),
    (["--hardware-compat", "turing"], "'turing' is not one of"),
])
def test_bad_tensorrt_flags_exit_2(tiny_onnx, tmp_path, capsys, args, message):
    code, _, err = run_cli(["compile", str(tiny_onnx), "--target", "cpu", "--out", str(tmp_path / "o"), *args], capsys)
    assert code == 2 and message in err and "Traceback" not in err


def test_bad_tensorrt_section_in_config_file_exits_2(tiny_onnx, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "optcli.toml").write_text("[tensorrt]\nworkspaces = 1\n")
    code, _, err = run_cli(["compile", str(tiny_onnx), "--target", "cpu", "--out", "o"], capsys)
    assert code == 2 and "error: unknown key 'workspaces' in [tensorrt]" in err


def test_tensorrt_modules_import_nothing_heavy():
    code = ("import sys, optcli.cli.compile_cmd, optcli.backends.tensorrt.engine_build, "
            "optcli.backends.tensorrt.runner, optcli.backends.tensorrt.builder, "
            "optcli.backends.tensorrt.probe, optcli.targets; "
            "heavy = [m for m in ('torch', 'tensorrt', 'onnxruntime', 'cuda') if m in sys.modules]; "
            "print(heavy); sys.exit(1 if heavy else 0)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_interpret_refuses_a_gpu_older_than_tensorrt_10_supports():
    volta = _interpret({"nvidia_smi_gpu": "Tesla V100", "cuda_device": "Tesla V100", "compute_capability": "7.0",
                        "tensorrt": "10.8.0.43", "torch": "2.13.0", "torch_cuda": "12.4", "builder": True})
    assert not volta.usable and "needs 7.5 or newer" in volta.summary()
    turing = _interpret({"nvidia_smi_gpu": "Tesla T4", "cuda_device": "Tesla T4", "compute_capability": "7.5",
                         "tensorrt": "10.8.0.43", "torch": "2.13.0", "torch_cuda": "12.4", "builder": True})
    assert turing.usable
