"""Each node's share of the FP32 model's kernel time (ONNX Runtime's profiler, optimizations off so
kernels are nodes): what keeping a unit in float costs, beside its share of the FLOPs."""
from __future__ import annotations

import json
import tempfile
from pathlib import Path

from optcli.calibration.dataset import SampleSet

RUNS = 12
WARMUP = 2


def node_time_shares(model: Path, samples: SampleSet, runs: int = RUNS) -> dict[str, float]:
    """{node name: share of the summed kernel time} at batch 1 over `runs` profiled runs."""
    from optcli.backends.onnxruntime.profile import parse_trace
    from optcli.backends.onnxruntime.runner import OnnxRuntimeRunner

    with tempfile.TemporaryDirectory(prefix="optcli-share-") as tmp:
        runner = OnnxRuntimeRunner(model, optimization="disabled", profile_prefix=str(Path(tmp) / "ort"))
        try:
            feeds = runner.normalize(samples.take(slice(0, 1)).arrays)
            for _ in range(WARMUP + runs):
                runner.run_normalized(feeds)
            files = runner.end_profiling()
        finally:
            runner.close()
        if not files or not Path(files[0]).is_file():
            return {}
        events = json.loads(Path(files[0]).read_text(encoding="utf-8"))
    per_kernel, _, _ = parse_trace(events, WARMUP)
    total = sum(k["total_us"] for k in per_kernel.values())
    return {name: k["total_us"] / total for name, k in per_kernel.items()} if total else {}
