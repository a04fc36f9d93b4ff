"""Stage build-cpu: the fastest CPU artifact at the accuracy asked for, chosen by measurement.

For `--target cpu` (and `auto` without a usable GPU) it builds the candidates the registered backends'
recipes offer for the requested precision (optcli/backends/<name>/recipes/, planned by
optcli/cpu/candidates.py: today ONNX Runtime on the input ONNX; OpenVINO IRs in FP32, BF16, or INT8 from
the quantize stage's Q/DQ, re-quantized s8/s8 Q/DQ or NNCF), checks each against the FP32 ONNX on
held-out data with the quantize stages' tolerance, measures them all in ONE interleaved run, and keeps
the fastest that meets the tolerance. Every candidate's build, accuracy and latency is in the stage
details; `--backend` forces one backend.

It is reported as skipped when the target is tensorrt, or when there is nothing to choose (one
candidate: the input as it is).
"""
from __future__ import annotations

import dataclasses
import os
import re
import shutil
import time
from pathlib import Path
from typing import Any

from optcli.accuracy import check_tolerance
from optcli.artifact import Artifact, sha256_file
from optcli.backends import registry
from optcli.backends.recipe import PlanRequest, RecipeContext, newest_float_onnx
from optcli.calibration.dataset import SampleSet
from optcli.cpu.candidates import Candidate, choose, plan
from optcli.cpu.options import CpuConfig, check_request, cpu_config
from optcli.environment import cpu_name, package_version
from optcli.errors import OptcliError, StageError, UsageError
from optcli.onnx_model import io_specs, load_onnx, looks_like_encoder, op_histogram
from optcli.quantize.tolerance import Tolerance, effective
from optcli.stages.base import Stage, StageResult, config_dict, register
from optcli.tensor_spec import random_inputs

# An FP32 conversion must be near-exact; other precisions use the quantize stages' defaults.
FP32_COSINE = 0.9999
QUICK_BUDGET = {"min_rounds": 3, "min_seconds": 0.5, "max_seconds": 5.0, "block_ms": 20.0, "switch_ms": 5.0}


@register
class BuildCpuStage(Stage):
    """The input ONNX -> the fastest CPU artifact (of any registered backend's recipes) within tolerance."""

    name = "build-cpu"
    order = 50
    config_section = "cpu"
    measure_optimization = "all"  # candidates are compared as deployed; Q/DQ needs ORT's optimizer

    @classmethod
    def enabled(cls, config: Any) -> bool:
        # Impossible requests fail before anything runs; with target auto that waits for the probe.
        if config.target == "cpu" or (config.target == "tensorrt" and config.extra.get("cpu")):
            check_request(config, config.target)
        else:
            cpu_config(config)
        return True

    # -- planning ----------------------------------------------------------------------------
    def options(self) -> CpuConfig:
        cfg = cpu_config(self.ctx.config)
        raw = self.ctx.config.extra.get("cpu", {})
        given = set(raw) if isinstance(raw, dict) else set()
        if not self.ctx.config.bench.enabled and not given & QUICK_BUDGET.keys():
            # --no-bench asks for no latency work around stages; the choice still needs a measurement,
            # a short one (a clear winner still shows; a near tie is then decided by accuracy).
            cfg = dataclasses.replace(cfg, **QUICK_BUDGET)
        return cfg

    def tolerance(self) -> Tolerance:
        a, precision = self.ctx.config.accuracy, self.ctx.config.quantize.precision
        tol = effective(precision, a.cosine, a.max_abs, a.top1)
        if precision == "fp32" and not tol.to_json():
            tol = Tolerance(cosine=FP32_COSINE)
        return tol

    def candidates(self, artifact: Artifact) -> list[Candidate]:
        cfg = self.options()
        precision = self.ctx.config.quantize.precision
        facts = {b.name: registry.load_object(b.cpu_facts)(precision, cfg)
                 for b in registry.all_backends() if b.cpu_facts}
        dynamic = encoder = False
        if precision == "int8" and artifact.format == registry.ONNX:
            ops = op_histogram(load_onnx(artifact.path, load_weights=False))
            dynamic = "DynamicQuantizeLinear" in ops or "com.microsoft.DynamicQuantizeMatMul" in ops
            encoder = looks_like_encoder(ops)
        return plan(PlanRequest(precision, cfg.backend, input_flavour=artifact.meta.get("flavour"),
                                dynamic_input=dynamic, encoder=encoder, input_format=artifact.format,
                                torch_source=self.ctx.source.is_torch, batch=self.ctx.config.bench.batch,
                                facts=facts))

    def skip_reason(self, artifact: Artifact) -> str | None:
        if self.ctx.target != "cpu":
            return f"target is {self.ctx.target} (build_tensorrt builds for it)"
        if artifact.format != registry.ONNX and not self.ctx.source.is_torch:
            return f"input is {artifact.format}, not ONNX"
        check_request(self.ctx.config, "cpu")
        cands = self.candidates(artifact)
        built = [c for c in cands if not c.skip]
        why = "; ".join(f"{c.name}: {c.skip}" for c in cands if c.skip)
        forced = [c for c in cands if c.backend == self.options().backend]
        if not built and forced:  # --backend X, and X cannot build for this input: say why X cannot
            raise UsageError(f"--backend {forced[0].backend} cannot build this model: "
                             + "; ".join(f"{c.name}: {c.skip}" for c in forced),
                             hint="drop --backend (auto chooses among the installed backends)")
        if not built:
            raise UsageError(f"no CPU backend here can run {self.ctx.config.quantize.precision}: {why}",
                             hint="pick another precision, or install the backend it names")
        if len(built) == 1 and built[0].recipe == "input":
            return f"nothing to choose: {built[0].name} runs the input as it is ({why})"
        return None

    def fingerprint(self) -> dict[str, Any]:
        q = config_dict(self.ctx.config.quantize)
        for key in ("calib", "eval"):
            if q.get(key):
                q[f"{key}_sha256"] = sha256_file(Path(q[key])) if Path(q[key]).exists() else None
        bench = self.ctx.config.bench
        return {"cpu": dataclasses.asdict(self.options()), "quantize": q, "tolerance": self.tolerance().to_json(),
                "bench": {"batch": bench.batch, "threads": bench.threads},
                # The choice is a measurement on this machine with these libraries.
                "machine": {"cpu": cpu_name(), "cores": os.cpu_count()},
                "versions": {p: package_version(p) for b in registry.all_backends() if b.offers_cpu()
                             for p in (b.package, *b.build_packages) if p}}

    def gate(self, accuracy: dict[str, Any]) -> str | None:
        t = self.tolerance()
        return check_tolerance(accuracy, t.cosine, t.max_abs, t.top1)

    # -- inputs of the work ------------------------------------------------------------------
    def _lineage(self, artifact: Artifact) -> list[Artifact]:
        """Artifacts of this run, newest first (the pipeline records them in ctx.facts)."""
        seen = list(self.ctx.facts.get("artifacts", {}).values())
        return [artifact] + [a for a in reversed(seen) if a.path != artifact.path]

    def _data(self, specs: list) -> tuple[SampleSet | None, SampleSet]:
        """(calibration set or None, evaluation set): the quantize stage's split where there is data,
        else random inputs (an FP32/BF16 run without --calib/--eval)."""
        from optcli.calibration.split import evaluation_set, split_calibration

        q = self.ctx.config.quantize
        if q.precision == "int8":
            return split_calibration(q, specs, holdout_needed=True)
        return None, evaluation_set(q, specs, self.ctx.inputs, self.ctx.int_high)

    # -- the work ----------------------------------------------------------------------------
    def run(self, artifact: Artifact, workdir: Path) -> StageResult:
        cfg = self.options()
        tol = self.tolerance()
        cands = self.candidates(artifact)
        float_art, (calib, ev, reference, names) = self._reference(artifact)
        threads = self.ctx.config.bench.threads
        for cand in cands:
            if cand.skip:
                continue
            folder = workdir / "candidates" / re.sub(r"[^A-Za-z0-9_.-]+", "_", cand.name)
            t0 = time.perf_counter()
            try:
                self._build(cand, RecipeContext(
                    stage=self.ctx, artifact=artifact, lineage=self._lineage(artifact), calib=calib, eval=ev,
                    precision=self.ctx.config.quantize.precision, tolerance=tol, cpu=cfg, workdir=workdir,
                    folder=folder, candidates=cands,
                    records={"candidate": cand.name, "source_sha256": artifact.sha256}))
                cand.build["seconds"] = round(time.perf_counter() - t0, 3)
                self._evaluate(cand, reference, names, ev, tol, threads)
            except OptcliError as exc:
                cand.failure = f"{'build' if cand.path is None else 'run'} failed: {exc.message}"
            except Exception as exc:  # noqa: BLE001 - a backend's own failure (OpenVINO's OpConversionFailure,
                # NNCF's) is this candidate's failure: the others still compete
                first = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ""
                cand.failure = f"{'build' if cand.path is None else 'run'} failed: {type(exc).__name__}: {first}"
        timing = self._measure(cands, ev, cfg, threads)
        chosen, why = choose(cands)
        if chosen is None:
            ran = [c for c in cands if c.accuracy is not None]
            if not ran:
                raise StageError(f"no CPU candidate could be built: {why}", hint="use --backend onnxruntime")
            # Hand the most accurate one to the pipeline's gate, which fails the run with exit 3.
            chosen = max(ran, key=lambda c: c.accuracy.get("cosine_mean", 0.0))
            why = f"{why}; {chosen.name} (the most accurate) is kept for inspection"
        if artifact.format != registry.ONNX and artifact.stage is not None:
            why += "; the export to ONNX failed (see the export stage), so only backends that build from PyTorch ran"
        out = self._place(chosen, artifact, workdir)
        if not cfg.keep_candidates:
            shutil.rmtree(workdir / "candidates", ignore_errors=True)
        for leftover in workdir.glob("*-named.onnx"):
            leftover.unlink()
        details = {
            "precision": self.ctx.config.quantize.precision, "backend": cfg.backend, "tolerance": tol.to_json(),
            "chosen": chosen.name, "why": why, "candidates": [c.to_json() for c in cands], "measurement": timing,
            "evaluation": {"samples": len(ev), "data": ev.source, "labels": ev.labels is not None,
                           "reference": f"FP32 ONNX ({float_art.path.parent.name}/{float_art.path.name}) "
                                        "on onnxruntime" if float_art else "the PyTorch model, eager (no ONNX)"},
            "cpu": self._cpu_facts(), "candidates_kept": cfg.keep_candidates}
        accuracy = dict(chosen.accuracy or {})
        accuracy["reference"] = "fp32-onnx" if float_art else "torch-fp32"
        return StageResult(out, details, accuracy=accuracy)

    def _reference(self, artifact: Artifact) -> tuple[Artifact | None, tuple]:
        """The FP32 ONNX (None where the run made no ONNX) and (calibration set, evaluation set, reference
        outputs on it, output names): from the FP32 ONNX on onnxruntime, else from PyTorch eager."""
        from optcli.quantize.evaluate import run_model, runner_outputs

        if artifact.format == registry.ONNX:
            float_art = newest_float_onnx(self._lineage(artifact))
            specs, _ = io_specs(load_onnx(float_art.path, load_weights=False))
            calib, ev = self._data(specs)
            return float_art, (calib, ev, *run_model(float_art.path, ev))
        from optcli.backends.torch.runner import TorchRunner

        assert self.ctx.torch_model is not None  # skip_reason: a non-ONNX input is PyTorch
        calib, ev = self._data(self.ctx.inputs)
        with TorchRunner(self.ctx.torch_model.module, self.ctx.inputs) as runner:
            reference = runner_outputs(runner, ev)
            return None, (calib, ev, reference, [o.name for o in runner.outputs])

    def _build(self, cand: Candidate, ctx: RecipeContext) -> None:
        assert cand.builder is not None
        built = cand.builder.build(cand, ctx)
        cand.path, cand.format = built.path, built.format
        cand.runner_options, cand.build = built.runner_options, built.details

    def _evaluate(self, cand: Candidate, reference: list, names: list[str], ev: SampleSet, tol: Tolerance,
                  threads: int | None) -> None:
        from optcli.cpu.measure import runner_accuracy

        runner = self._open(cand, threads)
        try:
            cand.accuracy = runner_accuracy(runner, reference, names, ev)
        finally:
            runner.close()
        cand.failure = check_tolerance(cand.accuracy, tol.cosine, tol.max_abs, tol.top1)

    def _open(self, cand: Candidate, threads: int | None) -> Any:
        from optcli.runtime import open_runner

        return open_runner(cand.path, cand.format, threads=threads, **cand.runner_options)

    def _measure(self, cands: list[Candidate], ev: SampleSet, cfg: CpuConfig, threads: int | None) -> dict[str, Any]:
        """One interleaved run over every candidate that ran (those that missed the tolerance too:
        the report shows what they would have cost)."""
        from optcli.cpu.measure import interleaved

        ran = [c for c in cands if c.accuracy is not None]
        if not ran:
            return {"rounds": 0}
        batch = self.ctx.config.bench.batch
        sample = ev.take(slice(0, batch)) if len(ev) >= batch else None
        runners: dict[str, Any] = {}
        try:
            for c in ran:
                runners[c.name] = self._open(c, threads)
            arrays = sample.arrays if sample is not None else random_inputs(self.ctx.inputs, batch, seed=1,
                                                                            int_high=self.ctx.int_high)
            feeds = {name: r.normalize(arrays) for name, r in runners.items()}
            stats, info = interleaved(runners, feeds, batch=batch, min_rounds=cfg.min_rounds,
                                      calls_per_round=cfg.calls_per_round, min_seconds=cfg.min_seconds,
                                      block_ms=cfg.block_ms, switch_ms=cfg.switch_ms,
                                      max_seconds=cfg.max_seconds, contenders=[c.name for c in ran if c.passed])
        finally:
            for r in runners.values():
                r.close()
        for c in ran:
            c.latency = {k: stats[c.name][k] for k in ("p50", "p90", "mean", "min", "cv", "runs", "p50_ci")}
        info["inputs"] = "evaluation samples" if sample is not None else "random inputs"
        return info

    def _place(self, chosen: Candidate, artifact: Artifact, workdir: Path) -> Artifact:
        """Put the chosen model at the stage folder's top level: the input linked as model.<suffix> where
        it runs as it is, else the built file with its companions (an IR's model.xml + model.bin)."""
        assert chosen.path is not None and chosen.format is not None
        meta: dict[str, Any] = {"candidate": chosen.name, "runner_options": chosen.runner_options}
        if chosen.path != artifact.path:
            for src in (chosen.path, *registry.companion_files(chosen.path)):
                shutil.move(str(src), str(workdir / src.name))
            meta["flavour"] = chosen.name
            return Artifact(workdir / chosen.path.name, chosen.format, precision=chosen.precision, stage=self.name,
                            parent=artifact.sha256, backend=chosen.backend, meta=meta)
        target = workdir / f"model{artifact.path.suffix}"
        _link_or_copy(artifact.path, target)
        for extra in artifact.meta.get("external_data", []):
            _link_or_copy(artifact.path.parent / extra, workdir / extra)
        meta["flavour"] = artifact.meta.get("flavour")
        meta["external_data"] = list(artifact.meta.get("external_data", []))
        return Artifact(target, artifact.format, precision=artifact.precision, stage=self.name, parent=artifact.sha256,
                        backend=chosen.backend, meta=meta)

    def _cpu_facts(self) -> dict[str, Any]:
        facts: dict[str, Any] = {"name": cpu_name(), "cores": os.cpu_count()}
        for backend in registry.all_backends():
            if backend.machine_facts and backend.installed():
                facts.update(registry.load_object(backend.machine_facts)())
        return facts


def _link_or_copy(src: Path, dst: Path) -> None:
    """A hard link where the file system allows (models can be large), else a copy."""
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)
