"""The calibration reader protocol. Plugins depend on numpy only, never on a backend.

A reader is a class constructed as `Reader(path: Path, options: dict[str, str])` whose iteration
yields one sample at a time: `dict[input name -> numpy array]`, each array shaped like the model
input WITHOUT the batch dim (a leading batch dim of 1 is accepted too). optcli batches, validates
and counts samples itself. `options` come from repeated `--calib-opt key=value`.
"""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np

Sample = dict[str, np.ndarray]


@runtime_checkable
class CalibrationReader(Protocol):
    def __init__(self, path: Path, options: dict[str, str]) -> None: ...

    def __iter__(self) -> Iterator[Sample]: ...


class ReaderError(Exception):
    """Raised by readers for unreadable data; optcli turns it into a one-line usage error naming the file."""
