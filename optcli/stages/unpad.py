"""Stage unpad: encoders with an attention-mask input compute only up to the batch's last valid token.

The rewrite (optcli/unpad/graph.py) slices the sequence inputs to the mask's bucketed extent L, runs
the encoder on L positions, and pads outputs with a sequence axis back to the input length with 0.
It is proven per model (optcli/unpad/verify.py) on right-padded random samples of every length and
on the held-out data where given: each output must equal the original's on the valid positions, else
the stage is reported skipped with the reason and the graph passes through unchanged.

It runs after fuse and before quantize. After fuse: onnxruntime's transformer optimizer needs the
fixed shapes (its symbolic shape inference fails on a slice whose length comes from the mask's
values; BERT-base lost its 24 SkipLayerNormalization fusions that way and ran 22% slower at full
length). Before quantize: calibration then sees the activations the deployed artifact computes
(padded positions, whose values no output uses, no longer widen the ranges), and every CPU candidate
of the CPU build, NNCF's included, is built from the rewritten graph.
"""
from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from optcli.artifact import Artifact
from optcli.backends.registry import ONNX, graph_needs
from optcli.onnx_model import EXTERNAL_DATA_THRESHOLD
from optcli.plan.stage_names import StageName
from optcli.stages.base import Stage, StageResult, register
from optcli.unpad.options import unpad_config


@register
class UnpadStage(Stage):
    """ONNX -> ONNX that skips padded tokens (same outputs on valid positions)."""

    name = StageName.UNPAD
    order = 35
    config_section = "unpad"
    measure_optimization = "all"  # before/after on all-ones masks: the rewrite's cost on unpadded input

    @classmethod
    def enabled(cls, config: Any) -> bool:
        return unpad_config(config).enabled

    def _plan(self, artifact: Artifact) -> Any:
        from optcli.onnx_model import graph_view
        from optcli.unpad.graph import find_plan

        # The structure is enough to plan (its small constants are in the view): BERT-base's graph is parsed
        # once per run for its view, not again here with its 440 MB of weights (0.3-0.6 s).
        return find_plan(graph_view(artifact.path), unpad_config(self.ctx.config).bucket)

    def skip_reason(self, artifact: Artifact) -> str | None:
        if artifact.format != ONNX:
            return f"input is {artifact.format}, not ONNX"
        if artifact.size_bytes > EXTERNAL_DATA_THRESHOLD:
            return "model over 1.8 GB: the rewrite would need external initializers"
        needs = graph_needs(self.ctx.target)
        if not needs.unpad_default and not unpad_config(self.ctx.config).tensorrt:
            return (f"target is {self.ctx.target}: the rewrite reads a length from the mask's values, so the outputs' "
                    f"shapes become data-dependent, which optcli's {needs.label} runner cannot allocate "
                    "([unpad] tensorrt = true tries it; docs/unpad.md)")
        plan = self._plan(artifact)
        return plan if isinstance(plan, str) else None

    def fingerprint(self) -> dict[str, object]:
        from optcli.calibration.identity import data_identity

        q = self.ctx.config.quantize
        data = {"calib": str(q.calib) if q.calib else None, "eval": str(q.eval) if q.eval else None,
                "calib_reader": q.calib_reader}
        # The proof runs on the held-out data: its bytes are in the key, not only its path.
        return {"unpad": unpad_config(self.ctx.config).__dict__, "target": self.ctx.target,
                "data": {**data, **data_identity(data)}}

    def run(self, artifact: Artifact, workdir: Path) -> StageResult:
        from optcli.unpad.verify import GraphRuns

        with GraphRuns(self.ctx.runners, self.ctx.config.bench.threads) as runs:
            return self._run(artifact, workdir, runs)

    def _run(self, artifact: Artifact, workdir: Path, runs: Any) -> StageResult:
        from optcli.unpad.apply import rewrite_and_prove

        details: dict[str, Any] = {"applied": False}
        out = workdir / "model.onnx"
        bucket = unpad_config(self.ctx.config).bucket
        held_out = self._held_out()
        reason = rewrite_and_prove(artifact.path, out, inputs=self.ctx.inputs, int_high=self.ctx.int_high,
                                   bucket=bucket, runs=runs, details=details, held_out=held_out)
        if reason is None:
            reason = self._builder_refusal(out)
            if reason:
                runs.forget(out)
                out.unlink()
        if reason:
            return self._skip(artifact, workdir, details, reason)
        details["applied"] = True
        # The bucket tells the CPU build to apply the same rewrite to the exporter's graph where an OpenVINO
        # candidate starts from it (RecipeContext.first_float_onnx): made and proven only when one is built.
        # The outputs' sequence axes spare that rewrite its probe (it still runs its own proof).
        meta: dict[str, Any] = {"unpad_bucket": bucket, "unpad_sequence_outputs": details.get("sequence_outputs", {})}
        if artifact.meta.get("flavour"):
            meta["flavour"] = artifact.meta["flavour"]
        made = Artifact(out, "onnx", stage=self.name, parent=artifact.sha256, meta=meta)
        if held_out is not None and held_out.outputs is not None:
            from optcli.quantize.evaluate import remember_reference

            # The proof ran the rewrite on every held-out row: later stages' FP32 reference on that data.
            remember_reference(self.ctx.state.fp32_outputs, made.sha256, held_out.samples, held_out.outputs)
        return StageResult(made, details)

    def _held_out(self) -> Any:
        """The held-out data (an apply.HeldOut), or None without --calib / --eval."""
        q = self.ctx.config.quantize
        if q.calib is None and q.eval is None:
            return None
        from optcli.calibration.split import evaluation_set
        from optcli.unpad.apply import HeldOut

        return HeldOut(evaluation_set(q, self.ctx.inputs, self.ctx.inputs, self.ctx.int_high))

    def _builder_refusal(self, path: Path) -> str | None:
        """Why the target's builder refuses the rewritten graph (its descriptor's graph_check), or None."""
        from optcli.errors import StageError

        try:
            graph_needs(self.ctx.target).check_graph(path, "it")
        except StageError as exc:
            return f"the {self.ctx.target} target refuses the rewritten graph: {exc.message} (`optcli check` lists all)"
        return None

    def _skip(self, artifact: Artifact, workdir: Path, details: dict[str, Any], reason: str) -> StageResult:
        """The input, unchanged (copied: the pipeline keeps the stage's folder as its cache entry)."""
        out = workdir / "model.onnx"
        shutil.copyfile(artifact.path, out)
        details["skipped"] = reason
        return StageResult(Artifact(out, "onnx", stage=self.name, parent=artifact.sha256, meta=dict(artifact.meta)),
                           details)

