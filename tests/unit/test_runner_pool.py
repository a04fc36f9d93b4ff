"""The run's runner pool (optcli/runtime/pool.py): the same model file with the same options is opened
once; a changed file, other options or a pool over its bounds opens (or closes) as before."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest

from compile_testkit import make_matmul
from optcli.runtime.pool import RunnerPool


def _model(path: Path, scale: float = 1.0, width: int = 16) -> Path:
    return make_matmul(path, width=width, scale=scale)


def _y(runner) -> float:
    width = runner.inputs[0].shape[1]
    return float(runner.run_normalized(runner.normalize({"x": np.ones((1, width), np.float32)}))[0][0, 0])


def test_the_same_file_and_options_get_the_same_runner_even_after_a_rename(tmp_path: Path) -> None:
    pool = RunnerPool()
    path = _model(tmp_path / "a.onnx")
    with pool.runner(path, "onnx", optimization="all", threads=1) as first:
        assert _y(first) == 16.0
    moved = tmp_path / "stage" / "model.onnx"
    moved.parent.mkdir()
    shutil.move(path, moved)  # build-cpu moves the chosen candidate into its folder: still the same model
    with pool.runner(moved, "onnx", threads=1, optimization="all") as again:
        assert again is first
    with pool.runner(moved, "onnx", optimization="disabled", threads=1) as other:
        assert other is not first  # another setting is another session
    assert (pool.opened, pool.reused) == (2, 1)
    pool.close()
    assert first._closed and other._closed


def test_a_rewritten_file_is_a_new_model(tmp_path: Path) -> None:
    pool = RunnerPool()
    path = _model(tmp_path / "a.onnx")
    with pool.runner(path, "onnx") as first:
        assert _y(first) == 16.0
    _model(tmp_path / "b.onnx", scale=2.0)
    os.replace(tmp_path / "b.onnx", path)  # a save unlinks and rewrites
    with pool.runner(path, "onnx") as second:
        assert second is not first and _y(second) == 32.0  # never the stale session's outputs
    pool.close()


def test_one_borrower_at_a_time(tmp_path: Path) -> None:
    pool = RunnerPool()
    path = _model(tmp_path / "a.onnx")
    with pool.runner(path, "onnx") as a, pool.runner(path, "onnx") as b:
        assert a is not b
    assert pool.opened == 2
    pool.close()


def test_idle_runners_are_bounded_by_count_and_bytes(tmp_path: Path) -> None:
    paths = [_model(tmp_path / f"m{i}.onnx", scale=float(i)) for i in range(3)]
    pool = RunnerPool(max_idle=2)
    runners = []
    for p in paths:
        with pool.runner(p, "onnx") as r:
            runners.append(r)
    assert runners[0]._closed and not runners[1]._closed and not runners[2]._closed  # the oldest went
    pool.close()
    assert all(r._closed for r in runners)

    small = RunnerPool(max_idle_bytes=paths[0].stat().st_size - 1)  # a model over the bound is not kept
    with small.runner(paths[0], "onnx") as r:
        pass
    assert r._closed
    with small.runner(paths[0], "onnx") as again:
        assert again is not r
    small.close()


def test_each_runner_is_sized_by_its_own_model(tmp_path: Path) -> None:
    """A model opened after an idle one of another key is bounded by its own bytes, not the idle one's."""
    small, big = _model(tmp_path / "small.onnx", width=4), _model(tmp_path / "big.onnx", width=64)
    pool = RunnerPool(max_idle_bytes=small.stat().st_size + 100)  # room for the small model only
    with pool.runner(small, "onnx") as kept:
        pass
    with pool.runner(big, "onnx") as r:
        assert _y(r) == 64.0
    assert r._closed and not kept._closed
    pool.close()


def test_a_runner_the_pool_did_not_open_is_closed_on_release(tmp_path: Path) -> None:
    from optcli.runtime import open_runner

    pool = RunnerPool()
    r = open_runner(_model(tmp_path / "a.onnx"), "onnx")
    pool.release(r)  # e.g. PyTorch eager's runner, released by the same code path
    assert r._closed


def test_a_folder_model_is_never_kept(tmp_path: Path, monkeypatch) -> None:
    """A folder's own inode and mtime do not change when a file inside it is rewritten: not a safe key."""
    folder = tmp_path / "ir"
    folder.mkdir()
    _model(folder / "model.onnx")
    pool = RunnerPool()
    runner = pool.borrow(folder / "model.onnx", "onnx")
    pool.release(runner)
    assert not runner._closed  # a file is kept ...

    class Opened:
        closed = False

        def close(self) -> None:
            self.closed = True

    import optcli.runtime as runtime

    monkeypatch.setattr(runtime, "open_runner", lambda path, fmt, **kw: Opened())  # a folder-backed runner
    opened = pool.borrow(folder, "openvino")
    pool.release(opened)
    assert opened.closed  # ... a folder is not
    pool.close()


def test_an_onnx_graphs_external_weights_count_toward_the_bound(tmp_path: Path, monkeypatch) -> None:
    """A large model's graph file is small and its weights sit beside it: the pool sizes (and keys) the
    model by both, so a multi-GB model is never kept idle on the strength of its graph file's size."""
    from optcli import onnx_model

    monkeypatch.setattr(onnx_model, "EXTERNAL_DATA_THRESHOLD", 100)
    path = tmp_path / "m.onnx"
    assert onnx_model.save_onnx(onnx.load(_model(tmp_path / "src.onnx")), path) == ["m.onnx.data"]
    graph, weights = path.stat().st_size, (tmp_path / "m.onnx.data").stat().st_size
    pool = RunnerPool(max_idle_bytes=graph + weights - 1)  # the graph file alone would fit
    with pool.runner(path, "onnx") as r:
        assert _y(r) == 16.0
    assert r._closed
    roomy = RunnerPool()
    with roomy.runner(path, "onnx") as first:
        pass
    with roomy.runner(path, "onnx") as again:
        assert again is first
    roomy.close()


@pytest.mark.parametrize("backend", ["onnxruntime", "openvino"])
def test_a_compile_opens_the_artifact_it_ships_once(tmp_path: Path, backend: str, monkeypatch) -> None:
    """Every user of the shipped artifact (the INT8 gate, the candidate's check and race, its stage row,
    the final figure) asks the pool for it in the same words (`session_options`), so one session serves
    them all: the quantize stage's gate opened its own before, and a drift in one spelling would too.
    (Fast search: under --search thorough more candidates than the pool keeps idle may be checked before
    the race, and the winner's check session can be closed before its race: the pool's bound, by design.)"""
    if backend == "openvino":
        pytest.importorskip("openvino")
    import optcli.runtime as runtime
    from compile_testkit import make_conv_bn_relu_add, make_conv_calib, read_report, run_main

    model = make_conv_bn_relu_add(tmp_path / "m.onnx")
    calib = make_conv_calib(tmp_path / "calib")
    opened: list[int] = []
    real = runtime.open_runner

    def counting(path, fmt, **options):
        opened.append(os.stat(path).st_ino)
        return real(path, fmt, **options)

    monkeypatch.setattr(runtime, "open_runner", counting)
    code, _, err = run_main("compile", str(model), "--int8", "--calib", str(calib), "--out", str(tmp_path / "o"),
                            "--target", "cpu", "--backend", backend)
    assert code == 0, err
    final = tmp_path / "o" / read_report(tmp_path / "o")["final"]["artifact"]
    assert opened.count(os.stat(final).st_ino) == 1
