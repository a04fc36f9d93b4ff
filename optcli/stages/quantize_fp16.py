"""Stage quantize-fp16: FP16 weights and activations in the ONNX, FP32 inputs/outputs kept, gated on
accuracy against FP32; numerically sensitive ops (reductions, norms, softmax/exp paths) go back to
FP32 when the first attempt misses the tolerance."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from optcli.accuracy import check_tolerance
from optcli.accuracy_summary import AccuracySummary
from optcli.artifact import Artifact
from optcli.backends.onnxruntime.session_probe import probe
from optcli.backends.registry import ONNX, graph_needs
from optcli.calibration.dataset import SampleSet
from optcli.calibration.split import evaluation_set
from optcli.errors import StageError
from optcli.onnx_model import load_onnx, save_onnx
from optcli.optional_imports import require
from optcli.plan.stage_names import StageName
from optcli.quantize.evaluate import evaluate, run_model
from optcli.quantize.tolerance import effective
from optcli.report import QuantizeFp16Details
from optcli.stages.base import Stage, StageResult, config_dict, register

SENSITIVE_OPS = ["ReduceMean", "ReduceSum", "ReduceSumSquare", "ReduceMax", "Pow", "Sqrt", "Reciprocal", "Div",
                 "Softmax", "LogSoftmax", "Exp", "Log", "Erf", "LayerNormalization", "SkipLayerNormalization",
                 "SimplifiedLayerNormalization", "SkipSimplifiedLayerNormalization", "BatchNormalization"]
# onnxruntime's CPU NCHWc layout transformer has crashed on FP16 graphs; it only helps FP32 convs.
RUNNER_OPTIONS = {"disabled_optimizers": ["NchwcTransformer"]}


@register
class QuantizeFp16Stage(Stage):
    """FP32 ONNX -> FP16 ONNX (FP32 I/O), gated on accuracy."""

    name = StageName.QUANTIZE_FP16
    order = 40
    measure_optimization = "all"

    @classmethod
    def enabled(cls, config: Any) -> bool:
        return config.quantize.precision == "fp16"

    def skip_reason(self, artifact: Artifact) -> str | None:
        return None if artifact.format == ONNX else f"input is {artifact.format}, not ONNX"

    def tolerance(self) -> Any:
        a = self.ctx.config.accuracy
        return effective("fp16", a.cosine, a.max_abs, a.top1)

    def fingerprint(self) -> dict[str, object]:
        from optcli.calibration.identity import data_identity

        q = config_dict(self.ctx.config.quantize)
        return {"quantize": {**q, **data_identity(q)}, "tolerance": self.tolerance().to_json()}

    def reuse_check(self, accuracy: AccuracySummary) -> str | None:
        return self.gate(accuracy)  # within this stage's tolerance of the user's model, as when it was built

    def gate(self, accuracy: AccuracySummary) -> str | None:
        t = self.tolerance()
        return check_tolerance(accuracy, t.cosine, t.max_abs, t.top1)

    def heldout_rows(self, before: Artifact) -> SampleSet:
        return self._eval_set()

    def _eval_set(self) -> SampleSet:
        return evaluation_set(self.ctx.config.quantize, self.ctx.inputs, self.ctx.inputs, self.ctx.int_high)

    def run(self, artifact: Artifact, workdir: Path) -> StageResult:
        float16 = require("onnxruntime.transformers.float16", "FP16 conversion")
        ev = self._eval_set()
        reference, _ = run_model(artifact.path, ev)
        tol = self.tolerance()
        out = workdir / "model.onnx"
        attempts = []
        acc: AccuracySummary = {}
        for block in (None, SENSITIVE_OPS):
            model = load_onnx(artifact.path)
            try:
                kwargs: dict[str, Any] = {"keep_io_types": True}
                if block is not None:
                    kwargs["op_block_list"] = sorted(set(float16.DEFAULT_OP_BLOCK_LIST) | set(block))
                converted = float16.convert_float_to_float16(model, **kwargs)
            except Exception as exc:
                raise StageError(f"FP16 conversion failed: {type(exc).__name__}: {str(exc)[:200]}") from exc
            save_onnx(converted, out)
            ok, message = probe(out, "all", RUNNER_OPTIONS["disabled_optimizers"])
            if not ok:
                raise StageError(f"the FP16 model does not run: {message}",
                                 hint="keep FP32 on this CPU, or build it for TensorRT (--target tensorrt)")
            acc = evaluate(out, reference, ev, runner_options=RUNNER_OPTIONS)
            failure = check_tolerance(acc, tol.cosine, tol.max_abs, tol.top1)
            attempts.append({"fp32_ops": "default" if block is None else "default + sensitive ops",
                             "cosine_mean": round(acc["cosine_mean"], 6), "max_abs_err": acc["max_abs_err"],
                             "passed": failure is None})
            if failure is None:
                break
        acc["reference"] = "fp32-onnx"
        details = QuantizeFp16Details(attempts=attempts, tolerance=tol.to_json(), keep_io_types=True,
                                      evaluation={"samples": len(ev), "data": ev.source}, runner_options=RUNNER_OPTIONS)
        # caught here, on any machine, not by the target's parser on a GPU
        graph_needs(self.ctx.target).check_graph(out, "the FP16 ONNX")
        return StageResult(Artifact(out, "onnx", precision="fp16", stage=self.name, parent=artifact.sha256,
                                    meta={"flavour": "fp16", "runner_options": RUNNER_OPTIONS}), details, accuracy=acc)
