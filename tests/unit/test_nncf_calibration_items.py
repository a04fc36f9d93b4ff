"""NNCF's calibration items: batches of CALIBRATION_BATCH rows of similar length where the model takes
any batch, one row at a time where it does not (issue 16: 7-27% of NNCF's quantize time)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from optcli.calibration.dataset import SampleSet

ov = pytest.importorskip("openvino")


def _encoder_like(path: Path, batch: int | str) -> object:
    ids = helper.make_tensor_value_info("input_ids", TensorProto.INT64, [batch, 16])
    mask = helper.make_tensor_value_info("attention_mask", TensorProto.INT64, [batch, 16])
    out = helper.make_tensor_value_info("y", TensorProto.INT64, [batch, 16])
    g = helper.make_graph([helper.make_node("Mul", ["input_ids", "attention_mask"], ["y"])], "g", [ids, mask], [out])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    return ov.convert_model(str(path))


def _samples(n: int) -> SampleSet:
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 17, size=n)
    mask = (np.arange(16)[None, :] < lengths[:, None]).astype(np.int64)
    return SampleSet({"input_ids": rng.integers(0, 100, size=(n, 16)), "attention_mask": mask}, None, "test", "npz")


def test_a_dynamic_batch_gets_batches_of_rows_by_length(tmp_path: Path) -> None:
    from optcli.backends.openvino.ir import CALIBRATION_BATCH, _calibration_items

    calib = _samples(21)
    items, batch = _calibration_items(_encoder_like(tmp_path / "m.onnx", "batch"), ["input_ids", "attention_mask"],
                                      calib)
    assert batch == CALIBRATION_BATCH == 8 and [len(i["input_ids"]) for i in items] == [8, 8, 5]
    lengths = [int(n) for i in items for n in i["attention_mask"].sum(1)]
    assert lengths == sorted(lengths)  # similar lengths together: little padding computed per batch
    rows = sorted(map(tuple, np.concatenate([i["input_ids"] for i in items])))
    assert rows == sorted(map(tuple, calib.arrays["input_ids"]))  # every row once


@pytest.mark.parametrize(("batch", "n"), [(1, 21), ("batch", 8)])
def test_a_fixed_batch_or_a_small_set_goes_one_row_at_a_time(tmp_path: Path, batch: int | str, n: int) -> None:
    from optcli.backends.openvino.ir import _calibration_items

    calib = _samples(n)
    items, got = _calibration_items(_encoder_like(tmp_path / "m.onnx", batch), ["input_ids", "attention_mask"], calib)
    assert got == 1 and len(items) == n and all(len(i["input_ids"]) == 1 for i in items)
    assert np.array_equal(np.concatenate([i["input_ids"] for i in items]), calib.arrays["input_ids"])
