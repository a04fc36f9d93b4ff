"""When a candidate's measured latency is clearly behind the leader's, and when measuring more cannot
change a choice that matters (sequential elimination on the 95% interval of the median).

A tie is what the choice (optcli/cpu/candidates.py `choose`) cannot tell apart: overlapping intervals,
or medians within TIE_BAND. Among ties accuracy decides, so measuring two ties longer buys nothing
once their intervals lie inside one band.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from optcli.latency import median_ci

# Within this share of the fastest p50, candidates are ties (run-to-run noise on a shared CPU is larger
# than the bootstrap interval of one run: 1 in 10 compiles chose differently with intervals alone).
TIE_BAND = 0.05
# Bootstrap draws per interval: the search recomputes intervals every round, so fewer than a report's.
RESAMPLES = 300


@dataclass(frozen=True)
class Standing:
    """One candidate's measured median (ms) and the 95% interval of it."""

    name: str
    p50: float
    low: float
    high: float
    calls: int


def standing(name: str, samples: list[float]) -> Standing:
    """The median and its bootstrap interval from latency samples (ms)."""
    lo, hi = median_ci(samples, resamples=RESAMPLES)
    return Standing(name, float(np.median(samples)), lo, hi, len(samples))


def clearly_behind(a: Standing, leader: Standing, tie_band: float = TIE_BAND) -> bool:
    """`a` cannot be chosen over `leader` on speed: the intervals do not overlap AND the medians
    differ by more than the tie band (else `choose` would call them a tie)."""
    return a.low > leader.high and a.p50 > leader.p50 * (1 + tie_band)


def tied_for_good(a: Standing, b: Standing, tie_band: float = TIE_BAND) -> bool:
    """Both intervals lie inside one tie band: however long they are measured, they stay a tie."""
    return max(a.high, b.high) <= min(a.low, b.low) * (1 + tie_band)


def leader(standings: list[Standing]) -> Standing:
    """The fastest median (the name breaks exact ties, so the order is reproducible)."""
    return min(standings, key=lambda s: (s.p50, s.name))


def settled(standings: list[Standing], tie_band: float = TIE_BAND) -> bool:
    """Measuring more cannot change the choice: every other candidate is clearly behind the leader or
    tied with it for good."""
    if len(standings) < 2:
        return True
    best = leader(standings)
    return all(clearly_behind(s, best, tie_band) or tied_for_good(s, best, tie_band)
               for s in standings if s is not best)
