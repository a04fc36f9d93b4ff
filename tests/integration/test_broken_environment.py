"""A dependency whose API moved under optcli (issue 28: protobuf 7 removed FieldDescriptor.label) fails
the run at export with the package, its version and the exception, exit 1: no silent fallback to a
backend without ONNX, no "bad input" exit 2. The fault is injected where protobuf 7 hit: the field walk
every ONNX save goes through reads an attribute the installed protobuf's descriptor really lacks."""
from __future__ import annotations

from pathlib import Path

import pytest

from compile_testkit import read_report, run_main


def _protobuf_7_walk(fd: object) -> bool:
    return fd.label_removed_in_protobuf_7 == 3  # type: ignore[attr-defined]  # the real AttributeError


@pytest.mark.parametrize("int8", [False, True], ids=["fp32", "int8"])
def test_a_broken_dependency_fails_the_export_naming_it(cnn_pt2: Path, tmp_path: Path, int8: bool,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    import google.protobuf

    from optcli import onnx_model

    monkeypatch.setattr(onnx_model, "_is_repeated", _protobuf_7_walk)
    out = tmp_path / "out"
    args = ["compile", str(cnn_pt2), "--out", str(out), "--no-bench", "--target", "cpu"]
    if int8:
        calib = tmp_path / "calib.npy"
        import numpy as np

        np.save(calib, np.random.default_rng(0).standard_normal((8, 3, 16, 16)).astype(np.float32))
        args += ["--int8", "--calib", str(calib)]
    code, _, err = run_main(*args)
    assert code == 1, err
    lines = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1, err
    assert "installed package" in lines[0] and f"protobuf {google.protobuf.__version__}: AttributeError" in lines[0]
    report = read_report(out)
    statuses = {s["name"]: s["status"] for s in report["stages"]}
    assert statuses["export"] == "failed"
    assert statuses.get("build") in ("not-run", None), statuses  # no inductor fallback claiming success
    assert report["error"]["exit_code"] == 1
