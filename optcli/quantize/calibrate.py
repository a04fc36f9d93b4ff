"""Activation ranges from calibration data with ONNX Runtime's calibrators, cached by content hash.

We build the calibrator ourselves rather than through quantize_static, because quantize_static does
not pass the histogram bin count through: its entropy method then gives the minmax ranges.
"""
from __future__ import annotations

import contextlib
import gc
import hashlib
import io
import json
import logging
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from optcli.artifact import sha256_file
from optcli.atomic_write import atomic_path, write_text_atomic
from optcli.calibration.dataset import SampleSet
from optcli.errors import StageError, UsageError
from optcli.onnx_model import is_large
from optcli.optional_imports import require

METHODS = ("minmax", "entropy", "percentile")
# Bins for the histogram methods; 2048 is TensorRT's own entropy calibrator's choice.
NUM_BINS = 2048
PERCENTILE = 99.99
CALIB_BATCH = 16
CACHE_SCHEMA = 1  # bump when the entry format changes: older entries are then rebuilt


class _Reader:
    """ORT's CalibrationDataReader protocol over a SampleSet, in batches."""

    def __init__(self, samples: SampleSet) -> None:
        self.batches = iter(samples.batches(CALIB_BATCH))

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self.batches, None)


def cache_key(model_sha: str, samples: SampleSet, method: str, symmetric: bool, op_types: tuple[str, ...]) -> str:
    blob = json.dumps({"model": model_sha, "data": samples.digest(), "method": method, "symmetric": symmetric,
                       "op_types": list(op_types), "bins": NUM_BINS, "percentile": PERCENTILE}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:32]


def _check_path(path: Path) -> Path:
    return path.with_name(path.name.removesuffix(".json") + ".check.json")


def cached_ranges_problem(path: Path, key: str) -> str | None:
    """Why the cache entry at `path` cannot be used (None: it can). An entry is the ranges file plus a
    check record {schema, key, sha256 of the ranges file}; the ranges must parse and be finite."""
    check = _check_path(path)
    if not path.is_file():
        return "no entry"
    try:
        record = json.loads(check.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        return f"{check.name} is missing or unreadable"
    if not isinstance(record, dict) or record.get("schema") != CACHE_SCHEMA or record.get("key") != key:
        return f"{check.name} has another schema or key"
    if record.get("sha256") != sha256_file(path):
        return f"{path.name} does not match its recorded sha256 (edited or truncated)"
    try:
        ranges = range_summary(path)
    except Exception as exc:  # noqa: BLE001 - ORT's loader raises whatever json/numpy raise on bad data
        return f"{path.name} does not parse: {type(exc).__name__}"
    if not ranges or not all(np.isfinite(v) for v in ranges.values()):
        return f"{path.name} holds no or non-finite ranges"
    return None


def _discard(path: Path) -> None:
    path.unlink(missing_ok=True)
    _check_path(path).unlink(missing_ok=True)


_CALIBRATERS = {"minmax": "MinMaxCalibrater", "entropy": "EntropyCalibrater", "percentile": "PercentileCalibrater"}


def _calibrator(calibrate: Any, method: str, model_path: Path, op_types: tuple[str, ...], augmented: Path,
                extra: dict[str, bool | int | float]) -> Any:
    """onnxruntime's create_calibrator, with the loaded model dropped before the session opens: saving
    the augmented graph moves its weights to external data, but the protobuf's memory stays allocated
    until the message goes, so the session would load a second copy beside it (a 2 GB model peaked at
    3.2x its size here, issue 15)."""
    calibrator = getattr(calibrate, _CALIBRATERS[method])(
        str(model_path), list(op_types), str(augmented), use_external_data_format=is_large(model_path), **extra)
    calibrator.augment_graph()
    calibrator.model = None  # compute_data needs only the names the constructor kept
    gc.collect()
    calibrator.execution_providers = ["CPUExecutionProvider"]
    calibrator.create_inference_session()
    return calibrator


def compute_ranges(model_path: Path, model_sha: str, samples: SampleSet, method: str, symmetric: bool,
                   op_types: tuple[str, ...], cache_dir: Path,
                   force: bool = False) -> tuple[Path, dict[str, str | int | None]]:
    """Return (path of a tensors-range JSON usable as quantize_static's calibration_cache_path, info).
    A cache entry is used only when its check record matches; a bad one is reported in `info`,
    discarded and rebuilt; `force` never reads the cache."""
    if method not in METHODS:
        raise UsageError(f"unknown calibration method {method!r}", hint=f"use one of: {', '.join(METHODS)}")
    calibrate = require("onnxruntime.quantization.calibrate", "INT8 calibration")
    key = cache_key(model_sha, samples, method, symmetric, op_types)
    path = cache_dir / f"ranges-{method}-{key}.json"
    problem = "--force" if force else cached_ranges_problem(path, key)
    # str | int | None: the method and paths, the sample count, cache_hit (a bool)
    info: dict[str, str | int | None] = {"method": method, "samples": len(samples), "cache": str(path),
                                         "cache_hit": problem is None}
    if problem is None:
        return path, info
    if problem not in ("no entry", "--force"):
        info["cache_rejected"] = problem
    _discard(path)
    extra: dict[str, bool | int | float] = {"symmetric": symmetric}
    if method == "entropy":
        extra.update(num_bins=NUM_BINS, num_quantized_bins=128)
    elif method == "percentile":
        extra.update(num_bins=NUM_BINS, percentile=PERCENTILE)
    cache_dir.mkdir(parents=True, exist_ok=True)
    logging.getLogger("onnxruntime").setLevel(logging.ERROR)
    with tempfile.TemporaryDirectory(prefix="optcli-calib-") as tmp, contextlib.redirect_stdout(io.StringIO()):
        try:
            calibrator = _calibrator(calibrate, method, model_path, op_types, Path(tmp) / "aug.onnx", extra)
            calibrator.collect_data(_Reader(samples))
            ranges = calibrator.compute_data()
        except Exception as exc:
            first = str(exc).splitlines()[0][:200] if str(exc) else ""
            raise StageError(f"calibration failed: {type(exc).__name__}: {first}",
                             hint="check the calibration data matches the model's inputs") from exc
    with atomic_path(path) as tmp_path:
        calibrate.save_tensors_data(ranges, tmp_path)
    record = {"schema": CACHE_SCHEMA, "key": key, "sha256": sha256_file(path)}
    write_text_atomic(_check_path(path), json.dumps(record))
    return path, info


def range_summary(path: Path) -> dict[str, float]:
    """{tensor: max |range|}: lets tests check that methods really differ."""
    calibrate = require("onnxruntime.quantization.calibrate", "INT8 calibration")
    data = calibrate.load_tensors_data(path)
    out = {}
    for name, tr in data.data.items():
        lo, hi = (np.asarray(v, dtype=np.float64) for v in tr.range_value)  # arrays when per-channel
        out[name] = float(max(np.abs(lo).max(), np.abs(hi).max()))
    return out
