"""The accuracy summary's shape: what optcli/accuracy.py's compare_outputs writes, what the pipeline, the quantize
stages and the build add to it, and what the gates (Stage.gate, Stage.reuse_check) read. The report's typed form
of the same JSON is optcli/report/records.py's AccuracyResult (docs/report-schema.md "Accuracy"); its fields are
keys of these (tests/unit/test_accuracy_summary.py holds them so). Imports nothing: stages and records name it."""

from collections.abc import Iterable, Mapping
from typing import NotRequired, TypedDict


class OutputSummary(TypedDict):
    """One output of an artifact against the reference (an entry of AccuracySummary's `outputs`)."""

    scale: float             # the reference's largest magnitude
    negligible: bool         # scale below accuracy.NUMERIC_ZERO: its cosine is rounding noise
    max_abs_err: float
    mean_abs_err: float
    cosine_min: float        # per sample (rows of dim 0); 0 where the output has NaN/Inf
    cosine_mean: float
    finite: bool             # no NaN/Inf in the artifact's output
    top1_agreement: NotRequired[float]   # 2-D class scores only
    top1_accuracy: NotRequired[float]    # ... with labels
    top1_accuracy_reference: NotRequired[float]


class Judged(TypedDict):
    """What an artifact's accuracy was judged against: the FP32 model's sha256, the held-out set's digest."""

    reference: str
    eval: str


class AccuracySummary(TypedDict, total=False):
    """An artifact's accuracy against the FP32 reference: the worst over its outputs, and each output. A record
    read back from JSON may lack any key, so every key is optional; compare_outputs writes the first four."""

    max_abs_err: float
    cosine_min: float
    cosine_mean: float                   # the lowest per-output mean cosine
    outputs: dict[str, OutputSummary]
    top1_agreement: float
    top1_accuracy: float
    top1_accuracy_reference: float
    # where and how it was measured (the pipeline's random-input check, or a stage's held-out rows)
    graph_optimization: str
    reference: str                       # torch-fp32, onnx-fp32, fp32-onnx, ...
    batch: int
    samples: int
    data: str
    # the quantize stages' notes (docs/quantize.md)
    gate_deferred_to: str                # the stage whose gate has the last word (build)
    fallback_closest: str                # the fallback's closest result, in one line
    int8_ops_after_fallback: int
    judged: Judged                       # on an artifact's meta: the CPU build reuses the figures for it


HEADLINE = ("cosine_mean", "cosine_min", "max_abs_err", "top1_agreement", "top1_accuracy", "top1_accuracy_reference")


def headline(summary: AccuracySummary, keys: Iterable[str] = HEADLINE, digits: int = 6) -> dict[str, float]:
    """The summary's figures named by `keys` (those it has), rounded: a line of a report's attempts."""
    figures: Mapping[str, object] = summary
    return {k: round(float(v), digits) for k in keys
            if isinstance(v := figures.get(k), (int, float)) and not isinstance(v, bool)}
