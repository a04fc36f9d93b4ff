"""PyTorch eager runner: the FP32 reference and the "before" of the export stage."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from optcli.errors import UsageError
from optcli.optional_imports import require
from optcli.runtime.base import BackendFeeds, Runner
from optcli.tensor_spec import TensorSpec, parse_input_spec


def flatten_outputs(value: Any) -> list[Any]:
    """A module's outputs as a flat list of tensors (tuples, lists, dicts and dataclass-like objects)."""
    torch = require("torch", "running PyTorch models")
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, dict):
        return [t for v in value.values() for t in flatten_outputs(v)]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in flatten_outputs(v)]
    if hasattr(value, "to_tuple"):  # transformers ModelOutput
        return flatten_outputs(value.to_tuple())
    return []


class TorchRunner(Runner):
    """Runs an nn.Module (or ScriptModule, or an ExportedProgram's module) under inference_mode."""

    backend = "torch-cpu"

    def __init__(self, module: Any, inputs: list[TensorSpec], output_names: list[str] | None = None,
                 threads: int | None = None, concurrency: int = 1, device: str = "cpu") -> None:
        self.torch = require("torch", "running PyTorch models")
        self.module = module
        self.device = device
        self.backend = f"torch-{device}"
        self.threads = threads or os.cpu_count() or 1
        self.torch.set_num_threads(self.threads)
        names = output_names or []
        super().__init__(inputs, [TensorSpec(n, (), "float32") for n in names], concurrency)
        self._start()

    @property
    def settings(self) -> dict[str, object]:
        return {"intra_op_threads": self.threads, "mode": "eager", "device": self.device}

    def _make_handle(self) -> Any:
        return self.module

    def _to_backend(self, value: Any, spec: TensorSpec) -> Any:
        torch = self.torch
        if isinstance(value, torch.Tensor):
            want = getattr(torch, spec.dtype)
            if value.dtype != want:  # the same rules as for numpy: widths may change, kinds may not
                kind = (value.dtype == torch.bool, value.dtype.is_floating_point)
                if kind != (want == torch.bool, want.is_floating_point):
                    raise UsageError(f"input {spec.name!r} has dtype {str(value.dtype).replace('torch.', '')} "
                                     f"but the model takes {spec.dtype}", hint=f"inputs: {self.describe_inputs()}")
                value = value.to(want)
            return value.to(self.device)  # a tensor already there stays put: no copy
        return torch.from_numpy(super()._to_backend(value, spec)).to(self.device)

    def _run(self, handle: Any, feeds: BackendFeeds) -> list[Any]:
        with self.torch.inference_mode():
            out = handle(*[feeds[s.name] for s in self.inputs])
        flat = [t.detach().cpu().numpy() for t in flatten_outputs(out)]
        if not self.outputs:
            self.outputs = [TensorSpec(f"output_{i}", (), str(t.dtype)) for i, t in enumerate(flat)]
        return flat


class TorchFileRunner(TorchRunner):
    """Runs a PyTorch file as saved: `.pt2` (torch.export, input specs from the archive) or TorchScript
    (which records no shapes, so `inputs=["x:1x3x224x224"]` is needed). What `optcli.load` opens for
    the formats `pt2` and `torchscript`."""

    def __init__(self, path: str | Path, *, inputs: list[str | TensorSpec] | None = None, concurrency: int = 1,
                 threads: int | None = None, device: str = "cpu", allow_pickle: bool = False) -> None:
        from optcli.backends.torch.loader import detect, load_torch

        torch = require("torch", "running PyTorch models")
        if device != "cpu" and not (device.startswith("cuda") and torch.cuda.is_available()):
            raise UsageError(f"device {device!r} is not available to PyTorch here",
                             hint="use device='cpu', or a CUDA build of torch on a machine with an NVIDIA GPU")
        source = detect(str(path), allow_pickle=allow_pickle)
        if source.format not in ("pt2", "torchscript", "pickle"):
            raise UsageError(f"{path} is a {source.format} model, not a PyTorch file",
                             hint="open it with optcli.load(), which picks the runner by format")
        pinned = [parse_input_spec(s) if isinstance(s, str) else s for s in inputs or []]
        model = load_torch(source, pinned, device=device)
        names = None
        if model.exported_program is not None:
            names = [str(n) for n in model.exported_program.graph_signature.user_outputs]
        module = model.module.to(device) if device != "cpu" else model.module
        # Each request in flight gets a share of the cores, as the onnxruntime runner does.
        super().__init__(module, model.inputs, output_names=names,
                         threads=threads or max(1, (os.cpu_count() or 1) // concurrency),
                         concurrency=concurrency, device=device)
        self.path = Path(path)
        self.format = source.format
        self.int_high = model.int_high
