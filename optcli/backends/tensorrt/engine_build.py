"""The build stage's work for a TensorRT target: the final ONNX -> an engine (model.engine + model.engine.json).

The plan picks it (tensorrt's and tensorrt-rtx's descriptors name it as their `engine_build`) for
`--target tensorrt` (or `--target auto` where the probe found a usable GPU and TensorRT), built with TensorRT
on this GPU, and for `--target tensorrt-rtx`, built ahead of time with TensorRT-RTX's builder on any machine
(its engines run on RTX GPUs). The backend of the target names the builder (its `toolkit`); everything else
is the same code. Precision is not a build option: FP16 casts and INT8 Q/DQ nodes come from the ONNX the
quantize stages (order 40) wrote, and the network is strongly typed, so TensorRT keeps exactly those
types (TensorRT 10.x with the STRONGLY_TYPED flag, 11.x and TensorRT-RTX always).

The engine comes from the engine cache when a valid entry exists for (ONNX bytes, options, profiles,
builder and its version, GPU); a corrupt or mismatching entry is reported in the details and rebuilt.
Profiles cover every dynamic dim: the batch range, and the lengths the pipeline runs at (a sequence:
1..that length or --max-seq); they are checked before the first stage runs (check_plan). For a builder
that needs a GPU, the TensorRT preflight (optcli.backends.tensorrt.preflight) first checks the ONNX
against TensorRT's documented parser support, before any GPU time is spent; TensorRT-RTX's own parser
runs right here instead. Parser failures end the stage with (node, op, message) in its reason.

Test seam: `ctx.state.tensorrt_module` and `ctx.state.tensorrt_machine` replace the real
`tensorrt` module and the probed machine (contract tests pass a test double of the API slice).
"""
from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

from optcli.accuracy_summary import AccuracySummary
from optcli.artifact import Artifact
from optcli.backends.registry import ONNX, Backend, for_target, load_object
from optcli.backends.tensorrt.builder import Machine, obtain_engine
from optcli.backends.tensorrt.graph_check import require_clean
from optcli.backends.tensorrt.metadata import ENGINE_FILE, METADATA_FILE
from optcli.backends.tensorrt.options import TensorRTConfig, tensorrt_config
from optcli.backends.tensorrt.profiles import InputProfile, build_profiles, check_batches, default_batch
from optcli.backends.tensorrt.toolkit import Toolkit
from optcli.errors import UsageError
from optcli.onnx_model import graph_view, io_specs
from optcli.optional_imports import require
from optcli.plan.build_work import BuildWork
from optcli.stages.base import StageResult
from optcli.tensor_spec import TensorSpec


class EngineBuild(BuildWork):
    """ONNX -> TensorRT engine (strongly typed; profiles, workspace, opt level, compatibility)."""

    # The input ONNX's row is timed as the graph stages' are: the engine, not onnxruntime, runs it.
    measure_optimization = "disabled"

    @classmethod
    def validate(cls, config: Any) -> None:
        tensorrt_config(config)  # a bad [tensorrt] section is a usage error before anything runs

    def skip_reason(self, artifact: Artifact) -> str | None:
        if artifact.format != ONNX:
            return f"input is {artifact.format}, not ONNX"
        return None

    # -- configuration -----------------------------------------------------------------------
    def options(self) -> TensorRTConfig:
        return tensorrt_config(self.ctx.config)

    def backend(self) -> Backend:
        backend = for_target(self.ctx.target)
        assert backend is not None and backend.toolkit, self.ctx.target
        return backend

    def toolkit(self) -> Toolkit:
        return load_object(self.backend().toolkit or "")

    def _trt(self) -> Any:
        injected = self.ctx.state.tensorrt_module
        if injected is not None:
            return injected
        toolkit = self.toolkit()
        return require(toolkit.module, f"building {toolkit.label} engines")

    def machine(self) -> Machine:
        injected = self.ctx.state.tensorrt_machine
        if injected is not None:
            return injected
        toolkit = self.toolkit()
        if toolkit.builds_without_gpu:
            # Built ahead of time for the GPUs the builder targets by default, not for this machine's.
            return Machine(str(self._trt().__version__), None, None, None, toolkit=toolkit.name)
        from optcli.backends.tensorrt.probe import tensorrt_status

        status = tensorrt_status()
        return Machine(str(status.tensorrt_version), status.gpu, status.compute_capability, status.tensorrt_cuda)

    def _profiles(self, specs: list[TensorSpec]) -> list[InputProfile]:
        cfg, bench, acc = self.options(), self.ctx.config.bench, self.ctx.config.accuracy
        profiles = build_profiles(specs, pinned=self.ctx.config.inputs, batch=cfg.batch,
                                  fallback_batch=default_batch(bench.batch, acc.batch), run_specs=self.ctx.inputs,
                                  max_seq=cfg.max_seq)
        # The pipeline runs the engine at these batches right after the build: say so now if it can't.
        explicit = {p.name for p in self.ctx.config.inputs if p.profile is not None}
        check_batches(profiles, {"bench": bench.batch, "accuracy check": acc.batch}, explicit)
        return profiles

    def profiles(self, artifact: Artifact) -> list[InputProfile]:
        specs, _ = io_specs(graph_view(artifact.path))
        return self._profiles(specs)

    def check_plan(self) -> None:
        """The profiles the build will need, from the model's inputs as they are now (the user's ONNX, or
        the specs the export will write), and the builder's options: a usage error before export runs."""
        if self.ctx.config.quantize.allow_float:
            raise UsageError("--allow-float applies to the CPU build: an engine keeps the precision its graph carries",
                             hint="drop --allow-float, or compile for the CPU (--target cpu)")
        source = self.ctx.source
        specs = io_specs(graph_view(source.path))[0] if source.format == ONNX else self.ctx.inputs
        self._profiles(specs)
        cfg = self.options()
        if self.toolkit().builds_without_gpu and (cfg.hardware_compat != "none" or cfg.version_compat):
            raise UsageError(f"--hardware-compat and --version-compat are TensorRT options; {self.toolkit().label} "
                             "engines run on any RTX GPU of compute 8.0+ without them", hint="drop those flags")

    def fingerprint(self) -> dict[str, object]:
        cfg = self.options()
        return {"build": cfg.build_options(), "batch": cfg.batch, "max_seq": cfg.max_seq,
                "pins": [{**p.to_json(), "profile": p.profile} for p in self.ctx.config.inputs],
                "run_inputs": [s.to_json() for s in self.ctx.inputs],
                "default_batch": default_batch(self.ctx.config.bench.batch, self.ctx.config.accuracy.batch),
                "machine": dataclasses.asdict(self.machine())}

    def reuse_check(self, accuracy: AccuracySummary) -> str | None:
        """A reused engine within the quantize stages' tolerance for the run's precision; an FP32 engine
        within FP16's (TensorRT may run FP32 matmuls in TF32: not float32 rounding)."""
        from optcli.accuracy import check_tolerance
        from optcli.quantize.tolerance import effective

        a = self.ctx.config.accuracy
        precision = self.ctx.config.quantize.precision
        t = effective("fp16" if precision == "fp32" else precision, a.cosine, a.max_abs, a.top1)
        return check_tolerance(accuracy, t.cosine, t.max_abs, t.top1)

    # -- the work ----------------------------------------------------------------------------
    def run(self, artifact: Artifact, workdir: Path) -> StageResult:
        backend, toolkit = self.backend(), self.toolkit()
        if not toolkit.builds_without_gpu:
            # What TensorRT's parser would refuse, said by node before any GPU time is spent.
            require_clean(artifact.path, "the ONNX for TensorRT")
        trt = self._trt()
        machine = self.machine()
        profiles = self.profiles(artifact)
        obtained = obtain_engine(trt, artifact.path, profiles, self.options(), machine, force=self.ctx.config.force)
        engine_path = workdir / ENGINE_FILE
        _place(obtained.cache.get("dir"), engine_path, obtained.engine_bytes)
        obtained.metadata.write(workdir / METADATA_FILE)
        meta = obtained.metadata
        details: dict[str, Any] = {
            "tensorrt": meta.tensorrt_version, "builder": toolkit.label, "gpu": meta.gpu,
            "compute_capability": meta.compute_capability,
            "engine_cache": obtained.cache, "built_now": obtained.cache.get("status") != "hit",
            "build_seconds": meta.build_seconds, "engine_bytes": meta.engine_bytes,
            "profiles": [p.describe() for p in profiles if p.dynamic], "inputs": meta.inputs, "outputs": meta.outputs,
            "options": meta.options, "timing_cache": obtained.timing_cache}
        if obtained.warnings:
            details["tensorrt_warnings"] = obtained.warnings
        out = Artifact(engine_path, backend.format, precision=artifact.precision, stage=self.name,
                       parent=artifact.sha256, backend=backend.name,
                       meta={"metadata": METADATA_FILE, "tensorrt": meta.tensorrt_version, "builder": toolkit.label,
                             "gpu": meta.gpu, "flavour": f"{backend.name}-strongly-typed"})
        return StageResult(out, details)


def _place(cache_dir: str | None, target: Path, data: bytes) -> None:
    """Hard-link the cached engine into the stage folder where possible (engines can be large);
    a cache entry is only ever replaced, never edited, so the link stays valid."""
    if cache_dir:
        try:
            os.link(Path(cache_dir) / ENGINE_FILE, target)
            return
        except OSError:
            pass
    target.write_bytes(data)
