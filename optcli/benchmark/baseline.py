"""Performance baselines: save a bench result, compare a later one against it, fail past a bound.

A baseline file is exactly `optcli bench --json` output. Points are matched by (batch, concurrency);
a point regresses when its p50 latency rose (metric "p50", the default) or its throughput fell
(metric "throughput") by more than the bound. The median is the default because it is robust:
throughput comes from the mean, which a few stalls from other processes move by tens of percent
between identical runs on a shared machine.
"""
from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from optcli.atomic_write import write_text_atomic
from optcli.benchmark.sweep import BenchResult, Regression, RegressionRow
from optcli.errors import RegressionError, UsageError
from optcli.report.records import significant

_HINT = "write it as 10% or 0.1"


def parse_bound(text: str | float) -> float:
    """`10%` or `0.1` -> 0.1. A bare number above 1 is refused: 10 could mean 10% or 1000%."""
    if isinstance(text, (int, float)):
        value = float(text)
    else:
        m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*(%?)\s*", str(text))
        if not m:
            raise UsageError(f"--max-regression {text!r} is not a percentage", hint=_HINT)
        value = float(m.group(1)) / (100.0 if m.group(2) else 1.0)
        if not m.group(2) and value > 1:
            raise UsageError(f"--max-regression {text!r} is ambiguous", hint=f"{_HINT} (a fraction needs no %)")
    if not 0 <= value < 10:
        raise UsageError(f"--max-regression {text!r} is out of range", hint=_HINT)
    return value


def save_baseline(result: BenchResult, path: Path) -> None:
    write_text_atomic(Path(path), json.dumps(result.to_json(), indent=2) + "\n")


# A baseline is `optcli bench --json` output: a few KB. Anything far larger is not one, and reading it
# (or a FIFO, or /dev/zero) whole would be the first harm it does.
MAX_BASELINE_BYTES = 16 * 1024 * 1024
_LATENCY_FIELDS = ("p50", "p90", "p99", "mean", "min", "max", "std")


def load_baseline(path: Path) -> BenchResult:
    """Read and check a baseline file; every way it can be wrong is a UsageError (exit 2) naming it."""
    path = Path(path)
    hint = "re-create it with `optcli bench ARTIFACT --save-baseline FILE`"
    if not path.exists():
        raise UsageError(f"baseline not found: {path}",
                         hint="create one with `optcli bench ARTIFACT --save-baseline FILE`")
    if not path.is_file():
        raise UsageError(f"baseline {path} is not a regular file", hint=hint)
    try:
        size = path.stat().st_size
        if size > MAX_BASELINE_BYTES:
            raise UsageError(f"baseline {path} is {size} bytes, not an optcli bench baseline (those are a few KB; "
                             f"the limit is {MAX_BASELINE_BYTES // 2**20} MiB)", hint=hint)
        data = json.loads(path.read_text(encoding="utf-8"))
    except RecursionError:  # json nests by recursion: `[[[[...` thousands deep
        raise UsageError(f"baseline {path} is nested too deeply to be a bench baseline", hint=hint) from None
    except (OSError, UnicodeDecodeError, ValueError) as exc:  # JSONDecodeError is a ValueError
        raise UsageError(f"baseline {path} is not readable JSON: {exc}", hint=hint) from None
    if not isinstance(data, dict) or data.get("kind") != "optcli-bench" or not data.get("points"):
        raise UsageError(f"{path} is not an optcli bench baseline (no points)",
                         hint="create one with `optcli bench ARTIFACT --save-baseline FILE`")
    problem = _malformed(data)
    if problem:
        raise UsageError(f"baseline {path} is malformed: {problem}", hint=hint)
    return BenchResult.from_json(data)


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 1 <= value < 2**31


def _malformed(data: Mapping[str, object]) -> str | None:
    """What is wrong with a parsed baseline, or None. Every value the comparison reads is checked for
    type and range: a p50 or throughput that is NaN, zero or negative would turn the gate off."""
    for key in ("artifact", "settings", "inputs", "environment"):
        if not isinstance(data.get(key, {}), dict):
            return f"{key!r} is not an object"
    if not isinstance(data.get("runtime", "?"), str):
        return "'runtime' is not a string"
    if not isinstance(data.get("warnings", []), list):
        return "'warnings' is not a list"
    points = data["points"]
    if not isinstance(points, list):
        return "'points' is not a list"
    for i, p in enumerate(points):
        where = f"point {i}"
        if not isinstance(p, dict):
            return f"{where} is not an object"
        for key in ("batch", "concurrency"):
            if not _count(p.get(key)):
                return f"{where}: {key} {p.get(key)!r} is not a positive integer"
        lat = p.get("latency_ms")
        if not isinstance(lat, dict):
            return f"{where}: latency_ms is not an object"
        for key in _LATENCY_FIELDS:
            if not _number(lat.get(key)) or lat[key] < 0:
                return f"{where}: latency_ms.{key} {lat.get(key)!r} is not a finite number >= 0"
        if lat["p50"] <= 0:
            return (f"{where}: latency_ms.p50 {lat['p50']!r} is not positive "
                    "(no regression could be measured against it)")
        if not _count(lat.get("runs")) or not _count(lat.get("batch")) or not isinstance(lat.get("runtime"), str):
            return f"{where}: latency_ms needs runs and batch (positive integers) and runtime (a string)"
        if not isinstance(lat.get("settings", {}), dict):
            return f"{where}: latency_ms.settings is not an object"
        if not _number(p.get("throughput")) or p["throughput"] <= 0:
            return f"{where}: throughput {p.get('throughput')!r} is not a positive number"
        ci = p.get("p50_ci95_ms")
        if ci is not None and not (isinstance(ci, list) and len(ci) == 2 and all(_number(v) for v in ci)):
            return f"{where}: p50_ci95_ms {ci!r} is not two numbers"
        for key in ("device_ms", "batches"):
            if not isinstance(p.get(key), (dict, type(None))):
                return f"{where}: {key} is not an object"
    return None


def _points_text(result: BenchResult) -> str:
    return ", ".join(f"batch {p.batch} x concurrency {p.concurrency}" for p in result.points)


METRICS = ("p50", "throughput")


def compare_to_baseline(current: BenchResult, baseline: BenchResult, bound: float,
                        metric: str = "p50") -> Regression:
    """Per matched point: p50 and throughput change against the baseline, and whether `metric`
    regressed beyond `bound`."""
    if metric not in METRICS:
        raise UsageError(f"unknown regression metric {metric!r}", hint=f"use one of: {', '.join(METRICS)}")
    rows: list[RegressionRow] = []
    for cur in current.points:
        base = baseline.point(cur.batch, cur.concurrency)
        if base is None or cur.batched:  # --batching points are a comparison, not gated
            continue
        p50_change = cur.latency.p50 / base.latency.p50 - 1 if base.latency.p50 > 0 else 0.0
        tput_change = cur.throughput / base.throughput - 1 if base.throughput > 0 else 0.0
        # Outside each other's 95% intervals: the change is larger than the run-to-run noise.
        beyond_noise = cur.median_ci_ms[0] > base.median_ci_ms[1] or cur.median_ci_ms[1] < base.median_ci_ms[0]
        rows.append({"batch": cur.batch, "concurrency": cur.concurrency,
                     "p50_ms": [significant(base.latency.p50), significant(cur.latency.p50)],
                     "p50_change": round(p50_change, 4),
                     "throughput": [significant(base.throughput, 2), significant(cur.throughput, 2)],
                     "throughput_change": round(tput_change, 4),
                     "beyond_noise": beyond_noise,
                     "regressed": p50_change > bound if metric == "p50" else -tput_change > bound})
    if not rows:
        raise UsageError(f"the baseline has no (batch, concurrency) point in common with this run "
                         f"(baseline: {_points_text(baseline)})",
                         hint="run with the baseline's --batch and --concurrency")
    notes = []
    if baseline.artifact.get("sha256") and baseline.artifact.get("sha256") != current.artifact.get("sha256"):
        notes.append("the artifact differs from the baseline's (sha256)")
    if baseline.runtime != current.runtime:
        notes.append(f"runtime changed: {baseline.runtime} -> {current.runtime}")
    for key in ("cpu", "gpu", "onnxruntime", "torch"):
        a, b = baseline.environment.get(key), current.environment.get(key)
        if a != b:
            notes.append(f"{key} changed: {a} -> {b}")
    missing = [p for p in baseline.points if current.point(p.batch, p.concurrency) is None]
    if missing:
        notes.append(f"{len(missing)} baseline point(s) not measured in this run")
    return {"bound": bound, "metric": metric, "rows": rows, "regressed": any(r["regressed"] for r in rows),
            "notes": notes}


def regression_error(comparison: Regression, baseline_path: Path | str) -> RegressionError:
    """The error for a failed gate, naming the worst point."""
    bad = [r for r in comparison["rows"] if r["regressed"]]
    by_p50 = comparison.get("metric", "p50") == "p50"
    worst = max(bad, key=lambda r: r["p50_change"] if by_p50 else -r["throughput_change"])
    if by_p50:
        what = (f"p50 latency rose {worst['p50_change']:.1%} ({worst['p50_ms'][0]:.4g} -> "
                f"{worst['p50_ms'][1]:.4g} ms)")
    else:
        what = (f"throughput fell {-worst['throughput_change']:.1%} ({worst['throughput'][0]:.1f} -> "
                f"{worst['throughput'][1]:.1f}/s)")
    return RegressionError(
        f"performance regression at batch {worst['batch']}, concurrency {worst['concurrency']}: {what}, "
        f"beyond the {comparison['bound']:.0%} bound ({len(bad)} of {len(comparison['rows'])} points regressed)",
        hint=f"if the slowdown is expected, refresh the baseline with --save-baseline {baseline_path}")
