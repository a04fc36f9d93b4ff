"""ONNX Runtime runner: CPU by default, CUDA/TensorRT execution providers where onnxruntime-gpu works."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from optcli.errors import DeviceUnavailableError, UsageError
from optcli.input_limits import max_dims
from optcli.optional_imports import require
from optcli.runtime.base import BackendFeeds, Runner
from optcli.tensor_spec import TensorSpec

_LEVELS = ("disabled", "basic", "extended", "all")
_ORT_TYPES = {"tensor(float)": "float32", "tensor(float16)": "float16", "tensor(double)": "float64",
              "tensor(int64)": "int64", "tensor(int32)": "int32", "tensor(int8)": "int8",
              "tensor(uint8)": "uint8", "tensor(bool)": "bool"}
_PROVIDERS = {"cpu": "CPUExecutionProvider", "cuda": "CUDAExecutionProvider",
              "tensorrt": "TensorrtExecutionProvider"}


def _spec(arg: Any) -> TensorSpec:
    shape = tuple(d if isinstance(d, int) else (d or f"dim{i}") for i, d in enumerate(arg.shape))
    return TensorSpec(arg.name, shape, _ORT_TYPES.get(arg.type, arg.type))


class OnnxRuntimeRunner(Runner):
    """Runs an .onnx file with onnxruntime.

    `optimization` is the session's graph optimization level; "disabled" is how the pipeline
    measures a stage's own effect (ORT would otherwise apply the same fusions at load time).
    """

    def __init__(self, path: str | Path, *, device: str = "cpu", optimization: str = "all",
                 threads: int | None = None, concurrency: int = 1, disabled_optimizers: list[str] | None = None,
                 profile_prefix: str | None = None) -> None:
        if optimization not in _LEVELS:
            raise UsageError(f"unknown optimization level {optimization!r}", hint=f"use one of {_LEVELS}")
        if device not in _PROVIDERS:
            raise UsageError(f"unknown device {device!r}", hint=f"use one of {', '.join(_PROVIDERS)}")
        self.ort = require("onnxruntime", "running ONNX models")
        self.path = Path(path)
        self.device = device
        self.optimization = optimization
        cores = os.cpu_count() or 1
        self.threads = threads or max(1, cores // concurrency)
        self.disabled_optimizers = list(disabled_optimizers or [])
        self.profile_prefix = profile_prefix
        self.backend = f"onnxruntime-{device}"
        self._model_bytes_path = str(self.path)
        first = self._new_session()
        super().__init__([_spec(i) for i in first.get_inputs()], [_spec(o) for o in first.get_outputs()],
                         concurrency)
        self.max_dims = max_dims(first.get_modelmeta().custom_metadata_map, self.inputs)
        self._handles.put(first)
        for _ in range(concurrency - 1):
            self._handles.put(self._make_handle())

    @property
    def settings(self) -> dict[str, object]:
        return {"graph_optimization": self.optimization, "intra_op_threads": self.threads,
                "providers": self._providers(), "disabled_optimizers": self.disabled_optimizers}

    def _providers(self) -> list[str]:
        if self.device == "cpu":
            return ["CPUExecutionProvider"]
        return [_PROVIDERS[self.device], "CPUExecutionProvider"]

    def _new_session(self) -> Any:
        ort = self.ort
        so = ort.SessionOptions()
        so.graph_optimization_level = {
            "disabled": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
            "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
            "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
            "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL}[self.optimization]
        so.intra_op_num_threads = self.threads
        so.inter_op_num_threads = 1
        so.log_severity_level = 3
        if self.profile_prefix:
            so.enable_profiling = True
            so.profile_file_prefix = self.profile_prefix
        if self.device != "cpu" and hasattr(ort, "preload_dlls"):
            # onnxruntime-gpu finds CUDA and cuDNN from their pip packages only when asked (or after torch
            # loaded them); without it a CUDA session quietly runs on the CPU.
            ort.preload_dlls()
        try:
            session = ort.InferenceSession(self._model_bytes_path, sess_options=so, providers=self._providers(),
                                           disabled_optimizers=self.disabled_optimizers or None)
        except Exception as exc:  # ORT raises its own Fail/InvalidGraph/NotImplemented types
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            hint = "check the model with `python -m onnx.checker`, or try --debug"
            if "IR version" in first:
                # onnx >= 1.23's make_model writes IR versions newer onnxruntime builds may refuse.
                hint = "re-save the model with an older IR version (model.ir_version = 10), or upgrade onnxruntime"
            raise UsageError(f"onnxruntime cannot load {self.path.name}: {first[:300]}", hint=hint) from exc
        wanted = _PROVIDERS[self.device]
        if session.get_providers()[0] != wanted:
            # onnxruntime falls back to the CPU with only a warning (a CPU-only onnxruntime, or
            # onnxruntime-gpu without a usable CUDA): a figure labelled cuda would be the CPU's.
            raise DeviceUnavailableError(
                f"device {self.device!r}: onnxruntime could not use {wanted} "
                f"(it has {', '.join(ort.get_available_providers())})",
                hint="install onnxruntime-gpu built for this machine's CUDA (pip install 'optcli[gpu]', not beside "
                     "onnxruntime) on a machine with an NVIDIA GPU, or use device='cpu'")
        return session

    def _make_handle(self) -> Any:
        return self._new_session()

    def _run(self, handle: Any, feeds: BackendFeeds) -> list[Any]:
        try:
            return handle.run(None, feeds)
        except Exception as exc:  # ORT's own types; shapes that disagree inside the graph end here
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise UsageError(f"onnxruntime could not run {self.path.name}: {first[:300]}",
                             hint=f"inputs: {self.describe_inputs()}") from exc

    def end_profiling(self) -> list[str]:
        """Stop profiling on every session; returns the JSON trace files written."""
        files = []
        handles = []
        while not self._handles.empty():
            h = self._handles.get_nowait()
            handles.append(h)
            files.append(h.end_profiling())
        for h in handles:
            self._handles.put(h)
        return files
