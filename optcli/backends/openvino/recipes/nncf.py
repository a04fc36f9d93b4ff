"""Recipe `nncf`: NNCF post-training INT8 of the FP32 ONNX as an IR, with NNCF's defaults on every CPU.

Its overflow fix stays at NNCF's default (first layer only) on x86 without VNNI too: 7-bit weights on every
Conv/MatMul (`overflow_fix="enable"`) lowered the pretrained all-MiniLM-L6-v2's cosine from 0.99582 to
0.99467 on an AVX2-only EPYC, where 8-bit weights (`disable`) gave 0.99582, so OpenVINO's kernels did not
saturate there (docs/benchmarks/cpu.md, "A pretrained encoder exported the common way")."""
from __future__ import annotations

from optcli.backends.openvino.recipes.sources import (
    excluded_nodes,
    ir_built,
    named_float,
    precision_hint,
    quantize_source,
)
from optcli.backends.recipe import Built, Candidate, CpuRecipe, PlanRequest, RecipeContext


class NncfRecipe(CpuRecipe):
    name = "nncf"
    backend = "openvino"
    simplicity = 2
    starts_from_export = True  # quantize_source: unless --exclude names nodes
    transformer = False   # NNCF's model_type=TRANSFORMER (the nncf-transformer recipe)

    def offered(self, req: PlanRequest) -> bool:
        return req.precision == "int8"

    def plan(self, req: PlanRequest) -> list[Candidate]:
        if not self.offered(req):
            return []
        nncf = req.facts.get(self.backend, {}).get("nncf", True)
        return [self.candidate(f"openvino-int8-{self.name}", "int8", None if nncf is True else str(nncf))]

    def build(self, cand: Candidate, ctx: RecipeContext) -> Built:
        from optcli.backends.openvino.ir import nncf_int8

        hint = precision_hint(cand.precision)
        assert ctx.calib is not None  # an INT8 recipe: the CPU build plans it only with calibration data
        named = named_float(quantize_source(ctx), ctx.workdir)
        xml, details = nncf_int8(named, ctx.folder, ctx.calib, transformer=self.transformer,
                                 exclude_nodes=excluded_nodes(ctx, named),
                                 exclude_ops=ctx.stage.config.quantize.exclude_ops, facts=ctx.records, precision=hint)
        return ir_built(xml, details, hint)


RECIPE = NncfRecipe()
