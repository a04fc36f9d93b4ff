"""What OpenVINO's recipes plan with (the CPU build asks before anything is built): whether NNCF can run,
and whether this CPU has BF16 arithmetic."""
from __future__ import annotations

from typing import Any

from optcli.backends.registry import is_installed


def plan_facts(precision: str, cpu: Any) -> dict[str, bool | str | None]:
    """{"nncf": True or why not, "bf16": whether the CPU has BF16 (None: not asked)}."""
    nncf: bool | str = True
    if cpu.nncf == "off":
        nncf = "[cpu] nncf = \"off\""
    elif not is_installed("nncf"):
        nncf = "nncf is not installed (pip install nncf)"
    bf16 = None
    if precision == "bf16" and is_installed("openvino") and cpu.backend in ("auto", "openvino"):
        from optcli.backends.openvino.runner import cpu_supports_bf16

        bf16 = cpu_supports_bf16()
    return {"nncf": nncf, "bf16": bf16}


def machine_facts() -> dict[str, list[str]]:
    """What the CPU build records about the CPU, as OpenVINO sees it."""
    from optcli.backends.openvino.runner import cpu_capabilities

    return {"openvino_capabilities": cpu_capabilities()}
