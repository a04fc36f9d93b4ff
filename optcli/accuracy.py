"""Accuracy of an artifact's outputs against the FP32 reference: error, cosine, top-1 agreement."""
from __future__ import annotations

import numpy as np

from optcli.accuracy_summary import AccuracySummary, OutputSummary

# An output whose largest magnitude is below this is numerically zero for float32 (its values live in
# or near the subnormal range, where few mantissa bits are left): cosine there is rounding noise (a
# transformers MobileViT export was rejected at cosine 0.996 with a max abs error of 3e-42). Such an
# output is judged by its absolute error alone, and its cosine does not count.
NUMERIC_ZERO = 1e-30


# float32's resolution: one unit in the last place at magnitude 1, and the smallest normal value. Below
# the latter, float32 keeps fewer mantissa bits the smaller the value (subnormals), and runtimes differ
# in flushing them to zero: two correct computations of an output that small differ by up to about it.
FLOAT32_EPS = float(np.finfo(np.float32).eps)
FLOAT32_TINY = float(np.finfo(np.float32).tiny)


def within_float32_resolution(entry: OutputSummary) -> bool:
    """An output (an entry of compare_outputs' `outputs`) whose largest error is below what float32 can
    tell apart at the output's own scale: one ulp of its largest magnitude, or the smallest normal float32,
    whichever is larger. Such outputs are equal as float32 computes them, whatever their cosine says
    (a MobileViT's logits, all subnormal: max abs error 3.16e-42)."""
    return bool(entry["finite"]) and entry["max_abs_err"] <= max(FLOAT32_EPS * entry["scale"], FLOAT32_TINY)


def float32_mismatch(summary: AccuracySummary, cosine: float, max_abs_rel: float) -> str | None:
    """Why outputs differ beyond float32 rounding, judged per output at its own scale, or None: an output
    within float32 resolution is equal; any other needs a cosine of at least `cosine` and a max abs error of
    at most `max_abs_rel` x its largest magnitude (x 1 for an output that is all zeros). For the export
    check: the ONNX must compute what PyTorch computes."""
    for name, e in summary["outputs"].items():
        if within_float32_resolution(e):
            continue
        bound = max_abs_rel * (e["scale"] if e["scale"] > 0 else 1.0)
        if not e["finite"]:
            return f"output {name!r} has NaN or Inf where PyTorch has none"
        # The cosine of an all-zero reference says nothing (0 against any noise): the bound alone judges it.
        if (e["scale"] > 0 and e["cosine_min"] < cosine) or e["max_abs_err"] > bound:
            return (f"output {name!r}: max abs err {e['max_abs_err']:.3g} (scale {e['scale']:.3g}), "
                    f"cosine {e['cosine_min']:.6f}")
    return None


def _cosines(ref: np.ndarray, got: np.ndarray) -> np.ndarray:
    """Cosine similarity per sample (rows of dim 0); a scalar output counts as one sample."""
    r = ref.reshape(ref.shape[0], -1) if ref.ndim > 1 else ref.reshape(1, -1)
    g = got.reshape(got.shape[0], -1) if got.ndim > 1 else got.reshape(1, -1)
    num = (r * g).sum(axis=1)
    den = np.linalg.norm(r, axis=1) * np.linalg.norm(g, axis=1)
    # Two all-zero rows are identical; one zero row against a non-zero one is cosine 0.
    with np.errstate(invalid="ignore", divide="ignore"):
        cos = np.where(den > 0, num / np.where(den > 0, den, 1), np.where(
            (np.linalg.norm(r, axis=1) == 0) & (np.linalg.norm(g, axis=1) == 0), 1.0, 0.0))
    return cos


def _cosine_is_noise(entry: OutputSummary) -> bool:
    """A numerically zero output matched to within NUMERIC_ZERO: its cosine measures rounding alone."""
    return bool(entry.get("negligible")) and entry["max_abs_err"] < NUMERIC_ZERO


def looks_like_class_scores(arr: np.ndarray) -> bool:
    """2-D (batch, classes) float output with a few classes or more."""
    return arr.ndim == 2 and arr.shape[1] >= 2 and np.issubdtype(arr.dtype, np.floating)


def sequence_mask(feeds: dict[str, np.ndarray]) -> np.ndarray | None:
    """The attention mask among a model's inputs (an input named *mask*, batch x sequence, of 0/1
    values) as a bool array, or None: which positions of a padded batch hold tokens."""
    named = sorted((k for k, v in feeds.items() if "mask" in k.lower() and np.ndim(v) == 2),
                   key=lambda k: k != "attention_mask")
    for key in named:
        mask = np.asarray(feeds[key])
        if mask.size and np.isin(mask, (0, 1)).all():
            return mask != 0
    return None


def _valid_only(arr: np.ndarray, valid: np.ndarray | None) -> np.ndarray:
    """An output with a sequence axis (batch x sequence x ..., as the mask) with its padded positions
    zeroed: what a model computes there is not a result (optcli's unpad rewrite writes 0 there)."""
    if valid is None or arr.ndim < 2 or arr.shape[:2] != valid.shape:
        return arr
    return np.where(valid.reshape(valid.shape + (1,) * (arr.ndim - 2)), arr, 0.0)


def compare_outputs(reference: list[np.ndarray], outputs: list[np.ndarray], names: list[str],
                    labels: np.ndarray | None = None, valid: np.ndarray | None = None) -> AccuracySummary:
    """Per-output and worst-case accuracy figures; outputs are paired with the reference by position.
    `valid` (batch x sequence, from sequence_mask) restricts outputs with a sequence axis to the
    positions that hold tokens."""
    if len(reference) != len(outputs):
        raise ValueError(f"{len(outputs)} outputs but the reference has {len(reference)}")
    per_output: dict[str, OutputSummary] = {}
    for name, ref, got in zip(names, reference, outputs):
        ref64 = _valid_only(np.asarray(ref, dtype=np.float64), valid)
        got64 = _valid_only(np.asarray(got, dtype=np.float64), valid)
        if ref64.shape != got64.shape:
            raise ValueError(f"output {name!r}: shape {got64.shape} but the reference has {ref64.shape}")
        finite = bool(np.isfinite(got64).all())
        err = np.abs(ref64 - got64)
        cos = _cosines(ref64, got64)
        scale = float(np.abs(ref64).max()) if ref64.size else 0.0
        entry: OutputSummary = {
            "scale": scale,
            "negligible": scale < NUMERIC_ZERO,
            "max_abs_err": float(err.max()) if err.size else 0.0,
            "mean_abs_err": float(err.mean()) if err.size else 0.0,
            "cosine_min": float(cos.min()) if finite else 0.0,
            "cosine_mean": float(cos.mean()) if finite else 0.0,
            "finite": finite,
        }
        if looks_like_class_scores(ref64):
            entry["top1_agreement"] = float((ref64.argmax(1) == got64.argmax(1)).mean())
            if labels is not None and len(labels) == ref64.shape[0]:
                entry["top1_accuracy"] = float((got64.argmax(1) == labels).mean())
                entry["top1_accuracy_reference"] = float((ref64.argmax(1) == labels).mean())
        per_output[name] = entry
    judged = [e for e in per_output.values() if not _cosine_is_noise(e)]
    summary: AccuracySummary = {
        "max_abs_err": max((e["max_abs_err"] for e in per_output.values()), default=0.0),
        "cosine_min": min((e["cosine_min"] for e in judged), default=1.0),
        "cosine_mean": min((e["cosine_mean"] for e in judged), default=1.0),
        "outputs": per_output,
    }
    tops = [e["top1_agreement"] for e in per_output.values() if "top1_agreement" in e]
    if tops:
        summary["top1_agreement"] = min(tops)
    accs = [e["top1_accuracy"] for e in per_output.values() if "top1_accuracy" in e]
    if accs:
        summary["top1_accuracy"] = min(accs)
        summary["top1_accuracy_reference"] = min(e["top1_accuracy_reference"] for e in per_output.values()
                                                 if "top1_accuracy_reference" in e)
    return summary


def budget_used(summary: AccuracySummary, cosine: float | None, max_abs: float | None,
                top1: float | None) -> float | None:
    """How much of the tolerance the worst output used: 0 exact, 1 at the limit (the largest over the
    bounds given: 1 - cosine against 1 - the cosine bound, the max abs error against its bound, ...).
    None where a bound cannot be read that way (a bound of exactly 1 or 0, or no bound at all)."""
    used: list[float] = []
    for e in summary.get("outputs", {}).values():
        if cosine is not None:
            if cosine >= 1.0:
                return None
            used.append((1.0 - e["cosine_mean"]) / (1.0 - cosine))
        if max_abs is not None:
            if max_abs <= 0.0:
                return None
            used.append(e["max_abs_err"] / max_abs)
        if top1 is not None and "top1_agreement" in e:
            if top1 >= 1.0:
                return None
            used.append((1.0 - e["top1_agreement"]) / (1.0 - top1))
    return max(used) if used else None


def check_tolerance(summary: AccuracySummary, cosine: float | None, max_abs: float | None,
                    top1: float | None) -> str | None:
    """The first figure that misses its tolerance, as a message naming the output; else None."""
    for name, e in summary.get("outputs", {}).items():
        if not e.get("finite", True):
            return f"output {name!r} has NaN or Inf values"
        if cosine is not None and e["cosine_mean"] < cosine and not _cosine_is_noise(e):
            return f"output {name!r}: mean cosine {e['cosine_mean']:.4f} < tolerance {cosine}"
        if max_abs is not None and e["max_abs_err"] > max_abs:
            return f"output {name!r}: max abs error {e['max_abs_err']:.4g} > tolerance {max_abs}"
        if top1 is not None and "top1_agreement" in e and e["top1_agreement"] < top1:
            return f"output {name!r}: top-1 agreement {e['top1_agreement']:.4f} < tolerance {top1}"
    return None


# A stage that keeps the model's function (export, simplify, fuse, unpad) matches it to float32 rounding:
# the export stage's own check of its ONNX against PyTorch uses these bounds.
SAME_FUNCTION_COSINE = 0.9999
SAME_FUNCTION_MAX_ABS_REL = 1e-3  # of the output's own largest magnitude


def same_function(summary: AccuracySummary) -> str | None:
    """Why outputs do not match the reference to float32 rounding (an output's cosine, or its max abs error
    relative to its scale), naming the output; else None."""
    for name, e in summary.get("outputs", {}).items():
        if not e.get("finite", True):
            return f"output {name!r} has NaN or Inf values"
        if e["max_abs_err"] > SAME_FUNCTION_MAX_ABS_REL * e.get("scale", 0.0) and e["max_abs_err"] >= NUMERIC_ZERO:
            return (f"output {name!r}: max abs error {e['max_abs_err']:.4g} "
                    f"on outputs of scale {e.get('scale', 0.0):.4g}")
        if e["cosine_min"] < SAME_FUNCTION_COSINE and not _cosine_is_noise(e):
            return f"output {name!r}: cosine {e['cosine_min']:.6f} < {SAME_FUNCTION_COSINE}"
    return None
