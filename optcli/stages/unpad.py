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
of build-cpu, NNCF's included, is built from the rewritten graph.
"""
from __future__ import annotations

import copy
import shutil
from pathlib import Path
from typing import Any

import numpy as np

from optcli.artifact import Artifact
from optcli.backends.registry import ONNX
from optcli.onnx_model import EXTERNAL_DATA_THRESHOLD, load_onnx, save_onnx
from optcli.stages.base import Stage, StageResult, register
from optcli.unpad.options import unpad_config


@register
class UnpadStage(Stage):
    """ONNX -> ONNX that skips padded tokens (same outputs on valid positions)."""

    name = "unpad"
    order = 35
    config_section = "unpad"
    measure_optimization = "all"  # before/after on all-ones masks: the rewrite's cost on unpadded input

    @classmethod
    def enabled(cls, config: Any) -> bool:
        return unpad_config(config).enabled

    def _plan(self, artifact: Artifact) -> Any:
        from optcli.unpad.graph import find_plan

        return find_plan(load_onnx(artifact.path, load_weights=False), unpad_config(self.ctx.config).bucket)

    def skip_reason(self, artifact: Artifact) -> str | None:
        if artifact.format != ONNX:
            return f"input is {artifact.format}, not ONNX"
        if artifact.size_bytes > EXTERNAL_DATA_THRESHOLD:
            return "model over 1.8 GB: the rewrite would need external initializers"
        if self.ctx.target == "tensorrt" and not unpad_config(self.ctx.config).tensorrt:
            return ("target is tensorrt: a length read from the mask's values is a data-dependent shape, not yet "
                    "verified with TensorRT's builder ([unpad] tensorrt = true applies it; docs/unpad.md)")
        plan = self._plan(artifact)
        return plan if isinstance(plan, str) else None

    def fingerprint(self) -> dict[str, Any]:
        from optcli.calibration.identity import data_identity

        q = self.ctx.config.quantize
        data = {"calib": str(q.calib) if q.calib else None, "eval": str(q.eval) if q.eval else None,
                "calib_reader": q.calib_reader}
        # The proof runs on the held-out data: its bytes are in the key, not only its path.
        return {"unpad": unpad_config(self.ctx.config).__dict__, "target": self.ctx.target,
                "data": {**data, **data_identity(data)}}

    def _length(self, plan: Any) -> int:
        if isinstance(plan.length, int):
            return plan.length
        spec = next(s for s in self.ctx.inputs if s.name == plan.mask)
        from optcli.tensor_spec import random_inputs

        return int(random_inputs([spec], 1, int_high={})[spec.name].shape[1])

    def run(self, artifact: Artifact, workdir: Path) -> StageResult:
        from optcli.unpad.verify import GraphRuns

        with GraphRuns() as runs:
            return self._run(artifact, workdir, runs)

    def _run(self, artifact: Artifact, workdir: Path, runs: Any) -> StageResult:
        from optcli.unpad.graph import rewrite
        from optcli.unpad.verify import sequence_axes, synthetic_samples

        model = load_onnx(artifact.path)
        plan = self._plan(artifact)
        length = self._length(plan)
        details: dict[str, Any] = {"applied": False}
        if length <= plan.bucket:
            return self._skip(artifact, workdir, details, f"the padded length {length} is within one bucket")
        body = copy.deepcopy(model)
        rewrite(body, plan, pad_outputs=False)
        probe = workdir / "probe.onnx"
        save_onnx(body, probe)
        feeds = synthetic_samples(self.ctx.inputs, plan.mask, plan.sequence_inputs, length, self.ctx.int_high,
                                  n=2, lengths=np.array([plan.bucket - 1, 1]))
        axes = sequence_axes(artifact.path, probe, feeds, length, plan.bucket, runs)
        runs.forget(probe)
        probe.unlink()
        if isinstance(axes, str):
            return self._skip(artifact, workdir, details, axes)
        plan.seq_axes = axes
        changed = rewrite(model, plan)
        out = workdir / "model.onnx"
        save_onnx(model, out)
        details.update(plan.to_json(), **changed)
        reason = self._prove(runs, artifact.path, out, plan, length, details)
        if reason is None and self.ctx.target == "tensorrt":
            reason = self._tensorrt_refusal(out)
        runs.forget(out)
        if reason:
            out.unlink()
            return self._skip(artifact, workdir, details, reason)
        details["applied"] = True
        flavour = artifact.meta.get("flavour")
        return StageResult(Artifact(out, "onnx", stage=self.name, parent=artifact.sha256,
                                    meta={"flavour": flavour} if flavour else {}), details)

    def _prove(self, runs: Any, original: Path, rewritten: Path, plan: Any, length: int,
               details: dict[str, Any]) -> str | None:
        """Run both graphs on right-padded random samples and the held-out data; the reason to refuse, or None."""
        from optcli.unpad.verify import MAX_DATA_SAMPLES, PROOF_BATCH, prove, right_padded, synthetic_samples

        samples = [("random right-padded samples", synthetic_samples(
            self.ctx.inputs, plan.mask, plan.sequence_inputs, length, self.ctx.int_high), PROOF_BATCH)]
        data = self._held_out()
        if data is not None:
            arrays = {k: v[:MAX_DATA_SAMPLES] for k, v in data.arrays.items()}
            mask = np.asarray(arrays[plan.mask])
            details["data_valid_length"] = _length_figures(mask, length, plan.bucket)
            if not right_padded(mask):
                return (f"the data ({data.source}) is not right-padded: padding must come last for the rewrite to "
                        "skip it")
            samples.append((f"the held-out data ({data.source})", arrays, PROOF_BATCH))
        proof = prove(original, rewritten, samples, plan.mask, runs)
        details["proof"] = proof["checks"]
        return proof["reason"]

    def _held_out(self) -> Any:
        q = self.ctx.config.quantize
        if q.calib is None and q.eval is None:
            return None
        from optcli.calibration.split import evaluation_set

        return evaluation_set(q, self.ctx.inputs, self.ctx.inputs, self.ctx.int_high)

    def _tensorrt_refusal(self, path: Path) -> str | None:
        from optcli.backends.tensorrt.preflight import check_file

        findings = check_file(path)
        if not findings:
            return None
        return (f"TensorRT's parser would refuse the rewritten graph: {findings[0].describe()} "
                f"({len(findings)} finding(s); `optcli check` lists them)")

    def _skip(self, artifact: Artifact, workdir: Path, details: dict[str, Any], reason: str) -> StageResult:
        """The input, unchanged (copied: the pipeline keeps the stage's folder as its cache entry)."""
        out = workdir / "model.onnx"
        shutil.copyfile(artifact.path, out)
        details["skipped"] = reason
        return StageResult(Artifact(out, "onnx", stage=self.name, parent=artifact.sha256, meta=dict(artifact.meta)),
                           details)


def _length_figures(mask: np.ndarray, length: int, bucket: int) -> dict[str, Any]:
    """The data's valid lengths and the share of positions the rewrite computes at batch 1."""
    valid = (mask != 0).sum(1)
    extent = np.where((mask != 0).any(1), mask.shape[1] - np.argmax((mask != 0)[:, ::-1], axis=1), 1)
    computed = np.minimum(-(-np.maximum(extent, 1) // bucket) * bucket, length)
    return {"median": float(np.median(valid)), "min": int(valid.min()), "max": int(valid.max()),
            "padded_length": length, "computed_share_batch1": round(float(computed.mean() / length), 4)}
