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

from optcli.deploy.triton_backend import ServedModel, TritonBackend, TritonOptions, triton_piece
from optcli.deploy.triton_config import TRITON_TYPES
from optcli.deploy.triton_source import BACKEND_PYTHON, resolve_source
from optcli.errors import UsageError
from optcli.version import __version__

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
    # A request whose inputs take more bytes than this is refused before the model runs on it.
    MAX_REQUEST_BYTES = {max_request_bytes}
    # How an encoder's requests of different lengths share a call (optcli/batching.py's padding).
    PADDING = {padding!r}
'''


class PythonTriton(TritonBackend):
    """Triton's Python backend running optcli's runner on the artifact; the artifact's own backend's piece
    (`inner`) still says what its file is, where it runs and how large a batch it takes."""

    platform = BACKEND_PYTHON
    config_key = "backend"
    # model.py passes tensors by DLPack (numpy has no bfloat16; strings do not cross DLPack).
    types = frozenset(TRITON_TYPES.values()) - {"TYPE_BF16", "TYPE_STRING"}
    release_note = "whose image has the Python backend and, installed in it, optcli and the model's runtime:"

    def __init__(self, model: ServedModel, threads: int | None, command: str, max_request_bytes: int,
                 padding: str = "auto") -> None:
        from optcli.batching import PADDING

        if padding not in PADDING:
            raise UsageError(f"padding {padding!r}: must be one of {', '.join(PADDING)}",
                             hint="auto: the cheapest calls of similar length; longest: one call padded to the "
                                  "longest; bucket: calls by length bucket; off: equal shapes only")
        self.inner = triton_piece(model.format)
        self.kinds = self.inner.kinds  # type: ignore[misc]  # the wrapped piece decides
        self.threads, self.command, self.max_request_bytes = threads, command, max_request_bytes
        self.padding = padding

    def check(self, opts: TritonOptions, kind: str) -> None:
        for flag, value in (("--graph-level", opts.graph_level), ("--ort-tensorrt", opts.ort_tensorrt or None)):
            if value is not None:
                raise UsageError(f"{flag} applies to Triton's ONNX Runtime backend, not the Python backend")
        if kind not in self.inner.kinds:
            raise UsageError(f"this artifact runs on the {' or '.join(self.inner.kinds)} only",
                             hint=f"drop --kind {kind}")

    def default_max_batch(self, model: ServedModel) -> int | None:
        return self.inner.default_max_batch(model)

    def check_max_batch(self, model: ServedModel, requested: int, notes: list[str]) -> None:
        self.inner.check_max_batch(model, requested, notes)

    def copy(self, model: ServedModel, dest: Path) -> Path:
        write_python_model(model, dest, threads=self.threads, command=self.command,
                           max_request_bytes=self.max_request_bytes, padding=self.padding)
        return dest / "model.py"

    def readme_files(self, model: ServedModel, version: int) -> str:
        return f"- backend: `python` (`{version}/model.py` runs `{version}/{model.filename}` with optcli's runner)"

    def readme_facts(self, model: ServedModel) -> list[str]:
        return [*self.inner.readme_facts(model), "",
                "The Python backend imports optcli: the Triton image needs it and the model's runtime (e.g. an "
                "image built `FROM nvcr.io/nvidia/tritonserver:<YY.MM>-py3` that runs `pip install 'optcli[cpu]'`). "
                "On one machine, `optcli serve` runs this without Docker (docs/serve.md)."]


def python_backend_model(source: str | Path, *, threads: int | None = None,
                         command: str = "optcli export-triton --backend python",
                         max_request_bytes: int = TritonOptions.max_request_bytes,
                         padding: str = TritonOptions.padding) -> ServedModel:
    """The ServedModel of any artifact optcli can serve through Triton (a report.json or its folder, .onnx,
    an OpenVINO .xml, an .engine with its metadata), for Triton's Python backend."""
    from optcli.loaded_model import resolve_artifact

    resolved = resolve_artifact(source)  # a report's final artifact is checked (sha256) once, here
    model = resolve_source(resolved.path)  # the file itself: its tensors; refuses formats Triton cannot serve
    model.piece = PythonTriton(model, threads, command, max_request_bytes, padding)
    model.platform = BACKEND_PYTHON
    model.facts = {**model.facts, "runner_options": dict(resolved.runner_options)}
    model.source = f"{source} ({resolved.format}, {resolved.precision}, run by optcli's runner)"
    return model


def write_python_model(model: ServedModel, dest: Path, *, threads: int | None = None,
                       command: str = "optcli export-triton --backend python",
                       max_request_bytes: int = TritonOptions.max_request_bytes,
                       padding: str = TritonOptions.padding) -> Path:
    """Copy the artifact (with its companions, external weights and engine metadata) into `dest` and write
    model.py; returns model.py."""
    from optcli.backends.registry import companion_files
    from optcli.backends.tensorrt.engine_metadata import metadata_path_for

    target = dest / model.filename
    shutil.copy2(model.path, target)
    for extra in companion_files(model.path):
        shutil.copy2(extra, target.with_suffix(extra.suffix))
    meta = metadata_path_for(model.path)  # an engine's tensors and profiles (None for other formats)
    if meta is not None:
        shutil.copy2(meta, dest / f"{model.filename}.json")
    for rel in model.external_data:  # ONNX weights keep their place relative to the graph
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(model.path.parent / rel, dest / rel)
    recorded = model.facts.get("runner_options")
    options: dict[str, object] = dict(recorded) if isinstance(recorded, dict) else {}
    if threads:
        options["threads"] = threads
    text = MODEL_PY.format(version=__version__, command=command, filename=model.filename,
                           options=json.dumps(options, sort_keys=True), max_request_bytes=int(max_request_bytes),
                           padding=str(padding))
    path = dest / "model.py"
    path.write_text(text, encoding="utf-8")
    return path
