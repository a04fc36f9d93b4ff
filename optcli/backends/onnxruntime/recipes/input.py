"""Recipe `input`: ONNX Runtime runs the CPU build's input ONNX as it is (FP32, FP16, or the quantize
stage's INT8 graph). Nothing is built; it is the baseline every other candidate must beat."""
from __future__ import annotations

from optcli.backends.recipe import Built, Candidate, CpuRecipe, PlanRequest, RecipeContext


class InputRecipe(CpuRecipe):
    name = "input"
    backend = "onnxruntime"
    simplicity = 0
    needs_int8_graph = True

    def plan(self, req: PlanRequest) -> list[Candidate]:
        if req.precision in ("fp32", "fp16"):
            return [self.candidate(f"onnxruntime-{req.precision}", req.precision)]
        if req.precision == "bf16":
            return [self.candidate("onnxruntime-bf16", "bf16", "onnxruntime has no BF16 kernels for the CPU")]
        if req.precision == "int8":
            flavour = (req.input_flavour or "").removeprefix("int8-")
            return [self.candidate(f"onnxruntime-int8{'-' + flavour if flavour else ''}", "int8")]
        return []

    def build(self, cand: Candidate, ctx: RecipeContext) -> Built:
        a = ctx.artifact
        return Built(a.path, a.format, runner_options=dict(a.meta.get("runner_options", {})),
                     details={"from": "the input artifact", "flavour": a.meta.get("flavour")})


RECIPE = InputRecipe()
