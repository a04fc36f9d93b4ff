"""The terminal's stage table keeps a long skip reason to one cell line and prints reasons as text,
not rich markup (a reason naming `[cpu] search` lost its brackets)."""
from __future__ import annotations

from rich.console import Console

from optcli.cli.render import _STATUS_WIDTH, report_table
from optcli.report import RunReport, StageReport


def test_long_reasons_are_cut_and_brackets_survive() -> None:
    long = "nothing to choose: " + "; ".join(f"openvino-int8-{i}: --backend onnxruntime" for i in range(6))
    report = RunReport(optcli_version="0", model={"path": "m.onnx"}, target="cpu", environment={}, config={},
                       stages=[StageReport("build-cpu", "skipped", long), StageReport("fuse", "skipped", "set [cpu] search")])
    console = Console(width=200, record=True)
    console.print(report_table(report))
    text = console.export_text()
    row = next(line for line in text.splitlines() if "build-cpu" in line)
    assert "…" in row and long not in text
    assert sum("openvino-int8" in line for line in text.splitlines()) <= 1
    assert "set [cpu] search" in text
    assert len(long) > _STATUS_WIDTH
