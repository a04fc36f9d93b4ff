"""What a stage's cache key holds for the data it reads: the bytes, not only the path. A path names a
folder whose files can be edited in place; a key holding only the path would reuse a stage's work (a
calibration, an accuracy proof) made on data that is no longer there."""
from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path


def data_identity(quantize: Mapping[str, object]) -> dict[str, str | None]:
    """{"calib_sha256", "eval_sha256", "calib_reader_sha256"}: the sha256 of the files each names
    (a missing one: None), for the keys set in `quantize` (the [quantize] config as a dict)."""
    from optcli.artifact import sha256_file

    out: dict[str, str | None] = {}
    for key in ("calib", "eval"):
        if quantize.get(key):
            path = Path(str(quantize[key]))
            out[f"{key}_sha256"] = sha256_file(path) if path.exists() else None
    reader = str(quantize.get("calib_reader") or "")
    if reader and (".py" in reader or "/" in reader):
        # A reader plugin file (path/file.py:Class): its code decides what the samples are.
        path = Path(reader.rsplit(":", 1)[0]) if ":" in reader and not Path(reader).exists() else Path(reader)
        out["calib_reader_sha256"] = sha256_file(path) if path.is_file() else None
    return out
