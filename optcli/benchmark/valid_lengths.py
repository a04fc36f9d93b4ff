"""Realistic attention masks for benchmarks (`optcli bench --valid-lengths`): random inputs hold all
valid tokens, which hides what padding costs and what the unpad stage saves. Each row gets a valid
length drawn from a distribution; the mask is 1 up to it (right padding) and the other sequence
inputs hold 0 (the pad id) past it.

    short        sentences: round(exp(N(ln 14, 0.45))) clipped to 5..40 (median 14), as
                 benchmarks/unpad_cpu.py draws them
    uniform      uniform over 16..S (S: the padded length)
    MIN-MAX      uniform over MIN..MAX, e.g. 8-64
    full         every position valid (what random inputs hold without this option)
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from optcli.errors import UsageError

_RANGE = re.compile(r"(\d+)-(\d+)")


@dataclass(frozen=True)
class ValidLengths:
    kind: str                       # short | uniform | range | full
    low: int = 0
    high: int = 0

    def __str__(self) -> str:
        return f"{self.low}-{self.high}" if self.kind == "range" else self.kind

    def draw(self, rows: int, length: int, rng: np.random.Generator) -> np.ndarray:
        if self.kind == "short":
            drawn = np.round(np.exp(rng.normal(np.log(14), 0.45, rows))).clip(5, 40)
        elif self.kind == "uniform":
            drawn = rng.integers(min(16, length), length + 1, rows)
        elif self.kind == "range":
            drawn = rng.integers(self.low, self.high + 1, rows)
        else:
            drawn = np.full(rows, length)
        return np.clip(drawn, 1, length).astype(np.int64)


def parse_valid_lengths(text: str) -> ValidLengths:
    value = text.strip().lower()
    if value in ("short", "uniform", "full"):
        return ValidLengths(value)
    m = _RANGE.fullmatch(value)
    if m and 1 <= int(m.group(1)) <= int(m.group(2)):
        return ValidLengths("range", int(m.group(1)), int(m.group(2)))
    raise UsageError(f"--valid-lengths {text!r} is not a distribution",
                     hint="use short, uniform, full, or MIN-MAX such as 8-64")


def apply_valid_lengths(feeds: dict[str, np.ndarray], spec: ValidLengths, seed: int = 0) -> dict[str, np.ndarray]:
    """`feeds` with the attention mask (an input named *mask*, batch x sequence) right-padded to drawn
    lengths and the other batch x sequence integer inputs set to 0 past them; unchanged without a mask."""
    masks = sorted((k for k, v in feeds.items() if "mask" in k.lower() and np.ndim(v) == 2),
                   key=lambda k: k != "attention_mask")
    if not masks:
        return feeds
    mask = feeds[masks[0]]
    rows, length = mask.shape
    lengths = spec.draw(rows, length, np.random.default_rng(seed))
    valid = np.arange(length)[None, :] < lengths[:, None]
    out = dict(feeds)
    for name, value in feeds.items():
        if np.ndim(value) == 2 and value.shape == mask.shape and np.issubdtype(value.dtype, np.integer):
            out[name] = valid.astype(value.dtype) if name == masks[0] else np.where(valid, value, 0).astype(value.dtype)
    return out
