"""Serving ONNX on Triton's ONNX Runtime backend (platform onnxruntime_onnx): reading the graph's tensors
and precision, the backend's optimization block and parameters (its README), and the copy of a model
whose weights sit in external files."""
from __future__ import annotations

import shutil
from pathlib import Path

from optcli.deploy.pbtxt import Comment, MapEntries
from optcli.deploy.triton_backend import ServedModel, TritonBackend, TritonOptions
from optcli.deploy.triton_config import TRITON_TYPES
from optcli.deploy.triton_source import default_name
from optcli.errors import UsageError
from optcli.report import FinalArtifact, RunReport

PLATFORM = "onnxruntime_onnx"
# The ONNX Runtime backend reads `optimization.graph.level` as -1 basic, 1 extended, 2 disabled, anything
# else all (its own mapping, not the proto comment's).
GRAPH_LEVELS = {"all": 0, "extended": 1, "basic": -1, "disabled": 2}
_QDQ_OPS = {"QuantizeLinear", "DequantizeLinear"}
_DYNAMIC_INT8_OPS = {"DynamicQuantizeLinear", "MatMulInteger", "ConvInteger", "com.microsoft.DynamicQuantizeMatMul"}


def _served(path: Path) -> ServedModel:
    from optcli.onnx_model import external_data_files, graph_view, io_specs, op_histogram

    model = graph_view(path)
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
    return ServedModel(path=path, format="onnx", platform=PLATFORM, filename="model.onnx", inputs=inputs,
                       outputs=outputs, precision=precision, default_kind="cpu", default_name=default_name(path),
                       source=f"{path} ({precision})", external_data=external_data_files(path),
                       facts=facts)


def _onnx_runtime(model: ServedModel, opts: TritonOptions, kind: str, notes: list[str]) -> dict[str, object]:
    """The ONNX Runtime backend's optimization block and parameters (see its README)."""
    level = opts.graph_level or "all"
    disabled = model.facts.get("disabled_optimizers")
    if isinstance(disabled, list) and disabled and opts.graph_level is None:
        # Triton cannot switch off single optimizers; "extended" leaves out the layout ones (NCHWc).
        level = "extended"
        notes.append(f"graph level extended: the run disabled {', '.join(disabled)} to load this model")
    if level not in GRAPH_LEVELS:
        raise UsageError(f"unknown --graph-level {level!r}", hint=f"use one of: {', '.join(GRAPH_LEVELS)}")
    optimization: dict[str, object] = {
        "#level": Comment("ONNX Runtime backend graph level: 0 all (default), 1 extended, -1 basic, 2 disabled"),
        "graph": {"level": GRAPH_LEVELS[level]}}
    if opts.ort_tensorrt:
        if kind != "gpu":
            raise UsageError("--ort-tensorrt needs GPU instances", hint="add --kind gpu")
        if model.facts.get("dynamic_int8"):
            raise UsageError("--ort-tensorrt: dynamically quantized (MatMulInteger) models do not run on TensorRT",
                             hint="serve it on CPU, or quantize with Q/DQ for TensorRT")
        mode = {"fp16": "FP16", "int8": "INT8"}.get(model.precision, "FP32")
        optimization["execution_accelerators"] = {"gpu_execution_accelerator": [{
            "name": "tensorrt",
            "parameters": MapEntries([{"key": "precision_mode", "value": mode},
                                      {"key": "trt_engine_cache_enable", "value": "1"}])}]}
    params = []
    if opts.intra_op_threads is not None:
        if opts.intra_op_threads < 0:
            raise UsageError("--intra-op-threads must be 0 (all cores) or more")
        params.append({"key": "intra_op_thread_count", "value": {"string_value": str(opts.intra_op_threads)}})
    elif kind == "cpu" and opts.instances > 1:
        notes.append(f"{opts.instances} CPU instances each use every core by default: pass --intra-op-threads "
                     f"(cores / {opts.instances}) to avoid oversubscription")
    contrib = model.facts.get("contrib_ops")
    if kind == "gpu" and isinstance(contrib, list) and contrib:
        notes.append("the graph has onnxruntime contrib ops (" + ", ".join(contrib[:3])
                     + "); some run on CPU only: compile with --fuse-level basic for GPU serving")
    if kind == "gpu" and model.facts.get("dynamic_int8"):
        notes.append("dynamically quantized INT8 runs on ONNX Runtime's CPU provider; serve it with --kind cpu")
    return {"optimization": optimization, "parameters": MapEntries(params) if params else None}



class OnnxRuntimeTriton(TritonBackend):
    platform = PLATFORM
    types = frozenset(TRITON_TYPES.values()) - {"TYPE_BF16"}

    def served(self, path: Path) -> ServedModel:
        return _served(path)

    def from_report(self, model: ServedModel, report: RunReport, final: FinalArtifact) -> None:
        on_gpu = report.target == "tensorrt" or final.backend in ("tensorrt", "cuda")
        model.default_kind = "gpu" if on_gpu else "cpu"

    def extra_config(self, model: ServedModel, opts: TritonOptions, kind: str, notes: list[str]
                     ) -> dict[str, object]:
        return _onnx_runtime(model, opts, kind, notes)

    def copy(self, model: ServedModel, dest: Path) -> Path:
        """ONNX with external weights becomes a model.onnx/ folder (Triton's layout for multi-file ONNX:
        <version>/model.onnx/model.onnx plus the weight files)."""
        if not model.external_data:
            return super().copy(model, dest)
        folder = dest / model.filename
        folder.mkdir()
        shutil.copy2(model.path, folder / "model.onnx")
        for rel in model.external_data:
            target = folder / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(model.path.parent / rel, target)
        return folder

    def readme_files(self, model: ServedModel, version: int) -> str:
        return (super().readme_files(model, version)
                + (" (a folder: the graph plus its external weights)" if model.external_data else ""))

    def readme_release(self, model: ServedModel) -> str:
        return ("whose ONNX Runtime supports this model's opset"
                + (f" ({model.facts['opset']})" if model.facts.get("opset") else "") + ":")


TRITON = OnnxRuntimeTriton()
