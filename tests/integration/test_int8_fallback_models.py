"""The INT8 fallback search on models whose damage sits in known layers (real torch export, real
onnxruntime quantizer): it must find those layers, name them as PyTorch modules, stay within its
budget, never get worse between rounds, and leave the rest of the model INT8."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from compile_testkit import cli_env, load_module
from optcli import api

NETS = textwrap.dedent('''
    import torch

    class WideConvCnn(torch.nn.Module):
        """wide's kernels each have one tap 300x the rest, on an input channel the stem never fires:
        per-channel INT8 keeps that useless tap and rounds the 143 that matter to zero."""

        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.stem = torch.nn.Conv2d(3, 16, 3, padding=1)
            self.wide = torch.nn.Conv2d(16, 16, 3, padding=1)
            self.mid = torch.nn.Conv2d(16, 32, 3, padding=1)
            self.head = torch.nn.Linear(32, 10)
            with torch.no_grad():
                self.stem.bias[0] = -100.0  # relu(stem) channel 0 is always zero
                self.wide.weight[:, 0, 0, 0] = 300.0 * self.wide.weight.abs().max()

        def forward(self, x):
            h = torch.relu(self.stem(x))
            h = torch.relu(self.wide(h))
            h = torch.relu(self.mid(h))
            return self.head(h.mean((2, 3)))

    class Attention(torch.nn.Module):
        def __init__(self, dim, outliers):
            super().__init__()
            # no biases: random ones would drown the signal these tiny random layers carry
            self.q = torch.nn.Linear(dim, dim, bias=False)
            self.k = torch.nn.Linear(dim, dim, bias=False)
            self.v = torch.nn.Linear(dim, dim, bias=False)
            self.out = torch.nn.Linear(dim, dim, bias=outliers)
            if outliers:
                with torch.no_grad():  # two output channels far above the rest, as in LLM activations
                    self.out.weight[:2] *= 1000.0
                    self.out.bias[:2] += 300.0

        def forward(self, x):
            a = torch.softmax(self.q(x) @ self.k(x).transpose(1, 2) / 4.0, dim=-1) @ self.v(x)
            return self.out(a)

    class Block(torch.nn.Module):
        def __init__(self, dim, outliers):
            super().__init__()
            self.attention = Attention(dim, outliers)
            self.ffn = torch.nn.Linear(dim, dim, bias=False)
            if outliers:
                with torch.no_grad():  # ffn ignores the outlier channels, but their range sets its input's scale
                    self.ffn.weight[:, :2] = 0.0

        def forward(self, x):
            return torch.relu(self.ffn(self.attention(x)))

    class TinyEncoder(torch.nn.Module):
        """layer.1.attention.out has outlier channels that layer.1.ffn ignores: its per-tensor input
        quantization, scaled to the outliers, crushes the channels it does use."""

        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.layer = torch.nn.ModuleList([Block(16, i == 1) for i in range(3)])
            self.head = torch.nn.Linear(16, 8, bias=False)

        def forward(self, x):
            for block in self.layer:
                x = block(x)
            return self.head(x.mean(1))

    def cnn():
        return WideConvCnn().eval(), (torch.randn(2, 3, 16, 16),)

    def encoder():
        return TinyEncoder().eval(), (torch.randn(2, 8, 16),)
''')

BUDGET = 60.0
pytestmark = pytest.mark.slow  # each test quantizes and evaluates a model several times (10-30 s)


@pytest.fixture(scope="module")
def nets(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("fallback_nets")
    (d / "nets.py").write_text(NETS)
    return d


def _data(root: Path, shape: tuple[int, ...], n: int = 48) -> Path:
    root.mkdir(parents=True)
    rng = np.random.default_rng(0)
    np.savez(root / "x.npz", x=rng.standard_normal((n, *shape)).astype(np.float32))
    return root


def _check_search(fb: dict, stage_accuracy: dict) -> None:
    cosines = [r["cosine"] for r in fb["rounds"] if not r["passed"]]
    assert cosines == sorted(cosines), "accuracy decreased between rounds"
    passed = [r["passed"] for r in fb["rounds"]]
    assert passed == sorted(passed), "a round lost the tolerance once it was met"
    assert fb["seconds"] <= fb["budget_s"] == BUDGET
    assert fb["passed"] and stage_accuracy["cosine_mean"] >= 0.99
    assert fb["accuracy_before"]["cosine_mean"] < 0.99
    assert fb["float_flops_share"] < 0.5, "most of the model's FLOPs must stay INT8"
    for u in fb["kept_in_float"]:
        assert u["op_type"] in ("Conv", "MatMul", "Gemm", "Add"), u  # compute units, never an activation
        assert 0.0 < u["fp32_time_share"] < 1.0 and 0.0 < u["flops_share"] < 1.0, u
    assert fb["float_fp32_time_share"] == pytest.approx(sum(u["fp32_time_share"] for u in fb["kept_in_float"]))


def test_search_finds_the_wide_conv_by_module_name(nets: Path, tmp_path: Path) -> None:
    calib = _data(tmp_path / "calib", (3, 16, 16))
    r = api.compile(f"{nets / 'nets.py'}:cnn", out=tmp_path / "o", int8=True, calib=calib, check=False, bench=False,
                    fallback_budget=BUDGET, backend="onnxruntime")
    assert r.status == "ok", r.error
    st = r.stage("quantize-int8")
    fb = st.details["fallback"]
    _check_search(fb, st.accuracy)
    assert [u["module"] for u in fb["kept_in_float"]] == ["wide"], fb["kept_in_float"]
    assert fb["kept_in_float"][0]["node"] in fb["excluded_nodes"]


def test_search_finds_the_layer_reading_attention_outliers(nets: Path, tmp_path: Path) -> None:
    calib = _data(tmp_path / "calib", (8, 16))
    r = api.compile(f"{nets / 'nets.py'}:encoder", out=tmp_path / "o", int8=True, calib=calib, check=False,
                    bench=False, fallback_budget=BUDGET, backend="onnxruntime")
    assert r.status == "ok", r.error
    st = r.stage("quantize-int8")
    fb = st.details["fallback"]
    _check_search(fb, st.accuracy)
    assert [u["module"] for u in fb["kept_in_float"]] == ["layer.1.ffn"], fb["kept_in_float"]


def _run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "optcli", *args], capture_output=True, text=True, env=cli_env(),
                          timeout=600)


@pytest.fixture(scope="module")
def cnn_onnx(nets: Path) -> Path:
    """The wide-conv CNN as a user's ONNX (TorchScript exporter: module paths live in node names)."""
    import torch

    mod = load_module("fallback_nets", nets / "nets.py")
    model, args = mod.cnn()
    path = nets / "cnn.onnx"
    torch.onnx.export(model, args, str(path), dynamo=False, input_names=["x"], output_names=["y"],
                      dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}})
    return path


def test_debug_int8_names_the_wide_conv_first(cnn_onnx: Path, tmp_path: Path) -> None:
    calib = _data(tmp_path / "calib", (3, 16, 16))
    proc = _run_cli("debug-int8", str(cnn_onnx), "--calib", str(calib), "--json", "--measure", "2")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    top = report["units"][0]
    assert top["module"] == "wide" and top["node"] == "/wide/Conv", report["units"]
    assert top["cosine_gain_in_float"] > 0.01 > abs(report["units"][1]["cosine_gain_in_float"])
    assert report["int8_accuracy"]["cosine_mean"] < 0.99 and not report["passes"]
    assert {u["module"] for u in report["units"]} == {"stem", "wide", "mid", "head"}
    table = _run_cli("debug-int8", str(cnn_onnx), "--calib", str(calib), "--measure", "1")
    assert table.returncode == 0 and "wide" in table.stdout and "/wide/Conv" in table.stdout
    assert "--exclude 'wide'" in table.stdout, table.stdout


def test_exclude_by_module_glob_and_bad_patterns_on_the_cli(cnn_onnx: Path, tmp_path: Path) -> None:
    calib = _data(tmp_path / "calib", (3, 16, 16))
    out = tmp_path / "o"
    proc = _run_cli("compile", str(cnn_onnx), "--int8", "--calib", str(calib), "--out", str(out), "--no-bench",
                    "--backend", "onnxruntime", "--no-fallback", "--exclude", "w*de", "--json")
    assert proc.returncode == 0, proc.stderr
    stage = next(s for s in json.loads(proc.stdout)["stages"] if s["name"] == "quantize-int8")
    assert stage["details"]["excluded_by_user"] == ["/wide/Conv"]
    assert stage["accuracy"]["cosine_mean"] >= 0.99, "keeping the wide conv in float is the fix"
    bad = _run_cli("compile", str(cnn_onnx), "--int8", "--calib", str(calib), "--out", str(tmp_path / "b"),
                   "--exclude", "decoder.*")
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert "error: --exclude decoder.*" in bad.stderr and "hint:" in bad.stderr and "wide" in bad.stderr
    assert not (tmp_path / "b" / "05-quantize-int8").exists()


def test_a_spent_budget_stops_the_search_and_names_the_closest(nets: Path, tmp_path: Path) -> None:
    calib = _data(tmp_path / "calib", (8, 16))
    r = api.compile(f"{nets / 'nets.py'}:encoder", out=tmp_path / "o", int8=True, calib=calib, check=False,
                    bench=False, fallback_budget=0.0, backend="onnxruntime")
    assert r.status == "failed" and r.exit_code == 3
    fb = r.stage("quantize-int8").details["fallback"]
    assert fb["stopped"] == "budget spent" and fb["evaluations"] == 1 and fb["kept_in_float"] == []
    assert "closest: mean cosine" in r.error["message"] and "budget spent" in r.error["message"], r.error


BERT = textwrap.dedent('''
    import torch
    from transformers import BertConfig, BertModel

    class Encoder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.bert = BertModel(BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2,
                                             num_attention_heads=2, intermediate_size=64,
                                             max_position_embeddings=16), add_pooling_layer=False)

        def forward(self, input_ids):
            return self.bert(input_ids=input_ids).last_hidden_state

    def bert():
        return Encoder().eval(), (torch.randint(1, 100, (2, 8)),)
''')


def test_units_of_a_transformers_bert_carry_its_module_names(tmp_path: Path) -> None:
    """First contact: a transformers BERT (random weights, from its config) through the dynamo
    exporter, simplify and fuse: its quantized MatMul/Gemm units are named as BERT's modules."""
    (tmp_path / "bert_net.py").write_text(BERT)
    calib = tmp_path / "calib"
    calib.mkdir()
    np.savez(calib / "ids.npz", input_ids=np.random.default_rng(0).integers(1, 100, (24, 8)).astype(np.int64))
    r = api.compile(f"{tmp_path / 'bert_net.py'}:bert", out=tmp_path / "o", int8=True, calib=calib, check=False,
                    bench=False, backend="onnxruntime", flavour="qdq")
    fused = next((tmp_path / "o").glob("*-fuse/model.onnx"))
    report = api.debug_int8(fused, calib, flavour="qdq", measure=0)
    weighted = [u for u in report["units"] if u["op_type"] in ("MatMul", "Gemm") and u["flops_share"] > 0.01]
    assert weighted, report["units"]
    names = [u["module"] for u in weighted]
    assert all(n and n.startswith("bert.encoder.layer.") for n in names), names
    for part in ("attention.self.query", "attention.self.key", "attention.self.value", "attention.output.dense",
                 "intermediate.dense", "output.dense"):
        assert any(n.endswith(part) for n in names), (part, names)
    assert r.status in ("ok", "failed")
