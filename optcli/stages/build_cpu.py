"""Stage build-cpu: the fastest CPU artifact at the accuracy asked for, chosen by measurement.

For `--target cpu` (and `auto` without a usable GPU) it builds the candidates the installed
backends offer for the requested precision (optcli/cpu/candidates.py: ONNX Runtime on the input
ONNX; OpenVINO IRs in FP32, BF16, or INT8 from the quantize stage's Q/DQ, re-quantized s8/s8 Q/DQ or
NNCF), checks each against the FP32 ONNX on held-out data with the quantize stages' tolerance,
measures them all in ONE interleaved run, and keeps the fastest that meets the tolerance. Every
candidate's build, accuracy and latency is in the stage details; `--backend` forces one backend.

It is reported as skipped when the target is tensorrt, or when there is nothing to choose (one
candidate: the input as it is).
"""
from __future__ import annotations

import copy
import dataclasses
import os
import re
import shutil
from pathlib import Path
from typing import Any

from optcli.accuracy import check_tolerance
from optcli.artifact import Artifact, sha256_file
from optcli.calibration.dataset import SampleSet
from optcli.cpu.candidates import ORT, OV, Candidate, choose, plan
from optcli.cpu.options import CpuConfig, check_request, cpu_config, installed
from optcli.environment import cpu_name, package_version
from optcli.errors import StageError, UsageError
from optcli.onnx_model import io_specs, load_onnx, looks_like_encoder, op_histogram
from optcli.quantize.tolerance import Tolerance, effective
from optcli.stages.base import Stage, StageResult, config_dict, register
from optcli.tensor_spec import random_inputs

# An FP32 conversion must be near-exact; other precisions use the quantize stages' defaults.
FP32_COSINE = 0.9999
OV_HINTS = {"fp32": "f32", "bf16": "bf16"}
QUICK_BUDGET = {"min_rounds": 3, "min_seconds": 0.5, "max_seconds": 5.0, "block_ms": 20.0, "switch_ms": 5.0}


@register
class BuildCpuStage(Stage):
    """The input ONNX -> the fastest CPU artifact (ONNX Runtime ONNX or OpenVINO IR) within tolerance."""

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
        has_ov = installed("openvino")
        nncf: bool | str = True
        if cfg.nncf == "off":
            nncf = "[cpu] nncf = \"off\""
        elif not installed("nncf"):
            nncf = "nncf is not installed (pip install nncf)"
        bf16 = None
        if precision == "bf16" and has_ov and cfg.backend != "onnxruntime":
            from optcli.runtime.openvino_runner import cpu_supports_bf16

            bf16 = cpu_supports_bf16()
        dynamic = encoder = False
        if precision == "int8":
            ops = op_histogram(load_onnx(artifact.path, load_weights=False))
            dynamic = "DynamicQuantizeLinear" in ops or "com.microsoft.DynamicQuantizeMatMul" in ops
            encoder = looks_like_encoder(ops)
        return plan(precision, cfg.backend, openvino=has_ov, nncf=nncf, bf16=bf16, encoder=encoder,
                    input_flavour=artifact.meta.get("flavour"), dynamic_input=dynamic)

    def skip_reason(self, artifact: Artifact) -> str | None:
        if self.ctx.target != "cpu":
            return f"target is {self.ctx.target} (build_tensorrt builds for it)"
        if artifact.format != "onnx":
            return f"input is {artifact.format}, not ONNX"
        check_request(self.ctx.config, "cpu")
        cands = self.candidates(artifact)
        built = [c for c in cands if not c.skip]
        why = "; ".join(f"{c.name}: {c.skip}" for c in cands if c.skip)
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
                "versions": {p: package_version(p) for p in ("onnxruntime", "openvino", "nncf")},
                # A search cut short by --time-budget is the answer to that budget only.
                **({"time_budget": self.ctx.config.time_budget} if self.ctx.config.time_budget else {})}

    def gate(self, accuracy: dict[str, Any]) -> str | None:
        t = self.tolerance()
        return check_tolerance(accuracy, t.cosine, t.max_abs, t.top1)

    # -- inputs of the work ------------------------------------------------------------------
    def _lineage(self, artifact: Artifact) -> list[Artifact]:
        """Artifacts of this run, newest first (the pipeline records them in ctx.facts)."""
        seen = list(self.ctx.facts.get("artifacts", {}).values())
        return [artifact] + [a for a in reversed(seen) if a.path != artifact.path]

    def _float_onnx(self, artifact: Artifact) -> Artifact:
        """The FP32 ONNX the input came from (the quantize stage's input; the input itself at fp32)."""
        for a in self._lineage(artifact):
            if a.format == "onnx" and a.precision == "fp32" and a.path.exists():
                return a
        raise StageError("cannot find the FP32 ONNX this model was made from",
                         hint="run the whole pipeline (optcli compile MODEL) rather than a single stage")

    def _openvino_source(self, artifact: Artifact) -> Artifact:
        """The oldest FP32 ONNX of the run (the exporter's, or the user's own), for OpenVINO: its
        frontend fuses for itself, and later rewrites cost it. NNCF INT8 of MiniLM ran 28% slower
        from the simplified graph (MatMuls as Reshape + Gemm + Reshape), NNCF INT8 of BERT-base 10%
        slower from the graph with onnxruntime's transformer fusions."""
        for a in reversed(self._lineage(artifact)):
            if a.format == "onnx" and a.precision == "fp32" and a.path.exists():
                return a
        return self._float_onnx(artifact)

    def _quantize_source(self, artifact: Artifact) -> Artifact:
        """The FP32 ONNX an OpenVINO INT8 candidate starts from: the exporter's graph, unless the user
        excluded nodes by name (the names are those of the quantize stage's input graph)."""
        q = self.ctx.config.quantize
        return self._float_onnx(artifact) if q.exclude_nodes else self._openvino_source(artifact)

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
        from optcli.quantize.evaluate import reference_outputs

        cfg = self.options()
        tol = self.tolerance()
        cands = self.candidates(artifact)
        float_art = self._float_onnx(artifact)
        specs, _ = io_specs(load_onnx(float_art.path, load_weights=False))
        calib, ev = self._data(specs)
        reference, names = reference_outputs(self.ctx.samples, float_art.path, float_art.sha256, ev)
        search, timing = self._search(cands, artifact, workdir, calib, ev, (reference, names, tol), cfg, float_art)
        if artifact.meta.get("fallback_deferred") and not any(c.passed for c in cands):
            # The INT8 stage left its fallback search to us: the last resort, now that nothing else passed.
            last = Candidate(f"{cands[0].name} (fallback)", ORT, "int8", "fallback")
            cands.append(last)
            _, timing["fallback"] = self._search([last], artifact, workdir, calib, ev, (reference, names, tol), cfg,
                                                 float_art)
        chosen, why = choose(cands)
        if chosen is None:
            ran = [c for c in cands if c.accuracy is not None]
            if not ran:
                raise StageError(f"no CPU candidate could be built: {why}", hint="use --backend onnxruntime")
            # Hand the most accurate one to the pipeline's gate, which fails the run with exit 3.
            chosen = max(ran, key=lambda c: c.accuracy.get("cosine_mean", 0.0))
            why = f"{why}; {chosen.name} (the most accurate) is kept for inspection"
        if search.degraded:
            why = f"{why} ({search.degraded})"
        out = self._place(chosen, artifact, workdir)
        if not cfg.keep_candidates:
            shutil.rmtree(workdir / "candidates", ignore_errors=True)
        for leftover in workdir.glob("*-named.onnx"):
            leftover.unlink()
        details = {
            "precision": self.ctx.config.quantize.precision, "backend": cfg.backend, "tolerance": tol.to_json(),
            "chosen": chosen.name, "why": why, "candidates": [c.to_json() for c in cands], "measurement": timing,
            "search": {k: v for k, v in search.to_json().items() if k != "candidates"},
            "evaluation": {"samples": len(ev), "data": ev.source, "labels": ev.labels is not None,
                           "reference": f"FP32 ONNX ({float_art.path.parent.name}/{float_art.path.name}) "
                                        "on onnxruntime"},
            "cpu": self._cpu_facts(), "candidates_kept": cfg.keep_candidates}
        accuracy = dict(chosen.accuracy or {})
        accuracy["reference"] = "fp32-onnx"
        return StageResult(out, details, accuracy=accuracy)

    def _search(self, cands: list[Candidate], artifact: Artifact, workdir: Path, calib: SampleSet | None,
                ev: SampleSet, judge: tuple, cfg: CpuConfig, float_art: Artifact) -> tuple[Any, dict[str, Any]]:
        """Build, check and measure the candidates through optcli/search (fast or thorough)."""
        from optcli.cpu.search_run import features, search_candidates
        from optcli.quantize.flavour import u8s8_saturates

        reference, names, tol = judge
        threads = self.ctx.config.bench.threads
        batch = self.ctx.config.bench.batch
        sample = ev.take(slice(0, batch)) if len(ev) >= batch else None
        arrays = sample.arrays if sample is not None else random_inputs(self.ctx.inputs, batch, seed=1,
                                                                        int_high=self.ctx.int_high)
        ops = op_histogram(load_onnx(float_art.path, load_weights=False))
        weights = float_art.size_bytes + sum((float_art.path.parent / f).stat().st_size
                                             for f in float_art.meta.get("external_data", []))
        feats = features(self.ctx.config.quantize.precision, ops, looks_like_encoder(ops), weights, u8s8_saturates())

        def folder(cand: Candidate) -> Path:
            return workdir / "candidates" / re.sub(r"[^A-Za-z0-9_.-]+", "_", cand.name)

        result, timing = search_candidates(
            cands, build=lambda c: self._build_cached(c, artifact, folder(c), (calib, ev), cands),
            check=lambda c: self._evaluate(c, reference, names, ev, tol, threads, artifact, float_art),
            open_runner=lambda c: self._open(c, threads), arrays=arrays, batch=batch, cfg=cfg, feats=feats,
            deadline=self.ctx.facts.get("deadline"))
        timing["inputs"] = "evaluation samples" if sample is not None else "random inputs"
        return result, timing

    def _build_cached(self, cand: Candidate, artifact: Artifact, folder: Path, data: tuple, cands: list[Candidate]) -> None:
        """_build, or the same candidate from the candidate cache (optcli/cpu/candidate_cache.py)."""
        from optcli.cpu import candidate_cache

        calib, ev = data
        if cand.backend != OV:  # the input as it is, or the deferred fallback: nothing worth caching
            self._build(cand, artifact, folder, calib, cands)
            return
        cache_dir = self.ctx.out_dir / candidate_cache.FOLDER
        key = candidate_cache.candidate_key(self._build_inputs(cand, artifact, calib, ev, cands))
        hit = None if self.ctx.config.force else candidate_cache.load(cache_dir, key, folder)
        if hit is not None:
            cand.path, build = hit
            cand.build = {**build, "cache": "hit"}
            hint = build.get("inference_precision", "f32")
            cand.runner_options = {"precision": {"f32": "fp32"}.get(hint, hint)}
            return
        self._build(cand, artifact, folder, calib, cands)
        if cand.path is not None:
            candidate_cache.store(cache_dir, key, cand.path, cand.build)

    def _build_inputs(self, cand: Candidate, artifact: Artifact, calib: SampleSet | None, ev: SampleSet,
                      cands: list[Candidate]) -> dict[str, Any]:
        """Everything a candidate's build depends on: the cache key hashes it."""
        q = {k: v for k, v in config_dict(self.ctx.config.quantize).items() if k not in ("calib", "eval")}
        inputs: dict[str, Any] = {
            # every graph the stages made (a recipe may start from any: the exporter's, the fused one); the
            # user's own file shows through them, and hashing a large .pt2 again costs seconds
            "candidate": [cand.name, cand.backend, cand.precision, cand.recipe],
            "lineage": [a.sha256 for a in self._lineage(artifact) if a.stage and a.path.is_file()], "quantize": q,
            "calib": calib.digest() if calib is not None else None, "eval": ev.digest(),
            "tolerance": self.tolerance().to_json(), "hint": OV_HINTS.get(cand.precision) or self._int8_remainder(),
            "versions": {p: package_version(p) for p in ("onnxruntime", "openvino", "nncf")}}
        if cand.recipe == "requantize-s8s8":  # its fallback runs only when no other OpenVINO INT8 passed
            inputs["fallback"] = not any(c.passed for c in cands if c.backend == OV and c.precision == "int8")
        return inputs

    def _build(self, cand: Candidate, artifact: Artifact, folder: Path, calib: SampleSet | None,
               cands: list[Candidate]) -> None:
        from optcli.cpu.openvino_ir import convert_onnx, nncf_int8

        facts = {"candidate": cand.name, "source_sha256": artifact.sha256}
        if cand.recipe == "input":
            cand.path = artifact.path
            cand.runner_options = dict(artifact.meta.get("runner_options", {}))
            cand.build = {"from": "the input artifact", "flavour": artifact.meta.get("flavour")}
            return
        if cand.recipe == "fallback":
            cand.path, cand.build = self._int8_fallback(self._float_onnx(artifact), folder)
            return
        hint = OV_HINTS.get(cand.precision) or self._int8_remainder()
        if cand.recipe == "convert":
            cand.path, cand.build = convert_onnx(self._openvino_source(artifact).path, folder, hint, facts)
        elif cand.recipe == "convert-input":
            cand.path, cand.build = convert_onnx(artifact.path, folder, hint, facts)
        elif cand.recipe in ("nncf", "nncf-transformer"):
            named = self._named_float(self._quantize_source(artifact), folder.parent.parent)
            q = self.ctx.config.quantize
            cand.path, cand.build = nncf_int8(named, folder, calib, transformer=cand.recipe == "nncf-transformer",
                                              exclude_nodes=self._excluded_nodes(named), exclude_ops=q.exclude_ops, facts=facts,
                                              precision=hint)
        elif cand.recipe == "requantize-s8s8":
            # Another OpenVINO INT8 candidate already within tolerance makes the (slow) fallback moot.
            fallback = not any(c.passed for c in cands if c.backend == OV and c.precision == "int8")
            onnx_path, info = self._requantize(self._quantize_source(artifact), folder / "qdq", fallback)
            cand.path, cand.build = convert_onnx(onnx_path, folder, hint, facts)
            cand.build.update(info)
        else:
            raise StageError(f"unknown candidate recipe {cand.recipe!r}")
        cand.build["inference_precision"] = hint
        cand.runner_options = {"precision": {"f32": "fp32"}.get(hint, hint)}

    def _int8_fallback(self, float_art: Artifact, folder: Path) -> tuple[Path, dict[str, Any]]:
        """The quantize stage's INT8 (same flavour, data and ranges) with its fallback search run here."""
        from optcli.quantize.int8_with_fallback import quantize_int8

        folder.mkdir(parents=True, exist_ok=True)
        a = self.ctx.config.accuracy
        made, details, _ = quantize_int8(self.ctx, float_art, folder, effective("int8", a.cosine, a.max_abs, a.top1),
                                         self.name)
        fb = details.get("fallback") or {}
        return made.path, {"from": float_art.path.name, "flavour": made.meta.get("flavour"),
                           "fallback_excluded": fb.get("excluded_nodes", []), "fallback_seconds": fb.get("seconds")}

    def _excluded_nodes(self, named: Path) -> list[str]:
        """--exclude patterns (node names, module paths, globs) as the node names of `named`."""
        from optcli.quantize.int8_with_fallback import user_excludes

        return user_excludes(self.ctx, load_onnx(named, load_weights=False))

    def _int8_remainder(self) -> str:
        """What the ops left in float compute in, in an OpenVINO INT8 model: BF16 where the CPU has it
        (OpenVINO's own default there), else FP32. The gate measures the result either way."""
        from optcli.runtime.openvino_runner import cpu_supports_bf16

        return "bf16" if cpu_supports_bf16() else "f32"

    def _named_float(self, float_art: Artifact, workdir: Path) -> Path:
        """The FP32 ONNX with every node named as the quantize stage names them (--exclude matches)."""
        from optcli.quantize.int8 import name_nodes

        named = workdir / f"float-{float_art.sha256[:12]}-named.onnx"
        if not named.exists():
            name_nodes(float_art.path, named)
        return named

    def _requantize(self, float_art: Artifact, folder: Path, fallback: bool) -> tuple[Path, dict[str, Any]]:
        """s8/s8 Q/DQ (symmetric int8 activations, zero point 0) through the quantize stage itself:
        same calibration data and range cache, same gate and automatic fallback."""
        from optcli.quantize.int8_with_fallback import quantize_int8

        config = copy.deepcopy(self.ctx.config)
        config.quantize.flavour = "qdq-s8s8"
        config.quantize.fallback = config.quantize.fallback and fallback
        folder.mkdir(parents=True, exist_ok=True)
        a = config.accuracy
        artifact, details, accuracy = quantize_int8(dataclasses.replace(self.ctx, config=config), float_art, folder,
                                                    effective("int8", a.cosine, a.max_abs, a.top1))
        result = StageResult(artifact, details, accuracy=accuracy)
        d = result.details
        why_off = "another OpenVINO INT8 candidate already meets the tolerance" if not fallback else "--no-fallback"
        info = {"flavour": "int8-qdq-s8s8", "quantize_attempts": len(d.get("attempts", [])),
                "fallback": "on" if config.quantize.fallback else f"off ({why_off})",
                "excluded_nodes": (d.get("fallback") or {}).get("excluded_nodes", []),
                "onnxruntime_accuracy": {k: round(v, 6) for k, v in (result.accuracy or {}).items()
                                         if k in ("cosine_mean", "top1_agreement") and isinstance(v, float)}}
        return result.artifact.path, info

    def _evaluate(self, cand: Candidate, reference: list, names: list[str], ev: SampleSet, tol: Tolerance,
                  threads: int | None, artifact: Artifact | None = None, float_art: Artifact | None = None) -> None:
        from optcli.cpu.measure import runner_accuracy

        known = artifact.meta.get("accuracy") if artifact is not None and cand.recipe == "input" else None
        if isinstance(known, dict) and float_art is not None and \
                known.get("judged") == {"reference": float_art.sha256, "eval": ev.digest()}:
            # The INT8 stage judged this very graph against the same FP32 model on the same data.
            cand.accuracy = {k: v for k, v in known.items() if k != "judged"}
            cand.build["accuracy_from"] = "the quantize stage (same graph, reference and held-out data)"
            cand.failure = check_tolerance(cand.accuracy, tol.cosine, tol.max_abs, tol.top1)
            return
        runner = self._open(cand, threads)
        try:
            cand.accuracy = runner_accuracy(runner, reference, names, ev)
        finally:
            runner.close()
        cand.failure = check_tolerance(cand.accuracy, tol.cosine, tol.max_abs, tol.top1)

    def _open(self, cand: Candidate, threads: int | None) -> Any:
        from optcli.runtime import open_runner

        fmt = "openvino" if cand.backend == OV else "onnx"
        return open_runner(cand.path, fmt, threads=threads, **cand.runner_options)

    def _place(self, chosen: Candidate, artifact: Artifact, workdir: Path) -> Artifact:
        """Put the chosen model at the stage folder's top level (model.xml + model.bin, or model.onnx)."""
        assert chosen.path is not None
        meta: dict[str, Any] = {"candidate": chosen.name, "runner_options": chosen.runner_options}
        if chosen.backend == OV:
            for src in (chosen.path, chosen.path.with_suffix(".bin")):
                shutil.move(str(src), str(workdir / src.name))
            meta["flavour"] = chosen.name
            return Artifact(workdir / chosen.path.name, "openvino", precision=chosen.precision, stage=self.name,
                            parent=artifact.sha256, backend="openvino", meta=meta)
        target = workdir / "model.onnx"
        if chosen.path != artifact.path:  # built here (the deferred INT8 fallback)
            shutil.move(str(chosen.path), str(target))
            return Artifact(target, "onnx", precision=chosen.precision, stage=self.name, parent=artifact.sha256,
                            backend="onnxruntime", meta={**meta, "flavour": chosen.build.get("flavour")})
        _link_or_copy(artifact.path, target)
        for extra in artifact.meta.get("external_data", []):
            _link_or_copy(artifact.path.parent / extra, workdir / extra)
        meta["flavour"] = artifact.meta.get("flavour")
        meta["external_data"] = list(artifact.meta.get("external_data", []))
        return Artifact(target, "onnx", precision=artifact.precision, stage=self.name, parent=artifact.sha256,
                        backend="onnxruntime", meta=meta)

    def _cpu_facts(self) -> dict[str, Any]:
        facts: dict[str, Any] = {"name": cpu_name(), "cores": os.cpu_count()}
        if installed("openvino"):
            from optcli.runtime.openvino_runner import cpu_capabilities

            facts["openvino_capabilities"] = cpu_capabilities()
        return facts


def _link_or_copy(src: Path, dst: Path) -> None:
    """A hard link where the file system allows (models can be large), else a copy."""
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)
