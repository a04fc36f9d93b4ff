"""Read calibration (or evaluation) samples through a reader, validate them against the model's
inputs, and stack them into arrays. Every problem is a one-line UsageError naming what is wrong."""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from optcli.calibration.plugins import find_reader
from optcli.calibration.reader import ReaderError
from optcli.errors import UsageError, foreign_exit
from optcli.tensor_spec import DTYPES, TensorSpec, format_shape

LABELS_KEY = "labels"


@dataclass
class SampleSet:
    """Samples stacked per input: arrays[name] has shape (N, ...); labels (N,) if the data had them."""

    arrays: dict[str, np.ndarray]
    labels: np.ndarray | None
    source: str
    reader: str
    capped: int | None = None  # the sample cap that stopped the read while the reader had more

    def __len__(self) -> int:
        return len(next(iter(self.arrays.values()))) if self.arrays else 0

    def take(self, index: slice | np.ndarray) -> SampleSet:
        labels = self.labels[index] if self.labels is not None else None
        return SampleSet({k: v[index] for k, v in self.arrays.items()}, labels, self.source, self.reader, self.capped)

    def batches(self, size: int) -> list[dict[str, np.ndarray]]:
        return [{k: v[i:i + size] for k, v in self.arrays.items()} for i in range(0, len(self), size)]

    def digest(self) -> str:
        """sha256 of the data itself, for cache keys: change a sample and the key changes."""
        h = hashlib.sha256()
        for k in sorted(self.arrays):
            a = np.ascontiguousarray(self.arrays[k])
            h.update(k.encode())
            h.update(str(a.dtype).encode())
            h.update(str(a.shape).encode())
            h.update(a.tobytes())
        return h.hexdigest()


def _check_sample(sample: dict[str, np.ndarray], specs: list[TensorSpec], index: int, folder: Path,
                  what: str = "calibration") -> dict[str, np.ndarray]:
    names = {s.name for s in specs}
    given = set(sample) - {LABELS_KEY}
    missing, extra = sorted(names - given), sorted(given - names)
    where = f"{what} sample {index} in {folder}"  # evaluation data is not calibration data (issue 30)
    if missing:
        raise UsageError(f"{where} lacks input {missing[0]!r}",
                         hint=f"keys must be the model's input names: {', '.join(sorted(names))}")
    if extra:
        raise UsageError(f"{where} has key {extra[0]!r}, which is not a model input",
                         hint=f"the model's inputs are: {', '.join(sorted(names))} (plus optional {LABELS_KEY!r})")
    out = {}
    for spec in specs:
        arr = np.asarray(sample[spec.name])
        rank = len(spec.shape)
        if arr.ndim == rank and arr.shape[0] == 1:
            arr = arr[0]  # a leading batch dim of 1 is accepted
        if arr.ndim != rank - 1 or any(isinstance(d, int) and d != a for d, a in zip(spec.shape[1:], arr.shape)):
            sample_shape = format_shape(spec.shape[1:])
            hint = "resize or re-save the data to the model's input shape"
            if arr.ndim == rank - 2:  # one dim short: an .npz array saved as one sample, without the batch dim
                hint = (f"an .npz holds a batch (the npz reader splits each array along dim 0): save one sample "
                        f"of {spec.name!r} with shape 1x{sample_shape} (x[None]), N samples as Nx{sample_shape}")
            raise UsageError(f"{where}: input {spec.name!r} has shape {format_shape(arr.shape)}, the model takes "
                             f"{format_shape(spec.shape)}, so each sample {sample_shape}", hint=hint)
        want = np.dtype(DTYPES[spec.dtype])
        if arr.dtype != want:
            if arr.dtype.kind != want.kind and not (arr.dtype.kind in "iu" and want.kind in "iu"):
                raise UsageError(f"{where}: input {spec.name!r} is {arr.dtype}, "
                                 f"the model takes {want}", hint=f"save it as {want}")
            arr = arr.astype(want)
        if arr.dtype.kind == "f" and not np.isfinite(arr).all():
            raise UsageError(f"{where}: input {spec.name!r} has NaN or Inf values",
                             hint="clean the data; " + ("calibration ranges" if what == "calibration" else
                                                        "figures measured on it") + " would be meaningless")
        out[spec.name] = arr
    if LABELS_KEY in sample:
        out[LABELS_KEY] = np.asarray(sample[LABELS_KEY])
    return out


def load_samples(folder: Path, specs: list[TensorSpec], reader: str | None = None,
                 options: dict[str, str] | None = None, limit: int | None = None,
                 minimum: int = 1, what: str = "calibration") -> SampleSet:
    """Read, validate and stack up to `limit` samples; fewer than `minimum` is an error."""
    if not folder.exists():
        raise UsageError(f"{what} folder not found: {folder}",
                         hint=f"pass --{'calib' if what == 'calibration' else 'eval'} DIR")
    if not folder.is_dir():
        raise UsageError(f"{what} data {folder} is not a folder",
                         hint="pass a folder of .npz files (keys = input names)")
    if not any(folder.iterdir()):
        raise UsageError(f"{what} folder {folder} is empty", hint="put .npz files in it (keys = input names)")
    cls, how = find_reader(reader, folder)
    rows: list[dict[str, np.ndarray]] = []
    capped = None
    try:
        instance = cls(folder, dict(options or {}))
        samples = iter(instance)
        for i, sample in enumerate(samples):
            if not isinstance(sample, dict):
                raise UsageError(f"reader {how} yielded a {type(sample).__name__}, not a dict of arrays",
                                 hint="a reader yields dict[input name -> numpy array]")
            rows.append(_check_sample(sample, specs, i, folder, what))
            if limit is not None and len(rows) >= limit:
                # the cap, not the data, ended the read: said so in the report (a reader may never stop)
                capped = limit if next(samples, None) is not None else None
                break
    except ReaderError as exc:
        raise UsageError(f"{what} data: {exc}", hint="fix or remove that file") from None
    except UsageError:
        raise
    except Exception as exc:  # a plugin's own failure: user code, so no traceback, but say whose
        raise UsageError(f"{what} reader {how} failed: {type(exc).__name__}: {str(exc)[:200]}",
                         hint="fix the data or the reader (rerun with --debug for the traceback)") from exc
    except BaseException as exc:  # SystemExit(0) from a plugin once made a failed run exit 0
        if not foreign_exit(exc):
            raise
        raise UsageError(f"{what} reader {how} raised {type(exc).__name__}{_code(exc)}",
                         hint="a reader ends by returning from __iter__, not by exiting; fix the reader") from exc
    if len(rows) < minimum:
        raise UsageError(f"{what} folder {folder} has {len(rows)} samples, fewer than the {minimum} needed",
                         hint="add samples, or lower --calib-samples")
    with_labels = [LABELS_KEY in r for r in rows]
    labels = np.stack([r.pop(LABELS_KEY) for r in rows]).reshape(len(rows), -1)[:, 0] if all(with_labels) else None
    for r in rows:
        r.pop(LABELS_KEY, None)
    arrays = {s.name: np.stack([r[s.name] for r in rows]) for s in specs}
    return SampleSet(arrays, labels, str(folder), how, capped)


def _code(exc: BaseException) -> str:
    return f"({exc.code!r})" if isinstance(exc, SystemExit) else ""
