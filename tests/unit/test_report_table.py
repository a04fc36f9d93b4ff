"""The terminal's stage table keeps a long skip reason to one cell line and prints reasons as text,
not rich markup (a reason naming `[cpu] search` lost its brackets)."""
from __future__ import annotations

from rich.console import Console

from optcli.cli.render import _STATUS_WIDTH, final_lines, report_table
from optcli.report import RunReport, StageReport


def test_long_reasons_are_cut_and_brackets_survive() -> None:
    long = "nothing to choose: " + "; ".join(f"openvino-int8-{i}: --backend onnxruntime" for i in range(6))
    report = RunReport(optcli_version="0", model={"path": "m.onnx"}, target="cpu", environment={}, config={},
                       stages=[StageReport("build", "skipped", long),
                               StageReport("fuse", "skipped", "set [cpu] search")])
    console = Console(width=200, record=True)
    console.print(report_table(report))
    text = console.export_text()
    row = next(line for line in text.splitlines() if "build" in line)
    assert "…" in row and long not in text
    assert sum("openvino-int8" in line for line in text.splitlines()) <= 1
    assert "set [cpu] search" in text
    assert len(long) > _STATUS_WIDTH


def _final(p50: float, baseline_p50: float) -> RunReport:
    report = RunReport(optcli_version="0", model={"path": "m.onnx"}, target="cpu", environment={}, config={})
    report.final = {"artifact": "06-build/model.onnx", "precision": "int8", "backend": "onnxruntime",
                    "size_bytes": 1e6,
                    "latency_ms": {"p50": p50, "p90": p50, "p99": p50, "runtime": "onnxruntime-cpu",
                                   "settings": {"graph_optimization": "all"}, "batch": 1},
                    "reference_latency_ms": {"p50": baseline_p50, "runtime": "onnxruntime-cpu"}}
    return report


def test_a_final_artifact_slower_than_its_baseline_is_a_warning_not_a_speedup_below_one() -> None:
    # The zoo's YOLOS .onnx row: INT8 at 0.61x the user's FP32 ONNX was printed as "0.61x faster".
    slower = "\n".join(final_lines(_final(1.0, 0.61)))
    assert "faster than" not in slower
    assert "warning: the final artifact is 1.64x SLOWER than the baseline, onnxruntime-cpu" in slower
    assert "2.00x faster than onnxruntime-cpu" in "\n".join(final_lines(_final(0.5, 1.0)))
    assert "0.97x faster than" in "\n".join(final_lines(_final(1.0, 0.97)))  # within noise: no alarm


def test_a_stage_reason_is_printed_as_written_not_as_markup() -> None:
    """A reason naming a config table ("[unpad] tensorrt = true") lost the table: rich read it as markup."""
    from rich.console import Console

    from optcli.cli.render import Progress

    console = Console(record=True, width=200, color_system=None)
    Progress(console)("stage_end", {"status": "skipped", "name": "unpad", "seconds": None,
                                    "reason": "[unpad] tensorrt = true tries it"})
    assert "([unpad] tensorrt = true tries it)" in console.export_text()
