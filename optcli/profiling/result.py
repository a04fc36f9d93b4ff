"""What a per-layer profile found: time per kernel/layer aggregated over runs, and per op type."""
from __future__ import annotations

from collections import defaultdict
from dataclasses import asdict, dataclass, field
from typing import Any, TypedDict

SCHEMA_VERSION = 1


class OpTypeTime(TypedDict):
    """One row of `by_op_type`: the layers of one op type, their typical time per run and share, summed."""
    op_type: str
    per_run_ms: float
    share: float
    layers: int


@dataclass
class _OpSum:
    ms: float = 0.0
    layers: int = 0
    share: float = 0.0


@dataclass
class LayerTime:
    """One kernel (onnxruntime) or layer (TensorRT), summed over the timed runs."""

    name: str                  # as the backend names it
    op_type: str
    nodes: list[str]           # the ONNX node(s) it comes from; empty when the backend added it
    total_ms: float            # over all timed runs
    calls: int
    median_ms: float | None = None   # median time per run; None where the backend gives no runs apart
    share: float = 0.0         # of the time per run of all layers (medians where known, else means)
    provider: str | None = None
    note: str | None = None    # e.g. "layout change added by onnxruntime"

    def per_run_ms(self, runs: int) -> float:
        """Mean time per run."""
        return self.total_ms / runs if runs else 0.0

    def typical_ms(self, runs: int) -> float:
        """What the share is of: the median per run where known, else the mean."""
        return self.median_ms if self.median_ms is not None else self.per_run_ms(runs)

    def to_json(self, runs: int) -> dict[str, object]:
        d = asdict(self)
        d["total_ms"] = round(self.total_ms, 4)
        d["median_ms"] = round(self.median_ms, 5) if self.median_ms is not None else None
        d["share"] = round(self.share, 5)
        d["per_run_ms"] = round(self.per_run_ms(runs), 5)
        return d


@dataclass
class ProfileResult:
    """A per-layer profile of one artifact; `to_json()` is what `optcli profile --json` prints."""

    artifact: dict[str, Any]             # ResolvedArtifact.to_json()
    runtime: str
    settings: dict[str, object]
    runs: int                            # timed runs aggregated
    layers: list[LayerTime]              # slowest first
    run_ms: float | None = None          # mean wall time of one run as the backend saw it
    warnings: list[str] = field(default_factory=list)

    @property
    def kernel_ms_per_run(self) -> float:
        """Sum over layers of their typical (median) time per run."""
        return sum(x.typical_ms(self.runs) for x in self.layers)

    def by_op_type(self) -> list[OpTypeTime]:
        acc: dict[str, _OpSum] = defaultdict(_OpSum)
        for x in self.layers:
            a = acc[x.op_type]
            a.ms += x.typical_ms(self.runs)
            a.share += x.share
            a.layers += 1
        rows = [OpTypeTime(op_type=op, per_run_ms=round(v.ms, 5), share=round(v.share, 5), layers=v.layers)
                for op, v in acc.items()]
        return sorted(rows, key=lambda r: -r["share"])

    def top(self, n: int) -> list[LayerTime]:
        return self.layers[:n]

    def to_json(self, top: int | None = None) -> dict[str, object]:
        layers = self.layers if top is None else self.layers[:top]
        return {"schema_version": SCHEMA_VERSION, "kind": "optcli-profile", "artifact": self.artifact,
                "runtime": self.runtime, "settings": self.settings, "runs": self.runs,
                "run_ms": round(self.run_ms, 5) if self.run_ms is not None else None,
                "kernel_ms_per_run": round(self.kernel_ms_per_run, 5),
                "layers_total": len(self.layers), "layers": [x.to_json(self.runs) for x in layers],
                "by_op_type": self.by_op_type(), "warnings": self.warnings}


def finish(layers: list[LayerTime], runs: int) -> list[LayerTime]:
    """Shares of the per-run time of all layers, slowest first."""
    total = sum(x.typical_ms(runs) for x in layers)
    for x in layers:
        x.share = x.typical_ms(runs) / total if total > 0 else 0.0
    return sorted(layers, key=lambda x: (-x.share, -x.total_ms, x.name))
