"""Recipe `convert`: the run's first FP32 ONNX as an OpenVINO IR, computing in FP32 or BF16.

It starts from the exporter's graph (or the user's own ONNX), not the simplified or fused one: NNCF INT8
of MiniLM ran 28% slower from the simplified graph (MatMuls as Reshape + Gemm + Reshape), NNCF INT8 of
BERT-base 10% slower from the graph with onnxruntime's transformer fusions; OpenVINO fuses for itself."""
from __future__ import annotations

from optcli.backends.openvino.recipes.sources import ir_built, precision_hint
from optcli.backends.recipe import Built, Candidate, CpuRecipe, PlanRequest, RecipeContext


class ConvertRecipe(CpuRecipe):
    name = "convert"
    backend = "openvino"
    simplicity = 1
    starts_from_export = True

    def plan(self, req: PlanRequest) -> list[Candidate]:
        if req.precision == "fp32":
            return [self.candidate("openvino-fp32", "fp32")]
        if req.precision == "bf16":
            bf16 = req.facts.get(self.backend, {}).get("bf16")
            no_bf16 = (None if bf16 or bf16 is None
                       else "this CPU has no BF16 arithmetic (OpenVINO lists no BF16 capability)")
            return [self.candidate("openvino-bf16", "bf16", no_bf16)]
        if req.precision == "fp16":
            return [self.candidate("openvino-fp16", "fp16", "OpenVINO's CPU plugin has no FP16 arithmetic "
                                   "(it would compute in FP32 or BF16: use --bf16)")]
        return []

    def build(self, cand: Candidate, ctx: RecipeContext) -> Built:
        from optcli.backends.openvino.ir import convert_onnx

        hint = precision_hint(cand.precision)
        xml, details = convert_onnx(ctx.first_float_onnx().path, ctx.folder, hint, ctx.records)
        return ir_built(xml, details, hint)


RECIPE = ConvertRecipe()
