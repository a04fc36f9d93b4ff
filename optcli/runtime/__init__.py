"""Runners: one per backend behind one interface (optcli.runtime.base.Runner); which runner opens which
format is the backend registry's answer (optcli/backends/registry.py)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from optcli.runtime.base import Runner

__all__ = ["Runner", "open_runner", "runner_for_format"]


def runner_for_format(fmt: str) -> type[Runner]:
    """The Runner class of the backend that runs `fmt` artifacts (imported on demand)."""
    from optcli.backends.registry import runner_class

    return runner_class(fmt)


def open_runner(path: str | Path, fmt: str, **options: Any) -> Runner:
    """Open a runner for the artifact at `path` of format `fmt`."""
    runner: Any = runner_for_format(fmt)  # the concrete classes open a path; the base takes specs
    return runner(path, **options)
