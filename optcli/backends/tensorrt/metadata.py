"""model.engine.json: what an engine is, what built it and for which GPU.

A serialized TensorRT engine only runs with the TensorRT version and (unless built hardware-
compatible) the GPU architecture that built it, and the file itself does not say so in a form we
can read without deserializing it. The metadata beside it does, so the engine cache and the runner
can refuse a mismatching engine with a clear message before TensorRT refuses it with a cryptic one.
"""
from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NotRequired, TypedDict

from optcli.atomic_write import write_text_atomic

if TYPE_CHECKING:
    from optcli.backends.tensorrt.options import BuildOptions
    from optcli.backends.tensorrt.profiles import ProfileJSON

FORMAT = "optcli-tensorrt-engine"
SCHEMA_VERSION = 1
ENGINE_FILE = "model.engine"
METADATA_FILE = "model.engine.json"

# TensorRT DataType member names (pyFoundationalTypes.cpp DataType) -> the torch dtype names optcli
# uses (FP8 is E4M3: torch.float8_e4m3fn). INT4/FP4/E8M0 have no torch dtype; the runner refuses them.
_DTYPES = {"FLOAT": "float32", "HALF": "float16", "BF16": "bfloat16", "INT8": "int8", "INT32": "int32",
           "INT64": "int64", "BOOL": "bool", "UINT8": "uint8", "FP8": "float8_e4m3fn", "INT4": "int4",
           "FP4": "float4_e2m1", "E8M0": "float8_e8m0fnu"}


class TensorEntry(TypedDict):
    """One engine input or output as model.engine.json records it (shape -1 = dynamic)."""

    name: str
    dtype: str
    shape: list[int]
    profile: NotRequired[list[list[int]]]   # dynamic inputs only: profile 0's [min, opt, max]


def dtype_name(trt_dtype: Any) -> str:
    """tensorrt.DataType -> 'float32', 'float16', ... (pybind11 enums expose `.name`)."""
    name = getattr(trt_dtype, "name", None) or str(trt_dtype).rsplit(".", 1)[-1]
    return _DTYPES.get(str(name), str(name).lower())


def engine_io(trt: Any, engine: Any) -> tuple[list[TensorEntry], list[TensorEntry]]:
    """Inputs and outputs of a deserialized engine: name, dtype, shape (-1 = dynamic), and for dynamic
    inputs the profile-0 (min, opt, max).

    TensorRT 10/11 name-based I/O API: ICudaEngine.num_io_tensors, get_tensor_name(index),
    get_tensor_mode(name) -> TensorIOMode, get_tensor_dtype(name), get_tensor_shape(name) -> Dims,
    get_tensor_profile_shape(name, profile_index) -> [min, opt, max].
    """
    inputs: list[TensorEntry] = []
    outputs: list[TensorEntry] = []
    for index in range(engine.num_io_tensors):
        name = engine.get_tensor_name(index)
        entry: TensorEntry = {"name": name, "dtype": dtype_name(engine.get_tensor_dtype(name)),
                             "shape": [int(d) for d in engine.get_tensor_shape(name)]}
        if engine.get_tensor_mode(name) == trt.TensorIOMode.INPUT:
            if -1 in entry["shape"]:
                entry["profile"] = [[int(d) for d in dims] for dims in engine.get_tensor_profile_shape(name, 0)]
            inputs.append(entry)
        else:
            outputs.append(entry)
    return inputs, outputs


def network_io(network: Any, profiles: list[Any]) -> tuple[list[TensorEntry], list[TensorEntry]]:
    """The same entries as engine_io, read from the parsed network before the build (pyGraph.cpp
    INetworkDefinition.num_inputs/get_input/num_outputs/get_output; ITensor.name/shape/dtype):
    a strongly typed engine keeps the network's I/O names, types and shapes."""
    ranges = {p.name: [list(p.min), list(p.opt), list(p.max)] for p in profiles if p.dynamic}

    def entry(tensor: Any) -> TensorEntry:
        return {"name": tensor.name, "dtype": dtype_name(tensor.dtype), "shape": [int(d) for d in tensor.shape]}

    inputs = [entry(network.get_input(i)) for i in range(network.num_inputs)]
    for e in inputs:
        if -1 in e["shape"] and e["name"] in ranges:
            e["profile"] = ranges[e["name"]]
    return inputs, [entry(network.get_output(i)) for i in range(network.num_outputs)]


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
    profiles: list[ProfileJSON]
    inputs: list[TensorEntry]
    outputs: list[TensorEntry]
    options: BuildOptions
    build_seconds: float
    strongly_typed: bool = True
    built_at: str = field(default_factory=lambda: time.strftime("%Y-%m-%dT%H:%M:%S%z"))
    optcli_version: str = ""
    cuda: str | None = None     # the CUDA major of the TensorRT build that made it (cuda_build.py)
    format: str = FORMAT
    schema_version: int = SCHEMA_VERSION

    def to_json(self) -> dict[str, object]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> EngineMetadata:
        names = set(cls.__dataclass_fields__)
        missing = sorted(n for n in ("tensorrt_version", "cache_key", "engine_sha256", "inputs", "outputs")
                         if n not in d)
        if d.get("format") != FORMAT or missing:
            raise ValueError(f"not optcli engine metadata (missing {', '.join(missing) or 'format'})")
        return cls(**{k: v for k, v in d.items() if k in names})

    def write(self, path: Path) -> None:
        write_text_atomic(path, json.dumps(self.to_json(), indent=2) + "\n")

    def mismatch(self, *, tensorrt_version: str | None, gpu: str | None, compute_capability: str | None,
                 cache_key: str | None = None, cuda: str | None = None) -> str | None:
        """Why this engine does not fit the machine (or the expected cache key), or None when it does."""
        if cache_key is not None and self.cache_key != cache_key:
            return f"its cache key {self.cache_key[:12]} is not the expected {cache_key[:12]}"
        problem = _version_problem(self.tensorrt_version, tensorrt_version, bool(self.options.get("version_compat")))
        if problem:
            return problem
        if cuda and self.cuda and cuda.split(".")[0] != self.cuda.split(".")[0]:
            return (f"built by TensorRT for CUDA {self.cuda.split('.')[0]}, the TensorRT here is for CUDA "
                    f"{cuda.split('.')[0]}")
        return _hardware_problem(self, gpu, compute_capability)


def _version_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split(".") if p.isdigit())


def _version_problem(built: str, here: str | None, compatible: bool) -> str | None:
    """Plain engines need the exact TensorRT version; version-compatible ones run on the same or a
    LATER version of the same major (TensorRT developer guide, "Version Compatibility"), never an older one."""
    if here is None or built == here:
        return None
    if not compatible:
        return f"built with TensorRT {built}, this machine has {here}"
    b, h = _version_tuple(built), _version_tuple(here)
    if b[:1] != h[:1] or h < b:
        return (f"built version-compatible with TensorRT {built}, which runs on later {b[0]}.x versions only; "
                f"this machine has {here}")
    return None


def _hardware_problem(meta: EngineMetadata, gpu: str | None, cc: str | None) -> str | None:
    """none: the GPU model it was built on (the same compute capability is not enough: that is what
    SAME_COMPUTE_CAPABILITY is for); same-cc: the same compute capability; ampere+: compute >= 8.0
    (pyCore.cpp HardwareCompatibilityLevel; developer guide, "Hardware Compatibility")."""
    hw = meta.options.get("hardware_compat", "none")
    if cc is None:
        return None
    built = f"compute capability {meta.compute_capability} ({meta.gpu})"
    if hw == "ampere+":
        return None if _version_tuple(cc) >= (8, 0) else f"built for Ampere or newer, this GPU is compute {cc} ({gpu})"
    if meta.compute_capability != cc:
        return f"built for {built}, this GPU is {cc} ({gpu})"
    if hw == "none" and meta.gpu and gpu and meta.gpu != gpu:
        return (f"built for {meta.gpu}, this GPU is {gpu}: an engine is tied to its GPU model unless built "
                "with --hardware-compat same-cc or ampere+")
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
