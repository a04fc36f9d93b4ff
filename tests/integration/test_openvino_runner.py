"""The OpenVINO runner on a real IR (openvino from PyPI): same outputs as onnxruntime, the recorded
precision applied, several requests at once, per-layer times, and one-line errors."""
from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("openvino", reason="needs the openvino extra (pip install 'optcli[openvino]')")

from cpu_fixtures import mlp_onnx  # noqa: E402
from optcli.artifact import sha256_file  # noqa: E402
from optcli.backends.onnxruntime.runner import OnnxRuntimeRunner  # noqa: E402
from optcli.backends.openvino.ir import convert_onnx  # noqa: E402
from optcli.backends.openvino.runner import OpenVINORunner, cpu_supports_bf16  # noqa: E402
from optcli.errors import UsageError  # noqa: E402
from optcli.runtime import open_runner  # noqa: E402


@pytest.fixture(scope="module")
def ir(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    d = tmp_path_factory.mktemp("ov")
    onnx_path = mlp_onnx(d / "mlp.onnx")
    xml, build = convert_onnx(onnx_path, d / "ir", "f32", {"candidate": "test"})
    assert xml.name == "model.xml" and xml.with_suffix(".bin").is_file() and build["from"] == "mlp.onnx"
    return onnx_path, xml


def test_outputs_match_onnxruntime_and_specs_keep_the_dynamic_batch(ir: tuple[Path, Path]) -> None:
    onnx_path, xml = ir
    x = np.random.default_rng(1).standard_normal((5, 16)).astype(np.float32)
    with open_runner(xml, "openvino") as ov, OnnxRuntimeRunner(onnx_path) as ort:
        assert [(s.name, s.shape, s.dtype) for s in ov.inputs] == [("x", ("batch", 16), "float32")]
        assert [s.name for s in ov.outputs] == ["y"]
        got = ov.predict({"x": x})["y"]
        want = ort.predict({"x": x})["y"]
        assert got.shape == (5, 10)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
        assert ov.settings["inference_precision"] == "f32"  # recorded in the IR, not OpenVINO's default


def test_precision_option_overrides_the_record(ir: tuple[Path, Path]) -> None:
    _, xml = ir
    if not cpu_supports_bf16():
        pytest.skip("this CPU has no BF16")
    with OpenVINORunner(xml, precision="bf16") as r:
        assert r.settings["inference_precision"] == "bf16" and r.requested_precision == "bf16"
    with pytest.raises(UsageError, match="unknown OpenVINO precision"):
        OpenVINORunner(xml, precision="int4")


def test_concurrent_requests_give_the_same_answers(ir: tuple[Path, Path]) -> None:
    _, xml = ir
    rng = np.random.default_rng(2)
    batches = [rng.standard_normal((3, 16)).astype(np.float32) for _ in range(8)]
    with OpenVINORunner(xml, concurrency=2) as r:
        assert r.settings["streams"] == 2
        serial = [r.predict(b)["y"] for b in batches]
        futures = [r.predict_async(b) for b in batches]
        for f, want in zip(futures, serial):
            np.testing.assert_array_equal(f.result()["y"], want)


def test_layer_profile_names_layers_and_kernels(ir: tuple[Path, Path]) -> None:
    _, xml = ir
    with OpenVINORunner(xml, perf_count=True) as r:
        rows = r.layer_profile({"x": np.ones((1, 16), np.float32)}, runs=5, warmup=1)
    assert rows and abs(sum(row["share"] for row in rows) - 1.0) < 1e-6
    assert {"name", "op_type", "exec_type", "total_ms", "per_run_ms", "calls"} <= set(rows[0])
    assert any(row["op_type"] in ("FullyConnected", "MatMul") for row in rows)
    with OpenVINORunner(xml) as r, pytest.raises(UsageError, match="perf_count=True"):
        r.layer_profile({"x": np.ones((1, 16), np.float32)})


def test_bad_inputs_and_broken_files_are_one_line_errors(ir: tuple[Path, Path], tmp_path: Path) -> None:
    _, xml = ir
    with OpenVINORunner(xml) as r:
        with pytest.raises(UsageError, match="input 'x' has shape 2x3"):
            r.predict({"x": np.ones((2, 3), np.float32)})
        with pytest.raises(UsageError, match="missing input 'x'"):
            r.predict({})
    lonely = tmp_path / "model.xml"
    shutil.copy(xml, lonely)
    with pytest.raises(UsageError, match="no weights file model.bin"):
        OpenVINORunner(lonely)
    shutil.copy(xml.with_suffix(".bin"), tmp_path / "model.bin")
    lonely.write_text("<net>not an IR")
    with pytest.raises(UsageError, match="OpenVINO cannot read model.xml"):
        OpenVINORunner(tmp_path)  # a folder holding model.xml is accepted, then fails to parse


def test_the_ir_hash_covers_the_weights(ir: tuple[Path, Path], tmp_path: Path) -> None:
    _, xml = ir
    copy = tmp_path / "ir"
    shutil.copytree(xml.parent, copy)
    before = sha256_file(copy / "model.xml")
    data = bytearray((copy / "model.bin").read_bytes())
    data[0] ^= 0xFF
    (copy / "model.bin").write_bytes(bytes(data))
    assert sha256_file(copy / "model.xml") != before
