"""What a dead `optcli serve` leaves is removed by the next one, and only that (issue 30, item 15):
ownership is an flock held by the live server's processes, checked with real processes here."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from optcli.serve import leftovers
from optcli.serve.leftovers import LOCK_NAME, claim_workdir, shm_prefix, sweep

HOLDER = """
import sys, time
from optcli.serve.leftovers import claim_workdir
w = claim_workdir(sys.argv[1])
print(w.path, flush=True)
time.sleep(600)
"""


@pytest.fixture
def shm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A stand-in for /dev/shm (a folder of this test's), so no other process's regions are touched."""
    folder = tmp_path / "shm"
    folder.mkdir()
    monkeypatch.setattr(leftovers, "SHM_DIR", folder)
    return folder


def _holder(parent: Path) -> tuple[subprocess.Popen[str], Path]:
    """A process that claims a server folder in `parent` and keeps it, as a live optcli serve does."""
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(parent)], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(Path(leftovers.__file__).parents[2])})
    return proc, Path(proc.stdout.readline().strip())


def test_sweep_removes_only_provably_dead_servers(tmp_path: Path, shm: Path) -> None:
    live_proc, live = _holder(tmp_path)
    dead_proc, dead = _holder(tmp_path)
    try:
        for folder in (live, dead):
            (shm / (shm_prefix(folder) + "_abc")).write_bytes(b"\0" * 2**20)
        other = shm / "triton_python_backend_shm_region_1234"        # another Triton's: never ours
        other.write_bytes(b"\0")
        unlocked = tmp_path / "optcli-serve-nolock"                   # no lock file: not provably ours
        unlocked.mkdir()
        assert sweep(tmp_path) == []                                   # both holders alive: nothing
        dead_proc.send_signal(signal.SIGKILL)                          # as kill -9 does
        dead_proc.wait(timeout=30)
        removed = sweep(tmp_path)
        assert removed == [f"{shm / (shm_prefix(dead) + '_abc')} (1 MiB)", f"{dead} (model repository and server log)"]
        assert not dead.exists() and live.is_dir() and unlocked.is_dir() and other.exists()
        assert (shm / (shm_prefix(live) + "_abc")).exists()
        assert sweep(tmp_path) == []
    finally:
        for proc in (live_proc, dead_proc):
            proc.kill()
            proc.wait(timeout=30)
            proc.stdout.close()


def test_a_lock_inherited_by_a_child_keeps_the_folder_alive(tmp_path: Path, shm: Path) -> None:
    """The server holds the lock too (pass_fds): optcli dead, server alive, folder kept."""
    workdir = claim_workdir(tmp_path)
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], pass_fds=(workdir.lock_fd,))
    try:
        os.close(workdir.lock_fd)  # this process lets go, as a killed optcli does
        assert sweep(tmp_path) == [] and workdir.path.is_dir()
        child.kill()
        child.wait(timeout=30)
        assert sweep(tmp_path) == [f"{workdir.path} (model repository and server log)"]
    finally:
        child.kill()
        child.wait(timeout=30)


def test_release_removes_the_folder_and_its_regions(tmp_path: Path, shm: Path) -> None:
    workdir = claim_workdir(tmp_path)
    (shm / (workdir.shm_prefix + "_x")).write_bytes(b"\0" * 10)
    assert workdir.release() == [f"{shm / (workdir.shm_prefix + '_x')} (10 bytes)"]
    assert not workdir.path.exists()


def test_a_symlinked_folder_is_not_followed(tmp_path: Path, shm: Path) -> None:
    target = tmp_path / "elsewhere"
    target.mkdir()
    (target / "keep.txt").write_text("a user's file")
    (target / LOCK_NAME).write_text("")
    (tmp_path / "optcli-serve-link").symlink_to(target)
    assert sweep(tmp_path) == [] and (target / "keep.txt").exists()
