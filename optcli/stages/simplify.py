"""Stage simplify: onnxsim constant folding, dead-node removal and shape inference, dynamic dims kept.
A model near protobuf's 2 GiB limit cannot go through onnxsim (it holds one protobuf): ONNX Runtime's
basic-level offline optimizer does the same folding and eliminations with the weights kept external."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from optcli.artifact import Artifact
from optcli.backends.onnxruntime.offline_optimizer import optimize_offline
from optcli.backends.registry import ONNX, graph_needs
from optcli.errors import StageError
from optcli.onnx_model import io_specs, is_large, load_onnx, save_onnx
from optcli.optional_imports import require, torch_if_own_process
from optcli.plan.stage_names import StageName
from optcli.report import SimplifyDetails
from optcli.stages.base import Stage, StageResult, config_dict, register

CONTRIB_FUSIONS = ("fuse_attention", "fuse_gqa")


@register
class SimplifyStage(Stage):
    """ONNX -> smaller ONNX with the same outputs (onnxsim)."""

    name = StageName.SIMPLIFY
    order = 20

    @classmethod
    def enabled(cls, config: Any) -> bool:
        return config.simplify.enabled

    def skip_reason(self, artifact: Artifact) -> str | None:
        if artifact.format != ONNX:
            return f"input is {artifact.format}, not ONNX"
        return self.ctx.plan.skip_reason(self.name)

    def fingerprint(self) -> dict[str, object]:
        return {**config_dict(self.ctx.config.simplify), "skipped_optimizers": self.skipped_optimizers()}

    def skipped_optimizers(self) -> list[str] | None:
        """onnxsim passes that write onnxruntime contrib ops (com.microsoft Attention, GroupQueryAttention):
        off where the target's builder takes none (TensorRT's parser: swin and mobilevit in the zoo)."""
        return None if graph_needs(self.ctx.target).takes_contrib_ops else list(CONTRIB_FUSIONS)

    def run(self, artifact: Artifact, workdir: Path) -> StageResult:
        if is_large(artifact.path):
            out = workdir / "model.onnx"
            optimize_offline(artifact.path, out, "basic", hint="skip this stage with --no-simplify")
            return StageResult(Artifact(out, "onnx", stage=self.name, parent=artifact.sha256),
                               SimplifyDetails(tool="onnxruntime basic-level optimizer "
                                                    "(model over 1.8 GB: onnxsim holds one protobuf)"))
        # onnxsim 0.8's package init imports torch for a PPQ integration it then finds missing: 0.9 s of
        # its 1.1 s import where torch is not loaded (an ONNX input); it runs the same without it. On the
        # command line only: a program that imported optcli keeps onnxsim as it would load it itself.
        onnxsim = require("onnxsim", "the simplify stage", hide=torch_if_own_process())
        model = load_onnx(artifact.path)
        inputs_before, _ = io_specs(model)
        try:
            simplified, ok = onnxsim.simplify(model, check_n=0, skipped_optimizers=self.skipped_optimizers())
        except Exception as exc:  # onnxsim raises RuntimeError/ValidationError from C++
            first = str(exc).strip().splitlines()[0][:240] if str(exc).strip() else type(exc).__name__
            raise StageError(f"onnxsim failed: {first}",
                             hint="skip this stage with --no-simplify") from exc
        if not ok:
            raise StageError("onnxsim could not validate the simplified model", hint="skip it with --no-simplify")
        added = _custom_domains(simplified) - _custom_domains(model)
        needs = graph_needs(self.ctx.target)
        if added and not needs.takes_contrib_ops:
            raise StageError(f"onnxsim wrote {', '.join(sorted(added))} ops, which {needs.label} cannot import",
                             hint="skip this stage with --no-simplify, and report the onnxsim pass")
        inputs_after, _ = io_specs(simplified)
        lost = [a.name for a, b in zip(inputs_before, inputs_after) if a.shape != b.shape]
        if lost:
            raise StageError(f"onnxsim changed the shape of input(s) {', '.join(lost)}",
                             hint="skip this stage with --no-simplify")
        out = workdir / "model.onnx"
        external = save_onnx(simplified, out)
        return StageResult(Artifact(out, "onnx", stage=self.name, parent=artifact.sha256,
                                    meta={"external_data": external}),
                           SimplifyDetails(tool=f"onnxsim {onnxsim.__version__}"))


def _custom_domains(model: Any) -> set[str]:
    return {n.domain for n in model.graph.node if n.domain not in ("", "ai.onnx")}
