"""Runs an AOTInductor package (.pt2 made by aoti_compile_and_package) on the CPU.

The package is a compiled shared library: opening it loads and runs native code, so open only
packages you built or trust (docs/security.md). Input specs and output names come from the
metadata optcli wrote into the package; a package built elsewhere needs `inputs=["x:1x3x224x224"]`.
`concurrency=N` loads the package with N model runners, so N calls run at once.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from optcli.backends.inductor.files import is_package
from optcli.backends.torch.runner import TorchRunner
from optcli.errors import UsageError
from optcli.optional_imports import require
from optcli.runtime.base import BackendFeeds
from optcli.tensor_spec import TensorSpec, parse_input_spec, with_default_dtype

_HINT = "rebuild it with `optcli compile MODEL --backend inductor`"


def _specs(metadata: dict[str, str], pinned: list[str | TensorSpec] | None) -> tuple[list[TensorSpec], list[str]]:
    """Input specs (the caller's pins first, else the package's record) and output names."""
    names: list[str] = []
    try:
        outputs = json.loads(metadata.get("optcli.outputs", "[]"))
        names = [str(n) for n in outputs] if isinstance(outputs, list) else []
        recorded = json.loads(metadata.get("optcli.inputs", "[]"))
        specs = [TensorSpec(str(r["name"]), tuple(d if isinstance(d, int) else str(d) for d in r["shape"]),
                            str(r["dtype"])) for r in recorded]
    except (ValueError, TypeError, KeyError):
        specs = []
    if pinned:
        specs = [with_default_dtype(parse_input_spec(p) if isinstance(p, str) else p) for p in pinned]
    return specs, names


class InductorRunner(TorchRunner):
    """An AOTInductor package on the CPU. Options: `threads` (default all cores), `concurrency`,
    `inputs` (pins, for packages optcli did not build)."""

    backend = "inductor-cpu"

    def __init__(self, path: str | Path, *, inputs: list[str | TensorSpec] | None = None, concurrency: int = 1,
                 threads: int | None = None, device: str = "cpu") -> None:
        require("torch", "running AOTInductor packages")  # names the extra where torch is missing
        if device != "cpu":
            raise UsageError(f"this AOTInductor package runs on the CPU, not {device!r}", hint="pass device='cpu'")
        self.path = Path(path)
        if not self.path.is_file() or not is_package(self.path):
            raise UsageError(f"{self.path} is not an AOTInductor package", hint=_HINT)
        from torch._inductor.package import load_package

        from optcli.backends.inductor.quiet import quiet

        try:
            with quiet():
                model = load_package(str(self.path), num_runners=concurrency)
        except Exception as exc:  # the loader raises RuntimeError with C++ text
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
            raise UsageError(f"cannot load the AOTInductor package {self.path.name}: {first}",
                             hint=f"it was compiled for another CPU or torch version; {_HINT}") from exc
        self.metadata = dict(model.get_metadata())
        specs, names = _specs(self.metadata, inputs)
        if not specs:
            raise UsageError(f"{self.path.name} records no input shapes",
                             hint="pass inputs=['x:1x3x224x224'] (name:shape:dtype per input)")
        self.precision = self.metadata.get("optcli.precision", "fp32")
        super().__init__(model, specs, output_names=names or None,
                         threads=threads or max(1, (os.cpu_count() or 1) // concurrency), concurrency=concurrency)
        self.backend = "inductor-cpu"  # TorchRunner names itself torch-<device>

    @property
    def settings(self) -> dict[str, object]:
        return {"intra_op_threads": self.threads, "mode": "aot-inductor", "device": "cpu",
                "precision": self.precision, "isa": self.metadata.get("AOTI_CPU_ISA")}

    def _run(self, handle: Any, feeds: BackendFeeds) -> list[Any]:
        # The loader's flat entry point: tensors in input order in, tensors in output order out.
        with self.torch.inference_mode():
            out = handle.loader.boxed_run([feeds[s.name] for s in self.inputs])
        flat = [t.numpy() for t in out]
        if not self.outputs:
            self.outputs = [TensorSpec(f"output_{i}", (), str(t.dtype)) for i, t in enumerate(flat)]
        return flat
