"""What the benchmarks showed wins on a CPU: a table of priors, one row per finding, each with its
evidence (docs/benchmarks/cpu.md). The search builds candidates in the order these predict and skips
one that cannot beat the leader by more than the tie band; `--search thorough` ignores them.

A row says: for this precision (and model kind, size, INT8 instruction set where given), the candidate
`key` ("backend:recipe") runs at `ratio` x the latency of the predicted winner (1.0), give or take
`spread` (the share the evidence varied by). The most specific matching row applies; a candidate with
no row gets UNKNOWN (wide: it is built and measured, as a thorough search would).

Every row names the instruction set its evidence was measured on (`measured_on`): `vnni` for the
tables of docs/benchmarks/cpu.md (machines with AVX-512 VNNI and BF16), `avx2` for this project's AMD
EPYC without VNNI. A `vnni` row applied on a CPU without VNNI is less certain (spread doubled). The
features' `int8_isa` comes from the CPU's capability set (optcli/cpu/isa.py).

INT8 against FP32 (`FP32_BEST`, the fastest FP32 candidate, relative to the INT8 winner): on VNNI
INT8 is predicted well ahead; on a CPU without it there is no such assumption (ratio 1.0, wide): the CPU build
measures INT8 against FP32 there and says so where INT8 is not faster (optcli/cpu/int8_vs_fp32.py).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import NotRequired, TypedDict


@dataclass(frozen=True)
class Features:
    """What the priors condition on."""

    precision: str                  # fp32 | bf16 | fp16 | int8
    kind: str                       # encoder | conv | other
    size: str                       # small (weights < SMALL_BYTES: per-call overhead dominates) | large
    int8_isa: str                   # vnni (AVX-512 VNNI, AVX-VNNI or AMX) | plain (u8 x s8 saturates)

    def to_json(self) -> dict[str, str]:
        return {"precision": self.precision, "kind": self.kind, "size": self.size, "int8_isa": self.int8_isa}


class PredictionJSON(TypedDict):
    """A Prediction as the report writes it (the search's candidates, the route's predictions)."""

    ratio: float
    spread: float
    evidence: str
    less_accurate: NotRequired[bool]


@dataclass(frozen=True)
class Prediction:
    """A candidate's expected latency relative to the predicted winner, and the evidence for it."""

    ratio: float
    spread: float
    evidence: str
    less_accurate: bool = False     # the evidence had it less accurate than the winner: a tie goes against it

    def to_json(self) -> PredictionJSON:
        out: PredictionJSON = {"ratio": self.ratio, "spread": self.spread, "evidence": self.evidence}
        if self.less_accurate:
            out["less_accurate"] = True
        return out


@dataclass(frozen=True)
class Prior:
    precision: str
    key: str
    ratio: float
    spread: float
    evidence: str
    kind: str | None = None
    size: str | None = None
    int8_isa: str | None = None
    less_accurate: bool = False
    measured_on: str = "vnni"       # the instruction set of the evidence: vnni | avx2

    def matches(self, f: Features, key: str) -> bool:
        return (self.precision == f.precision and self.key == key
                and all(want is None or want == have for want, have in
                        ((self.kind, f.kind), (self.size, f.size), (self.int8_isa, f.int8_isa))))

    def specificity(self) -> int:
        return sum(v is not None for v in (self.kind, self.size, self.int8_isa))


SMALL_BYTES = 16 << 20
UNKNOWN = Prediction(1.0, 0.5, "no benchmark evidence for this candidate here: built and measured")
# Where the evidence is, for the rows' `evidence` strings.
CPU_TABLES = "docs/benchmarks/cpu.md"
THIS_MACHINE = "docs/benchmarks/cpu.md, compile time (AVX2 EPYC, no VNNI)"
ISA_TABLES = "docs/benchmarks/cpu.md, INT8 and the instruction set (AVX2 EPYC, no VNNI)"
FP32_BEST = "fp32:best"   # the fastest FP32 candidate, predicted relative to the INT8 winner
AVX2 = "avx2"

# Rows about no one backend: the fastest FP32 candidate against the INT8 winner. Each backend's own rows are in
# its folder (optcli/backends/<name>/priors.py), named by its descriptor's `priors`.
GENERAL_PRIORS: tuple[Prior, ...] = (
    # INT8 against FP32. With VNNI: NNCF INT8 7.0x and 7.6x PyTorch eager against FP32's 1.9x (ResNet-50) and
    # 2.3x (BERT-base) on onnxruntime, 3.9x for OpenVINO BF16: FP32 predicted at ~2x the INT8 winner's latency.
    Prior("int8", FP32_BEST, 2.0, 0.3, "docs ENVIRONMENT: ResNet-50 NNCF INT8 7.0x eager vs ORT FP32 1.9x and "
          "OpenVINO BF16 3.9x; BERT-base 7.6x vs 2.3x", int8_isa="vnni"),
    # Without VNNI no INT8 win is assumed: the CPU build measures INT8 against FP32 and says where it is not faster.
    Prior("int8", FP32_BEST, 1.0, 0.5, "no evidence that INT8 beats FP32 on a CPU without VNNI (u8 x s8 pairs "
          "saturate in int16, 7-bit weights): measured in each run", int8_isa="plain", measured_on=AVX2),
    Prior("int8", FP32_BEST, 1.0, 0.2, f"{ISA_TABLES}: MiniLM-shaped encoder, FP32 OpenVINO over NNCF transformer INT8 "
          "0.91-0.96x, over onnxruntime dynamic INT8 1.13-1.18x: measured in each run", kind="encoder",
          int8_isa="plain", measured_on=AVX2),
    Prior("int8", FP32_BEST, 1.7, 0.2, f"{ISA_TABLES}: ResNet-50, the best FP32 at 1.96-2.29x NNCF INT8's latency and "
          "1.68-1.72x onnxruntime u8/s8 Q/DQ's (7-bit weights), two exports", kind="conv", size="large",
          int8_isa="plain", measured_on=AVX2),
)


@functools.lru_cache(maxsize=1)
def all_priors() -> tuple[Prior, ...]:
    """Every row: the general ones and each registered backend's (its descriptor's `priors`)."""
    from optcli.backends.registry import all_backends, load_object

    rows = list(GENERAL_PRIORS)
    for backend in all_backends():
        if backend.priors:
            rows.extend(load_object(backend.priors))
    return tuple(rows)


def predict(features: Features, key: str) -> Prediction:
    """The most specific prior for `key` under `features`, UNKNOWN where the benchmarks say nothing."""
    rows = [p for p in all_priors() if p.matches(features, key)]
    if not rows:
        return UNKNOWN
    best = max(rows, key=Prior.specificity)
    spread, evidence = best.spread, best.evidence
    if features.precision == "int8" and features.int8_isa == "plain" and best.measured_on != AVX2:
        # Rows measured with VNNI: less certain on a CPU without it.
        spread, evidence = round(spread * 2, 3), evidence + " (measured with VNNI)"
    return Prediction(best.ratio, spread, evidence, best.less_accurate)


def model_kind(ops: dict[str, int], encoder: bool) -> str:
    """encoder (attention + norms), conv (convolutions), or other."""
    if encoder:
        return "encoder"
    return "conv" if any(k.endswith("Conv") for k in ops) else "other"
