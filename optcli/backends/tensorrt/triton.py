"""Serving a TensorRT engine on Triton's TensorRT backend (platform tensorrt_plan, GPU only): the engine's
tensors, precision and optimization profiles from the metadata file beside it, a max batch within its
profiles, every profile offered to the instances, and the README's warning that the server's TensorRT
and GPU must match the engine's."""
from __future__ import annotations

from pathlib import Path

from optcli.backends.tensorrt.engine_metadata import read_engine_metadata
from optcli.deploy.triton_backend import ServedModel, TritonBackend, TritonOptions
from optcli.deploy.triton_source import default_name
from optcli.errors import UsageError

PLATFORM = "tensorrt_plan"


def _served(path: Path) -> ServedModel:
    if path.stat().st_size == 0:
        raise UsageError(f"{path} is empty", hint="rebuild the engine")
    meta = read_engine_metadata(path)
    hints = {name: shapes[1] for name, shapes in meta.profiles[0].items()} if meta.profiles else {}
    facts = {"tensorrt_version": meta.tensorrt_version, "gpu": meta.gpu,
             "compute_capability": meta.compute_capability, "metadata": str(meta.path)}
    precision = meta.precision or "unknown"
    return ServedModel(path=path, format="engine", platform=PLATFORM, filename="model.plan",
                       inputs=meta.inputs, outputs=meta.outputs, precision=precision, default_kind="gpu",
                       default_name=default_name(path),
                       source=f"{path} (TensorRT {meta.tensorrt_version or 'version unknown'}, {precision})",
                       profiles=meta.profiles, shape_hints=hints, facts=facts)


class TensorRTTriton(TritonBackend):
    platform = PLATFORM
    kinds = ("gpu",)
    types = frozenset({"TYPE_BOOL", "TYPE_UINT8", "TYPE_INT8", "TYPE_INT32", "TYPE_INT64", "TYPE_FP16",
                       "TYPE_FP32", "TYPE_BF16"})
    release_note = "whose TensorRT matches the engine's:"

    def served(self, path: Path) -> ServedModel:
        return _served(path)

    def check(self, opts: TritonOptions, kind: str) -> None:
        if kind != "gpu":
            raise UsageError("a TensorRT engine runs on the GPU only", hint="drop --kind cpu (or serve the ONNX)")
        for flag, value in (("--graph-level", opts.graph_level), ("--intra-op-threads", opts.intra_op_threads),
                            ("--ort-tensorrt", opts.ort_tensorrt or None)):
            if value is not None:
                raise UsageError(f"{flag} applies to ONNX models, not TensorRT engines")

    def default_max_batch(self, model: ServedModel) -> int | None:
        limit = model.profile_max_batch()
        if limit is None:
            raise UsageError("the engine metadata has no optimization profile, so its max batch is unknown",
                             hint="pass --max-batch-size (at most the engine's profile max batch)")
        return limit

    def check_max_batch(self, model: ServedModel, requested: int, notes: list[str]) -> None:
        limit = model.profile_max_batch()
        if limit is None:
            notes.append("the engine metadata has no profile: --max-batch-size was not checked against it")
        elif requested > limit:
            raise UsageError(f"--max-batch-size {requested} exceeds the engine's profile max batch {limit}",
                             hint=f"use --max-batch-size {limit} or less, or rebuild the engine with a larger profile")

    def batching_notes(self, model: ServedModel, notes: list[str]) -> None:
        if model.profiles:
            min_batch = min(p[s.name][0][0] for p in model.profiles[:1] for s in model.inputs if s.name in p)
            if min_batch > 1:
                notes.append(f"the engine's profile starts at batch {min_batch}: smaller batches will be rejected")

    def instance_group(self, model: ServedModel, group: dict[str, object]) -> None:
        if len(model.profiles) > 1:
            # Let Triton pick the best of the engine's profiles per batch (otherwise it uses profile 0 only).
            group["profile"] = [str(i) for i in range(len(model.profiles))]

    def readme_facts(self, model: ServedModel) -> list[str]:
        return [f"- TensorRT {model.facts.get('tensorrt_version') or '(version not recorded)'}, built on "
                f"{model.facts.get('gpu') or '(GPU not recorded)'}: the server's TensorRT version and GPU "
                "architecture must match, or the engine will not deserialize"]


TRITON = TensorRTTriton()
