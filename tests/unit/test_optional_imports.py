"""require(..., hide=...): an optional integration a package probes for at import time is not loaded
(onnxsim 0.8 imported torch, 0.9 s, for a PPQ integration it then found missing), on the importing
thread only, and a package that needs what was hidden still imports."""
from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def packages(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """probing (tries `heavy`, and has another thread import it), needing (imports `heavy`), heavy."""
    (tmp_path / "heavy.py").write_text("LOADED = True\n")
    (tmp_path / "probing.py").write_text(textwrap.dedent("""
        import threading
        try:
            import heavy
            HAVE = True
        except ImportError:
            HAVE = False
        OTHER = []
        t = threading.Thread(target=lambda: OTHER.append(__import__("heavy").LOADED))
        t.start()
        t.join()
    """))
    (tmp_path / "needing.py").write_text("import heavy\nVALUE = heavy.LOADED\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    for name in ("heavy", "probing", "needing"):
        sys.modules.pop(name, None)


def test_the_hidden_package_looks_absent_to_the_importing_thread_only(packages: Path) -> None:
    from optcli.optional_imports import require

    meta_path = list(sys.meta_path)
    probing = require("probing", "a test", hide=("heavy",))
    assert probing.HAVE is False  # the probe saw no `heavy`
    assert probing.OTHER == [True]  # another thread imported it meanwhile
    assert sys.meta_path == meta_path  # the finder is gone


def test_a_package_that_needs_the_hidden_one_still_imports(packages: Path) -> None:
    from optcli.optional_imports import require

    assert require("needing", "a test", hide=("heavy",)).VALUE is True
    import heavy  # noqa: F401  (importable afterwards)


def test_onnxsim_imports_and_simplifies_without_loading_torch(tmp_path: Path) -> None:
    pytest.importorskip("onnxsim")
    from compile_testkit import make_matmul

    model = make_matmul(tmp_path / "m.onnx", width=8)
    code = textwrap.dedent(f"""
        import sys
        from optcli.optional_imports import require
        onnxsim = require("onnxsim", "the simplify stage", hide=("torch",))
        import onnx
        simplified, ok = onnxsim.simplify(onnx.load({str(model)!r}), check_n=0)
        print(ok, "torch" in sys.modules)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "False"]


def test_a_file_loads_without_its_package_init(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from optcli.optional_imports import without_package_init

    pkg = tmp_path / "slowpkg"
    (pkg / "tools").mkdir(parents=True)
    (pkg / "__init__.py").write_text("raise RuntimeError('the package init ran')\n")
    (pkg / "tools" / "__init__.py").write_text("raise RuntimeError('the tools init ran')\n")
    (pkg / "tools" / "leaf.py").write_text("import json\nVALUE = json.dumps([1])\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        assert without_package_init("slowpkg.tools.leaf").VALUE == "[1]"
        assert "slowpkg" not in sys.modules and "slowpkg.tools" not in sys.modules
        with pytest.raises(RuntimeError, match="package init ran"):  # no such file: the usual import
            without_package_init("slowpkg.tools.missing")
    finally:
        for name in [m for m in sys.modules if "slowpkg" in m]:
            sys.modules.pop(name)


@pytest.mark.parametrize("backend", ["onnxruntime", "openvino"])
def test_an_onnx_int8_compile_loads_no_torch(tmp_path: Path, backend: str) -> None:
    """The class behind these: an ONNX input compiled for the CPU never needs torch, so nothing may import
    it (onnxsim's init, onnxruntime.tools' init and NNCF did: 1.4 s of the sample CNN's 4.5 s compile).
    The OpenVINO case searches thoroughly, so NNCF builds too."""
    if backend == "openvino":
        pytest.importorskip("openvino")
        pytest.importorskip("nncf")

    from compile_testkit import make_conv_bn_relu_add, make_conv_calib

    model = make_conv_bn_relu_add(tmp_path / "m.onnx")
    calib = make_conv_calib(tmp_path / "calib", rows=8)
    code = textwrap.dedent(f"""
        import sys
        from optcli.cli.main import main
        try:
            main(["compile", {str(model)!r}, "--int8", "--calib", {str(calib)!r}, "--out", {str(tmp_path / "o")!r},
                  "--target", "cpu", "--backend", {backend!r}, "--no-bench", "--search", "thorough"])
        except SystemExit as exc:
            print("exit", exc.code)
        print("torch loaded:", "torch" in sys.modules)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert "torch loaded: False" in out.stdout, out.stdout[-2000:] + out.stderr[-2000:]
    assert (tmp_path / "o" / "report.json").exists()
    import json

    report = json.loads((tmp_path / "o" / "report.json").read_text())
    assert report["status"] == "ok" and {s["name"]: s["status"] for s in report["stages"]}["simplify"] == "ok"
    if backend == "openvino":
        build = next(s for s in report["stages"] if s["name"] == "build")
        nncf = next(c for c in build["details"]["candidates"] if c["name"] == "openvino-int8-nncf")
        assert nncf["status"] in ("passed", "failed"), nncf  # built (and measured or gated) without torch


def test_nncf_that_needs_torch_after_all_gets_it(tmp_path: Path) -> None:
    """Where NNCF does import torch during quantize (a version that needs it for an ov.Model), the call
    is made again with torch visible, not failed."""
    pytest.importorskip("nncf")
    from compile_testkit import make_mlp

    model = make_mlp(tmp_path / "mlp.onnx")
    code = textwrap.dedent(f"""
        import sys
        import numpy as np
        from optcli.optional_imports import require
        from optcli.optional_imports import own_process
        own_process()  # as the command line does
        nncf = require("nncf", "a test", hide=("torch",))
        from optcli.backends.openvino import ir
        assert "torch" not in sys.modules
        from optcli.calibration.dataset import SampleSet

        original = nncf.quantize
        def needs_torch(*args, **kwargs):
            import torch  # unguarded
            return original(*args, **kwargs)
        nncf.quantize = needs_torch
        calib = SampleSet({{"x": np.random.default_rng(2).standard_normal((20, 32)).astype(np.float32)}},
                          None, "t", "npz")
        xml, facts = ir.nncf_int8(__import__("pathlib").Path({str(model)!r}),
                                  __import__("pathlib").Path({str(tmp_path / "q")!r}),
                                  calib, transformer=False, exclude_nodes=[], exclude_ops=[], facts={{}},
                                  precision="int8")
        print("quantized", facts["fake_quantize"] > 0, "torch" in sys.modules)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         cwd=str(Path(__file__).parent))
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split()[-3:] == ["quantized", "True", "True"]


def test_a_program_that_imported_optcli_gets_nncf_with_its_torch_support(tmp_path: Path) -> None:
    """Only optcli's own process hides torch from NNCF: NNCF sets up its torch support once, at import,
    and a program that called optcli's API may quantize a torch model with NNCF afterwards."""
    pytest.importorskip("nncf")
    from compile_testkit import make_mlp

    model = make_mlp(tmp_path / "mlp.onnx")
    code = textwrap.dedent(f"""
        import sys
        from pathlib import Path
        import numpy as np
        from optcli.backends.openvino import ir
        from optcli.calibration.dataset import SampleSet

        calib = SampleSet({{"x": np.random.default_rng(2).standard_normal((20, 32)).astype(np.float32)}},
                          None, "t", "npz")
        ir.nncf_int8(Path({str(model)!r}), Path({str(tmp_path / "q")!r}), calib, transformer=False, exclude_nodes=[],
                     exclude_ops=[], facts={{}}, precision="int8")
        import torch
        from nncf.tensor import Tensor, functions
        print("torch tensors:", float(functions.max(Tensor(torch.ones(2))).data) == 1.0)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         cwd=str(Path(__file__).parent))
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split()[-1] == "True"
