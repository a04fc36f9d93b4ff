"""Accuracy tolerances: `--tolerance cosine=0.99,top1=0.98,max-abs=0.1`, with per-precision defaults."""
from __future__ import annotations

import math
from dataclasses import dataclass

from optcli.errors import UsageError

# Mean cosine per output against FP32 on held-out data. FP16 should be near-exact; INT8 may lose a little.
DEFAULTS = {"fp16": {"cosine": 0.999}, "bf16": {"cosine": 0.995}, "int8": {"cosine": 0.99}}
KEYS = {"cosine": "cosine", "max-abs": "max_abs", "max_abs": "max_abs", "top1": "top1"}


_HINTS = {"cosine": "cosine is a mean cosine similarity between 0 and 1, e.g. cosine=0.99",
          "top1": "top1 is a fraction of samples between 0 and 1, e.g. top1=0.98",
          "max_abs": "max-abs is an absolute error, 0 (exact) or more, e.g. max-abs=0.05"}


def check_bounds(key: str, value: float, where: str) -> float:
    """A tolerance value that can be met and can fail: finite; cosine and top1 in [0, 1]; max-abs >= 0.
    Checked before anything runs, so a bad bound never costs a whole fallback search."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise UsageError(f"{where}: {key.replace('_', '-')} must be a finite number", hint=_HINTS[key])
    if key in ("cosine", "top1") and not 0.0 <= value <= 1.0:
        raise UsageError(f"{where}: {key} must be between 0 and 1", hint=_HINTS[key])
    if key == "max_abs" and value < 0.0:  # 0 is allowed: bit-exact
        raise UsageError(f"{where}: max-abs must be 0 (exact) or more", hint=_HINTS[key])
    return float(value)


@dataclass
class Tolerance:
    cosine: float | None = None
    max_abs: float | None = None
    top1: float | None = None

    def to_json(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if v is not None}


def parse_tolerance(items: list[str] | tuple[str, ...]) -> dict[str, float]:
    """Parse repeated or comma-separated `key=value` into {cosine|max_abs|top1: float}."""
    out: dict[str, float] = {}
    for item in items:
        for part in item.split(","):
            if not part.strip():
                continue
            key, sep, value = part.partition("=")
            key = key.strip().lower()
            if not sep or key not in KEYS:
                raise UsageError(f"malformed --tolerance {part.strip()!r}",
                                 hint="write cosine=0.99, top1=0.98 or max-abs=0.05")
            try:
                number = float(value)
            except ValueError:
                raise UsageError(f"--tolerance {part!r}: {value!r} is not a number", hint=_HINTS[KEYS[key]]) from None
            out[KEYS[key]] = check_bounds(KEYS[key], number, f"--tolerance {part.strip()!r}")
    return out


def effective(precision: str, cosine: float | None, max_abs: float | None, top1: float | None) -> Tolerance:
    """The user's tolerance where given, else the precision's default."""
    if cosine is None and max_abs is None and top1 is None:
        return Tolerance(**DEFAULTS.get(precision, {}))
    return Tolerance(cosine, max_abs, top1)
