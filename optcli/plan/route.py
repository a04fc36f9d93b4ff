"""The fast search's route through the pipeline on a CPU, as the plan holds it: which graph stages it leaves
out and why. optcli/cpu/route.py decides it from the priors; the stages only read it from the plan."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypedDict

from optcli.plan.stage_names import StageName

if TYPE_CHECKING:
    from optcli.search.priors import PredictionJSON

# The stages whose only consumer on a CPU at INT8 is onnxruntime's route.
ONNXRUNTIME_ROUTE = (StageName.SIMPLIFY, StageName.FUSE, StageName.QUANTIZE_INT8)
# At FP32 / BF16 (no quantize stage on a CPU) the route leaves out the offline graph stages only.
FLOAT_ROUTE = (StageName.SIMPLIFY, StageName.FUSE)


class RouteDetails(TypedDict, total=False):
    """What the route was decided from, as the build stage's `route` details write it (after its verdict)."""

    features: dict[str, str]                    # what the priors conditioned on (Features.to_json)
    flavour: str                                # INT8: the quantize stage's flavour the route planned with
    predictions: dict[str, PredictionJSON]      # INT8: each planned candidate's predicted latency ratio
    because: str                                # why every stage runs
    predicted_winner: str
    from_exporters_graph: list[str]             # FP32 / BF16: the candidates that start from the exporter's graph


@dataclass
class Route:
    """The decision: `skip` says why the fast search leaves out `stages` (None: it runs them);
    `stage_note` is what a skipped stage's row says about it; `planned`: the candidates the CPU build was
    planned to consider from the graph the route was decided on."""

    skip: str | None = None
    details: RouteDetails = field(default_factory=lambda: RouteDetails())
    stage_note: str | None = None
    stages: tuple[StageName, ...] = ONNXRUNTIME_ROUTE
    planned: tuple[str, ...] = ()

    @property
    def skips_quantize(self) -> bool:
        """The route left out the quantize stage's INT8 (the plan then holds the CPU build's last resort)."""
        return self.skip is not None and StageName.QUANTIZE_INT8 in self.stages

    def stage_skip(self, stage: str) -> str | None:
        """Why `stage` is skipped on this route, or None."""
        if self.skip is None or stage not in self.stages:
            return None
        winner = self.details.get("predicted_winner")
        note = self.stage_note or f"{winner} predicted to win (the CPU build's route)"
        return f"fast search: {note}; --search thorough runs it"

    def to_json(self) -> dict[str, object]:
        return {"onnxruntime_route": "skipped" if self.skip else "runs", **({"why": self.skip} if self.skip else {}),
                **self.details}


