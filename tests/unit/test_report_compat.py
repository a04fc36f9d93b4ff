"""Reports written by earlier optcli versions still load, and loading then writing one changes nothing.

The fixture is a real `optcli compile digits_cnn.pt2 --int8` run's report.json and report.md, written by main at
a9e88b1 (before optcli/report/ was typed): every stage kind of a CPU INT8 run is in it (export, simplify, fuse,
unpad skipped, quantize-int8, build-cpu, build-tensorrt skipped)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from optcli.errors import UsageError
from optcli.report import RunReport, to_markdown

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "reports"
MAIN_RUN = FIXTURES / "main_a9e88b1_digits_cnn_int8.json"


def test_a_report_written_by_main_loads_and_round_trips_unchanged() -> None:
    report = RunReport.load(MAIN_RUN, hint="-")
    original = json.loads(MAIN_RUN.read_text(encoding="utf-8"))
    assert [s.name for s in report.stages] == [s["name"] for s in original["stages"]]
    assert report.status == "ok" and report.exit_code == 0
    assert json.loads(json.dumps(report.to_json(), default=str)) == original


def test_a_report_written_by_main_renders_the_markdown_main_wrote() -> None:
    report = RunReport.load(MAIN_RUN, hint="-")
    assert to_markdown(report) == MAIN_RUN.with_suffix(".md").read_text(encoding="utf-8")


def test_writing_a_loaded_report_gives_back_the_same_json(tmp_path: Path) -> None:
    RunReport.load(MAIN_RUN, hint="-").write(tmp_path)
    assert json.loads((tmp_path / "report.json").read_text()) == json.loads(MAIN_RUN.read_text())


@pytest.mark.parametrize("text", ["[]", "{}", '{"stages": 3}', '{"stages": [{"status": "ok"}]}', "not json"])
def test_what_is_not_a_report_is_a_usage_error(tmp_path: Path, text: str) -> None:
    path = tmp_path / "report.json"
    path.write_text(text)
    with pytest.raises(UsageError):
        RunReport.load(path, hint="-")
