"""What to serve: a run's report.json (its final artifact), or a model file a backend with a Triton piece
reads (an ONNX file, an OpenVINO IR, a TensorRT engine with its metadata), resolved into one ServedModel
that the config builder and the repository writer read."""
from __future__ import annotations

import json
import re
from pathlib import Path

from optcli.deploy.triton_backend import ServedModel
from optcli.errors import UsageError
from optcli.report import InputRecord, LatencyStats, Precision

__all__ = ["BACKEND_PYTHON", "ServedModel", "default_name", "resolve_source"]
BACKEND_PYTHON = "python"        # optcli's runner in Triton's Python backend (optcli/deploy/triton_python.py)


def resolve_source(source: str | Path) -> ServedModel:
    """A report.json (or the run folder holding one), an .onnx file, an OpenVINO .xml, or an .engine/.plan."""
    path = Path(source)
    if path.is_dir():
        if not (path / "report.json").is_file():
            raise UsageError(f"{path} is a folder without report.json",
                             hint="pass a run's report.json, an .onnx file or an .engine/.plan file")
        path = path / "report.json"
    if not path.is_file():
        raise UsageError(f"{path} does not exist", hint="pass a run's report.json, an .onnx file or an .engine file")
    suffix = path.suffix.lower()
    if suffix == ".json":
        return _from_report(path)
    from optcli.backends.registry import load_object, with_triton

    for backend in with_triton():
        if suffix in backend.suffixes:
            return load_object(str(backend.triton)).served(path)  # with_triton() lists only those with one
    raise UsageError(f"{path}: cannot serve a {suffix or 'suffix-less'} file on Triton",
                     hint="pass a run's report.json, an .onnx, an OpenVINO .xml or an .engine/.plan file")


def default_name(path: Path) -> str:
    """The file's stem; for a generic model.onnx/model.engine, the run folder it sits in (not NN-stage)."""
    if path.stem not in ("model", "engine"):
        return path.stem
    for parent in path.resolve().parents:
        if parent.name and not re.match(r"^\d+-", parent.name):
            return parent.name
    return path.stem


def _from_report(path: Path) -> ServedModel:
    from optcli.report import RunReport

    hint = "pass the report.json optcli compile wrote"
    try:
        report = RunReport.load(path, hint)
    except UsageError:
        raw = _json_object(path)
        if raw is not None and "inputs" in raw and "stages" not in raw:
            raise UsageError(f"{path} is not an optcli run report",
                             hint="that looks like engine metadata: pass the engine file beside it") from None
        raise
    from optcli.backends.registry import load_object, with_triton

    artifact = report.final_artifact(path, "rerun optcli compile until it succeeds, or pass an artifact file directly")
    final = report.final
    assert final is not None  # final_artifact refused a report without one
    fmt = final.format
    backend = next((b for b in with_triton() if fmt in b.formats), None)
    if backend is None:
        served = [b.format for b in with_triton()]
        raise UsageError(f"{path}: the final artifact is {fmt!r}; Triton export takes {', '.join(served[:-1])} or "
                         f"{served[-1]} artifacts",
                         hint="serve an exported ONNX instead (the run's NN-export/model.onnx)")
    piece = load_object(str(backend.triton))  # with_triton() lists only those with one
    model = piece.served(artifact)
    # Everything below is data from a file: only values of the expected types are used.
    model.precision = str(final.precision) if final.precision in tuple(Precision) else model.precision
    model_info = report.model  # typed by RunReport.load, but its values are still unchecked data from a file
    if isinstance(model_info.path, str) and model_info.path:
        model.default_name = Path(model_info.path).stem
    piece.from_report(model, report, final)
    # The run's own input shapes: concrete ones (user pins) size the warm-up and perf_analyzer shapes.
    inputs = model_info.inputs if isinstance(model_info.inputs, list) else []
    known = {s.name for s in model.inputs}
    for spec in inputs:
        shape = spec.shape if isinstance(spec, InputRecord) else None
        if isinstance(shape, list) and shape and all(type(d) is int and d > 0 for d in shape) \
                and isinstance(spec, InputRecord) and spec.name in known:
            model.shape_hints.setdefault(spec.name, tuple(shape))
    # Optimizers the run had to switch off to load the artifact (e.g. NCHWc for an fp16 graph).
    latency = final.latency_ms
    settings = latency.settings if isinstance(latency, LatencyStats) and isinstance(latency.settings, dict) else {}
    disabled = settings.get("disabled_optimizers")
    model.facts = {**model.facts,
                   "disabled_optimizers": [str(o) for o in disabled] if isinstance(disabled, list) else []}
    model.source = f"{path} (final artifact {final.artifact}, {model.precision})"
    return model


def _json_object(path: Path) -> dict[str, object] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        return None
    return data if isinstance(data, dict) else None
