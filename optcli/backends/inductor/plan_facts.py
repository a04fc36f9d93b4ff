"""What the inductor recipe plans with: whether torchao (PT2E INT8) is installed. Pure data after."""
from __future__ import annotations

from typing import Any

from optcli.backends.registry import is_installed


def plan_facts(precision: str, _cpu: Any) -> dict[str, bool]:
    return {"torchao": is_installed("torchao")} if precision == "int8" else {}
