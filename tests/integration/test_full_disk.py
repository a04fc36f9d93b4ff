"""A disk that fills up during a compile, for real (issue 30, item 16): torch's archive writer threw from a
C++ destructor when a .pt2 write failed, and the process died with SIGABRT (exit 134, a C++ backtrace, the
report left at `running`). Whatever write runs out of room, the run ends as a failed stage: exit 1, one
`error:` line with its hint, the report `failed`, no `.partial` folder left.

Two ways to run out of room, both real: a file size limit (RLIMIT_FSIZE, with SIGXFSZ ignored, so a write
past it fails with EFBIG; works unprivileged), and a small tmpfs as the output folder (ENOSPC; needs root
and a private mount namespace, `unshare -m`, else skipped with the reason)."""
from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from compile_testkit import cli_env

pytestmark = pytest.mark.slow

# aten::cummax has no ONNX export: with --backend auto the export stage falls back to saving the
# torch.export program (program.pt2, ~1 MB of weights), the write that aborted the process.
NO_ONNX = '''
import torch
from torch import nn


class WideRunningMax(nn.Module):
    def __init__(self, cummax=True):
        super().__init__()
        self.cummax = cummax
        self.fc = nn.Linear(64, 4096)

    def forward(self, x):
        return self.fc(torch.cummax(x, dim=1).values if self.cummax else x)


def make():
    torch.manual_seed(0)
    return WideRunningMax().eval(), (torch.randn(2, 64),)


def make_exportable():
    torch.manual_seed(0)
    return WideRunningMax(cummax=False).eval(), (torch.randn(2, 64),)
'''
CRASH_MARKS = ("Traceback", "terminate called", "frame #", "c10::Error", "internal error")


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("full-disk") / "wide.py"
    path.write_text(NO_ONNX)
    return path


def _limited(limit: int):  # noqa: ANN202 (a preexec_fn)
    def apply() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG from the write, not a signal that kills
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return apply


def _compile_with_file_limit(model: str, out: Path, limit: int) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "optcli", "compile", model, "--out", str(out), "--no-bench"],
                          capture_output=True, text=True, timeout=600, env=cli_env(), preexec_fn=_limited(limit))


def _one_error_line(p: subprocess.CompletedProcess, code: int) -> str:
    text = p.stdout + p.stderr
    assert p.returncode == code, f"exit {p.returncode}, expected {code}\n{text[-3000:]}"
    for mark in CRASH_MARKS:
        assert mark not in text, text[-3000:]
    lines = p.stderr.splitlines()
    errors = [i for i, ln in enumerate(lines) if ln.startswith("error: ")]
    assert len(errors) == 1 and lines[errors[0] + 1].startswith("hint: "), p.stderr
    return lines[errors[0]]


def _no_partials(out: Path) -> None:
    left = [p.name for p in out.rglob("*") if ".partial" in p.name or p.name.endswith(".old")]
    assert left == [], left


@pytest.mark.parametrize("factory", ["make", "make_exportable"])
def test_a_write_past_the_file_size_limit_fails_the_stage(models: Path, tmp_path: Path, factory: str) -> None:
    """The .pt2 the export stage falls back to (the crash) and, as the class, the ONNX it writes: each is
    ~1 MB, over a 256 KiB limit that report.json fits under."""
    out = tmp_path / "out"
    p = _compile_with_file_limit(f"{models}:{factory}", out, 256 * 1024)
    line = _one_error_line(p, 1)
    assert "file too large" in line, line
    report = json.loads((out / "report.json").read_text())
    assert report["status"] == "failed" and report["error"]["exit_code"] == 1
    export = report["stages"][0]
    assert export["name"] == "export" and export["status"] == "failed" and "file too large" in export["reason"]
    assert all(s["status"] == "not-run" for s in report["stages"][1:])
    _no_partials(out)


def test_a_report_that_cannot_be_written_is_never_left_half_written(models: Path, tmp_path: Path) -> None:
    """Under a limit report.json itself passes, the run still ends on one line naming it, and no report is
    left cut off mid-way: report.json is absent or the last one that was written whole."""
    out = tmp_path / "out"
    p = _compile_with_file_limit(f"{models}:make", out, 3000)
    line = _one_error_line(p, 1)
    assert "file too large" in line and "report.json" in line, line
    if (out / "report.json").exists():
        json.loads((out / "report.json").read_text())
    _no_partials(out)


def _can_mount_tmpfs(probe: Path) -> str | None:
    """Why a private tmpfs cannot be mounted here, or None."""
    if shutil.which("unshare") is None:
        return "no unshare(1)"
    if os.geteuid() != 0:
        return "mounting a tmpfs needs root"
    probe.mkdir()
    p = subprocess.run(["unshare", "-m", "sh", "-c", f"mount -t tmpfs -o size=64k tmpfs {probe}"],
                       capture_output=True, text=True)
    return None if p.returncode == 0 else f"cannot mount a tmpfs: {p.stderr.strip()}"


def test_a_full_tmpfs_fails_the_stage(models: Path, tmp_path: Path) -> None:
    """A real full disk (ENOSPC): a 256 KiB tmpfs as the output folder, in a mount namespace of the run's own.
    The folder is copied out before the namespace ends, to be looked at."""
    why = _can_mount_tmpfs(tmp_path / "probe")
    if why:
        pytest.skip(why)
    disk, seen = tmp_path / "disk", tmp_path / "seen"
    disk.mkdir()
    script = textwrap.dedent(f'''
        mount -t tmpfs -o size=256k tmpfs {disk} || exit 99
        "{sys.executable}" -m optcli compile "{models}:make" --out {disk}/out --no-bench
        rc=$?
        cp -a {disk}/. {seen}/
        exit $rc
    ''')
    seen.mkdir()
    p = subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True, text=True, timeout=600,
                       env=cli_env())
    line = _one_error_line(p, 1)
    assert "no space left on device" in line, line
    report = json.loads((seen / "out" / "report.json").read_text())
    assert report["status"] == "failed" and report["stages"][0]["status"] == "failed"
    _no_partials(seen / "out")
