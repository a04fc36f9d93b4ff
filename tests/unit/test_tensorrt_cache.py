"""Engine cache keys, the cache folder, and model.engine.json (no TensorRT needed)."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from optcli.backends.tensorrt.engine_cache import EngineCache, cache_key, onnx_digest
from optcli.backends.tensorrt.metadata import EngineMetadata, dtype_name, read_metadata

BASE = dict(onnx_sha256="a" * 64, options={"workspace": None, "builder_opt_level": 3, "hardware_compat": "none",
                                           "version_compat": False},
            profiles=[{"name": "x", "min": [1, 4], "opt": [8, 4], "max": [32, 4], "dynamic_axes": [0]}],
            tensorrt_version="10.8.0.43", gpu="NVIDIA L4", compute_capability="8.9")


def _model(path: Path, weights: np.ndarray, external: bool = False) -> Path:
    w = numpy_helper.from_array(weights, "W")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "W"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", 3])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    if external:
        onnx.save_model(model, str(path), save_as_external_data=True, location=path.name + ".data", size_threshold=0)
    else:
        onnx.save(model, str(path))
    return path


def _meta(key: str = "k" * 64, data: bytes = b"engine", **changes) -> EngineMetadata:
    fields = dict(tensorrt_version="10.8.0.43", gpu="NVIDIA L4", compute_capability="8.9", cache_key=key,
                  onnx_sha256="a" * 64, engine_sha256=hashlib.sha256(data).hexdigest(), engine_bytes=len(data),
                  profiles=[], inputs=[{"name": "x", "dtype": "float32", "shape": [-1, 4]}],
                  outputs=[{"name": "y", "dtype": "float32", "shape": [-1, 3]}],
                  options={"hardware_compat": "none", "version_compat": False}, build_seconds=1.5)
    fields.update(changes)
    return EngineMetadata(**fields)


def test_cache_key_is_stable_and_covers_every_input():
    key = cache_key(**BASE)
    assert key == cache_key(**BASE) and len(key) == 64
    changed = [
        {"onnx_sha256": "b" * 64},
        {"options": {**BASE["options"], "workspace": 1 << 30}},
        {"profiles": [{**BASE["profiles"][0], "max": [64, 4]}]},
        {"tensorrt_version": "10.9.0.34"},
        {"gpu": "NVIDIA A10"},
        {"compute_capability": "8.6"},
    ]
    keys = {cache_key(**{**BASE, **c}) for c in changed}
    assert key not in keys and len(keys) == len(changed)


def test_onnx_digest_covers_external_weights(tmp_path):
    a = _model(tmp_path / "a.onnx", np.ones((4, 3), np.float32), external=True)
    before = onnx_digest(a)
    _model(tmp_path / "a.onnx", np.full((4, 3), 2, np.float32), external=True)  # only the .data file changes
    assert (tmp_path / "a.onnx.data").is_file() and onnx_digest(a) != before
    b = _model(tmp_path / "b.onnx", np.ones((4, 3), np.float32))
    assert onnx_digest(b) == hashlib.sha256(b.read_bytes()).hexdigest()


def test_store_lookup_and_miss(tmp_path):
    cache = EngineCache(tmp_path)
    key = cache_key(**BASE)
    assert cache.lookup(key, tensorrt_version="10.8.0.43", gpu="NVIDIA L4", compute_capability="8.9").status == "miss"
    folder = cache.store(key, b"engine", _meta(key))
    assert folder == tmp_path / key[:2] / key
    assert sorted(p.name for p in folder.iterdir()) == ["model.engine", "model.engine.json"]
    hit = cache.lookup(key, tensorrt_version="10.8.0.43", gpu="NVIDIA L4", compute_capability="8.9")
    assert hit.status == "hit" and hit.engine_bytes == b"engine" and hit.metadata.build_seconds == 1.5


def test_validator_failure_evicts_the_entry(tmp_path):
    cache = EngineCache(tmp_path)
    cache.store("k" * 64, b"engine", _meta())
    res = cache.lookup("k" * 64, tensorrt_version="10.8.0.43", gpu="NVIDIA L4", compute_capability="8.9",
                       validate=lambda data, meta: "TensorRT cannot deserialize it")
    assert (res.status, res.reason) == ("corrupt", "TensorRT cannot deserialize it")
    assert not cache.entry("k" * 64).exists()


def test_incomplete_entry_is_corrupt(tmp_path):
    cache = EngineCache(tmp_path)
    cache.store("k" * 64, b"engine", _meta())
    (cache.entry("k" * 64) / "model.engine").unlink()
    res = cache.lookup("k" * 64, tensorrt_version="10.8.0.43", gpu="NVIDIA L4", compute_capability="8.9")
    assert res.status == "corrupt" and "model.engine missing" in res.reason


def test_metadata_round_trip_and_mismatch(tmp_path):
    meta = _meta()
    meta.write(tmp_path / "model.engine.json")
    back = read_metadata(tmp_path / "model.engine.json")
    assert back == meta and json.loads((tmp_path / "model.engine.json").read_text())["schema_version"] == 1
    same = dict(tensorrt_version="10.8.0.43", gpu="NVIDIA L4", compute_capability="8.9")
    assert meta.mismatch(**same) is None
    assert meta.mismatch(**{**same, "tensorrt_version": "10.9.0.34"}) == \
        "built with TensorRT 10.8.0.43, this machine has 10.9.0.34"
    assert "compute capability 8.9" in meta.mismatch(**{**same, "compute_capability": "9.0"})
    assert "cache key" in meta.mismatch(**same, cache_key="z" * 64)
    # Compatibility options relax exactly what they promise.
    compat = _meta(options={"hardware_compat": "ampere+", "version_compat": True})
    assert compat.mismatch(tensorrt_version="10.9.0.34", gpu="NVIDIA H100", compute_capability="9.0") is None


def test_read_metadata_refuses_foreign_json(tmp_path):
    path = tmp_path / "model.engine.json"
    path.write_text(json.dumps({"hello": 1}))
    with pytest.raises(ValueError, match="not optcli engine metadata"):
        read_metadata(path)
    path.write_text("[1, 2]")
    with pytest.raises(ValueError, match="not a JSON object"):
        read_metadata(path)


def test_dtype_names():
    class Member:
        def __init__(self, name):
            self.name = name

    assert dtype_name(Member("FLOAT")) == "float32" and dtype_name(Member("HALF")) == "float16"
    assert dtype_name("DataType.INT64") == "int64" and dtype_name(Member("BF16")) == "bfloat16"


# model.engine.json as optcli wrote it before its records were typed (TensorEntry, ProfileJSON,
# BuildOptions): key order and values included, so a typing change that alters the file fails here.
WRITTEN = {
    "tensorrt_version": "1.7.1.116", "gpu": None, "compute_capability": None, "cache_key": "c" * 64,
    "onnx_sha256": "a" * 64, "engine_sha256": "e" * 64, "engine_bytes": 1234,
    "profiles": [{"name": "x", "min": [1, 4], "opt": [8, 4], "max": [32, 4], "dynamic_axes": [0]}],
    "inputs": [{"name": "x", "dtype": "float32", "shape": [-1, 4], "profile": [[1, 4], [8, 4], [32, 4]]}],
    "outputs": [{"name": "y", "dtype": "float16", "shape": [-1, 3]}],
    "options": {"workspace": None, "builder_opt_level": 3, "hardware_compat": "none", "version_compat": False,
                "toolkit": "tensorrt_rtx"},
    "build_seconds": 0.5, "strongly_typed": True, "built_at": "2026-11-27T20:00:00+0000", "optcli_version": "0.9.0",
    "cuda": "12", "format": "optcli-tensorrt-engine", "schema_version": 1}


def test_engine_metadata_file_round_trips_byte_for_byte(tmp_path):
    from optcli.backends.tensorrt.engine_loader import tensor_spec
    from optcli.backends.tensorrt.profiles import InputProfile

    old = json.dumps(WRITTEN, indent=2) + "\n"
    (tmp_path / "old.json").write_text(old)
    meta = read_metadata(tmp_path / "old.json")
    meta.write(tmp_path / "again.json")
    assert (tmp_path / "again.json").read_text() == old
    assert [InputProfile.from_json(p).to_json() for p in meta.profiles] == WRITTEN["profiles"]
    assert tensor_spec(meta.inputs[0]).profile == ((1, 4), (8, 4), (32, 4))
    # A changed record still writes the same layout, and the oldest files (no cuda, no optcli_version,
    # profiles without dynamic_axes) still load.
    meta.options["workspace"] = 1 << 30
    meta.write(tmp_path / "changed.json")
    changed = {**WRITTEN, "options": {**WRITTEN["options"], "workspace": 1 << 30}}
    assert (tmp_path / "changed.json").read_text() == json.dumps(changed, indent=2) + "\n"
    oldest = {k: v for k, v in WRITTEN.items() if k not in ("cuda", "optcli_version")}
    oldest["profiles"] = [{k: v for k, v in WRITTEN["profiles"][0].items() if k != "dynamic_axes"}]
    (tmp_path / "oldest.json").write_text(json.dumps(oldest))
    back = read_metadata(tmp_path / "oldest.json")
    assert back.cuda is None and InputProfile.from_json(back.profiles[0]).dynamic_axes == ()
