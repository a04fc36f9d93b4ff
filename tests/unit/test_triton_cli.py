"""`optcli export-triton` and `optcli compile --triton-repo` through the real entry point: exit codes,
one-line errors without tracebacks, and a start-up that imports nothing heavy."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from optcli.cli.main import main
from triton_fixtures import conv_onnx, engine_meta, fake_engine, parse_config, run_like_triton


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exit_info:
        main(list(argv))
    out, err = capsys.readouterr()
    return int(exit_info.value.code or 0), out, err


def assert_usage_error(code: int, err: str, *fragments: str) -> None:
    assert code == 2, err
    assert err.startswith("error: ") and "Traceback" not in err
    assert err.count("\n") <= 2                                  # `error:` and `hint:` lines only
    for fragment in fragments:
        assert fragment in err


def test_export_triton_issue_example(tmp_path, capsys):
    onnx_path = conv_onnx(tmp_path / "resnet.onnx")
    repo = tmp_path / "models"
    code, out, _ = run_cli(capsys, "export-triton", str(onnx_path), "--repo", str(repo), "--name", "resnet",
                           "--max-batch-size", "32", "--dynamic-batching", "preferred=8,16,32",
                           "--max-queue-delay-us", "2000", "--instances", "2", "--intra-op-threads", "1")
    assert code == 0 and "wrote Triton model 'resnet' version 1" in out
    cfg = parse_config((repo / "resnet" / "config.pbtxt").read_text())
    assert list(cfg.dynamic_batching.preferred_batch_size) == [8, 16, 32]
    assert cfg.dynamic_batching.max_queue_delay_microseconds == 2000 and cfg.instance_group[0].count == 2


def test_json_output(tmp_path, capsys):
    engine = fake_engine(tmp_path / "run")
    code, out, _ = run_cli(capsys, "export-triton", str(engine), "--repo", str(tmp_path / "models"),
                           "--name", "eng", "--json")
    data = json.loads(out)
    assert code == 0 and data["platform"] == "tensorrt_plan" and data["max_batch_size"] == 32
    assert data["kind"] == "gpu" and Path(data["model"]).name == "model.plan"


def test_errors_are_one_line_with_exit_code_2(tmp_path, capsys):
    onnx_path = conv_onnx(tmp_path / "m.onnx")
    static = conv_onnx(tmp_path / "static.onnx", batch=1)
    engine = fake_engine(tmp_path / "run", engine_meta(max_batch=16))
    repo = str(tmp_path / "models")
    assert run_cli(capsys, "export-triton", str(onnx_path), "--repo", repo)[0] == 0

    assert_usage_error(*run_cli(capsys, "export-triton", str(engine), "--repo", repo, "--max-batch-size", "64")[::2],
                       "exceeds the engine's profile max batch 16", "hint:")
    assert_usage_error(*run_cli(capsys, "export-triton", str(static), "--repo", repo, "--max-batch-size", "8")[::2],
                       "cannot batch")
    assert_usage_error(*run_cli(capsys, "export-triton", str(onnx_path), "--repo", repo, "--version", "1")[::2],
                       "already exists", "--force")
    assert_usage_error(*run_cli(capsys, "export-triton", str(onnx_path), "--repo", repo, "--name", "../x")[::2],
                       "path separator")
    assert_usage_error(*run_cli(capsys, "export-triton", str(onnx_path), "--repo", repo,
                                "--dynamic-batching", "sometimes")[::2], "bad --dynamic-batching")
    assert_usage_error(*run_cli(capsys, "export-triton", str(tmp_path / "nope.onnx"), "--repo", repo)[::2],
                       "does not exist")
    # click's own usage errors (a missing required option) also exit 2.
    code, _, err = run_cli(capsys, "export-triton", str(onnx_path))
    assert code == 2 and "--repo" in err
    # --force then replaces the version.
    code, out, _ = run_cli(capsys, "export-triton", str(onnx_path), "--repo", repo, "--version", "1", "--force")
    assert code == 0 and out.startswith("replaced")


def test_importing_the_command_stays_light():
    # `optcli --help` must stay fast: the deploy code may not pull onnx, onnxruntime or torch at import.
    code = ("import sys, optcli.cli.main, optcli.cli.export_triton_cmd, optcli.deploy; "
            "heavy = [m for m in ('onnx', 'onnxruntime', 'torch', 'tritonclient') if m in sys.modules]; "
            "print(heavy); sys.exit(1 if heavy else 0)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.slow
def test_compile_then_triton_repo(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    conv_onnx(tmp_path / "resnet_tiny.onnx")
    code, out, err = run_cli(capsys, "compile", "resnet_tiny.onnx", "--out", "run", "--no-bench",
                             "--triton-repo", "models", "--triton-name", "resnet")
    assert code == 0, err
    assert "wrote Triton model 'resnet' version 1" in out
    cfg = parse_config((tmp_path / "models/resnet/config.pbtxt").read_text())
    assert cfg.platform == "onnxruntime_onnx" and cfg.max_batch_size == 8
    served = (tmp_path / "models/resnet/1/model.onnx").read_bytes()
    final = json.loads((tmp_path / "run/report.json").read_text())["final"]["artifact"]
    assert served == (tmp_path / "run" / final).read_bytes()      # the run's final artifact, byte for byte
    assert run_like_triton(tmp_path / "models/resnet") == {"logits": (8, 4)}


def test_compile_refuses_a_bad_triton_name_before_running(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    conv_onnx(tmp_path / "m.onnx")
    code, _, err = run_cli(capsys, "compile", "m.onnx", "--out", "run", "--triton-repo", "models",
                           "--triton-name", "../escape")
    assert_usage_error(code, err, "path separator")
    assert not (tmp_path / "run").exists()
    code, _, err = run_cli(capsys, "compile", "m.onnx", "--triton-name", "x")
    assert code == 2 and "--triton-name needs --triton-repo" in err
