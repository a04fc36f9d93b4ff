"""The run report's data: one StageRecord per stage and the whole run (RunRecord). RunReport, the same with
reading and writing report.json and report.md, is in optcli/report/io.py."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from optcli.report.details import StageDetails
from optcli.report.enums import Status, Target
from optcli.report.json_record import OMIT_NONE, JSONObject, JsonRecord
from optcli.report.records import (
    AccuracyResult,
    ConfigFileRecord,
    EnvironmentInfo,
    ErrorRecord,
    FinalArtifact,
    GraphStats,
    LatencyPair,
    ModelInfo,
    PlanRecord,
)

# 2: the two build stages (build-cpu, build-tensorrt) are one, `build` (optcli/report/io.py migrates 1).
SCHEMA_VERSION = 2


@dataclass
class StageRecord(JsonRecord):
    """One stage's row: what happened, how long it took, the graph, latency and accuracy around it."""

    name: str = ""
    status: Status = Status.PENDING
    reason: str | None = None
    seconds: float | None = None
    measure_seconds: float | None = None    # the latency and accuracy measurements around the stage
    artifact: str | None = None
    graph: GraphStats = field(default_factory=GraphStats)
    latency_ms: LatencyPair = field(default_factory=LatencyPair)
    accuracy: AccuracyResult | None = None
    details: StageDetails = field(default_factory=StageDetails)

    @classmethod
    def from_json(cls, data: JSONObject) -> StageRecord:
        from optcli.report.details import details_from_json

        record = super().from_json({k: v for k, v in data.items() if k != "details"})
        details = data.get("details")
        record.details = details_from_json(record.name, details if isinstance(details, dict) else None)
        return record


StageReport = StageRecord  # the name callers used before the report was typed


@dataclass
class RunRecord(JsonRecord):
    """The whole run: the model, the machine, the configuration, each stage, and the artifact to ship."""

    schema_version: int = SCHEMA_VERSION
    optcli_version: str = ""
    model: ModelInfo = field(default_factory=ModelInfo)
    target: Target = Target.CPU
    target_reason: str | None = field(default=None, metadata=OMIT_NONE)  # why that target (auto: the probe)
    environment: EnvironmentInfo = field(default_factory=EnvironmentInfo)
    status: Status = Status.RUNNING
    error: ErrorRecord | None = None
    seconds: float | None = None
    config: JSONObject = field(default_factory=dict)          # CompileConfig.to_json(), for reproducing the run
    config_file: ConfigFileRecord | None = None
    stages: list[StageRecord] = field(default_factory=list)
    final: FinalArtifact | None = None
    plan: PlanRecord | None = field(default=None, metadata=OMIT_NONE)   # reports before 2026-11-27 have none

    @property
    def exit_code(self) -> int:
        if self.status == Status.OK:
            return 0
        if self.error is not None:
            return int(self.error.exit_code)
        return 130 if self.status == Status.INTERRUPTED else 1

    def mark_not_run(self, reason: str) -> None:
        """Stages still pending when the run ended did not run; say why."""
        for s in self.stages:
            if s.status == Status.PENDING:
                s.status, s.reason = Status.NOT_RUN, reason

    def stage(self, name: str) -> StageRecord | None:
        return next((s for s in self.stages if s.name == name), None)

    def final_artifact(self, report_path: Path, hint: str) -> Path:
        """The final artifact's file, checked: inside the report's folder, with the recorded sha256."""
        from optcli.errors import UsageError
        from optcli.safe_paths import contained, verified

        if not self.final or not self.final.artifact:
            raise UsageError(f"{report_path}: the run has no final artifact (status: {self.status})", hint=hint)
        path = contained(report_path.parent, self.final.artifact, report_path)
        return verified(path, self.final.sha256, report_path)
