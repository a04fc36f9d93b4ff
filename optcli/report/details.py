"""One details record per stage: what each stage says about its work (docs/report-schema.md, "details by
stage"). A stage's inner sub-records that belong to its algorithm (a search's candidates, a fallback's units)
stay JSON objects, documented on the stage's own page.

A stage that did not return a result (skipped, failed, not run) has the base StageDetails: only the keys the
pipeline adds (`error`, `gate`, `not_measured`, `cache_rejected`)."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from optcli.report.json_record import OMIT_NONE, JSONObject, JsonRecord, JSONValue
from optcli.report.records import ErrorRecord, GateResult


@dataclass
class StageDetails(JsonRecord):
    """What the pipeline adds to any stage's details."""

    # a stage whose own analysis found it does not apply (its reason; the pipeline reports it skipped)
    skipped: str | None = field(default=None, metadata=OMIT_NONE)
    error: ErrorRecord | None = field(default=None, metadata=OMIT_NONE)
    gate: GateResult | None = field(default=None, metadata=OMIT_NONE)
    not_measured: str | None = field(default=None, metadata=OMIT_NONE)
    cache_rejected: str | None = field(default=None, metadata=OMIT_NONE)

    @classmethod
    def own_fields(cls) -> set[str]:
        """The fields this stage's class adds to the pipeline's."""
        return {f.name for f in dataclasses.fields(cls)} - {f.name for f in dataclasses.fields(StageDetails)}


@dataclass
class DynamicSequence(JsonRecord):
    """Text inputs whose dim 1 is symbolic, and its range."""

    inputs: list[str] = field(default_factory=list)
    min: int | None = None
    max: int | None = None


@dataclass
class ExportAttempt(JsonRecord):
    exporter: str = ""
    error: str = ""


@dataclass
class ExportDetails(StageDetails):
    exporter: str | None = field(default=None, metadata=OMIT_NONE)
    opset: int | None = field(default=None, metadata=OMIT_NONE)
    opset_requested: int | None = field(default=None, metadata=OMIT_NONE)
    dynamic_batch: bool | None = field(default=None, metadata=OMIT_NONE)
    dynamic_sequence: DynamicSequence | None = None
    verify: JSONObject | None = field(default=None, metadata=OMIT_NONE)
    attention: str | None = field(default=None, metadata=OMIT_NONE)
    attempts: list[ExportAttempt] = field(default_factory=list)
    # every exporter failed and a backend builds from PyTorch: the torch.export program instead
    onnx: str | None = field(default=None, metadata=OMIT_NONE)
    without_onnx: str | None = field(default=None, metadata=OMIT_NONE)

    def to_json(self) -> JSONObject:
        out = super().to_json()
        if self.exporter is None:  # no ONNX was written: no sequence to describe
            out.pop("dynamic_sequence", None)
        return out


@dataclass
class SimplifyDetails(StageDetails):
    tool: str = ""


@dataclass
class FusionCounts(JsonRecord):
    """Op types that appeared or grew, and those that shrank, between a stage's input and output."""

    added: dict[str, int] = field(default_factory=dict)
    removed: dict[str, int] = field(default_factory=dict)


@dataclass
class FuseDetails(StageDetails):
    level: str = ""
    transformer_fusions: dict[str, int] | None = None
    fusions: FusionCounts = field(default_factory=FusionCounts)


@dataclass
class UnpadDetails(StageDetails):
    applied: bool = False
    mask_input: str | None = field(default=None, metadata=OMIT_NONE)
    sequence_inputs: list[str] | None = field(default=None, metadata=OMIT_NONE)
    padded_length: int | str | None = field(default=None, metadata=OMIT_NONE)
    bucket: int | None = field(default=None, metadata=OMIT_NONE)
    sequence_outputs: dict[str, list[int]] | None = field(default=None, metadata=OMIT_NONE)
    constants_changed: list[str] | None = field(default=None, metadata=OMIT_NONE)
    proof: list[JSONObject] | None = field(default=None, metadata=OMIT_NONE)
    data_valid_length: JSONObject | None = field(default=None, metadata=OMIT_NONE)


@dataclass
class QuantizeFp16Details(StageDetails):
    attempts: list[JSONObject] = field(default_factory=list)
    tolerance: dict[str, float] = field(default_factory=dict)
    keep_io_types: bool = True
    evaluation: JSONObject = field(default_factory=dict)
    runner_options: JSONObject = field(default_factory=dict)


@dataclass
class QuantizeInt8Details(StageDetails):
    flavour: JSONObject = field(default_factory=dict)
    calibration: JSONObject = field(default_factory=dict)
    evaluation: JSONObject = field(default_factory=dict)
    tolerance: dict[str, float] = field(default_factory=dict)
    excluded_by_user: list[str] = field(default_factory=list)
    fallback: JSONObject | None = None
    fallback_deferred: str | None = field(default=None, metadata=OMIT_NONE)
    attempts: list[JSONObject] = field(default_factory=list)
    quantized_nodes: int = 0


@dataclass
class BuildCpuDetails(StageDetails):
    precision: str = ""
    backend: str = ""
    tolerance: dict[str, float] = field(default_factory=dict)
    chosen: str = ""
    why: str = ""
    candidates: list[JSONObject] = field(default_factory=list)
    measurement: JSONValue = None
    search: JSONObject = field(default_factory=dict)
    evaluation: JSONObject = field(default_factory=dict)
    cpu: JSONObject = field(default_factory=dict)
    candidates_kept: bool = False
    calibration: JSONObject | None = field(default=None, metadata=OMIT_NONE)
    route: JSONObject | None = field(default=None, metadata=OMIT_NONE)
    unpad_source: list[JSONObject] | None = field(default=None, metadata=OMIT_NONE)


@dataclass
class BuildTensorrtDetails(StageDetails):
    tensorrt: str | None = None
    builder: str | None = None
    gpu: str | None = None
    compute_capability: str | None = None
    engine_cache: JSONObject = field(default_factory=dict)
    built_now: bool = True
    build_seconds: float | None = None
    engine_bytes: int | None = None
    profiles: list[JSONValue] = field(default_factory=list)
    inputs: list[JSONValue] = field(default_factory=list)
    outputs: list[JSONValue] = field(default_factory=list)
    options: JSONObject = field(default_factory=dict)
    timing_cache: JSONValue = None
    tensorrt_warnings: list[str] | None = field(default=None, metadata=OMIT_NONE)


# The stage name -> its details classes, the first whose own keys the data holds (the build stage's: its
# work's, the CPU search's or an engine build's); a stage not named here (a plugin's) keeps StageDetails + extra.
DETAILS: dict[str, tuple[type[StageDetails], ...]] = {
    "export": (ExportDetails,), "simplify": (SimplifyDetails,), "fuse": (FuseDetails,), "unpad": (UnpadDetails,),
    "quantize-fp16": (QuantizeFp16Details,), "quantize-int8": (QuantizeInt8Details,),
    "build": (BuildCpuDetails, BuildTensorrtDetails),
}


def details_from_json(stage: str, data: JSONObject | StageDetails | None) -> StageDetails:
    """The stage's details record of `data` (what a stage returned, or a report's JSON): its own class when
    `data` holds any of its keys (the stage produced a result), else the pipeline's StageDetails."""
    if isinstance(data, StageDetails):
        return data
    data = data or {}
    cls = next((c for c in DETAILS.get(stage, ()) if c.own_fields() & set(data)), StageDetails)
    return cls.from_json(data)
