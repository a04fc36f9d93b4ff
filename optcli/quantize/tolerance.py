"""Accuracy tolerances: `--tolerance cosine=0.99,top1=0.98,max-abs=0.1`, with per-precision defaults."""
from __future__ import annotations

from dataclasses import dataclass

from optcli.errors import UsageError

# Mean cosine per output against FP32 on held-out data. FP16 should be near-exact; INT8 may lose a little.
DEFAULTS = {"fp16": {"cosine": 0.999}, "bf16": {"cosine": 0.995}, "int8": {"cosine": 0.99}}
KEYS = {"cosine": "cosine", "max-abs": "max_abs", "max_abs": "max_abs", "top1": "top1"}


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
                raise UsageError(f"malformed --tolerance {part!r}", hint="write cosine=0.99, top1=0.98 or max-abs=0.05")
            try:
                number = float(value)
            except ValueError:
                raise UsageError(f"--tolerance {part!r}: {value!r} is not a number", hint="e.g. cosine=0.99") from None
            if key in ("cosine", "top1") and not 0.0 <= number <= 1.0:
                raise UsageError(f"--tolerance {part!r}: {key} must be between 0 and 1")
            out[KEYS[key]] = number
    return out


def effective(precision: str, cosine: float | None, max_abs: float | None, top1: float | None) -> Tolerance:
    """The user's tolerance where given, else the precision's default."""
    if cosine is None and max_abs is None and top1 is None:
        return Tolerance(**DEFAULTS.get(precision, {}))
    return Tolerance(cosine, max_abs, top1)
