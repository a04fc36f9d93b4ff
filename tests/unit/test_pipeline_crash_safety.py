"""Ctrl-C, a failing stage, and a crashing stage: no half-written stage folder survives, and report.json says
what did not finish. Runs the real pipeline on a tiny ONNX graph (no torch needed); only the stage's
`run` is replaced, to fail at a chosen moment after it has started writing."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from compile_testkit import core_stages, run_main
from optcli.api import compile as api_compile
from optcli.config import CompileConfig
from optcli.errors import StageError
from optcli.pipeline import Pipeline
from optcli.stages.fuse import FuseStage
from optcli.stages.simplify import SimplifyStage


def config(model: Path, out: Path) -> CompileConfig:
    cfg = CompileConfig(model=str(model), out=out, target="cpu")
    cfg.bench.enabled = False
    return cfg


def half_write_then(exc: BaseException):
    """A stage run that writes part of its artifact into its workdir, then fails."""
    def run(self, artifact, workdir: Path):
        (workdir / "model.onnx").write_bytes(b"half an artifact")
        (workdir / "scratch").mkdir()
        raise exc
    return run


def leftovers(out: Path) -> list[str]:
    return sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.name.endswith((".partial", ".old")))


def test_sigterm_during_the_first_report_write(monkeypatch: pytest.MonkeyPatch, matmul_onnx: Path,
                                                tmp_path: Path) -> None:
    # The first report.write (report.md still being written) came before the run's try: a SIGTERM there
    # left report.json at `running` (seen in CI: the SIGTERM test polls for any .partial, the report's own).
    from optcli.errors import Terminated
    from optcli.report import RunReport

    out = tmp_path / "out"
    real, calls = RunReport.write, []

    def write_then_terminated(self, out_dir: Path) -> None:
        real(self, out_dir)
        calls.append(self.status)
        if len(calls) == 1:
            raise Terminated()

    monkeypatch.setattr(RunReport, "write", write_then_terminated)
    with pytest.raises(Terminated):
        Pipeline(config(matmul_onnx, out)).run()
    report = json.loads((out / "report.json").read_text())
    assert report["status"] == "interrupted" and report["error"]["exit_code"] == 143
    assert all(s["status"] in ("skipped", "not-run") for s in report["stages"]), report["stages"]
    assert leftovers(out) == []


def test_ctrl_c_inside_a_stage(monkeypatch: pytest.MonkeyPatch, matmul_onnx: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    monkeypatch.setattr(SimplifyStage, "run", half_write_then(KeyboardInterrupt()))
    with pytest.raises(KeyboardInterrupt):
        Pipeline(config(matmul_onnx, out)).run()
    assert not (out / "02-simplify").exists()
    assert not (out / "03-fuse").exists()
    assert leftovers(out) == []
    report = json.loads((out / "report.json").read_text())
    assert report["status"] == "interrupted"
    assert report["error"]["exit_code"] == 130
    assert [(s["name"], s["status"]) for s in core_stages(report)] == [
        ("export", "skipped"), ("simplify", "interrupted"), ("fuse", "not-run")]
    for s in report["stages"][2:]:  # fuse, and any stage a later issue added after it
        assert (s["status"], s["reason"]) == ("not-run", "the run was interrupted")
    assert report["final"] is None
    assert "interrupted" in (out / "report.md").read_text()


def test_ctrl_c_keeps_the_previous_good_artifact(monkeypatch: pytest.MonkeyPatch, matmul_onnx: Path,
                                                 tmp_path: Path) -> None:
    out = tmp_path / "out"
    Pipeline(config(matmul_onnx, out)).run()
    good = (out / "03-fuse" / "model.onnx").read_bytes()
    monkeypatch.setattr(FuseStage, "run", half_write_then(KeyboardInterrupt()))
    cfg = config(matmul_onnx, out)
    cfg.force = True
    with pytest.raises(KeyboardInterrupt):
        Pipeline(cfg).run()
    assert (out / "03-fuse" / "model.onnx").read_bytes() == good  # the old one, never the half one
    assert leftovers(out) == []
    report = json.loads((out / "report.json").read_text())
    assert report["status"] == "interrupted"
    assert [s["status"] for s in core_stages(report)] == ["skipped", "ok", "interrupted"]
    assert all(s["status"] == "not-run" for s in report["stages"][3:])


def test_ctrl_c_exit_code_130(monkeypatch: pytest.MonkeyPatch, matmul_onnx: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    monkeypatch.setattr(SimplifyStage, "run", half_write_then(KeyboardInterrupt()))
    code, stdout, stderr = run_main("compile", str(matmul_onnx), "--out", str(out), "--no-bench", "--target", "cpu")
    assert code == 130
    assert "interrupted" in stderr and "Traceback" not in stderr
    assert json.loads((out / "report.json").read_text())["status"] == "interrupted"


def test_failing_stage_exit_1(monkeypatch: pytest.MonkeyPatch, matmul_onnx: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    monkeypatch.setattr(SimplifyStage, "run",
                        half_write_then(StageError("onnxsim blew up", hint="skip this stage with --no-simplify")))
    code, stdout, stderr = run_main("compile", str(matmul_onnx), "--out", str(out), "--no-bench", "--target", "cpu")
    assert code == 1
    assert "error: onnxsim blew up" in stderr and "hint: skip this stage with --no-simplify" in stderr
    assert "Traceback" not in stderr
    assert not (out / "02-simplify").exists() and leftovers(out) == []
    report = json.loads((out / "report.json").read_text())
    assert report["status"] == "failed"
    assert report["error"] == {"type": "StageError", "message": "onnxsim blew up",
                               "hint": "skip this stage with --no-simplify", "exit_code": 1, "stage": "simplify"}
    simplify, fuse = report["stages"][1:3]
    assert (simplify["status"], simplify["reason"]) == ("failed", "onnxsim blew up")
    assert (fuse["status"], fuse["reason"]) == ("not-run", "an earlier stage failed")


def test_failing_stage_through_the_api(monkeypatch: pytest.MonkeyPatch, matmul_onnx: Path, tmp_path: Path) -> None:
    monkeypatch.setattr(FuseStage, "run", half_write_then(StageError("no fusion today")))
    with pytest.raises(StageError) as info:
        api_compile(config(matmul_onnx, tmp_path / "out"))
    assert info.value.report.status == "failed"  # the report rides on the exception
    report = api_compile(config(matmul_onnx, tmp_path / "out"), check=False)
    assert report.exit_code == 1 and report.stage("fuse").status == "failed"


def test_crashing_stage_is_reported_and_leaves_nothing(monkeypatch: pytest.MonkeyPatch, matmul_onnx: Path,
                                                       tmp_path: Path) -> None:
    # A bug (not an OptcliError) inside a stage: one line on the terminal, and the report still says
    # which stage did not finish.
    out = tmp_path / "out"
    monkeypatch.setattr(SimplifyStage, "run", half_write_then(ValueError("a bug")))
    code, stdout, stderr = run_main("compile", str(matmul_onnx), "--out", str(out), "--no-bench", "--target", "cpu")
    assert code == 1
    assert "error: internal error: ValueError: a bug" in stderr and "--debug" in stderr
    assert "Traceback" not in stderr
    assert not (out / "02-simplify").exists() and leftovers(out) == []
    report = json.loads((out / "report.json").read_text())
    assert report["status"] == "failed"
    assert [s["status"] for s in core_stages(report)] == ["skipped", "failed", "not-run"]
    assert all(s["status"] == "not-run" for s in report["stages"][2:])
    assert "ValueError: a bug" in report["stages"][1]["reason"]


def test_stale_partials_of_a_killed_run_are_removed(matmul_onnx: Path, tmp_path: Path) -> None:
    # kill -9 cannot run cleanup: the next run removes what it left.
    out = tmp_path / "out"
    out.mkdir()
    (out / ".optcli.lock").touch()  # the killed run's lock file: this is its folder
    (out / ".02-simplify.abc123.partial").mkdir()
    (out / ".02-simplify.abc123.partial" / "model.onnx").write_bytes(b"half")
    (out / ".report.json.xyz.partial").write_text("{")
    Pipeline(config(matmul_onnx, out)).run()
    assert leftovers(out) == []
    assert (out / "02-simplify" / "model.onnx").stat().st_size > 100


def _stage_error_with_cause() -> StageError:
    try:
        raise RuntimeError("onnxsim: [ShapeInferenceError] inside the C++ library")
    except RuntimeError as cause:
        err = StageError("onnxsim failed: [ShapeInferenceError]", hint="skip this stage with --no-simplify")
        err.__cause__ = cause
        return err


@pytest.mark.parametrize("debug", [False, True])
def test_debug_prints_the_traceback_behind_a_stage_failure(monkeypatch: pytest.MonkeyPatch, matmul_onnx: Path,
                                                            tmp_path: Path, debug: bool) -> None:
    # A stage's failure is recorded in the report, not raised: the library's traceback behind its
    # one-line message is kept in report.json and printed only with --debug.
    out = tmp_path / "out"
    monkeypatch.setattr(SimplifyStage, "run", half_write_then(_stage_error_with_cause()))
    argv = ["compile", str(matmul_onnx), "--out", str(out), "--no-bench", "--target", "cpu"] + (["--debug"] * debug)
    code, stdout, stderr = run_main(*argv)
    assert code == 1 and "error: onnxsim failed" in stderr
    assert ("Traceback" in stderr and "RuntimeError: onnxsim: [ShapeInferenceError]" in stderr) is debug
    error = json.loads((out / "report.json").read_text())["error"]
    assert "RuntimeError: onnxsim: [ShapeInferenceError] inside the C++ library" in error["traceback"]
    import os
    assert "OPTCLI_DEBUG" not in os.environ  # --debug does not outlive the call
