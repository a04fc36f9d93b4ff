"""Recipe `nncf-transformer`: NNCF INT8 with model_type=TRANSFORMER (its SmoothQuant and placement), for
graphs that look like transformer encoders. NNCF's defaults were faster on one encoder here and lost a
pretrained one (cosine 0.63 without this setting): only measuring tells, so both compete."""
from __future__ import annotations

from optcli.backends.openvino.recipes.nncf import NncfRecipe
from optcli.backends.recipe import PlanRequest


class NncfTransformerRecipe(NncfRecipe):
    name = "nncf-transformer"
    simplicity = 3
    transformer = True

    def offered(self, req: PlanRequest) -> bool:
        return req.precision == "int8" and req.encoder


RECIPE = NncfTransformerRecipe()
