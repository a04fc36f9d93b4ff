"""Triton's OpenVINO backend: an OpenVINO IR (what build-cpu hands back on many CPUs) as a repository
entry, with the precision optcli gated carried into the backend's parameters where it can be."""
from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from optcli.backends.registry import is_installed as installed
from optcli.deploy import TritonOptions, export_triton
from optcli.errors import UsageError
from triton_fixtures import conv_onnx, parse_config, write_report

pytestmark = pytest.mark.skipif(not installed("openvino"), reason="needs the openvino extra")


def ir(tmp_path: Path, precision: str) -> Path:
    from optcli.backends.openvino.ir import convert_onnx

    xml, _ = convert_onnx(conv_onnx(tmp_path / "conv.onnx"), tmp_path / "ir", precision, {})
    return xml


def params(cfg) -> dict[str, str]:
    return {k: v.string_value for k, v in cfg.parameters.items()}


def test_bf16_ir_repository(tmp_path: Path) -> None:
    out = export_triton(ir(tmp_path, "bf16"), tmp_path / "models", TritonOptions(max_batch_size=16), name="conv")
    assert out.platform == "openvino" and out.kind == "cpu"
    assert sorted(p.name for p in (out.model_dir / "1").iterdir()) == ["model.bin", "model.xml"]
    cfg = parse_config(out.config_path.read_text())     # Triton's own ModelConfig message
    assert cfg.backend == "openvino" and cfg.platform == "" and cfg.max_batch_size == 16
    assert [(t.name, list(t.dims)) for t in cfg.input] == [("x", [3, 8, 8])]
    assert [(t.name, list(t.dims)) for t in cfg.output] == [("logits", [4])]
    assert params(cfg) == {"HINT_BF16": "YES", "NUM_STREAMS": "1", "PERFORMANCE_HINT": "LATENCY"}
    assert cfg.instance_group[0].kind == 2                # KIND_CPU
    readme = out.readme_path.read_text()
    assert "backend: `openvino`" in readme and "1/model.xml" in readme and "1/model.bin" in readme
    # The copied IR is a whole model: OpenVINO reads it from the repository and runs it.
    from optcli.runtime import open_runner

    x = np.random.default_rng(0).standard_normal((2, 3, 8, 8)).astype(np.float32)
    with open_runner(out.model_dir / "1" / "model.xml", "openvino", precision="fp32") as served, \
            open_runner(tmp_path / "conv.onnx", "onnx") as reference:
        np.testing.assert_allclose(served.predict(x)["logits"], reference.predict(x)["logits"], rtol=1e-4, atol=1e-5)


def test_fp32_ir_says_loudly_that_triton_cannot_force_fp32(tmp_path: Path) -> None:
    out = export_triton(ir(tmp_path, "f32"), tmp_path / "models", TritonOptions(instances=2, intra_op_threads=1))
    cfg = parse_config(out.config_path.read_text())
    assert params(cfg) == {"NUM_STREAMS": "2", "INFERENCE_NUM_THREADS": "1"}   # no BF16 switch, 2 streams
    assert any("cannot ask for FP32" in n for n in out.notes)
    assert "cannot ask for FP32" in out.readme_path.read_text()


def test_openvino_ir_options_that_do_not_apply_are_refused(tmp_path: Path) -> None:
    xml = ir(tmp_path, "f32")
    with pytest.raises(UsageError, match="for the CPU"):
        export_triton(xml, tmp_path / "models", TritonOptions(kind="gpu"))
    with pytest.raises(UsageError, match="--graph-level applies to ONNX models"):
        export_triton(xml, tmp_path / "models", TritonOptions(graph_level="all"))
    (tmp_path / "ir" / "model.bin").unlink()
    with pytest.raises(UsageError, match="no weights file model.bin"):
        export_triton(xml, tmp_path / "models")


def test_report_whose_final_artifact_is_an_ir(tmp_path: Path) -> None:
    run = tmp_path / "optcli-out" / "conv"
    shutil.copytree(ir(tmp_path, "bf16").parent, run / "04-build")
    write_report(run, "04-build/model.xml", fmt="openvino", precision="bf16")
    out = export_triton(run / "report.json", tmp_path / "models")
    assert out.name == "resnet_tiny" and out.platform == "openvino"   # name from the run's model
    assert params(parse_config(out.config_path.read_text()))["HINT_BF16"] == "YES"
