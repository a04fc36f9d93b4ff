"""What one `optcli serve` owns on disk, and how the next one removes what a dead one left.

A server owns two things outside its own process: its private folder (`$TMPDIR/optcli-serve-XXXX`:
the model repository, the backend links, the server's log) and the shared-memory regions that
Triton's Python backend makes for its stubs (`/dev/shm/<prefix>...`, 1 MiB each and more). A clean
stop removes both; a `kill -9`, a second Ctrl-C during the stop, or a server that crashed while
starting used to leave them for good.

Ownership is proven, never guessed from a name alone:

- the folder holds `LOCK_NAME`, locked (flock, exclusive) right after the folder is made, by optcli
  and, through the inherited file descriptor, by the tritonserver it starts (and whatever that server
  starts). The kernel drops the lock only when every one of those processes has exited, however it
  ended. A folder whose lock can be taken is therefore provably dead; a folder without the lock
  file (being made this instant, or made by an older optcli) is left alone;
- the server is started with the Python backend's `shm-region-prefix-name` set to a prefix made from
  the folder's own name, so the regions a dead folder names are that server's and no other's.

`sweep()` (run by every `optcli serve` before it starts) removes each dead folder with its regions
and returns what it removed, for the command to name.
"""
from __future__ import annotations

import fcntl
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

PREFIX = "optcli-serve-"
LOCK_NAME = ".optcli-serve.lock"
SHM_DIR = Path("/dev/shm")


@dataclass
class Workdir:
    """A live server's folder and the open, locked file that proves it is alive."""

    path: Path
    lock_fd: int

    @property
    def shm_prefix(self) -> str:
        return shm_prefix(self.path)

    def release(self) -> list[str]:
        """Remove the folder and its shared-memory regions (call once the server's processes are gone),
        then drop the lock; returns what was removed."""
        removed = remove_shm(self.shm_prefix)
        shutil.rmtree(self.path, ignore_errors=True)
        try:
            os.close(self.lock_fd)
        except OSError:
            pass
        return removed


def shm_prefix(folder: Path) -> str:
    """The Python backend's region prefix for the server of `folder` (shm names cannot hold '/')."""
    return "optcli_serve_" + folder.name.removeprefix(PREFIX)


def claim_workdir(parent: str | Path | None = None) -> Workdir:
    """A new private folder, its lock taken before anything else is written into it."""
    path = Path(tempfile.mkdtemp(prefix=PREFIX, dir=parent))
    fd = os.open(path / LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)  # cannot block: nobody else has opened the file yet
    os.set_inheritable(fd, True)    # the server holds it too (Popen pass_fds)
    return Workdir(path, fd)


def remove_shm(prefix: str) -> list[str]:
    """Unlink every /dev/shm region whose name starts with `prefix`; returns their paths with sizes."""
    removed: list[str] = []
    if not SHM_DIR.is_dir():
        return removed
    for region in sorted(SHM_DIR.glob(prefix + "*")):
        try:
            size = region.lstat().st_size
            region.unlink()
        except OSError:
            continue
        removed.append(f"{region} ({_size(size)})")
    return removed


def sweep(parent: str | Path | None = None) -> list[str]:
    """Remove the folders (and their shared-memory regions) of servers that are provably dead; returns
    what was removed. Never touches a folder whose lock is held or that has no lock file."""
    root = Path(parent or tempfile.gettempdir())
    removed: list[str] = []
    try:
        candidates = sorted(root.glob(PREFIX + "*"))
    except OSError:
        return removed
    for folder in candidates:
        if folder.is_symlink() or not folder.is_dir():
            continue
        try:
            fd = os.open(folder / LOCK_NAME, os.O_RDONLY | os.O_NOFOLLOW)
        except OSError:
            continue  # no lock file: not provably ours, or not provably dead
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                continue  # held: a live server (or its server process) still has it
            if not (folder / LOCK_NAME).exists():
                continue  # another sweep removed it between our open and our lock
            removed += remove_shm(shm_prefix(folder))
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(f"{folder} (model repository and server log)")
        finally:
            os.close(fd)
    return removed


def _size(n: int) -> str:
    return f"{n / 2**20:.0f} MiB" if n >= 2**20 else f"{n} bytes"
