"""What tells one version of a file from another within a process: the key of in-process caches
(sha256_file, graph_view), never stored."""
from __future__ import annotations

from pathlib import Path


def file_version(f: Path) -> tuple[str, int, int, int]:
    """Path, size, mtime and inode (a save unlinks and rewrites, so a new version has a new inode)."""
    st = f.stat()
    return str(f.resolve()), st.st_size, st.st_mtime_ns, st.st_ino
