"""The issue's bad-input list: each gives exit 2 (4 for a missing optional dependency), one `error:` line,
a `hint:` line, and never a traceback.

Cases that fail before torch is needed run in a real subprocess (cheap); the ones that must load torch run
through main(argv) in this process, which is the console script's own code path, so a traceback would
surface here as an uncaught exception."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from compile_testkit import blocker_source, cli_env, read_report, run_main, run_optcli

EXIT_USAGE = 2
EXIT_MISSING_DEPENDENCY = 4


def assert_one_line_error(code: int, stdout: str, stderr: str, expected_code: int, *fragments: str) -> str:
    """Exit code, exactly one `error:` line followed by a `hint:` line, no traceback; returns the error line."""
    assert code == expected_code, f"exit {code}, expected {expected_code}\nstdout:\n{stdout}\nstderr:\n{stderr}"
    assert "Traceback" not in stderr and "Traceback" not in stdout, stderr
    lines = stderr.splitlines()
    errors = [i for i, ln in enumerate(lines) if ln.startswith("error: ")]
    assert len(errors) == 1, stderr
    i = errors[0]
    assert i + 1 < len(lines) and lines[i + 1].startswith("hint: ") and len(lines[i + 1]) > len("hint: "), stderr
    error = lines[i]
    for fragment in fragments:
        assert fragment in error, f"{fragment!r} not in {error!r}"
    return error


def compile_subprocess(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None
                       ) -> subprocess.CompletedProcess:
    return run_optcli("compile", *args, "--no-bench", cwd=cwd, env=env, timeout=240)


@pytest.fixture()
def out(tmp_path: Path) -> Path:
    return tmp_path / "out"


# -- the model file -------------------------------------------------------------------------------------

def test_missing_file(out: Path) -> None:
    p = compile_subprocess("no/such/model.onnx", "--out", str(out))
    assert_one_line_error(p.returncode, p.stdout, p.stderr, EXIT_USAGE, "model not found")
    assert not out.exists()  # nothing is written for a run that cannot start


def test_missing_python_file(out: Path) -> None:
    p = compile_subprocess("no/such/file.py:make", "--out", str(out))
    assert_one_line_error(p.returncode, p.stdout, p.stderr, EXIT_USAGE, "model not found")


def test_directory(tmp_path: Path, out: Path) -> None:
    (tmp_path / "model.onnx").mkdir()
    p = compile_subprocess(str(tmp_path / "model.onnx"), "--out", str(out))
    assert_one_line_error(p.returncode, p.stdout, p.stderr, EXIT_USAGE, "is a directory")


@pytest.mark.parametrize("name", ["model.onnx", "model.pt2", "model.pt"])
def test_empty_file(tmp_path: Path, out: Path, name: str) -> None:
    (tmp_path / name).write_bytes(b"")
    p = compile_subprocess(str(tmp_path / name), "--out", str(out))
    assert_one_line_error(p.returncode, p.stdout, p.stderr, EXIT_USAGE, "is empty")


def test_truncated_onnx(conv_onnx: Path, tmp_path: Path, out: Path) -> None:
    data = conv_onnx.read_bytes()
    bad = tmp_path / "truncated.onnx"
    bad.write_bytes(data[: len(data) // 2])
    p = compile_subprocess(str(bad), "--out", str(out))
    assert_one_line_error(p.returncode, p.stdout, p.stderr, EXIT_USAGE, "not a valid ONNX model")


def test_truncated_pt2(cnn_pt2: Path, tmp_path: Path, out: Path) -> None:
    data = cnn_pt2.read_bytes()
    bad = tmp_path / "truncated.pt2"
    bad.write_bytes(data[: len(data) // 2])
    p = compile_subprocess(str(bad), "--out", str(out))
    assert_one_line_error(p.returncode, p.stdout, p.stderr, EXIT_USAGE, "not a torch.export archive")


def test_truncated_torchscript(cnn_torchscript: Path, tmp_path: Path, out: Path) -> None:
    data = cnn_torchscript.read_bytes()
    bad = tmp_path / "truncated.pt"
    bad.write_bytes(data[: len(data) // 2])
    p = compile_subprocess(str(bad), "--input", "x:1x3x16x16", "--out", str(out))
    assert_one_line_error(p.returncode, p.stdout, p.stderr, EXIT_USAGE, "not a PyTorch model file")


def test_zip_that_is_not_an_exported_program(tmp_path: Path, out: Path) -> None:
    bad = tmp_path / "model.pt2"
    with zipfile.ZipFile(bad, "w") as zf:
        zf.writestr("model/readme.txt", "not a program")
    code, stdout, stderr = run_main("compile", str(bad), "--out", str(out), "--no-bench")
    assert_one_line_error(code, stdout, stderr, EXIT_USAGE, "could not be loaded with torch.export.load")


@pytest.mark.parametrize("suffix", [".pt", ".pth", ".ts"])
def test_text_file_renamed_pt(tmp_path: Path, out: Path, suffix: str) -> None:
    bad = tmp_path / f"notes{suffix}"
    bad.write_text("these are my notes, not a model\n" * 20)
    p = compile_subprocess(str(bad), "--input", "x:1x3", "--out", str(out))
    assert_one_line_error(p.returncode, p.stdout, p.stderr, EXIT_USAGE, "not a PyTorch model file")


@pytest.mark.parametrize("content", [os.urandom(4096), b"this is text, not protobuf\n" * 10])
def test_corrupt_onnx(tmp_path: Path, out: Path, content: bytes) -> None:
    bad = tmp_path / "corrupt.onnx"
    bad.write_bytes(content)
    p = compile_subprocess(str(bad), "--out", str(out))
    assert_one_line_error(p.returncode, p.stdout, p.stderr, EXIT_USAGE, "not a valid ONNX model")


def test_unknown_suffix(tmp_path: Path, out: Path) -> None:
    bad = tmp_path / "model.h5"
    bad.write_bytes(b"\x89HDF")
    p = compile_subprocess(str(bad), "--out", str(out))
    assert_one_line_error(p.returncode, p.stdout, p.stderr, EXIT_USAGE, "unknown model format '.h5'")


def test_state_dict_subprocess(cnn_state_dict: Path, out: Path) -> None:
    p = compile_subprocess(str(cnn_state_dict), "--out", str(out))
    error = assert_one_line_error(p.returncode, p.stdout, p.stderr, EXIT_USAGE, "state_dict")
    assert "state_dict" in error
    assert ".pt2" in p.stderr.split("hint: ", 1)[1]  # says what to pass instead


def test_pickled_module_refused_without_allow_pickle(cnn_pickle: Path, out: Path) -> None:
    code, stdout, stderr = run_main("compile", str(cnn_pickle), "--input", "x:1x3x16x16", "--out", str(out),
                                    "--no-bench")
    assert_one_line_error(code, stdout, stderr, EXIT_USAGE, "pickled module", "arbitrary code")
    assert "--allow-pickle" in stderr


def test_pickled_module_loads_with_allow_pickle(cnn_pickle: Path, models_dir: Path, tmp_path: Path) -> None:
    # The class lives in tiny_models.py in models_dir: run from there, as a user runs from their project.
    # A real subprocess, so the class is not already imported from this test session.
    out = tmp_path / "out"
    p = run_optcli("compile", cnn_pickle.name, "--allow-pickle", "--input", "x:1x3x16x16", "--out", str(out),
                   "--no-bench", "--no-simplify", "--no-fuse", "--target", "cpu", cwd=models_dir, timeout=240)
    assert p.returncode == 0, p.stderr
    report = read_report(out)
    assert report["model"]["format"] == "pickle"
    assert report["stages"][0]["status"] == "ok"


def test_pickled_module_with_allow_pickle_but_class_not_importable(cnn_pickle: Path, tmp_path: Path) -> None:
    lone = tmp_path / "lone.pt"
    shutil.copy(cnn_pickle, lone)
    p = run_optcli("compile", str(lone), "--allow-pickle", "--input", "x:1x3x16x16", "--out", str(tmp_path / "out"),
                   "--no-bench", cwd=tmp_path, timeout=240)
    assert_one_line_error(p.returncode, p.stdout, p.stderr, EXIT_USAGE, "could not be unpickled", "tiny_models")


def test_pickled_tensor_is_not_a_model(torch_mod, tmp_path: Path, out: Path) -> None:
    path = tmp_path / "tensor.pt"
    torch_mod.save(torch_mod.ones(3), str(path))
    code, stdout, stderr = run_main("compile", str(path), "--out", str(out), "--no-bench")
    assert_one_line_error(code, stdout, stderr, EXIT_USAGE, "holds a Tensor, not a model")


def test_torchscript_without_input(cnn_torchscript: Path, out: Path) -> None:
    code, stdout, stderr = run_main("compile", str(cnn_torchscript), "--out", str(out), "--no-bench")
    assert_one_line_error(code, stdout, stderr, EXIT_USAGE, "TorchScript", "does not record input shapes")
    assert "--input" in stderr


def test_factory_without_input_or_examples(factory_file: Path, out: Path) -> None:
    code, stdout, stderr = run_main("compile", f"{factory_file}:make_cnn", "--out", str(out), "--no-bench")
    assert_one_line_error(code, stdout, stderr, EXIT_USAGE, "returns no example inputs")


@pytest.mark.parametrize("factory, fragment", [
    ("no_such_function", "has no function 'no_such_function'"),
    ("not_a_model", "returned a int, not an nn.Module"),
    ("1bad", "is not a function name"),
])
def test_bad_factory(factory_file: Path, out: Path, factory: str, fragment: str) -> None:
    code, stdout, stderr = run_main("compile", f"{factory_file}:{factory}", "--out", str(out), "--no-bench")
    assert_one_line_error(code, stdout, stderr, EXIT_USAGE, fragment)


def test_factory_file_that_raises(tmp_path: Path, out: Path) -> None:
    path = tmp_path / "broken.py"
    path.write_text("import torch\nraise ValueError('oops in the user file')\ndef make():\n    pass\n")
    code, stdout, stderr = run_main("compile", f"{path}:make", "--out", str(out), "--no-bench")
    assert_one_line_error(code, stdout, stderr, EXIT_USAGE, "importing", "ValueError", "oops in the user file")


# -- --input -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("spec, fragment", [
    ("x", "malformed --input"),
    ("x:", "empty shape"),
    (":1x3x16x16", "malformed --input"),
    ("x:1x3x16x16:float32:more", "malformed --input"),
    ("x:1xx16x16", "bad dim"),
    ("x:1x3x16.5x16", "bad dim"),
    ("x:0x3x16x16", "a dim of 0"),
    ("x:1x3x16x16/8x3x16x16", "MIN/OPT/MAX"),
    ("x:8x3x16x16/1x3x16x16/4x3x16x16", "MIN <= OPT <= MAX"),
    ("9x:1x3x16x16", "bad input name"),
])
def test_malformed_input(cnn_torchscript: Path, out: Path, spec: str, fragment: str) -> None:
    p = compile_subprocess(str(cnn_torchscript), "--input", spec, "--out", str(out))
    assert_one_line_error(p.returncode, p.stdout, p.stderr, EXIT_USAGE, fragment)


def test_unknown_dtype(cnn_pt2: Path, out: Path) -> None:
    p = compile_subprocess(str(cnn_pt2), "--input", "x:1x3x16x16:float99", "--out", str(out))
    error = assert_one_line_error(p.returncode, p.stdout, p.stderr, EXIT_USAGE, "unknown dtype 'float99'")
    assert "float32" in p.stderr.split(error, 1)[1]  # the hint lists the dtypes


def test_dtype_that_contradicts_the_model(cnn_pt2: Path, out: Path) -> None:
    code, stdout, stderr = run_main("compile", str(cnn_pt2), "--input", "x:1x3x16x16:int64", "--out", str(out),
                                    "--no-bench")
    assert_one_line_error(code, stdout, stderr, EXIT_USAGE, "dtype int64 but the model's input is float32")


def test_dtype_that_contradicts_an_onnx_model(matmul_onnx: Path, out: Path) -> None:
    p = compile_subprocess(str(matmul_onnx), "--input", "X:1x4:int64", "--out", str(out))
    assert_one_line_error(p.returncode, p.stdout, p.stderr, EXIT_USAGE, "dtype int64")


def test_wrong_dtype_for_torchscript(encoder_torchscript: Path, out: Path) -> None:
    # input_ids without :int64 means float32: the model itself refuses it (embedding needs integers)
    code, stdout, stderr = run_main("compile", str(encoder_torchscript), "--input", "input_ids:1x8",
                                    "--input", "attention_mask:1x8:int64", "--out", str(out), "--no-bench")
    assert_one_line_error(code, stdout, stderr, EXIT_USAGE, "the model fails on inputs", "input_ids:2x8:float32",
                          "indices")
    report = read_report(out)  # the run had started: its report says why it stopped
    assert report["status"] == "failed" and report["error"]["exit_code"] == EXIT_USAGE
    assert all(s["status"] == "not-run" for s in report["stages"])


@pytest.mark.parametrize("spec, fragment", [
    ("y:1x3x16x16", "no input of that name"),
    ("x:1x3x16", "rank 3"),
    ("x:1x3x32x32", "dim 2 is 32 but the model fixes it at 16"),
])
def test_input_that_contradicts_the_model(cnn_pt2: Path, out: Path, spec: str, fragment: str) -> None:
    code, stdout, stderr = run_main("compile", str(cnn_pt2), "--input", spec, "--out", str(out), "--no-bench")
    assert_one_line_error(code, stdout, stderr, EXIT_USAGE, fragment)


# -- the output folder ---------------------------------------------------------------------------------

def test_out_is_a_file(matmul_onnx: Path, tmp_path: Path) -> None:
    afile = tmp_path / "build"
    afile.write_text("I am a file")
    p = compile_subprocess(str(matmul_onnx), "--out", str(afile))
    assert_one_line_error(p.returncode, p.stdout, p.stderr, EXIT_USAGE, "is a file")
    assert afile.read_text() == "I am a file"


def test_out_below_a_file(matmul_onnx: Path, tmp_path: Path) -> None:
    afile = tmp_path / "build"
    afile.write_text("I am a file")
    p = compile_subprocess(str(matmul_onnx), "--out", str(afile / "sub"))
    assert_one_line_error(p.returncode, p.stdout, p.stderr, EXIT_USAGE, "cannot write to output folder")


@pytest.mark.skipif(os.geteuid() == 0, reason="running as root: chmod 0o500 does not stop root from writing, "
                                                "so this case cannot fail here (see the /proc test below)")
def test_out_unwritable_chmod(matmul_onnx: Path, tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        p = compile_subprocess(str(matmul_onnx), "--out", str(locked / "out"))
        assert_one_line_error(p.returncode, p.stdout, p.stderr, EXIT_USAGE, "cannot write to output folder")
        p = compile_subprocess(str(matmul_onnx), "--out", str(locked))
        assert_one_line_error(p.returncode, p.stdout, p.stderr, EXIT_USAGE, "cannot write to output folder")
    finally:
        locked.chmod(0o700)


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux procfs")
@pytest.mark.parametrize("where", ["/proc/self", "/proc/self/optcli-out"])
def test_out_unwritable_even_for_root(matmul_onnx: Path, where: str) -> None:
    # procfs refuses new files and folders whoever asks: an existing folder we cannot write into, and a
    # folder we cannot create. (A read-only bind mount would need privileges the tests should not take.)
    # --force: /proc/self holds files optcli did not make, refused before any write without it (issue 30).
    p = compile_subprocess(str(matmul_onnx), "--out", where, "--force")
    assert_one_line_error(p.returncode, p.stdout, p.stderr, EXIT_USAGE, "cannot write to output folder")


# -- config files --------------------------------------------------------------------------------------

def test_config_unknown_key(matmul_onnx: Path, tmp_path: Path, out: Path) -> None:
    cfg = tmp_path / "my.toml"
    cfg.write_text("[export]\nopsett = 17\n")
    p = compile_subprocess(str(matmul_onnx), "--config", str(cfg), "--out", str(out))
    assert_one_line_error(p.returncode, p.stdout, p.stderr, EXIT_USAGE, "unknown key 'opsett' in [export]")
    assert "opset" in p.stderr.split("hint: ", 1)[1]


def test_discovered_optcli_toml_unknown_key(matmul_onnx: Path, tmp_path: Path) -> None:
    (tmp_path / "optcli.toml").write_text('[compile]\ntargt = "cpu"\n')
    p = compile_subprocess(str(matmul_onnx), "--out", "out", cwd=tmp_path)
    assert_one_line_error(p.returncode, p.stdout, p.stderr, EXIT_USAGE, "unknown key 'targt' in [compile]")


def test_discovered_pyproject_unknown_key(matmul_onnx: Path, tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\n\n[tool.optcli.fuse]\nlevl = "basic"\n')
    p = compile_subprocess(str(matmul_onnx), "--out", "out", cwd=tmp_path)
    assert_one_line_error(p.returncode, p.stdout, p.stderr, EXIT_USAGE, "unknown key 'levl' in [fuse]")


def test_config_invalid_toml_and_missing(matmul_onnx: Path, tmp_path: Path, out: Path) -> None:
    cfg = tmp_path / "bad.toml"
    cfg.write_text("[export\n")
    p = compile_subprocess(str(matmul_onnx), "--config", str(cfg), "--out", str(out))
    assert_one_line_error(p.returncode, p.stdout, p.stderr, EXIT_USAGE, "not valid TOML")
    p = compile_subprocess(str(matmul_onnx), "--config", str(tmp_path / "none.toml"), "--out", str(out))
    assert_one_line_error(p.returncode, p.stdout, p.stderr, EXIT_USAGE, "config file not found")


def test_config_bad_value(matmul_onnx: Path, tmp_path: Path, out: Path) -> None:
    cfg = tmp_path / "my.toml"
    cfg.write_text('[fuse]\nlevel = "all"\n')
    p = compile_subprocess(str(matmul_onnx), "--config", str(cfg), "--out", str(out))
    assert_one_line_error(p.returncode, p.stdout, p.stderr, EXIT_USAGE, "unknown fuse level 'all'")


# -- flags ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("args, fragment", [
    (["--opset", "5"], "opset 5 is too old"),
])
def test_bad_flag_values(matmul_onnx: Path, out: Path, args: list[str], fragment: str) -> None:
    p = compile_subprocess(str(matmul_onnx), *args, "--out", str(out))
    assert_one_line_error(p.returncode, p.stdout, p.stderr, EXIT_USAGE, fragment)


@pytest.mark.parametrize("args", [["--fuse-level", "all"], ["--bench-runs", "0"], ["--no-such-flag"], []])
def test_click_usage_errors_exit_2(args: list[str]) -> None:
    # click's own checks (a bad choice, a missing MODEL) also end with exit 2 and no traceback
    p = run_optcli("compile", *args) if args else run_optcli("compile")
    assert_one_line_error(p.returncode, p.stdout, p.stderr, EXIT_USAGE)  # optcli's lines, not click's "Error:"


def test_unknown_command() -> None:
    p = run_optcli("compiel")
    assert p.returncode == EXIT_USAGE and "Traceback" not in p.stderr


def test_debug_shows_the_traceback(tmp_path: Path) -> None:
    p = run_optcli("--debug", "compile", str(tmp_path / "missing.onnx"))
    assert p.returncode != 0
    assert "Traceback" in p.stderr and "UsageError: model not found" in p.stderr
    p = run_optcli("compile", str(tmp_path / "missing.onnx"), "--debug")  # after the subcommand too
    assert "Traceback" in p.stderr


# -- missing optional dependencies (exit 4, the extra named) ----------------------------------------------

def _run_blocked(blocked: tuple[str, ...], *argv: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    code = blocker_source(*blocked) + (
        "import sys\nfrom optcli.cli.main import main\n"
        f"main({list(argv)!r})\n")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=cli_env(), cwd=cwd,
                          timeout=240)


def test_missing_onnxruntime_names_the_extra(matmul_onnx: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    p = _run_blocked(("onnxruntime",), "compile", str(matmul_onnx), "--out", str(out), "--no-bench",
                     "--target", "cpu")
    error = assert_one_line_error(p.returncode, p.stdout, p.stderr, EXIT_MISSING_DEPENDENCY,
                                  "onnxruntime is not installed")
    assert "hint: pip install 'optcli[cpu]'" in p.stderr, error
    report = json.loads((out / "report.json").read_text())
    assert report["status"] == "failed" and report["error"]["exit_code"] == EXIT_MISSING_DEPENDENCY


def test_missing_torch_names_the_extra(cnn_pt2: Path, tmp_path: Path) -> None:
    p = _run_blocked(("torch",), "compile", str(cnn_pt2), "--out", str(tmp_path / "out"), "--no-bench",
                     "--target", "cpu")
    assert_one_line_error(p.returncode, p.stdout, p.stderr, EXIT_MISSING_DEPENDENCY, "torch is not installed")
    assert "pip install 'optcli[" in p.stderr


def test_missing_onnxsim_fails_the_simplify_stage(matmul_onnx: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    p = _run_blocked(("onnxsim",), "compile", str(matmul_onnx), "--out", str(out), "--no-bench", "--json",
                     "--target", "cpu")
    assert p.returncode == EXIT_MISSING_DEPENDENCY, p.stderr
    report = json.loads(p.stdout)  # --json still prints the (failed) report, and only that
    simplify = report["stages"][1]
    assert simplify["status"] == "failed" and "onnxsim is not installed" in simplify["reason"]
    assert report["stages"][2]["status"] == "not-run"
    assert not (out / "02-simplify").exists()
    assert report["error"]["hint"].startswith("pip install 'optcli[")


def test_factory_that_raises(tmp_path: Path, out: Path) -> None:
    path = tmp_path / "raising.py"
    path.write_text("def make():\n    raise RuntimeError('cannot build today')\n")
    code, stdout, stderr = run_main("compile", f"{path}:make", "--out", str(out), "--no-bench")
    assert_one_line_error(code, stdout, stderr, EXIT_USAGE, "raised RuntimeError", "cannot build today")


# -- a model no exporter can convert (exit 1, the op named, nothing but JSON on stdout) -----------------

UNEXPORTABLE = """
import torch


class Eig(torch.nn.Module):
    def forward(self, x):
        return torch.linalg.eigvals(x).real   # no ONNX function in either exporter


def make():
    return Eig(), (torch.randn(2, 4, 4),)
"""


def test_unexportable_op_is_named_and_stdout_stays_json(tmp_path: Path) -> None:
    (tmp_path / "eig.py").write_text(UNEXPORTABLE)
    # --backend onnxruntime: with auto the run would go on without ONNX (AOTInductor, docs/inductor.md).
    p = run_optcli("compile", f"{tmp_path / 'eig.py'}:make", "--out", str(tmp_path / "o"), "--no-bench",
                   "--target", "cpu", "--backend", "onnxruntime", "--json")
    assert p.returncode == 1, p.stderr
    # The TorchScript exporter's C++ side prints the graph to fd 1: it must not reach stdout or stderr.
    assert "Torch IR graph" not in p.stdout + p.stderr
    report = json.loads(p.stdout)
    error = report["error"]
    assert error["stage"] == "export" and "linalg_eig" in error["message"]
    assert "\x1b[" not in error["message"]                   # no terminal colour codes from the exporter
    assert "--exporter torchscript" not in error["hint"]     # both exporters were already tried
    assert "linalg_eig" in error["traceback"]                # what --debug prints
