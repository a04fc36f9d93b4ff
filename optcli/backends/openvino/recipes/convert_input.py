"""Recipe `convert-input`: the quantize stage's INT8 graph (static Q/DQ) as an OpenVINO IR."""
from __future__ import annotations

from optcli.backends.openvino.recipes.sources import ir_built, precision_hint
from optcli.backends.recipe import Built, Candidate, CpuRecipe, PlanRequest, RecipeContext

DYNAMIC = ("dynamic INT8 (DynamicQuantizeLinear + MatMulInteger) has no INT8 kernels in OpenVINO: "
           "it ran slower than OpenVINO's FP32 (docs/openvino.md)")


class ConvertInputRecipe(CpuRecipe):
    name = "convert-input"
    backend = "openvino"
    simplicity = 1
    needs_int8_graph = True

    def plan(self, req: PlanRequest) -> list[Candidate]:
        if req.precision != "int8":
            return []
        flavour = (req.input_flavour or "").removeprefix("int8-")
        name = "openvino-int8-qdq-s8s8" if flavour == "qdq-s8s8" else f"openvino-int8-{flavour or 'input'}"
        return [self.candidate(name, "int8", DYNAMIC if req.dynamic_input else None)]

    def build(self, cand: Candidate, ctx: RecipeContext) -> Built:
        from optcli.backends.openvino.ir import convert_onnx

        hint = precision_hint(cand.precision)
        xml, details = convert_onnx(ctx.artifact.path, ctx.folder, hint, ctx.records)
        return ir_built(xml, details, hint)


RECIPE = ConvertInputRecipe()
