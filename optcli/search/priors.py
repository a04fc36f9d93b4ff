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

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Features:
    """What the priors condition on."""

    precision: str                  # fp32 | bf16 | fp16 | int8
    kind: str                       # encoder | conv | other
    size: str                       # small (weights < SMALL_BYTES: per-call overhead dominates) | large
    int8_isa: str                   # vnni (AVX-512 VNNI, AVX-VNNI or AMX) | plain (u8 x s8 saturates)

    def to_json(self) -> dict[str, str]:
        return {"precision": self.precision, "kind": self.kind, "size": self.size, "int8_isa": self.int8_isa}


@dataclass(frozen=True)
class Prediction:
    """A candidate's expected latency relative to the predicted winner, and the evidence for it."""

    ratio: float
    spread: float
    evidence: str
    less_accurate: bool = False     # the evidence had it less accurate than the winner: a tie goes against it

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"ratio": self.ratio, "spread": self.spread, "evidence": self.evidence}
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
ORT_INPUT, OV_CONVERT, OV_CONVERT_INPUT = "onnxruntime:input", "openvino:convert", "openvino:convert-input"
NNCF, NNCF_TRANSFORMER, S8S8 = "openvino:nncf", "openvino:nncf-transformer", "openvino:requantize-s8s8"
_CPU = "docs/benchmarks/cpu.md"
_HERE = "docs/benchmarks/cpu.md, compile time (AVX2 EPYC, no VNNI)"
_ISA = "docs/benchmarks/cpu.md, INT8 and the instruction set (AVX2 EPYC, no VNNI)"
FP32_BEST = "fp32:best"   # the fastest FP32 candidate, predicted relative to the INT8 winner
AVX2 = "avx2"

PRIORS: tuple[Prior, ...] = (
    # FP32: OpenVINO's CPU plugin beat onnxruntime by 3-25% on every model but the smallest CNN.
    Prior("fp32", OV_CONVERT, 1.0, 0.10, f"{_CPU}: OpenVINO FP32 0.80-0.97x onnxruntime's latency on tiny_bert, "
          "ResNet-50, BERT-base, MiniLM"),
    Prior("fp32", ORT_INPUT, 1.10, 0.10, f"{_CPU}: onnxruntime FP32 1.03-1.25x OpenVINO's on the same models"),
    Prior("fp32", ORT_INPUT, 1.0, 0.10, f"{_CPU}: digits_cnn onnxruntime 0.105 ms vs OpenVINO 0.163 ms",
          kind="conv", size="small"),
    Prior("fp32", OV_CONVERT, 1.5, 0.15, f"{_CPU}: digits_cnn OpenVINO FP32 1.55x onnxruntime's latency",
          kind="conv", size="small"),
    # INT8, transformer encoders: NNCF's transformer setting is the one within tolerance on a pretrained
    # encoder and ties the others on speed; the others lose accuracy there.
    Prior("int8", NNCF_TRANSFORMER, 1.0, 0.05, f"{_CPU}: the choice on MiniLM (the only one within cosine 0.99) "
          "and BERT-base (tie with NNCF default and s8/s8, most accurate)", kind="encoder"),
    Prior("int8", NNCF, 0.97, 0.02, f"{_CPU}: BERT-base 34.4 vs 35.5 ms, MiniLM 8.80 vs 9.04 ms (within the tie "
          "band, where the more accurate wins) and cosine 0.64 on MiniLM", kind="encoder", less_accurate=True),
    Prior("int8", S8S8, 0.98, 0.02, f"{_CPU}: BERT-base 37.0-40.3 vs 38.9 ms (tie), cosine 0.9981 vs 0.9997; "
          "MiniLM cosine 0.85", kind="encoder", less_accurate=True),
    Prior("int8", ORT_INPUT, 1.35, 0.10, "docs ENVIRONMENT: BERT-base onnxruntime dynamic INT8 5.7x eager vs "
          "OpenVINO+NNCF 7.6x", kind="encoder"),
    # Without VNNI (this project's AVX2 EPYC): onnxruntime's dynamic INT8 (after its fallback) ties NNCF
    # on the pretrained MiniLM, a little less accurate; NNCF default and s8/s8 lose accuracy as with VNNI.
    Prior("int8", ORT_INPUT, 0.9, 0.10, f"{_HERE}: onnxruntime dynamic INT8 vs NNCF transformer: MiniLM 105.7 vs "
          "112.4 ms (a tie), cosine 0.9901 only after an 87 s fallback vs 0.9959; BERT-base 420 vs 502 ms, "
          "cosine 0.99957 vs 0.99902 (random weights)", kind="encoder", int8_isa="plain", less_accurate=True,
          measured_on=AVX2),
    Prior("int8", NNCF_TRANSFORMER, 1.0, 0.05, f"{_HERE}: MiniLM 112.4 ms, the choice (cosine 0.9959); BERT-base "
          "502 ms", kind="encoder", int8_isa="plain", measured_on=AVX2),
    Prior("int8", NNCF, 1.03, 0.05, f"{_HERE}: MiniLM 116.2 vs 112.4 ms, cosine 0.63; BERT-base 511 vs 502 ms",
          kind="encoder", int8_isa="plain", less_accurate=True, measured_on=AVX2),
    Prior("int8", S8S8, 1.07, 0.05, f"{_HERE}: MiniLM 119.9 vs 112.4 ms, cosine 0.83; BERT-base 533 vs 502 ms",
          kind="encoder", int8_isa="plain", less_accurate=True, measured_on=AVX2),
    # On small encoders per-call overhead dominates and onnxruntime's dynamic INT8 was the fastest (VNNI).
    Prior("int8", ORT_INPUT, 0.6, 0.2, f"{_CPU}: thorough search on tiny_bert (1.4 MB): onnxruntime dynamic INT8 0.280 "
          "ms vs NNCF 0.394 ms; the zoo's ALBERT (0.34 MB): 0.082 vs 0.186 ms", kind="encoder", size="small"),
    # ...but on a tiny encoder NNCF's defaults were 9% faster than its transformer setting.
    Prior("int8", NNCF, 1.0, 0.05, f"{_CPU}: tiny_bert NNCF default 0.611 ms vs transformer 0.668 ms, same "
          "cosine", kind="encoder", size="small"),
    Prior("int8", NNCF_TRANSFORMER, 1.09, 0.05, f"{_CPU}: tiny_bert 0.668 vs 0.611 ms", kind="encoder", size="small"),
    # INT8 CNNs: onnxruntime's Q/DQ wins on a small CNN, NNCF on ResNet-50.
    Prior("int8", ORT_INPUT, 1.0, 0.10, f"{_CPU}: digits_cnn onnxruntime Q/DQ 0.087 ms vs NNCF 0.101 ms "
          "(1.16x, 1.7x in a second run)", kind="conv", size="small"),
    Prior("int8", NNCF, 1.3, 0.10, f"{_CPU}: digits_cnn 1.16-1.7x onnxruntime Q/DQ's latency, cosine 0.99943 vs "
          "0.99966", kind="conv", size="small", less_accurate=True),
    Prior("int8", OV_CONVERT_INPUT, 1.5, 0.15, f"{_CPU}: digits_cnn OpenVINO of the Q/DQ graph, like NNCF's 1.16-1.7x",
          kind="conv", size="small"),
    Prior("int8", S8S8, 1.5, 0.15, f"{_CPU}: digits_cnn, like NNCF's 1.16-1.7x", kind="conv", size="small"),
    # Without VNNI (7-bit u8s8 weights for onnxruntime), measured on this project's AVX2 machine.
    Prior("int8", ORT_INPUT, 1.0, 0.10, f"{_HERE}: digits_cnn onnxruntime Q/DQ 0.183-0.256 ms, the fastest "
          "in two runs", kind="conv", size="small", int8_isa="plain",
          measured_on=AVX2),
    Prior("int8", OV_CONVERT_INPUT, 1.5, 0.15, f"{_HERE}: digits_cnn OpenVINO of the Q/DQ graph 1.41-1.76x "
          "onnxruntime's", kind="conv", size="small", int8_isa="plain",
          measured_on=AVX2),
    Prior("int8", NNCF, 1.5, 0.15, f"{_HERE}: digits_cnn NNCF 1.33-2.5x onnxruntime Q/DQ's", kind="conv", size="small",
          int8_isa="plain", measured_on=AVX2),
    Prior("int8", S8S8, 1.6, 0.15, f"{_HERE}: digits_cnn s8/s8 Q/DQ IR 1.57-2.4x onnxruntime Q/DQ's, cosine 0.9939 "
          "vs 0.9995", kind="conv", size="small", int8_isa="plain", less_accurate=True, measured_on=AVX2),
    Prior("int8", NNCF, 1.0, 0.05, f"{_CPU}: ResNet-50 NNCF default 12.1 ms, the choice", kind="conv", size="large"),
    Prior("int8", S8S8, 1.05, 0.15, f"{_CPU}: ResNet-50 s8/s8 Q/DQ 0.86x and 1.12x NNCF's latency in two runs",
          kind="conv", size="large"),
    Prior("int8", S8S8, 1.10, 0.05, f"{_CPU}, compile time (VNNI): ResNet-50 s8/s8 Q/DQ 1.106x and 1.10x NNCF's "
          "latency (fast and thorough search, one run each)", kind="conv", size="large", int8_isa="vnni"),
    Prior("int8", OV_CONVERT_INPUT, 1.08, 0.05, f"{_CPU}: ResNet-50 OpenVINO u8/s8 Q/DQ 1.07-1.09x NNCF's",
          kind="conv", size="large"),
    Prior("int8", ORT_INPUT, 3.0, 0.3, "docs ENVIRONMENT: ResNet-50 onnxruntime static INT8 1.5x eager vs NNCF 7.0x",
          kind="conv", size="large"),
    # INT8 against FP32. With VNNI: NNCF INT8 7.0x and 7.6x PyTorch eager against FP32's 1.9x (ResNet-50) and
    # 2.3x (BERT-base) on onnxruntime, 3.9x for OpenVINO BF16: FP32 predicted at ~2x the INT8 winner's latency.
    Prior("int8", FP32_BEST, 2.0, 0.3, "docs ENVIRONMENT: ResNet-50 NNCF INT8 7.0x eager vs ORT FP32 1.9x and "
          "OpenVINO BF16 3.9x; BERT-base 7.6x vs 2.3x", int8_isa="vnni"),
    # Without VNNI no INT8 win is assumed: the CPU build measures INT8 against FP32 and says where it is not faster.
    Prior("int8", FP32_BEST, 1.0, 0.5, "no evidence that INT8 beats FP32 on a CPU without VNNI (u8 x s8 pairs "
          "saturate in int16, 7-bit weights): measured in each run", int8_isa="plain", measured_on=AVX2),
    Prior("int8", FP32_BEST, 1.0, 0.2, f"{_ISA}: MiniLM-shaped encoder, FP32 OpenVINO over NNCF transformer INT8 "
          "0.91-0.96x, over onnxruntime dynamic INT8 1.13-1.18x: measured in each run", kind="encoder",
          int8_isa="plain", measured_on=AVX2),
    Prior("int8", FP32_BEST, 1.7, 0.2, f"{_ISA}: ResNet-50, the best FP32 at 1.96-2.29x NNCF INT8's latency and "
          "1.68-1.72x onnxruntime u8/s8 Q/DQ's (7-bit weights), two exports", kind="conv", size="large",
          int8_isa="plain", measured_on=AVX2),
)


def predict(features: Features, key: str) -> Prediction:
    """The most specific prior for `key` under `features`, UNKNOWN where the benchmarks say nothing."""
    rows = [p for p in PRIORS if p.matches(features, key)]
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
