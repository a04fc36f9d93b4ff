"""What optcli serve's checking HTTP proxy (optcli/serve/http_guard.py) costs a request.

    python benchmarks/serve_http_guard.py [MODEL.onnx] [--requests 300] [--rounds 3]

Starts `optcli.serve` on MODEL (default: the digits CNN, 1x32x32 -> 10, exported inline), then
sends sequential batch-1 inference requests three ways, one request each way in turn so that machine
drift hits all alike: through the proxy (the public --http-port), straight to Triton's own
HTTP server (its private port, with the proxy's key), both HTTP/JSON with a new connection per
request (urllib), and over gRPC (tritonclient). Prints the
median latency of each and the proxy's added median, per round and overall.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def digits_onnx(path: Path) -> Path:
    import torch

    from sample_models.digits_cnn import DigitsCNN

    torch.manual_seed(0)
    torch.onnx.export(DigitsCNN().eval(), (torch.randn(2, 1, 32, 32),), str(path), dynamo=False, input_names=["x"],
                      output_names=["logits"], dynamic_axes={"x": {0: "batch"}, "logits": {0: "batch"}})
    return path


def _http(url: str, body: bytes, headers: dict[str, str]) -> float:
    start = time.perf_counter()
    request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json", **headers})
    with urllib.request.urlopen(request, timeout=60) as response:
        response.read()
    return (time.perf_counter() - start) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", nargs="?")
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    import tritonclient.grpc as grpcclient

    import optcli
    from optcli.serve.health import free_port
    from optcli.serve.http_guard import KEY_HEADER

    tmp = Path(tempfile.mkdtemp())
    model = Path(args.model) if args.model else digits_onnx(tmp / "digits_cnn.onnx")
    server = optcli.serve(model, http_port=free_port(), grpc_port=free_port(), metrics_port=free_port())
    try:
        name = server.name
        x = np.random.default_rng(0).standard_normal((1, 1, 32, 32)).astype(np.float32)
        body = json.dumps({"inputs": [{"name": "x", "shape": list(x.shape), "datatype": "FP32",
                                       "data": x.ravel().tolist()}]}).encode()
        proxied = f"{server.base_url}/v2/models/{name}/infer"
        direct = f"http://127.0.0.1:{server.guard.upstream_port}/v2/models/{name}/infer"
        client = grpcclient.InferenceServerClient(server.urls["grpc"])
        inp = grpcclient.InferInput("x", list(x.shape), "FP32")
        inp.set_data_from_numpy(x)

        def grpc_call() -> float:
            start = time.perf_counter()
            client.infer(name, [inp])
            return (time.perf_counter() - start) * 1000

        ways = {"http via proxy": lambda: _http(proxied, body, {}),
                "http direct": lambda: _http(direct, body, {KEY_HEADER: server.guard.key}),
                "grpc": grpc_call}
        for call in ways.values():  # warm-up
            for _ in range(20):
                call()
        samples: dict[str, list[float]] = {k: [] for k in ways}
        for r in range(args.rounds):
            times: dict[str, list[float]] = {k: [] for k in ways}
            for _ in range(args.requests):  # one request each way in turn: drift hits all three alike
                for way, call in ways.items():
                    times[way].append(call())
            row = {k: statistics.median(v) for k, v in times.items()}
            for way in ways:
                samples[way] += times[way]
            print(f"round {r + 1}: " + ", ".join(f"{k} {v:.3f} ms" for k, v in row.items())
                  + f"; proxy adds {row['http via proxy'] - row['http direct']:.3f} ms")
        overall = {k: statistics.median(v) for k, v in samples.items()}
        print("median over all rounds: " + ", ".join(f"{k} {v:.3f} ms" for k, v in overall.items())
              + f"; proxy adds {overall['http via proxy'] - overall['http direct']:.3f} ms per request")
        client.close()
    finally:
        server.stop()


if __name__ == "__main__":
    main()
