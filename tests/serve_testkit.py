"""Helpers for the tests that start a real Triton Inference Server through `optcli serve` (the
tritonserver binary of the `serve` extra): the digits CNN as ONNX, free ports, a bounded `optcli serve`
subprocess, liveness checks. Every server is stopped by the test that started it."""
from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import pytest

from compile_testkit import REPO, cli_env

STARTUP_S = 180      # model load under a loaded 2-core machine; the fixture kills the server after it

needs_server = [
    pytest.mark.slow,
    pytest.mark.skipif(find_spec("pytriton") is None,
                       reason="the serve extra is not installed (pip install 'nvidia-pytriton==0.7.0' --no-deps, "
                              "or `make dev`): no Triton server binary"),
    pytest.mark.skipif(find_spec("tritonclient") is None, reason="tritonclient is not installed (the test extra)"),
]


def export_digits_onnx(path: Path) -> Path:
    """The digits sample's CNN (sample_models/digits_cnn.py, untrained, seeded) with a dynamic batch."""
    torch = pytest.importorskip("torch")
    from sample_models.digits_cnn import DigitsCNN

    torch.manual_seed(0)
    model = DigitsCNN().eval()
    torch.onnx.export(model, (torch.randn(2, 1, 32, 32),), str(path), dynamo=False, input_names=["x"],
                      output_names=["logits"], dynamic_axes={"x": {0: "batch"}, "logits": {0: "batch"}})
    return path


def export_bert_encoder(path: Path, hidden: int = 32, layers: int = 2) -> Path:
    """A tiny BERT from a transformers config (random weights), TorchScript exporter, dynamic batch and
    sequence axes: last_hidden_state [batch, sequence, hidden] and masked-mean pooled [batch, hidden]."""
    torch = pytest.importorskip("torch")
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    bert = BertModel(BertConfig(vocab_size=200, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=4,
                                intermediate_size=64, attn_implementation="eager"), add_pooling_layer=False).eval()

    class Encoder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.m = bert

        def forward(self, input_ids, attention_mask, token_type_ids):  # type: ignore[no-untyped-def]
            h = self.m(input_ids=input_ids, attention_mask=attention_mask,
                       token_type_ids=token_type_ids).last_hidden_state
            m = attention_mask.unsqueeze(-1).to(h.dtype)
            return h, (h * m).sum(1) / m.sum(1).clamp(min=1e-9)

    names = ["input_ids", "attention_mask", "token_type_ids"]
    axes = {n: {0: "batch", 1: "sequence"} for n in names}
    axes.update({"last_hidden_state": {0: "batch", 1: "sequence"}, "pooled": {0: "batch"}})
    example = tuple(torch.ones(2, 16, dtype=torch.int64) for _ in names)
    with torch.no_grad():
        torch.onnx.export(Encoder().eval(), example, str(path), dynamo=False, opset_version=17, input_names=names,
                          output_names=["last_hidden_state", "pooled"], dynamic_axes=axes)
    return path


def ports(n: int = 3) -> list[int]:
    from optcli.serve.health import free_port

    found: set[int] = set()
    while len(found) < n:
        found.add(free_port())
    return sorted(found)


def read_line(stream: Any, timeout: float) -> str:
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: lines.put(stream.readline()), daemon=True).start()
    try:
        return lines.get(timeout=timeout)
    except queue.Empty:
        return ""


def serve_command(artifact: Path, *flags: str) -> list[str]:
    http, grpc, metrics = ports()
    return [sys.executable, "-m", "optcli", "serve", str(artifact), "--http-port", str(http), "--grpc-port",
            str(grpc), "--metrics-port", str(metrics), "--startup-timeout", str(STARTUP_S), "--json", *flags]


@contextmanager
def optcli_serve(artifact: Path, *flags: str, tmpdir: Path | None = None,
                 ) -> Iterator[tuple[dict[str, Any], subprocess.Popen[str]]]:
    """`optcli serve ARTIFACT --json` in a subprocess; yields (the ready JSON, the process). Always
    stopped: SIGTERM, then a kill (the server follows optcli: it is started with PR_SET_PDEATHSIG).
    `tmpdir`: the TMPDIR it runs with (where its private folder goes, and where it sweeps)."""
    env = cli_env(**({"TMPDIR": str(tmpdir)} if tmpdir else {}))
    proc = subprocess.Popen(serve_command(artifact, *flags), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env, cwd=REPO)
    try:
        line = read_line(proc.stdout, STARTUP_S + 30)
        if not line:
            proc.kill()
            pytest.fail(f"optcli serve did not become ready: {proc.communicate(timeout=30)[1][-3000:]}")
        yield json.loads(line), proc
    finally:
        stop(proc)


def stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)
    for stream in (proc.stdout, proc.stderr):
        if stream is not None:
            stream.close()


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        return not Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z"
    except OSError:
        return False
