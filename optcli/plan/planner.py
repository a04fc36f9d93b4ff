"""plan_run: the one planner. The pipeline calls it before the first stage, and once more with the first ONNX
graph the graph stages get, where a stage the fast search's route governs is in the run."""
from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from types import ModuleType
from typing import TYPE_CHECKING

from optcli.plan.run_plan import ModelFeatures, RunPlan, unrouted_plan

if TYPE_CHECKING:
    from optcli.config import CompileConfig


def plan_run(config: CompileConfig, features: ModelFeatures, registry: ModuleType | None = None, *,
             target: str, stages: Iterable[str] | None = None) -> RunPlan:
    """The run's plan. `target`: the resolved one (cpu, tensorrt, tensorrt-rtx); `stages`: the names of the
    stages the run has (every stage where not given); `registry`: optcli.backends.registry (or a stand-in).
    The route (optcli/cpu/route.py, from the priors) is decided where `features.graph` is given."""
    plan = unrouted_plan(config, target, stages, registry)
    if not plan.route_pending or features.graph is None:
        return plan
    from optcli.cpu.route import decide_route

    route = decide_route(config, target, features.torch_source, features.graph)
    return dataclasses.replace(plan, route=route, route_pending=False)
