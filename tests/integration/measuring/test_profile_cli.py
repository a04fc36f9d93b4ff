"""`optcli profile`: onnxruntime's profiler aggregated per node, --json, --plot and its missing extra."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import optcli
from measuring_models import run_cli
from optcli.errors import EXIT_MISSING_DEPENDENCY, EXIT_USAGE
from optcli.onnx_model import load_onnx


def test_profile_json_maps_kernels_to_onnx_nodes(compiled_cnn: Path) -> None:
    proc = run_cli("profile", str(compiled_cnn), "--runs", "20", "--warmup", "3", "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["kind"] == "optcli-profile" and data["runs"] == 20
    layers = data["layers"]
    assert sum(x["share"] for x in layers) == pytest.approx(1.0, abs=1e-3)
    assert [x["share"] for x in layers] == sorted((x["share"] for x in layers), reverse=True)
    assert all(x["median_ms"] is not None and x["median_ms"] <= x["total_ms"] for x in layers)
    assert all(x["calls"] == 20 for x in layers)              # warm-up runs left out
    graph_nodes = {n.name for n in load_onnx(Path(data["artifact"]["path"]), load_weights=False).graph.node}
    convs = [x for x in layers if x["op_type"] in ("Conv", "FusedConv")]
    assert convs and all(x["nodes"] and set(x["nodes"]) <= graph_nodes for x in convs)
    assert {r["op_type"] for r in data["by_op_type"]} >= {"Gemm", "MaxPool"}


def test_profile_without_optimizations_is_one_kernel_per_node(mlp_onnx: Path) -> None:
    result = optcli.profile(mlp_onnx, runs=10, warmup=2, optimization="disabled")
    assert sorted(x.name for x in result.layers) == ["act1", "bias1", "fc1", "fc2"]
    assert all(x.nodes == [x.name] and x.calls == 10 for x in result.layers)
    assert {x.name: x.op_type for x in result.layers}["fc1"] == "MatMul"
    assert result.run_ms is not None and result.run_ms >= result.kernel_ms_per_run * 0.5


def test_profile_table_and_plot(mlp_onnx: Path, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    png = tmp_path / "top.png"
    proc = run_cli("profile", str(mlp_onnx), "--runs", "5", "--top", "2", "--plot", str(png))
    assert proc.returncode == 0, proc.stderr
    assert "share" in proc.stdout and "cumulative" in proc.stdout and "by op type" in proc.stdout
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_without_matplotlib_names_the_extra(mlp_onnx: Path, tmp_path: Path) -> None:
    code = ("import sys; sys.modules['matplotlib'] = None\n"
            "from optcli.cli.main import main; main()")
    proc = subprocess.run([sys.executable, "-c", code, "profile", str(mlp_onnx), "--plot", str(tmp_path / "x.png")],
                          capture_output=True, text=True, timeout=120, env={**os.environ})
    assert proc.returncode == EXIT_MISSING_DEPENDENCY
    assert "matplotlib is not installed" in proc.stderr and "pip install 'optcli[plot]'" in proc.stderr
    assert not (tmp_path / "x.png").exists()


def test_profile_refuses_a_pytorch_file(cnn_pt2: Path) -> None:
    proc = run_cli("profile", str(cnn_pt2))
    assert proc.returncode == EXIT_USAGE
    assert "per-layer profiles need an artifact of ONNX Runtime (.onnx)" in proc.stderr
    assert "not a PyTorch pt2 file" in proc.stderr and "hint:" in proc.stderr
