"""One backend's part of a Triton export: how its model file is read and copied, what config.pbtxt says
for it, and what its README adds. Each backend that Triton serves has one, optcli/backends/<name>/triton.py
(an instance named TRITON, named by the descriptor's `triton`); export-triton asks the registry for it.
Also what a piece reads and returns: the user's TritonOptions and the ServedModel."""
from __future__ import annotations

import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from optcli.tensor_spec import TensorSpec

if TYPE_CHECKING:
    from optcli.backends.tensorrt.engine_metadata import Profile
    from optcli.report import FinalArtifact, RunReport


@dataclass
class ServedModel:
    """One model file and everything Triton's config needs to know about it."""

    path: Path
    format: str                      # the artifact format (onnx | engine | openvino ...)
    platform: str                    # Triton's name for its backend (onnxruntime_onnx | tensorrt_plan | openvino)
    filename: str                    # the name Triton expects in the version folder
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]
    precision: str
    default_kind: str                # cpu | gpu: where the artifact was built to run
    default_name: str
    source: str                      # one line for the README: where this came from
    external_data: list[str] = field(default_factory=list)       # ONNX weights files beside `path`
    profiles: list[dict[str, Profile]] = field(default_factory=list)  # TensorRT optimization profiles
    shape_hints: dict[str, tuple[int, ...]] = field(default_factory=dict)  # concrete full input shapes known
    facts: Mapping[str, object] = field(default_factory=dict)  # what its Triton piece learnt reading the file
    piece: Any = None                # a TritonBackend other than the format's own (the Python backend's)

    @property
    def batchable(self) -> bool:
        """Triton batching needs dim 0 of every input and output to be the (dynamic) batch dim."""
        return all(s.shape and not isinstance(s.shape[0], int) for s in self.inputs + self.outputs)

    def batch_blocker(self) -> str | None:
        """Why the model cannot batch (the first tensor whose dim 0 is fixed or missing), or None."""
        from optcli.batch_merge import batch_blocker

        return batch_blocker(self.inputs, self.outputs)

    def profile_max_batch(self) -> int | None:
        """The largest batch the engine's profiles accept for every input, or None when unknown."""
        best = None
        for prof in self.profiles:
            limits = [prof[s.name][2][0] for s in self.inputs if s.name in prof and s.shape]
            if limits and len(limits) == len(self.inputs):
                best = max(best or 0, min(limits))
        return best


@dataclass
class TritonOptions:
    """How the model is served; None means "decide from the artifact" (documented in docs/deploy.md)."""

    max_batch_size: int | None = None
    dynamic_batching: bool | None = None          # None: on whenever max_batch_size > 0
    preferred_batch_sizes: list[int] = field(default_factory=list)
    max_queue_delay_us: int | None = None
    preserve_ordering: bool = False
    instances: int = 1
    kind: str | None = None                       # cpu | gpu
    graph_level: str | None = None                # ONNX Runtime: all | extended | basic | disabled
    intra_op_threads: int | None = None           # ONNX Runtime threads per instance
    ort_tensorrt: bool = False                    # ONNX on GPU through ONNX Runtime's TensorRT provider
    warmup: bool = True
    backend: str | None = None                    # "python": Triton's Python backend runs optcli's runner
    inputs: list[TensorSpec] = field(default_factory=list)  # concrete shapes for warm-up and perf_analyzer
    # Python backend: a request whose inputs take more bytes is refused before the model runs on it.
    max_request_bytes: int = 64 * 2**20
    # Python backend: how an encoder's requests of different lengths share a call (optcli/batching.py's padding).
    padding: str = "auto"




class TritonBackend:
    """Defaults fit a one-file model on a backend with no options of its own."""

    platform: ClassVar[str]                    # Triton's name for the backend (config.pbtxt)
    config_key: ClassVar[str] = "platform"     # "platform", or "backend" where Triton names it so
    kinds: ClassVar[tuple[str, ...]] = ("cpu", "gpu")   # instance kinds it can serve on
    types: ClassVar[frozenset[str]]            # the Triton data types it serves
    release_note: ClassVar[str] = ""           # README: which Triton release to pick ("whose ... :")

    def served(self, path: Path) -> ServedModel:
        """Read the model file at `path` into what the config builder needs."""
        raise NotImplementedError

    def from_report(self, model: ServedModel, report: RunReport, final: FinalArtifact) -> None:
        """Adjust `model` to what the run's report says (e.g. where it was built to run)."""

    def check(self, opts: TritonOptions, kind: str) -> None:
        """Refuse options that do not apply to this backend (one-line UsageErrors)."""

    def default_max_batch(self, model: ServedModel) -> int | None:
        """max_batch_size when none was asked for and the model batches; None: optcli's default."""
        return None

    def check_max_batch(self, model: ServedModel, requested: int, notes: list[str]) -> None:
        """Refuse (or note) a --max-batch-size the model cannot take."""

    def batching_notes(self, model: ServedModel, notes: list[str]) -> None:
        """Notes about batching on this backend, when batching is on."""

    def instance_group(self, model: ServedModel, group: dict[str, object]) -> None:
        """Add backend-specific keys to the instance group."""

    def extra_config(self, model: ServedModel, opts: TritonOptions, kind: str, notes: list[str]
                     ) -> dict[str, object]:
        """config.pbtxt entries of this backend (optimization, parameters); None values are left out."""
        return {}

    def copy(self, model: ServedModel, dest: Path) -> Path:
        """Copy the model into the version folder `dest`; returns the file (or folder) written."""
        target = dest / model.filename
        shutil.copy2(model.path, target)
        return target

    def readme_files(self, model: ServedModel, version: int) -> str:
        """The README line naming the backend and the model files."""
        return f"- platform: `{model.platform}`; model file: `{version}/{model.filename}`"

    def readme_facts(self, model: ServedModel) -> list[str]:
        """More README lines about the model (e.g. what a TensorRT engine is tied to)."""
        return []

    def readme_release(self, model: ServedModel) -> str:
        return self.release_note


def triton_piece(fmt: str) -> TritonBackend:
    """The Triton piece of the backend that runs `fmt` artifacts (UsageError where Triton cannot serve it)."""
    from optcli.backends.registry import for_format, load_object, with_triton
    from optcli.errors import UsageError

    backend = for_format(fmt)
    if backend.triton is None:
        served = ", ".join(b.format for b in with_triton())
        raise UsageError(f"Triton export takes {served} artifacts, not {fmt}",
                         hint="serve an exported ONNX instead (the run's NN-export/model.onnx)")
    return load_object(backend.triton)


def piece_of(model: ServedModel) -> TritonBackend:
    """The Triton piece that serves `model`: its own (the Python backend's), else its format's."""
    return model.piece if model.piece is not None else triton_piece(model.format)
