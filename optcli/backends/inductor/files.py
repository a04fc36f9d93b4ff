"""Which .pt2 is an AOTInductor package: told from a torch.export archive (the torch backend's .pt2)
by the zip's file names, without loading anything."""
from __future__ import annotations

import zipfile
from pathlib import Path

FORMAT = "aoti"


def is_package(path: Path) -> bool:
    """Whether `path` is a zip holding an AOTInductor-compiled model."""
    try:
        with zipfile.ZipFile(path) as zf:
            return any("/data/aotinductor/" in n for n in zf.namelist())
    except (OSError, zipfile.BadZipFile):
        return False


def format_of(path: Path) -> str | None:
    """`aoti` for an AOTInductor package; None for any other .pt2 (the torch backend opens those)."""
    return FORMAT if is_package(path) else None
