"""report.md, and the stage table the terminal shows too."""
from __future__ import annotations

from pathlib import Path

from optcli.report.json_record import JSONObject
from optcli.report.records import LatencyStats
from optcli.report.run import RunRecord


def _ms(lat: LatencyStats | None) -> str:
    return f"{lat.p50:.3f}" if lat else "-"


def _speedup(before: LatencyStats | None, after: LatencyStats | None) -> str:
    if not before or not after or not after.p50:
        return "-"
    return f"{before.p50 / after.p50:.2f}x"


def _setting(lat: LatencyStats | None) -> str:
    """How a latency figure was taken: PyTorch eager, onnxruntime at an optimization level, OpenVINO."""
    if not lat:
        return "-"
    runtime = str(lat.runtime)
    if runtime.startswith("torch"):
        return "eager"
    if runtime.startswith("onnxruntime"):
        return f"ort {lat.settings.get('graph_optimization', '?')}"
    return runtime.split("-")[0] or "?"


def _settings(before: LatencyStats | None, after: LatencyStats | None) -> str:
    a, b = _setting(before), _setting(after)
    return a if a == b else f"{a} -> {b}"


def _count(n: int | None) -> str:
    return str(n) if n is not None else "-"


def stage_rows(report: RunRecord) -> list[list[str]]:
    """One row per stage: the table both the terminal and report.md show."""
    rows = []
    for s in report.stages:
        nodes = f"{_count(s.graph.nodes_before)} -> {_count(s.graph.nodes_after)}"
        before, after = s.latency_ms.before, s.latency_ms.after
        acc = s.accuracy
        cos = f"{acc.cosine_min:.6f}" if acc is not None and acc.cosine_min is not None else "-"
        err = f"{acc.max_abs_err:.2e}" if acc is not None and acc.max_abs_err is not None else "-"
        status = s.status if not s.reason else f"{s.status}: {s.reason}"
        rows.append([s.name, status, f"{s.seconds:.2f}" if s.seconds is not None else "-", nodes,
                     _ms(before), _ms(after), _speedup(before, after), _settings(before, after), err, cos])
    return rows


# "measured with" labels each row's latency setting: graph stages run onnxruntime with optimizations
# off (their own effect shows), quantize and build stages with them on, so compare within a row.
STAGE_COLUMNS = ["stage", "status", "seconds", "nodes", "p50 before ms", "p50 after ms", "speedup",
                 "measured with", "max abs err", "cosine min"]


def markdown_table(columns: list[str], rows: list[list[str]]) -> list[str]:
    """A Markdown table's lines (a `|` inside a cell would split it: written as `/`)."""
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    return lines + ["| " + " | ".join(c.replace("|", "/") for c in row) + " |" for row in rows]


_LATENCY_NOTE = (
    "Latency: batch 1, p50 over timed runs after warm-up. Graph stages measure before and after with onnxruntime "
    "graph optimizations **disabled**, so each stage's own effect shows; quantize stages with them **on** "
    "(onnxruntime turns Q/DQ into integer kernels only when it optimizes); the 'measured with' column says which, "
    "so compare before/after within a row, not down a column. The export stage's 'before' is PyTorch eager. "
    "Accuracy is against the FP32 reference (quantize stages: on held-out data).")


def _final_lines(report: RunRecord) -> list[str]:
    f = report.final
    if f is None:
        return []
    lines = ["", "## Final artifact", "",
             f"- `{f.artifact}` ({f.precision}, {f.backend}, {(f.size_bytes or 0) / 1e6:.2f} MB)"]
    dep = f.latency_ms
    if f.not_measured:
        lines.append(f"- latency: not measured: {f.not_measured}")
    if dep:
        lines.append(f"- deployed latency ({dep.runtime}, graph optimization "
                     f"{dep.settings.get('graph_optimization', '-')}): p50 {dep.p50:.3f} ms, "
                     f"p90 {dep.p90:.3f} ms, p99 {dep.p99:.3f} ms, {dep.throughput:.1f} samples/s")
    ref = f.reference_latency_ms
    if ref and dep:
        lines.append(f"- speedup over {ref.runtime}: {ref.p50 / dep.p50:.2f}x (p50)")
    return lines


def _isa(isa: JSONObject | None) -> str:
    """`, AVX2 (no VNNI)`: the capability set's label, where the report has one (reports before it do not)."""
    return f", {isa['label']}" if isinstance(isa, dict) and isa.get("label") else ""


def to_markdown(report: RunRecord) -> str:
    from optcli.environment import busy_warning
    from optcli.report.details import FuseDetails

    env = report.environment
    warning = busy_warning(env.to_json())
    lines = [f"# optcli report: {Path(report.model.path).name}", "",
             *([f"> **Warning:** {warning}", ""] if warning else []),
             f"- status: **{report.status}**" + (f" ({report.error.message})" if report.error else ""),
             f"- target: {report.target}; optcli {report.optcli_version}; "
             f"torch {env.torch}; onnxruntime {env.onnxruntime}",
             f"- cpu: {env.cpu} ({env.cpu_count} cores{_isa(env.cpu_isa)}); gpu: {env.gpu or 'none'}", ""]
    lines += markdown_table(STAGE_COLUMNS, stage_rows(report))
    lines += ["", _LATENCY_NOTE]
    lines += _final_lines(report)
    for s in report.stages:
        if isinstance(s.details, FuseDetails) and s.details.fusions.added:
            added = s.details.fusions.added
            lines += ["", f"## Fusions ({s.name})", "", ", ".join(f"{k} x{v}" for k, v in added.items())]
    return "\n".join(lines) + "\n"
