"""Optimization profiles: the MIN/OPT/MAX shape of every input that has a dynamic dim.

TensorRT needs a profile for each network input with a dynamic (-1) dim; it optimizes kernels for
OPT and accepts any shape between MIN and MAX at run time. Where the shapes come from, per input:
1. an explicit `--input NAME:MIN/OPT/MAX` profile;
2. otherwise dim by dim: a fixed dim of the model stays; a dynamic dim 0 takes `--batch MIN/OPT/MAX`
   (or the default batch range when nothing is said); another dynamic dim takes the size pinned
   with `--input NAME:SHAPE`; a dynamic dim the pipeline runs at a length it chose (a text input's
   sequence: 128, or the length optcli's export recorded) gets 1..that length, tuned for it, or
   1..`--max-seq` where given; anything still unknown is a usage error naming the flag to use.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, NotRequired, TypedDict

from optcli.backends.tensorrt.options import Batch
from optcli.errors import UsageError
from optcli.tensor_spec import TensorSpec, format_shape

Shape = tuple[int, ...]


class ProfileJSON(TypedDict):
    """An InputProfile in model.engine.json and in the engine cache key."""

    name: str
    min: list[int]
    opt: list[int]
    max: list[int]
    dynamic_axes: NotRequired[list[int]]   # always written; absent from the oldest files


@dataclass(frozen=True)
class InputProfile:
    """One input's shape range. Inputs with dynamic axes in the graph get a TensorRT profile (even a
    fixed one, e.g. --batch 8); fully static inputs need none."""

    name: str
    min: Shape
    opt: Shape
    max: Shape
    dynamic_axes: tuple[int, ...] = ()

    @property
    def dynamic(self) -> bool:
        return bool(self.dynamic_axes)

    def to_json(self) -> ProfileJSON:
        return {"name": self.name, "min": list(self.min), "opt": list(self.opt), "max": list(self.max),
                "dynamic_axes": list(self.dynamic_axes)}

    @classmethod
    def from_json(cls, d: ProfileJSON) -> InputProfile:
        return cls(d["name"], tuple(d["min"]), tuple(d["opt"]), tuple(d["max"]), tuple(d.get("dynamic_axes", ())))

    def accepts(self, shape: Iterable[int]) -> bool:
        shape = tuple(shape)
        return len(shape) == len(self.min) and all(a <= s <= b for a, s, b in zip(self.min, shape, self.max))

    def describe(self) -> str:
        if self.min == self.max:
            return f"{self.name}:{format_shape(self.min)}"
        return f"{self.name}:{format_shape(self.min)}/{format_shape(self.opt)}/{format_shape(self.max)}"


def default_batch(bench_batch: int = 1, accuracy_batch: int = 2) -> Batch:
    """Used when the graph has a dynamic batch and nothing is said: 1..32, tuned for the bench batch,
    and wide enough for the batches the pipeline measures and checks."""
    return (1, bench_batch, max(32, bench_batch, accuracy_batch))


def _is_fixed(d: Any) -> bool:
    return isinstance(d, int) and d > 0


def build_profiles(specs: list[TensorSpec], *, pinned: list[TensorSpec] | None = None,
                   batch: Batch | None = None, fallback_batch: Batch | None = None,
                   run_specs: list[TensorSpec] | None = None, max_seq: int | None = None) -> list[InputProfile]:
    """Profiles for the graph inputs `specs` (shapes as in the ONNX), from user pins, the batch range, and
    `run_specs`: the pipeline's own specs, whose concrete non-batch dims are the lengths it runs at."""
    pins = {p.name: p for p in pinned or []}
    runs = {s.name: s for s in run_specs or []}
    names = {s.name for s in specs}
    for p in pins.values():
        if p.name not in names:
            raise UsageError(f"--input {p.name}: the model has no input of that name",
                             hint=f"its inputs are: {', '.join(sorted(names)) or '(none)'}")
    if batch is not None and not any(s.shape and not _is_fixed(s.shape[0]) for s in specs):
        fixed = next((s.shape[0] for s in specs if s.shape), None)
        raise UsageError(f"--batch needs a dynamic batch dim, but the model fixes it at {fixed}",
                         hint="re-export without --static-batch, or drop --batch")
    dim0 = batch or fallback_batch or default_batch()
    profiles = []
    for spec in specs:
        pin = pins.get(spec.name)
        dynamic = tuple(i for i, d in enumerate(spec.shape) if not _is_fixed(d))
        if pin is not None and pin.profile is not None:
            profiles.append(_explicit(spec, pin, dynamic))
            continue
        run = runs.get(spec.name)
        ranges = [_dim_range(spec, i, d, dim0, pin, run, max_seq) for i, d in enumerate(spec.shape)]
        profiles.append(InputProfile(spec.name, tuple(r[0] for r in ranges), tuple(r[1] for r in ranges),
                                     tuple(r[2] for r in ranges), dynamic))
    return profiles


def _dim_range(spec: TensorSpec, i: int, d: Any, dim0: Batch, pin: TensorSpec | None, run: TensorSpec | None,
               max_seq: int | None) -> tuple[int, int, int]:
    if _is_fixed(d):
        return int(d), int(d), int(d)
    if i == 0:
        return dim0
    if pin is not None and i < len(pin.shape) and _is_fixed(pin.shape[i]):
        return int(pin.shape[i]), int(pin.shape[i]), int(pin.shape[i])  # the user asked for that size
    length = run.shape[i] if run is not None and i < len(run.shape) and _is_fixed(run.shape[i]) else None
    if length is not None:
        top = max_seq or int(length)
        if top < int(length):
            raise UsageError(f"--max-seq {top} is below the length {length} optcli runs input {spec.name!r} at "
                             f"(axis {i})", hint=f"raise it to --max-seq {length}, or pin a shorter length with "
                                                 f"--input {spec.name}:{_example(spec, dim0, top)}")
        return 1, int(length), top
    example = _example(spec, dim0, 128)
    raise UsageError(f"input {spec.name!r} has a dynamic dim {d!r} at axis {i}: TensorRT needs its range",
                     hint=f"pin the size with --input {spec.name}:{example}, or give a profile, e.g. "
                          f"--input {spec.name}:{_example(spec, dim0, 1, 0)}/{_example(spec, dim0, 128, 1)}/"
                          f"{_example(spec, dim0, 128, 2)}")


def _example(spec: TensorSpec, dim0: Batch, other: int, which: int = 0) -> str:
    """An example shape of `spec`: the batch from `dim0` (min, opt or max by `which`), `other` elsewhere."""
    return "x".join(str(x) if _is_fixed(x) else str(dim0[which]) if j == 0 else str(other)
                    for j, x in enumerate(spec.shape))


def _explicit(spec: TensorSpec, pin: TensorSpec, dynamic: tuple[int, ...]) -> InputProfile:
    assert pin.profile is not None
    mn, opt, mx = pin.profile
    if len(mn) != len(spec.shape):
        raise UsageError(f"--input {spec.name}: profile rank {len(mn)} "
                         f"but the model's input has rank {len(spec.shape)}",
                         hint=f"the model expects shape {format_shape(spec.shape)}")
    for i, d in enumerate(spec.shape):
        if _is_fixed(d) and not mn[i] == opt[i] == mx[i] == d:
            raise UsageError(f"--input {spec.name}: the model fixes dim {i} at {d}, the profile asks for "
                             f"{mn[i]}/{opt[i]}/{mx[i]}", hint=f"the model expects shape {format_shape(spec.shape)}")
    return InputProfile(spec.name, tuple(mn), tuple(opt), tuple(mx), dynamic)


def check_batches(profiles: list[InputProfile], batches: dict[str, int], explicit: set[str] | None = None) -> None:
    """Raise UsageError when a batch the pipeline will run (bench, accuracy) is outside the profiles. The
    hint widens what set the range: `--batch`, or the input's own `--input` profile (`explicit`), which
    --batch cannot override."""
    for p in profiles:
        if 0 not in p.dynamic_axes:
            continue
        for what, b in batches.items():
            if not p.min[0] <= b <= p.max[0]:
                lo, hi = min(b, p.min[0]), max(b, p.max[0])
                hint = f"widen it with --batch {lo}/{p.opt[0]}/{hi}"
                if p.name in (explicit or set()):
                    shape = [format_shape((n, *s[1:])) for n, s in ((lo, p.min), (p.opt[0], p.opt), (hi, p.max))]
                    hint = f"widen its profile: --input {p.name}:{'/'.join(shape)}"
                raise UsageError(
                    f"the {what} batch {b} is outside the batch range {p.min[0]}..{p.max[0]} of input {p.name!r}",
                    hint=hint)


def profiles_json(profiles: list[InputProfile]) -> list[ProfileJSON]:
    return [p.to_json() for p in profiles]
