"""Built-in readers: `npz` (a folder of .npz, keys = input names, leading batch dim), `npy` (a folder
per input name of .npy files, one sample or batch each) and `images` (jpg/png with resize, centre
crop, mean/std, NCHW/NHWC)."""
from __future__ import annotations

import zipfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from optcli.calibration.reader import ReaderError, Sample

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".webp")


def _files(folder: Path, suffixes: tuple[str, ...]) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.is_file() and p.suffix.lower() in suffixes)


def _split(arrays: dict[str, np.ndarray], where: Path) -> Iterator[Sample]:
    """One .npz/.npy holds a batch: split it along dim 0 into samples."""
    sizes = {k: v.shape[0] if v.ndim else 1 for k, v in arrays.items()}
    if len(set(sizes.values())) > 1:
        raise ReaderError(f"{where}: arrays have different batch sizes {sizes}")
    n = next(iter(sizes.values()), 0)
    for i in range(n):
        yield {k: v[i] for k, v in arrays.items()}


class NpzReader:
    """A folder of .npz files; each holds a batch (leading dim) per key; keys = input names.
    Extra keys such as `labels` are passed through (the accuracy check uses `labels`)."""

    def __init__(self, path: Path, options: dict[str, str]) -> None:
        self.files = _files(path, (".npz",))
        if not self.files:
            raise ReaderError(f"{path}: no .npz files")

    def __iter__(self) -> Iterator[Sample]:
        for f in self.files:
            try:
                with np.load(f, allow_pickle=False) as data:
                    arrays = {k: data[k] for k in data.files}
            except (OSError, ValueError, zipfile.BadZipFile, EOFError) as exc:
                raise ReaderError(f"{f}: unreadable .npz ({type(exc).__name__}: {exc})") from None
            yield from _split(arrays, f)


class NpyReader:
    """A folder per input name (`data/x/0001.npy`, `data/mask/0001.npy`); files paired by sorted name."""

    def __init__(self, path: Path, options: dict[str, str]) -> None:
        self.dirs = sorted(p for p in path.iterdir() if p.is_dir())
        if not self.dirs:
            raise ReaderError(f"{path}: no sub-folders (the npy reader wants one folder per input name)")
        self.files = {d.name: _files(d, (".npy",)) for d in self.dirs}
        counts = {k: len(v) for k, v in self.files.items()}
        if len(set(counts.values())) != 1:
            raise ReaderError(f"{path}: input folders hold different numbers of .npy files {counts}")

    def __iter__(self) -> Iterator[Sample]:
        names = list(self.files)
        for group in zip(*(self.files[n] for n in names)):
            arrays = {}
            for name, f in zip(names, group):
                try:
                    arrays[name] = np.load(f, allow_pickle=False)
                except (OSError, ValueError) as exc:
                    raise ReaderError(f"{f}: unreadable .npy ({exc})") from None
            yield arrays


def _floats(text: str, n: int, what: str) -> np.ndarray:
    try:
        values = [float(v) for v in text.split(",")]
    except ValueError:
        raise ReaderError(f"--calib-opt {what}={text}: expected numbers separated by commas") from None
    if len(values) not in (1, n):
        raise ReaderError(f"--calib-opt {what}={text}: expected 1 or {n} values")
    return np.array(values * (n // len(values)), dtype=np.float32)


class ImageReader:
    """jpg/png images -> float32. Options: input (name, default `x`), size (resize shorter side),
    crop (centre crop, default = size), mean, std (per channel, on 0-1 values), layout (NCHW|NHWC),
    channels (3|1), scale (default 1/255)."""

    def __init__(self, path: Path, options: dict[str, str]) -> None:
        try:
            from PIL import Image  # optional: the `images` extra
        except ImportError:
            raise ReaderError("the images reader needs Pillow: pip install 'optcli[images]'") from None
        self.Image = Image
        self.files = _files(path, IMAGE_SUFFIXES)
        if not self.files:
            raise ReaderError(f"{path}: no image files ({', '.join(IMAGE_SUFFIXES)})")
        known = {"input", "size", "crop", "mean", "std", "layout", "channels", "scale"}
        unknown = sorted(set(options) - known)
        if unknown:
            raise ReaderError(f"images reader: unknown option {unknown[0]!r} (known: {', '.join(sorted(known))})")
        self.name = options.get("input", "x")
        self.size = int(options.get("size", 224))
        self.crop = int(options.get("crop", self.size))
        self.channels = int(options.get("channels", 3))
        self.layout = options.get("layout", "NCHW").upper()
        if self.layout not in ("NCHW", "NHWC"):
            raise ReaderError(f"images reader: layout must be NCHW or NHWC, not {self.layout}")
        self.scale = float(options.get("scale", 1 / 255))
        self.mean = _floats(options.get("mean", "0"), self.channels, "mean")
        self.std = _floats(options.get("std", "1"), self.channels, "std")

    def _load(self, f: Path) -> np.ndarray:
        try:
            img = self.Image.open(f).convert("RGB" if self.channels == 3 else "L")
        except Exception as exc:  # PIL raises UnidentifiedImageError, OSError, ...
            raise ReaderError(f"{f}: unreadable image ({type(exc).__name__})") from None
        w, h = img.size
        r = self.size / min(w, h)
        img = img.resize((max(self.crop, round(w * r)), max(self.crop, round(h * r))), self.Image.Resampling.BILINEAR)
        w, h = img.size
        left, top = (w - self.crop) // 2, (h - self.crop) // 2
        img = img.crop((left, top, left + self.crop, top + self.crop))
        arr = np.asarray(img, dtype=np.float32) * self.scale
        arr = arr.reshape(self.crop, self.crop, self.channels)
        arr = (arr - self.mean) / self.std
        return arr.transpose(2, 0, 1).copy() if self.layout == "NCHW" else arr

    def __iter__(self) -> Iterator[Sample]:
        for f in self.files:
            yield {self.name: self._load(f)}


BUILTIN = {"npz": NpzReader, "npy": NpyReader, "images": ImageReader}
