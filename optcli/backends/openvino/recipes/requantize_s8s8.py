"""Recipe `requantize-s8s8`: the FP32 ONNX re-quantized to s8/s8 Q/DQ (symmetric int8 activations, zero
point 0) through the quantize stage's own function (same calibration data and range cache, same gate and
automatic fallback), then converted to an IR."""
from __future__ import annotations

import dataclasses
from pathlib import Path

from optcli.artifact import Artifact
from optcli.backends.openvino.recipes.sources import ir_built, precision_hint, quantize_source
from optcli.backends.recipe import Built, Candidate, CpuRecipe, PlanRequest, RecipeContext


class RequantizeS8S8Recipe(CpuRecipe):
    name = "requantize-s8s8"
    backend = "openvino"
    simplicity = 4
    starts_from_export = True  # quantize_source: unless --exclude names nodes

    def plan(self, req: PlanRequest) -> list[Candidate]:
        if req.precision != "int8":
            return []
        if (req.input_flavour or "").removeprefix("int8-") == "qdq-s8s8":
            return [self.candidate("openvino-int8-qdq-s8s8 (re-quantized)", "int8",
                                   "the quantize stage's graph is already qdq-s8s8 (openvino-int8-qdq-s8s8 above)")]
        return [self.candidate("openvino-int8-qdq-s8s8", "int8")]

    def build(self, cand: Candidate, ctx: RecipeContext) -> Built:
        from optcli.backends.openvino.ir import convert_onnx

        # Another OpenVINO INT8 candidate already within tolerance makes the (slow) fallback moot.
        fallback = not any(c.passed for c in ctx.candidates if c.backend == self.backend and c.precision == "int8")
        onnx_path, info = _requantize(ctx, quantize_source(ctx), ctx.folder / "qdq", fallback)
        hint = precision_hint(cand.precision)
        xml, details = convert_onnx(onnx_path, ctx.folder, hint, ctx.records)
        details.update(info)
        return ir_built(xml, details, hint)


def _requantize(ctx: RecipeContext, float_art: Artifact, folder: Path, fallback: bool
                ) -> tuple[Path, dict[str, object]]:
    from optcli.quantize.int8_with_fallback import quantize_int8
    from optcli.quantize.tolerance import effective

    config = ctx.stage.config.copy()  # the run's config is frozen: change a copy
    config.quantize.flavour = "qdq-s8s8"
    config.quantize.fallback = config.quantize.fallback and fallback
    folder.mkdir(parents=True, exist_ok=True)
    a = config.accuracy
    _artifact, details, accuracy = quantize_int8(dataclasses.replace(ctx.stage, config=config), float_art, folder,
                                                 effective("int8", a.cosine, a.max_abs, a.top1))
    why_off = "another OpenVINO INT8 candidate already meets the tolerance" if not fallback else "--no-fallback"
    info = {"flavour": "int8-qdq-s8s8", "quantize_attempts": len(details.get("attempts", [])),
            "fallback": "on" if config.quantize.fallback else f"off ({why_off})",
            "excluded_nodes": (details.get("fallback") or {}).get("excluded_nodes", []),
            "onnxruntime_accuracy": {k: round(v, 6) for k, v in (accuracy or {}).items()
                                     if k in ("cosine_mean", "top1_agreement") and isinstance(v, float)}}
    return _artifact.path, info


RECIPE = RequantizeS8S8Recipe()
