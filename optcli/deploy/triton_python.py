"""The Python-backend target of a Triton repository (`export-triton --backend python`, and what
`optcli serve` runs): the artifact copied into the version folder beside a generated `model.py`
whose TritonPythonModel opens it with optcli's runner (optcli/serve/triton_model.py).

Any artifact optcli runs this way serves on any Triton that has the Python backend, including the
one in the `nvidia-pytriton` wheel (`optcli serve`); the price is that the Python environment
Triton's Python backend runs needs optcli and the artifact's runtime (docs/serve.md). The runner
options a stage recorded for the artifact (stage.json, which is not copied) are written into
model.py as a JSON string, so the model runs in Triton as it ran when optcli measured it.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from optcli.deploy.engine_metadata import metadata_path_for
from optcli.deploy.triton_source import BACKEND_PYTHON, ServedModel, resolve_source
from optcli.errors import UsageError
from optcli.version import __version__

# The artifact's file name in the version folder, by format (an engine keeps its metadata beside it).
_FILENAMES = {"onnx": "model.onnx", "openvino": "model.xml", "engine": "model.engine"}

MODEL_PY = '''"""Triton Python-backend model written by optcli {version} ({command}).

Runs {filename} (beside this file) with optcli's runner and runs each batch Triton's dynamic batcher
forms as one call. Needs optcli and the model's runtime in the Python environment that Triton's
Python backend runs (docs/serve.md in optcli).
"""
import json
from pathlib import Path

from optcli.serve.triton_model import OptcliTritonModel


class TritonPythonModel(OptcliTritonModel):
    ARTIFACT = Path(__file__).with_name({filename!r})
    # The runner options optcli measured this artifact with (as JSON: data, not code).
    RUNNER_OPTIONS = json.loads({options!r})
'''


def python_backend_model(source: str | Path) -> ServedModel:
    """The ServedModel of any artifact optcli can serve (a report.json or its folder, .onnx, an
    OpenVINO .xml, an .engine with its metadata), for Triton's Python backend."""
    from optcli.benchmark.artifacts import resolve_artifact

    resolved = resolve_artifact(source)  # a report's final artifact is checked (sha256) once, here
    if resolved.format not in _FILENAMES:
        raise UsageError(f"{source}: a {resolved.format} artifact is not served through Triton",
                         hint="compile it first (optcli compile) and serve the run's report.json")
    model = resolve_source(resolved.path)  # the file itself: its tensors, read from the graph or metadata
    model.platform = BACKEND_PYTHON
    model.filename = _FILENAMES[resolved.format]
    model.external_data = model.external_data if resolved.format == "onnx" else []
    model.facts["runner_options"] = dict(resolved.runner_options)
    model.source = f"{source} ({resolved.format}, {resolved.precision}, run by optcli's runner)"
    return model


def write_python_model(model: ServedModel, dest: Path, *, threads: int | None = None,
                       command: str = "optcli export-triton --backend python") -> Path:
    """Copy the artifact (with its weights / metadata) into `dest` and write model.py; returns model.py."""
    target = dest / model.filename
    shutil.copy2(model.path, target)
    if model.format == "openvino":
        shutil.copy2(model.path.with_suffix(".bin"), target.with_suffix(".bin"))
    elif model.format == "engine":
        meta = metadata_path_for(model.path)
        if meta is not None:
            shutil.copy2(meta, dest / f"{model.filename}.json")
    for rel in model.external_data:  # ONNX weights keep their place relative to the graph
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(model.path.parent / rel, dest / rel)
    options: dict[str, Any] = dict(model.facts.get("runner_options") or {})
    if threads:
        options["threads"] = threads
    text = MODEL_PY.format(version=__version__, command=command, filename=model.filename,
                           options=json.dumps(options, sort_keys=True))
    path = dest / "model.py"
    path.write_text(text, encoding="utf-8")
    return path
