"""What a per-layer profile found: time per kernel/layer aggregated over runs, and per op type."""
from __future__ import annotations

from collections import defaultdict
from dataclasses import asdict, dataclass, field
from typing import Any

SCHEMA_VERSION = 1


@dataclass
class LayerTime:
    """One kernel (onnxruntime) or layer (TensorRT), summed over the timed runs."""

    name: str                  # as the backend names it
    op_type: str
    nodes: list[str]           # the ONNX node(s) it comes from; empty when the backend added it
    total_ms: float            # over all timed runs
    calls: int
    share: float = 0.0         # of the summed kernel time
    provider: str | None = None
    note: str | None = None    # e.g. "layout change added by onnxruntime"

    def per_run_ms(self, runs: int) -> float:
        return self.total_ms / runs if runs else 0.0

    def to_json(self, runs: int) -> dict[str, Any]:
        d = asdict(self)
        d["total_ms"] = round(self.total_ms, 4)
        d["share"] = round(self.share, 5)
        d["per_run_ms"] = round(self.per_run_ms(runs), 5)
        return d


@dataclass
class ProfileResult:
    """A per-layer profile of one artifact; `to_json()` is what `optcli profile --json` prints."""

    artifact: dict[str, Any]
    runtime: str
    settings: dict[str, Any]
    runs: int                            # timed runs aggregated
    layers: list[LayerTime]              # slowest first
    run_ms: float | None = None          # mean wall time of one run as the backend saw it
    warnings: list[str] = field(default_factory=list)

    @property
    def kernel_ms_per_run(self) -> float:
        return sum(x.total_ms for x in self.layers) / self.runs if self.runs else 0.0

    def by_op_type(self) -> list[dict[str, Any]]:
        acc: dict[str, dict[str, Any]] = defaultdict(lambda: {"total_ms": 0.0, "layers": 0, "share": 0.0})
        for x in self.layers:
            a = acc[x.op_type]
            a["total_ms"] += x.total_ms
            a["share"] += x.share
            a["layers"] += 1
        rows = [{"op_type": op, "per_run_ms": round(v["total_ms"] / max(self.runs, 1), 5),
                 "share": round(v["share"], 5), "layers": v["layers"]} for op, v in acc.items()]
        return sorted(rows, key=lambda r: -r["share"])

    def top(self, n: int) -> list[LayerTime]:
        return self.layers[:n]

    def to_json(self, top: int | None = None) -> dict[str, Any]:
        layers = self.layers if top is None else self.layers[:top]
        return {"schema_version": SCHEMA_VERSION, "kind": "optcli-profile", "artifact": self.artifact,
                "runtime": self.runtime, "settings": self.settings, "runs": self.runs,
                "run_ms": round(self.run_ms, 5) if self.run_ms is not None else None,
                "kernel_ms_per_run": round(self.kernel_ms_per_run, 5),
                "layers_total": len(self.layers), "layers": [x.to_json(self.runs) for x in layers],
                "by_op_type": self.by_op_type(), "warnings": self.warnings}


def finish(layers: list[LayerTime]) -> list[LayerTime]:
    """Shares of the summed time, slowest first."""
    total = sum(x.total_ms for x in layers)
    for x in layers:
        x.share = x.total_ms / total if total > 0 else 0.0
    return sorted(layers, key=lambda x: (-x.total_ms, x.name))
