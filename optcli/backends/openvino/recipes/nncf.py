"""Recipe `nncf`: NNCF post-training INT8 of the FP32 ONNX as an IR, with NNCF's defaults; on a CPU whose
u8 x s8 kernels saturate (x86 without VNNI: optcli/cpu/isa.py) with NNCF's overflow fix on every
Conv/MatMul weight (7-bit weights), NNCF's own advice for AVX2 when its first-layer default is not enough."""
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
                                 exclude_ops=ctx.stage.config.quantize.exclude_ops, facts=ctx.records, precision=hint,
                                 overflow_fix=overflow_fix())
        return ir_built(xml, details, hint)


def overflow_fix() -> str | None:
    """NNCF's overflow_fix for this CPU: `enable` where u8 x s8 saturates, else NNCF's default (None)."""
    from optcli.quantize.flavour import u8s8_saturates

    return OVERFLOW_SAFE if u8s8_saturates() else None


OVERFLOW_SAFE = "enable"
RECIPE = NncfRecipe()
