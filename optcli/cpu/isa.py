"""What the CPU's instruction set offers the INT8 and BF16 kernels: a frozen capability set, read once per
process from the runtimes' own queries, /proc/cpuinfo only where none answers.

| capability | what it changes                                                                     |
| avx2       | the x86 baseline of the integer kernels                                             |
| avx512     | AVX-512 Foundation                                                                   |
| vnni       | AVX-512 VNNI or AVX-VNNI: u8 x s8 dot products accumulate in int32 (VPDPBUSD).       |
|            | Without it (VPMADDUBSW) two u8*s8 products are summed into an int16 that saturates:  |
|            | onnxruntime's u8/s8 Q/DQ then uses 7-bit weights (reduce_range; NNCF keeps 8, measured)|
| amx        | AMX tiles (INT8 and BF16 matrix units)                                              |
| bf16       | native BF16 arithmetic (AVX-512 BF16 or AMX-BF16): OpenVINO's BF16 candidate         |

Sources, in order: OpenVINO's CPU plugin (`OPTIMIZATION_CAPABILITIES` lists BF16 where it has native
BF16 kernels; it says nothing of VNNI), torch's cpuinfo queries where torch is already imported (importing
it costs over a second), and the kernel's CPU flags for whatever they left open. Tests inject a set with
`use(...)` rather than needing the hardware.
"""
from __future__ import annotations

import contextlib
import functools
import platform
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

NAMES = ("avx2", "avx512", "vnni", "amx", "bf16")
# /proc/cpuinfo flag names behind each capability (Linux's spelling).
FLAGS = {"avx2": ("avx2",), "avx512": ("avx512f",), "vnni": ("avx512_vnni", "avx_vnni", "amx_int8"),
         "amx": ("amx_tile",), "bf16": ("avx512_bf16", "amx_bf16")}
TORCH_FLAGS = {"avx512": ("avx512_f",)}  # where torch's cpuinfo spells a flag otherwise


@dataclass(frozen=True)
class CpuIsa:
    """The capability set, and where each answer came from (capability -> source)."""

    avx2: bool
    avx512: bool
    vnni: bool
    amx: bool
    bf16: bool
    arch: str = "x86_64"
    sources: tuple[tuple[str, str], ...] = ()

    @property
    def x86(self) -> bool:
        return self.arch.lower() in ("x86_64", "amd64")

    @property
    def int8(self) -> str:
        """The INT8 instruction class the priors key on: `vnni` (int32 accumulation, AMX included) or
        `plain` (u8 x s8 pairs saturate in int16)."""
        return "vnni" if self.vnni or self.amx else "plain"

    @property
    def u8s8_saturates(self) -> bool:
        """x86 without VNNI: onnxruntime's u8/s8 Q/DQ uses 7-bit weights (reduce_range)."""
        return self.x86 and self.int8 == "plain"

    @property
    def label(self) -> str:
        """A short name for reports and benchmark tables, e.g. `AVX2 (no VNNI)`, `AVX-512 VNNI + BF16`."""
        if not self.x86:
            return self.arch
        base = "AVX-512" if self.avx512 else ("AVX2" if self.avx2 else "x86 without AVX2")
        extras = [n for n, have in (("VNNI", self.vnni), ("AMX", self.amx), ("BF16", self.bf16)) if have]
        return f"{base} {' + '.join(extras)}" if extras else f"{base} (no VNNI)"

    def to_json(self) -> dict[str, Any]:
        return {**{n: getattr(self, n) for n in NAMES}, "arch": self.arch, "int8": self.int8, "label": self.label,
                "sources": dict(self.sources)}


def from_names(names: set[str] | frozenset[str], source: str = "given", arch: str = "x86_64") -> CpuIsa:
    """A capability set from capability names (NAMES); what tests inject."""
    unknown = set(names) - set(NAMES)
    if unknown:
        raise ValueError(f"unknown CPU capabilities {sorted(unknown)}: use {NAMES}")
    return CpuIsa(**{n: n in names for n in NAMES}, arch=arch, sources=tuple((n, source) for n in NAMES))


_injected: list[CpuIsa] = []


@contextlib.contextmanager
def use(isa: CpuIsa) -> Iterator[CpuIsa]:
    """Within the block, detect() answers `isa` (tests of the ISA-keyed decisions)."""
    _injected.append(isa)
    try:
        yield isa
    finally:
        _injected.remove(isa)


def detect() -> CpuIsa:
    """This CPU's capability set (an injected one inside `use`)."""
    return _injected[-1] if _injected else probe()


@functools.lru_cache(maxsize=1)
def probe() -> CpuIsa:
    """Ask the runtimes, then the kernel's flags for what they did not answer."""
    answers: dict[str, tuple[bool, str]] = {}
    for source, ask in (("openvino", _openvino), ("torch", _torch)):
        for name, have in ask().items():
            answers.setdefault(name, (have, source))
    flags = _cpuinfo_flags()
    for name in NAMES:
        if name not in answers and flags is not None:
            answers[name] = (bool(flags & set(FLAGS[name])), "/proc/cpuinfo")
    return CpuIsa(**{n: answers.get(n, (False, "unknown"))[0] for n in NAMES}, arch=platform.machine().lower(),
                  sources=tuple((n, answers.get(n, (False, "unknown"))[1]) for n in NAMES))


def _openvino() -> dict[str, bool]:
    """OpenVINO's CPU plugin: BF16 in OPTIMIZATION_CAPABILITIES means native BF16 kernels."""
    from optcli.backends.registry import is_installed

    if not is_installed("openvino"):
        return {}
    try:
        from optcli.backends.openvino.runner import cpu_capabilities

        return {"bf16": "BF16" in cpu_capabilities()}
    except Exception:  # noqa: BLE001 - a plugin that cannot start answers nothing; the flags still do
        return {}


def _torch() -> dict[str, bool]:
    """torch's own cpuinfo (the library it and onnxruntime read the CPU with), only where torch is already
    imported: importing it costs over a second."""
    cpu = getattr(getattr(sys.modules.get("torch"), "_C", None), "_cpu", None)
    try:
        caps = dict(cpu._get_cpu_capability()) if cpu is not None else {}
    except Exception:  # noqa: BLE001 - a torch build without the query answers nothing
        return {}
    if not caps:
        return {}
    return {name: any(bool(caps.get(f)) for f in (TORCH_FLAGS.get(name) or FLAGS[name])) for name in NAMES}


def _cpuinfo_flags() -> set[str] | None:
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return set()
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return None
