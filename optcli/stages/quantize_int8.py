"""Stage quantize-int8: INT8 on the ONNX graph with calibration data, an accuracy gate against FP32
on held-out data, and automatic fallback that keeps the units that break INT8 in float. The work is
optcli/quantize/int8_with_fallback.py (the CPU build's s8/s8 candidate calls it too)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from optcli.accuracy import check_tolerance
from optcli.accuracy_summary import AccuracySummary
from optcli.artifact import Artifact
from optcli.backends.registry import ONNX
from optcli.plan.stage_names import StageName
from optcli.quantize.int8_with_fallback import quantize_int8
from optcli.quantize.tolerance import effective
from optcli.stages.base import Stage, StageResult, config_dict, register


@register
class QuantizeInt8Stage(Stage):
    """FP32 ONNX -> INT8 ONNX (Q/DQ or dynamic), gated on accuracy, with automatic fallback."""

    name = StageName.QUANTIZE_INT8
    order = 40
    measure_optimization = "all"

    @classmethod
    def enabled(cls, config: Any) -> bool:
        return config.quantize.precision == "int8"

    def skip_reason(self, artifact: Artifact) -> str | None:
        if artifact.format != ONNX:
            return f"input is {artifact.format}, not ONNX"
        return self.ctx.plan.skip_reason(self.name)

    def tolerance(self) -> Any:
        a = self.ctx.config.accuracy
        return effective("int8", a.cosine, a.max_abs, a.top1)

    def fingerprint(self) -> dict[str, object]:
        from optcli.calibration.identity import data_identity
        from optcli.quantize import flavour

        q = config_dict(self.ctx.config.quantize)
        q.update(data_identity(q))  # the data's bytes, not just its path: edit a sample and the stage reruns

        # Which ops each flavour quantizes is part of the output: a change must invalidate the cache.
        table = {n: list(f.op_types) for n, f in flavour.TABLE.items()}
        return {"quantize": q, "tolerance": self.tolerance().to_json(), "target": self.ctx.target,
                "flavours": table, "methods": {"bins": 2048, "percentile": 99.99},
                "u8s8_saturates": flavour.u8s8_saturates(),  # 7-bit weights on this CPU
                "int8_fp16": _int8_fp16(self.ctx),                # TensorRT: the float parts in FP16
                "fallback_deferred": self.ctx.plan.int8_fallback_deferred}

    def heldout_rows(self, before: Artifact) -> Any:
        from optcli.calibration.split import split_calibration
        from optcli.onnx_model import graph_view, io_specs

        specs, _ = io_specs(graph_view(before.path))
        return split_calibration(self.ctx.config.quantize, specs, holdout_needed=True)[1]

    def reuse_check(self, accuracy: AccuracySummary) -> str | None:
        # Within the tolerance of the user's model, as when it was built; a record's word that the CPU build has
        # the last say (gate_deferred_to) holds only where the plan defers the gate in this run.
        if not self.ctx.plan.int8_gate_deferred:
            accuracy = accuracy.copy()
            accuracy.pop("gate_deferred_to", None)
        return self.gate(accuracy)

    def gate(self, accuracy: AccuracySummary) -> str | None:
        t = self.tolerance()
        failure = check_tolerance(accuracy, t.cosine, t.max_abs, t.top1)
        if failure is None and accuracy.get("int8_ops_after_fallback") == 0:
            # Excluding everything "passes" with an FP32 model: that is not an INT8 result.
            return "no node could stay INT8 within the tolerance (the fallback excluded all of them)"
        if failure and accuracy.get("gate_deferred_to"):
            return None  # the CPU build's own INT8 candidates try next; its gate has the last word
        if failure and accuracy.get("fallback_closest"):
            return f"{failure}; {accuracy['fallback_closest']} (kept in this stage's folder for inspection)"
        return failure

    def run(self, artifact: Artifact, workdir: Path) -> StageResult:
        out, details, accuracy = quantize_int8(self.ctx, artifact, workdir, self.tolerance(), self.name,
                                               defer_fallback=self.ctx.plan.int8_fallback_deferred)
        return StageResult(out, details, accuracy=accuracy)


def _int8_fp16(ctx: Any) -> bool | None:
    from optcli.backends.registry import graph_needs

    return graph_needs(ctx.target).int8_fp16(ctx.config)
