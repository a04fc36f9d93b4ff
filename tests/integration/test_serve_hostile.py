"""`optcli serve` against hostile and careless clients, on the real Triton binary (issue 30, items 2
and 15): malformed requests mixed into good ones under load, a server or a model stub that dies anyway
(restarted a bounded number of times), and what a killed serve leaves on disk (removed by the next)."""
from __future__ import annotations

import gzip
import json
import os
import random
import signal
import subprocess
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from compile_testkit import REPO, cli_env
from serve_testkit import (
    STARTUP_S,
    export_digits_onnx,
    needs_server,
    optcli_serve,
    pid_alive,
    read_line,
    serve_command,
    stop,
)

pytestmark = needs_server
GOOD, MALFORMED = 800, 200            # 1,000 requests
SHM = Path("/dev/shm")


@pytest.fixture(scope="module")
def digits_onnx(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return export_digits_onnx(tmp_path_factory.mktemp("hostile") / "digits_cnn.onnx")


@pytest.fixture(scope="module")
def dynamic_onnx(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """y = 2x with x (batch, 4, w): a dynamic dim besides the batch, as a sequence model has."""
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("Mul", ["x", "two"], ["y"])], "dyn",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4, "w"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4, "w"])],
                              [helper.make_tensor("two", TensorProto.FLOAT, [], [2.0])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = tmp_path_factory.mktemp("hostile") / "dyn.onnx"
    onnx.save(model, str(path))
    return path


def _post(url: str, body: bytes, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def _json_infer(shape: list[int], data: Any, datatype: str = "FP32", name: str = "x") -> bytes:
    return json.dumps({"inputs": [{"name": name, "shape": shape, "datatype": datatype, "data": data}]}).encode()


def _malformed_http(url: str) -> list[tuple[str, bytes, dict[str, str]]]:
    """Requests over HTTP that must be refused without harm. The first aborted Triton (exit -6)."""
    zeros = [0.0] * 16
    bomb = gzip.compress(b" " * (8 * 2**20))  # 8 MiB of spaces in 8 KB: over the 4 MiB body bound when inflated
    binary_header = json.dumps({"inputs": [{"name": "x", "shape": [1, 1, 32, 32], "datatype": "FP32",
                                            "parameters": {"binary_data_size": 4096}}]}).encode()
    return [
        ("shape [1,1,32,2^40]", _json_infer([1, 1, 32, 2**40], zeros), {}),
        ("shape [2^40]", _json_infer([2**40], zeros), {}),
        ("negative dim", _json_infer([1, 1, 32, -1], zeros), {}),
        ("a wrapped-around shape", _json_infer([1, 1, 2**62 + 2, 32], zeros), {}),
        ("batch over max_batch_size", _json_infer([17, 1, 32, 32], zeros), {}),
        ("wrong datatype", _json_infer([1, 1, 32, 32], zeros, "FP64"), {}),
        ("unknown input", _json_infer([1, 1, 32, 32], zeros, name="y"), {}),
        ("nested 100k deep", b'{"inputs": [{"name": "x", "shape": [1,1,32,32], "datatype": "FP32", "data": '
         + b"[" * 100_000 + b"]" * 100_000 + b"}]}", {}),
        ("not JSON", b"\xff\xfe{", {}),
        ("header length past the body", binary_header, {"Inference-Header-Content-Length": "999999"}),
        ("gzip bomb", bomb, {"Content-Encoding": "gzip"}),
    ]


def test_malformed_requests_mixed_into_good_ones(digits_onnx: Path, tmp_path: Path) -> None:
    """1,000 requests from 8 threads: 800 good ones (gRPC through tritonclient, and HTTP JSON) with 200
    malformed ones (HTTP and gRPC) mixed in at random. Every good request is answered correctly, every
    malformed one refused, and the same server process lives throughout (no restart)."""
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException

    import optcli

    rng = np.random.default_rng(0)
    xs = rng.standard_normal((64, 1, 1, 32, 32)).astype(np.float32)
    with optcli.load(digits_onnx) as reference:
        want = [reference.predict(x)["logits"] for x in xs]

    started = time.monotonic()
    with optcli_serve(digits_onnx, "--max-batch-size", "16", "--max-request-mib", "1",
                      tmpdir=tmp_path) as (ready, proc):
        pid, infer_url = ready["pid"], ready["urls"]["http"] + "/infer"
        client = grpcclient.InferenceServerClient(ready["urls"]["grpc"])
        http_bad = _malformed_http(infer_url)

        def good(i: int) -> bool:
            k = i % len(xs)
            if i % 8 == 0:  # one in eight over HTTP, through optcli's checking proxy
                status, body = _post(infer_url, _json_infer([1, 1, 32, 32], xs[k].ravel().tolist()))
                assert status == 200, body[:300]
                got = np.array(json.loads(body)["outputs"][0]["data"], np.float32).reshape(want[k].shape)
            else:
                inp = grpcclient.InferInput("x", [1, 1, 32, 32], "FP32")
                inp.set_data_from_numpy(xs[k])
                got = client.infer(ready["name"], [inp], client_timeout=120).as_numpy("logits")
            np.testing.assert_allclose(got, want[k], rtol=1e-4, atol=1e-5)
            return True

        def bad(i: int) -> str:
            kinds = len(http_bad) + 3
            kind = i % kinds
            if kind < len(http_bad):
                what, body, headers = http_bad[kind]
                status, answer = _post(infer_url, body, headers)
                assert 400 <= status < 500, (what, status, answer[:300])
                assert "error" in json.loads(answer), (what, answer[:300])
                return what
            shape, dtype, nbytes = [([1, 1, 32, 2**40], "FP32", 64), ([17, 1, 32, 32], "FP32", 17 * 4096),
                                    ([1, 1, 32, 32], "FP64", 8192)][kind - len(http_bad)]
            inp = grpcclient.InferInput("x", shape, dtype)
            inp._raw_content = bytes(nbytes)  # what a careless client sends: bytes that do not fit the shape
            with pytest.raises(InferenceServerException):
                client.infer(ready["name"], [inp], client_timeout=120)
            return f"gRPC {shape} {dtype}"

        jobs = [("good", i) for i in range(GOOD)] + [("bad", i) for i in range(MALFORMED)]
        random.Random(0).shuffle(jobs)
        with ThreadPoolExecutor(8) as pool:
            results = list(pool.map(lambda job: good(job[1]) if job[0] == "good" else bad(job[1]), jobs))
        answered = sum(r is True for r in results)
        assert answered == GOOD
        assert len({r for r in results if r is not True}) == len(http_bad) + 3  # every kind was sent
        assert pid_alive(pid), "the server died"
        assert proc.poll() is None
        stats = json.loads(urllib.request.urlopen(ready["urls"]["http"] + "/stats", timeout=10).read())
        assert stats["model_stats"][0]["inference_stats"]["success"]["count"] >= GOOD
        client.close()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 143
        assert "restarting" not in proc.stderr.read()
    assert time.monotonic() - started < STARTUP_S + 60
    assert not _processes_mentioning(tmp_path)


def _stderr_until(proc: subprocess.Popen[str], text: str, timeout: float) -> list[str]:
    """stderr lines up to and including the first that contains `text` (or all, at EOF or timeout)."""
    lines: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = read_line(proc.stderr, max(0.1, deadline - time.monotonic()))
        if not line:
            break
        lines.append(line)
        if text in line:
            break
    return lines


def _infer_dyn(url: str, w: int = 8) -> np.ndarray:
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(url)
    x = np.ones((1, 4, w), np.float32)
    inp = grpcclient.InferInput("x", list(x.shape), "FP32")
    inp.set_data_from_numpy(x)
    try:
        return client.infer("dyn", [inp], client_timeout=60).as_numpy("y")
    finally:
        client.close()


def _kill_stub_by_wraparound(url: str) -> None:
    """A gRPC request whose shape times 4 bytes wraps around 2**64 to the 32 bytes sent: Triton's size
    check passes it, and the Python-backend stub dies converting it (pybind11: "array is too big")."""
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException

    client = grpcclient.InferenceServerClient(url)
    inp = grpcclient.InferInput("x", [1, 4, 2**62 + 2], "FP32")
    inp._raw_content = bytes(32)
    with pytest.raises(InferenceServerException):
        client.infer("dyn", [inp], client_timeout=60)
    client.close()


def test_a_server_or_stub_that_dies_is_restarted_a_bounded_number_of_times(dynamic_onnx: Path, tmp_path: Path) -> None:
    """What the checks cannot stop: the server process aborting (SIGABRT), or the model's stub dying on
    a wrapped-around gRPC shape. serve restarts it and says why; past --max-restarts it exits 1."""
    from tritonclient.utils import InferenceServerException

    with optcli_serve(dynamic_onnx, "--input", "x:1x4x8", "--max-restarts", "1", "--max-request-mib", "1",
                      tmpdir=tmp_path) as (ready, proc):
        grpc = ready["urls"]["grpc"]
        np.testing.assert_array_equal(_infer_dyn(grpc), np.full((1, 4, 8), 2.0, np.float32))
        # gRPC reaches Triton directly: a dynamic dim sized to 2 MiB of real data is the model's to refuse.
        with pytest.raises(InferenceServerException, match="over this model's bound of 1048576"):
            _infer_dyn(grpc, w=2**17)
        os.kill(ready["pid"], signal.SIGABRT)  # as the std::bad_alloc abort did
        lines = _stderr_until(proc, "ready again", STARTUP_S)
        text = "".join(lines)
        assert "warning: the server exited with signal 6 (SIGABRT)" in text, text
        assert "restarting it (1 of at most 1 in 10 minutes)" in text and "ready again" in text, text
        np.testing.assert_array_equal(_infer_dyn(grpc), np.full((1, 4, 8), 2.0, np.float32))  # served again

        _kill_stub_by_wraparound(grpc)
        assert proc.wait(timeout=60) == 1
        rest = proc.stderr.read()
        assert "error: the model's Python-backend stub" in rest and "died" in rest, rest
        assert "array is too big" in rest and "not restarting it again" in rest and "--max-restarts 1" in rest, rest
        assert "Traceback" not in text + rest
    assert not list(tmp_path.glob("optcli-serve-*")), "the private folder was left"
    assert not _processes_mentioning(tmp_path), "a server process outlived optcli serve"


def test_what_a_dead_serve_left_is_removed_by_the_next(digits_onnx: Path, tmp_path: Path) -> None:
    """SIGTERM while the model loads leaves no shared memory; a double Ctrl-C leaves no folder; after
    kill -9 the next serve removes the dead one's folder (and regions), names them, and leaves a live
    serve's alone."""
    env = cli_env(TMPDIR=str(tmp_path))
    # 1. SIGTERM while Triton loads the model (its stub's shared memory exists by then).
    proc = subprocess.Popen(serve_command(digits_onnx), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, cwd=REPO)
    try:
        deadline = time.monotonic() + STARTUP_S
        regions: list[Path] = []
        while not regions and time.monotonic() < deadline and proc.poll() is None:
            folders = list(tmp_path.glob("optcli-serve-*"))
            regions = [r for f in folders
                       for r in SHM.glob("optcli_serve_" + f.name.removeprefix("optcli-serve-") + "*")]
            time.sleep(0.05)
        assert regions, "the server made no shared-memory region with this serve's prefix"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 143
    finally:
        stop(proc)
    assert not [r for r in regions if r.exists()], "shared memory left after SIGTERM during startup"
    assert not list(tmp_path.glob("optcli-serve-*"))

    # 2. Double Ctrl-C: the second one lands while the first stop runs; nothing stays.
    with optcli_serve(digits_onnx, tmpdir=tmp_path) as (ready, proc):
        proc.send_signal(signal.SIGINT)
        time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 130
    assert not list(tmp_path.glob("optcli-serve-*")), "double Ctrl-C left the private folder"
    assert not pid_alive(ready["pid"])

    # 3. kill -9: the folder stays (nothing of optcli runs to remove it) until the next serve starts.
    with optcli_serve(digits_onnx, tmpdir=tmp_path) as (ready, proc):
        (dead,) = tmp_path.glob("optcli-serve-*")
        proc.kill()
        proc.wait(timeout=30)
        deadline = time.monotonic() + 60
        while pid_alive(ready["pid"]) and time.monotonic() < deadline:  # the server follows (PDEATHSIG)
            time.sleep(0.2)
        assert dead.is_dir()
    stray = SHM / ("optcli_serve_" + dead.name.removeprefix("optcli-serve-") + "_left")
    stray.write_bytes(b"\0" * 4096)  # as a crashed server's region: the sweep must remove it with the folder
    with optcli_serve(digits_onnx, tmpdir=tmp_path) as (ready, proc):
        text = "".join(_stderr_until(proc, "removed what", 10))
        assert "removed what an earlier optcli serve left (its processes are gone): " in text, text
        assert str(dead) in text and str(stray) in text, text
        (live,) = tmp_path.glob("optcli-serve-*")
        assert live != dead and not dead.exists() and not stray.exists()
        # Another serve started beside this live one must leave its folder and regions alone.
        with optcli_serve(digits_onnx, tmpdir=tmp_path) as (_, other):
            assert live.is_dir() and "removed what" not in "".join(_stderr_until(other, "removed what", 2))
        assert live.is_dir()
    assert not list(tmp_path.glob("optcli-serve-*"))
    assert not _processes_mentioning(tmp_path)


def _processes_mentioning(folder: Path) -> list[int]:
    """Processes whose command line names `folder` (a server and its stubs started under it)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if str(folder).encode() in (entry / "cmdline").read_bytes() and pid_alive(int(entry.name)):
                    found.append(int(entry.name))
            except OSError:
                continue
    return found
