"""The run report, typed: the schema (records.py, details.py, run.py), its vocabularies (enums.py), reading,
writing and migrating report.json (io.py) and report.md (markdown.py). docs/report-schema.md documents it;
bump SCHEMA_VERSION on any incompatible change."""
from __future__ import annotations

from optcli.report.details import (
    DETAILS,
    BuildCpuDetails,
    BuildTensorrtDetails,
    DynamicSequence,
    ExportAttempt,
    ExportDetails,
    FuseDetails,
    FusionCounts,
    QuantizeFp16Details,
    QuantizeInt8Details,
    SimplifyDetails,
    StageDetails,
    UnpadDetails,
    details_from_json,
)
from optcli.report.enums import DONE, STAGE_STATUSES, Precision, Status, Target
from optcli.report.io import RunReport, load_report, migrate, report_from_json, write_report
from optcli.report.json_record import JSONObject, JsonRecord, JSONValue
from optcli.report.markdown import STAGE_COLUMNS, markdown_table, stage_rows, to_markdown
from optcli.report.records import (
    AccuracyResult,
    ConfigFileRecord,
    EnvironmentInfo,
    ErrorRecord,
    FinalArtifact,
    GateResult,
    GraphStats,
    InputRecord,
    LatencyPair,
    LatencyStats,
    ModelInfo,
    OutputAccuracy,
    PlanRecord,
)
from optcli.report.run import SCHEMA_VERSION, RunRecord, StageRecord, StageReport

STATUSES = tuple(str(s) for s in STAGE_STATUSES)  # the stage statuses, as strings (before the enum)

__all__ = [
    "DynamicSequence", "ExportAttempt", "FusionCounts",
    "DETAILS", "DONE", "SCHEMA_VERSION", "STAGE_COLUMNS", "STAGE_STATUSES", "STATUSES", "AccuracyResult",
    "BuildCpuDetails", "BuildTensorrtDetails", "ConfigFileRecord", "EnvironmentInfo", "ErrorRecord",
    "ExportDetails", "FinalArtifact", "FuseDetails", "GateResult", "GraphStats", "InputRecord", "JSONObject",
    "JSONValue", "JsonRecord", "LatencyPair", "LatencyStats", "ModelInfo", "OutputAccuracy", "PlanRecord", "Precision",
    "QuantizeFp16Details", "QuantizeInt8Details", "RunRecord", "RunReport", "SimplifyDetails", "StageDetails",
    "StageRecord", "StageReport", "Status", "Target", "UnpadDetails", "details_from_json", "load_report",
    "markdown_table", "migrate", "report_from_json", "stage_rows", "to_markdown", "write_report",
]
