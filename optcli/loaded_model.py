"""What `optcli.load` returns and how: any artifact a registered backend runs (.onnx, an OpenVINO .xml,
.engine, .pt2 or TorchScript), a report.json (its final artifact) or an output folder, resolved to a
ResolvedArtifact and opened as that backend's Runner. `optcli.load`, `bench`, `profile` and `compare` all
open through here.

The runner options a stage recorded for its artifact (e.g. the FP16 stage turns off one onnxruntime
optimizer that crashes on FP16 graphs) come from the stage.json beside it, so a model runs the same
way whether it is opened from the report or by its path. Only the few its backend allows a record to
carry (optcli/runtime/recorded_options.py): threads, a profile's path and the like come from the caller.
"""
from __future__ import annotations

import inspect
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from optcli.errors import UsageError
from optcli.runtime.base import Runner
from optcli.runtime.recorded_options import checked

_HINT = "pass a report.json, an optcli output folder, or a .onnx/.engine/.pt2/TorchScript file"


@dataclass
class ResolvedArtifact:
    """Where the model to run is and how to open it."""

    path: Path
    format: str
    precision: str = "fp32"
    runner_options: dict[str, object] = field(default_factory=dict)   # JSON values, checked per backend
    report: Path | None = None          # the report.json it came from, if any

    @property
    def size_bytes(self) -> int:
        """The file's size, or a folder's (an engine cache entry) files' together."""
        if self.path.is_dir():
            return sum(p.stat().st_size for p in self.path.rglob("*") if p.is_file())
        return self.path.stat().st_size

    def to_json(self) -> dict[str, str | int | None]:
        from optcli.artifact import sha256_file

        return {"path": str(self.path), "format": self.format, "precision": self.precision,
                "sha256": sha256_file(self.path), "size_bytes": self.size_bytes,
                "report": str(self.report) if self.report else None}


def _from_report(report_path: Path) -> ResolvedArtifact:
    from optcli.report import RunReport

    report = RunReport.load(report_path, _HINT)
    path = report.final_artifact(report_path,
                                 "rerun `optcli compile` until it finishes, or pass a stage's artifact file")
    assert report.final is not None  # final_artifact refused a report without one
    resolved = _from_file(path, sha256=report.final.sha256)  # final_artifact checked the file against it
    resolved.precision = str(report.final.precision or resolved.precision)
    resolved.report = report_path
    return resolved


def _stage_record(path: Path, sha256: str | None) -> dict[str, object]:
    """The stage.json beside an artifact, if that record describes this very file (same name and
    sha256): its runner options then apply (those a record may carry); a record of another file is ignored."""
    from optcli.artifact import sha256_file

    record_path = path.parent / "stage.json"
    if not record_path.is_file():
        return {}
    try:
        record = json.loads(record_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        return {}
    if not isinstance(record, dict) or record.get("artifact") != path.name:
        return {}
    return {str(k): v for k, v in record.items()} if record.get("sha256") == (sha256 or sha256_file(path)) else {}


def _from_file(path: Path, sha256: str | None = None) -> ResolvedArtifact:
    """`sha256`: the file's, where the caller already checked it (saves hashing a large model twice)."""
    from optcli.backends.registry import for_path

    found = for_path(path)
    if found is None:
        raise UsageError(f"{path}: cannot tell what runs a {path.suffix.lower() or 'suffix-less'} file", hint=_HINT)
    fmt = found[1]
    record = _stage_record(path, sha256)
    meta = record.get("meta", {})
    options = meta.get("runner_options", {}) if isinstance(meta, dict) else meta
    options = checked(fmt, options, path.parent / "stage.json") if record else {}
    precision = str(record["precision"]) if isinstance(record.get("precision"), str) else "fp32"
    return ResolvedArtifact(path, fmt, precision, options)


def resolve_artifact(path: str | Path) -> ResolvedArtifact:
    """Work out the artifact file and format behind what the user passed."""
    p = Path(path)
    if not p.exists():
        raise UsageError(f"not found: {p}", hint=_HINT)
    if p.is_dir():
        if (p / "report.json").is_file():
            return _from_report(p / "report.json")
        from optcli.backends.registry import for_folder

        found = for_folder(p)  # e.g. a TensorRT engine cache entry
        if found is not None:
            return _from_file(found[1])
        from optcli.backends.registry import is_onnx_file

        if is_onnx_file(p) and (p / p.name).is_file():
            return _from_file(p / p.name)  # Triton's model.onnx/ folder: a graph and its external weights
        raise UsageError(f"{p} is a folder without a report.json", hint=_HINT)
    if p.stat().st_size == 0:
        raise UsageError(f"{p} is empty", hint="re-create it; the file has no bytes")
    if p.suffix.lower() == ".json":
        return _from_report(p)
    return _from_file(p)


def _check_options(cls: type, options: Mapping[str, object], fmt: str) -> None:
    params = inspect.signature(cls).parameters  # the constructor's, without self
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return
    accepted = sorted(n for n, p in params.items() if n not in ("self", "path") and p.kind is not p.VAR_POSITIONAL)
    unknown = sorted(set(options) - set(accepted))
    if unknown:
        raise UsageError(f"option {unknown[0]!r} does not apply to {fmt} models ({cls.__name__})",
                         hint=f"its options: {', '.join(accepted)}")


def _check_values(options: Mapping[str, object]) -> None:
    """The options every runner takes, typed and bounded before a backend sees them: a wrong type is bad
    input (exit 2), not a TypeError deep in a runtime."""
    from optcli.runtime.thread_limit import check_threads

    check_threads(options.get("threads"), "threads")
    concurrency = options.get("concurrency", 1)
    if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
        raise UsageError(f"concurrency {concurrency!r} is not a whole number >= 1", hint="e.g. concurrency=2")


def open_artifact(resolved: ResolvedArtifact, **options: Any) -> Runner:
    """A runner for the artifact: the stage's recorded runner options, then the caller's on top.
    Options left at None are not passed, so each backend keeps its own default."""
    from optcli.backends.registry import for_format, load_object, runner_class

    cls = runner_class(resolved.format)
    merged = {**resolved.runner_options, **{k: v for k, v in options.items() if v is not None}}
    backend = for_format(resolved.format)
    if backend.device_option and "device" in merged:
        # e.g. TensorRT takes a GPU index for the "cuda" / "cuda:1" the other backends take
        merged["device"] = load_object(backend.device_option)(merged["device"])
    _check_options(cls, merged, resolved.format)
    _check_values(merged)
    return cls(resolved.path, **merged)
