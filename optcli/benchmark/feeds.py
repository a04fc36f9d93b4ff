"""Inputs for benchmarks and profiles: random of the right shape and dtype, or real data from a folder.

Random inputs: floats ~N(0, 1); masks and bools all ones; token-type/segment ids zeros; other ints in
[0, high) where `high` is the table size when the input indexes an embedding (a Gather on a weight),
else what the PyTorch example held, else 100. Real data: `--inputs DIR`, a folder of .npz files whose
keys are the input names, each with a leading batch dim (the calibration reader's format).
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from optcli.backends.registry import is_onnx_file
from optcli.errors import UsageError
from optcli.onnx_model import int_bounds_onnx
from optcli.runtime.base import Runner
from optcli.tensor_spec import TensorSpec, format_shape, merge_pinned, parse_input_spec, random_inputs

if TYPE_CHECKING:
    from optcli.batching import BatchedRunner


def int_bounds(runner: Runner | BatchedRunner) -> dict[str, int]:
    """Upper bounds for random int inputs of whatever this runner runs."""
    known = dict(getattr(runner, "int_high", None) or {})
    path = getattr(runner, "path", None)
    if path is not None and is_onnx_file(Path(path)):
        known = {**int_bounds_onnx(Path(path)), **known}
    return known


def batch_free_pins(pins: list[str], specs: list[TensorSpec] | None = None) -> list[TensorSpec]:
    """`--input NAME:SHAPE` pins whose dim 0 is the model's own (dynamic "batch" when unknown): in
    bench and profile the batch comes from --batch, a pin only sizes the other dims."""
    own = {s.name: s for s in specs or []}
    out = []
    for text in pins:
        p = parse_input_spec(text)
        first = own[p.name].shape[0] if p.name in own and own[p.name].shape else "batch"
        out.append(TensorSpec(p.name, (first,) + tuple(p.shape[1:]) if p.shape else p.shape, p.dtype, p.profile))
    return out


class FeedSource:
    """Makes one batch of inputs at any batch size, from random data or a folder of real samples.
    `pins` (`--input NAME:SHAPE`) give sizes to dynamic dims other than the batch."""

    def __init__(self, specs: list[TensorSpec], inputs_dir: str | Path | None = None,
                 pins: list[str] | None = None, int_high: dict[str, int] | None = None, seed: int = 0,
                 valid_lengths: str | None = None) -> None:
        from optcli.benchmark.valid_lengths import parse_valid_lengths

        self.specs = merge_pinned(list(specs), batch_free_pins(pins, list(specs))) if pins else list(specs)
        self.seed = seed
        self.valid_lengths = parse_valid_lengths(valid_lengths) if valid_lengths else None
        self.high = dict(int_high or {})
        self.samples: dict[str, np.ndarray] | None = None
        self.description = "random"
        if inputs_dir is not None:
            from optcli.calibration.dataset import load_samples

            if not Path(inputs_dir).is_dir():
                raise UsageError(f"--inputs {inputs_dir}: not a folder",
                                 hint="pass a folder of .npz files (keys = input names, leading batch dim)")
            data = load_samples(Path(inputs_dir), self.specs, None, {}, what="input")
            self.samples = data.arrays
            self.description = f"{len(data)} samples from {inputs_dir}"

    @classmethod
    def for_runner(cls, runner: Runner | BatchedRunner, inputs_dir: str | Path | None = None,
                   pins: list[str] | None = None, seed: int = 0, valid_lengths: str | None = None) -> FeedSource:
        return cls(runner.inputs, inputs_dir, pins, int_bounds(runner), seed, valid_lengths)

    @property
    def real(self) -> bool:
        return self.samples is not None

    def batch(self, size: int) -> dict[str, np.ndarray]:
        """`size` samples: real ones cycled in order when there are fewer, else random."""
        if self.samples is None:
            feeds = random_inputs(self.specs, size, seed=self.seed, int_high=self.high)
            if self.valid_lengths is not None:
                from optcli.benchmark.valid_lengths import apply_valid_lengths

                feeds = apply_valid_lengths(feeds, self.valid_lengths, self.seed)
            return feeds
        n = len(next(iter(self.samples.values())))
        index = np.arange(size) % n
        return {name: np.ascontiguousarray(arr[index]) for name, arr in self.samples.items()}

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = {"source": self.description, "specs": [s.to_json() for s in self.specs],
                                  "int_high": self.high}
        if self.valid_lengths is not None:
            out["valid_lengths"] = str(self.valid_lengths)
        return out


def check_batch(specs: list[TensorSpec], batch: int) -> None:
    """A model with a fixed batch dim runs only at that batch: say so before measuring."""
    for s in specs:
        if s.shape and isinstance(s.shape[0], int) and s.shape[0] > 0 and s.shape[0] != batch:
            raise UsageError(f"input {s.name!r} has a fixed batch of {s.shape[0]} "
                             f"(shape {format_shape(s.shape)}); cannot run batch {batch}",
                             hint=f"use --batch {s.shape[0]}, or compile without --static-batch")
