"""The run report: per-stage records and the whole run, as JSON (versioned schema) and Markdown.

The schema is documented in docs/report-schema.md; bump SCHEMA_VERSION on any incompatible change.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from optcli.atomic_write import write_text_atomic

SCHEMA_VERSION = 1
STATUSES = ("pending", "ok", "cached", "skipped", "failed", "interrupted", "not-run")


@dataclass
class StageReport:
    name: str
    status: str = "pending"
    reason: str | None = None
    seconds: float | None = None
    measure_seconds: float | None = None    # the latency and accuracy measurements around the stage
    artifact: str | None = None
    graph: dict[str, Any] = field(default_factory=lambda: {"nodes_before": None, "nodes_after": None,
                                                           "ops_before": None, "ops_after": None})
    latency_ms: dict[str, Any] = field(default_factory=lambda: {"before": None, "after": None})
    accuracy: dict[str, Any] | None = None
    details: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class RunReport:
    optcli_version: str
    model: dict[str, Any]
    target: str
    environment: dict[str, Any]
    config: dict[str, Any]
    stages: list[StageReport] = field(default_factory=list)
    final: dict[str, Any] | None = None
    status: str = "running"                   # running | ok | failed | interrupted
    error: dict[str, Any] | None = None       # {type, message, hint, exit_code, stage}
    seconds: float | None = None
    schema_version: int = SCHEMA_VERSION
    config_file: dict[str, Any] | None = None  # {path, sha256} of the optcli.toml / pyproject.toml read

    @property
    def exit_code(self) -> int:
        if self.status == "ok":
            return 0
        if self.error is not None:
            return int(self.error.get("exit_code", 1))
        return 130 if self.status == "interrupted" else 1

    def mark_not_run(self, reason: str) -> None:
        """Stages still pending when the run ended did not run; say why."""
        for s in self.stages:
            if s.status == "pending":
                s.status, s.reason = "not-run", reason

    def stage(self, name: str) -> StageReport | None:
        return next((s for s in self.stages if s.name == name), None)

    def to_json(self) -> dict[str, Any]:
        d = {"schema_version": self.schema_version, "optcli_version": self.optcli_version, "model": self.model,
             "target": self.target, "environment": self.environment, "status": self.status, "error": self.error,
             "seconds": self.seconds, "config": self.config, "config_file": self.config_file,
             "stages": [s.to_json() for s in self.stages], "final": self.final}
        return d

    @classmethod
    def load(cls, path: Path, hint: str) -> RunReport:
        """Read a report.json; anything that is not one (unreadable, not JSON, no stages) is a UsageError."""
        from optcli.errors import UsageError

        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
            raise UsageError(f"cannot read {path}: {type(exc).__name__}: {str(exc)[:200]}", hint=hint) from None
        if not isinstance(data, dict) or not isinstance(data.get("stages"), list):
            raise UsageError(f"{path} is not an optcli run report (no 'stages' list)", hint=hint)
        stages = []
        for s in data["stages"]:
            if not isinstance(s, dict) or not isinstance(s.get("name"), str):
                raise UsageError(f"{path}: a stage record is malformed", hint=hint)
            known = {k: v for k, v in s.items() if k in StageReport.__dataclass_fields__}
            stages.append(StageReport(**known))
        final = data.get("final")
        if final is not None and not isinstance(final, dict):
            raise UsageError(f"{path}: 'final' is not an object", hint=hint)
        dicts = {k: data.get(k) if isinstance(data.get(k), dict) else {} for k in ("model", "environment", "config")}
        return cls(optcli_version=str(data.get("optcli_version", "")), target=str(data.get("target", "")),
                   stages=stages, final=final, status=str(data.get("status", "unknown")),
                   error=data.get("error") if isinstance(data.get("error"), dict) else None,
                   seconds=data.get("seconds"), schema_version=data.get("schema_version", SCHEMA_VERSION),
                   config_file=data.get("config_file") if isinstance(data.get("config_file"), dict) else None,
                   **dicts)

    def final_artifact(self, report_path: Path, hint: str) -> Path:
        """The final artifact's file, checked: inside the report's folder, with the recorded sha256."""
        from optcli.errors import UsageError
        from optcli.safe_paths import contained, verified

        if not self.final or not self.final.get("artifact"):
            raise UsageError(f"{report_path}: the run has no final artifact (status: {self.status})", hint=hint)
        path = contained(report_path.parent, self.final["artifact"], report_path)
        return verified(path, self.final.get("sha256"), report_path)

    def write(self, out_dir: Path) -> None:
        for name, text in (("report.json", json.dumps(self.to_json(), indent=2, default=str) + "\n"),
                           ("report.md", to_markdown(self))):
            try:
                write_text_atomic(out_dir / name, text)
            except OSError as exc:  # a full disk: say which file (the temporary's write names none)
                if exc.filename is not None:
                    raise
                raise OSError(exc.errno, exc.strerror, str(out_dir / name)) from exc


def _ms(lat: dict[str, Any] | None) -> str:
    return f"{lat['p50']:.3f}" if lat else "-"


def _speedup(before: dict[str, Any] | None, after: dict[str, Any] | None) -> str:
    if not before or not after or not after.get("p50"):
        return "-"
    return f"{before['p50'] / after['p50']:.2f}x"


def _setting(lat: dict[str, Any] | None) -> str:
    """How a latency figure was taken: PyTorch eager, onnxruntime at an optimization level, OpenVINO."""
    if not lat:
        return "-"
    runtime = str(lat.get("runtime", ""))
    if runtime.startswith("torch"):
        return "eager"
    if runtime.startswith("onnxruntime"):
        return f"ort {lat.get('settings', {}).get('graph_optimization', '?')}"
    return runtime.split("-")[0] or "?"


def _settings(before: dict[str, Any] | None, after: dict[str, Any] | None) -> str:
    a, b = _setting(before), _setting(after)
    return a if a == b else f"{a} -> {b}"


def stage_rows(report: RunReport) -> list[list[str]]:
    """One row per stage: the table both the terminal and report.md show."""
    rows = []
    for s in report.stages:
        g = s.graph
        nodes = f"{g['nodes_before'] if g['nodes_before'] is not None else '-'} -> {g['nodes_after'] if g['nodes_after'] is not None else '-'}"
        before, after = s.latency_ms.get("before"), s.latency_ms.get("after")
        acc = s.accuracy or {}
        cos = f"{acc['cosine_min']:.6f}" if "cosine_min" in acc else "-"
        err = f"{acc['max_abs_err']:.2e}" if "max_abs_err" in acc else "-"
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


def _isa(env: dict[str, Any]) -> str:
    """`, AVX2 (no VNNI)`: the capability set's label, where the report has one (reports before it do not)."""
    isa = env.get("cpu_isa")
    return f", {isa['label']}" if isinstance(isa, dict) and isa.get("label") else ""


def to_markdown(report: RunReport) -> str:
    from optcli.environment import busy_warning

    warning = busy_warning(report.environment)
    lines = [f"# optcli report: {Path(report.model['path']).name}", "",
             *([f"> **Warning:** {warning}", ""] if warning else []),
             f"- status: **{report.status}**" + (f" ({report.error['message']})" if report.error else ""),
             f"- target: {report.target}; optcli {report.optcli_version}; "
             f"torch {report.environment.get('torch')}; onnxruntime {report.environment.get('onnxruntime')}",
             f"- cpu: {report.environment.get('cpu')} ({report.environment.get('cpu_count')} cores"
             f"{_isa(report.environment)}); "
             f"gpu: {report.environment.get('gpu') or 'none'}", ""]
    lines += markdown_table(STAGE_COLUMNS, stage_rows(report))
    lines.append("")
    lines.append("Latency: batch 1, p50 over timed runs after warm-up. Graph stages measure before and after "
                 "with onnxruntime graph optimizations **disabled**, so each stage's own effect shows; quantize "
                 "stages with them **on** (onnxruntime turns Q/DQ into integer kernels only when it optimizes); "
                 "the 'measured with' column says which, so compare before/after within a row, not down a column. The export stage's 'before' is PyTorch eager. Accuracy is "
                 "against the FP32 reference (quantize stages: on held-out data).")
    if report.final:
        f = report.final
        lines += ["", "## Final artifact", "",
                  f"- `{f['artifact']}` ({f['precision']}, {f['backend']}, {f.get('size_bytes', 0) / 1e6:.2f} MB)"]
        dep = f.get("latency_ms")
        if f.get("not_measured"):
            lines.append(f"- latency: not measured: {f['not_measured']}")
        if dep:
            lines.append(f"- deployed latency ({dep['runtime']}, graph optimization "
                         f"{dep['settings'].get('graph_optimization', '-')}): p50 {dep['p50']:.3f} ms, "
                         f"p90 {dep['p90']:.3f} ms, p99 {dep['p99']:.3f} ms, {dep['throughput']:.1f} samples/s")
        ref = f.get("reference_latency_ms")
        if ref and dep:
            lines.append(f"- speedup over {ref['runtime']}: {ref['p50'] / dep['p50']:.2f}x (p50)")
    fusions = [s for s in report.stages if s.details.get("fusions")]
    for s in fusions:
        added = s.details["fusions"]["added"]
        if added:
            lines += ["", f"## Fusions ({s.name})", "", ", ".join(f"{k} x{v}" for k, v in added.items())]
    return "\n".join(lines) + "\n"
