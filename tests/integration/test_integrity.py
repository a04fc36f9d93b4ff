"""Trust boundaries, found by trying to break optcli as a hostile user would (issue 11): nothing read from
disk (a report, a stage record, a cache, a config file) decides what code runs or what path is followed,
one run at a time per output folder, and each bad input ends as one `error:` line with a `hint:`."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest

import optcli
from compile_testkit import cli_env, read_report, run_main, run_optcli
from optcli.errors import UsageError
from optcli.run_lock import output_lock

EXIT_USAGE = 2


def one_line_error(p: subprocess.CompletedProcess | tuple[int, str, str], code: int, *fragments: str) -> str:
    rc, stdout, stderr = (p.returncode, p.stdout, p.stderr) if isinstance(p, subprocess.CompletedProcess) else p
    assert rc == code, f"exit {rc}, expected {code}\n{stdout}\n{stderr}"
    assert "Traceback" not in stderr + stdout, stderr
    lines = stderr.splitlines()
    errors = [i for i, ln in enumerate(lines) if ln.startswith("error: ")]
    assert len(errors) == 1, stderr
    assert lines[errors[0] + 1].startswith("hint: "), stderr
    for fragment in fragments:
        assert fragment in lines[errors[0]], (fragment, lines[errors[0]])
    return lines[errors[0]]


def set_final(run: Path, **fields: object) -> None:
    report = read_report(run)
    report["final"].update(fields)
    (run / "report.json").write_text(json.dumps(report))


# -- 1. paths in a report or a stage record stay inside their folder; sha256 checked ------------------

OUTSIDE = ["../outside.onnx", "OUTSIDE_ABS", "../../../../../../../../etc/passwd", "sub/../../outside.onnx"]


@pytest.mark.parametrize("where", OUTSIDE)
def test_report_artifact_outside_its_folder_is_refused(run_copy: Path, matmul_onnx: Path, tmp_path: Path,
                                                       where: str) -> None:
    outside = tmp_path / "outside.onnx"
    shutil.copy(matmul_onnx, outside)
    set_final(run_copy, artifact=str(outside) if where == "OUTSIDE_ABS" else where)
    with pytest.raises(UsageError, match="outside"):
        optcli.load(run_copy)
    for cmd in (["bench", str(run_copy), "--runs", "3"], ["profile", str(run_copy), "--runs", "2"],
                ["export-triton", str(run_copy), "--repo", str(tmp_path / "repo")]):
        one_line_error(run_main(*cmd), EXIT_USAGE, "outside")
    assert not (tmp_path / "repo").exists() or not any((tmp_path / "repo").rglob("*.onnx"))


def test_report_artifact_through_a_link_is_refused(run_copy: Path, matmul_onnx: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside.onnx"
    shutil.copy(matmul_onnx, outside)
    final = run_copy / read_report(run_copy)["final"]["artifact"]
    final.unlink()
    final.symlink_to(outside)
    with pytest.raises(UsageError, match="outside"):
        optcli.load(run_copy)


def test_swapped_final_artifact_fails_its_sha256(run_copy: Path, conv_onnx: Path, tmp_path: Path) -> None:
    final = run_copy / read_report(run_copy)["final"]["artifact"]
    shutil.copy(conv_onnx, final)  # a valid model, but not the one the run made
    with pytest.raises(UsageError, match="sha256"):
        optcli.load(run_copy)
    one_line_error(run_main("export-triton", str(run_copy), "--repo", str(tmp_path / "repo")), EXIT_USAGE, "sha256")
    set_final(run_copy, sha256=None)  # and a report that drops the checksum is refused too
    with pytest.raises(UsageError, match="no sha256"):
        optcli.load(run_copy / "report.json")


def test_stage_record_pointing_outside_is_refused_not_cached(run_copy: Path, matmul_onnx: Path,
                                                              tmp_path: Path) -> None:
    outside = tmp_path / "outside.onnx"
    shutil.copy(matmul_onnx, outside)
    record_path = next(run_copy.glob("*-simplify/stage.json"))
    record = json.loads(record_path.read_text())
    record["artifact"] = "../../outside.onnx"
    from optcli.artifact import sha256_file

    record["sha256"] = sha256_file(outside)  # a consistent forgery: only containment stops it
    record_path.write_text(json.dumps(record))
    code, out, err = run_main("compile", str(matmul_onnx), "--out", str(run_copy), "--no-bench",
                              "--backend", "onnxruntime", "--target", "cpu")
    one_line_error((code, out, err), EXIT_USAGE, "stage.json", "outside")
    report = read_report(run_copy)
    assert report["status"] == "failed" and report["final"] is None
    # --force never reads the record: the run rebuilds and succeeds
    code, _, err = run_main("compile", str(matmul_onnx), "--out", str(run_copy), "--no-bench",
                            "--backend", "onnxruntime", "--target", "cpu", "--force")
    assert code == 0, err


@pytest.mark.parametrize("garbage", ["{", "[]", '{"key": 1}', '{"artifact": 5}', "\x00\x01"])
def test_malformed_stage_record_is_rebuilt(run_copy: Path, matmul_onnx: Path, garbage: str) -> None:
    record_path = next(run_copy.glob("*-simplify/stage.json"))
    record_path.write_text(garbage)
    code, _, err = run_main("compile", str(matmul_onnx), "--out", str(run_copy), "--no-bench",
                            "--backend", "onnxruntime", "--target", "cpu")
    assert code == 0, err
    simplify = next(s for s in read_report(run_copy)["stages"] if s["name"] == "simplify")
    assert simplify["status"] == "ok"  # rebuilt, not "cached"


# -- 2. a config file cannot make optcli run code ---------------------------------------------------

EVIL_READER = textwrap.dedent('''
    from pathlib import Path
    Path(__file__).with_name("pwned").write_text("the config file ran this")

    class R:
        def __init__(self, folder, specs, **options):
            raise RuntimeError("evil reader")
''')


def _int8_dir(tmp_path: Path) -> Path:
    calib = tmp_path / "calib"
    calib.mkdir()
    rng = np.random.default_rng(0)
    for i in range(4):
        np.savez(calib / f"{i}.npz", X=rng.standard_normal((16, 4)).astype(np.float32))
    return calib


@pytest.mark.parametrize("config_name", ["optcli.toml", "pyproject.toml"])
def test_config_file_cannot_turn_on_a_reader_plugin(matmul_onnx: Path, tmp_path: Path, config_name: str) -> None:
    (tmp_path / "evil.py").write_text(EVIL_READER)
    table = "[tool.optcli.quantize]" if config_name == "pyproject.toml" else "[quantize]"
    (tmp_path / config_name).write_text(f'{table}\ncalib-reader = "evil.py:R"\n')
    calib = _int8_dir(tmp_path)
    p = run_optcli("compile", str(matmul_onnx), "--int8", "--calib", str(calib), "--out", str(tmp_path / "o"),
                   "--no-bench", cwd=tmp_path)
    one_line_error(p, EXIT_USAGE, config_name, "calib-reader", "runs code")
    assert "--trust-config" in p.stderr
    assert not (tmp_path / "pwned").exists()
    # the user's own choice, on the command line or through --trust-config, does run it
    p = run_optcli("compile", str(matmul_onnx), "--int8", "--calib", str(calib), "--out", str(tmp_path / "o"),
                   "--no-bench", "--trust-config", cwd=tmp_path)
    assert (tmp_path / "pwned").exists(), p.stderr
    assert f"config: {config_name}" in p.stderr


def test_config_file_cannot_allow_pickle(cnn_pickle: Path, tmp_path: Path) -> None:
    (tmp_path / "optcli.toml").write_text("[export]\nallow-pickle = true\n")
    p = run_optcli("compile", str(cnn_pickle), "--input", "x:1x3x16x16", "--out", str(tmp_path / "o"), "--no-bench",
                   cwd=tmp_path)
    one_line_error(p, EXIT_USAGE, "allow-pickle", "runs code")


def test_report_names_the_config_file_read(matmul_onnx: Path, tmp_path: Path) -> None:
    (tmp_path / "optcli.toml").write_text("[bench]\nruns = 3\n")
    p = run_optcli("compile", str(matmul_onnx), "--out", str(tmp_path / "o"), "--no-bench", "--backend",
                   "onnxruntime", "--json", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert "config: optcli.toml" in p.stderr
    report = json.loads(p.stdout)
    from optcli.artifact import sha256_file

    assert report["config_file"] == {"path": str((tmp_path / "optcli.toml").resolve()),
                                     "sha256": sha256_file(tmp_path / "optcli.toml")}


# -- 4. one run per output folder ---------------------------------------------------------------------

def test_second_run_into_a_locked_folder_exits_2_naming_the_holder(matmul_onnx: Path, tmp_path: Path) -> None:
    out = tmp_path / "o"
    out.mkdir()
    with output_lock(out):
        p = run_optcli("compile", str(matmul_onnx), "--out", str(out), "--no-bench")
        one_line_error(p, EXIT_USAGE, "in use by another optcli run", f"pid {os.getpid()}")
        assert not (out / "report.json").exists()  # it touched nothing
    code, _, err = run_main("compile", str(matmul_onnx), "--out", str(out), "--no-bench", "--backend", "onnxruntime")
    assert code == 0, err  # the lock goes with its holder


def test_concurrent_compiles_never_mix(matmul_onnx: Path, tmp_path: Path) -> None:
    """Two compiles with different options into one folder at once: one runs, the other is refused (or
    waits its turn and runs after); the final report always describes its own artifact."""
    out = tmp_path / "o"
    args = [sys.executable, "-m", "optcli", "compile", str(matmul_onnx), "--out", str(out), "--no-bench",
            "--backend", "onnxruntime", "--json"]
    procs = [subprocess.Popen(args + extra, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cli_env())
             for extra in (["--no-fuse"], ["--no-simplify"])]
    results = [(p.wait(timeout=240), p.stdout.read(), p.stderr.read()) for p in procs]
    codes = sorted(r[0] for r in results)
    assert codes in ([0, 0], [0, EXIT_USAGE]), results
    report = read_report(out)
    winner = json.loads(next(r[1] for r in results if r[0] == 0 and json.loads(r[1])["seconds"] ==
                             report["seconds"]))
    assert winner["final"]["sha256"] == report["final"]["sha256"]
    optcli.load(out).close()  # its sha256 matches the artifact on disk


# -- 5-9. bad inputs get exit 2 and a hint --------------------------------------------------------------

def test_onnx_model_without_inputs(tmp_path: Path) -> None:
    import onnx
    from onnx import TensorProto, helper

    const = helper.make_tensor("c", TensorProto.FLOAT, [2], [1.0, 2.0])
    graph = helper.make_graph([helper.make_node("Constant", [], ["Y"], value=const)], "g", [],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, str(tmp_path / "const.onnx"))
    p = run_optcli("compile", str(tmp_path / "const.onnx"), "--out", str(tmp_path / "o"), "--no-bench")
    one_line_error(p, EXIT_USAGE, "takes no inputs")


def test_huge_dynamic_dim_names_the_size(tmp_path: Path) -> None:
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", "L"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", "L"])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(tmp_path / "m.onnx"))
    p = run_optcli("compile", str(tmp_path / "m.onnx"), "--input", "x:1x10000000000", "--out", str(tmp_path / "o"),
                   "--no-bench")
    one_line_error(p, EXIT_USAGE, "'x'", "GB", "memory")


def test_zip_named_pt2_keeps_torch_logs_off_the_terminal(tmp_path: Path) -> None:
    bad = tmp_path / "m.pt2"
    with zipfile.ZipFile(bad, "w") as zf:
        zf.writestr("a.txt", "not a program")
    p = run_optcli("compile", str(bad), "--out", str(tmp_path / "o"), "--no-bench")
    one_line_error(p, EXIT_USAGE, "could not be loaded", "not in a subdirectory")
    assert len(p.stderr.strip().splitlines()) == 2, p.stderr  # the error and the hint, nothing from torch
    p = run_optcli("--debug", "compile", str(bad), "--out", str(tmp_path / "o"), "--no-bench")
    assert "deserializing" in p.stderr  # --debug shows the library's own log


def test_model_named_dots_gets_a_safe_default_folder(matmul_onnx: Path, tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    shutil.copy(matmul_onnx, work / "...onnx")
    code = subprocess.run([sys.executable, "-m", "optcli", "compile", "...onnx", "--no-bench", "--backend",
                           "onnxruntime"], cwd=work, env=cli_env(), capture_output=True, text=True, timeout=240)
    assert code.returncode == 0, code.stderr
    assert (work / "optcli-out" / "model" / "report.json").is_file()
    assert not (work / "report.json").exists() and not (work / "optcli-out" / "report.json").exists()


@pytest.mark.parametrize("tolerance, fragment", [
    ("max-abs=-3", "0 (exact) or more"), ("cosine=2", "between 0 and 1"),
    ("top1=1.5", "between 0 and 1"), ("cosine=nan", "finite"), ("max-abs=inf", "finite"),
    ("cosine=-0.5", "between 0 and 1"), ("cosine=abc", "not a number"), ("speed=3", "malformed"),
])
def test_tolerance_out_of_range_fails_before_running(matmul_onnx: Path, tmp_path: Path, tolerance: str,
                                                     fragment: str) -> None:
    p = run_optcli("compile", str(matmul_onnx), "--tolerance", tolerance, "--out", str(tmp_path / "o"))
    one_line_error(p, EXIT_USAGE, fragment)
    assert not (tmp_path / "o").exists()


def test_tolerance_from_a_config_file_is_checked_too(matmul_onnx: Path, tmp_path: Path) -> None:
    (tmp_path / "optcli.toml").write_text("[accuracy]\ncosine = 2.0\n")
    p = run_optcli("compile", str(matmul_onnx), "--out", str(tmp_path / "o"), cwd=tmp_path)
    one_line_error(p, EXIT_USAGE, "[accuracy] cosine", "between 0 and 1")


@pytest.mark.parametrize("args, fragment", [
    (["--threads", "0"], "--threads"), (["--bench-runs", "0"], "--bench-runs"),
    (["--fuse-level", "all"], "--fuse-level"), (["--no-such-flag"], "--no-such-flag"),
])
def test_click_errors_use_optcli_lines(matmul_onnx: Path, args: list[str], fragment: str) -> None:
    p = run_optcli("compile", str(matmul_onnx), *args)
    line = one_line_error(p, EXIT_USAGE, fragment)
    assert not p.stderr.startswith("Error") and "Usage:" not in p.stderr, line


# -- 10. SIGTERM ends a run like Ctrl-C ------------------------------------------------------------------

SLOW_MODEL = textwrap.dedent('''
    import time
    import torch

    class Slow(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(4, 3)

        def forward(self, x):
            time.sleep(0.3)
            return self.fc(x)

    def make():
        return Slow().eval(), (torch.randn(2, 4),)
''')


def test_sigterm_marks_the_report_and_leaves_no_partial_folder(tmp_path: Path) -> None:
    (tmp_path / "slow.py").write_text(SLOW_MODEL)
    out = tmp_path / "o"
    proc = subprocess.Popen([sys.executable, "-m", "optcli", "compile", f"{tmp_path / 'slow.py'}:make", "--out",
                             str(out), "--no-bench"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=cli_env())
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not list(out.glob(".*.partial")):  # inside a stage
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 143, stderr
    assert "Traceback" not in stderr and "terminated" in stderr
    report = read_report(out)
    assert report["status"] == "interrupted" and report["error"]["exit_code"] == 143
    assert any(s["status"] == "interrupted" and "SIGTERM" in s["reason"] for s in report["stages"]), report["stages"]
    assert not [p for p in out.rglob("*") if p.name.endswith((".partial", ".old"))]


# -- 12. one CPU candidate's library failure is that candidate's failure ----------------------------

def test_candidate_that_openvino_cannot_convert_does_not_fail_the_stage(tmp_path: Path) -> None:
    """`Det` runs on ONNX Runtime, while OpenVINO's frontend raises its own OpConversionFailure (from the
    NNCF candidate's conversion too): those candidates fail, ONNX Runtime's INT8 is chosen."""
    pytest.importorskip("openvino")
    pytest.importorskip("nncf")
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((3, 8)).astype(np.float32), "W")
    nodes = [helper.make_node("MatMul", ["X", "W"], ["Y"]), helper.make_node("Det", ["X"], ["D"])]
    graph = helper.make_graph(nodes, "det", [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", 3, 3])],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["N", 3, 8]),
                               helper.make_tensor_value_info("D", TensorProto.FLOAT, ["N"])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(tmp_path / "det.onnx"))
    calib = tmp_path / "calib"
    calib.mkdir()
    rng = np.random.default_rng(1)
    for i in range(4):
        np.savez(calib / f"{i}.npz", X=rng.standard_normal((16, 3, 3)).astype(np.float32))
    code, _, err = run_main("compile", str(tmp_path / "det.onnx"), "--out", str(tmp_path / "o"), "--no-bench",
                            "--target", "cpu", "--int8", "--calib", str(calib))
    assert code == 0, err
    build = next(s for s in read_report(tmp_path / "o")["stages"] if s["name"] == "build")
    failed = {c["name"]: c.get("reason") for c in build["details"]["candidates"] if c["status"] == "failed"}
    assert "OpConversionFailure" in (failed.get("openvino-int8-nncf") or ""), build["details"]["candidates"]
    assert build["details"]["chosen"].startswith("onnxruntime")


# -- 11. every ONNX artifact optcli writes passes the ONNX checker -----------------------------------

@pytest.mark.parametrize("precision", ["fp32", "fp16", "int8"])
def test_every_onnx_artifact_passes_the_checker(cnn_pt2: Path, tmp_path: Path, precision: str) -> None:
    import onnx

    args = ["compile", str(cnn_pt2), "--out", str(tmp_path / "o"), "--no-bench", "--target", "cpu"]
    if precision == "fp16":
        args += ["--fp16", "--backend", "onnxruntime"]
    if precision == "int8":
        calib = tmp_path / "calib"
        calib.mkdir()
        rng = np.random.default_rng(0)
        for i in range(4):
            np.savez(calib / f"{i}.npz", x=rng.standard_normal((8, 3, 16, 16)).astype(np.float32))
        args += ["--int8", "--calib", str(calib)]
    code, _, err = run_main(*args)
    assert code == 0, err
    written = sorted((tmp_path / "o").rglob("*.onnx"))
    assert len(written) >= 3, written
    for path in written:
        onnx.checker.check_model(str(path), full_check=True)  # was: fp16 "not topologically sorted"
