"""INT8 for AOTInductor through PT2E: torchao's X86InductorQuantizer (static, u8 activations with s8
per-channel weights: oneDNN's x86 kernels), calibrated on optcli's calibration SampleSet, then
re-exported for ONE batch size, which AOTInductor compiles.

Why one batch: with a dynamic batch, torch 2.13's AOTInductor lays the frozen INT8 convolutions'
outputs out as if contiguous while oneDNN writes them channels-last, and the package computes
garbage (digits CNN: mean cosine 0.01 compiled, 0.9997 run eagerly, 0.9997 compiled for a fixed
batch; force_layout_optimization does not help). FP32 packages keep the dynamic batch.

torchao advises 7-bit activations (reduce_range) on CPUs without VNNI; on this project's AVX2 CPU
without VNNI the full range was the more accurate (digits CNN: cosine 0.99979 vs 0.99967), so the
default stays. The accuracy gate checks every package either way.

torch 2.13 no longer ships `torch.ao.quantization.quantize_pt2e`; PT2E lives in torchao
(`pip install 'optcli[inductor]'`, torchao 0.18.0 checked with the CPU build of torch 2.13.0).
"""
from __future__ import annotations

from typing import Any

from optcli.calibration.dataset import SampleSet
from optcli.errors import MissingDependencyError, StageError, model_error_line
from optcli.optional_imports import require
from optcli.tensor_spec import TensorSpec

EXTRA = "inductor"
CALIB_BATCH = 32
QUANTIZER = "torchao X86InductorQuantizer (static, u8 activations, s8 per-channel weights)"


def _pt2e() -> tuple[Any, Any, Any]:
    """(prepare_pt2e, convert_pt2e, the quantizer module) from torchao, quietly (its import logs
    that its CUDA kernels do not load on a CPU build)."""
    from optcli.backends.inductor.quiet import quiet

    try:
        with quiet():
            import torchao.quantization.pt2e.quantizer.x86_inductor_quantizer as x86
            from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e
    except ImportError as exc:
        raise MissingDependencyError("torchao", EXTRA, "INT8 with --backend inductor (PT2E quantization)") from exc
    return prepare_pt2e, convert_pt2e, x86


def quantize_program(program: Any, calib: SampleSet, inputs: list[TensorSpec], example: tuple[Any, ...]) -> Any:
    """The program with PT2E INT8 quantize/dequantize pairs, calibrated on `calib`, re-exported with the
    shapes of `example` (tensors in input order) fixed. `inputs`: the program's own specs (a dynamic
    batch calibrates CALIB_BATCH samples a call, a fixed one its own size)."""
    torch = require("torch", "compiling with AOTInductor")
    from optcli.backends.inductor.quiet import quiet

    prepare_pt2e, convert_pt2e, x86 = _pt2e()
    quantizer = x86.X86InductorQuantizer()
    quantizer.set_global(x86.get_default_x86_inductor_quantization_config())
    try:
        with quiet():
            prepared = prepare_pt2e(program.module(), quantizer)
            with torch.no_grad():
                first = inputs[0].shape[0] if inputs and inputs[0].shape else None
                size = first if isinstance(first, int) and first > 0 else CALIB_BATCH
                for batch in calib.batches(size):
                    if isinstance(first, int) and len(batch[inputs[0].name]) != size:
                        continue  # a fixed-batch program takes no partial batch
                    prepared(*[torch.from_numpy(batch[s.name]) for s in inputs])
            converted = convert_pt2e(prepared)
            return torch.export.export(converted, example)
    except Exception as exc:  # PT2E raises anything on graphs it cannot annotate
        raise StageError(f"PT2E INT8 quantization failed: {model_error_line(exc)}",
                         hint="try --backend auto (other INT8 candidates), or drop --int8; --debug prints the traceback"
                         ) from exc
