"""An example calibration reader plugin: a CSV file of feature rows for a model with one input.

Use it with:
    optcli compile model.pt2 --int8 --calib data/ --calib-reader calibration/example_reader.py:CsvReader \
        --calib-opt input=x --calib-opt shape=1x64

or register it as an entry point in your package's pyproject.toml:
    [project.entry-points."optcli.calibration_readers"]
    csv = "my_package.readers:CsvReader"
and pass --calib-reader csv.

A reader depends on numpy only. It is built as Reader(path, options) and yields one sample at a time:
a dict of input name -> numpy array shaped like the model input without the batch dim.
"""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np


class CsvReader:
    """Every row of every *.csv file in the folder is one sample, reshaped to `shape` (without batch)."""

    def __init__(self, path: Path, options: dict[str, str]) -> None:
        self.files = sorted(Path(path).glob("*.csv"))
        if not self.files:
            raise ValueError(f"{path}: no .csv files")
        self.input = options.get("input", "x")
        self.shape = tuple(int(d) for d in options.get("shape", "-1").split("x"))
        self.dtype = np.dtype(options.get("dtype", "float32"))

    def __iter__(self) -> Iterator[dict[str, np.ndarray]]:
        for f in self.files:
            rows = np.loadtxt(f, delimiter=",", dtype=self.dtype, ndmin=2)
            for row in rows:
                yield {self.input: row.reshape(self.shape)}
