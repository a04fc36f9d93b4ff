"""One run at a time per output folder: an exclusive lock, so two compiles into one folder cannot mix
their stages and report. The second run fails at once (exit 2) naming the holder's pid.

The lock file is also the mark of a folder optcli made: a run writes into an existing, non-empty folder
only when it holds one (or with --force), so `--out ~/notes` never overwrites someone's report.md."""
from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from optcli.errors import UsageError

LOCK_FILE = ".optcli.lock"


@contextlib.contextmanager
def output_lock(out: Path) -> Iterator[None]:
    """Hold an exclusive flock on `out/.optcli.lock` for the block. The file stays (deleting it would let
    a third run lock a different inode); the lock dies with the process, so a killed run leaves none."""
    import fcntl

    fd = os.open(out / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            raise UsageError(f"output folder {out} is in use by another optcli run (pid {holder})",
                             hint="wait for that run to finish, or pass another --out") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        try:
            yield
        finally:
            os.ftruncate(fd, 0)
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def made_by_optcli(folder: Path) -> bool:
    """Whether `folder` is optcli's to write into: absent, empty, or holding the run marker (the lock file)."""
    if not folder.is_dir():
        return not folder.exists()
    return (folder / LOCK_FILE).is_file() or not any(folder.iterdir())


def mark(folder: Path) -> None:
    """Mark a folder optcli fills before a run starts in it (compare seeds a variant's stage folders)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / LOCK_FILE).touch()
