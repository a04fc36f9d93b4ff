"""Find a calibration reader: a built-in name, an entry point (group `optcli.calibration_readers`),
or `path/to/file.py:ClassName` (which runs that file's code, like any plugin)."""
from __future__ import annotations

import importlib.metadata
import importlib.util
from pathlib import Path

from optcli.calibration.builtin_readers import BUILTIN, IMAGE_SUFFIXES
from optcli.errors import UsageError, foreign_exit

ENTRY_POINT_GROUP = "optcli.calibration_readers"


def _entry_points() -> dict[str, importlib.metadata.EntryPoint]:
    return {ep.name: ep for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)}


def _from_file(spec: str) -> type:
    path_text, cls_name = spec.rsplit(":", 1)
    path = Path(path_text)
    if not path.is_file():
        raise UsageError(f"--calib-reader {spec}: file {path} not found", hint="write path/to/readers.py:ClassName")
    mod_spec = importlib.util.spec_from_file_location(f"optcli_reader_{path.stem}", path)
    if mod_spec is None or mod_spec.loader is None:
        raise UsageError(f"--calib-reader {spec}: cannot import {path}")
    module = importlib.util.module_from_spec(mod_spec)
    try:
        mod_spec.loader.exec_module(module)
    except BaseException as exc:  # a plugin's SystemExit must not decide the exit code either
        if not isinstance(exc, Exception) and not foreign_exit(exc):
            raise
        raise UsageError(f"--calib-reader {spec}: importing {path} failed: {type(exc).__name__}: {exc}",
                         hint="run the file with python to see the error") from None
    cls = getattr(module, cls_name, None)
    if cls is None:
        raise UsageError(f"--calib-reader {spec}: {path.name} has no {cls_name!r}",
                         hint="name a class defined in that file")
    return cls


def default_reader_name(folder: Path) -> str:
    """npz when the folder holds .npz files, images for image files, npy for sub-folders."""
    files = [p for p in folder.iterdir()] if folder.is_dir() else []
    if any(p.suffix == ".npz" for p in files):
        return "npz"
    if any(p.suffix.lower() in IMAGE_SUFFIXES for p in files):
        return "images"
    if any(p.is_dir() for p in files):
        return "npy"
    return "npz"


def find_reader(name: str | None, folder: Path) -> tuple[type, str]:
    """The reader class for `name` (None = guessed from the folder) and how it was found."""
    name = name or default_reader_name(folder)
    if ".py:" in name:
        return _from_file(name), f"file {name}"
    if name in BUILTIN:
        return BUILTIN[name], f"built-in {name}"
    eps = _entry_points()
    if name in eps:
        try:
            return eps[name].load(), f"entry point {name} ({eps[name].value})"
        except BaseException as exc:
            if not isinstance(exc, Exception) and not foreign_exit(exc):
                raise
            raise UsageError(f"--calib-reader {name}: loading entry point {eps[name].value} failed: {exc}") from None
    known = sorted(set(BUILTIN) | set(eps))
    raise UsageError(f"unknown calibration reader {name!r}",
                     hint=f"use one of {', '.join(known)}, or path/to/file.py:ClassName")
