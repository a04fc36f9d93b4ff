"""Which CPU artifacts the build-cpu stage builds for a precision, and how it picks one.

Candidates by precision (a backend that is not installed, not allowed by --backend, or cannot do
the precision becomes a skipped candidate with its reason, so the report says why it is absent):

| precision | onnxruntime                   | openvino                                                      |
| fp32      | the input ONNX                | FP32 IR (INFERENCE_PRECISION_HINT f32)                        |
| bf16      | - (no BF16 CPU path)          | IR with the bf16 hint (CPUs with BF16 only)                   |
| fp16      | the input ONNX                | - (no FP16 arithmetic on CPUs)                                |
| int8      | the quantize stage's graph    | that graph as IR (static Q/DQ only); NNCF (defaults, and the  |
|           |                               | transformer setting for encoders); qdq-s8s8 re-quantized      |

The choice: the fastest (median of one interleaved measurement) among the candidates that meet the
accuracy tolerance on held-out data; a candidate that misses it is never chosen.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ORT, OV = "onnxruntime", "openvino"
INSTALL_OV = "pip install 'optcli[openvino]'"


@dataclass
class Candidate:
    """One way to run the model on this CPU: planned, then built, evaluated and measured."""

    name: str                       # e.g. openvino-int8-nncf
    backend: str                    # onnxruntime | openvino
    precision: str                  # fp32 | bf16 | fp16 | int8 (what the graph computes in)
    recipe: str                     # input | convert | convert-input | nncf | nncf-transformer | requantize-s8s8
    skip: str | None = None         # why it is not built
    path: Path | None = None        # the built model (.onnx or .xml)
    runner_options: dict[str, Any] = field(default_factory=dict)
    build: dict[str, Any] = field(default_factory=dict)     # how it was made, build seconds
    accuracy: dict[str, Any] | None = None
    failure: str | None = None      # the tolerance it missed, or why it did not build/run
    latency: dict[str, Any] | None = None
    search: dict[str, Any] = field(default_factory=dict)    # prediction, seconds per phase (optcli/search)

    @property
    def passed(self) -> bool:
        return self.skip is None and self.accuracy is not None and self.failure is None

    @property
    def p50(self) -> float | None:
        return self.latency.get("p50") if self.latency else None

    def to_json(self) -> dict[str, Any]:
        status = "skipped" if self.skip else ("passed" if self.passed else "failed")
        out: dict[str, Any] = {"name": self.name, "backend": self.backend, "precision": self.precision,
                               "recipe": self.recipe, "status": status}
        if self.search:
            out["search"] = self.search
        if self.skip:
            out["reason"] = self.skip
            return out
        if self.failure:
            out["reason"] = self.failure
        out["build"] = self.build
        out["runner_options"] = self.runner_options
        if self.accuracy is not None:
            keys = ("cosine_mean", "cosine_min", "max_abs_err", "top1_agreement", "top1_accuracy")
            out["accuracy"] = {k: round(float(self.accuracy[k]), 6) for k in keys if k in self.accuracy}
        if self.latency is not None:
            out["latency_ms"] = self.latency
        return out


def plan(precision: str, backend: str, *, openvino: bool, nncf: bool | str, bf16: bool | None,
         input_flavour: str | None, dynamic_input: bool, encoder: bool = False) -> list[Candidate]:
    """The candidates for `precision` (pure: the caller says what is installed and what the input is).

    `nncf` is True, or a reason it is unavailable; `bf16` is whether the CPU has BF16 (None: not
    asked, e.g. without OpenVINO); `input_flavour` is the quantize stage's flavour (int8 runs);
    `encoder`: a transformer encoder also gets NNCF's transformer setting (NNCF's defaults were
    faster on one encoder here and lost a pretrained one; only measuring tells).
    """
    def ov(name: str, prec: str, recipe: str, skip: str | None = None) -> Candidate:
        if skip is None and backend == ORT:
            skip = "--backend onnxruntime"
        if skip is None and not openvino:
            skip = f"openvino is not installed ({INSTALL_OV})"
        return Candidate(name, OV, prec, recipe, skip)

    def ort(name: str, prec: str, recipe: str, skip: str | None = None) -> Candidate:
        if skip is None and backend == OV:
            skip = "--backend openvino"
        return Candidate(name, ORT, prec, recipe, skip)

    if precision == "fp32":
        return [ort("onnxruntime-fp32", "fp32", "input"), ov("openvino-fp32", "fp32", "convert")]
    if precision == "bf16":
        no_bf16 = (None if bf16 or bf16 is None
                   else "this CPU has no BF16 arithmetic (OpenVINO lists no BF16 capability)")
        return [ort("onnxruntime-bf16", "bf16", "input", "onnxruntime has no BF16 kernels for the CPU"),
                ov("openvino-bf16", "bf16", "convert", no_bf16)]
    if precision == "fp16":
        return [ort("onnxruntime-fp16", "fp16", "input"),
                ov("openvino-fp16", "fp16", "convert", "OpenVINO's CPU plugin has no FP16 arithmetic "
                   "(it would compute in FP32 or BF16: use --bf16)")]
    if precision != "int8":
        return []
    flavour = (input_flavour or "").removeprefix("int8-")
    own = ov(f"openvino-int8-{flavour or 'input'}", "int8", "convert-input",
             "dynamic INT8 (DynamicQuantizeLinear + MatMulInteger) has no INT8 kernels in OpenVINO: "
             "it ran slower than OpenVINO's FP32 (docs/openvino.md)" if dynamic_input else None)
    s8s8 = ov("openvino-int8-qdq-s8s8", "int8", "requantize-s8s8",
              "the quantize stage's graph is already qdq-s8s8 (openvino-int8-qdq-s8s8 above)"
              if flavour == "qdq-s8s8" else None)
    if flavour == "qdq-s8s8":
        own.name = "openvino-int8-qdq-s8s8"
        s8s8.name = "openvino-int8-qdq-s8s8 (re-quantized)"
    no_nncf = None if nncf is True else str(nncf)
    cands = [ort(f"onnxruntime-int8{'-' + flavour if flavour else ''}", "int8", "input"), own,
             ov("openvino-int8-nncf", "int8", "nncf", no_nncf)]
    if encoder:
        cands.append(ov("openvino-int8-nncf-transformer", "int8", "nncf-transformer", no_nncf))
    return cands + [s8s8]


from optcli.search.elimination import TIE_BAND  # noqa: E402 - one tie rule for the search and the choice
COSINE_TIE = 1e-4
# Fewer moving parts first: the input as it is, a plain conversion, then re-quantization.
SIMPLICITY = {"input": 0, "convert": 1, "convert-input": 1, "nncf": 2, "nncf-transformer": 3, "requantize-s8s8": 4}


def choose(candidates: list[Candidate]) -> tuple[Candidate | None, str]:
    """The fastest candidate that met the tolerance, and a sentence saying why."""
    measured = [c for c in candidates if c.passed and c.p50 is not None]
    if not measured:
        failed = [c for c in candidates if not c.skip]
        if not failed:
            return None, "no candidate could be built"
        return None, "no candidate meets the tolerance: " + "; ".join(f"{c.name}: {c.failure}" for c in failed)
    ranked = sorted(measured, key=lambda c: (c.p50, c.name))
    fastest = ranked[0]
    if len(ranked) == 1:
        return fastest, f"the only candidate within tolerance ({fastest.p50:.3f} ms p50)"
    # Candidates the measurement cannot tell from the fastest (overlapping 95% intervals of the
    # median, or within TIE_BAND of it) are ties. Among ties the more accurate wins (cosines within
    # COSINE_TIE count as equal), then the simpler recipe, then the name: no accuracy is traded for an
    # unmeasurable gain, and repeated compiles of one model choose the same artifact.
    ties = [c for c in ranked if _overlaps(fastest, c) or c.p50 <= fastest.p50 * (1 + TIE_BAND)]
    best = min(ties, key=lambda c: (-round(_cosine(c) / COSINE_TIE), SIMPLICITY.get(c.recipe, 9), c.name))
    others = [c for c in ranked if c is not best]
    runner_up = others[0]
    ratio = runner_up.p50 / best.p50 if best.p50 else float("inf")
    if best is fastest:
        note = (f"fastest of {len(ranked)} within tolerance: {best.p50:.3f} ms p50, "
                f"{ratio:.2f}x the speed of {runner_up.name}")
        if len(ties) > 1:
            note += f" (within noise of {', '.join(c.name for c in ties if c is not best)}, and the most accurate)"
    else:
        note = (f"{best.name} ({best.p50:.3f} ms p50) is within noise of the fastest, {fastest.name} "
                f"({fastest.p50:.3f} ms), and "
                + (f"more accurate (mean cosine {_cosine(best):.5f} vs {_cosine(fastest):.5f})"
                   if round(_cosine(best) / COSINE_TIE) > round(_cosine(fastest) / COSINE_TIE)
                   else "as accurate and simpler"))
    return best, note


def _cosine(c: Candidate) -> float:
    return float((c.accuracy or {}).get("cosine_mean", 0.0))


def _overlaps(a: Candidate, b: Candidate) -> bool:
    if a is b:
        return True
    ci, ci2 = (a.latency or {}).get("p50_ci"), (b.latency or {}).get("p50_ci")
    return bool(ci and ci2 and ci[1] >= ci2[0] and ci2[1] >= ci[0])
