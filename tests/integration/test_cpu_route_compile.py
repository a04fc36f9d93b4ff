"""The fast search's route end to end (optcli/cpu/route.py): an INT8 compile of a large encoder (17.9 MB)
on a CPU with VNNI leaves simplify, fuse and the quantize stage out and builds OpenVINO's NNCF candidate
from the user's graph; `--search thorough`, and a CPU without VNNI, run every stage. Real NNCF, OpenVINO
and onnxruntime; the CPU's INT8 instruction set is the one thing the test sets."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from compile_testkit import make_masked_encoder
from optcli import api

pytest.importorskip("openvino")
pytest.importorskip("nncf")

ROUTE = ("simplify", "fuse", "quantize-int8")


def _data(folder: Path, n: int, seed: int) -> Path:
    folder.mkdir(parents=True)
    rng = np.random.default_rng(seed)
    lengths = rng.integers(3, 17, n)
    mask = (np.arange(16)[None, :] < lengths[:, None]).astype(np.int64)
    ids = np.where(mask == 1, rng.integers(1, 70000, (n, 16)), 0).astype(np.int64)
    np.savez(folder / "part-000.npz", input_ids=ids, attention_mask=mask)
    return folder


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("route-data")
    return _data(root / "calib", 32, 0), _data(root / "eval", 16, 1)


@pytest.fixture(scope="module")
def encoder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_masked_encoder(tmp_path_factory.mktemp("route-model") / "encoder.onnx", vocab=70000, hidden=64)


def _compile(model: Path, out: Path, data: tuple[Path, Path], **options: object):
    calib, ev = data
    return api.compile(model, out=out, int8=True, calib=calib, eval=ev, bench=False, check=False, **options)


def test_vnni_encoder_compiles_without_onnxruntimes_route(encoder: Path, data: tuple[Path, Path], tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("optcli.quantize.flavour.u8s8_saturates", lambda: False)
    r = _compile(encoder, tmp_path / "o", data)
    for name in ROUTE:
        st = r.stage(name)
        assert st.status == "skipped" and st.reason.startswith("fast search:"), (name, st.status, st.reason)
        assert not list((tmp_path / "o").glob(f"*-{name}")), f"{name} wrote a folder"
    assert r.status == "ok", r.error
    build = r.stage("build")
    assert build.details["route"]["onnxruntime_route"] == "skipped"
    cands = {c["name"]: c for c in build.details["candidates"]}
    assert cands["onnxruntime-int8"]["status"] == "skipped"
    assert "the quantize stage did not run" in cands["onnxruntime-int8"]["reason"]
    built = [c for c in cands.values() if c.get("accuracy")]
    assert built and all(c["backend"] == "openvino" for c in built)
    # NNCF built from the exporter's graph (the unpad stage's where it applied): no second rewrite of it
    assert "unpad_source" not in build.details
    assert r.final["backend"] == "openvino" and r.final["precision"] == "int8"


@pytest.mark.parametrize("how", ["thorough", "plain"])
def test_thorough_or_without_vnni_every_stage_runs(encoder: Path, data: tuple[Path, Path], tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch, how: str) -> None:
    monkeypatch.setattr("optcli.quantize.flavour.u8s8_saturates", lambda: how == "plain")
    r = _compile(encoder, tmp_path / "o", data, **({"search": "thorough"} if how == "thorough" else {}))
    for name in ROUTE:
        st = r.stage(name)
        assert not (st.reason or "").startswith("fast search"), (name, st.reason)
    assert r.stage("quantize-int8").status in ("ok", "failed")
    route = r.stage("build").details.get("route", {})
    assert route.get("onnxruntime_route", "runs") == "runs"
    # Without VNNI no INT8 win over FP32 is assumed: the chosen INT8 is measured against FP32 (issue 31)
    versus = r.stage("build").details.get("int8_vs_fp32")
    assert (versus is not None) is (how == "plain")
    if versus:
        assert versus["int8_p50"] > 0 and versus["fp32_p50"] > 0 and versus["int8_faster"] is ("note" not in versus)


def test_when_every_openvino_candidate_fails_onnxruntimes_int8_is_the_last_resort(
        encoder: Path, data: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The route bets that OpenVINO's candidates build and pass; where none does (a family OpenVINO cannot
    # convert, an NNCF miss), build-cpu runs the quantize stage's own INT8 (with its fallback) itself.
    # OpenVINO's refusal is injected: no graph here converts on onnxruntime but not on OpenVINO.
    monkeypatch.setattr("optcli.quantize.flavour.u8s8_saturates", lambda: False)

    def refuse(*_args: object, **_kw: object) -> None:
        raise RuntimeError("injected: OpenVINO refuses this graph")

    monkeypatch.setattr("optcli.backends.openvino.ir.nncf_int8", refuse)
    monkeypatch.setattr("optcli.backends.openvino.ir.convert_onnx", refuse)
    r = _compile(encoder, tmp_path / "o", data)
    assert r.stage("quantize-int8").reason.startswith("fast search:")
    cands = {c["name"]: c for c in r.stage("build").details["candidates"]}
    tried = [c for c in cands.values() if c["backend"] == "openvino" and c["status"] == "failed"]
    assert tried and all("injected" in c["reason"] for c in tried)
    last = cands["onnxruntime-int8-dynamic (last resort)"]
    assert last["status"] in ("passed", "failed") and last["accuracy"], last
    if last["status"] == "passed":
        assert r.status == "ok" and r.final["backend"] == "onnxruntime" and r.final["precision"] == "int8"
    else:  # missed even with the fallback: the gate fails the run with exit 3, never a traceback
        assert r.status == "failed" and r.exit_code == 3


def test_an_fp32_compile_of_a_large_encoder_leaves_simplify_and_fuse_out(encoder: Path, tmp_path: Path) -> None:
    """At FP32 the two offline stages feed only onnxruntime's candidate, which optimizes at load: the fast
    search leaves them out (BERT-base: 44 -> 22 s, the same OpenVINO FP32 artifact), and both candidates
    are still built and raced, onnxruntime's from the user's graph."""
    r = api.compile(encoder, out=tmp_path / "o", bench=False, check=False)
    assert r.status == "ok", r.error
    for name in ("simplify", "fuse"):
        st = r.stage(name)
        assert st.status == "skipped" and st.reason.startswith("fast search: onnxruntime does this itself"), st.reason
        assert not list((tmp_path / "o").glob(f"*-{name}")), f"{name} wrote a folder"
    build = r.stage("build")
    assert build.details["route"]["onnxruntime_route"] == "skipped"
    cands = {c["name"]: c for c in build.details["candidates"]}
    assert {"onnxruntime-fp32", "openvino-fp32"} <= {n for n, c in cands.items() if c.get("accuracy")}, cands
    assert not any("last resort" in n for n in cands)  # no INT8 owed at FP32
    assert r.final["precision"] == "fp32"
    # onnxruntime's candidate is the reference graph: its accuracy is the reference's, not a second run
    ort, ov = cands["onnxruntime-fp32"], cands["openvino-fp32"]
    assert ort["build"]["accuracy_from"].startswith("the FP32 reference") and ort["accuracy"]["max_abs_err"] == 0.0
    assert "accuracy_from" not in ov["build"] and ov["accuracy"]["cosine_min"] > 0.999


def test_a_pytorch_encoders_export_row_is_timed_as_the_stage_after_it(data: tuple[Path, Path], tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Export's row has no setting of its own (its "before" is PyTorch): on the fast route the next stage
    that runs is build-cpu, timed at "all", so the exported graph is timed once, at "all", and both rows
    show that one figure (it was timed at "disabled" too, and opened twice: 1.2 s of a BERT-base .pt2)."""
    torch = pytest.importorskip("torch")
    from compile_testkit import export_pt2

    monkeypatch.setattr("optcli.quantize.flavour.u8s8_saturates", lambda: False)

    class Encoder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(0)
            self.emb, self.q, self.ln = torch.nn.Embedding(70000, 64), torch.nn.Linear(64, 64), torch.nn.LayerNorm(64)

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
            x = self.emb(input_ids)
            scores = self.q(x) @ x.transpose(1, 2) / 8.0 + (1.0 - attention_mask[:, None, :].float()) * -1e4
            return self.ln(torch.softmax(scores, -1) @ x)

    ids = torch.ones((2, 16), dtype=torch.int64)
    model = export_pt2(torch, Encoder().eval(), (ids, torch.ones_like(ids)), None, ["input_ids", "attention_mask"],
                       tmp_path / "encoder.pt2")
    calib, ev = data
    r = api.compile(model, out=tmp_path / "o", int8=True, calib=calib, eval=ev, runs=5, check=False)
    assert r.status == "ok", r.error
    for name in ROUTE:
        assert r.stage(name).status == "skipped"
    export = r.stage("export")
    nxt = next(s for s in r.stages[1:] if s.status == "ok")  # unpad's plan finds 16 positions within a bucket
    assert nxt.name == "build"
    assert export.latency_ms["after"]["settings"]["graph_optimization"] == "all"
    assert nxt.latency_ms["before"] == export.latency_ms["after"]  # one measurement of the exported graph
