"""build-cpu takes the accuracy of a candidate that IS the FP32 reference graph (onnxruntime's FP32
candidate at FP32) from the reference itself, without running it again (optcli/stages/build_cpu.py,
_evaluate). The premise is tested here on the real onnxruntime: the reference, computed as
reference_outputs computes it, and a check of the same graph on the session the run's pool lends for
it (the options build-cpu asks for) give the same numbers, bit for bit, on rows of mixed lengths."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from compile_testkit import make_masked_encoder
from optcli.backends.registry import ONNX
from optcli.calibration.dataset import SampleSet
from optcli.cpu.measure import reference_accuracy, runner_accuracy
from optcli.quantize.evaluate import reference_outputs
from optcli.runtime.pool import RunnerPool, session_options


def _rows(n: int, seed: int) -> SampleSet:
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 17, n)
    mask = (np.arange(16)[None, :] < lengths[:, None]).astype(np.int64)
    ids = np.where(mask == 1, rng.integers(1, 50, (n, 16)), 0).astype(np.int64)
    return SampleSet({"input_ids": ids, "attention_mask": mask}, None, "test rows", "npz")


def test_the_reference_graph_checked_on_its_pooled_session_matches_the_reference_exactly(tmp_path: Path) -> None:
    model = make_masked_encoder(tmp_path / "enc.onnx")
    rows = _rows(40, 0)  # over one length batch: the rows are reordered by length and back
    pool, threads = RunnerPool(), 2
    reference, names = reference_outputs({}, model, "sha", rows, pool, threads)
    runner = pool.borrow(model, ONNX, **session_options(ONNX, threads, "all"))  # what build-cpu's _open asks
    try:
        ran = runner_accuracy(runner, reference, names, rows)
    finally:
        pool.release(runner)
    assert pool.reused >= 1  # the check ran on the reference's own session
    taken = reference_accuracy(reference, names, rows)
    assert ran["max_abs_err"] == 0.0 and taken["max_abs_err"] == 0.0
    assert ran == taken  # the summary build-cpu writes either way


def test_reference_accuracy_of_other_outputs_is_runner_accuracys(tmp_path: Path) -> None:
    # The same summary as runner_accuracy for any outputs: a different graph's numbers show as error.
    model = make_masked_encoder(tmp_path / "enc.onnx")
    rows = _rows(8, 1)
    reference, names = reference_outputs({}, model, "sha", rows, RunnerPool(), 2)
    noisy = [r + 0.01 for r in reference]
    got = reference_accuracy(reference, names, rows, noisy)
    assert got["max_abs_err"] > 0.009 and got["samples"] == 8 and got["data"] == "test rows"
