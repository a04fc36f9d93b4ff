"""Read the metadata file a TensorRT engine carries beside it (`model.engine.json`).

An engine's bytes are opaque without TensorRT and a GPU, so everything Triton's config needs comes
from this JSON file, written by the TensorRT build stage. Keys read (documented in docs/deploy.md);
only `inputs` and `outputs` are required, everything else is optional:

    {
      "inputs":  [{"name": "x", "dtype": "float32", "shape": [-1, 3, 224, 224],
                   "profile": {"min": [1, 3, 224, 224], "opt": [8, 3, 224, 224], "max": [32, 3, 224, 224]}}],
      "outputs": [{"name": "logits", "dtype": "float32", "shape": [-1, 1000]}],
      "profiles": [{"x": {"min": [...], "opt": [...], "max": [...]}}],   # alternative to per-input "profile"
      "tensorrt_version": "10.13.0",      # or "trt_version"
      "gpu": "NVIDIA H100 80GB HBM3",      # or {"name": ..., "compute_capability": "9.0"}
      "compute_capability": "9.0",
      "precision": "fp16"
    }

Tolerated variants: `inputs`/`outputs` as a list or as a {name: spec} mapping; `dims` for `shape`;
`data_type` for `dtype`; dtypes as numpy names (float32), TensorRT names (FLOAT, HALF, DataType.INT8)
or Triton names (TYPE_FP32); a dynamic dim as -1, null or a name; a profile as {min, opt, max} or
[min, opt, max].
"""
from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from optcli.errors import UsageError
from optcli.tensor_spec import Dim, TensorSpec

Profile = tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]

# TensorRT and Triton dtype names -> the numpy names optcli uses everywhere else.
_DTYPE_ALIASES = {
    "float": "float32", "fp32": "float32", "half": "float16", "fp16": "float16", "bf16": "bfloat16",
    "int8": "int8", "int32": "int32", "int64": "int64", "bool": "bool", "uint8": "uint8",
    "fp8": "float8", "int4": "int4", "fp4": "float4",
    "type_fp32": "float32", "type_fp16": "float16", "type_bf16": "bfloat16", "type_int8": "int8",
    "type_int32": "int32", "type_int64": "int64", "type_bool": "bool", "type_uint8": "uint8",
}
_HINT = "see 'Engine metadata' in docs/deploy.md for the keys optcli reads"


@dataclass
class EngineMetadata:
    """What optcli knows about an engine without loading it."""

    path: Path
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]
    # One dict per optimization profile: input name -> (min, opt, max).
    profiles: list[dict[str, Profile]] = field(default_factory=list)
    tensorrt_version: str | None = None
    gpu: str | None = None
    compute_capability: str | None = None
    precision: str | None = None


def metadata_path_for(engine: Path) -> Path | None:
    """The metadata file beside `engine`: <file>.json, <stem>.engine.json, then model.engine.json."""
    for candidate in (engine.with_name(engine.name + ".json"), engine.with_name(engine.stem + ".engine.json"),
                      engine.with_name("model.engine.json")):
        if candidate.is_file():
            return candidate
    return None


def _dtype(raw: Any, where: str) -> str:
    if not isinstance(raw, str) or not raw:
        raise UsageError(f"{where}: missing or bad dtype {raw!r}", hint=_HINT)
    key = raw.strip().lower().removeprefix("datatype.").removeprefix("np.").removeprefix("numpy.")
    return _DTYPE_ALIASES.get(key, key)


def _dims(raw: Any, where: str) -> tuple[Dim, ...]:
    if not isinstance(raw, list):
        raise UsageError(f"{where}: shape must be a list of dims, got {raw!r}", hint=_HINT)
    dims: list[Dim] = []
    for i, d in enumerate(raw):
        if isinstance(d, bool):
            raise UsageError(f"{where}: bad dim {d!r}", hint=_HINT)
        if isinstance(d, int) and d > 0:
            dims.append(d)
        elif d is None or (isinstance(d, int) and d < 0):
            dims.append("batch" if i == 0 else f"dim{i}")
        elif isinstance(d, str) and re.fullmatch(r"-?\d+", d.strip()):
            n = int(d)
            dims.append(n if n > 0 else ("batch" if i == 0 else f"dim{i}"))
        elif isinstance(d, str) and d:
            dims.append(d)
        else:
            raise UsageError(f"{where}: bad dim {d!r}", hint=_HINT)
    return tuple(dims)


def _profile(raw: Any, where: str) -> Profile:
    if isinstance(raw, dict):
        raw = [raw.get("min"), raw.get("opt"), raw.get("max")]
    if (not isinstance(raw, list) or len(raw) != 3
            or not all(isinstance(s, list) and all(isinstance(d, int) and not isinstance(d, bool) for d in s)
                       for s in raw)
            or len({len(s) for s in raw}) != 1):
        raise UsageError(f"{where}: a profile needs min, opt and max shapes of one rank", hint=_HINT)
    mn, opt, mx = (tuple(s) for s in raw)
    return mn, opt, mx


def _entries(raw: Any, key: str, path: Path) -> list[dict[str, object]]:
    if isinstance(raw, dict):  # {name: spec}
        raw = [{"name": name, **(spec if isinstance(spec, dict) else {})} for name, spec in raw.items()]
    if not isinstance(raw, list) or not raw or not all(isinstance(e, dict) for e in raw):
        raise UsageError(f"{path}: '{key}' must be a non-empty list of tensors", hint=_HINT)
    return raw


def _tensor(entry: Mapping[str, object], where: str) -> TensorSpec:
    name = entry.get("name")
    if not isinstance(name, str) or not name:
        raise UsageError(f"{where}: a tensor without a name", hint=_HINT)
    shape = entry.get("shape", entry.get("dims"))
    return TensorSpec(name, _dims(shape, f"{where} {name!r}"),
                      _dtype(entry.get("dtype", entry.get("data_type")), f"{where} {name!r}"))


def read_engine_metadata(engine: Path) -> EngineMetadata:
    """Parse the metadata beside `engine`; a UsageError (one line, with a hint) for anything unusable."""
    meta_path = metadata_path_for(engine)
    if meta_path is None:
        raise UsageError(f"no metadata file beside {engine} (looked for {engine.name}.json and model.engine.json)",
                         hint="export the engine with optcli compile (it writes model.engine.json), or write one: "
                              + _HINT)
    try:
        data = json.loads(meta_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UsageError(f"{meta_path} is not readable JSON: {exc}", hint=_HINT) from None
    if not isinstance(data, dict):
        raise UsageError(f"{meta_path} must hold a JSON object", hint=_HINT)
    in_entries = _entries(data.get("inputs"), "inputs", meta_path)
    inputs = [_tensor(e, f"{meta_path.name} input") for e in in_entries]
    outputs = [_tensor(e, f"{meta_path.name} output") for e in _entries(data.get("outputs"), "outputs", meta_path)]
    names = {s.name for s in inputs}

    profiles: list[dict[str, Profile]] = []
    raw_profiles = data.get("profiles")
    if isinstance(raw_profiles, dict):
        raw_profiles = [raw_profiles]
    if isinstance(raw_profiles, list):
        for i, prof in enumerate(raw_profiles):
            if not isinstance(prof, dict):
                raise UsageError(f"{meta_path.name}: profile {i} must map input names to shapes", hint=_HINT)
            # Some writers nest the inputs: {"inputs": {...}} or a list of {"name", "min", "opt", "max"}.
            prof = prof.get("inputs", prof) if isinstance(prof.get("inputs"), (dict, list)) else prof
            if isinstance(prof, list):
                prof = {p.get("name"): p for p in prof if isinstance(p, dict)}
            profiles.append({name: _profile(shape, f"{meta_path.name} profile {i} input {name!r}")
                             for name, shape in prof.items() if name in names})
    if not profiles:
        per_input = {str(e["name"]): _profile(e["profile"], f"{meta_path.name} input {e['name']!r}")
                     for e in in_entries if e.get("profile") is not None}
        if per_input:
            profiles.append(per_input)
    for i, prof in enumerate(profiles):
        for spec in inputs:
            shapes = prof.get(spec.name)
            if shapes is not None and len(shapes[0]) != len(spec.shape):
                raise UsageError(f"{meta_path.name}: profile {i} of input {spec.name!r} has rank {len(shapes[0])}, "
                                 f"the input has rank {len(spec.shape)}", hint=_HINT)

    gpu = data.get("gpu")
    cc = data.get("compute_capability")
    if isinstance(gpu, dict):
        cc = cc or gpu.get("compute_capability")
        gpu = gpu.get("name")
    version = data.get("tensorrt_version", data.get("trt_version"))
    precision = data.get("precision")
    return EngineMetadata(path=meta_path, inputs=inputs, outputs=outputs, profiles=profiles,
                          tensorrt_version=str(version) if version is not None else None,
                          gpu=str(gpu) if gpu else None, compute_capability=str(cc) if cc else None,
                          precision=str(precision) if precision else None)
