"""What to serve: a run's report.json (its final artifact), an ONNX file, an OpenVINO IR, or a TensorRT
engine with its metadata, resolved into one ServedModel that the config builder and the repository
writer read."""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from optcli.deploy.engine_metadata import Profile, read_engine_metadata
from optcli.errors import UsageError
from optcli.tensor_spec import TensorSpec

PLATFORM_ONNX = "onnxruntime_onnx"
PLATFORM_TENSORRT = "tensorrt_plan"
# Triton names OpenVINO as a backend (`backend: "openvino"` in config.pbtxt), not as a platform.
BACKEND_OPENVINO = "openvino"
BACKEND_PYTHON = "python"        # optcli's runner in Triton's Python backend (optcli/deploy/triton_python.py)
ENGINE_SUFFIXES = (".engine", ".plan", ".trt")
_QDQ_OPS = {"QuantizeLinear", "DequantizeLinear"}
_DYNAMIC_INT8_OPS = {"DynamicQuantizeLinear", "MatMulInteger", "ConvInteger", "com.microsoft.DynamicQuantizeMatMul"}


@dataclass
class ServedModel:
    """One model file and everything Triton's config needs to know about it."""

    path: Path
    format: str                      # onnx | engine | openvino
    platform: str                    # onnxruntime_onnx | tensorrt_plan | openvino (a backend name)
    filename: str                    # the name Triton expects in the version folder
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]
    precision: str
    default_kind: str                # cpu | gpu: where the artifact was built to run
    default_name: str
    source: str                      # one line for the README: where this came from
    external_data: list[str] = field(default_factory=list)       # ONNX weights files beside `path`
    profiles: list[dict[str, Profile]] = field(default_factory=list)  # TensorRT optimization profiles
    shape_hints: dict[str, tuple[int, ...]] = field(default_factory=dict)  # concrete full input shapes known
    facts: dict[str, Any] = field(default_factory=dict)

    @property
    def batchable(self) -> bool:
        """Triton batching needs dim 0 of every input and output to be the (dynamic) batch dim."""
        return all(s.shape and not isinstance(s.shape[0], int) for s in self.inputs + self.outputs)

    def batch_blocker(self) -> str | None:
        """Why the model cannot batch (the first tensor whose dim 0 is fixed or missing), or None."""
        from optcli.batch_merge import batch_blocker

        return batch_blocker(self.inputs, self.outputs)

    def profile_max_batch(self) -> int | None:
        """The largest batch the engine's profiles accept for every input, or None when unknown."""
        best = None
        for prof in self.profiles:
            limits = [prof[s.name][2][0] for s in self.inputs if s.name in prof and s.shape]
            if limits and len(limits) == len(self.inputs):
                best = max(best or 0, min(limits))
        return best


def resolve_source(source: str | Path) -> ServedModel:
    """A report.json (or the run folder holding one), an .onnx file, an OpenVINO .xml, or an .engine/.plan."""
    path = Path(source)
    if path.is_dir():
        if not (path / "report.json").is_file():
            raise UsageError(f"{path} is a folder without report.json",
                             hint="pass a run's report.json, an .onnx file or an .engine/.plan file")
        path = path / "report.json"
    if not path.is_file():
        raise UsageError(f"{path} does not exist", hint="pass a run's report.json, an .onnx file or an .engine file")
    suffix = path.suffix.lower()
    if suffix == ".json":
        return _from_report(path)
    if suffix == ".onnx":
        return _from_onnx(path)
    if suffix in ENGINE_SUFFIXES:
        return _from_engine(path)
    if suffix == ".xml":
        return _from_openvino(path)
    raise UsageError(f"{path}: cannot serve a {suffix or 'suffix-less'} file on Triton",
                     hint="pass a run's report.json, an .onnx, an OpenVINO .xml or an .engine/.plan file")


def _default_name(path: Path) -> str:
    """The file's stem; for a generic model.onnx/model.engine, the run folder it sits in (not NN-stage)."""
    if path.stem not in ("model", "engine"):
        return path.stem
    for parent in path.resolve().parents:
        if parent.name and not re.match(r"^\d+-", parent.name):
            return parent.name
    return path.stem


def _from_report(path: Path) -> ServedModel:
    from optcli.report import RunReport

    hint = "pass the report.json optcli compile wrote"
    try:
        report = RunReport.load(path, hint)
    except UsageError:
        raw = _json_object(path)
        if raw is not None and "inputs" in raw and "stages" not in raw:
            raise UsageError(f"{path} is not an optcli run report",
                             hint="that looks like engine metadata: pass the engine file beside it") from None
        raise
    artifact = report.final_artifact(path, "rerun optcli compile until it succeeds, or pass an artifact file directly")
    final = report.final
    fmt = final.get("format")
    if fmt == "onnx":
        model = _from_onnx(artifact)
    elif fmt == "engine":
        model = _from_engine(artifact)
    elif fmt == "openvino":
        model = _from_openvino(artifact)
    else:
        raise UsageError(f"{path}: the final artifact is {fmt!r}; Triton export takes onnx, openvino or engine "
                         "artifacts", hint="serve an exported ONNX instead (the run's NN-export/model.onnx)")
    # Everything below is data from a file: only values of the expected types are used.
    model.precision = final["precision"] if final.get("precision") in ("fp32", "fp16", "bf16", "int8") \
        else model.precision
    model_info = report.model  # RunReport.load made it a dict; its values are still unchecked data
    if isinstance(model_info.get("path"), str) and model_info["path"]:
        model.default_name = Path(model_info["path"]).stem
    if model.format == "onnx":
        on_gpu = report.target == "tensorrt" or final.get("backend") in ("tensorrt", "cuda")
        model.default_kind = "gpu" if on_gpu else "cpu"
    # The run's own input shapes: concrete ones (user pins) size the warm-up and perf_analyzer shapes.
    inputs = model_info.get("inputs") if isinstance(model_info.get("inputs"), list) else []
    known = {s.name for s in model.inputs}
    for spec in inputs:
        shape = spec.get("shape") if isinstance(spec, dict) else None
        if isinstance(shape, list) and shape and all(type(d) is int and d > 0 for d in shape) \
                and spec.get("name") in known:
            model.shape_hints.setdefault(spec["name"], tuple(shape))
    # Optimizers the run had to switch off to load the artifact (e.g. NCHWc for an fp16 graph).
    latency = final.get("latency_ms") if isinstance(final.get("latency_ms"), dict) else {}
    settings = latency.get("settings") if isinstance(latency.get("settings"), dict) else {}
    disabled = settings.get("disabled_optimizers")
    model.facts["disabled_optimizers"] = [str(o) for o in disabled] if isinstance(disabled, list) else []
    model.source = f"{path} (final artifact {final['artifact']}, {model.precision})"
    return model


def _json_object(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        return None
    return data if isinstance(data, dict) else None


def _external_data(model: Any, folder: Path) -> list[str]:
    """Relative locations of the external weight files the graph references, checked to stay in `folder`."""
    import onnx

    locations: set[str] = set()
    graphs = [model.graph]
    while graphs:
        graph = graphs.pop()
        for tensor in graph.initializer:
            if tensor.data_location == onnx.TensorProto.EXTERNAL:
                loc = next((e.value for e in tensor.external_data if e.key == "location"), "")
                locations.add(loc)
        for node in graph.node:
            graphs.extend(a.g for a in node.attribute if a.type == onnx.AttributeProto.GRAPH)
            for a in node.attribute:
                graphs.extend(a.graphs)
    out = []
    for loc in sorted(locations):
        rel = PurePosixPath(loc.replace("\\", "/"))
        if not loc or rel.is_absolute() or ".." in rel.parts:
            raise UsageError(f"external data location {loc!r} points outside the model's folder",
                             hint="re-save the model with its weights beside it")
        if not (folder / rel).is_file():
            raise UsageError(f"external data file {folder / rel} is missing", hint="copy it beside the model")
        out.append(str(rel))
    return out


def _from_onnx(path: Path) -> ServedModel:
    from optcli.onnx_model import io_specs, load_onnx, op_histogram

    model = load_onnx(path, load_weights=False)
    for vi in list(model.graph.input) + list(model.graph.output):
        if not vi.type.HasField("tensor_type"):
            raise UsageError(f"{path}: {vi.name!r} is not a tensor (sequence or map I/O)",
                             hint="Triton's ONNX Runtime backend serves tensor inputs and outputs only")
    if any(not o.type.tensor_type.HasField("shape") for o in model.graph.output):
        import onnx

        # Outputs without shapes: ONNX shape inference usually recovers them (weights not needed).
        try:
            model = onnx.shape_inference.infer_shapes(model)
        except Exception:  # noqa: BLE001 - inference failing leaves the shapes missing, handled below
            pass
        # infer_shapes fills value_info, not graph.output: copy the inferred types across.
        inferred = {v.name: v for v in model.graph.value_info}
        for out in model.graph.output:
            if not out.type.tensor_type.HasField("shape") and out.name in inferred:
                out.type.CopyFrom(inferred[out.name].type)
        missing = [o.name for o in model.graph.output if not o.type.tensor_type.HasField("shape")]
        if missing:
            raise UsageError(f"{path}: output {missing[0]!r} has no shape, so its Triton dims are unknown",
                             hint="re-export with output shapes (torch.onnx.export records them)")
    inputs, outputs = io_specs(model)
    ops = op_histogram(model)
    qdq = any(op in ops for op in _QDQ_OPS)
    dynamic_int8 = any(op in ops for op in _DYNAMIC_INT8_OPS)
    fp16 = any(s.dtype == "float16" for s in inputs + outputs) or any(
        t.data_type == 10 for t in model.graph.initializer)
    precision = "int8" if qdq or dynamic_int8 else "fp16" if fp16 else "fp32"
    facts = {"qdq": qdq, "dynamic_int8": dynamic_int8,
             "contrib_ops": sorted(op for op in ops if op.startswith("com.microsoft.")),
             "opset": next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)}
    return ServedModel(path=path, format="onnx", platform=PLATFORM_ONNX, filename="model.onnx", inputs=inputs,
                       outputs=outputs, precision=precision, default_kind="cpu", default_name=_default_name(path),
                       source=f"{path} ({precision})", external_data=_external_data(model, path.parent),
                       facts=facts)


def _from_engine(path: Path) -> ServedModel:
    if path.stat().st_size == 0:
        raise UsageError(f"{path} is empty", hint="rebuild the engine")
    meta = read_engine_metadata(path)
    hints = {name: shapes[1] for name, shapes in meta.profiles[0].items()} if meta.profiles else {}
    facts = {"tensorrt_version": meta.tensorrt_version, "gpu": meta.gpu,
             "compute_capability": meta.compute_capability, "metadata": str(meta.path)}
    precision = meta.precision or "unknown"
    return ServedModel(path=path, format="engine", platform=PLATFORM_TENSORRT, filename="model.plan",
                       inputs=meta.inputs, outputs=meta.outputs, precision=precision, default_kind="gpu",
                       default_name=_default_name(path),
                       source=f"{path} (TensorRT {meta.tensorrt_version or 'version unknown'}, {precision})",
                       profiles=meta.profiles, shape_hints=hints, facts=facts)


def _from_openvino(path: Path) -> ServedModel:
    """An OpenVINO IR (model.xml + model.bin), for Triton's OpenVINO backend (CPU)."""
    from optcli.runtime.openvino_runner import port_spec, read_model, recorded_precision, resolve_model_path

    path = resolve_model_path(path)
    model = read_model(path)
    inputs = [port_spec(p, i) for i, p in enumerate(model.inputs)]
    outputs = [port_spec(p, i) for i, p in enumerate(model.outputs)]
    ops = {op.get_type_name() for op in model.get_ops()}
    # The precision the IR computes in: NNCF's INT8 is FakeQuantize; ONNX Q/DQ converts to it too.
    gated = recorded_precision(model)          # what optcli measured and gated: f32 | bf16 | None
    precision = "int8" if "FakeQuantize" in ops else "bf16" if gated == "bf16" else "fp32"
    facts = {"inference_precision": gated}
    return ServedModel(path=path, format="openvino", platform=BACKEND_OPENVINO, filename="model.xml",
                       inputs=inputs, outputs=outputs, precision=precision, default_kind="cpu",
                       default_name=_default_name(path), source=f"{path} (OpenVINO IR, {precision})", facts=facts)
