"""The report's shared records: latency, accuracy, graph statistics, the model, the machine, errors, the final
artifact. docs/report-schema.md documents every field (tests/unit/test_report_schema_doc.py holds it so)."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, cast

from optcli.report.enums import Precision
from optcli.report.json_record import OMIT_NONE, JSONObject, JsonRecord

if TYPE_CHECKING:
    from optcli.accuracy_summary import AccuracySummary

_ROUNDED = ("p50", "p90", "p99", "mean", "min", "max", "std")


def significant(value: float, decimals: int = 4) -> float:
    """`value` for JSON: `decimals` decimals, or more where that keeps fewer than 6 significant digits. Fixed
    decimals alone turned a slow model's 0.0039 samples/s and a 10 ns p50 into 0.0, which a saved baseline
    then refused; never fewer than `decimals`, so a file written before reads back and writes unchanged."""
    if not value or not math.isfinite(value):
        return value
    return round(value, max(decimals, 5 - math.floor(math.log10(abs(value)))))


@dataclass
class LatencyStats(JsonRecord):
    """Per-call latency in milliseconds over `runs` timed calls at `batch`."""

    p50: float = 0.0
    p90: float = 0.0
    p99: float = 0.0
    mean: float = 0.0
    min: float = 0.0
    max: float = 0.0
    std: float = 0.0
    runs: int = 0
    batch: int = 1
    runtime: str = ""
    settings: JSONObject = field(default_factory=dict)
    derived = ("throughput", "cv")

    @property
    def cv(self) -> float:
        """Coefficient of variation (std / mean): above ~0.1 the machine was noisy."""
        return self.std / self.mean if self.mean > 0 else 0.0

    @property
    def throughput(self) -> float:
        """Samples per second at this batch, from the mean."""
        return self.batch * 1000.0 / self.mean if self.mean > 0 else 0.0

    def to_json(self) -> JSONObject:
        d = super().to_json()
        for k in _ROUNDED:
            d[k] = significant(d[k])
        return d

    def json_extras(self) -> JSONObject:
        return {"throughput": significant(self.throughput, 2), "cv": round(self.cv, 4)}


@dataclass
class LatencyPair(JsonRecord):
    """A stage's input and output artifact, timed at the row's setting; both None with --no-bench."""

    before: LatencyStats | None = None
    after: LatencyStats | None = None


@dataclass
class OutputAccuracy(JsonRecord):
    """One output of the artifact against the reference."""

    max_abs_err: float | None = None
    mean_abs_err: float | None = None
    cosine_min: float | None = None
    cosine_mean: float | None = None
    finite: bool | None = None
    top1_agreement: float | None = field(default=None, metadata=OMIT_NONE)


@dataclass
class AccuracyResult(JsonRecord):
    """An artifact against the FP32 reference: the worst over its outputs, and each output. The quantize and
    build stages judge on held-out data and add the keys docs/quantize.md names (kept in `extra`)."""

    max_abs_err: float | None = field(default=None, metadata=OMIT_NONE)
    cosine_min: float | None = field(default=None, metadata=OMIT_NONE)
    cosine_mean: float | None = field(default=None, metadata=OMIT_NONE)
    outputs: dict[str, OutputAccuracy] | None = field(default=None, metadata=OMIT_NONE)
    top1_agreement: float | None = field(default=None, metadata=OMIT_NONE)
    top1_accuracy: float | None = field(default=None, metadata=OMIT_NONE)
    top1_accuracy_reference: float | None = field(default=None, metadata=OMIT_NONE)
    graph_optimization: str | None = field(default=None, metadata=OMIT_NONE)
    reference: str | None = field(default=None, metadata=OMIT_NONE)
    batch: int | None = field(default=None, metadata=OMIT_NONE)
    samples: int | None = field(default=None, metadata=OMIT_NONE)
    data: str | None = field(default=None, metadata=OMIT_NONE)

    @classmethod
    def of(cls, summary: AccuracySummary) -> AccuracyResult:
        """The record of an accuracy summary (optcli/accuracy.py's, with what a stage added)."""
        return cls.from_json(dict(summary))

    def summary(self) -> AccuracySummary:
        """Its JSON as the accuracy checks read it (a gate, check_tolerance): the same keys."""
        return cast("AccuracySummary", self.to_json())

    def merged(self, newer: AccuracyResult | None) -> AccuracyResult:
        """This record with what `newer` says on top (a cached record's notes, figures measured now)."""
        return self if newer is None else AccuracyResult.from_json({**self.to_json(), **newer.to_json()})


@dataclass
class GraphStats(JsonRecord):
    """Node counts and op histograms of a stage's input and output graph (None where that side is not ONNX)."""

    nodes_before: int | None = None
    nodes_after: int | None = None
    ops_before: dict[str, int] | None = None
    ops_after: dict[str, int] | None = None


@dataclass
class InputRecord(JsonRecord):
    """One model input the run used: a str dim is dynamic."""

    name: str = ""
    shape: list[int | str] = field(default_factory=list)
    dtype: str = ""


@dataclass
class ModelInfo(JsonRecord):
    """The user's model."""

    path: str = ""
    spec: str = ""
    format: str = ""
    sha256: str = ""
    inputs: list[InputRecord] = field(default_factory=list)
    loaded_as: JSONObject | None = field(default=None, metadata=OMIT_NONE)


@dataclass
class EnvironmentInfo(JsonRecord):
    """The machine and the library versions (read from package metadata: writing it imports none of them)."""

    python: str | None = None
    platform: str | None = None
    torch: str | None = None
    onnx: str | None = None
    onnxruntime: str | None = None
    onnxruntime_package: str | None = None
    tensorrt: str | None = None
    openvino: str | None = None
    cpu: str | None = None
    cpu_count: int | None = None
    load_average_1m: float | None = None
    gpu: str | None = None
    # optcli/cpu/isa.py's capability set; absent from older reports
    cpu_isa: JSONObject | None = field(default=None, metadata=OMIT_NONE)


@dataclass
class ConfigFileRecord(JsonRecord):
    """The config file the settings came from."""

    path: str = ""
    sha256: str = ""


@dataclass
class ErrorRecord(JsonRecord):
    """Why a run (or a stage) did not finish ok: what the CLI printed, and its exit code."""

    type: str = ""
    message: str = ""
    hint: str | None = None
    exit_code: int = 1
    stage: str | None = None
    traceback: str | None = field(default=None, metadata=OMIT_NONE)


@dataclass
class PlanRecord(JsonRecord):
    """The run's plan as the pipeline computed it (optcli/plan/run_plan.py, RunPlan.to_json): the stages read it,
    never re-derive it."""

    stages: list[str] = field(default_factory=list)
    build_work: str = ""
    skipped: dict[str, str] = field(default_factory=dict)
    candidates: dict[str, list[str]] = field(default_factory=dict)
    int8_gate_deferred: bool = False
    int8_fallback_deferred: bool = False
    last_resort: dict[str, str | None] | None = field(default=None, metadata=OMIT_NONE)


@dataclass
class GateResult(JsonRecord):
    """A stage's accuracy gate that failed."""

    passed: bool = False
    message: str = ""


@dataclass
class FinalArtifact(JsonRecord):
    """The artifact to ship, measured as deployed beside the baseline to beat."""

    artifact: str = ""
    format: str = ""
    precision: Precision = Precision.FP32
    not_measured: str | None = field(default=None, metadata=OMIT_NONE)
    backend: str = ""
    sha256: str | None = None
    size_bytes: int = 0
    flavour: str | None = None
    runner_options: JSONObject = field(default_factory=dict)
    latency_ms: LatencyStats | None = None
    reference_latency_ms: LatencyStats | None = None
