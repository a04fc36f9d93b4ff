"""model.engine.json: what an engine is, what built it and for which GPU.

A serialized TensorRT engine only runs with the TensorRT version and (unless built hardware-
compatible) the GPU architecture that built it, and the file itself does not say so in a form we
can read without deserializing it. The metadata beside it does, so the engine cache and the runner
can refuse a mismatching engine with a clear message before TensorRT refuses it with a cryptic one.
"""
from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from optcli.atomic_write import write_text_atomic

FORMAT = "optcli-tensorrt-engine"
SCHEMA_VERSION = 1
ENGINE_FILE = "model.engine"
METADATA_FILE = "model.engine.json"

# TensorRT DataType member names (tensorrt.DataType.FLOAT ...) -> numpy-style names used by optcli.
_DTYPES = {"FLOAT": "float32", "HALF": "float16", "BF16": "bfloat16", "INT8": "int8", "INT32": "int32",
           "INT64": "int64", "BOOL": "bool", "UINT8": "uint8", "FP8": "float8", "INT4": "int4", "FP4": "float4"}


def dtype_name(trt_dtype: Any) -> str:
    """tensorrt.DataType -> 'float32', 'float16', ... (pybind11 enums expose `.name`)."""
    name = getattr(trt_dtype, "name", None) or str(trt_dtype).rsplit(".", 1)[-1]
    return _DTYPES.get(str(name), str(name).lower())


def engine_io(trt: Any, engine: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Inputs and outputs of a deserialized engine: name, dtype, shape (-1 = dynamic), and for dynamic
    inputs the profile-0 (min, opt, max).

    TensorRT 10/11 name-based I/O API: ICudaEngine.num_io_tensors, get_tensor_name(index),
    get_tensor_mode(name) -> TensorIOMode, get_tensor_dtype(name), get_tensor_shape(name) -> Dims,
    get_tensor_profile_shape(name, profile_index) -> [min, opt, max].
    """
    inputs: list[dict[str, Any]] = []
    outputs: list[dict[str, Any]] = []
    for index in range(engine.num_io_tensors):
        name = engine.get_tensor_name(index)
        entry: dict[str, Any] = {"name": name, "dtype": dtype_name(engine.get_tensor_dtype(name)),
                                 "shape": [int(d) for d in engine.get_tensor_shape(name)]}
        if engine.get_tensor_mode(name) == trt.TensorIOMode.INPUT:
            if -1 in entry["shape"]:
                entry["profile"] = [[int(d) for d in dims] for dims in engine.get_tensor_profile_shape(name, 0)]
            inputs.append(entry)
        else:
            outputs.append(entry)
    return inputs, outputs


@dataclass
class EngineMetadata:
    """Everything written to model.engine.json."""

    tensorrt_version: str
    gpu: str | None
    compute_capability: str | None
    cache_key: str
    onnx_sha256: str
    engine_sha256: str
    engine_bytes: int
    profiles: list[dict[str, Any]]
    inputs: list[dict[str, Any]]
    outputs: list[dict[str, Any]]
    options: dict[str, Any]
    build_seconds: float
    strongly_typed: bool = True
    built_at: str = field(default_factory=lambda: time.strftime("%Y-%m-%dT%H:%M:%S%z"))
    optcli_version: str = ""
    format: str = FORMAT
    schema_version: int = SCHEMA_VERSION

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> EngineMetadata:
        names = set(cls.__dataclass_fields__)
        missing = sorted(n for n in ("tensorrt_version", "cache_key", "engine_sha256", "inputs", "outputs")
                         if n not in d)
        if d.get("format") != FORMAT or missing:
            raise ValueError(f"not optcli engine metadata (missing {', '.join(missing) or 'format'})")
        return cls(**{k: v for k, v in d.items() if k in names})

    def write(self, path: Path) -> None:
        write_text_atomic(path, json.dumps(self.to_json(), indent=2) + "\n")

    def mismatch(self, *, tensorrt_version: str | None, gpu: str | None, compute_capability: str | None,
                 cache_key: str | None = None) -> str | None:
        """Why this engine does not fit the machine (or the expected cache key), or None when it does."""
        if cache_key is not None and self.cache_key != cache_key:
            return f"its cache key {self.cache_key[:12]} is not the expected {cache_key[:12]}"
        if tensorrt_version is not None and self.tensorrt_version != tensorrt_version:
            if not self.options.get("version_compat"):
                return f"built with TensorRT {self.tensorrt_version}, this machine has {tensorrt_version}"
        hw = self.options.get("hardware_compat", "none")
        if compute_capability is not None and self.compute_capability != compute_capability and hw == "none":
            return (f"built for compute capability {self.compute_capability} ({self.gpu}), this GPU is "
                    f"{compute_capability} ({gpu})")
        return None


def read_metadata(path: Path) -> EngineMetadata:
    """Load model.engine.json; ValueError (with the reason) when unreadable or not ours."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"unreadable metadata {path.name}: {exc}") from None
    if not isinstance(data, dict):
        raise ValueError(f"unreadable metadata {path.name}: not a JSON object")
    return EngineMetadata.from_json(data)
