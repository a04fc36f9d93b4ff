"""The measuring commands keep start-up light, and the API names stay functions."""
from __future__ import annotations

import subprocess
import sys

MODULES = ["optcli.api", "optcli.loaded_model", "optcli.benchmark.feeds", "optcli.benchmark.sweep",
           "optcli.benchmark.baseline", "optcli.profiling.result", "optcli.backends.onnxruntime.profile",
           "optcli.backends.tensorrt.profile", "optcli.comparison.variants", "optcli.comparison.interleave",
           "optcli.comparison.result", "optcli.comparison.workflow", "optcli.plots", "optcli.cli.bench_cmd",
           "optcli.cli.profile_cmd", "optcli.cli.compare_cmd", "optcli.backends.torch.runner"]


def test_modules_import_and_help_runs_without_heavy_dependencies() -> None:
    code = f"""
import sys
for name in ("torch", "onnxruntime", "tensorrt", "matplotlib", "onnxsim"):
    sys.modules[name] = None      # importing any of them now fails
import importlib
for m in {MODULES!r}:
    importlib.import_module(m)
from optcli.cli.main import main
for cmd in ("bench", "profile", "compare"):
    try:
        main([cmd, "--help"])
    except SystemExit as exc:
        assert exc.code == 0, (cmd, exc.code)
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    for flag in ("--latency-budget-ms", "--compare-baseline", "--max-regression", "--plot", "--variants",
                 "--tolerance"):
        assert flag in proc.stdout


def test_api_functions_are_not_shadowed_by_subpackages() -> None:
    import importlib

    import optcli

    for m in MODULES:
        importlib.import_module(m)
    for name in ("compile", "load", "bench", "profile", "compare"):
        assert callable(getattr(optcli, name)), name
