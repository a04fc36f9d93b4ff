"""`optcli serve` and `export-triton --backend python` on a real Triton Inference Server: the
tritonserver binary of the `serve` extra (nvidia-pytriton), on loopback, on free ports, each server
stopped by the test that started it. Requests are few (64) and every wait is bounded."""
from __future__ import annotations

import os
import queue
import signal
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from compile_testkit import cli_env, run_optcli
from serve_testkit import STARTUP_S, export_bert_encoder, export_digits_onnx, needs_server, optcli_serve, pid_alive
from serve_testkit import ports as _ports

pytestmark = needs_server
REQUESTS = 64


@pytest.fixture(scope="module")
def digits_onnx(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return export_digits_onnx(tmp_path_factory.mktemp("serve") / "digits_cnn.onnx")


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
        assert pid_alive(pid)
        proc.send_signal(signal.SIGTERM)  # what Ctrl-C / a service manager does: a graceful stop
        assert proc.wait(timeout=60) == 143
        assert "stopping the server" in proc.stderr.read()
    assert not pid_alive(pid), "tritonserver outlived optcli serve"
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)
    sizes = batch_sizes(stats)
    assert sum(size * count for size, count in sizes.items()) >= REQUESTS  # warm-up batches add to it
    assert max(sizes) > 1, f"no batching in Triton's statistics: {sizes}"


def test_serve_batches_an_encoders_requests_of_different_lengths(tmp_path):
    """Batch-1 requests of 8 different lengths, all in flight at once: Triton hands them to optcli's
    model together (allow_ragged_batch), which pads them to the longest and cuts each answer back."""
    import tritonclient.grpc as grpcclient

    import optcli
    from optcli.serve.health import batch_sizes, http_json

    encoder = export_bert_encoder(tmp_path / "encoder.onnx")
    lengths = [5, 17, 9, 31, 3, 12, 24, 7]
    rng = np.random.default_rng(0)
    reqs = [{"input_ids": rng.integers(1, 200, (1, n)).astype(np.int64), "attention_mask": np.ones((1, n), np.int64),
             "token_type_ids": np.zeros((1, n), np.int64)} for n in lengths]
    with optcli.load(encoder) as reference:
        want = [reference.predict(r) for r in reqs]
    with optcli_serve(encoder, "--max-batch-size", "8", "--max-queue-delay-us", "500000") as (ready, _):
        client = grpcclient.InferenceServerClient(ready["urls"]["grpc"])
        done: queue.Queue[tuple[int, Any, Any]] = queue.Queue()
        for i, r in enumerate(reqs):
            inputs = []
            for name, value in r.items():
                inputs.append(grpcclient.InferInput(name, list(value.shape), "INT64"))
                inputs[-1].set_data_from_numpy(value)
            client.async_infer(ready["name"], inputs, callback=lambda result, error, i=i: done.put((i, result, error)),
                               client_timeout=120)
        got: list[Any] = [None] * len(reqs)
        for _ in reqs:
            i, result, error = done.get(timeout=180)
            assert error is None, error
            got[i] = {n: result.as_numpy(n) for n in ("last_hidden_state", "pooled")}
        stats = http_json(ready["urls"]["http"] + "/stats")
        client.close()
    for g, w, n in zip(got, want, lengths):
        assert g["last_hidden_state"].shape == (1, n, 32)
        np.testing.assert_allclose(g["last_hidden_state"], w["last_hidden_state"], rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(g["pooled"], w["pooled"], rtol=1e-4, atol=1e-4)
    assert max(batch_sizes(stats)) > 1, f"requests of different lengths never shared a batch: {batch_sizes(stats)}"


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
