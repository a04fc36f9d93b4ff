"""What `optcli compare` found: one row per variant, the Pareto set, the recommendation, and the
Markdown/JSON it writes (compare.md, compare.json)."""
from __future__ import annotations

from dataclasses import dataclass, field

from optcli.report import AccuracyResult, ErrorRecord, JsonRecord, LatencyStats, markdown_table

SCHEMA_VERSION = 1
COLUMNS = ["variant", "precision", "p50 ms (b1)", "95% CI", "samples/s (b8)", "size MB", "cosine", "top-1 agree",
           "build s", "pareto", "verdict"]


@dataclass
class VariantResult:
    name: str
    precision_asked: str
    status: str                               # ok | gate-failed (built, refused by its stage's gate) | failed
    precision: str | None = None              # of the artifact actually built
    artifact: str | None = None
    size_bytes: int | None = None
    build_seconds: float | None = None        # summed stage time (as first built, also when cached now)
    wall_seconds: float | None = None         # this run's compile wall time (small when cached)
    accuracy: AccuracyResult | None = None
    accuracy_source: str | None = None
    latency_b1: LatencyStats | None = None
    p50_ci_ms: tuple[float, float] | None = None
    latency_b8: LatencyStats | None = None
    p50_ci_b8_ms: tuple[float, float] | None = None
    meets_tolerance: bool | None = None
    verdict: str = ""
    error: ErrorRecord | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def p50_ms(self) -> float:
        return self.latency_b1.p50 if self.latency_b1 else float("inf")

    @property
    def throughput_b8(self) -> float:
        return self.latency_b8.throughput if self.latency_b8 else 0.0

    def accuracy_value(self) -> float | None:
        """Mean cosine against FP32 (the figure the tolerance gates on)."""
        if not self.accuracy:
            return None
        return self.accuracy.cosine_mean if self.accuracy.cosine_mean is not None else self.accuracy.cosine_min

    def to_json(self) -> dict[str, object]:
        d = {k: v.to_json() if isinstance(v, JsonRecord) else v for k, v in self.__dict__.items()}
        d["p50_ci_ms"] = list(self.p50_ci_ms) if self.p50_ci_ms else None
        d["p50_ci_b8_ms"] = list(self.p50_ci_b8_ms) if self.p50_ci_b8_ms else None
        d["throughput_b8"] = round(self.throughput_b8, 2) if self.latency_b8 else None
        return d


@dataclass
class CompareResult:
    model: str
    out: str
    variants: list[VariantResult]
    tolerance: dict[str, float]
    settings: dict[str, object]        # InterleaveSettings, the variants' order, the runtime
    environment: dict[str, object]
    pareto: list[str] = field(default_factory=list)
    recommended: str | None = None
    reason: str = ""
    warnings: list[str] = field(default_factory=list)

    def measured(self) -> list[VariantResult]:
        return [v for v in self.variants if v.latency_b1 is not None]

    def variant(self, name: str) -> VariantResult | None:
        return next((v for v in self.variants if v.name == name), None)

    def to_json(self) -> dict[str, object]:
        return {"schema_version": SCHEMA_VERSION, "kind": "optcli-compare", "model": self.model, "out": self.out,
                "tolerance": self.tolerance, "settings": self.settings, "environment": self.environment,
                "variants": [v.to_json() for v in self.variants], "pareto": self.pareto,
                "recommended": self.recommended, "reason": self.reason, "warnings": self.warnings}

    def rows(self) -> list[list[str]]:
        """The table both the terminal and compare.md show."""
        rows = []
        for v in self.variants:
            cos = v.accuracy_value()
            top1 = v.accuracy.top1_agreement if v.accuracy else None
            rows.append([
                v.name + (" *" if v.name == self.recommended else ""),
                v.precision or v.precision_asked,
                f"{v.p50_ms:.4f}" if v.latency_b1 else "-",
                f"{v.p50_ci_ms[0]:.4f}-{v.p50_ci_ms[1]:.4f}" if v.p50_ci_ms else "-",
                f"{v.throughput_b8:.1f}" if v.latency_b8 else "-",
                f"{v.size_bytes / 1e6:.3f}" if v.size_bytes is not None else "-",
                f"{cos:.6f}" if cos is not None else "-",
                f"{top1:.4f}" if top1 is not None else "-",
                f"{v.build_seconds:.1f}" if v.build_seconds is not None else "-",
                "yes" if v.name in self.pareto else "",
                v.verdict])
        return rows

    def to_markdown(self) -> str:
        lines = [f"# optcli compare: {self.model}", ""]
        if self.recommended:
            lines.append(f"**Recommended: `{self.recommended}`** ({self.reason})")
        else:
            lines.append(f"**No variant meets the tolerance** ({self.reason})")
        tol = ", ".join(f"{k}={v}" for k, v in self.tolerance.items())
        order = self.settings.get("order")
        order_text = ", ".join(order) if isinstance(order, list) else ""
        lines += ["", f"- tolerance: {tol or 'none'}; accuracy is against FP32 (mean cosine per output)",
                  f"- measured in one interleaved run ({order_text} repeated): latency at "
                  f"batch 1, throughput at batch 8 with one request in flight; runtime "
                  f"{self.settings.get('runtime', '?')}",
                  f"- cpu: {self.environment.get('cpu')} ({self.environment.get('cpu_count')} cores); "
                  f"onnxruntime {self.environment.get('onnxruntime')}", ""]
        lines += markdown_table(COLUMNS, self.rows())
        notes = [f"- {v.name}: {n}" for v in self.variants for n in v.notes]
        notes += [f"- {w}" for w in self.warnings]
        if notes:
            lines += ["", "Notes:", "", *notes]
        lines += ["", "Pareto set: the variants no other variant beats on latency (batch 1 and 8), size or "
                      "accuracy without losing on another; differences within the noise (overlapping 95% CIs, "
                      "sizes within 1%) count as ties. `*` marks the recommendation: the fastest p50 among "
                      "the variants within the tolerance that no other such variant beats beyond noise."]
        return "\n".join(lines) + "\n"


SIZE_TIE = 0.01        # sizes within 1% are the same size
ACCURACY_TIE = 1e-4    # cosines this close are the same accuracy


def _better(a: VariantResult, b: VariantResult) -> list[bool]:
    """Per axis, whether a beats b by more than the noise: p50 at batch 1 and at batch 8 (their 95%
    CIs do not overlap), size (by over 1%), accuracy (by over 1e-4)."""
    def faster(x: tuple[float, float] | None, y: tuple[float, float] | None) -> bool:
        return bool(x and y and x[1] < y[0])

    acc_a, acc_b = a.accuracy_value() or 0.0, b.accuracy_value() or 0.0
    return [faster(a.p50_ci_ms, b.p50_ci_ms), faster(a.p50_ci_b8_ms, b.p50_ci_b8_ms),
            (a.size_bytes or 0) < (b.size_bytes or 0) * (1 - SIZE_TIE), acc_a > acc_b + ACCURACY_TIE]


def _dominates(a: VariantResult, b: VariantResult) -> bool:
    """a beats b beyond noise on one axis and b beats a on none: differences inside the noise are
    ties, so a variant is not kept on the front by a few bytes or a jitter of the timer."""
    return any(_better(a, b)) and not any(_better(b, a))


def pareto_set(variants: list[VariantResult]) -> list[str]:
    return [v.name for v in variants if not any(_dominates(o, v) for o in variants if o is not v)]


def recommend(variants: list[VariantResult]) -> tuple[str | None, str]:
    """The fastest p50 among the variants within tolerance that no other such variant dominates, and
    why. A variant with the lowest p50 by a jitter can still lose beyond noise on batch-8 latency,
    size or accuracy to another: recommending it would contradict the Pareto set."""
    ok = [v for v in variants if v.meets_tolerance and v.latency_b1 is not None]
    if not ok:
        measured = [v for v in variants if v.latency_b1 is not None]
        if not measured:
            return None, "no variant was built and measured"
        return None, "every measured variant misses the accuracy tolerance"
    by_speed = sorted(ok, key=lambda v: (v.p50_ms, -v.throughput_b8))
    front = [v for v in by_speed if not any(_dominates(o, v) for o in ok if o is not v)]
    best = front[0]  # never empty: dominance is a strict partial order on a finite set
    reason = f"fastest p50 at batch 1 within the tolerance: {best.p50_ms:.4f} ms"
    if by_speed[0] is not best:
        winner = next(o for o in ok if _dominates(o, by_speed[0]))
        reason = (f"{by_speed[0].name} had the lowest p50 ({by_speed[0].p50_ms:.4f} ms) but {winner.name} beats "
                  f"it beyond noise elsewhere and loses nowhere; {best.name} is the fastest undominated "
                  f"variant within the tolerance: {best.p50_ms:.4f} ms")
    rival = next((o for o in by_speed if o is not best and o.p50_ci_ms and best.p50_ci_ms
                  and o.p50_ci_ms[0] <= best.p50_ci_ms[1]), None)
    if rival is not None:
        reason += f"; within noise of {rival.name} ({rival.p50_ms:.4f} ms, the 95% CIs overlap)"
    return best.name, reason
