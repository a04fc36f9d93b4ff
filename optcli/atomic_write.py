"""Write files and folders so a crash or Ctrl-C never leaves a half-written one under the final name."""
from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from optcli.file_version import moved


def _default_mode(base: int) -> int:
    """The mode a plain open()/mkdir() would give: mkstemp/mkdtemp make private 0600/0700 files."""
    mask = os.umask(0)
    os.umask(mask)
    return base & ~mask


@contextlib.contextmanager
def atomic_path(final: Path) -> Iterator[Path]:
    """Yield a temporary path beside `final`; rename it onto `final` only if the block succeeds."""
    final.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{final.name}.", suffix=".partial", dir=final.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        yield tmp
        os.chmod(tmp, _default_mode(0o666))
        os.replace(tmp, final)
    finally:
        if tmp.exists():
            tmp.unlink()


def write_text_atomic(final: Path, text: str) -> None:
    with atomic_path(final) as tmp:
        tmp.write_text(text, encoding="utf-8")


@contextlib.contextmanager
def atomic_dir(final: Path) -> Iterator[Path]:
    """Yield an empty temporary folder beside `final`; it replaces `final` only if the block succeeds."""
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", suffix=".partial", dir=final.parent))
    try:
        yield tmp
        os.chmod(tmp, _default_mode(0o777))
        if final.exists():
            old = final.with_name(f".{final.name}.old")
            shutil.rmtree(old, ignore_errors=True)
            os.replace(final, old)
            os.replace(tmp, final)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, final)
        moved(tmp, final)  # what this process hashed or parsed inside it is still known, at its new path
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def remove_stale_partials(folder: Path) -> None:
    """Delete leftovers of runs that died mid-write."""
    if folder.is_dir():
        for p in folder.glob(".*.partial"):
            shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)
