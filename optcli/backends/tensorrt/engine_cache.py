"""The engine cache: built engines kept across runs and output folders, keyed by what made them.

Key = sha256 of (the ONNX bytes and its external data, the build options, the profiles, the
TensorRT version, the GPU name and compute capability, the CUDA major). Layout under the cache root:

    <root>/<key[:2]>/<key>/model.engine        the serialized engine
    <root>/<key[:2]>/<key>/model.engine.json   its metadata (optcli.backends.tensorrt.metadata)

An entry is trusted only if its metadata reads, names the same key and a matching machine, the
engine bytes hash to the recorded sha256, and TensorRT deserializes them; otherwise the lookup says
why (`corrupt` or `mismatch`), the entry is removed and the caller rebuilds.
"""
from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, NotRequired, TypedDict

from optcli.atomic_write import atomic_dir
from optcli.backends.tensorrt.metadata import ENGINE_FILE, METADATA_FILE, EngineMetadata, read_metadata

if TYPE_CHECKING:
    from optcli.backends.tensorrt.options import BuildOptions

KEY_VERSION = 2  # 2: the CUDA major joined the key


def onnx_digest(path: Path) -> str:
    """sha256 of an ONNX file and of the external data files it references, which must stay in its folder."""
    from optcli.artifact import sha256_file
    from optcli.onnx_model import external_data_files

    external_data_files(path)  # a location outside the folder is refused here, not followed by the parser
    return sha256_file(path)


def cache_key(onnx_sha256: str, options: BuildOptions, profiles: Sequence[Mapping[str, object]],
              tensorrt_version: str, gpu: str | None, compute_capability: str | None, cuda: str | None = None) -> str:
    """The engine cache key: changes whenever anything that changes the engine changes. The CUDA
    major counts: the same TensorRT version ships cu12 and cu13 builds whose engines differ."""
    blob = json.dumps({"key_version": KEY_VERSION, "onnx": onnx_sha256, "options": options, "profiles": profiles,
                       "tensorrt": tensorrt_version, "gpu": gpu, "compute_capability": compute_capability,
                       "cuda_major": cuda_major(cuda)},
                      sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


def cuda_major(cuda: str | None) -> str | None:
    return str(cuda).split(".")[0] if cuda else None


class LookupJSON(TypedDict):
    status: str
    reason: str | None


class CacheInfo(LookupJSON):
    """How the engine was obtained, as the engine build records it."""

    key: str
    dir: NotRequired[str]        # the cache entry (absent with the cache disabled)


@dataclass
class Lookup:
    """The result of a cache lookup: hit (with the bytes and metadata), miss, corrupt or mismatch."""

    status: str                       # hit | miss | corrupt | mismatch (| disabled | forced: no lookup made)
    reason: str | None = None
    engine_bytes: bytes | None = None
    metadata: EngineMetadata | None = None

    def to_json(self) -> LookupJSON:
        return {"status": self.status, "reason": self.reason}

    def info(self, key: str, entry: Path | None) -> CacheInfo:
        info = CacheInfo(status=self.status, reason=self.reason, key=key)
        if entry is not None:
            info["dir"] = str(entry)
        return info


# validate(engine_bytes, metadata) -> None when TensorRT accepts the engine, else the reason.
Validator = Callable[[bytes, EngineMetadata], "str | None"]


class EngineCache:
    """A folder of engines keyed by cache_key()."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def entry(self, key: str) -> Path:
        return self.root / key[:2] / key

    def lookup(self, key: str, *, tensorrt_version: str | None, gpu: str | None, compute_capability: str | None,
               validate: Validator | None = None, cuda: str | None = None) -> Lookup:
        """Find a trustworthy engine for `key`; a bad entry is removed and reported, never returned."""
        folder = self.entry(key)
        if not folder.exists():
            return Lookup("miss")
        result = self._check(folder, key, tensorrt_version, gpu, compute_capability, validate, cuda)
        if result.status != "hit":
            self.evict(key)
        return result

    def _check(self, folder: Path, key: str, tensorrt_version: str | None, gpu: str | None,
               compute_capability: str | None, validate: Validator | None, cuda: str | None = None) -> Lookup:
        engine_path, meta_path = folder / ENGINE_FILE, folder / METADATA_FILE
        absent = [p.name for p in (engine_path, meta_path) if not p.is_file()]
        if absent:
            return Lookup("corrupt", f"incomplete cache entry ({', '.join(absent)} missing)")
        try:
            meta = read_metadata(meta_path)
        except ValueError as exc:
            return Lookup("corrupt", str(exc))
        problem = meta.mismatch(tensorrt_version=tensorrt_version, gpu=gpu, compute_capability=compute_capability,
                                cache_key=key, cuda=cuda)
        if problem:
            return Lookup("mismatch", problem)
        data = engine_path.read_bytes()
        if hashlib.sha256(data).hexdigest() != meta.engine_sha256:
            return Lookup("corrupt", f"{ENGINE_FILE} does not match its recorded sha256 (truncated or modified)")
        if validate is not None:
            problem = validate(data, meta)
            if problem:
                return Lookup("corrupt", problem)
        return Lookup("hit", engine_bytes=data, metadata=meta)

    def store(self, key: str, engine_bytes: bytes, metadata: EngineMetadata) -> Path:
        """Write an entry atomically (a crash leaves no half entry under the key)."""
        with atomic_dir(self.entry(key)) as tmp:
            (tmp / ENGINE_FILE).write_bytes(engine_bytes)
            metadata.write(tmp / METADATA_FILE)
        return self.entry(key)

    def evict(self, key: str) -> None:
        shutil.rmtree(self.entry(key), ignore_errors=True)
