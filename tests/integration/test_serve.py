"""`optcli serve` and `export-triton --backend python` on a real Triton Inference Server: the
tritonserver binary of the `serve` extra (nvidia-pytriton), on loopback, on free ports, each server
stopped by the test that started it. Requests are few (64) and every wait is bounded."""
from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from compile_testkit import REPO, cli_env, run_optcli

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(find_spec("pytriton") is None,
                       reason="the serve extra is not installed (pip install 'nvidia-pytriton==0.7.0' --no-deps, "
                              "or `make dev`): no Triton server binary"),
    pytest.mark.skipif(find_spec("tritonclient") is None, reason="tritonclient is not installed (the test extra)"),
]
STARTUP_S = 180      # model load under a loaded 2-core machine; the fixture kills the server after it
REQUESTS = 64


@pytest.fixture(scope="module")
def digits_onnx(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The digits sample's CNN (sample_models/digits_cnn.py, untrained, seeded) with a dynamic batch."""
    torch = pytest.importorskip("torch")
    from sample_models.digits_cnn import DigitsCNN

    torch.manual_seed(0)
    model = DigitsCNN().eval()
    path = tmp_path_factory.mktemp("serve") / "digits_cnn.onnx"
    torch.onnx.export(model, (torch.randn(2, 1, 32, 32),), str(path), dynamo=False, input_names=["x"],
                      output_names=["logits"], dynamic_axes={"x": {0: "batch"}, "logits": {0: "batch"}})
    return path


def _ports(n: int = 3) -> list[int]:
    from optcli.serve.health import free_port

    ports: set[int] = set()
    while len(ports) < n:
        ports.add(free_port())
    return sorted(ports)


def _read_line(stream: Any, timeout: float) -> str:
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: lines.put(stream.readline()), daemon=True).start()
    try:
        return lines.get(timeout=timeout)
    except queue.Empty:
        return ""


@contextmanager
def optcli_serve(artifact: Path, *flags: str) -> Iterator[tuple[dict[str, Any], subprocess.Popen[str]]]:
    """`optcli serve ARTIFACT --json` in a subprocess; yields (the ready JSON, the process). Always
    stopped: SIGTERM, then a kill (the server follows optcli: it is started with PR_SET_PDEATHSIG)."""
    http, grpc, metrics = _ports()
    cmd = [sys.executable, "-m", "optcli", "serve", str(artifact), "--http-port", str(http), "--grpc-port",
           str(grpc), "--metrics-port", str(metrics), "--startup-timeout", str(STARTUP_S), "--json", *flags]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cli_env(), cwd=REPO)
    try:
        line = _read_line(proc.stdout, STARTUP_S + 30)
        if not line:
            proc.kill()
            pytest.fail(f"optcli serve did not become ready: {proc.communicate(timeout=30)[1][-3000:]}")
        yield json.loads(line), proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=30)
        for stream in (proc.stdout, proc.stderr):
            stream.close()


def _infer_concurrently(url: str, name: str, xs: list[np.ndarray]) -> list[np.ndarray]:
    """All requests in flight at once through one gRPC client (async_infer), each batch 1."""
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(url)
    done: queue.Queue[tuple[int, Any, Any]] = queue.Queue()
    for i, x in enumerate(xs):
        inp = grpcclient.InferInput("x", list(x.shape), "FP32")
        inp.set_data_from_numpy(x)
        client.async_infer(name, [inp], callback=lambda result, error, i=i: done.put((i, result, error)),
                           client_timeout=120)
    outs: list[Any] = [None] * len(xs)
    for _ in xs:
        i, result, error = done.get(timeout=180)
        assert error is None, error
        outs[i] = result.as_numpy("logits")
    client.close()
    return outs


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return not Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z"


def test_serve_answers_concurrent_requests_in_batches(digits_onnx):
    import optcli
    from optcli.serve.health import batch_sizes, http_json, http_status

    rng = np.random.default_rng(0)
    xs = [rng.standard_normal((1, 1, 32, 32)).astype(np.float32) for _ in range(REQUESTS)]
    with optcli.load(digits_onnx) as reference:
        want = [reference.predict(x)["logits"] for x in xs]
    with optcli_serve(digits_onnx, "--max-batch-size", "16", "--max-queue-delay-us", "20000") as (ready, proc):
        assert ready["name"] == "digits_cnn" and ready["max_batch_size"] == 16
        urls = ready["urls"]
        assert http_status(urls["health"]) == 200
        assert http_status(urls["http"] + "/ready") == 200
        got = _infer_concurrently(urls["grpc"], ready["name"], xs)
        stats = http_json(urls["http"] + "/stats")
        with urllib.request.urlopen(urls["metrics"], timeout=10) as metrics:
            assert "nv_inference_request_success" in metrics.read().decode()
        pid = ready["pid"]
        assert _pid_alive(pid)
        proc.send_signal(signal.SIGTERM)  # what Ctrl-C / a service manager does: a graceful stop
        assert proc.wait(timeout=60) == 143
        assert "stopping the server" in proc.stderr.read()
    assert not _pid_alive(pid), "tritonserver outlived optcli serve"
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)
    sizes = batch_sizes(stats)
    assert sum(size * count for size, count in sizes.items()) >= REQUESTS  # warm-up batches add to it
    assert max(sizes) > 1, f"no batching in Triton's statistics: {sizes}"


def test_export_triton_python_repository_loads_in_triton(digits_onnx, tmp_path):
    """A repository written by `optcli export-triton --backend python`, loaded by the bundled tritonserver
    as a user would run it: only the environment the Python backend needs (bundled_triton.py)."""
    import tritonclient.grpc as grpcclient

    import optcli
    from optcli.serve.bundled_triton import find_bundled_triton
    from optcli.serve.health import http_status

    repo = tmp_path / "models"
    done = run_optcli("export-triton", str(digits_onnx), "--repo", str(repo), "--backend", "python",
                      "--max-queue-delay-us", "1000")
    assert done.returncode == 0, done.stderr
    assert (repo / "digits_cnn" / "1" / "model.py").is_file() and (repo / "digits_cnn" / "1" / "model.onnx").is_file()
    assert 'backend: "python"' in (repo / "digits_cnn" / "config.pbtxt").read_text()

    triton = find_bundled_triton()
    http, grpc, metrics = _ports()
    cmd = [str(triton.binary), f"--model-repository={repo}", f"--backend-directory={triton.backend_dir(tmp_path)}",
           "--http-address=127.0.0.1", f"--http-port={http}", "--grpc-address=127.0.0.1", f"--grpc-port={grpc}",
           "--metrics-address=127.0.0.1", f"--metrics-port={metrics}", "--exit-timeout-secs=5"]
    log = (tmp_path / "server.log").open("wb")
    server = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=triton.environment(cli_env()),
                              start_new_session=True)
    try:
        deadline = time.monotonic() + STARTUP_S
        while http_status(f"http://127.0.0.1:{http}/v2/health/ready") != 200:
            assert server.poll() is None, (tmp_path / "server.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "the exported model was not ready in time"
            time.sleep(0.5)
        x = np.random.default_rng(1).standard_normal((3, 1, 32, 32)).astype(np.float32)
        client = grpcclient.InferenceServerClient(f"127.0.0.1:{grpc}")
        inp = grpcclient.InferInput("x", list(x.shape), "FP32")
        inp.set_data_from_numpy(x)
        got = client.infer("digits_cnn", [inp], client_timeout=60).as_numpy("logits")
        with optcli.load(digits_onnx) as reference:
            np.testing.assert_allclose(got, reference.predict(x)["logits"], rtol=1e-4, atol=1e-5)
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
        try:
            os.killpg(server.pid, signal.SIGKILL)  # the server's group: its Python-backend stub too
        except ProcessLookupError:
            pass
        server.wait(timeout=30)
        log.close()


def test_serve_reports_a_model_that_cannot_load(tmp_path):
    """A graph ONNX Runtime cannot run: the model fails to load inside Triton, and optcli says why in
    one line (exit 1), with no server left behind."""
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("NotAnOperator", ["x"], ["y"])], "broken",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(tmp_path / "broken.onnx"))
    done = run_optcli("serve", str(tmp_path / "broken.onnx"), "--http-port", "0", "--grpc-port", "0",
                      "--metrics-port", "0", "--startup-timeout", str(STARTUP_S), timeout=STARTUP_S + 60)
    assert done.returncode == 1, done.stderr
    assert "error: the server exited with code 1 while starting" in done.stderr, done.stderr
    assert "NotAnOperator" in done.stderr and "Traceback" not in done.stderr
    assert "hint: rerun with --verbose" in done.stderr
