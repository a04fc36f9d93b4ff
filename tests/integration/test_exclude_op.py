"""Issue 30, item 13: `--exclude-op Matmul` (a typo of MatMul) was silently ignored, while an `--exclude`
that matches nothing exits 2. An op type the graph being quantized lacks is now exit 2 too, naming the
op types it has (and saying when an earlier stage rewrote the ones named)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from compile_testkit import one_error_line, read_report, run_main

EXIT_USAGE = 2


@pytest.mark.parametrize("backend", ["onnxruntime", "openvino"])
def test_an_exclude_op_the_graph_lacks_exits_2(matmul_onnx: Path, tmp_path: Path, backend: str) -> None:
    if backend == "openvino":
        pytest.importorskip("nncf")
    calib = tmp_path / "calib"
    calib.mkdir()
    np.savez(calib / "a.npz", X=np.random.default_rng(0).standard_normal((16, 4)).astype(np.float32))
    args = ["compile", str(matmul_onnx), "--int8", "--calib", str(calib), "--no-bench", "--target", "cpu",
            "--backend", backend, "--tolerance", "cosine=0"]
    code, _, stderr = run_main(*args, "--no-fuse", "--out", str(tmp_path / "typo"), "--exclude-op", "Matmul")
    line = one_error_line(code, stderr, EXIT_USAGE, "--exclude-op Matmul", "did you mean MatMul")
    code, _, stderr = run_main(*args, "--no-fuse", "--out", str(tmp_path / "ok"), "--exclude-op", "MatMul")
    assert code == 0, (line, stderr)
    q = [s for s in read_report(tmp_path / "ok")["stages"] if s["name"] == "quantize-int8" and s["status"] == "ok"]
    assert all(len(s["details"]["excluded_by_user"]) == 1 for s in q)  # the one MatMul stays in float
    # The fuse stage turns MatMul + Add into Gemm: excluding MatMul would keep nothing in float, so it says so.
    code, _, stderr = run_main(*args, "--out", str(tmp_path / "fused"), "--exclude-op", "MatMul")
    one_error_line(code, stderr, EXIT_USAGE, "--exclude-op MatMul", "no MatMul node is left")
