"""INT8 against FP32 where the priors do not assume INT8 wins: on a CPU without VNNI (u8 x s8 pairs saturate
in int16, and the overflow-safe recipes use 7-bit weights) the CPU build measures the INT8 it chose against the
FP32 reference graph on onnxruntime in one short interleaved run, records both, and says in one line where
INT8 is not faster. The choice among INT8 candidates still follows their measurement; shipping FP32
instead is the user's call (a compile without --int8)."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NotRequired, TypedDict

from optcli.search.elimination import TIE_BAND
from optcli.search.priors import FP32_BEST, Features, predict

if TYPE_CHECKING:
    import numpy as np

ROUNDS = 5


def assumed_faster(feats: Features) -> bool:
    """Whether the priors have INT8 clearly ahead of the best FP32 here (then nothing is measured)."""
    p = predict(feats, FP32_BEST)
    return feats.precision != "int8" or p.ratio * (1 - p.spread) > 1 + TIE_BAND


class VersusJSON(TypedDict):
    """The build stage's `int8_vs_fp32` details."""

    int8: str
    int8_p50: float
    fp32: str
    fp32_p50: float
    fp32_over_int8: float | None
    int8_faster: bool
    isa: str
    rounds: int
    note: NotRequired[str]


@dataclass(frozen=True)
class Versus:
    """One interleaved measurement of the chosen INT8 against FP32."""

    int8_name: str
    int8_p50: float
    fp32_name: str
    fp32_p50: float
    isa: str            # the CPU's capability label (optcli/cpu/isa.py)
    rounds: int

    @property
    def faster(self) -> bool:
        """INT8 beats FP32 by more than the tie band."""
        return self.int8_p50 < self.fp32_p50 * (1 - TIE_BAND)

    def note(self) -> str | None:
        """The report's one line where INT8 is not faster, else None."""
        if self.faster:
            return None
        return (f"INT8 is not faster than FP32 on this CPU ({self.isa}): {self.int8_name} {self.int8_p50:.3f} ms vs "
                f"{self.fp32_name} {self.fp32_p50:.3f} ms p50 (a compile without --int8 ships FP32)")

    def to_json(self) -> VersusJSON:
        out: VersusJSON = {"int8": self.int8_name, "int8_p50": round(self.int8_p50, 4), "fp32": self.fp32_name,
                           "fp32_p50": round(self.fp32_p50, 4),
                           "fp32_over_int8": round(self.fp32_p50 / self.int8_p50, 3) if self.int8_p50 else None,
                           "int8_faster": self.faster, "isa": self.isa, "rounds": self.rounds}
        note = self.note()
        if note:
            out["note"] = note
        return out


def measure(int8_runner: Any, fp32_runner: Any, arrays: Mapping[str, np.ndarray], names: tuple[str, str], isa: str, *,
            calls: int = 3, block_ms: float = 100.0, switch_ms: float = 20.0, rounds: int = ROUNDS) -> Versus:
    """Alternate blocks of the two runners (optcli/cpu/measure.time_block) and compare their medians."""
    import statistics

    from optcli.cpu.measure import time_block

    feeds = [int8_runner.normalize(arrays), fp32_runner.normalize(arrays)]
    samples: list[list[float]] = [[], []]
    for _ in range(rounds):
        for i, runner in enumerate((int8_runner, fp32_runner)):
            samples[i] += time_block(runner, feeds[i], calls, block_ms, switch_ms)
    return Versus(names[0], statistics.median(samples[0]), names[1], statistics.median(samples[1]), isa, rounds)
