"""Tensor names, shapes and dtypes: what a model takes and gives, and the `--input` grammar.

`--input NAME:SHAPE[:DTYPE]`, SHAPE as `1x3x224x224`; a dim may be a name (`batchx128`) for a
dynamic one; SHAPE may also be `MIN/OPT/MAX` (`1x3x224x224/8x3x224x224/32x3x224x224`) for
TensorRT optimization profiles.
"""
from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from optcli.errors import UsageError

Dim = int | str  # a str is a symbolic (dynamic) dim

DTYPES = {
    "float32": np.float32, "float16": np.float16, "float64": np.float64,
    "int64": np.int64, "int32": np.int32, "int8": np.int8, "uint8": np.uint8, "bool": np.bool_,
}
_DTYPE_ALIASES = {"fp32": "float32", "float": "float32", "fp16": "float16", "half": "float16",
                  "long": "int64", "int": "int32", "double": "float64"}
_NAME = re.compile(r"[A-Za-z_][\w.\-/]*")  # fullmatch: "$" would let "x\n" through


def canonical_dtype(name: str) -> str:
    """Map a dtype name or alias to the numpy name optcli uses, or raise UsageError."""
    key = _DTYPE_ALIASES.get(name.lower(), name.lower())
    if key not in DTYPES:
        raise UsageError(f"unknown dtype {name!r}", hint=f"use one of: {', '.join(DTYPES)}")
    return key


@dataclass(frozen=True)
class TensorSpec:
    """A named tensor: shape (ints, or strs for dynamic dims) and numpy dtype name."""

    name: str
    shape: tuple[Dim, ...]
    dtype: str = "float32"
    # Optional TensorRT profile shapes (min, opt, max), all concrete.
    profile: tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]] | None = field(default=None, compare=False)

    @property
    def is_dynamic(self) -> bool:
        return any(not isinstance(d, int) or d < 0 for d in self.shape)

    def concrete(self, batch: int | None = None, fallback: dict[str, int] | None = None) -> tuple[int, ...]:
        """A concrete shape: dim 0 set to `batch` if given; other dynamic dims from `fallback`."""
        dims: list[int] = []
        for i, d in enumerate(self.shape):
            if i == 0 and batch is not None:
                dims.append(batch)
            elif isinstance(d, int) and d >= 0:
                dims.append(d)
            elif fallback and str(d) in fallback:
                dims.append(fallback[str(d)])
            else:
                example = 'x'.join(str(x) if isinstance(x, int) else '1' if j == 0 else '128'
                                   for j, x in enumerate(self.shape))
                within = ""
                if self.profile:  # a TensorRT engine's input: suggest the shape its profile was tuned for
                    example = format_shape(self.profile[1])
                    within = f" (its profile takes {format_shape(self.profile[0])} .. {format_shape(self.profile[2])})"
                raise UsageError(
                    f"input {self.name!r} has a dynamic dim {d!r} at axis {i} and no size for it",
                    hint=f"pin it with --input {self.name}:{example}{within}",
                )
        return tuple(dims)

    def to_json(self) -> dict:
        return {"name": self.name, "shape": list(self.shape), "dtype": self.dtype}


def _parse_shape(text: str, name: str) -> tuple[Dim, ...]:
    if not text:
        raise UsageError(f"--input {name}: empty shape", hint="write it as NAME:1x3x224x224")
    dims: list[Dim] = []
    for part in text.lower().split("x"):
        part = part.strip()
        if part.isdigit():
            if int(part) == 0:
                raise UsageError(f"--input {name}: a dim of 0 in {text!r}", hint="dims are positive integers")
            dims.append(int(part))
        elif re.fullmatch(r"[a-z_][a-z0-9_]*", part) or part in ("?", "-1"):
            dims.append(part if part not in ("?", "-1") else f"dim{len(dims)}")
        else:
            raise UsageError(f"--input {name}: bad dim {part!r} in shape {text!r}",
                             hint="write the shape as 1x3x224x224 (numbers separated by x)")
    return tuple(dims)


def parse_input_spec(text: str) -> TensorSpec:
    """Parse one `--input NAME:SHAPE[:DTYPE]` (SHAPE may be `MIN/OPT/MAX`)."""
    parts = text.split(":")
    if len(parts) not in (2, 3) or not parts[0]:
        raise UsageError(f"malformed --input {text!r}",
                         hint="write NAME:SHAPE[:DTYPE], e.g. --input x:1x3x224x224 or input_ids:1x128:int64")
    name, shape_text = parts[0], parts[1]
    if not _NAME.fullmatch(name):
        raise UsageError(f"malformed --input {text!r}: bad input name {name!r}", hint="names are like x or input_ids")
    # "" = not given: a pin then takes the model's own dtype (float32 where the model has none).
    dtype = canonical_dtype(parts[2]) if len(parts) == 3 else ""
    profile = None
    if "/" in shape_text:
        pieces = shape_text.split("/")
        if len(pieces) != 3:
            raise UsageError(f"--input {name}: a profile needs MIN/OPT/MAX, got {shape_text!r}",
                             hint="e.g. x:1x3x224x224/8x3x224x224/32x3x224x224")
        shapes = [_parse_shape(p, name) for p in pieces]
        if any(not isinstance(d, int) for s in shapes for d in s) or len({len(s) for s in shapes}) != 1:
            raise UsageError(f"--input {name}: profile shapes must be concrete and of one rank",
                             hint="e.g. x:1x3x224x224/8x3x224x224/32x3x224x224")
        mn, opt, mx = (tuple(int(d) for d in s) for s in shapes)
        if not all(a <= b <= c for a, b, c in zip(mn, opt, mx)):
            raise UsageError(f"--input {name}: profile needs MIN <= OPT <= MAX in every dim", hint=shape_text)
        profile = (mn, opt, mx)
        shape: tuple[Dim, ...] = tuple(
            o if a == c else ("batch" if i == 0 else f"{name}_dim{i}")
            for i, (a, o, c) in enumerate(zip(mn, opt, mx)))
    else:
        shape = _parse_shape(shape_text, name)
    return TensorSpec(name=name, shape=shape, dtype=dtype, profile=profile)


def merge_pinned(specs: list[TensorSpec], pinned: list[TensorSpec]) -> list[TensorSpec]:
    """Apply user `--input` pins to a model's own specs, checking names, rank and dtype."""
    by_name = {s.name: s for s in specs}
    for p in pinned:
        if p.name not in by_name:
            raise UsageError(f"--input {p.name}: the model has no input of that name",
                             hint=f"its inputs are: {', '.join(by_name) or '(none)'}")
        own = by_name[p.name]
        if len(own.shape) != len(p.shape):
            raise UsageError(f"--input {p.name}: rank {len(p.shape)} but the model's input has rank {len(own.shape)}",
                             hint=f"the model expects shape {format_shape(own.shape)}")
        for i, (a, b) in enumerate(zip(own.shape, p.shape)):
            if isinstance(a, int) and a > 0 and isinstance(b, int) and a != b and i != 0:
                raise UsageError(f"--input {p.name}: dim {i} is {b} but the model fixes it at {a}",
                                 hint=f"the model expects shape {format_shape(own.shape)}")
        if p.dtype and p.dtype != own.dtype:
            raise UsageError(f"--input {p.name}: dtype {p.dtype} but the model's input is {own.dtype}",
                             hint=f"use --input {p.name}:{format_shape(p.shape)}:{own.dtype}")
        by_name[p.name] = TensorSpec(p.name, p.shape, own.dtype, p.profile)
    return [by_name[s.name] for s in specs]


def with_default_dtype(spec: TensorSpec) -> TensorSpec:
    """A pin used as the whole spec (TorchScript): no dtype given means float32."""
    return spec if spec.dtype else TensorSpec(spec.name, spec.shape, "float32", spec.profile)


def with_batch(specs: list[TensorSpec], batch: Dim) -> list[TensorSpec]:
    """Set dim 0 (the batch) of every spec: an int fixes it; a str makes a fixed dim dynamic."""
    out = []
    for s in specs:
        if s.shape and (isinstance(batch, int) or isinstance(s.shape[0], int)):
            s = TensorSpec(s.name, (batch, *s.shape[1:]), s.dtype, s.profile)
        out.append(s)
    return out


def format_shape(shape: tuple[Dim, ...] | list[Dim]) -> str:
    """`1x3x224x224`; a scalar's empty shape is `()`, so a message never reads "has shape , ..."."""
    return "x".join(str(d) for d in shape) if len(shape) else "()"


def memory_bytes() -> int:
    """This machine's physical memory (0 where the OS does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0


def check_fits(name: str, shape: tuple[int, ...], dtype: Any) -> None:
    """Refuse (exit 2) an input tensor that would need more than half of this machine's memory, before
    numpy tries and dies with MemoryError."""
    nbytes = math.prod(shape) * np.dtype(dtype).itemsize
    limit = memory_bytes() // 2 or 1 << 40
    if nbytes > limit:
        raise UsageError(f"input {name!r} of shape {format_shape(shape)} ({np.dtype(dtype).name}) would need "
                         f"{nbytes / 1e9:,.1f} GB, more than half of this machine's memory ({2 * limit / 1e9:.1f} GB)",
                         hint="pass smaller sizes with --input NAME:SHAPE")


def random_inputs(specs: list[TensorSpec], batch: int | None, seed: int = 0,
                  int_high: dict[str, int] | None = None, dims: dict[str, int] | None = None) -> dict[str, np.ndarray]:
    """Deterministic random inputs: floats ~N(0,1); ints in [0, high) (masks all ones)."""
    rng = np.random.default_rng(seed)
    feeds: dict[str, np.ndarray] = {}
    for s in specs:
        shape = s.concrete(batch, dims)
        dt = DTYPES[s.dtype]
        check_fits(s.name, shape, dt)
        if np.issubdtype(dt, np.floating):
            feeds[s.name] = rng.standard_normal(shape).astype(dt)
        elif dt == np.bool_:
            feeds[s.name] = np.ones(shape, dtype=dt)
        elif "mask" in s.name.lower():
            feeds[s.name] = np.ones(shape, dtype=dt)
        elif "type" in s.name.lower() or "segment" in s.name.lower():
            feeds[s.name] = np.zeros(shape, dtype=dt)
        else:
            high = (int_high or {}).get(s.name, 100)
            feeds[s.name] = rng.integers(0, max(high, 1), size=shape).astype(dt)
    return feeds
