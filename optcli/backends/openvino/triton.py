"""Serving an OpenVINO IR on Triton's OpenVINO backend (CPU; Triton names it a backend, not a platform):
the IR's tensors and precision, the backend's parameters (precision, streams, threads as optcli ran it),
and the copy of model.xml with its model.bin."""
from __future__ import annotations

import shutil
from pathlib import Path

from optcli.deploy.pbtxt import MapEntries
from optcli.deploy.triton_backend import ServedModel, TritonBackend, TritonOptions
from optcli.deploy.triton_source import default_name
from optcli.errors import UsageError


def _served(path: Path) -> ServedModel:
    """An OpenVINO IR (model.xml + model.bin), for Triton's OpenVINO backend (CPU)."""
    from optcli.backends.openvino.runner import port_spec, read_model, recorded_precision, resolve_model_path

    path = resolve_model_path(path)
    model = read_model(path)
    inputs = [port_spec(p, i) for i, p in enumerate(model.inputs)]
    outputs = [port_spec(p, i) for i, p in enumerate(model.outputs)]
    ops = {op.get_type_name() for op in model.get_ops()}
    # The precision the IR computes in: NNCF's INT8 is FakeQuantize; ONNX Q/DQ converts to it too.
    gated = recorded_precision(model)          # what optcli measured and gated: f32 | bf16 | None
    precision = "int8" if "FakeQuantize" in ops else "bf16" if gated == "bf16" else "fp32"
    facts = {"inference_precision": gated}
    return ServedModel(path=path, format="openvino", platform=OpenVINOTriton.platform, filename="model.xml",
                       inputs=inputs, outputs=outputs, precision=precision, default_kind="cpu",
                       default_name=default_name(path), source=f"{path} (OpenVINO IR, {precision})", facts=facts)


def _openvino(model: ServedModel, opts: TritonOptions, notes: list[str]) -> dict[str, object]:
    """The OpenVINO backend's parameters (its README): precision, streams and threads as optcli ran it."""
    def param(key: str, value: str) -> dict[str, object]:
        return {"key": key, "value": {"string_value": value}}

    params = []
    gated = model.facts.get("inference_precision")
    if gated == "bf16":
        params.append(param("HINT_BF16", "YES"))
    elif gated == "f32":
        # The backend has a BF16 switch but no FP32 one, and OpenVINO computes in BF16 by default on
        # CPUs that have it: there, Triton would run this IR in a precision optcli did not gate.
        notes.append("optcli gated this IR at FP32, but Triton's OpenVINO backend cannot ask for FP32 (it has only "
                     "HINT_BF16): on a CPU with BF16 (AVX-512 BF16, AMX) it computes in BF16. Check accuracy there, "
                     "compile with --bf16 to gate what it will run, or serve the ONNX (--backend onnxruntime)")
    # One instance: latency mode, one stream (what optcli measured); N instances: N streams side by side.
    if opts.instances == 1:
        params += [param("NUM_STREAMS", "1"), param("PERFORMANCE_HINT", "LATENCY")]
    else:
        params.append(param("NUM_STREAMS", str(opts.instances)))
    if opts.intra_op_threads is not None:
        if opts.intra_op_threads < 0:
            raise UsageError("--intra-op-threads must be 0 (all cores) or more")
        if opts.intra_op_threads:
            params.append(param("INFERENCE_NUM_THREADS", str(opts.intra_op_threads)))
    return {"parameters": MapEntries(params)}



class OpenVINOTriton(TritonBackend):
    platform = "openvino"
    config_key = "backend"
    kinds = ("cpu",)
    # The OpenVINO backend's type map (openvino_backend src/openvino_utils.cc): no BF16, FP64 or strings.
    types = frozenset({"TYPE_BOOL", "TYPE_UINT8", "TYPE_UINT16", "TYPE_UINT32", "TYPE_UINT64", "TYPE_INT8",
                       "TYPE_INT16", "TYPE_INT32", "TYPE_INT64", "TYPE_FP16", "TYPE_FP32"})
    release_note = "whose OpenVINO reads this IR (as new as the OpenVINO that wrote it, or newer):"

    def served(self, path: Path) -> ServedModel:
        return _served(path)

    def check(self, opts: TritonOptions, kind: str) -> None:
        if kind != "cpu":
            raise UsageError("optcli builds and checks OpenVINO IRs for the CPU", hint="drop --kind gpu")
        for flag, value in (("--graph-level", opts.graph_level), ("--ort-tensorrt", opts.ort_tensorrt or None)):
            if value is not None:
                raise UsageError(f"{flag} applies to ONNX models, not OpenVINO IRs")

    def extra_config(self, model: ServedModel, opts: TritonOptions, kind: str, notes: list[str]
                     ) -> dict[str, object]:
        return _openvino(model, opts, notes)

    def copy(self, model: ServedModel, dest: Path) -> Path:
        """model.xml + model.bin side by side (the backend reads the .bin beside the .xml)."""
        target = super().copy(model, dest)
        shutil.copy2(model.path.with_suffix(".bin"), target.with_suffix(".bin"))
        return target

    def readme_files(self, model: ServedModel, version: int) -> str:
        return f"- backend: `{model.platform}`; model files: `{version}/model.xml` and `{version}/model.bin`"


TRITON = OpenVINOTriton()
