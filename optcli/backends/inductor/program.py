"""The exported program AOTInductor compiles: the user's .pt2 as it is, or torch.export of the module
with a dynamic batch. TorchScript cannot be exported (torch.export refuses ScriptModules)."""
from __future__ import annotations

import hashlib
import io
from typing import Any

from optcli.errors import StageError, UsageError, model_error_line
from optcli.optional_imports import require
from optcli.tensor_spec import TensorSpec, random_inputs

EXAMPLE_BATCH = 2  # never 1: a batch-1 example lets torch.export specialise the batch dim


def exported_program(torch_model: Any, inputs: list[TensorSpec]) -> Any:
    """An ExportedProgram of the model: the .pt2's own, else torch.export with dim 0 dynamic."""
    torch = require("torch", "compiling with AOTInductor")
    if torch_model.exported_program is not None:
        return torch_model.exported_program
    if isinstance(torch_model.module, torch.jit.ScriptModule):
        raise UsageError("AOTInductor compiles torch.export programs; TorchScript cannot be exported",
                         hint="save the model with torch.export.save as .pt2, or pass file.py:factory")
    args = example_args(inputs, torch_model.int_high)
    dynamic = isinstance(inputs[0].shape[0], str) if inputs and inputs[0].shape else False
    dims = {s.name: ({0: torch.export.Dim.DYNAMIC} if dynamic else None) for s in inputs}
    try:
        from optcli.backends.inductor.quiet import quiet

        with quiet():
            if torch_model.keyword_module is not None:  # inputs by keyword: export the user's module
                constants = getattr(torch_model.module, "constants", {})
                return torch.export.export(torch_model.keyword_module, (),
                                           kwargs={**dict(zip([s.name for s in inputs], args)), **constants},
                                           dynamic_shapes={**dims, **{k: None for k in constants}})
            return torch.export.export(torch_model.module, args, dynamic_shapes=tuple(dims.values()))
    except Exception as exc:  # torch.export raises anything; the one line says why
        raise StageError(f"torch.export failed: {model_error_line(exc)}",
                         hint="AOTInductor needs a model torch.export can trace; --debug prints the traceback"
                         ) from exc


def example_args(inputs: list[TensorSpec], int_high: dict[str, int], batch: int = EXAMPLE_BATCH) -> tuple[Any, ...]:
    """Random example tensors in input order (dim 0 = `batch` where it is dynamic)."""
    torch = require("torch", "compiling with AOTInductor")
    feeds = random_inputs(inputs, batch, seed=1234, int_high=int_high)
    return tuple(torch.from_numpy(feeds[s.name]) for s in inputs)


def output_names(program: Any) -> list[str]:
    """The program's user output names (as optcli's other runners name them for a .pt2)."""
    return [str(n) for n in program.graph_signature.user_outputs]


def program_digest(program: Any) -> str:
    """sha256 of the serialized program (graph and weights): the package cache's input hash.
    torch.export.save writes the same bytes for the same program."""
    torch = require("torch", "compiling with AOTInductor")
    buf = io.BytesIO()
    torch.export.save(program, buf)
    return hashlib.sha256(buf.getvalue()).hexdigest()
