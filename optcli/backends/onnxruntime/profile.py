"""Per-node time with onnxruntime's profiler (SessionOptions.enable_profiling), mapped back to the
ONNX nodes of the artifact.

The trace is Chrome-trace JSON: a `model_run` event (cat "Session") per run, and per kernel an event
with cat "Node", name "<node>_kernel_time" and args.op_name / args.provider. Warm-up runs are in the
trace too (profiling is on from session creation); they are told apart by their `model_run` span and
left out. At the ALL optimization level onnxruntime rewrites convolutions into its NCHWc layout and
names those kernels after the output they produce ("relu_nchwc" computes tensor "relu"), and adds
layout-reorder kernels of its own; both are mapped back here.
"""
from __future__ import annotations

import bisect
import json
import statistics
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypedDict

from optcli.benchmark.feeds import FeedSource, check_batch
from optcli.errors import StageError
from optcli.loaded_model import ResolvedArtifact, open_artifact
from optcli.profiling.result import LayerTime, ProfileResult, finish

KERNEL_SUFFIX = "_kernel_time"
MAX_CHAIN = 4   # nodes one fused kernel may stand for when walking back from its output


class GraphIndex:
    """Node names, producers of each tensor and consumers, to name the nodes behind a kernel."""

    def __init__(self, path: Path) -> None:
        from optcli.onnx_model import load_onnx

        graph = load_onnx(path, load_weights=False).graph
        self.nodes = {n.name: n for n in graph.node if n.name}
        self.producer = {o: n for n in graph.node for o in n.output}

    def origin(self, kernel: str, op_type: str) -> tuple[list[str], str | None]:
        """(ONNX node names, note) for a kernel name as the profiler wrote it."""
        if kernel in self.nodes:
            node = self.nodes[kernel]
            note = None if node.op_type == op_type else f"{node.op_type} fused into {op_type} by onnxruntime"
            return [kernel], note
        if kernel.endswith("_nchwc"):
            chain = self._chain(kernel[: -len("_nchwc")], op_type)
            if chain:
                return chain, "NCHWc layout (onnxruntime ALL level)"
        if kernel.startswith(("ReorderInput", "ReorderOutput")) or op_type in ("ReorderInput", "ReorderOutput"):
            return [], "layout change added by onnxruntime"
        return [], "added by onnxruntime's optimizer"

    def _chain(self, tensor: str, op_type: str) -> list[str]:
        """Walk up from the producer of `tensor` to the first node of the kernel's op type."""
        chain: list[str] = []
        node = self.producer.get(tensor)
        while node is not None and len(chain) < MAX_CHAIN:
            chain.append(node.name)
            if node.op_type == op_type or not node.input:
                return list(reversed(chain))
            node = self.producer.get(node.input[0])
        return [chain[0]] if chain else []


class KernelTime(TypedDict):
    """One kernel in an onnxruntime trace, over the timed runs."""
    op_type: str
    provider: str | None
    total_us: float
    calls: int
    median_us: float     # of its time per run


def parse_trace(events: list[dict[str, Any]], warmup: int) -> tuple[dict[str, KernelTime], int, float | None]:
    """Kernel times per kernel over the runs after the first `warmup`: the sum, and the median of
    its per-run time (a stall from another process lands in one run and barely moves the median).
    Returns ({kernel: its times}, timed runs, mean run µs)."""
    runs = sorted((e for e in events if e.get("cat") == "Session" and e.get("name") == "model_run"),
                  key=lambda e: e["ts"])
    timed = runs[warmup:]
    if not timed:
        return {}, 0, None
    starts = [r["ts"] for r in timed]
    per_kernel: dict[str, KernelTime] = {}
    per_run: dict[str, list[float]] = {}
    for e in events:
        name = e.get("name", "")
        if e.get("cat") != "Node" or not name.endswith(KERNEL_SUFFIX) or e.get("ts", -1) < starts[0]:
            continue
        args = e.get("args", {})
        kernel = name[: -len(KERNEL_SUFFIX)]
        k = per_kernel.setdefault(kernel, KernelTime(op_type=args.get("op_name", "?"), provider=args.get("provider"),
                                                     total_us=0.0, calls=0, median_us=0.0))
        dur = float(e.get("dur", 0))
        k["total_us"] += dur
        k["calls"] += 1
        per_run.setdefault(kernel, [0.0] * len(timed))[bisect.bisect_right(starts, e["ts"]) - 1] += dur
    for kernel, k in per_kernel.items():
        k["median_us"] = float(statistics.median(per_run[kernel]))
    mean_run = sum(float(r.get("dur", 0)) for r in timed) / len(timed)
    return per_kernel, len(timed), mean_run


def profile_onnx(resolved: ResolvedArtifact, *, batch: int = 1, runs: int = 100, warmup: int = 10,
                 optimization: str = "all", threads: int | None = None, device: str | None = None,
                 inputs_dir: Path | None = None, pins: list[str] | None = None,
                 runner_options: Mapping[str, object] | None = None) -> ProfileResult:
    """Run the model `warmup + runs` times with onnxruntime's profiler on; aggregate the timed runs."""
    with tempfile.TemporaryDirectory(prefix="optcli-profile-") as tmp:
        runner = open_artifact(resolved, concurrency=1, optimization=optimization, threads=threads,
                               device=device, profile_prefix=str(Path(tmp) / "ort"), **(runner_options or {}))
        try:
            source = FeedSource.for_runner(runner, inputs_dir, pins)
            check_batch(source.specs, batch)
            feeds = runner.normalize(source.batch(batch))
            for _ in range(warmup + runs):
                runner.run_normalized(feeds)
            files = runner.end_profiling()  # type: ignore[attr-defined]  # an OnnxRuntimeRunner
            backend, settings = runner.backend, dict(runner.settings)
        finally:
            runner.close()
        if not files or not Path(files[0]).is_file():
            raise StageError("onnxruntime wrote no profile", hint="rerun with --debug")
        events = json.loads(Path(files[0]).read_text(encoding="utf-8"))
    per_kernel, timed, mean_run_us = parse_trace(events, warmup)
    warnings = []
    if not per_kernel:
        warnings.append("the trace holds no kernel events (is the model empty?)")
    index = GraphIndex(resolved.path)
    layers = []
    for name, k in per_kernel.items():
        nodes, note = index.origin(name, k["op_type"])
        layers.append(LayerTime(name, k["op_type"], nodes, k["total_us"] / 1000.0, k["calls"],
                                median_ms=k["median_us"] / 1000.0, provider=k["provider"], note=note))
    settings.update({"batch": batch, "warmup": warmup, "inputs": source.description})
    return ProfileResult(artifact=resolved.to_json(), runtime=backend, settings=settings, runs=timed,
                         layers=finish(layers, timed), run_ms=mean_run_us / 1000.0 if mean_run_us else None,
                         warnings=warnings)
