"""Built CPU candidates (OpenVINO IRs) cached by a hash of what they are built from, so a re-run, a
`--search thorough` after a fast one, or another compile into the same folder does not rebuild them.

An entry is OUT/candidate-cache/<key>/ with the model files and candidate.json {key, files: {name:
sha256}, build}. It is used only when the record parses, its key matches, and every file it names
lies inside the entry with the recorded sha256 (optcli/safe_paths.py): a cache never decides what
code runs, only which already-checked files are reused. Files are hard-linked where the file system
allows (no second copy of a large model).
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, NotRequired, TypedDict

from optcli.artifact import sha256_file
from optcli.atomic_write import write_text_atomic
from optcli.errors import UsageError
from optcli.safe_paths import contained
from optcli.version import __version__

if TYPE_CHECKING:
    from optcli.backends.recipe import Candidate, RecipeContext

FOLDER = "candidate-cache"
RECORD = "candidate.json"


def candidate_key(inputs: Mapping[str, object]) -> str:
    """sha256 of everything a build depends on (the caller lists it), with optcli's version."""
    blob = json.dumps({"optcli": __version__, **inputs}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:32]


class MachineKey(TypedDict):
    """The CPU and the versions of every CPU backend's packages (None: not installed)."""

    cpu: str
    versions: dict[str, str | None]


class BuildInputs(TypedDict):
    """Everything a recipe's build may depend on: hashed into the entry's key (never written)."""

    candidate: list[str]                # name, backend, precision, recipe
    lineage: list[str]                  # sha256 of every graph the stages made
    quantize: dict[str, object]         # [quantize] without its data folders
    first_float_onnx: str
    nncf_calibration: str
    calib: str | None                   # the sample sets' digests
    eval: str
    tolerance: dict[str, float]
    cpu: MachineKey
    u8s8_saturates: bool
    others_passed: NotRequired[bool]    # requantize-s8s8 only


class CachedBuild(TypedDict):
    """An entry's `build`: what the recipe said it made (optcli/backends/recipe.Built)."""

    format: str
    details: dict[str, object]
    runner_options: dict[str, object]


def build_inputs(cand: Candidate, ctx: RecipeContext) -> BuildInputs:
    """Everything a recipe's build may depend on (ctx: optcli/backends/recipe.RecipeContext): the cache key."""
    from optcli.environment import package_version
    from optcli.quantize.flavour import u8s8_saturates
    from optcli.stages.base import config_dict

    q = {k: v for k, v in config_dict(ctx.stage.config.quantize).items() if k not in ("calib", "eval")}
    inputs: BuildInputs = {
        # every graph the stages made (a recipe may start from any: the exporter's, the fused one); the
        # user's own file shows through them, and hashing a large .pt2 again costs seconds
        "candidate": [cand.name, cand.backend, cand.precision, cand.recipe],
        "lineage": [a.sha256 for a in ctx.lineage if a.stage and a.path.is_file()], "quantize": q,
        # OpenVINO's recipes start from the exporter's graph with the unpad rewrite where the stage applied
        # it (a function of the lineage above); entries from before that rule are not reused
        "first_float_onnx": "with the unpad rewrite (2026-11-24)",
        "nncf_calibration": "in batches of 8 rows by length (2026-11-27)",  # ir.CALIBRATION_BATCH
        "calib": ctx.calib.digest() if ctx.calib is not None else None, "eval": ctx.eval.digest(),
        "tolerance": ctx.tolerance.to_json(), "cpu": cpu_name_and_versions(package_version),
        # INT8 recipes follow the instruction set (7-bit weights without VNNI: optcli/cpu/isa.py)
        "u8s8_saturates": u8s8_saturates()}
    if cand.recipe == "requantize-s8s8":  # its fallback runs only when no other OpenVINO INT8 passed
        inputs["others_passed"] = any(c.passed for c in ctx.candidates if c.backend == cand.backend
                                      and c.precision == "int8")
    return inputs


def cpu_name_and_versions(package_version: Callable[[str], str | None]) -> MachineKey:
    from optcli.backends import registry
    from optcli.environment import cpu_name

    packages = {p for b in registry.all_backends() if b.offers_cpu() for p in (b.package, *b.build_packages) if p}
    return {"cpu": cpu_name(), "versions": {p: package_version(p) for p in sorted(packages)}}


def _link(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    dst.unlink(missing_ok=True)
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def load(cache_dir: Path, key: str, folder: Path) -> tuple[Path, CachedBuild] | None:
    """(the model file placed in `folder`, its build record) for a valid entry, else None."""
    entry = cache_dir / key
    record_path = entry / RECORD
    try:
        record = json.loads(record_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        return None
    if not isinstance(record, dict) or record.get("key") != key or not isinstance(record.get("files"), dict) \
            or not record["files"] or not isinstance(record.get("build"), dict):
        return None
    from optcli.runtime.recorded_options import problem

    raw: dict[str, object] = record["build"]
    fmt, details, options = raw.get("format"), raw.get("details"), raw.get("runner_options")
    if not isinstance(fmt, str) or not isinstance(details, dict) or not isinstance(options, dict) \
            or problem(fmt, options):
        return None  # a mistyped record, or runner options beyond what a record may carry: rebuilt
    build = CachedBuild(format=fmt, details=details, runner_options=options)
    try:
        files = [(contained(entry, name, record_path), sha) for name, sha in record["files"].items()]
    except UsageError:
        return None  # a record naming a file outside its entry is not ours to follow
    if not all(p.is_file() and sha256_file(p) == sha for p, sha in files):
        return None
    for p, _ in files:
        _link(p, folder / p.name)
    return folder / next(iter(record["files"])), build


def store(cache_dir: Path, key: str, model: Path, build: CachedBuild) -> None:
    """Keep `model` (and its companion files, e.g. an IR's .bin) under `key`."""
    from optcli.backends.registry import companion_files

    entry = cache_dir / key
    files = [model, *companion_files(model)]
    if not all(f.is_file() for f in files):
        return
    for f in files:
        _link(f, entry / f.name)
    record = {"key": key, "files": {f.name: sha256_file(entry / f.name) for f in files}, "build": build}
    write_text_atomic(entry / RECORD, json.dumps(record, indent=2, default=str))

