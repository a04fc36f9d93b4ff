"""Write a torch zip archive (torch.export.save's .pt2, an AOTInductor package) so a full disk is an
OSError, not an aborted process. Given a path, torch's C++ writer throws from its destructor when a write
fails, and the process dies with SIGABRT (exit 134, a C++ backtrace, the report left at `running`). Given
this file object instead, the first failed write is kept and the rest are dropped, torch finishes its
archive in memory order, and the error is raised here afterwards."""
from __future__ import annotations

import contextlib
import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any


class _KeepFirstError(io.RawIOBase):
    """A writable file that passes bytes on until one write fails, then counts the rest without writing."""

    def __init__(self, fh: Any) -> None:
        super().__init__()
        self._fh = fh
        self._pos = 0
        self.error: OSError | None = None

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:  # the AOTInductor packager asks; torch's writer itself only appends
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        if self.error is None:
            self._pos = self._fh.seek(offset, whence)
        elif whence == io.SEEK_SET:
            self._pos = offset
        return self._pos

    def write(self, data: Any) -> int:
        size = memoryview(data).nbytes
        if self.error is None:
            try:
                self._fh.write(data)
            except OSError as exc:
                self.error = exc
        self._pos += size
        return size


@contextlib.contextmanager
def archive_file(path: Path) -> Iterator[io.RawIOBase]:
    """A file object for torch to write an archive at `path` through; a write that failed (ENOSPC, EFBIG)
    is raised as that OSError once torch is done."""
    with open(path, "wb") as fh:
        guard = _KeepFirstError(fh)
        yield guard
        if guard.error is not None:  # named: a failed write on an open file names no file
            raise OSError(guard.error.errno, guard.error.strerror, str(path)) from guard.error
        fh.flush()
