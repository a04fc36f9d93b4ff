"""Stage fuse: portable graph fusion with ONNX Runtime's offline optimizer (never the ALL level).

- CPU target: onnxruntime's transformer fusions where the graph is an encoder (LayerNorm, Gelu,
  SkipLayerNorm, Attention where its patterns match), then the EXTENDED level (FusedConv,
  FusedMatMul, ... in the com.microsoft domain). Both run on any ORT CPU.
- A target whose builder takes no com.microsoft ops (TensorRT's parser: its descriptor's
  takes_contrib_ops): the BASIC level only, which folds and fuses but keeps plain ONNX ops.
The ALL level is never saved: it writes NCHWc layouts tied to the CPU it ran on.
"""
from __future__ import annotations

import contextlib
import io
import logging
from pathlib import Path
from typing import Any

from optcli.artifact import Artifact
from optcli.backends.onnxruntime.offline_optimizer import optimize_offline
from optcli.backends.registry import ONNX, graph_needs
from optcli.errors import StageError
from optcli.onnx_model import graph_view, is_large, looks_like_encoder, op_histogram
from optcli.optional_imports import require
from optcli.plan.stage_names import StageName
from optcli.report import FuseDetails, FusionCounts
from optcli.stages.base import Stage, StageResult, config_dict, register


def fusions_made(before: dict[str, int], after: dict[str, int]) -> dict[str, dict[str, int]]:
    """Op types that appeared or grew (the fused ops), and those that shrank (what was fused away)."""
    added = {op: after[op] - before.get(op, 0) for op in after if after[op] > before.get(op, 0)}
    removed = {op: before[op] - after.get(op, 0) for op in before if before[op] > after.get(op, 0)}
    return {"added": added, "removed": removed}


@register
class FuseStage(Stage):
    """ONNX -> fused ONNX (onnxruntime offline optimizer, transformer fusions for encoders)."""

    name = StageName.FUSE
    order = 30

    @classmethod
    def enabled(cls, config: Any) -> bool:
        return config.fuse.enabled

    def skip_reason(self, artifact: Artifact) -> str | None:
        if artifact.format != ONNX:
            return f"input is {artifact.format}, not ONNX"
        return self.ctx.plan.skip_reason(self.name)

    def level(self) -> str:
        # TensorRT's parser takes plain ONNX only; the quantizers only know plain ONNX ops (a FusedConv
        # would stay float), and onnxruntime fuses Q/DQ patterns itself when it loads the model.
        if not graph_needs(self.ctx.target).takes_contrib_ops or self.ctx.config.quantize.precision != "fp32":
            return "basic"
        return self.ctx.config.fuse.level

    def transformer_fusions(self, ops: dict[str, int]) -> bool:
        mode = self.ctx.config.fuse.transformer
        if mode == "off" or not graph_needs(self.ctx.target).takes_contrib_ops:
            return False
        q = self.ctx.config.quantize
        if q.precision == "int8" and q.flavour not in ("auto", "dynamic"):
            return False  # static Q/DQ works on plain MatMuls
        return mode == "on" or looks_like_encoder(ops)

    def fingerprint(self) -> dict[str, object]:
        q = self.ctx.config.quantize
        return {**config_dict(self.ctx.config.fuse), "effective_level": self.level(),
                "precision": q.precision, "int8_flavour": q.flavour}

    def run(self, artifact: Artifact, workdir: Path) -> StageResult:
        level = self.level()
        before = op_histogram(graph_view(artifact.path))
        details = FuseDetails(level=level)
        src = artifact.path
        if self.transformer_fusions(before):
            src = workdir / "transformer.onnx"
            details.transformer_fusions = self._transformer_fusions(artifact.path, src)
        out = workdir / "model.onnx"
        optimize_offline(src, out, level, hint="skip this stage with --no-fuse")
        if src != artifact.path:
            src.unlink()
        after = op_histogram(graph_view(out))
        details.fusions = FusionCounts.from_json(fusions_made(before, after))
        return StageResult(Artifact(out, "onnx", stage=self.name, parent=artifact.sha256,
                                    meta={"flavour": "onnxruntime-extended" if level == "extended"
                                          else "onnx-standard"}),
                           details)

    def _transformer_fusions(self, src: Path, dst: Path) -> dict[str, int]:
        """onnxruntime.transformers' BERT fusions (opt_level 0: graph patterns only, no session)."""
        optimizer = require("onnxruntime.transformers.optimizer", "transformer fusions")
        # The optimizer logs pattern-matching chatter at INFO/WARNING; a library stays quiet.
        logging.getLogger("onnxruntime.transformers").setLevel(logging.ERROR)
        with contextlib.redirect_stdout(io.StringIO()):
            try:
                opt = optimizer.optimize_model(str(src), model_type="bert", num_heads=0, hidden_size=0, opt_level=0)
            except Exception as exc:
                raise StageError(f"transformer fusion failed: {str(exc).strip().splitlines()[0][:240]}",
                                 hint="turn it off with --transformer-fusion off") from exc
            opt.save_model_to_file(str(dst), use_external_data_format=is_large(src))
            stats = opt.get_fused_operator_statistics()
        return {k: int(v) for k, v in stats.items() if v}
