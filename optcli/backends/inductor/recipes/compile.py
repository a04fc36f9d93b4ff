"""Recipe `aoti-compile`: compile the user's PyTorch program with AOTInductor (freezing on), FP32, or INT8
through PT2E calibrated on the run's calibration samples. It starts from PyTorch, not from the ONNX, so
it needs a PyTorch input; packages are cached by program hash (a re-run does not compile again).

Under `--backend auto` it is a candidate for INT8 measured at batch >= 8, and wherever the run has no
ONNX: on the sample models (docs/benchmarks/cpu.md) ONNX Runtime or OpenVINO FP32 beat its FP32 at
batch 1 and 8, and OpenVINO+NNCF its INT8 at batch 1, while its INT8 was the fastest variant at batch 8
in 3 of 4 measurements (2 models, 2 runs); elsewhere it would only add its compile time to every run.
"""
from __future__ import annotations

from optcli.backends.recipe import Built, CpuRecipe, PlanRequest, RecipeContext
from optcli.backends.registry import ONNX
from optcli.cpu.candidates import Candidate

INSTALL = "pip install 'optcli[inductor]'"
AUTO_INT8_BATCH = 8
NOT_IN_AUTO = (f"not tried by --backend auto except INT8 at batch >= {AUTO_INT8_BATCH} (slower than ONNX Runtime or "
               "OpenVINO elsewhere on the samples, docs/benchmarks/cpu.md); --backend inductor builds it")


class CompileRecipe(CpuRecipe):
    name = "aoti-compile"
    backend = "inductor"
    simplicity = 2
    needs_onnx = False

    def plan(self, req: PlanRequest) -> list[Candidate]:
        if req.precision not in ("fp32", "int8"):
            return []
        skip = None
        if not req.torch_source:
            skip = "the input is ONNX; AOTInductor compiles PyTorch programs (pass the .pt2 or file.py:factory)"
        elif req.precision == "int8" and not req.facts.get(self.backend, {}).get("torchao", True):
            skip = f"INT8 through PT2E needs torchao ({INSTALL})"
        elif req.backend == "auto" and req.input_format == ONNX and not (
                req.precision == "int8" and req.batch >= AUTO_INT8_BATCH):
            skip = NOT_IN_AUTO
        return [self.candidate(f"inductor-{req.precision}", req.precision, skip)]

    def build(self, cand: Candidate, ctx: RecipeContext) -> Built:
        from optcli.backends.inductor.cache import PackageCache
        from optcli.backends.inductor.files import FORMAT
        from optcli.backends.inductor.package import build_package
        from optcli.errors import StageError

        if ctx.torch_model is None:
            raise StageError("AOTInductor needs the PyTorch model", hint="pass the .pt2 or file.py:factory, not ONNX")
        out = ctx.folder / "model.pt2"
        details = build_package(ctx.torch_model, ctx.stage.inputs, out, precision=cand.precision, calib=ctx.calib,
                                batch=ctx.stage.config.bench.batch, cache=PackageCache(),
                                force=ctx.stage.config.force)
        return Built(out, FORMAT, details=details)


RECIPE = CompileRecipe()
