"""Pipeline stages, one per module; each module registers its stage with @register."""
from __future__ import annotations

import importlib
import pkgutil

from optcli.stages.base import Stage, StageContext, StageResult, register, registered

__all__ = ["Stage", "StageContext", "StageResult", "register", "all_stages"]


def all_stages() -> list[type[Stage]]:
    """Every stage in pipeline order (imports the stage modules; they import nothing heavy at top level)."""
    for info in pkgutil.iter_modules(__path__):
        if info.name != "base":
            importlib.import_module(f"{__name__}.{info.name}")
    return registered()
