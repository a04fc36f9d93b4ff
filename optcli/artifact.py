"""Artifact: a file a stage produced (or the user's model), with its lineage."""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict

from optcli.file_version import file_version, register


def onnx_external_files(path: Path) -> list[str]:
    """The external data files an ONNX graph references ([] for a file that does not parse, or points
    outside its folder: whatever opens it next says why, this only names what belongs to it)."""
    from optcli.errors import UsageError
    from optcli.onnx_model import external_data_files

    try:
        return external_data_files(path)
    except UsageError:
        return []


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    """Hex sha256 of a file's bytes (of every file, sorted by name, for a directory). A model file covers
    its companions too (an OpenVINO IR's .xml its .bin, an ONNX graph its external data files: the
    weights are the model, and an edit there must change the identity)."""
    from optcli.backends import registry
    from optcli.backends.registry import companion_files

    h = hashlib.sha256()
    if path.is_dir():  # its own files: a link out of the folder is not part of it, and is never read
        root = path.resolve()
        files = sorted(p for p in path.rglob("*") if p.is_file() and root in p.resolve().parents)
    else:
        files = [path, *companion_files(path)]
    if registry.is_onnx_file(path) and path.is_file():
        files.extend(path.parent / f for f in onnx_external_files(path))
    # A run hashes the same 440 MB file several times (a stage's output is the next one's input): once
    # per version of the files in this process is enough. Nothing is kept on disk.
    key = (str(path.resolve()), tuple(file_version(f) for f in files))
    if key in _hashes:
        return _hashes[key]
    for f in files:
        if path.is_dir():
            h.update(str(f.relative_to(path)).encode())
        with open(f, "rb") as fh:
            while block := fh.read(chunk):
                h.update(block)
    if len(_hashes) >= 64:
        _hashes.pop(next(iter(_hashes)))
    _hashes[key] = h.hexdigest()
    return _hashes[key]


_hashes: dict[tuple[Any, ...], str] = register({})


class ArtifactJSON(TypedDict):
    path: str
    format: str
    precision: str
    stage: str | None
    parent: str | None
    backend: str
    sha256: str
    size_bytes: int


@dataclass
class Artifact:
    """One model file in the pipeline: where it is, what it is, and where it came from.

    `meta` holds stage-specific facts (fusions made, quantization flavour, excluded nodes) that the
    report and later stages read.
    """

    path: Path
    format: str
    precision: str = "fp32"
    stage: str | None = None          # the stage that made it; None for the user's model
    parent: str | None = None         # sha256 of the artifact it was made from
    backend: str = "onnxruntime"      # the runtime it is meant for
    meta: dict[str, Any] = field(default_factory=dict)
    _sha256: str | None = field(default=None, repr=False)

    @property
    def sha256(self) -> str:
        if self._sha256 is None:
            self._sha256 = sha256_file(self.path)
        return self._sha256

    @property
    def size_bytes(self) -> int:
        if self.path.is_dir():
            return sum(p.stat().st_size for p in self.path.rglob("*") if p.is_file())
        from optcli.backends import registry
        from optcli.backends.registry import companion_files

        total = self.path.stat().st_size + sum(p.stat().st_size for p in companion_files(self.path))
        # ONNX external data sits beside the model.
        for extra in onnx_external_files(self.path) if self.format == registry.ONNX else []:
            total += (self.path.parent / extra).stat().st_size
        return total

    def to_json(self, relative_to: Path | None = None) -> ArtifactJSON:
        path = self.path
        if relative_to is not None:
            try:
                path = self.path.resolve().relative_to(relative_to.resolve())
            except ValueError:
                pass
        return {"path": str(path), "format": self.format, "precision": self.precision, "stage": self.stage,
                "parent": self.parent, "backend": self.backend, "sha256": self.sha256, "size_bytes": self.size_bytes}
