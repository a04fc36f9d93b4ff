"""Reports written by earlier optcli versions still load, and loading then writing one changes nothing.

The fixtures are real `optcli compile digits_cnn.pt2 --int8` runs' report.json and report.md: one written by main
at a9e88b1 (schema_version 1, before optcli/report/ was typed: export, simplify, fuse, unpad skipped,
quantize-int8, build-cpu, build-tensorrt skipped), one by the one-build-stage change (schema_version 2: the
same stages, one `build` row)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from optcli.errors import UsageError
from optcli.report import RunReport, to_markdown

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "reports"
V1_RUN = FIXTURES / "main_a9e88b1_digits_cnn_int8.json"
V2_RUN = FIXTURES / "v2_build_digits_cnn_int8.json"


@pytest.mark.parametrize("run", [V2_RUN], ids=["v2"])
def test_a_report_of_this_version_loads_and_round_trips_unchanged(run: Path) -> None:
    report = RunReport.load(run, hint="-")
    original = json.loads(run.read_text(encoding="utf-8"))
    assert [s.name for s in report.stages] == [s["name"] for s in original["stages"]]
    assert report.status == "ok" and report.exit_code == 0 and report.schema_version == 2
    assert json.loads(json.dumps(report.to_json(), default=str)) == original
    assert to_markdown(report) == run.with_suffix(".md").read_text(encoding="utf-8")
    assert report.plan is not None and report.plan.build_work == "optcli.cpu.build_search:CpuBuild"
    assert report.plan.stages[-1] == "build" and "onnxruntime-int8-qdq-u8s8" in report.plan.candidates["build"]


def test_a_version_1_report_loads_as_version_2_with_one_build_row() -> None:
    report = RunReport.load(V1_RUN, hint="-")
    original = json.loads(V1_RUN.read_text(encoding="utf-8"))
    assert report.schema_version == 2
    assert [s.name for s in report.stages] == ["export", "simplify", "fuse", "unpad", "quantize-int8", "build"]
    build = next(s for s in original["stages"] if s["name"] == "build-cpu")
    expected = {**original, "schema_version": 2,
                "stages": [*original["stages"][:5], {**build, "name": "build"}]}
    assert json.loads(json.dumps(report.to_json(), default=str)) == expected
    assert report.stage("build").details.chosen == build["details"]["chosen"]  # read as the CPU build's details


def test_a_version_1_report_renders_what_main_wrote_with_the_build_rows_as_one() -> None:
    main_md = V1_RUN.with_suffix(".md").read_text(encoding="utf-8").splitlines(keepends=True)
    expected = "".join(line.replace("| build-cpu |", "| build |") for line in main_md
                       if not line.startswith("| build-tensorrt |"))
    assert to_markdown(RunReport.load(V1_RUN, hint="-")) == expected


def test_the_migration_keeps_the_build_row_that_ran_whichever_target() -> None:
    from optcli.report.io import migrate

    def row(name: str, status: str) -> dict:
        return {"name": name, "status": status, "details": {}}

    tensorrt_run = {"schema_version": 1, "stages": [row("fuse", "ok"), row("build-cpu", "skipped"),
                                                     row("build-tensorrt", "ok")]}
    assert migrate(tensorrt_run, Path("r.json"), "-")["stages"] == [row("fuse", "ok"), row("build", "ok")]
    both_skipped = {"schema_version": 1, "stages": [row("build-cpu", "skipped"), row("build-tensorrt", "skipped")]}
    assert [s["name"] for s in migrate(both_skipped, Path("r.json"), "-")["stages"]] == ["build"]
    deferred = {"schema_version": 1, "stages": [{**row("quantize-int8", "ok"),
                                                 "accuracy": {"gate_deferred_to": "build-cpu", "cosine_min": 0.9}}]}
    assert migrate(deferred, Path("r.json"), "-")["stages"][0]["accuracy"] == {"gate_deferred_to": "build",
                                                                               "cosine_min": 0.9}
    assert migrate({"schema_version": 1, "stages": []}, Path("r.json"), "-") == {"schema_version": 2, "stages": []}


def test_writing_a_loaded_report_gives_back_the_same_json(tmp_path: Path) -> None:
    RunReport.load(V2_RUN, hint="-").write(tmp_path)
    assert json.loads((tmp_path / "report.json").read_text()) == json.loads(V2_RUN.read_text())


@pytest.mark.parametrize("text", ["[]", "{}", '{"stages": 3}', '{"stages": [{"status": "ok"}]}', "not json"])
def test_what_is_not_a_report_is_a_usage_error(tmp_path: Path, text: str) -> None:
    path = tmp_path / "report.json"
    path.write_text(text)
    with pytest.raises(UsageError):
        RunReport.load(path, hint="-")
