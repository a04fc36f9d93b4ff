"""Per-layer time of a TensorRT engine with TensorRT's own layer profiler (trt.IProfiler).

The engine runs through optcli's TensorRT runner (its buffers, stream and shape handling); a
profiler set on the runner's execution context receives `report_layer_time(layer, ms)` once per
layer for each enqueue (TensorRT 10 Python API docs: IProfiler, IExecutionContext.profiler).
Layer types come from the engine inspector. An engine built with detailed profiling verbosity names
each fused layer after the ONNX nodes it came from, joined by " + " ("/conv1/Conv + /relu/Relu");
with none they are bare indices.

Written against the documentation and NOT run on a GPU: this project's machines have none.
"""
from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

from optcli.benchmark.feeds import FeedSource, check_batch
from optcli.loaded_model import ResolvedArtifact, open_artifact
from optcli.profiling.result import LayerTime, ProfileResult, finish


def _layer_types(trt: Any, engine: Any) -> dict[str, str]:
    """{layer name: layer type} from the engine inspector (pyCore.cpp ICudaEngine.create_engine_inspector,
    IEngineInspector.get_layer_information(layer_index, format)). Only an engine built with
    ProfilingVerbosity.DETAILED (optcli sets it) gives an object with "LayerType"; LAYER_NAMES_ONLY
    gives the bare name as a JSON string, NONE nothing."""
    types: dict[str, str] = {}
    try:
        inspector = engine.create_engine_inspector()
        for i in range(engine.num_layers):
            text = inspector.get_layer_information(i, trt.LayerInformationFormat.JSON)
            info = json.loads(text) if text else None
            if isinstance(info, dict) and "Name" in info:
                types[info["Name"]] = str(info.get("LayerType", "?"))
    except Exception:  # the inspector is best effort: it only names the op types
        return {}
    return types


def _verbosity_warning(trt: Any, engine: Any) -> str | None:
    """Why layer types will be missing, if they will (ICudaEngine.profiling_verbosity)."""
    verbosity = engine.profiling_verbosity
    if verbosity == trt.ProfilingVerbosity.DETAILED:
        return None
    return (f"the engine was built with profiling verbosity {getattr(verbosity, 'name', verbosity)}, so layer "
            "types are unknown: rebuild it with optcli (which builds with DETAILED)")


def _layer_times_profiler(trt: Any) -> Any:
    class LayerTimes(trt.IProfiler):
        """Collects per-layer milliseconds for the runs after warm-up."""

        def __init__(self) -> None:
            trt.IProfiler.__init__(self)
            self.recording = False
            self.times: dict[str, list[float]] = {}

        def report_layer_time(self, layer_name: str, ms: float) -> None:
            if self.recording:
                self.times.setdefault(layer_name, []).append(ms)

    return LayerTimes()


def profile_engine(resolved: ResolvedArtifact, *, batch: int = 1, runs: int = 100, warmup: int = 10,
                   inputs_dir: Path | None = None, pins: list[str] | None = None) -> ProfileResult:
    """Run the engine `warmup + runs` times with a layer profiler; aggregate the timed runs."""
    # No CUDA graph: a replayed graph reports no layers, and TensorRT cannot capture an enqueue that
    # has a profiler attached (its enqueue synchronizes to emit the layer times).
    # detailed_nvtx: the contexts keep the engine's DETAILED NVTX ranges for an Nsight trace taken
    # around `optcli profile`; every other runner lowers them (they slow enqueueV3).
    runner: Any = open_artifact(resolved, concurrency=1, cuda_graph=False, detailed_nvtx=True)  # a TensorRTRunner
    try:
        trt = runner.trt
        source = FeedSource.for_runner(runner, inputs_dir, pins)
        check_batch(source.specs, batch)
        feeds = runner.normalize(source.batch(batch))
        profiler = _layer_times_profiler(trt)
        runner.attach_profiler(profiler)
        for i in range(warmup + runs):
            profiler.recording = i >= warmup
            runner.run_normalized(feeds)  # returns after the stream synchronized: layer times are in
        types = _layer_types(trt, runner.engine)
        verbosity_note = _verbosity_warning(trt, runner.engine)
        settings = {**runner.settings, "batch": batch, "warmup": warmup, "inputs": source.description}
    finally:
        runner.close()
    layers = []
    for name, t in profiler.times.items():
        note = "reformat added by TensorRT" if name.startswith("Reformatting") else None
        nodes = [] if note or name.isdigit() else [p.strip() for p in name.split(" + ")]
        layers.append(LayerTime(name, types.get(name, "?"), nodes, sum(t), len(t), median_ms=statistics.median(t),
                                provider="tensorrt", note=note))
    warnings = [verbosity_note] if verbosity_note else []
    if layers and all(x.name.isdigit() for x in layers):
        warnings.append("layer names are indices: rebuild the engine with detailed profiling verbosity "
                        "to see the ONNX node names")
    return ProfileResult(artifact=resolved.to_json(), runtime="tensorrt", settings=settings, runs=runs,
                         layers=finish(layers, runs), warnings=warnings)
