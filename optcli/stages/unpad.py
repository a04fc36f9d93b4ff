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
from optcli.unpad.options import UNPADDED_SOURCE, unpad_config


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
                "data": {**data, **data_identity(data)}, "rewrites_first_onnx": self._first_onnx_wanted()}

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
        details: dict[str, Any] = {"applied": False}
        out = workdir / "model.onnx"
        reason = self._rewrite(artifact.path, out, runs, details, held_out=True)
        if reason is None and self.ctx.target == "tensorrt":
            reason = self._tensorrt_refusal(out)
            if reason:
                out.unlink()
        if reason:
            return self._skip(artifact, workdir, details, reason)
        details["applied"] = True
        source = self._openvino_source(artifact)
        if source is not None:
            # OpenVINO's candidates start from the exporter's graph, not this fused one (its frontend
            # cannot read onnxruntime's fused ops): without the same rewrite there, they computed every
            # padded position (found: a MiniLM NNCF IR ran 168 ms on 8 tokens and on 128).
            twin: dict[str, Any] = {"graph": source.name}
            why = self._rewrite(source, workdir / UNPADDED_SOURCE, runs, twin, held_out=False)
            details["openvino_source"] = {"applied": why is None, **({"reason": why} if why else {}),
                                          "proof": twin.get("proof")}
        flavour = artifact.meta.get("flavour")
        return StageResult(Artifact(out, "onnx", stage=self.name, parent=artifact.sha256,
                                    meta={"flavour": flavour} if flavour else {}), details)

    def _rewrite(self, source: Path, out: Path, runs: Any, details: dict[str, Any], held_out: bool) -> str | None:
        """Rewrite `source` into `out` and prove it (the held-out data too where `held_out`); the reason
        it does not apply (and no `out`), or None."""
        from optcli.unpad.graph import find_plan, rewrite
        from optcli.unpad.verify import sequence_axes, synthetic_samples

        model = load_onnx(source)
        plan = find_plan(model, unpad_config(self.ctx.config).bucket)
        if isinstance(plan, str):
            return plan
        length = self._length(plan)
        if length <= plan.bucket:
            return f"the padded length {length} is within one bucket"
        body = copy.deepcopy(model)
        rewrite(body, plan, pad_outputs=False)
        probe = out.parent / f"probe-{out.name}"
        save_onnx(body, probe)
        del body
        feeds = synthetic_samples(self.ctx.inputs, plan.mask, plan.sequence_inputs, length, self.ctx.int_high,
                                  n=2, lengths=np.array([plan.bucket - 1, 1]))
        axes = sequence_axes(source, probe, feeds, length, plan.bucket, runs)
        runs.forget(probe)
        probe.unlink()
        if isinstance(axes, str):
            return axes
        plan.seq_axes = axes
        changed = rewrite(model, plan)
        save_onnx(model, out)
        details.update(plan.to_json(), **changed)
        reason = self._prove(runs, source, out, plan, length, details, held_out)
        runs.forget(out)
        if reason:
            out.unlink()
        return reason

    def _first_onnx_wanted(self) -> bool:
        """Whether a backend whose candidates start from the exporter's graph may build in this run."""
        from optcli.backends import registry
        from optcli.cpu.options import cpu_config

        choice = cpu_config(self.ctx.config).backend
        return self.ctx.target == "cpu" and any(b.builds_from_first_onnx and b.installed() and choice in ("auto", b.name)
                                                for b in registry.all_backends())

    def _openvino_source(self, artifact: Artifact) -> Path | None:
        """The graph the candidates of backends that build from the exporter's graph (OpenVINO) start from,
        where it is not this stage's input and they may be built in this run (RecipeContext.first_float_onnx)."""
        from optcli.backends.recipe import oldest_float_onnx

        if not self._first_onnx_wanted():
            return None
        seen = list(self.ctx.facts.get("artifacts", {}).values())
        lineage = [artifact] + [a for a in reversed(seen) if a.path != artifact.path]
        if self.ctx.source.format == ONNX:
            lineage.append(Artifact(self.ctx.source.path, ONNX))
        first = oldest_float_onnx(lineage)
        return None if first.path == artifact.path else first.path

    def _prove(self, runs: Any, original: Path, rewritten: Path, plan: Any, length: int,
               details: dict[str, Any], held_out: bool = True) -> str | None:
        """Run both graphs on right-padded random samples and the held-out data; the reason to refuse, or None."""
        from optcli.unpad.verify import MAX_DATA_SAMPLES, PROOF_BATCH, prove, right_padded, synthetic_samples

        samples = [("random right-padded samples", synthetic_samples(
            self.ctx.inputs, plan.mask, plan.sequence_inputs, length, self.ctx.int_high), PROOF_BATCH)]
        data = self._held_out() if held_out else None
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
