"""Issue 30, items 5 and 9: code the user hands optcli must not run away with a compile. A calibration
reader that never stops was read forever (1.3 GB in 60 s): there is now a default cap on samples,
reported, that --calib-samples overrides. A reader (or a model factory) raising SystemExit(0) made a
failed run exit 0: a plugin's SystemExit or KeyboardInterrupt now ends the run as its failure, exit 2,
never with its own code."""
from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
import pytest

from compile_testkit import one_error_line, read_report, run_main, run_optcli
from optcli.calibration.split import DEFAULT_MAX_SAMPLES, MAX_EVAL_SAMPLES

EXIT_USAGE = 2
INT8 = ("--int8", "--no-bench", "--backend", "onnxruntime", "--target", "cpu", "--no-fallback")

READERS = textwrap.dedent('''
    import numpy as np
    import sys

    class Endless:
        """Yields samples for ever: a stream, a generator bug, a hostile plugin."""
        def __init__(self, path, options):
            self.rng = np.random.default_rng(0)
        def __iter__(self):
            while True:
                yield {"X": self.rng.standard_normal(4).astype(np.float32)}

    class ExitsInIter:
        def __init__(self, path, options):
            pass
        def __iter__(self):
            yield {"X": np.ones(4, np.float32)}
            sys.exit(0)

    class ExitsInInit:
        def __init__(self, path, options):
            raise SystemExit(0)
        def __iter__(self):
            return iter(())

    class InterruptsItself:
        def __init__(self, path, options):
            pass
        def __iter__(self):
            raise KeyboardInterrupt
''')


@pytest.fixture()
def plugin(tmp_path: Path) -> Path:
    path = tmp_path / "readers.py"
    path.write_text(READERS)
    (tmp_path / "calib").mkdir()
    (tmp_path / "calib" / "unused.txt").write_text("the plugin makes its own samples")
    return path


# -- item 5: a reader that never stops ---------------------------------------------------------------

def test_an_endless_reader_stops_at_the_default_cap(matmul_onnx: Path, plugin: Path, tmp_path: Path) -> None:
    out = tmp_path / "o"
    p = run_optcli("compile", str(matmul_onnx), "--out", str(out), *INT8, "--calib", str(tmp_path / "calib"),
                   "--calib-reader", f"{plugin}:Endless", "--tolerance", "cosine=0.5", timeout=240)
    assert p.returncode == 0, p.stderr
    q = next(s for s in read_report(out)["stages"] if s["name"] == "quantize-int8")
    capped = q["details"]["calibration"]["capped"]
    assert capped["samples_read"] == DEFAULT_MAX_SAMPLES and capped["by"] == "the default cap"
    assert q["details"]["evaluation"]["samples"] == DEFAULT_MAX_SAMPLES - (DEFAULT_MAX_SAMPLES * 3) // 4
    assert f"calibration: stopped reading {tmp_path / 'calib'} after {DEFAULT_MAX_SAMPLES} samples" in p.stdout


def test_calib_samples_sets_the_cap(matmul_onnx: Path, plugin: Path, tmp_path: Path) -> None:
    out = tmp_path / "o"
    code, stdout, stderr = run_main("compile", str(matmul_onnx), "--out", str(out), *INT8, "--calib",
                                    str(tmp_path / "calib"), "--calib-reader", f"{plugin}:Endless",
                                    "--calib-samples", "16", "--tolerance", "cosine=0.5")
    assert code == 0, stderr
    q = next(s for s in read_report(out)["stages"] if s["name"] == "quantize-int8")
    assert q["details"]["calibration"]["capped"]["by"] == "--calib-samples"
    assert q["details"]["calibration"]["capped"]["samples_read"] == 16 + MAX_EVAL_SAMPLES
    assert q["details"]["calibration"]["samples"] == 16


def test_data_that_ends_first_is_not_reported_capped(matmul_onnx: Path, tmp_path: Path) -> None:
    calib = tmp_path / "calib"
    calib.mkdir()
    np.savez(calib / "a.npz", X=np.random.default_rng(0).standard_normal((40, 4)).astype(np.float32))
    code, _, stderr = run_main("compile", str(matmul_onnx), "--out", str(tmp_path / "o"), *INT8, "--calib",
                               str(calib), "--tolerance", "cosine=0.5")
    assert code == 0, stderr
    q = next(s for s in read_report(tmp_path / "o")["stages"] if s["name"] == "quantize-int8")
    assert "capped" not in q["details"]["calibration"] and q["details"]["calibration"]["samples"] == 30


# -- item 9: a plugin's SystemExit / KeyboardInterrupt -------------------------------------------------

@pytest.mark.parametrize("reader", ["ExitsInIter", "ExitsInInit", "InterruptsItself", "IMPORT"])
def test_a_reader_exiting_is_its_failure_not_the_exit_code(matmul_onnx: Path, plugin: Path, tmp_path: Path,
                                                           reader: str) -> None:
    if reader == "IMPORT":  # a plugin file that exits while it is imported
        plugin.write_text("raise SystemExit(0)\n")
        reader = "Anything"
    out = tmp_path / "o"
    p = run_optcli("compile", str(matmul_onnx), "--out", str(out), *INT8, "--calib", str(tmp_path / "calib"),
                   "--calib-reader", f"{plugin}:{reader}", timeout=240)
    one_error_line(p.returncode, p.stderr, EXIT_USAGE, "reader")
    assert read_report(out)["status"] == "failed"


@pytest.mark.parametrize("body", ["raise SystemExit(0)", "raise KeyboardInterrupt", "import sys; sys.exit()"])
def test_a_model_factory_exiting_is_its_failure(tmp_path: Path, body: str) -> None:
    (tmp_path / "factory.py").write_text(f"def make():\n    {body}\n")
    p = run_optcli("compile", f"{tmp_path / 'factory.py'}:make", "--out", str(tmp_path / "o"), "--no-bench",
                   timeout=240)
    one_error_line(p.returncode, p.stderr, EXIT_USAGE, "factory.py:make")


def test_a_forward_that_exits_is_a_failure_exit_1(tmp_path: Path) -> None:
    (tmp_path / "factory.py").write_text(textwrap.dedent('''
        import sys
        import torch

        class Quits(torch.nn.Module):
            def forward(self, x):
                sys.exit(0)

        def make():
            return Quits(), (torch.ones(2, 4),)
    '''))
    out = tmp_path / "o"
    p = run_optcli("compile", f"{tmp_path / 'factory.py'}:make", "--out", str(out), "--no-bench", timeout=240)
    one_error_line(p.returncode, p.stderr, 1, "SystemExit(0)")
    assert read_report(out)["status"] == "failed"
