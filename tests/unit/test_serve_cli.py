"""`optcli serve` and `export-triton --backend python` without starting a server: the repository the
Python backend loads, its config checked against Triton's ModelConfig, the stage's runner options
carried into model.py, the environment the bundled server gets, and one-line errors with exit codes.
(tests/integration/test_serve.py runs the real server.)"""
from __future__ import annotations

import json
import socket
import subprocess
import sys
from importlib.util import find_spec
from pathlib import Path

import numpy as np
import pytest

import optcli
from compile_testkit import blocker_source, cli_env, make_ids_times_mask, run_main
from optcli.artifact import sha256_file
from optcli.errors import UsageError
from triton_fixtures import conv_onnx, parse_config

needs_wheel = pytest.mark.skipif(find_spec("pytriton") is None, reason="the serve extra (nvidia-pytriton) is "
                                 "not installed: pip install 'nvidia-pytriton==0.7.0' --no-deps, or `make dev`")


def _load_model_py(path: Path) -> type:
    """model.py as Triton's Python backend imports it (by file path), returning TritonPythonModel."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("triton_model_under_test", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.TritonPythonModel


def test_python_backend_repository(tmp_path):
    (tmp_path / "run").mkdir()
    source = conv_onnx(tmp_path / "run" / "model.onnx")
    # The stage's record beside the artifact: its runner options must reach the served model.
    (tmp_path / "run" / "stage.json").write_text(json.dumps({
        "artifact": "model.onnx", "sha256": sha256_file(source),
        "meta": {"runner_options": {"disabled_optimizers": ["NchwcTransformer"]}}}))
    export = optcli.export_triton(source, tmp_path / "models", backend="python", max_batch_size=16,
                                  max_queue_delay_us=500, intra_op_threads=1, name="conv")
    cfg = parse_config(export.config_text)
    assert cfg.backend == "python" and not cfg.platform and cfg.max_batch_size == 16
    assert cfg.dynamic_batching.max_queue_delay_microseconds == 500
    assert [i.name for i in cfg.input] == ["x"] and list(cfg.input[0].dims) == [3, 8, 8]
    version = tmp_path / "models" / "conv" / "1"
    assert sorted(p.name for p in version.iterdir()) == ["model.onnx", "model.py"]
    assert "optcli's runner" in (tmp_path / "models" / "conv" / "README.md").read_text()

    model_class = _load_model_py(version / "model.py")
    assert model_class.RUNNER_OPTIONS == {"disabled_optimizers": ["NchwcTransformer"], "threads": 1}
    assert model_class.MAX_REQUEST_BYTES == 64 * 2**20
    model = model_class()
    model.initialize({"model_instance_kind": "CPU", "model_instance_device_id": "0"})
    try:
        assert model.runner.settings["intra_op_threads"] == 1
        # Checked before the runner allocates anything: the bytes the shapes claim, without wrap-around.
        assert model.too_large([[16, 3, 8, 8]]) is None
        assert "over this model's bound" in model.too_large([[1, 3, 2**40, 8]])
        assert "negative dim" in model.too_large([[1, 3, 8, -8]])
        x = np.ones((2, 3, 8, 8), np.float32)
        with optcli.load(source) as reference:
            np.testing.assert_allclose(model.runner.predict(x)["logits"], reference.predict(x)["logits"], rtol=1e-6)
    finally:
        model.finalize()


def test_python_backend_refusals(tmp_path):
    source = conv_onnx(tmp_path / "conv.onnx")
    for options, fragment in (({"graph_level": "basic"}, "--graph-level applies to Triton's ONNX Runtime"),
                              ({"ort_tensorrt": True}, "--ort-tensorrt"),
                              ({"backend": "pytorch"}, "unknown Triton backend")):
        with pytest.raises(UsageError, match=fragment):
            optcli.export_triton(source, tmp_path / "models", **{"backend": "python", **options})
    fixed = conv_onnx(tmp_path / "fixed.onnx", batch=1)
    export = optcli.export_triton(fixed, tmp_path / "models", backend="python")
    assert export.max_batch_size == 0 and "dynamic_batching" not in export.config_text


@needs_wheel
def test_bundled_server_environment(tmp_path):
    import sysconfig

    from optcli.serve.bundled_triton import find_bundled_triton

    triton = find_bundled_triton()
    assert triton.binary.is_file() and triton.stub.is_file()
    backends = triton.backend_dir(tmp_path)
    linked = sorted(p.name for p in (backends / "python").iterdir())
    assert linked == ["libtriton_python.so", "triton_python_backend_stub", "triton_python_backend_utils.py"]
    env = triton.environment({"PATH": "/usr/bin"})
    assert env["LD_LIBRARY_PATH"].split(":")[0] == sysconfig.get_config_var("LIBDIR")  # this Python's libpython
    assert env["PATH"].startswith(str(Path(sys.executable).parent))
    assert env["PYTHONPATH"].split(":")[0] == str(Path(optcli.__file__).resolve().parents[1])


@needs_wheel
def test_port_in_use_is_a_usage_error(tmp_path):
    source = conv_onnx(tmp_path / "conv.onnx")
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        code, _, err = run_main("serve", str(source), "--http-port", str(port))
    assert code == 2, err
    assert f"error: port {port} on 127.0.0.1 is in use (--http-port)" in err and "hint: " in err
    code, _, err = run_main("serve", str(source), "--http-port", "9100", "--grpc-port", "9100")
    assert code == 2 and "must differ" in err


def test_serve_refuses_what_it_cannot_serve(tmp_path):
    code, _, err = run_main("serve", str(tmp_path / "missing.onnx"))
    assert code in (2, 4), err  # 4 where the serve extra is missing: that is checked first
    if find_spec("pytriton") is not None:
        assert "not found" in err or "does not exist" in err
    code, _, err = run_main("serve", str(conv_onnx(tmp_path / "conv.onnx")), "--preferred-batch-sizes", "0")
    assert code == 2 and "--preferred-batch-sizes" in err


def test_missing_extra_names_it(tmp_path):
    source = conv_onnx(tmp_path / "conv.onnx")
    code = blocker_source("pytriton") + (
        "import sys\nfrom optcli.cli.main import main\n"
        f"sys.argv = ['optcli', 'serve', {str(source)!r}]\nmain()\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=cli_env(), timeout=120)
    assert done.returncode == 4, done.stderr
    assert "nvidia-pytriton is not installed" in done.stderr and "optcli[serve]" in done.stderr


def test_optcli_serve_stays_callable_after_its_package_is_imported() -> None:
    """Importing optcli.serve.* (as the first serve does) made `optcli.serve` the package: every later
    `optcli.serve(...)` in the process was "'module' object is not callable"."""
    import optcli.serve.health  # noqa: F401 - the import is the test

    with pytest.raises(UsageError, match="unknown serve option 'bogus'"):
        optcli.serve("model.onnx", bogus=1)


@needs_wheel
@pytest.mark.parametrize("padding", ["bucket", "longest", "off"])
def test_serve_padding_flag_reaches_the_served_runner(tmp_path, monkeypatch, padding):
    """`optcli serve --padding MODE`: the repository the server would load (the real one, written by
    start()) opens the runner with that padding plan; only launching tritonserver is left out."""
    from optcli.serve.server import TritonServer

    source = make_ids_times_mask(tmp_path / "encoder.onnx")
    plans: list[object] = []

    def launch(self: TritonServer, *args: object) -> None:
        model = _load_model_py(self.workdir / "models" / "encoder" / "1" / "model.py")()
        model.initialize({"model_instance_kind": "CPU", "model_instance_device_id": "0"})
        plans.append(model.plan)
        model.finalize()

    monkeypatch.setattr(TritonServer, "_launch", launch)
    monkeypatch.setattr(TritonServer, "_wait_ready", lambda self: None)
    monkeypatch.setattr(TritonServer, "watch", lambda self, on_event=None: None)
    code, out, err = run_main("serve", str(source), "--padding", padding, "--json", "--http-port", "0",
                              "--grpc-port", "0", "--metrics-port", "0")
    assert code == 0, err
    assert json.loads(out)["ready"] is True
    if padding == "off":
        assert plans == [None]  # equal shapes only
    else:
        assert [p.grouping for p in plans] == [padding]  # type: ignore[attr-defined]
        assert plans[0].inputs == {"input_ids", "attention_mask"}  # type: ignore[attr-defined]


def test_serve_padding_modes_are_the_batchers(tmp_path) -> None:
    from optcli.batching import PADDING
    from optcli.cli.serve_cmd import PADDING_MODES

    assert PADDING_MODES == PADDING
    code, _, err = run_main("serve", "model.onnx", "--padding", "right")
    assert code == 2 and "--padding" in err
    source = conv_onnx(tmp_path / "conv.onnx")
    with pytest.raises(UsageError, match="applies to the Python backend"):
        optcli.export_triton(source, tmp_path / "models", padding="bucket")  # Triton's own backends pad nothing
    with pytest.raises(UsageError, match="must be one of"):
        optcli.export_triton(source, tmp_path / "models", backend="python", padding="right")
