"""What a first GPU run must answer (issue 29, part 5), each test skipped with its reason where the
machine cannot answer it:

- a dynamic-sequence BERT with alternating shapes and CUDA graphs on: at every shape change the
  graph replay must equal a plain enqueue and match onnxruntime (the second review's F1);
- INT8 on an FP16 base against FP16 (F6): accuracy, and which is faster;
- the same BERT as a TensorRT-RTX engine, run where an RTX GPU is lent.

`python benchmarks/gpu_first_run.py` runs these with the rest of tests/gpu and writes
docs/benchmarks/gpu.md; measurements reach it through $OPTCLI_GPU_RESULTS (one JSON line each).
Written against TensorRT's Python API and checked against the doubles
(tests/contract/test_gpu_first_run.py); NOT yet run on a GPU.
"""
from __future__ import annotations

import json
import os
import statistics
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tiny_bert import HIDDEN, INPUTS, save_tiny_bert, tokens

pytestmark = pytest.mark.gpu

# Seen shapes come back, so every graph is replayed after other shapes ran: (batch, sequence).
SHAPES = [(2, 16), (4, 128), (2, 16), (1, 77), (4, 128), (8, 5), (2, 16), (1, 1), (8, 128), (1, 77), (2, 16)]
PROFILE = ((1, 1), (4, 64), (8, 128))
OUTPUT = "last_hidden_state"


def record(kind: str, **fields: Any) -> None:
    """One measurement for docs/benchmarks/gpu.md (benchmarks/gpu_first_run.py collects them)."""
    path = os.environ.get("OPTCLI_GPU_RESULTS")
    if path:
        with open(path, "a", encoding="utf-8") as out:
            out.write(json.dumps({"kind": kind, **fields}) + "\n")


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


@pytest.fixture(scope="module")
def trt() -> Any:
    from optcli.backends.tensorrt.probe import tensorrt_status

    status = tensorrt_status()
    if not status.usable:
        pytest.skip(f"needs an NVIDIA GPU with TensorRT: {status.summary()}")
    import tensorrt

    return tensorrt


@pytest.fixture(scope="module")
def bert(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny_bert(tmp_path_factory.mktemp("bert") / "tiny_bert.onnx")


def onnxruntime_reference(model: Path) -> Any:
    import onnxruntime as ort

    session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    return lambda feeds: session.run(None, feeds)[0]


def test_bert_dynamic_sequence_cuda_graphs_match_onnxruntime_at_every_shape_change(trt, bert, tmp_path):
    from optcli.backends.tensorrt.builder import Machine, obtain_engine
    from optcli.backends.tensorrt.options import TensorRTConfig
    from optcli.backends.tensorrt.probe import tensorrt_status
    from optcli.backends.tensorrt.profiles import InputProfile
    from optcli.backends.tensorrt.runner import TensorRTRunner

    status = tensorrt_status()
    machine = Machine(str(trt.__version__), status.gpu, status.compute_capability, status.tensorrt_cuda)
    profiles = [InputProfile(name, *PROFILE, (0, 1)) for name in INPUTS]
    got = obtain_engine(trt, bert, profiles, TensorRTConfig(engine_cache_enabled=False,
                                                           timing_cache=tmp_path / "t.cache"), machine)
    engine = tmp_path / "bert.engine"
    engine.write_bytes(got.engine_bytes)
    got.metadata.write(engine.with_name(engine.name + ".json"))
    reference = onnxruntime_reference(bert)
    first: dict[tuple[int, int], np.ndarray] = {}
    worst = 1.0
    with TensorRTRunner(engine) as plain, TensorRTRunner(engine, cuda_graph=True) as graphed:
        for call, (batch, seq) in enumerate(SHAPES):
            feeds = tokens(batch, seq, seed=batch * 1000 + seq)   # the same inputs each time a shape recurs
            where = f"call {call}, shape {batch}x{seq}"
            y = graphed.predict(feeds)[OUTPUT]
            assert y.shape == (batch, seq, HIDDEN), where
            np.testing.assert_allclose(y, plain.predict(feeds)[OUTPUT], rtol=1e-5, atol=1e-5,
                                       err_msg=f"{where}: the graph replay differs from a plain enqueue")
            if (batch, seq) in first:
                np.testing.assert_array_equal(y, first[(batch, seq)], err_msg=f"{where}: a replay changed the result")
            first.setdefault((batch, seq), y)
            ref = reference(feeds)
            worst = min(worst, cosine(y, ref))
            np.testing.assert_allclose(y, ref, rtol=2e-2, atol=2e-2, err_msg=f"{where}: against onnxruntime "
                                       "(FP32; TensorRT may use TF32)")
        assert graphed.settings["cuda_graph"], graphed.settings["cuda_graph_note"]
    record("bert_cuda_graphs", shapes=[f"{b}x{s}" for b, s in SHAPES], cosine_min=round(worst, 6),
           tensorrt=str(trt.__version__), gpu=status.gpu)


def _calibration(root: Path, seq: int) -> Path:
    root.mkdir()
    for part in range(2):
        np.savez(root / f"part-{part}.npz", **tokens(16, seq, seed=100 + part))
    return root


def _compile(model: Path, out: Path, **options: Any) -> tuple[Path, Any]:
    from optcli import api

    report = api.compile(model, out=out, check=False, bench=False, **options)
    assert report.status == "ok", [(s.name, s.status, s.reason) for s in report.stages]
    return out / report.final["artifact"], report


def _gpu_ms(runner: Any, feeds: dict[str, np.ndarray]) -> float:
    return statistics.median(runner.time_gpu(feeds, runs=200, warmup=20))


def test_int8_with_an_fp16_base_against_fp16(trt, bert, tmp_path):
    """`--int8` on a TensorRT target: INT8 where Q/DQ stands, FP16 elsewhere (F6). It must stay close
    to the FP16 engine; which one is faster is what the first run reports."""
    import onnx

    from optcli.backends.tensorrt.runner import TensorRTRunner

    seq = 64
    common = dict(target="tensorrt", inputs=[f"{n}:1x{seq}:int64" for n in INPUTS], tensorrt={"batch": "1/8/8"})
    fp16, _ = _compile(bert, tmp_path / "fp16", fp16=True, **common)
    int8, report = _compile(bert, tmp_path / "int8", int8=True, calib=_calibration(tmp_path / "calib", seq),
                            quantize={"fallback": False}, accuracy={"cosine": 0.9}, **common)
    stage = report.stage("quantize-int8")
    graph_path = tmp_path / "int8" / (stage.artifact["path"] if isinstance(stage.artifact, dict) else stage.artifact)
    graph = onnx.load(str(graph_path), load_external_data=False)
    halves = sum(t.data_type == onnx.TensorProto.FLOAT16 for t in graph.graph.initializer)
    assert halves, "the INT8 graph keeps an FP32 base: --int8 on TensorRT should put FP16 outside Q/DQ (F6)"
    feeds = tokens(8, seq, seed=7)
    ref = onnxruntime_reference(bert)(feeds)
    with TensorRTRunner(fp16) as r16, TensorRTRunner(int8) as r8:
        y16, y8 = r16.predict(feeds)[OUTPUT], r8.predict(feeds)[OUTPUT]
        ms16, ms8 = _gpu_ms(r16, feeds), _gpu_ms(r8, feeds)
    cos16, cos8, cos8_16 = cosine(y16, ref), cosine(y8, ref), cosine(y8, y16)
    record("int8_vs_fp16", batch=8, sequence=seq, fp16_ms=round(ms16, 4), int8_ms=round(ms8, 4),
           speedup=round(ms16 / ms8, 3), cosine_fp16_vs_fp32=round(cos16, 6), cosine_int8_vs_fp32=round(cos8, 6),
           cosine_int8_vs_fp16=round(cos8_16, 6), fp16_initializers=halves)
    assert cos16 > 0.999 and cos8_16 > 0.98, (cos16, cos8_16)


def test_tensorrt_rtx_engine_on_an_rtx_gpu(bert, tmp_path):
    """Where an RTX GPU is lent: `--target tensorrt-rtx` builds, measures and runs the engine."""
    from optcli.environment import gpu_name
    from optcli.errors import OptcliError

    pytest.importorskip("tensorrt_rtx_bindings",
                        reason="TensorRT-RTX is not installed (pip install 'optcli[tensorrt-rtx]')")
    if gpu_name() is None:
        pytest.skip("no NVIDIA GPU here (nvidia-smi finds none)")
    from optcli import api

    try:
        report = api.compile(bert, out=tmp_path / "rtx", target="tensorrt-rtx", check=False,
                             inputs=[f"{n}:1x64:int64" for n in INPUTS], tensorrt={"batch": "1/4/8"})
    except OptcliError as exc:   # this build has no such target yet (issue 29, part 3)
        pytest.skip(f"--target tensorrt-rtx: {exc}")
    assert report.status == "ok", [(s.name, s.status, s.reason) for s in report.stages]
    build = next(s for s in report.stages if s.name.startswith("build"))
    after = (build.latency_ms or {}).get("after")
    if not (isinstance(after, dict) and "p50" in after):
        pytest.skip(f"the engine was built but not run: {json.dumps(after or build.details.get('latency'))}")
    feeds = tokens(4, 64, seed=3)
    with api.load(tmp_path / "rtx" / report.final["artifact"]) as runner:
        y = runner.predict(feeds)[OUTPUT]
    cos = cosine(y, onnxruntime_reference(bert)(feeds))
    record("tensorrt_rtx", gpu=gpu_name(), p50_ms=after["p50"], cosine_vs_fp32=round(cos, 6))
    assert cos > 0.999
