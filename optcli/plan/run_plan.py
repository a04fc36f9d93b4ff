"""The plan of a run, computed by the pipeline (optcli/plan/planner.py), executed by the stages, never
re-derived by them.

`plan_run(config, features, registry)` says which stages run, which the fast search's route leaves out
and why (optcli/cpu/route.py decides it, from the priors), which candidates the CPU build considers, whether
the quantize stage leaves its gate and its fallback search to the CPU build's INT8 candidates, and the INT8
last resort the CPU build owes where nothing else passes. What needs no graph is planned before the first
stage; the route needs the first ONNX graph the graph stages get (the user's ONNX, or the exporter's),
so the pipeline completes the plan once, with that graph, before the first stage the route governs.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any

from optcli.plan.build_choice import CPU_SEARCH, work_for
from optcli.plan.route import ONNXRUNTIME_ROUTE, Route
from optcli.plan.stage_names import StageName

if TYPE_CHECKING:
    from optcli.artifact import Artifact

# The stages whose turn decides the route: the first of them asked with an ONNX graph completes the plan.
ROUTE_STAGES = ONNXRUNTIME_ROUTE


@dataclass(frozen=True)
class ModelFeatures:
    """What the planner knows of the model: whether it is PyTorch, and the first ONNX graph the graph
    stages get (None until it exists: a PyTorch model's comes from the export stage)."""

    torch_source: bool
    graph: Artifact | None = None


@dataclass(frozen=True)
class LastResort:
    """The CPU build's INT8 last resort, a step of the plan: the quantize stage's INT8 with its fallback
    search, built by the CPU build only where none of its candidates met the tolerance.
    `label`: "last resort" (the route left the quantize stage out) or "fallback" (the quantize stage
    deferred its fallback search, which then runs only where its INT8 graph says it deferred it)."""

    label: str
    flavour: str | None = None

    @property
    def needs_deferral_mark(self) -> bool:
        return self.label == "fallback"

    def due(self, input_meta: Mapping[str, object], any_passed: bool) -> bool:
        """Whether the CPU build runs this step, given its input's meta and whether a candidate passed."""
        if any_passed:
            return False
        return bool(input_meta.get("fallback_deferred")) if self.needs_deferral_mark else True

    def candidate_name(self, own: str, backend: str) -> str:
        """The step's candidate name: `own` (the input's candidate) for the deferred fallback, the route's
        INT8 flavour on `backend` for the last resort."""
        name = f"{backend}-int8-{self.flavour}" if self.label == "last resort" else own
        return f"{name} ({self.label})"


@dataclass(frozen=True)
class RunPlan:
    """Which stages run (`stages`), why the route leaves some out (`skip_reason`), what the CPU build
    considers (`candidates`), and the quantize stage's hand-over to the CPU build."""

    target: str
    stages: tuple[StageName, ...]
    # What the build stage runs for the target ("module:Class", optcli/plan/build_work.py).
    build_work: str = CPU_SEARCH
    # quantize-int8's gate has no last word where the CPU build's own INT8 candidates follow (OpenVINO, NNCF).
    int8_gate_deferred: bool = False
    # ...and with the fast search the quantize stage leaves its fallback search to the CPU build too.
    int8_fallback_deferred: bool = False
    # The fast search's route (None: not decided: no route stage runs, or the first graph is not here yet).
    route: Route | None = None
    route_pending: bool = False

    def skip_reason(self, stage: str) -> str | None:
        """Why the plan leaves `stage` out, or None."""
        return self.route.stage_skip(stage) if self.route is not None else None

    @property
    def skipped(self) -> dict[StageName, str]:
        """The stages the plan leaves out, with the reason each row shows."""
        return {s: why for s in self.stages if (why := self.skip_reason(s)) is not None}

    @property
    def candidates(self) -> dict[StageName, tuple[str, ...]]:
        """The candidates each build considers, as planned from the first graph (the CPU build plans its final
        list from its own input, whose INT8 flavour the quantize stage decides)."""
        planned = self.route.planned if self.route is not None else ()
        return {StageName.BUILD: planned} if StageName.BUILD in self.stages and planned else {}

    @property
    def last_resort(self) -> LastResort | None:
        """The CPU build's INT8 last resort, where the plan owes one."""
        if self.route is not None and self.route.skips_quantize and StageName.BUILD in self.stages:
            return LastResort("last resort", self.route.details.get("flavour"))
        if self.int8_fallback_deferred and StageName.QUANTIZE_INT8 in self.stages:
            return LastResort("fallback")
        return None

    def needs_graph(self, stage: str, graph: Artifact) -> bool:
        """Whether the plan waits for `graph` (an ONNX graph `stage` is about to be asked about)."""
        from optcli.backends.registry import ONNX

        return self.route_pending and stage in ROUTE_STAGES and graph.format == ONNX

    def to_json(self) -> dict[str, object]:
        """The report's `plan` (optcli/report/records.py PlanRecord)."""
        return {"stages": [str(s) for s in self.stages], "build_work": self.build_work,
                "skipped": {str(k): v for k, v in self.skipped.items()},
                "candidates": {str(k): list(v) for k, v in self.candidates.items()},
                "int8_gate_deferred": self.int8_gate_deferred, "int8_fallback_deferred": self.int8_fallback_deferred,
                **({"last_resort": dataclasses.asdict(self.last_resort)} if self.last_resort else {})}


def unrouted_plan(config: Any, target: str, stages: Iterable[str] | None = None,
                  registry: ModuleType | None = None) -> RunPlan:
    """The plan without its route: what needs no graph (a context made outside a run gets this one)."""
    import importlib

    from optcli.cpu.options import cpu_config

    reg = registry if registry is not None else importlib.import_module("optcli.backends.registry")
    names = tuple(StageName(s) for s in (stages if stages is not None else StageName))
    # The CPU build has the INT8 gate's last word where its own INT8 candidates follow, or where --allow-float
    # lets it ship the FP32 graph instead.
    gate_deferred = cpu_int8_candidates_follow(config, target, reg) or (
        config.quantize.allow_float and work_for(target) == CPU_SEARCH)
    return RunPlan(target=target, stages=names, build_work=work_for(target), int8_gate_deferred=gate_deferred,
                   int8_fallback_deferred=gate_deferred and cpu_config(config).search == "fast",
                   route_pending=any(s in names for s in ROUTE_STAGES))


def cpu_int8_candidates_follow(config: Any, target: str, registry: ModuleType) -> bool:
    """Whether the CPU build will try INT8 candidates of its own (OpenVINO, NNCF: another backend than the one
    that runs the quantize stage's ONNX as it is) after the quantize stage."""
    from optcli.cpu.options import cpu_config

    if work_for(target) != CPU_SEARCH:  # another target builds no CPU candidates
        return False
    forced, own = cpu_config(config).backend, registry.for_format(registry.ONNX).name
    return any(b.name != own and "int8" in b.cpu_precisions and b.installed() and forced in ("auto", b.name)
               for b in registry.all_backends())
