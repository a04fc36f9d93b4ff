"""What the OpenVINO recipes share: which FP32 ONNX they start from, the precision the IR computes in,
and how a built IR is described to the CPU build."""
from __future__ import annotations

from pathlib import Path

from optcli.artifact import Artifact
from optcli.backends.recipe import Built, RecipeContext

# INFERENCE_PRECISION_HINT for a float candidate.
HINTS = {"fp32": "f32", "bf16": "bf16"}


def int8_remainder() -> str:
    """What the ops left in float compute in, in an OpenVINO INT8 model: BF16 where the CPU has it
    (OpenVINO's own default there), else FP32. The gate measures the result either way."""
    from optcli.backends.openvino.runner import cpu_supports_bf16

    return "bf16" if cpu_supports_bf16() else "f32"


def precision_hint(precision: str) -> str:
    return HINTS.get(precision) or int8_remainder()


def quantize_source(ctx: RecipeContext) -> Artifact:
    """The FP32 ONNX an OpenVINO INT8 candidate starts from: the exporter's graph (its frontend fuses for
    itself, and later rewrites cost it), unless the user excluded nodes by name (the names are those of
    the quantize stage's input graph)."""
    return ctx.float_onnx() if ctx.stage.config.quantize.exclude_nodes else ctx.first_float_onnx()


def named_float(float_art: Artifact, workdir: Path) -> Path:
    """The FP32 ONNX with every node named as the quantize stage names them (--exclude matches)."""
    from optcli.quantize.int8 import name_nodes

    named = workdir / f"float-{float_art.sha256[:12]}-named.onnx"
    if not named.exists():
        name_nodes(float_art.path, named)
    return named


def excluded_nodes(ctx: RecipeContext, named: Path) -> list[str]:
    """--exclude patterns (node names, module paths, globs) as the node names of `named`."""
    from optcli.quantize.int8_with_fallback import user_excludes

    # The path, not its graph_view: without patterns the file is not read (BERT-base's 440 MB, 0.3 s;
    # graph_view caches by path, and `named` is a hard link of a graph already viewed).
    return user_excludes(ctx.stage, named)


def ir_built(xml: Path, details: dict[str, object], hint: str) -> Built:
    """A built IR: the runner compiles it with the precision hint it was gated with."""
    details["inference_precision"] = hint
    return Built(xml, "openvino", runner_options={"precision": {"f32": "fp32"}.get(hint, hint)}, details=details)
