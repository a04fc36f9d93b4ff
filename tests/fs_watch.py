"""Which files in a folder anything opened, read, wrote, made or removed while a block ran: Linux inotify
through ctypes, so reads by C++ (onnxruntime), Rust (safetensors) and subprocesses count, not only Python's
own open(). Tests put the files a hostile input names outside its folder here, and assert nothing touched
them. Elsewhere (no inotify) a watch skips the test with a reason."""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import struct
from pathlib import Path

import pytest

# <sys/inotify.h>
IN_ACCESS, IN_MODIFY, IN_OPEN, IN_CREATE, IN_DELETE = 0x1, 0x2, 0x20, 0x100, 0x200
IN_MOVED_FROM, IN_MOVED_TO, IN_ISDIR = 0x40, 0x80, 0x40000000
IN_NONBLOCK = os.O_NONBLOCK
_WATCHED = IN_ACCESS | IN_MODIFY | IN_OPEN | IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO
_NAMES = {IN_ACCESS: "read", IN_MODIFY: "write", IN_OPEN: "open", IN_CREATE: "create", IN_DELETE: "delete",
          IN_MOVED_FROM: "move-out", IN_MOVED_TO: "move-in"}
_HEADER = struct.Struct("iIII")  # wd, mask, cookie, len


class FolderWatch:
    """Events on the entries of some folders (not their subfolders' contents: watch those too), as
    (folder, entry name, what) from the time the watch started. Listing a folder itself is not counted."""

    def __init__(self, *folders: Path) -> None:
        libc_name = ctypes.util.find_library("c")
        libc = ctypes.CDLL(libc_name, use_errno=True) if libc_name else None
        if libc is None or not hasattr(libc, "inotify_init1"):
            pytest.skip("inotify is Linux's: no watch of what a run opens here")
        self._fd = libc.inotify_init1(IN_NONBLOCK)
        if self._fd < 0:
            pytest.skip(f"inotify_init1 failed: {os.strerror(ctypes.get_errno())}")
        self._folders: dict[int, Path] = {}
        for folder in folders:
            wd = libc.inotify_add_watch(self._fd, os.fsencode(folder), _WATCHED)
            if wd < 0:
                raise OSError(ctypes.get_errno(), f"cannot watch {folder}")
            self._folders[wd] = folder
        self._events: list[tuple[Path, str, str]] = []

    def events(self) -> list[tuple[Path, str, str]]:
        """Everything seen so far on a watched folder's entries."""
        while True:
            try:
                data = os.read(self._fd, 65536)
            except BlockingIOError:
                return list(self._events)
            offset = 0
            while offset < len(data):
                wd, mask, _cookie, size = _HEADER.unpack_from(data, offset)
                raw = data[offset + _HEADER.size: offset + _HEADER.size + size]
                offset += _HEADER.size + size
                name = raw.split(b"\0", 1)[0].decode(errors="replace")
                if not name:  # the folder itself (a listing): not one of its files
                    continue
                for bit, what in _NAMES.items():
                    if mask & bit:
                        self._events.append((self._folders.get(wd, Path("?")), name, what))

    def close(self) -> None:
        os.close(self._fd)

    def __enter__(self) -> FolderWatch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.events()
        self.close()
