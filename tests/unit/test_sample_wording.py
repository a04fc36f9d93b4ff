"""Error wording for data read through a reader (issue 30, item 20): evaluation data was called
"calibration sample 0", and an .npz whose x has shape (4,) for a model taking Nx4 read
"has shape , the model takes Nx4". The class: every refusal names the data by what it is for, and
no shape prints as an empty string."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from optcli.calibration.dataset import load_samples
from optcli.errors import UsageError
from optcli.tensor_spec import TensorSpec, format_shape

SPECS = [TensorSpec("x", ("N", 4), "float32")]


def _folder(tmp_path: Path, name: str, **arrays: np.ndarray) -> Path:
    folder = tmp_path / name
    folder.mkdir()
    np.savez(folder / "0.npz", **arrays)
    return folder


BAD = {
    "missing input": {"y": np.zeros((2, 4), np.float32)},
    "extra key": {"x": np.zeros((2, 4), np.float32), "z": np.zeros(2)},
    "one sample without its batch dim": {"x": np.zeros(4, np.float32)},
    "wrong width": {"x": np.zeros((2, 5), np.float32)},
    "wrong dtype": {"x": np.array([["a"] * 4] * 2)},
    "NaN": {"x": np.full((2, 4), np.nan, np.float32)},
}


@pytest.mark.parametrize("what", ["calibration", "evaluation", "input"])
@pytest.mark.parametrize("case", list(BAD))
def test_refusals_name_the_data_by_what_it_is_for(tmp_path: Path, what: str, case: str) -> None:
    folder = _folder(tmp_path, "data", **BAD[case])
    with pytest.raises(UsageError) as err:
        load_samples(folder, SPECS, what=what)
    text = f"{err.value.message} {err.value.hint}"
    assert err.value.message.startswith(f"{what} sample 0 in {folder}"), err.value.message
    if what != "calibration":
        assert "calibration" not in text, text
    assert "shape ," not in text and "shape  " not in text, text


def test_a_sample_missing_its_batch_dim_says_so(tmp_path: Path) -> None:
    folder = _folder(tmp_path, "eval", x=np.arange(4, dtype=np.float32))
    with pytest.raises(UsageError) as err:
        load_samples(folder, SPECS, what="evaluation")
    assert err.value.message == (f"evaluation sample 0 in {folder}: input 'x' has shape (), the model takes Nx4, "
                                 "so each sample 4")
    assert "shape 1x4 (x[None])" in err.value.hint


def test_format_shape_of_a_scalar() -> None:
    assert format_shape(()) == "()" and format_shape((1, "N", 4)) == "1xNx4"
