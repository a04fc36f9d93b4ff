"""Which build work a target gets (the plan records it as `RunPlan.build_work`; optcli/plan/build_work.py is
the interface): a backend's `engine_build` where the target is its own, else the CPU search. Decided from the
backends' descriptors, never from a target's name."""
from __future__ import annotations

# The work of a run that ends on the CPU: every installed CPU backend's candidates, chosen by measurement.
CPU_SEARCH = "optcli.cpu.build_search:CpuBuild"


def work_for(target: str) -> str:
    """The work ("module:Class") that builds for `target` (resolved: cpu or a backend's target)."""
    from optcli.backends.registry import for_target

    backend = for_target(target)
    if backend is not None and backend.engine_build:
        return backend.engine_build
    return CPU_SEARCH


def builds_on_cpu(target: str) -> bool:
    """Whether a run for `target` (resolved) ends in the CPU search: no backend owns the target with its own build."""
    return work_for(target) == CPU_SEARCH


def all_works() -> tuple[str, ...]:
    """Every build work, the CPU search first: their config sections are checked before the target is known."""
    from optcli.backends.registry import all_backends

    engines = dict.fromkeys(b.engine_build for b in all_backends() if b.engine_build)
    return (CPU_SEARCH, *engines)
