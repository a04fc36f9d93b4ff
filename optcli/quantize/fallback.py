"""The INT8 fallback, wired to the real quantizer: rank the units, search, report in module names.

The quantize-int8 stage calls `run_fallback` when plain INT8 misses the tolerance; the search itself
(fallback_search.py) knows nothing about files or ONNX Runtime.
"""
from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np

from optcli.accuracy import check_tolerance
from optcli.calibration.dataset import SampleSet
from optcli.quantize.evaluate import evaluate
from optcli.quantize.fallback_search import FallbackSearch, SearchResult, Trial, relabelled
from optcli.quantize.flavour import Flavour
from optcli.quantize.fp16_base import RUNNER_OPTIONS as FP16_RUNNER_OPTIONS
from optcli.quantize.fp16_base import cast_float_parts_to_fp16
from optcli.quantize.int8 import int8_op_counts, quantize
from optcli.quantize.latency_share import node_time_shares
from optcli.quantize.qdq_strip import strip_input_qdq
from optcli.quantize.sensitivity import node_damage
from optcli.quantize.units import Unit, UnitRow

# Trials are judged on this many held-out samples (the final gate uses all of them): a ResNet-50
# trial is a re-quantize plus 64 images, a few seconds on two cores.
SEARCH_SAMPLES = 64


@dataclass
class Quantizer:
    """Everything a trial needs to quantize the model with some units kept in float."""

    fp32: Path
    flavour: Flavour
    ranges: Path | None
    method: str
    manual: list[str]
    members: dict[str, tuple[str, ...]]  # unit id -> the nodes it keeps in float
    fp16_base: bool = False   # the float parts in FP16 (TensorRT --int8: quantize/fp16_base.py)

    @property
    def runner_options(self) -> dict[str, object] | None:
        """onnxruntime options the written graph is evaluated with (None: the defaults)."""
        return dict(FP16_RUNNER_OPTIONS) if self.fp16_base else None

    def write(self, dst: Path, excluded: list[str] | frozenset[str]) -> dict[str, int]:
        nodes = {n for u in excluded for n in self.members.get(u, (u,))} | set(self.manual)
        counts = quantize(self.fp32, dst, self.flavour, self.ranges, self.method, sorted(nodes))
        if nodes and self.flavour.static and strip_input_qdq(dst, nodes):
            counts = int8_op_counts(dst)
        if self.fp16_base:
            cast_float_parts_to_fp16(dst)
        return counts


def rank_units(units: list[Unit], damage: dict[str, float]) -> list[Unit]:
    """Most local damage first; units without a measurement after, heaviest (FLOPs) first."""
    return sorted(units, key=lambda u: (-(damage.get(u.node, float("-inf"))), -u.flops, u.order))


def run_fallback(qz: Quantizer, int8_model: Path, units: list[Unit], total_flops: float,
                 reference: list[np.ndarray], ev: SampleSet, tol: Any, budget_s: float,
                 workdir: Path) -> tuple[SearchResult, dict[str, object]]:
    """Search for the units to keep in float; (result, the report's fallback section, without
    accuracy and latency after, which the caller measures on the final model)."""
    t0 = time.perf_counter()
    candidates = [u for u in units if u.node not in qz.manual]
    damage = node_damage(qz.fp32, int8_model, [u.node for u in candidates], ev)
    ranked = rank_units(candidates, damage)
    n = min(len(ev), SEARCH_SAMPLES)
    sub = ev.take(slice(0, n))
    sub_ref = [r[:n] for r in reference]
    trial_path = workdir / "fallback-trial.onnx"

    def judge(path: Path) -> tuple[Mapping[str, object], bool]:
        acc = evaluate(path, sub_ref, sub, runner_options=qz.runner_options)
        return acc, check_tolerance(acc, tol.cosine, tol.max_abs, tol.top1) is None

    def trial(excluded: frozenset[str]) -> tuple[Mapping[str, object], bool]:
        qz.write(trial_path, excluded)
        return judge(trial_path)

    baseline = Trial(frozenset(), *judge(int8_model))
    search = FallbackSearch([u.node for u in ranked], trial, budget_s, started=t0)
    result = search.run(baseline)
    trial_path.unlink(missing_ok=True)
    by_node = {u.node: u for u in units}
    kept = [u for u in ranked if u.node in result.best.excluded]
    float_flops = sum(u.flops for u in kept) + sum(by_node[m].flops for m in qz.manual if m in by_node)
    shares = node_time_shares(qz.fp32, ev) if kept else {}  # after the search: reporting, not searching
    label = {u.node: u.label for u in units}
    rounds = [relabelled(r, label) for r in result.rounds]
    section: dict[str, object] = {
        "units": len(candidates), "search_samples": n, "budget_s": budget_s, "seconds": result.seconds,
        "evaluations": result.evaluations, "stopped": result.stopped, "passed": result.passed,
        "kept_in_float": [dict(u.to_json(total_flops), local_damage=_round(damage.get(u.node)),
                               fp32_time_share=_round(sum(shares.get(n, 0.0) for n in u.nodes))) for u in kept],
        "float_fp32_time_share": _round(sum(shares.get(n, 0.0) for u in kept for n in u.nodes)) if shares else None,
        "excluded_nodes": [n for u in kept for n in u.nodes],
        "float_flops_share": round(float_flops / total_flops, 6) if total_flops else None,
        "rounds": rounds,
        "ranking": [dict(u.to_json(total_flops), local_damage=_round(damage.get(u.node))) for u in ranked[:20]],
    }
    return result, section


def closest_summary(fallback: Mapping[str, object]) -> str:
    """One line on the best result the fallback found: accuracy, speed, what it kept in float (from the
    section run_fallback made, with the caller's accuracy_after and latencies)."""
    kept = cast("list[UnitRow]", fallback["kept_in_float"])
    acc = cast("Mapping[str, float]", fallback["accuracy_after"])
    names = ", ".join(str(u["module"] or u["node"]) for u in kept[:4]) \
        + (f" (+{len(kept) - 4} more)" if len(kept) > 4 else "")
    share = _number(fallback.get("float_flops_share")) or 0.0
    fp32, after = _number(fallback.get("latency_p50_ms_fp32")), _number(fallback.get("latency_p50_ms_after"))
    speed = f", {fp32 / after:.2f}x FP32's speed (p50 {after} ms vs {fp32} ms)" if fp32 and after else ""
    where = f"{len(kept)} units in float ({share:.1%} of FLOPs): {names}" if kept else "nothing kept in float"
    return (f"closest: mean cosine {acc.get('cosine_mean', 0):.4f}{speed}, {where}; "
            f"{fallback['evaluations']} evaluations in {fallback['seconds']:.0f} s ({fallback['stopped']})")


def _number(x: object) -> float | None:
    return x if isinstance(x, (int, float)) else None


def _round(x: float | None) -> float | None:
    return None if x is None else round(float(x), 8)
