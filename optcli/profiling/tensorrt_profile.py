"""Per-layer time of a TensorRT engine with TensorRT's own layer profiler (trt.IProfiler).

Written against the TensorRT 10 Python API docs (IProfiler.report_layer_time, called once per layer
for each execute_v2; IEngineInspector for layer types) and NOT run on a GPU yet: optcli's CI machine
has none. Buffers live in CUDA memory through torch (a CUDA build of torch is needed).

Layer names: an engine built with ProfilingVerbosity.DETAILED names each fused layer after the ONNX
nodes it came from, joined by " + " ("/conv1/Conv + /relu/Relu"); with NONE they are bare indices.
"""
from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

from optcli.benchmark.artifacts import ResolvedArtifact
from optcli.benchmark.feeds import FeedSource
from optcli.errors import UsageError
from optcli.optional_imports import require
from optcli.profiling.result import LayerTime, ProfileResult, finish
from optcli.tensor_spec import TensorSpec


def _layer_types(trt: Any, engine: Any) -> dict[str, str]:
    """{layer name: layer type} from the engine inspector (empty when the engine was built without
    detailed profiling verbosity)."""
    types: dict[str, str] = {}
    try:
        inspector = engine.create_engine_inspector()
        for i in range(engine.num_layers):
            info = json.loads(inspector.get_layer_information(i, trt.LayerInformationFormat.JSON))
            if isinstance(info, dict) and "Name" in info:
                types[info["Name"]] = str(info.get("LayerType", "?"))
    except Exception:  # the inspector is best effort: only names the op types
        return {}
    return types


def profile_engine(resolved: ResolvedArtifact, *, batch: int = 1, runs: int = 100, warmup: int = 10,
                   inputs_dir: Path | None = None, pins: list[str] | None = None) -> ProfileResult:
    """Run the engine `warmup + runs` times with a layer profiler; aggregate the timed runs."""
    trt = require("tensorrt", "profiling TensorRT engines")
    torch = require("torch", "CUDA buffers for TensorRT profiling")
    if not torch.cuda.is_available():
        raise UsageError("profiling a TensorRT engine needs a CUDA GPU visible to torch",
                         hint="run it on the GPU machine the engine was built for, with a CUDA build of torch")

    class LayerTimes(trt.IProfiler):
        def __init__(self) -> None:
            trt.IProfiler.__init__(self)
            self.recording = False
            self.times: dict[str, list[float]] = {}
            self.order: list[str] = []

        def report_layer_time(self, layer_name: str, ms: float) -> None:
            if self.recording:
                if layer_name not in self.times:
                    self.times[layer_name] = []
                    self.order.append(layer_name)
                self.times[layer_name].append(ms)

    logger = trt.Logger(trt.Logger.ERROR)
    engine = trt.Runtime(logger).deserialize_cuda_engine(resolved.path.read_bytes())
    if engine is None:
        raise UsageError(f"TensorRT cannot load {resolved.path.name}",
                         hint="engines only load with the TensorRT version and GPU they were built with")
    names = [engine.get_tensor_name(i) for i in range(engine.num_io_tensors)]
    is_input = {n: engine.get_tensor_mode(n) == trt.TensorIOMode.INPUT for n in names}
    specs = [TensorSpec(n, tuple(d if d >= 0 else ("batch" if i == 0 else f"{n}_dim{i}")
                                 for i, d in enumerate(engine.get_tensor_shape(n))),
                        str(trt.nptype(engine.get_tensor_dtype(n))().dtype)) for n in names if is_input[n]]
    source = FeedSource(specs, inputs_dir, pins)
    feeds = source.batch(batch)
    context = engine.create_execution_context()
    profiler = LayerTimes()
    context.profiler = profiler
    buffers: dict[str, Any] = {}
    for n in names:
        if is_input[n]:
            buffers[n] = torch.from_numpy(feeds[n]).cuda()
            context.set_input_shape(n, tuple(feeds[n].shape))
    for n in names:
        if not is_input[n]:
            dtype = getattr(torch, str(trt.nptype(engine.get_tensor_dtype(n))().dtype))
            buffers[n] = torch.empty(tuple(context.get_tensor_shape(n)), dtype=dtype, device="cuda")
    bindings = [int(buffers[n].data_ptr()) for n in names]
    for i in range(warmup + runs):
        profiler.recording = i >= warmup
        if not context.execute_v2(bindings):
            raise UsageError(f"TensorRT failed to run {resolved.path.name}", hint="rerun with --debug")
    torch.cuda.synchronize()
    types = _layer_types(trt, engine)
    layers = []
    for name in profiler.order:
        t = profiler.times[name]
        note = "reformat added by TensorRT" if name.startswith("Reformatting") else None
        nodes = [] if note or name.isdigit() else [p.strip() for p in name.split(" + ")]
        layers.append(LayerTime(name, types.get(name, "?"), nodes, sum(t), len(t), median_ms=statistics.median(t),
                                provider="tensorrt", note=note))
    warnings = []
    if layers and all(x.name.isdigit() for x in layers):
        warnings.append("layer names are indices: rebuild the engine with detailed profiling verbosity "
                        "to see the ONNX node names")
    return ProfileResult(artifact=resolved.to_json(), runtime="tensorrt", settings={
        "batch": batch, "warmup": warmup, "inputs": source.description, "tensorrt": trt.__version__},
        runs=runs, layers=finish(layers, runs), warnings=warnings)
