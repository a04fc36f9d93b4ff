"""Build an AOTInductor package (torch._inductor.aoti_compile_and_package, freezing on) from a PyTorch
model, FP32 or PT2E INT8, through the package cache: the same program on the same machine and torch
compiles once. The package records optcli's input specs and output names in its metadata, so the
runner needs nothing beside it."""
from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from optcli.calibration.dataset import SampleSet
from optcli.errors import StageError, UsageError, model_error_line
from optcli.optional_imports import require
from optcli.tensor_spec import TensorSpec, with_batch

# Freezing folds the weights into the graph as constants, which lets Inductor pre-pack them for
# oneDNN and fold the PT2E quantize/dequantize pairs into INT8 kernels.
INDUCTOR_CONFIGS: dict[str, object] = {"freezing": True}
META_INPUTS, META_OUTPUTS, META_PRECISION = "optcli.inputs", "optcli.outputs", "optcli.precision"
PRECISIONS = ("fp32", "int8")


def machine() -> dict[str, str | int | None]:
    """What a package is compiled for: it runs only where these match (the cache key holds them)."""
    torch = require("torch", "compiling with AOTInductor")
    from torch._inductor.cpu_vec_isa import pick_vec_isa

    from optcli.environment import cpu_name, package_version

    return {"torch": torch.__version__, "torchao": package_version("torchao"), "cpu": cpu_name(),
            "isa": str(pick_vec_isa()), "cores": os.cpu_count()}


def build_package(torch_model: Any, inputs: list[TensorSpec], out: Path, *, precision: str = "fp32",
                  calib: SampleSet | None = None, batch: int = 1, cache: Any = None,
                  force: bool = False) -> dict[str, object]:
    """Compile the model into the package `out` (a path ending .pt2); returns how it was made.
    `cache`: a PackageCache, or None for none (`force`: compile anyway, then store). INT8 needs `calib`
    and is compiled for `batch` alone (optcli/backends/inductor/int8.py says why)."""
    from optcli.backends.inductor.program import example_args, exported_program, output_names, program_digest

    if precision not in PRECISIONS:
        raise UsageError(f"--backend inductor builds fp32 or int8, not {precision}",
                         hint="use --backend auto for other precisions")
    if out.suffix != ".pt2":
        raise UsageError(f"an AOTInductor package must end in .pt2, not {out.name}")
    t0 = time.perf_counter()
    program = exported_program(torch_model, inputs)
    info: dict[str, object] = {"compiler": "torch._inductor.aoti_compile_and_package",
                               "inductor_configs": INDUCTOR_CONFIGS}
    if precision == "int8":
        if calib is None:
            raise StageError("INT8 with --backend inductor needs calibration data", hint="pass --calib DIR")
        from optcli.backends.inductor.int8 import QUANTIZER, quantize_program

        program = quantize_program(program, calib, inputs, example_args(inputs, torch_model.int_high, batch))
        inputs = with_batch(inputs, batch)
        info.update(quantizer=QUANTIZER, calibration_samples=len(calib),
                    batch=f"fixed at {batch} (INT8 packages compute garbage with a dynamic batch in torch 2.13)")
    info["export_seconds"] = round(time.perf_counter() - t0, 3)
    metadata = {META_INPUTS: json.dumps([s.to_json() for s in inputs]),
                META_OUTPUTS: json.dumps(output_names(program)), META_PRECISION: precision}
    configs = {**INDUCTOR_CONFIGS, "aot_inductor.metadata": metadata}
    key = None
    if cache is not None:
        from optcli.backends.inductor.cache import cache_key

        key = cache_key(program_digest(program), configs, machine())
        hit, status = (None, "forced") if force else cache.lookup(key)
        info["cache"] = {"status": status, "key": key[:16]}
        if hit is not None:
            _link_or_copy(hit, out)
            info["compile_seconds"] = 0.0
            return info
    t1 = time.perf_counter()
    compile_package(program, out, configs)
    info["compile_seconds"] = round(time.perf_counter() - t1, 3)
    if cache is not None and key is not None:
        cache.store(key, out)
    return info


def compile_package(program: Any, out: Path, configs: Mapping[str, object]) -> None:
    """aoti_compile_and_package into `out`, written under a temporary name and renamed on success."""
    torch = require("torch", "compiling with AOTInductor")
    from optcli.backends.inductor.quiet import quiet

    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.stem}.partial.pt2")  # the packager insists on the .pt2 suffix
    try:
        # Inductor freezes only with grad off (compile_fx checks torch.is_grad_enabled()).
        with quiet(), torch.no_grad():
            torch._inductor.aoti_compile_and_package(program, package_path=str(tmp), inductor_configs=configs)
        os.replace(tmp, out)
    except Exception as exc:  # Inductor and the C++ compiler raise anything
        raise StageError(f"AOTInductor could not compile the model: {model_error_line(exc)}",
                         hint="a C++ compiler (g++) must be installed; --debug prints the traceback") from exc
    finally:
        tmp.unlink(missing_ok=True)


def _link_or_copy(src: Path, dst: Path) -> None:
    """A hard link where the file system allows (the cache and the output share a disk), else a copy."""
    import shutil

    dst.parent.mkdir(parents=True, exist_ok=True)
    dst.unlink(missing_ok=True)
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)
