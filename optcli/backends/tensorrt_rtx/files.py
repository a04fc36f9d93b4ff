"""Telling a TensorRT-RTX engine from a full TensorRT one: both are `model.engine`; the metadata optcli
writes beside it (model.engine.json) names the builder. Only that JSON is read, as data."""
from __future__ import annotations

from pathlib import Path

from optcli.backends.tensorrt.metadata import read_metadata
from optcli.backends.tensorrt.toolkit import TENSORRT_RTX


def format_of(path: Path) -> str | None:
    """"rtx-engine" where the engine's metadata says TensorRT-RTX built it, else None (not ours)."""
    meta_path = path.with_name(path.name + ".json")
    if not meta_path.is_file():
        return None
    try:
        meta = read_metadata(meta_path)
    except ValueError:
        return None
    return "rtx-engine" if meta.options.get("toolkit") == TENSORRT_RTX.name else None
