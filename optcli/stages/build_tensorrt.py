"""Stage build-tensorrt: the final ONNX -> a TensorRT engine (model.engine + model.engine.json).

Runs when the target is tensorrt (`--target tensorrt`, or `--target auto` where the probe found a
usable GPU and TensorRT); otherwise it is reported as skipped with the reason. Precision is not a
build option: FP16 casts and INT8 Q/DQ nodes come from the ONNX the quantize stages (order 40)
wrote, and the network is strongly typed, so TensorRT keeps exactly those types (TensorRT 10.x
with the STRONGLY_TYPED flag, 11.x always).

The engine comes from the engine cache when a valid entry exists for (ONNX bytes, options,
profiles, TensorRT version, GPU); a corrupt or mismatching entry is reported in the details and
rebuilt. Before anything else the TensorRT preflight (optcli.backends.tensorrt.preflight) checks the ONNX
against TensorRT's documented parser support; parser failures end the stage with (node, op,
message) in its reason.

Test seam: `ctx.facts["tensorrt_module"]` and `ctx.facts["tensorrt_machine"]` replace the real
`tensorrt` module and the probed machine (contract tests pass a test double of the API slice).
"""
from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

from optcli.artifact import Artifact
from optcli.backends.registry import ONNX
from optcli.backends.tensorrt import BACKEND as TENSORRT
from optcli.backends.tensorrt.builder import Machine, obtain_engine
from optcli.backends.tensorrt.metadata import ENGINE_FILE, METADATA_FILE
from optcli.backends.tensorrt.options import TensorRTConfig, tensorrt_config
from optcli.backends.tensorrt.preflight import require_clean
from optcli.backends.tensorrt.profiles import InputProfile, build_profiles, check_batches, default_batch
from optcli.onnx_model import io_specs, load_onnx
from optcli.optional_imports import require
from optcli.stages.base import Stage, StageResult, register


@register
class BuildTensorRTStage(Stage):
    """ONNX -> TensorRT engine (strongly typed; profiles, workspace, opt level, compatibility)."""

    name = "build-tensorrt"
    order = 50
    builds_deployable = True
    config_section = "tensorrt"

    @classmethod
    def enabled(cls, config: Any) -> bool:
        tensorrt_config(config)  # a bad [tensorrt] section is a usage error before anything runs
        return True

    def skip_reason(self, artifact: Artifact) -> str | None:
        if self.ctx.target != "tensorrt":
            if self.ctx.config.target == "auto":
                return f"no TensorRT here: {self.ctx.facts.get('target_reason') or 'not detected'}"
            return f"target is {self.ctx.target}"
        if artifact.format != ONNX:
            return f"input is {artifact.format}, not ONNX"
        return None

    # -- configuration -----------------------------------------------------------------------
    def options(self) -> TensorRTConfig:
        return tensorrt_config(self.ctx.config)

    def _trt(self) -> Any:
        injected = self.ctx.facts.get("tensorrt_module")
        return injected if injected is not None else require("tensorrt", "building TensorRT engines")

    def machine(self) -> Machine:
        injected = self.ctx.facts.get("tensorrt_machine")
        if injected is not None:
            return injected
        from optcli.backends.tensorrt.probe import tensorrt_status

        status = tensorrt_status()
        return Machine(str(status.tensorrt_version), status.gpu, status.compute_capability, status.torch_cuda)

    def profiles(self, artifact: Artifact) -> list[InputProfile]:
        cfg, bench, acc = self.options(), self.ctx.config.bench, self.ctx.config.accuracy
        specs, _ = io_specs(load_onnx(artifact.path, load_weights=False))
        profiles = build_profiles(specs, pinned=self.ctx.config.inputs, batch=cfg.batch,
                                  fallback_batch=default_batch(bench.batch, acc.batch))
        # The pipeline runs the engine at these batches right after the build: say so now if it can't.
        check_batches(profiles, {"bench": bench.batch, "accuracy check": acc.batch})
        return profiles

    def fingerprint(self) -> dict[str, Any]:
        cfg = self.options()
        return {"build": cfg.build_options(), "batch": cfg.batch,
                "pins": [{**p.to_json(), "profile": p.profile} for p in self.ctx.config.inputs],
                "default_batch": default_batch(self.ctx.config.bench.batch, self.ctx.config.accuracy.batch),
                "machine": dataclasses.asdict(self.machine())}

    def reuse_check(self, accuracy: dict[str, Any]) -> str | None:
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
            "tensorrt": meta.tensorrt_version, "gpu": meta.gpu, "compute_capability": meta.compute_capability,
            "engine_cache": obtained.cache, "built_now": obtained.cache.get("status") != "hit",
            "build_seconds": meta.build_seconds, "engine_bytes": meta.engine_bytes,
            "profiles": [p.describe() for p in profiles if p.dynamic], "inputs": meta.inputs, "outputs": meta.outputs,
            "options": meta.options, "timing_cache": obtained.timing_cache}
        if obtained.warnings:
            details["tensorrt_warnings"] = obtained.warnings
        out = Artifact(engine_path, TENSORRT.format, precision=artifact.precision, stage=self.name,
                       parent=artifact.sha256, backend=TENSORRT.name, meta={"metadata": METADATA_FILE, "tensorrt": meta.tensorrt_version,
                                                 "gpu": meta.gpu, "flavour": "tensorrt-strongly-typed"})
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
