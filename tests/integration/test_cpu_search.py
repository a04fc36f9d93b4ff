"""build-cpu's candidate search through the real pipeline: `--search fast` on the digits sample's CNN
(INT8 within tolerance, per-candidate seconds recorded and shown), and `--time-budget` degrading to the
best candidate so far and saying so."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from cpu_fixtures import QUICK, mlp_onnx
from optcli import api
from optcli.backends.registry import is_installed as installed
from optcli.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
needs_openvino = pytest.mark.skipif(not installed("openvino"), reason="needs the openvino extra")


@pytest.fixture(scope="module")
def digits_pt2(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The digits sample's architecture (untrained: training takes minutes) as a .pt2."""
    torch = pytest.importorskip("torch")
    sys.path.insert(0, str(ROOT))
    try:
        from sample_models.digits_cnn import DigitsCNN
    finally:
        sys.path.remove(str(ROOT))
    from compile_testkit import export_pt2

    torch.manual_seed(0)
    x = torch.randn(2, 1, 32, 32)
    return export_pt2(torch, DigitsCNN().eval(), (x,), None, ["x"], tmp_path_factory.mktemp("digits") / "digits.pt2")


@needs_openvino
@pytest.mark.slow
def test_fast_search_on_the_digits_cnn_compiles_int8_within_tolerance_and_times_each_candidate(
        digits_pt2: Path, tmp_path: Path) -> None:
    data = ROOT / "calibration" / "digits_cnn"
    r = api.compile(digits_pt2, out=tmp_path / "o", target="cpu", int8=True, calib=data / "calib",
                    eval=data / "eval", bench=False, search="fast", cpu=dict(QUICK))
    st = r.stage("build")
    assert st.details["search"]["mode"] == "fast"
    cands = {c["name"]: c for c in st.details["candidates"]}
    chosen = cands[st.details["chosen"]]
    assert chosen["status"] == "passed" and chosen["accuracy"]["cosine_mean"] >= 0.99
    assert st.accuracy["cosine_mean"] >= 0.99  # the gate's figure is the chosen one's
    built = [c for c in cands.values() if c["status"] in ("passed", "failed") and "search" in c]
    assert built
    for c in built:  # build, accuracy check and measurement seconds, per candidate
        secs = c["search"]["seconds"]
        assert {"build", "check"} <= set(secs) and all(v >= 0 for v in secs.values())
    assert "measure" in chosen["search"]["seconds"] and chosen["latency_ms"]["runs"] > 0
    for c in cands.values():
        if c["status"] == "skipped" and "search" in c:  # not built: the prediction and its evidence say why
            assert c["reason"].startswith("not built (fast search)") and c["search"]["prediction"]["evidence"]
    assert st.details["search"]["built"] < len(cands)  # a fast search builds fewer than all
    from optcli.cli.render import final_lines

    text = "\n".join(final_lines(r))
    assert f"fast search: {st.details['chosen']} build" in text


@needs_openvino
def test_time_budget_stops_at_the_best_so_far_and_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = mlp_onnx(tmp_path / "mlp.onnx")
    cpu = tmp_path / "optcli.toml"
    cpu.write_text("[cpu]\n" + "".join(f"{k} = {v!r}\n" for k, v in QUICK.items()))
    # A budget already spent when build-cpu starts: the first candidate is still built (something must
    # be handed back), the others are not.
    with pytest.raises(SystemExit) as done:
        main(["compile", str(model), "--target", "cpu", "--no-bench", "--search", "thorough", "--time-budget", "0.001",
              "--config", str(cpu), "-o", str(tmp_path / "o")])
    assert done.value.code == 0
    out = capsys.readouterr().out
    r = api.RunReport.load(tmp_path / "o" / "report.json", "")
    st = r.stage("build")
    assert r.status == "ok"
    search = st.details["search"]
    assert "time budget" in search["degraded"] and "time budget" in st.details["why"]
    statuses = {c["name"]: c["status"] for c in st.details["candidates"]}
    assert list(statuses.values()).count("passed") == 1
    assert any("time budget ran out" in c.get("reason", "") for c in st.details["candidates"])
    assert "time budget" in out and "--time-budget" in out
    assert r.config["time_budget"] == 0.001


@needs_openvino
@pytest.mark.slow
def test_a_thorough_search_after_a_fast_one_reuses_the_candidates_it_built(tmp_path: Path) -> None:
    model = mlp_onnx(tmp_path / "mlp.onnx")
    fast = api.compile(model, out=tmp_path / "o", target="cpu", bench=False, check=False, cpu=dict(QUICK))
    built = {c["name"] for c in fast.stage("build").details["candidates"]
             if c["status"] == "passed" and c["recipe"] != "input"}
    assert built  # an OpenVINO IR was built (no prior rules it out for a small MLP)
    thorough = api.compile(model, out=tmp_path / "o", target="cpu", bench=False, check=False, search="thorough",
                           cpu=dict(QUICK))
    st = thorough.stage("build")
    assert st.status == "ok" and st.details["search"]["mode"] == "thorough"  # the stage ran again...
    cands = {c["name"]: c for c in st.details["candidates"]}
    for name in built:  # ...but did not rebuild what the fast search had built
        assert cands[name]["build"]["cache"] == "hit"
