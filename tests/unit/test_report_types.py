"""The typed report: records hold their types however they are filled, keys a reader does not know survive a
load and a write, a stage's details read as its own class, and schema_version decides what loads."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from optcli.errors import UsageError
from optcli.report import (
    SCHEMA_VERSION,
    AccuracyResult,
    BuildCpuDetails,
    ExportDetails,
    FinalArtifact,
    LatencyStats,
    Precision,
    RunReport,
    StageDetails,
    StageRecord,
    Status,
    Target,
    UnpadDetails,
    details_from_json,
)

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "reports" / "v2_build_digits_cnn_int8.json"


def test_enum_members_are_the_strings_the_json_holds() -> None:
    assert Status.NOT_RUN == "not-run" and Precision.INT8 == "int8" and Target.TENSORRT_RTX == "tensorrt-rtx"
    assert json.dumps({"s": Status.OK}) == '{"s": "ok"}' and f"{Precision.FP16}" == "fp16"


def test_the_target_enum_names_every_target_the_config_takes() -> None:
    from optcli.config import TARGETS

    assert {str(t) for t in Target} == set(TARGETS)


def test_a_loaded_report_holds_types_not_dicts() -> None:
    report = RunReport.load(FIXTURE, hint="-")
    assert report.status is Status.OK and report.target is Target.CPU
    assert isinstance(report.final, FinalArtifact) and report.final.precision is Precision.INT8
    assert isinstance(report.final.latency_ms, LatencyStats) and report.final.latency_ms.p50 > 0
    kinds = {s.name: type(s.details) for s in report.stages}
    assert kinds["export"] is ExportDetails and kinds["build"] is BuildCpuDetails
    assert kinds["unpad"] is StageDetails  # skipped before it ran: only what the pipeline adds
    export = report.stage("export")
    assert export is not None and isinstance(export.accuracy, AccuracyResult)
    assert export.accuracy.outputs and all(o.finite for o in export.accuracy.outputs.values())


def test_dicts_given_to_a_record_become_records() -> None:
    report = RunReport(model={"path": "m.onnx"}, target="cpu", stages=[StageRecord("fuse", "skipped", "off")])
    report.final = {"artifact": "a.onnx", "precision": "fp16", "latency_ms": {"p50": 2.0, "mean": 2.0}}
    assert report.model.path == "m.onnx" and report.stages[0].status is Status.SKIPPED
    assert isinstance(report.final, FinalArtifact) and report.final.precision is Precision.FP16
    assert report.final.latency_ms is not None and report.final.latency_ms.throughput == 500.0


def test_keys_a_reader_does_not_know_are_kept_and_written_back(tmp_path: Path) -> None:
    data = json.loads(FIXTURE.read_text())
    data["added_later"] = {"x": 1}
    data["stages"][0]["details"]["new_fact"] = [1, 2]
    data["final"]["latency_ms"]["p999"] = 3.5
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "report.json").write_text(json.dumps(data))
    RunReport.load(tmp_path / "in" / "report.json", hint="-").write(tmp_path)
    assert json.loads((tmp_path / "report.json").read_text()) == data


def test_a_word_a_newer_optcli_adds_loads_as_its_string() -> None:
    record = StageRecord.from_json({"name": "export", "status": "paused-by-the-future"})
    assert record.status == "paused-by-the-future" and record.to_json()["status"] == "paused-by-the-future"


def test_a_failed_stage_keeps_only_what_the_pipeline_adds() -> None:
    error = {"type": "StageError", "message": "m", "hint": None, "exit_code": 1, "stage": "export"}
    details = details_from_json("export", {"error": error})
    assert type(details) is StageDetails and details.error is not None and details.error.stage == "export"
    assert details.to_json() == {"error": error}


def test_a_refused_unpad_rewrite_round_trips_with_its_reason() -> None:
    data = {"applied": False, "skipped": "output o differs", "mask_input": "attention_mask", "bucket": 16}
    details = details_from_json("unpad", data)
    assert isinstance(details, UnpadDetails) and details.skipped == "output o differs"
    assert details.to_json() == data


def test_the_export_without_onnx_writes_no_sequence_key() -> None:
    data = {"onnx": "no exporter produced a correct ONNX", "attempts": [{"exporter": "dynamo", "error": "e"}],
            "without_onnx": "saved the torch.export program"}
    assert details_from_json("export", data).to_json() == data


def _report_file(tmp_path: Path, **changes: object) -> Path:
    data = {**json.loads(FIXTURE.read_text()), **changes}
    path = tmp_path / "report.json"
    path.write_text(json.dumps(data))
    return path


def test_a_report_of_a_newer_schema_is_refused_with_a_hint(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=f"schema_version {SCHEMA_VERSION + 1}") as info:
        RunReport.load(_report_file(tmp_path, schema_version=SCHEMA_VERSION + 1), hint="-")
    assert "upgrade optcli" in (info.value.hint or "")


def test_a_report_from_before_schema_version_loads_as_version_1_migrated(tmp_path: Path) -> None:
    data = json.loads((FIXTURE.parent / "main_a9e88b1_digits_cnn_int8.json").read_text())
    del data["schema_version"]
    path = tmp_path / "report.json"
    path.write_text(json.dumps(data))
    report = RunReport.load(path, hint="-")
    assert report.schema_version == SCHEMA_VERSION and report.stages[-1].name == "build"


@pytest.mark.parametrize("version", ["1", 0, None, 1.5])
def test_a_schema_version_that_is_no_version_is_refused(tmp_path: Path, version: object) -> None:
    with pytest.raises(UsageError, match="schema_version"):
        RunReport.load(_report_file(tmp_path, schema_version=version), hint="-")


def test_a_latency_read_back_reports_the_figures_it_was_written_with() -> None:
    # throughput computed again from the rounded mean would differ in the last digit: a cached stage's row changed
    written = LatencyStats(p50=0.09213, mean=0.884549, batch=1, runtime="onnxruntime-cpu").to_json()
    assert LatencyStats.from_json(written).to_json() == written
    assert LatencyStats.from_json(written).throughput == pytest.approx(1000 / written["mean"])

