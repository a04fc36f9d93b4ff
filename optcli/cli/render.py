"""Rich rendering for the terminal: progress lines while stages run, then the report table."""
from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from optcli.plan.stage_names import StageName
from optcli.report import (
    DONE,
    STAGE_COLUMNS,
    BuildCpuDetails,
    ExportDetails,
    QuantizeInt8Details,
    RunReport,
    stage_rows,
)

_STATUS_STYLE = {"ok": "green", "cached": "cyan", "skipped": "yellow", "failed": "red bold",
                 "interrupted": "red", "not-run": "dim"}


class Progress:
    """A pipeline event sink that prints one line per finished stage to stderr."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.status: Any = None
        self.total = 0

    def __call__(self, event: str, data: dict[str, Any]) -> None:
        if event == "run_start":
            self.total = len(data["stages"])
            self.console.print(f"[bold]optcli compile[/] -> {data['out']}  (target: {data['target']})")
            self.status = self.console.status("starting")
            self.status.start()
        elif event == "phase" and self.status is not None:
            self.status.update(data["text"])
        elif event == "stage_start" and self.status is not None:
            self.status.update(f"[{data['index']}/{data['total']}] {data['name']}")
        elif event == "stage_end":
            style = _STATUS_STYLE.get(data["status"], "")
            secs = f"{data['seconds']:.2f}s" if data.get("seconds") is not None else ""
            reason = f" ({escape(data['reason'])})" if data.get("reason") else ""
            self.console.print(f"  [{style}]{data['status']:>8}[/] {data['name']:<16} {secs}{reason}")
        elif event == "run_end":
            self.stop()

    def stop(self) -> None:
        if self.status is not None:
            self.status.stop()
            self.status = None


_STATUS_WIDTH = 48


# A final artifact below this share of the baseline's speed is reported as slower, with a warning.
SLOWER_THAN_BASELINE = 0.95


def report_table(report: RunReport) -> Table:
    table = Table(title=f"optcli: {report.model.path} ({report.status})", title_justify="left")
    for col in STAGE_COLUMNS:
        table.add_column(col, justify="right" if col not in ("stage", "status") else "left",
                         overflow="fold")
    for row in stage_rows(report):
        status = row[1].split(":")[0]
        # A skip reason can run to a paragraph (the CPU build lists every candidate): the stage lines above
        # and report.md carry it whole; here it would fold into dozens of lines.
        text = row[1] if len(row[1]) <= _STATUS_WIDTH else row[1][:_STATUS_WIDTH - 1].rstrip() + "…"
        row[1] = f"[{_STATUS_STYLE.get(status, '')}]{escape(text)}[/]"
        table.add_row(*row)
    return table


def loaded_line(report: RunReport) -> str | None:
    """What optcli chose for a model folder: the class, the task and the example inputs."""
    loaded = report.model.loaded_as
    if not loaded:
        return None
    inputs = ", ".join(f"{n}:{s}" for n, s in loaded.get("inputs", {}).items())
    export = report.stage(StageName.EXPORT)
    seq = export.details.dynamic_sequence if export is not None and isinstance(export.details, ExportDetails) \
        else None
    dynamic = "batch dynamic" if not seq else \
        f"batch and sequence dynamic, sequence {seq.min} to {seq.max or 'any'}; a pin fixes it"
    return f"model: {loaded.get('architecture')} as {loaded.get('task')} (--task to change), inputs {inputs} " \
           f"({dynamic}; --input NAME:SHAPE to resize)"


def search_lines(details: BuildCpuDetails) -> list[str]:
    """The CPU build's search: seconds per candidate (build, accuracy check, measurement), what it skipped."""
    search = details.search
    if not search:
        return []
    parts, skipped, late = [], [], []
    for c in details.candidates:
        secs = (c.get("search") or {}).get("seconds") or {}
        reason = c.get("reason") or ""
        if secs:
            parts.append(f"{c['name']} " + ", ".join(f"{k} {v:.1f}s" for k, v in secs.items()))
        elif c.get("status") == "skipped" and "time budget" in reason:
            late.append(c["name"])
        elif c.get("status") == "skipped" and "search)" in reason:
            skipped.append(c["name"])
    lines = [f"  {search['mode']} search: {'; '.join(parts)}"]
    if skipped:
        lines.append(f"  not built (predicted not to win; --search thorough builds them): {', '.join(skipped)}")
    if late:
        lines.append(f"  not built (no time left): {', '.join(late)}")
    if search.get("degraded"):
        lines.append(f"[yellow]  warning: {search['degraded']} (--time-budget)[/]")
    return lines


def final_lines(report: RunReport) -> list[str]:
    f = report.final
    loaded = loaded_line(report)
    if not f:
        return [loaded] if loaded else []
    lines = ([loaded] if loaded else []) + [
        f"final: {f.artifact} ({f.precision}, {f.backend}, {f.size_bytes / 1e6:.2f} MB)"]
    dep, ref = f.latency_ms, f.reference_latency_ms
    if f.not_measured:
        lines.append(f"  latency: not measured: {f.not_measured}")
    if dep:
        lines.append(f"  p50 {dep.p50:.3f} ms  p90 {dep.p90:.3f} ms  p99 {dep.p99:.3f} ms  "
                     f"({dep.runtime}, optimizations {dep.settings.get('graph_optimization', '-')}, batch {dep.batch})")
    if dep and ref and ref.p50 >= SLOWER_THAN_BASELINE * dep.p50:
        lines.append(f"  {ref.p50 / dep.p50:.2f}x faster than {ref.runtime} (p50 {ref.p50:.3f} ms)")
    elif dep and ref:
        # Said loudly, not as "0.85x faster": on small models INT8's own overhead can outweigh its gain
        # (the zoo's YOLOS and BERT classifier .onnx rows, 2026-11-25).
        lines.append(f"[yellow]warning: the final artifact is {dep.p50 / ref.p50:.2f}x SLOWER than the "
                     f"baseline, {ref.runtime} (p50 {ref.p50:.3f} ms), at batch {dep.batch}: at this "
                     "batch the baseline is the one to ship; measure at yours (optcli bench)[/]")
    q = next((s for s in report.stages if isinstance(s.details, QuantizeInt8Details) and s.status in DONE), None)
    fb = q.details.fallback if q is not None and isinstance(q.details, QuantizeInt8Details) else None
    if fb:
        kept = [u["module"] or u["node"] for u in fb["kept_in_float"]]
        names = ", ".join(kept[:4]) + (f" (+{len(kept) - 4} more)" if len(kept) > 4 else "")
        lines.append(f"  int8 fallback: {len(kept)} of {fb['units']} layers kept in float "
                     f"({fb['float_flops_share'] or 0:.1%} of FLOPs, "
                     f"{fb.get('float_fp32_time_share') or 0:.1%} of FP32 time)"
                     f"{': ' + names if kept else ''}; "
                     f"{fb['evaluations']} evaluations in {fb['seconds']:.0f} s of {fb['budget_s']:.0f} "
                     f"({fb['stopped']})")
        if fb.get("warning"):
            lines.append(f"  warning: int8 fallback: {fb['warning']}")
    calibrations = [getattr(s.details, "calibration", None) for s in report.stages if s.status in DONE]
    capped = next((c["capped"] for c in calibrations if isinstance(c, dict) and c.get("capped")), None)
    if capped:
        lines.append(f"  calibration: {capped['note']}")
    built = next((s.details for s in report.stages if isinstance(s.details, BuildCpuDetails) and s.status in DONE),
                 None)
    if built is not None and built.chosen:
        # Which CPU backend won, and why: the table's build row only shows the winner's latency.
        lines.append(f"  build chose {built.chosen}: {built.why}")
        lines += search_lines(built)
    from optcli.environment import busy_warning

    warning = busy_warning(report.environment.to_json())
    if warning:
        lines.append(f"[yellow]warning: {warning}[/]")
    return lines
