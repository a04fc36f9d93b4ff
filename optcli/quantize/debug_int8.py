"""`optcli debug-int8`: where INT8 hurts a model, per layer, before anything else is built.

Quantizes the ONNX once with the flavour the target would get, measures every unit's local damage
(sensitivity.py, one pass), then measures the most damaging ones end to end: the accuracy with that
unit alone kept in float. The table is sorted by local damage (the order the fallback search starts
from), in the user's module names, with each unit's share of the model's FLOPs.
"""
from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import TypedDict

from optcli.accuracy import check_tolerance
from optcli.backends.registry import is_onnx_file
from optcli.config import QuantizeConfig
from optcli.errors import UsageError
from optcli.onnx_model import graph_view, io_specs, looks_like_encoder, op_histogram
from optcli.quantize.calibrate import compute_ranges
from optcli.quantize.evaluate import evaluate, run_model
from optcli.quantize.fallback import SEARCH_SAMPLES, Quantizer, rank_units
from optcli.quantize.flavour import resolve_flavour
from optcli.quantize.int8 import name_nodes
from optcli.quantize.sensitivity import node_damage
from optcli.quantize.tolerance import effective
from optcli.quantize.units import compute_units

DEFAULT_MEASURED = 8


class SensitivityRow(TypedDict):
    """One unit of the report, most damaging first (Unit.to_json's keys, then what was measured of it)."""

    node: str
    module: str | None
    op_type: str
    nodes: list[str]
    flops_share: float
    local_damage: float | None              # mean 1 - cosine the unit adds alone (None: not measured)
    cosine_gain_in_float: float | None      # the mean cosine gained keeping it alone in float (None: not measured)


class SensitivityReport(TypedDict):
    """What `optcli debug-int8` reports (its --json)."""

    model: str
    flavour: dict[str, object]              # Flavour.to_json
    samples: dict[str, int]                 # calibration, evaluation
    int8_accuracy: dict[str, float]         # the all-INT8 model against FP32
    tolerance: dict[str, float]
    passes: bool
    units: list[SensitivityRow]
    measured_end_to_end: int
    seconds: float


def _earlier_graphs(path: Path) -> list[Path]:
    """Inside an optcli output folder, the run's other ONNX graphs: the exporter's keeps the module
    metadata that simplify and fuse dropped (dynamo exports)."""
    out = path.resolve().parent.parent
    if not (out / "report.json").is_file():
        return []
    return [p for p in sorted(out.glob("*/model.onnx")) if p.resolve() != path.resolve()]


def sensitivity_report(model: str | Path, calib: str | Path, *, eval_dir: str | Path | None = None,
                       target: str = "cpu", flavour: str = "auto", calib_method: str = "minmax",
                       calib_samples: int | None = None, measure: int = DEFAULT_MEASURED,
                       cosine: float | None = None) -> SensitivityReport:
    """Per-unit INT8 sensitivity of an ONNX model (see the module docstring); JSON-able."""
    from optcli.calibration.split import split_calibration  # the INT8 stage's own calib/eval split

    path = Path(model)
    if not is_onnx_file(path) or not path.is_file():
        raise UsageError(f"debug-int8 takes an ONNX file, not {model}",
                         hint="compile it first (optcli compile MODEL) and pass OUT/01-export/model.onnx "
                              "(module names are read from the run's export)")
    from optcli.backends.registry import for_target, targets
    from optcli.config import CPU

    if target != CPU and for_target(target) is None:
        raise UsageError(f"unknown --target {target}", hint=f"cpu, {', '.join(targets())}")
    t0 = time.perf_counter()
    cfg = QuantizeConfig(precision="int8", calib=Path(calib), eval=Path(eval_dir) if eval_dir else None,
                         calib_samples=calib_samples, calib_method=calib_method, flavour=flavour)
    with tempfile.TemporaryDirectory(prefix="optcli-debug-int8-") as tmp:
        work = Path(tmp)
        fp32 = work / "fp32-named.onnx"
        name_nodes(path, fp32)
        graph = graph_view(fp32)
        specs, _ = io_specs(graph)
        calib_set, ev = split_calibration(cfg, specs, holdout_needed=True)
        fl = resolve_flavour(flavour, target, looks_like_encoder(op_histogram(graph)))
        if not fl.static:
            raise UsageError(f"the {fl.name} flavour has no calibration ranges to debug",
                             hint="pass --int8-flavour qdq (static Q/DQ), which the sensitivity table measures")
        units, total = compute_units(fp32, fl, [path, *_earlier_graphs(path)])
        from optcli.artifact import sha256_file

        ranges, _ = compute_ranges(fp32, sha256_file(fp32), calib_set, calib_method, fl.activation_symmetric,
                                   fl.op_types, work / "cache")
        qz = Quantizer(fp32, fl, ranges, calib_method, [], {u.node: u.nodes for u in units})
        int8 = work / "int8.onnx"
        qz.write(int8, [])
        n = min(len(ev), SEARCH_SAMPLES)
        ev = ev.take(slice(0, n))
        reference, _ = run_model(fp32, ev)
        base = evaluate(int8, reference, ev)
        damage = node_damage(fp32, int8, [u.node for u in units], ev)
        ranked = rank_units(units, damage)
        gains: dict[str, float] = {}
        trial = work / "trial.onnx"
        for unit in ranked[:measure]:
            qz.write(trial, [unit.node])
            gains[unit.node] = evaluate(trial, reference, ev)["cosine_mean"] - base["cosine_mean"]
    tol = effective("int8", cosine, None, None)
    rows = [SensitivityRow(node=u.node, module=u.module, op_type=u.op_type, nodes=list(u.nodes),
                           flops_share=round(u.flops / total, 6) if total else 0.0,  # as Unit.to_json
                           local_damage=round(damage[u.node], 8) if u.node in damage else None,
                           cosine_gain_in_float=round(gains[u.node], 6) if u.node in gains else None)
            for u in ranked]
    return {"model": str(path), "flavour": fl.to_json(), "samples": {"calibration": len(calib_set), "evaluation": n},
            "int8_accuracy": {k: round(base[k], 6) for k in ("cosine_mean", "cosine_min", "top1_agreement")
                              if k in base},
            "tolerance": tol.to_json(), "passes": check_tolerance(base, tol.cosine, tol.max_abs, tol.top1) is None,
            "units": rows, "measured_end_to_end": len(gains), "seconds": round(time.perf_counter() - t0, 2)}
