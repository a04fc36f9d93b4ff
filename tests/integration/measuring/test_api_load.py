"""optcli.load: the issue's API example, every artifact kind, input checking, async and shutdown."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import optcli
from optcli.errors import UsageError


def test_issue_api_example(compiled_cnn: Path, cnn_pt2: Path, calib_dir: Path, tmp_path: Path) -> None:
    import torch

    m = optcli.load(compiled_cnn)                                  # the report.json of a compile
    x = np.random.default_rng(0).standard_normal((2, 1, 8, 8)).astype(np.float32)
    out = m.predict({"x": x})
    name = m.outputs[0].name
    assert list(out) == [name] and out[name].shape == (2, 3)
    # The compiled artifact computes what the PyTorch model does.
    eager = torch.export.load(str(cnn_pt2)).module()(torch.from_numpy(x)).detach().numpy()
    np.testing.assert_allclose(out[name], eager, rtol=1e-4, atol=1e-5)
    batches = [np.random.default_rng(i).standard_normal((1 + i, 1, 8, 8)).astype(np.float32) for i in range(4)]
    futures = [m.predict_async(batch) for batch in batches]
    outs = [f.result() for f in futures]
    for batch, got in zip(batches, outs):
        np.testing.assert_array_equal(got[name], m.predict([batch])[name])
    np.testing.assert_array_equal(m.predict({"x": torch.from_numpy(x)})[name], out[name])   # torch CPU tensors
    m.close()
    report = optcli.compile(cnn_pt2, out=tmp_path / "int8", int8=True, calib=calib_dir,
                            runs=3, warmup_seconds=0.0, min_seconds=0.0, max_seconds=0.2)
    assert report.status == "ok" and report.final["precision"] == "int8"


def test_load_every_artifact_kind_gives_the_same_outputs(compiled_cnn: Path, cnn_pt2: Path) -> None:
    x = np.random.default_rng(3).standard_normal((3, 1, 8, 8)).astype(np.float32)
    results = {}
    for what, opts in [(compiled_cnn, {}), (compiled_cnn.parent, {}), (cnn_pt2, {}),
                       (cnn_pt2.with_suffix(".ts"), {"inputs": ["x:batchx1x8x8"]})]:
        with optcli.load(what, **opts) as m:
            results[str(what)] = next(iter(m.predict({"x": x}).values()))
    first = next(iter(results.values()))
    for got in results.values():
        np.testing.assert_allclose(got, first, rtol=1e-4, atol=1e-5)


def test_final_artifact_of_report_is_onnx_with_backend(compiled_cnn: Path) -> None:
    with optcli.load(compiled_cnn) as m:
        assert m.backend == "onnxruntime-cpu"
        final = json.loads(compiled_cnn.read_text())["final"]["artifact"]
        assert m.path == compiled_cnn.parent / final


def test_torchscript_needs_input_shapes(cnn_pt2: Path) -> None:
    with pytest.raises(UsageError, match="does not record input shapes"):
        optcli.load(cnn_pt2.with_suffix(".ts"))


@pytest.mark.parametrize("feeds, message, expected", [
    ({"y": np.zeros((1, 16), np.float32)}, "unknown input 'y'", "x:batchx16:float32"),
    ({"x": np.zeros((1, 15), np.float32)}, "has shape 1x15, the model takes batchx16", "x:batchx16:float32"),
    ({"x": np.zeros((1, 16), np.int64)}, "has dtype int64 but the model takes float32", "x:batchx16:float32"),
    ({"x": np.zeros((16,), np.float32)}, "has shape 16, the model takes batchx16", "x:batchx16:float32"),
    ([np.zeros((1, 16), np.float32)] * 2, "got 2 inputs, the model takes 1", "x:batchx16:float32"),
])
def test_wrong_inputs_name_the_expected_ones(mlp_onnx: Path, feeds, message: str, expected: str) -> None:
    with optcli.load(mlp_onnx) as m:
        with pytest.raises(UsageError, match=message) as info:
            m.predict(feeds)
    assert expected in (info.value.hint or "")


def test_contiguous_input_of_the_right_dtype_is_not_copied(mlp_onnx: Path) -> None:
    x = np.ones((4, 16), np.float32)
    with optcli.load(mlp_onnx) as m:
        assert m.normalize({"x": x})["x"] is x
        converted = m.normalize({"x": x.astype(np.float64)})["x"]    # converted only when needed
        assert converted.dtype == np.float32 and not np.shares_memory(converted, x)
        strided = m.normalize({"x": np.ones((4, 32), np.float32)[:, ::2]})["x"]
        assert strided.flags.c_contiguous


def test_unknown_option_names_the_accepted_ones(mlp_onnx: Path) -> None:
    with pytest.raises(UsageError, match="'inputs' does not apply to onnx") as info:
        optcli.load(mlp_onnx, inputs=["x:1x16"])
    assert "optimization" in info.value.hint


def test_report_without_final_artifact_is_refused(tmp_path: Path) -> None:
    (tmp_path / "report.json").write_text(json.dumps({"stages": [], "final": None, "status": "failed"}))
    with pytest.raises(UsageError, match="no final artifact"):
        optcli.load(tmp_path / "report.json")


def test_unknown_suffix_and_missing_file(tmp_path: Path) -> None:
    (tmp_path / "model.bin").write_bytes(b"x")
    with pytest.raises(UsageError, match="cannot tell what runs"):
        optcli.load(tmp_path / "model.bin")
    with pytest.raises(UsageError, match="not found"):
        optcli.load(tmp_path / "nope.onnx")


def test_concurrency_runs_calls_on_separate_sessions_and_close_frees_them(mlp_onnx: Path) -> None:
    m = optcli.load(mlp_onnx, concurrency=3)
    assert m._handles.qsize() == 3                 # one session per request in flight
    assert m.threads == max(1, (os.cpu_count() or 1) // 3)   # the cores are shared out between them
    xs = [np.full((2, 16), i, np.float32) for i in range(12)]
    futures = [m.predict_async({"x": x}) for x in xs]
    expected = [m.predict({"x": x})["y"] for x in xs]
    m.close()                                    # waits for what is queued, then frees every session
    assert all(f.done() for f in futures)
    for f, want in zip(futures, expected):
        np.testing.assert_array_equal(f.result()["y"], want)
    assert m._handles.empty()
    with pytest.raises(UsageError, match="closed"):
        m.predict({"x": xs[0]})
    m.close()                                    # twice is fine


@pytest.mark.parametrize("model_fixture", ["mlp_onnx", "cnn_pt2"])
def test_exit_without_close_does_not_hang(model_fixture: str, request: pytest.FixtureRequest) -> None:
    path = request.getfixturevalue(model_fixture)
    shape = "(2, 16)" if model_fixture == "mlp_onnx" else "(2, 1, 8, 8)"
    script = textwrap.dedent(f"""
        import numpy as np, optcli
        m = optcli.load({str(path)!r}, concurrency=2)
        futures = [m.predict_async(np.ones({shape}, np.float32)) for _ in range(40)]
        futures[0].result()
        print("submitted", len(futures))
        # no close(): the interpreter must still exit once the queued calls are done
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "submitted 40" in proc.stdout


def test_random_int_inputs_stay_inside_the_embedding_table(embedding_onnx: Path) -> None:
    from optcli.benchmark.feeds import FeedSource

    with optcli.load(embedding_onnx) as m:
        source = FeedSource.for_runner(m)
        feeds = source.batch(64)
        assert source.high == {"ids": 7}
        assert feeds["ids"].min() >= 0 and feeds["ids"].max() < 7 and feeds["ids"].max() > 0
        assert (feeds["attention_mask"] == 1).all()
        assert m.predict(feeds)["y"].shape == (64, 3)


def test_torch_tensors_are_checked_like_numpy(cnn_pt2: Path) -> None:
    import torch

    with optcli.load(cnn_pt2) as m:
        x = torch.randn(2, 1, 8, 8)
        assert m.normalize({"x": x})["x"] is x                         # right dtype, on the device: as is
        assert m.normalize({"x": x.double()})["x"].dtype == torch.float32
        with pytest.raises(UsageError, match="has dtype int64 but the model takes float32") as info:
            m.predict({"x": torch.zeros(2, 1, 8, 8, dtype=torch.int64)})
        assert "x:batchx1x8x8:float32" in info.value.hint
