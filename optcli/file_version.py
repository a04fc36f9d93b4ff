"""What tells one version of a file from another within a process: the key of in-process caches
(sha256_file, graph_view), never stored."""
from __future__ import annotations

from pathlib import Path
from typing import Any

_CACHES: list[dict] = []  # the caches keyed by file_version: `moved` follows a renamed folder in them


def file_version(f: Path) -> tuple[str, int, int, int]:
    """Path, size, mtime and inode (a save unlinks and rewrites, so a new version has a new inode)."""
    st = f.stat()
    return str(f.resolve()), st.st_size, st.st_mtime_ns, st.st_ino


def register(cache: dict) -> dict:
    """A cache whose keys hold file_version tuples (or paths), for `moved` to follow renames in."""
    _CACHES.append(cache)
    return cache


def moved(src: Path, dst: Path) -> None:
    """`src` (a folder) was renamed to `dst`: the cached entries of files inside it now name them there.
    Size, mtime and inode stay in the keys, so a lookup still hits only the same file (a stage's output
    is written in a temporary folder renamed into place, then read again by the next stage)."""
    old, new = str(src.resolve()) + "/", str(dst.resolve()) + "/"

    def rekey(k: Any) -> Any:
        if isinstance(k, str):
            return new + k[len(old):] if k.startswith(old) else k
        return tuple(rekey(x) for x in k) if isinstance(k, tuple) else k

    for cache in _CACHES:
        for key in [k for k in cache if rekey(k) != k]:
            cache[rekey(key)] = cache.pop(key)
