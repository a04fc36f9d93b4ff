"""`optcli compile MODEL --int8 --calib DIR --target tensorrt` (the mission's own example) and
`--fp16`, end to end through the TensorRT double and the torch.cuda stand-in: the quantize stage
writes the TensorRT flavour, its preflight passes, the double's parser (which refuses INT32
DequantizeLinear like TensorRT) builds it, and the engine is measured. Also transformers'
ResNet and BERT, built from (reduced) configs with random weights."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest

import optcli.backends.tensorrt.runner as runner_module
from fake_cuda import TorchShim
from fake_tensorrt import make_tensorrt
from optcli.backends.tensorrt.preflight import check_file

torch = pytest.importorskip("torch")

FAST = dict(runs=3, min_seconds=0.0, max_seconds=0.2, warmup_runs=1, warmup_seconds=0.0)


@pytest.fixture
def doubles(monkeypatch, tmp_path):
    import optcli.backends.tensorrt.engine_build as stage_module
    import optcli.backends.tensorrt.probe as probe

    trt = make_tensorrt()
    usable = probe.TensorRTStatus(True, gpu="NVIDIA L4", compute_capability="8.9", tensorrt_version="10.8.0.43",
                                  torch_cuda="12.4")
    monkeypatch.setattr(probe, "tensorrt_status", lambda: usable)
    monkeypatch.setattr(stage_module, "require", lambda module, purpose: trt)
    monkeypatch.setattr(runner_module, "require", lambda m, p: {"tensorrt": trt, "torch": TorchShim(trt)}[m])
    monkeypatch.setenv("OPTCLI_CACHE_DIR", str(tmp_path / "cache"))
    return trt


def npz_dir(root: Path, name: str, arrays: dict[str, Any], files: int = 2) -> Path:
    d = root / name
    d.mkdir(parents=True, exist_ok=True)
    for i in range(files):
        np.savez(d / f"part-{i}.npz", **{k: v(i) for k, v in arrays.items()})
    return d


def assert_tensorrt_run(report: Any, precision: str, out: Path) -> Path:
    assert report.status == "ok", [(s.name, s.status, s.reason) for s in report.stages]
    build = report.stage("build")
    assert build.status == "ok" and report.final["format"] == "engine"
    quantized = report.stage(f"quantize-{precision}")
    assert quantized.status == "ok"
    onnx_path = out / (quantized.artifact["path"] if isinstance(quantized.artifact, dict) else quantized.artifact)
    assert check_file(onnx_path) == []
    return onnx_path


def test_compile_int8_calib_target_tensorrt(doubles, cnn_pt2, tmp_path):
    from optcli import api

    calib = npz_dir(tmp_path, "calib", {"x": lambda i: np.random.default_rng(i).standard_normal((32, 3, 16, 16))
                                        .astype(np.float32)})
    report = api.compile(cnn_pt2, out=tmp_path / "out", target="tensorrt", int8=True, calib=calib,
                         tensorrt={"batch": "1/2/32"}, **FAST)
    onnx_path = assert_tensorrt_run(report, "int8", tmp_path / "out")
    q = report.stage("quantize-int8")
    assert q.details["flavour"]["name"] == "qdq-s8s8" and q.details["flavour"]["bias"] == "float"
    graph = onnx.load(str(onnx_path), load_external_data=False)
    assert any(n.op_type == "DequantizeLinear" for n in graph.graph.node)
    assert doubles.builds == 1


def test_compile_fp16_target_tensorrt(doubles, cnn_pt2, tmp_path):
    from optcli import api

    report = api.compile(cnn_pt2, out=tmp_path / "out", target="tensorrt", fp16=True, tensorrt={"batch": "1/2/32"},
                         **FAST)
    assert_tensorrt_run(report, "fp16", tmp_path / "out")


def _export(model: Any, args: tuple, names: list[str], path: Path) -> Path:
    batch = torch.export.Dim("batch", min=1, max=64)
    torch.onnx.export(model, args, str(path), input_names=names, dynamo=True,
                      dynamic_shapes=tuple({0: batch} for _ in names))
    return path


@pytest.mark.slow
@pytest.mark.parametrize("precision", ["int8", "fp16"])
def test_transformers_resnet_and_bert_from_configs_pass_the_preflight(doubles, tmp_path, precision):
    transformers = pytest.importorskip("transformers")
    from optcli import api

    torch.manual_seed(0)
    resnet = transformers.ResNetForImageClassification(transformers.ResNetConfig(
        embedding_size=16, hidden_sizes=[16, 32], depths=[1, 1], num_labels=4)).eval()
    bert = transformers.BertModel(transformers.BertConfig(
        vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
        max_position_embeddings=32), add_pooling_layer=False).eval()

    class Bert(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bert = bert

        def forward(self, input_ids: Any, attention_mask: Any) -> Any:
            return self.bert(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

    class ResNet(torch.nn.Module):
        def forward(self, x: Any) -> Any:
            return resnet(pixel_values=x).logits

    r_onnx = _export(ResNet().eval(), (torch.randn(2, 3, 32, 32),), ["x"], tmp_path / "resnet.onnx")
    ids = torch.randint(0, 100, (2, 16))
    b_onnx = _export(Bert().eval(), (ids, torch.ones(2, 16, dtype=torch.int64)), ["input_ids", "attention_mask"],
                     tmp_path / "bert.onnx")
    r_calib = npz_dir(tmp_path, "rc", {"x": lambda i: np.random.default_rng(i).standard_normal((16, 3, 32, 32))
                                       .astype(np.float32)})
    b_calib = npz_dir(tmp_path, "bc", {"input_ids": lambda i: np.random.default_rng(i).integers(0, 100, (16, 16)),
                                       "attention_mask": lambda i: np.ones((16, 16), np.int64)})
    for name, path, calib, extra in (("resnet", r_onnx, r_calib, {}),
                                     ("bert", b_onnx, b_calib, {"inputs": ["input_ids:1x16:int64",
                                                                           "attention_mask:1x16:int64"]})):
        options = {"int8": True, "calib": calib} if precision == "int8" else {"fp16": True}
        report = api.compile(path, out=tmp_path / f"out-{name}", target="tensorrt", tensorrt={"batch": "1/2/16"},
                             **options, **extra, **FAST)
        assert_tensorrt_run(report, precision, tmp_path / f"out-{name}")


def test_allow_float_is_refused_for_an_engine_before_anything_runs(doubles, cnn_pt2, tmp_path):
    from optcli import api
    from optcli.errors import UsageError

    calib = npz_dir(tmp_path, "calib", {"x": lambda i: np.random.default_rng(i).standard_normal((8, 3, 16, 16))
                                        .astype(np.float32)})
    with pytest.raises(UsageError, match="--allow-float applies to the CPU build"):
        api.compile(cnn_pt2, out=tmp_path / "out", target="tensorrt", int8=True, calib=calib, allow_float=True,
                    **FAST)
    assert doubles.builds == 0 and not (tmp_path / "out" / "report.json").exists()
