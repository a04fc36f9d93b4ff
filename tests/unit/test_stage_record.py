"""stage.json: what the stage cache writes reads back into the same artifact, and writes the same bytes."""
from __future__ import annotations

import json

from optcli.artifact import Artifact
from optcli.cache_recheck import disagreement
from optcli.report import StageRecord
from optcli.stage_cache import STAGE_RECORD, cached_artifact, load_record, write_record


def _stage_dir(tmp_path):
    folder = tmp_path / "03-quantize"
    folder.mkdir()
    (folder / "model.onnx").write_bytes(b"not really onnx, hashed only")
    return folder


def test_stage_record_round_trips_byte_for_byte(tmp_path):
    folder = _stage_dir(tmp_path)
    made = Artifact(folder / "model.onnx", "onnx", "int8", stage="quantize-int8", parent="p" * 64,
                    meta={"excluded": ["conv1"], "accuracy": {"cosine_min": 0.99}})
    record = StageRecord(name="quantize-int8", seconds=1.25)
    write_record(folder, "k" * 64, "bench", made.path.relative_to(folder), made, record)
    written = (folder / STAGE_RECORD).read_text()

    loaded = load_record(folder, "k" * 64)
    assert loaded is not None and json.dumps(loaded, indent=2) == written
    again = cached_artifact(folder, loaded, "quantize-int8", "p" * 64)
    assert (again.path, again.format, again.precision, again.backend, again.sha256) == \
        (made.path, "onnx", "int8", "onnxruntime", made.sha256)
    assert again.meta == {"excluded": ["conv1"]}  # a recorded accuracy is a claim, measured again instead
    # The record of the reused artifact, written again: the same bytes but for what it leaves out.
    write_record(folder, "k" * 64, "bench", again.path.relative_to(folder), again, record)
    assert json.loads((folder / STAGE_RECORD).read_text()) == {**json.loads(written), "meta": {"excluded": ["conv1"]}}


def test_a_record_with_a_wrong_type_is_not_reused(tmp_path):
    folder = _stage_dir(tmp_path)
    made = Artifact(folder / "model.onnx", "onnx", "fp32", stage="simplify")
    write_record(folder, "k" * 64, "bench", made.path.relative_to(folder), made,
                 StageRecord(name="simplify", seconds=0.5))
    record = json.loads((folder / STAGE_RECORD).read_text())
    assert load_record(folder, "k" * 64) is not None
    for key, bad in (("format", 7), ("meta", []), ("seconds", "1"), ("details", None)):
        (folder / STAGE_RECORD).write_text(json.dumps({**record, key: bad}))
        assert load_record(folder, "k" * 64) is None, key


def test_disagreement_reads_the_summaries_it_is_given():
    fresh = {"cosine_min": 0.98, "max_abs_err": 0.5, "outputs": {"y": {"scale": 100.0}}}
    assert disagreement(fresh, {"cosine_min": 0.98, "max_abs_err": 0.5}) is None
    assert "cosine_min" in disagreement(fresh, {"cosine_min": 0.999, "max_abs_err": 0.5})
    # The slack on the max abs error grows with the outputs' scale; outputs that are not a dict count as none.
    assert disagreement(fresh, {"max_abs_err": 0.333}) is None
    assert disagreement({**fresh, "outputs": None}, {"max_abs_err": 0.333}) is not None
