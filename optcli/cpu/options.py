"""CpuConfig: the `[cpu]` section of a compile config (the build stage on the CPU), and which backends exist.

    [cpu]
    backend = "auto"        # --backend auto, or a registered backend with CPU recipes (onnxruntime, openvino)
    nncf = "auto"           # auto: an NNCF INT8 candidate where nncf is installed; off: never
    search = "fast"         # --search fast: build the predicted winner first, another only while it
                            # could still win, stop measuring what is clearly behind (optcli/search/);
                            # thorough: build and measure every candidate
    min_rounds = 5          # the interleaved measurement: at least this many rounds of one block per
    calls_per_round = 3     # candidate (at least this many timed calls, and block_ms of them, after
    block_ms = 100.0        # switch_ms of untimed calls), at least min_seconds, and on while the two
    switch_ms = 20.0        # fastest candidates are within noise, but never past max_seconds
    min_seconds = 5.0       # (thorough only: fast stops once the leader is settled)
    max_seconds = 30.0
    keep_candidates = false # keep every candidate's files under candidates/ (else only the chosen one)

Registered in optcli.config.SECTIONS; its values are kept in CompileConfig.extra["cpu"] as set (a dict,
set_option checks the keys) and typed here. Which
backends exist, what each can compute in and what it needs installed is the backend registry's answer.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from optcli.backends import registry
from optcli.errors import MissingDependencyError, UsageError

SECTION = "cpu"
NNCF_MODES = ("auto", "off")
SEARCH_MODES = ("fast", "thorough")


@dataclass
class CpuConfig:
    """How the build stage on the CPU picks and measures its candidates."""

    backend: str = "auto"
    nncf: str = "auto"
    search: str = "fast"
    min_rounds: int = 5
    calls_per_round: int = 3
    block_ms: float = 100.0
    switch_ms: float = 20.0
    min_seconds: float = 5.0
    max_seconds: float = 30.0
    keep_candidates: bool = False

    def validate(self) -> None:
        from optcli.config import check_value_type

        for f in dataclasses.fields(self):
            check_value_type(type(self), f.name, getattr(self, f.name), f"[cpu] {f.name}")
        choices = backend_choices()
        if self.backend not in choices:
            raise UsageError(f"unknown CPU backend {self.backend!r}", hint=f"use one of: {', '.join(choices)}")
        if self.nncf not in NNCF_MODES:
            raise UsageError(f"[cpu] nncf = {self.nncf!r}", hint="use auto or off")
        if self.search not in SEARCH_MODES:
            raise UsageError(f"[cpu] search = {self.search!r}", hint="use fast or thorough")
        if self.min_rounds < 1 or self.calls_per_round < 1:
            raise UsageError("[cpu] min_rounds and calls_per_round must be >= 1", hint="e.g. [cpu] min_rounds = 3")
        if not 0 <= self.min_seconds <= self.max_seconds:
            raise UsageError("[cpu] needs 0 <= min_seconds <= max_seconds",
                             hint=f"e.g. [cpu] min_seconds = 0.5, max_seconds = {max(self.min_seconds, 0.5)}")
        if self.block_ms < 0 or self.switch_ms < 0:
            raise UsageError("[cpu] block_ms and switch_ms must be >= 0", hint="e.g. [cpu] block_ms = 100")


def cpu_config(config: Any) -> CpuConfig:
    """The validated [cpu] section of a CompileConfig (defaults where absent)."""
    from optcli.config import stage_section

    return stage_section(config, SECTION, "backend = \"openvino\"")


def backend_choices() -> tuple[str, ...]:
    """What --backend and [cpu] backend take: auto, or a registered backend that builds CPU candidates."""
    return ("auto", *registry.cpu_backend_names())


def check_request(config: Any, target: str) -> CpuConfig:
    """Refuse, before anything runs, what no CPU backend here can do: a forced backend that is not
    installed (exit 4, naming the extra), a forced backend with no path for the precision asked for, a
    precision only an absent backend computes in (BF16 without OpenVINO)."""
    cfg = cpu_config(config)
    precision = config.quantize.precision
    from optcli.plan.build_choice import builds_on_cpu

    if not builds_on_cpu(target):
        if cfg.backend != "auto":
            raise UsageError(f"--backend {cfg.backend} picks a CPU backend, but the target is {target}",
                             hint="use --target cpu with --backend, or drop --backend")
        return cfg
    if cfg.backend != "auto":
        forced = registry.get(cfg.backend)
        forced.require_installed(f"--backend {forced.name}")
        refusal = next((r for r in forced.cpu_refusals if r[0] == precision), None)
        if refusal is not None:
            raise UsageError(refusal[1], hint=refusal[2])
    able = [b for b in registry.all_backends() if b.offers_cpu() and precision in b.cpu_precisions]
    if able and not any(b.installed() for b in able):
        raise MissingDependencyError(able[0].package or able[0].name, able[0].extra or "cpu", f"--{precision} on a CPU")
    return cfg
