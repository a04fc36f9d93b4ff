"""Opening an engine for the runner: find the file, check its metadata against this machine,
deserialize it and read its I/O, refusing what the runner cannot hold. Loading is separate from
running it, as Polygraphy separates its loaders from its runners (polygraphy/backend/trt)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from optcli.backends.tensorrt import io_types
from optcli.backends.tensorrt.builder import deserialize
from optcli.backends.tensorrt.cuda_build import tensorrt_cuda_major
from optcli.backends.tensorrt.metadata import ENGINE_FILE, EngineMetadata, TensorEntry, engine_io, read_metadata
from optcli.backends.tensorrt.toolkit import is_rtx
from optcli.errors import UsageError
from optcli.tensor_spec import TensorSpec


@dataclass
class LoadedEngine:
    path: Path
    engine: Any                         # the deserialized ICudaEngine
    metadata: EngineMetadata | None     # model.engine.json, where there is one of ours
    inputs: list[TensorEntry]           # metadata.engine_io entries
    outputs: list[TensorEntry]


def engine_file(path: Path) -> Path:
    engine = path / ENGINE_FILE if path.is_dir() else path
    if not engine.is_file():
        raise UsageError(f"no TensorRT engine at {path}", hint="pass a .engine file or a folder holding model.engine")
    return engine


def check_metadata(trt: Any, torch: Any, engine_path: Path, device: Any) -> EngineMetadata | None:
    """The engine's metadata, or UsageError when it says the engine does not fit this machine."""
    meta_path = engine_path.with_name(engine_path.name + ".json")
    if not meta_path.is_file():
        return None
    try:
        meta = read_metadata(meta_path)
    except ValueError:
        return None  # not ours or damaged: TensorRT's own check at deserialization still applies
    if is_rtx(trt):
        # TensorRT-RTX engines are portable across RTX GPUs (compute 8.0+): only its version must match.
        here = str(trt.__version__)
        if meta.tensorrt_version != here:
            raise UsageError(f"{engine_path} was built with TensorRT-RTX {meta.tensorrt_version}, this machine has "
                             f"{here}", hint="rebuild it with optcli compile MODEL --target tensorrt-rtx")
        return meta
    major, minor = torch.cuda.get_device_capability(device)
    # TensorRT's CUDA major, not torch's: an engine is tied to the TensorRT build that made it, and
    # torch may use another CUDA major in the same process (second review, F8).
    problem = meta.mismatch(tensorrt_version=str(trt.__version__), gpu=torch.cuda.get_device_name(device),
                            compute_capability=f"{major}.{minor}", cuda=tensorrt_cuda_major(trt))
    if problem:
        raise UsageError(f"{engine_path} does not fit this machine: {problem}",
                         hint="rebuild it here with optcli compile MODEL --target tensorrt")
    return meta


def load_engine(trt: Any, torch: Any, path: Path, device: Any, logger: Any, check: bool = True) -> LoadedEngine:
    """Deserialize the engine at `path` (a file or an engine cache entry) on `device`."""
    engine_path = engine_file(path)
    meta = check_metadata(trt, torch, engine_path, device) if check else None
    allow_host_code = bool(meta and meta.options.get("version_compat"))
    with torch.cuda.device(device):
        engine = deserialize(trt, engine_path.read_bytes(), logger, allow_host_code)
    if engine is None:
        raise UsageError(f"TensorRT cannot load {engine_path}: {logger.last_errors()}",
                         hint="engines only load on the TensorRT version and GPU that built them: rebuild it "
                              "with optcli compile MODEL --target tensorrt --force")
    ins, outs = engine_io(trt, engine)
    _check_formats(trt, engine, [e["name"] for e in ins + outs])
    for e in ins:
        if io_types.is_packed(e["dtype"]):
            raise UsageError(f"engine input {e['name']!r} is {e['dtype']}, packed two values per byte; "
                             "optcli's runner takes no 4-bit inputs",
                             hint="keep FP4/INT4 inside the graph: quantize after a float input")
    return LoadedEngine(engine_path, engine, meta, ins, outs)


def _check_formats(trt: Any, engine: Any, names: list[str]) -> None:
    """Only linear (row-major) I/O is read and written correctly here; a vectorized format such as
    CHW32 lays the same tensor out differently (pyCore.cpp ICudaEngine.get_tensor_format)."""
    for name in names:
        fmt = engine.get_tensor_format(name)
        if fmt != trt.TensorFormat.LINEAR:
            raise UsageError(f"engine tensor {name!r} uses the {getattr(fmt, 'name', fmt)} format; optcli's "
                             "runner reads and writes linear tensors only",
                             hint="rebuild the engine without I/O format constraints (optcli never sets them)")


def tensor_spec(entry: TensorEntry) -> TensorSpec:
    """The engine's view of a tensor: a dynamic dim its profile fixes (min == max) is that number, so
    bench and profile can make inputs without --input (second review, F4); the others stay named,
    and the spec keeps the profile for the hint that asks for them."""
    profile = tuple(tuple(int(d) for d in dims) for dims in entry["profile"]) if "profile" in entry else None
    shape = tuple(d if d >= 0 else profile[0][i] if profile and profile[0][i] == profile[2][i]
                  else ("batch" if i == 0 else f"{entry['name']}_dim{i}") for i, d in enumerate(entry["shape"]))
    return TensorSpec(entry["name"], shape, entry["dtype"], profile)  # type: ignore[arg-type]
