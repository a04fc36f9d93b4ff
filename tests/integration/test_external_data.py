"""Models over protobuf's 2 GiB limit keep their weights in external data files: every stage must carry
them (export, simplify, fuse, INT8 calibration and quantization, build-cpu, the stage cache, load).
The class is tested at a small size by lowering the limit; benchmarks/large_model.py runs a real 2.1 GB model."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

import optcli
from optcli import onnx_model
from optcli.artifact import sha256_file
from optcli.errors import UsageError

FACTORY = '''
import torch

def make():
    torch.manual_seed(0)
    layers = []
    for _ in range(4):
        layers += [torch.nn.Linear(128, 128), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers[:-1]).eval(), {"input": torch.randn(2, 128)}
'''


@pytest.fixture()
def small_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    # Each Linear holds 64 KB of weights: over 100 KB every model of the run is "large".
    monkeypatch.setattr(onnx_model, "EXTERNAL_DATA_THRESHOLD", 100_000)


def _data(folder: Path, n: int, seed: int) -> Path:
    folder.mkdir()
    rng = np.random.default_rng(seed)
    for i in range(n):
        np.savez(folder / f"part-{i}.npz", input=rng.standard_normal((16, 128)).astype(np.float32))
    return folder


@pytest.mark.slow
def test_int8_with_external_data_through_every_stage(small_limit: None, tmp_path: Path) -> None:
    (tmp_path / "mlp.py").write_text(FACTORY)
    calib, ev = _data(tmp_path / "calib", 2, 0), _data(tmp_path / "eval", 1, 1)
    out = tmp_path / "out"
    kwargs = dict(out=out, int8=True, calib=calib, eval=ev, bench=False, backend="onnxruntime")
    report = optcli.compile(f"{tmp_path / 'mlp.py'}:make", **kwargs)
    assert report.status == "ok", report.error
    for stage in report.stages:
        if stage.status != "ok" or not str(stage.artifact).endswith(".onnx"):
            continue
        graph = out / stage.artifact
        files = onnx_model.external_data_files(graph)
        assert files, f"{stage.name} wrote its weights inside the graph"
        assert graph.stat().st_size < 100_000, stage.name
    simplify = next(s for s in report.stages if s.name == "simplify")
    assert "onnxruntime" in simplify.details["tool"]  # onnxsim holds one protobuf
    with optcli.load(out) as model:
        x = np.random.default_rng(5).standard_normal((3, 128)).astype(np.float32)
        got = next(iter(model.predict({"input": x}).values()))
    import torch

    namespace: dict = {}
    exec(compile(FACTORY, "mlp.py", "exec"), namespace)  # the same factory, as the test's reference
    eager = namespace["make"]()[0](torch.from_numpy(x)).detach().numpy()
    cos = float((got * eager).sum() / np.linalg.norm(got) / np.linalg.norm(eager))
    assert cos > 0.99
    # Weights are part of the identity: editing the data file invalidates the cached stages.
    again = optcli.compile(f"{tmp_path / 'mlp.py'}:make", **kwargs)
    assert [s.status for s in again.stages] == [s.status.replace("ok", "cached") for s in report.stages]
    export_graph = out / next(s for s in report.stages if s.name == "export").artifact
    data = export_graph.parent / onnx_model.external_data_files(export_graph)[0]
    before = sha256_file(export_graph)
    blob = bytearray(data.read_bytes())
    blob[-1] ^= 1
    data.write_bytes(bytes(blob))
    assert sha256_file(export_graph) != before


def test_external_data_outside_the_folder_is_refused(tmp_path: Path) -> None:
    w = onnx.numpy_helper.from_array(np.ones((4, 4), np.float32), "w")
    onnx.external_data_helper.set_external_data(w, location="../secret.bin")
    w.ClearField("raw_data")
    node = onnx.helper.make_node("MatMul", ["x", "w"], ["y"])
    graph = onnx.helper.make_graph([node], "g", [onnx.helper.make_tensor_value_info("x", 1, [1, 4])],
                                   [onnx.helper.make_tensor_value_info("y", 1, [1, 4])], [w])
    path = tmp_path / "m.onnx"
    onnx.save_model(onnx.helper.make_model(graph), str(path))
    with pytest.raises(UsageError, match="outside the model's folder"):
        onnx_model.external_data_files(path)
    assert sha256_file(path)  # identity still works: it covers the graph alone


@pytest.mark.slow
def test_fp16_with_external_data_and_its_triton_repository(small_limit: None, tmp_path: Path) -> None:
    """FP16 keeps the weights external too, and export-triton carries the data file beside the graph
    (a repository whose model.onnx points at a file it does not hold loads nowhere)."""
    (tmp_path / "mlp.py").write_text(FACTORY)
    out = tmp_path / "out"
    report = optcli.compile(f"{tmp_path / 'mlp.py'}:make", out=out, fp16=True, bench=False, backend="onnxruntime")
    assert report.status == "ok", report.error
    final = out / report.final["artifact"]
    assert onnx_model.external_data_files(final), "the FP16 artifact wrote its weights inside the graph"
    x = np.random.default_rng(5).standard_normal((3, 128)).astype(np.float32)
    with optcli.load(out) as model:
        want = next(iter(model.predict({"input": x}).values()))
    optcli.export_triton(out / "report.json", tmp_path / "repo", name="mlp")
    folder = tmp_path / "repo" / "mlp" / "1" / "model.onnx"  # Triton's layout for a multi-file ONNX
    assert folder.is_dir()
    graph = folder / "model.onnx"
    files = onnx_model.external_data_files(graph)
    assert files and all((folder / f).is_file() for f in files)
    for path in (graph, folder):  # the repository's copy runs on its own; its folder opens as the graph
        with optcli.load(path) as served:
            got = next(iter(served.predict({"input": x}).values()))
        np.testing.assert_allclose(got, want, rtol=0, atol=0)
    with pytest.raises(UsageError, match="is a folder, not an ONNX file") as err:
        onnx_model.load_onnx(folder)
    assert str(graph) in err.value.hint
