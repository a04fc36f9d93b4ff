"""The build stage's work on the CPU: the fastest CPU artifact at the accuracy asked for, chosen by measurement.

For `--target cpu` (and `auto` without a usable GPU) it builds the candidates the registered backends'
recipes offer for the requested precision (optcli/backends/<name>/recipes/, planned by
optcli/cpu/candidates.py: today ONNX Runtime on the input ONNX; OpenVINO IRs in FP32, BF16, or INT8 from
the quantize stage's Q/DQ, re-quantized s8/s8 Q/DQ or NNCF), checks each against the FP32 ONNX on
held-out data with the quantize stages' tolerance, measures them in ONE interleaved run, and keeps
the fastest that meets the tolerance. Which candidates are built and how long they are measured is
the search's (optcli/search/, driven by optcli/cpu/search_run.py): fast by default (the predicted
winner first, another only while it could still win, sequential elimination), thorough on request
(every candidate). Every candidate's build, accuracy, latency and seconds is in the stage details;
`--backend` forces one backend.

The stage is reported as skipped when there is nothing to choose (one candidate: the input as it is).
"""
from __future__ import annotations

import dataclasses
import os
import re
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from optcli.accuracy import budget_used, check_tolerance
from optcli.accuracy_summary import AccuracySummary
from optcli.artifact import Artifact, onnx_external_files
from optcli.backends import registry
from optcli.backends.recipe import PlanRequest, RecipeContext, newest_float_onnx
from optcli.calibration.dataset import SampleSet
from optcli.calibration.identity import data_identity
from optcli.config import AUTO
from optcli.cpu.candidates import Candidate, backend_facts, choose, plan
from optcli.cpu.int8_vs_fp32 import Versus
from optcli.cpu.options import CpuConfig, check_request, cpu_config
from optcli.environment import cpu_name, package_version
from optcli.errors import StageError, UsageError
from optcli.onnx_model import graph_view, io_specs, looks_like_encoder, op_histogram
from optcli.plan.build_choice import builds_on_cpu
from optcli.plan.build_work import BuildWork
from optcli.quantize.tolerance import Tolerance, effective
from optcli.stages.base import StageResult, config_dict
from optcli.tensor_spec import random_inputs
from optcli.unpad.apply import UNPADDED_SOURCE

if TYPE_CHECKING:
    from optcli.cpu.search_run import Measurement
    from optcli.search.search import SearchResult

# An FP32 conversion must be near-exact; other precisions use the quantize stages' defaults.
FP32_COSINE = 0.9999
QUICK_BUDGET = {"min_rounds": 3, "min_seconds": 0.5, "max_seconds": 5.0, "block_ms": 20.0, "switch_ms": 5.0}


class CpuBuild(BuildWork):
    """The input ONNX -> the fastest CPU artifact (of any registered backend's recipes) within tolerance."""

    measure_optimization = "all"  # candidates are compared as deployed; Q/DQ needs ORT's optimizer

    @classmethod
    def validate(cls, config: Any) -> None:
        # Impossible requests fail before anything runs; with target auto that waits for the probe.
        if config.target != AUTO and (builds_on_cpu(config.target) or config.extra.get("cpu")):
            check_request(config, config.target)  # with a backend's target, [cpu] is refused there
        else:
            cpu_config(config)

    # -- planning ----------------------------------------------------------------------------
    def options(self) -> CpuConfig:
        cfg = cpu_config(self.ctx.config)
        raw = self.ctx.config.extra.get("cpu", {})
        given = set(raw) if isinstance(raw, dict) else set()
        if not self.ctx.config.bench.enabled and not given & QUICK_BUDGET.keys():
            # --no-bench asks for no latency work around stages; the choice still needs a measurement,
            # a short one (a clear winner still shows; a near tie is then decided by accuracy).
            cfg = dataclasses.replace(cfg, **QUICK_BUDGET)  # type: ignore[arg-type]  # float fields only
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
        dynamic = encoder = False
        no_int8_graph = None
        if precision == "int8" and artifact.format == registry.ONNX:
            ops = op_histogram(graph_view(artifact.path))
            dynamic = "DynamicQuantizeLinear" in ops or "com.microsoft.DynamicQuantizeMatMul" in ops
            encoder = looks_like_encoder(ops)
            if artifact.precision != "int8":  # the fast search's route left the quantize stage out
                route = self.ctx.plan.route
                no_int8_graph = (f"not built (fast search): the quantize stage did not run ({route.skip})"
                                 if route is not None and route.skip else "the quantize stage made no INT8 graph")
        return plan(PlanRequest(precision, cfg.backend, input_flavour=artifact.meta.get("flavour"),
                                dynamic_input=dynamic, encoder=encoder, input_format=artifact.format,
                                torch_source=self.ctx.source.is_torch, batch=self.ctx.config.bench.batch,
                                facts=backend_facts(precision, cfg), no_int8_graph=no_int8_graph))

    def skip_reason(self, artifact: Artifact) -> str | None:
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
        if not built and artifact.format != registry.ONNX:  # the export made no ONNX: not the user's input
            raise StageError(f"no CPU backend here can run {self.ctx.config.quantize.precision} without ONNX "
                             f"(the export stage made none): {why}",
                             hint="see the export stage's error; or install the backend it names")
        if not built:
            raise UsageError(f"no CPU backend here can run {self.ctx.config.quantize.precision}: {why}",
                             hint="pick another precision, or install the backend it names")
        if len(built) == 1 and built[0].recipe == "input":
            return f"nothing to choose: {built[0].name} runs the input as it is ({why})"
        return None

    def fingerprint(self) -> dict[str, object]:
        q = config_dict(self.ctx.config.quantize)
        q.update(data_identity(q))
        bench = self.ctx.config.bench
        return {"cpu": dataclasses.asdict(self.options()), "quantize": q, "tolerance": self.tolerance().to_json(),
                "bench": {"batch": bench.batch, "threads": bench.threads},
                # The choice is a measurement on this machine with these libraries.
                "machine": {"cpu": cpu_name(), "cores": os.cpu_count()},
                "versions": {p: package_version(p) for b in registry.all_backends() if b.offers_cpu()
                             for p in (b.package, *b.build_packages) if p},
                # A search cut short by --time-budget is the answer to that budget only.
                **({"time_budget": self.ctx.config.time_budget} if self.ctx.config.time_budget else {})}

    def reuse_check(self, accuracy: AccuracySummary) -> str | None:
        return self.gate(accuracy)  # within this stage's tolerance of the user's model, as when it was built

    def gate(self, accuracy: AccuracySummary) -> str | None:
        t = self.tolerance()
        return check_tolerance(accuracy, t.cosine, t.max_abs, t.top1)

    # -- inputs of the work ------------------------------------------------------------------
    def _lineage(self, artifact: Artifact) -> list[Artifact]:
        """Artifacts of this run, newest first (the pipeline records them in the run's state)."""
        seen = list(self.ctx.state.artifacts.values())
        return [artifact] + [a for a in reversed(seen) if a.path != artifact.path]

    def heldout_rows(self, before: Artifact) -> SampleSet:
        if before.format != registry.ONNX:
            return self._data(self.ctx.inputs)[1]
        float_art = newest_float_onnx(self._lineage(before))
        return self._data(io_specs(graph_view(float_art.path))[0])[1]

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
        judge = (reference, names, tol)
        search, timing = self._search(cands, artifact, workdir, calib, ev, judge, cfg, float_art)
        route, step = self.ctx.plan.route, self.ctx.plan.last_resort
        if step is not None and step.due(artifact.meta, any(c.passed for c in cands)):
            # The plan's last resort, now that nothing else passed: the INT8 stage's own work (with its fallback
            # search), which it deferred to us, or which the route predicted would not be needed.
            own = next((c for c in cands if c.recipe == "input"), cands[0])
            last = Candidate(step.candidate_name(own.name, own.backend), own.backend, "int8", "fallback", simplicity=8)
            cands.append(last)
            _, timing["fallback"] = self._search([last], artifact, workdir, calib, ev, judge, cfg, float_art)
        chosen, why = choose(cands)
        if chosen is None:
            ran = [c for c in cands if c.accuracy is not None]
            if not ran:
                raise StageError(f"no CPU candidate could be built: {why}", hint="use --backend onnxruntime")
            # Hand the most accurate one to the pipeline's gate, which fails the run with exit 3.
            chosen = max(ran, key=lambda c: (c.accuracy or {}).get("cosine_mean", 0.0))
            why = f"{why}; {chosen.name} (the most accurate) is kept for inspection"
        if search.degraded:
            why = f"{why} ({search.degraded})"
        allow_float = self.ctx.config.quantize.allow_float and float_art is not None
        versus = self._against_fp32(chosen, float_art, ev, timing, always=allow_float)
        floated = _float_instead(chosen, versus) if allow_float else None
        if versus is not None and versus.note() and floated is None:
            why = f"{why}; {versus.note()}"
        if artifact.format != registry.ONNX and artifact.stage is not None:
            why += "; the export to ONNX failed (see the export stage), so only backends that build from PyTorch ran"
        if floated is not None:
            assert float_art is not None
            why = f"--allow-float: shipped the FP32 graph on onnxruntime: {floated}; among the INT8 candidates: {why}"
            out = self._place_input(float_art, workdir, registry.for_format(registry.ONNX).name,
                                    {"candidate": FLOAT_CHOICE, "runner_options": {}, "flavour": None})
            chosen_name, accuracy = FLOAT_CHOICE, _identical(reference, names)
        else:
            out = self._place(chosen, artifact, workdir)
            chosen_name, accuracy = chosen.name, {**(chosen.accuracy or {})}
        if not cfg.keep_candidates:
            shutil.rmtree(workdir / "candidates", ignore_errors=True)
        for leftover in workdir.glob("*-named.onnx"):
            leftover.unlink()
        details = {
            "precision": self.ctx.config.quantize.precision, "backend": cfg.backend, "tolerance": tol.to_json(),
            "chosen": chosen_name, "why": why, "candidates": [c.to_json() for c in cands], "measurement": timing,
            "search": {k: v for k, v in search.to_json().items() if k != "candidates"},
            "evaluation": {"samples": len(ev), "data": ev.source, "labels": ev.labels is not None,
                           "reference": f"FP32 ONNX ({float_art.path.parent.name}/{float_art.path.name}) "
                                        "on onnxruntime" if float_art else "the PyTorch model, eager (no ONNX)"},
            "cpu": self._cpu_facts(), "candidates_kept": cfg.keep_candidates}
        if calib is not None and calib.capped:  # said where the quantize stage did not run to say it
            from optcli.calibration.split import cap_note

            details["calibration"] = cap_note(calib, self.ctx.config.quantize)
        if versus is not None:  # where the priors do not assume INT8 beats FP32 (optcli/cpu/int8_vs_fp32.py)
            details["int8_vs_fp32"] = versus.to_json()
        if route is not None:  # the fast search's route (optcli/cpu/route.py): which stages it left out
            details["route"] = route.to_json()
        twins = self.ctx.state.unpad_twins
        if twins:  # the unpad rewrite of the exporter's graph, made for the candidates that start from it
            details["unpad_source"] = [{k: v for k, v in t.items() if k != "path"} for t in twins.values()]
        leftover = workdir / UNPADDED_SOURCE
        if leftover.exists() and not cfg.keep_candidates:
            leftover.unlink()
        accuracy["reference"] = "fp32-onnx" if float_art else "torch-fp32"
        return StageResult(out, details, accuracy=accuracy)

    def _against_fp32(self, chosen: Candidate, float_art: Artifact | None, ev: SampleSet,
                      timing: Measurement, always: bool = False) -> Versus | None:
        """The chosen INT8 against the FP32 reference graph, measured where the priors do not assume INT8 wins
        or `always` (--allow-float: the choice between them follows the measurement), on the search's inputs:
        evaluation samples where there are enough."""
        from optcli.cpu import int8_vs_fp32
        from optcli.cpu.isa import detect
        from optcli.runtime.pool import session_options
        from optcli.search.priors import Features

        if chosen.precision != "int8" or not chosen.passed or float_art is None or "features" not in timing:
            return None
        if not always and int8_vs_fp32.assumed_faster(Features(**timing["features"])):
            return None
        threads, batch = self.ctx.config.bench.threads, self.ctx.config.bench.batch
        arrays = (ev.take(slice(0, batch)).arrays if len(ev) >= batch else
                  random_inputs(io_specs(graph_view(float_art.path))[0], batch, seed=1, int_high=self.ctx.int_high))
        fp32 = self.ctx.runners.borrow(float_art.path, registry.ONNX,
                                       **session_options(registry.ONNX, threads, "all", {}))
        int8 = self._open(chosen, threads)
        try:
            return int8_vs_fp32.measure(int8, fp32, arrays, (chosen.name, "FP32 ONNX on onnxruntime"), detect().label,
                                        calls=self.options().calls_per_round)
        finally:
            self.ctx.runners.release(int8)
            self.ctx.runners.release(fp32)

    def _reference(self, artifact: Artifact) -> tuple[Artifact | None, tuple]:
        """The FP32 ONNX (None where the run made no ONNX) and (calibration set, evaluation set, reference
        outputs on it, output names): from the FP32 ONNX on onnxruntime, else from PyTorch eager."""
        from optcli.quantize.evaluate import reference_outputs, runner_outputs

        if artifact.format == registry.ONNX:
            float_art = newest_float_onnx(self._lineage(artifact))
            graph = graph_view(float_art.path)
            if self.ctx.config.quantize.precision == "int8":  # a candidate's build would only fail on a typo
                from optcli.quantize.int8_with_fallback import earlier_op_types
                from optcli.quantize.module_names import check_exclude_ops

                ops = self.ctx.config.quantize.exclude_ops
                check_exclude_ops(ops, {n.op_type for n in graph.graph.node}, earlier_op_types(self.ctx, ops))
            specs, _ = io_specs(graph)
            calib, ev = self._data(specs)  # the FP32 outputs are the INT8 stage's, computed once per run
            outs = reference_outputs(self.ctx.state.fp32_outputs, float_art.path, float_art.sha256, ev,
                                          self.ctx.runners, self.ctx.config.bench.threads)
            return float_art, (calib, ev, *outs)
        from optcli.backends.torch.runner import TorchRunner

        assert self.ctx.torch_model is not None  # skip_reason: a non-ONNX input is PyTorch
        calib, ev = self._data(self.ctx.inputs)
        with TorchRunner(self.ctx.torch_model.module, self.ctx.inputs) as runner:
            reference = runner_outputs(runner, ev)
            return None, (calib, ev, reference, [o.name for o in runner.outputs])

    def _search(self, cands: list[Candidate], artifact: Artifact, workdir: Path, calib: SampleSet | None,
                ev: SampleSet, judge: tuple, cfg: CpuConfig,
                float_art: Artifact | None) -> tuple[SearchResult, Measurement]:
        """Build, check and measure the candidates through optcli/search (fast or thorough)."""
        from optcli.cpu.search_run import features, search_candidates
        from optcli.quantize.flavour import u8s8_saturates

        reference, names, tol = judge
        threads, batch = self.ctx.config.bench.threads, self.ctx.config.bench.batch
        sample = ev.take(slice(0, batch)) if len(ev) >= batch else None
        arrays = sample.arrays if sample is not None else random_inputs(self.ctx.inputs, batch, seed=1,
                                                                        int_high=self.ctx.int_high)
        ops = op_histogram(graph_view(float_art.path)) if float_art else {}
        weights = float_art.size_bytes if float_art else self.ctx.source.path.stat().st_size
        feats = features(self.ctx.config.quantize.precision, ops, looks_like_encoder(ops), weights, u8s8_saturates())

        def build(cand: Candidate) -> None:
            folder = workdir / "candidates" / re.sub(r"[^A-Za-z0-9_.-]+", "_", cand.name)
            self._build(cand, RecipeContext(
                stage=self.ctx, artifact=artifact, lineage=self._lineage(artifact), calib=calib, eval=ev,
                precision=self.ctx.config.quantize.precision, tolerance=tol, cpu=cfg, workdir=workdir,
                folder=folder, candidates=cands, records={"candidate": cand.name, "source_sha256": artifact.sha256}))

        result, timing = search_candidates(
            cands, build=build,
            check=lambda c: self._evaluate(c, reference, names, ev, tol, threads, artifact, float_art),
            open_runner=lambda c: self._open(c, threads), release_runner=self.ctx.runners.release, arrays=arrays,
            batch=batch, cfg=cfg, feats=feats, deadline=self.ctx.state.deadline,
            budget_used=lambda c: budget_used(c.accuracy or {}, tol.cosine, tol.max_abs, tol.top1),
            weight_bytes=weights)
        timing["inputs"] = "evaluation samples" if sample is not None else "random inputs"
        return result, timing

    def _build(self, cand: Candidate, ctx: RecipeContext) -> None:
        """The candidate's recipe, or the same build from the candidate cache; the deferred
        INT8 fallback is the quantize stage's own work, run here."""
        from optcli.cpu import candidate_cache

        if cand.recipe == "fallback":
            cand.path, cand.build = self._int8_fallback(ctx.float_onnx(), ctx.folder)
            cand.format, cand.runner_options = registry.ONNX, {}
            return
        assert cand.builder is not None
        cache_dir = self.ctx.out_dir / candidate_cache.FOLDER
        key = candidate_cache.candidate_key(candidate_cache.build_inputs(cand, ctx))
        hit = None if self.ctx.config.force else candidate_cache.load(cache_dir, key, ctx.folder)
        if hit is not None and isinstance(hit[1].get("format"), str) and hit[1]["format"] in registry.formats():
            cand.path, build = hit
            cand.format, cand.build = build["format"], {**build["details"], "cache": "hit"}
            cand.runner_options = build["runner_options"]
            return
        built = cand.builder.build(cand, ctx)
        if built.path != ctx.artifact.path:  # something built here (not the input as it is)
            candidate_cache.store(cache_dir, key, built.path, {"format": built.format, "details": built.details,
                                                               "runner_options": built.runner_options})
        cand.path, cand.format = built.path, built.format
        cand.runner_options, cand.build = built.runner_options, built.details

    def _int8_fallback(self, float_art: Artifact, folder: Path) -> tuple[Path, dict[str, object]]:
        """The quantize stage's INT8 (same flavour, data and ranges) with its fallback search run here."""
        from optcli.quantize.int8_with_fallback import quantize_int8

        folder.mkdir(parents=True, exist_ok=True)
        a = self.ctx.config.accuracy
        made, details, _ = quantize_int8(self.ctx, float_art, folder, effective("int8", a.cosine, a.max_abs, a.top1),
                                         self.name)
        fb = details.get("fallback") or {}
        return made.path, {"from": float_art.path.name, "flavour": made.meta.get("flavour"),
                           "fallback_excluded": fb.get("excluded_nodes", []), "fallback_seconds": fb.get("seconds")}

    def _evaluate(self, cand: Candidate, reference: list, names: list[str], ev: SampleSet, tol: Tolerance,
                  threads: int | None, artifact: Artifact | None = None, float_art: Artifact | None = None) -> None:
        from optcli.cpu.measure import runner_accuracy

        accuracy, source = self._known_accuracy(cand, reference, names, ev, artifact, float_art)
        if accuracy is None:
            runner = self._open(cand, threads)
            try:
                accuracy = runner_accuracy(runner, reference, names, ev)
            finally:
                self.ctx.runners.release(runner)
        else:
            cand.build["accuracy_from"] = source
        cand.accuracy = accuracy
        cand.failure = check_tolerance(accuracy, tol.cosine, tol.max_abs, tol.top1)

    @staticmethod
    def _known_accuracy(cand: Candidate, reference: list, names: list[str], ev: SampleSet,
                        artifact: Artifact | None, float_art: Artifact | None) -> tuple[AccuracySummary | None, str]:
        """The candidate's accuracy where running it again would give the same numbers, and whence; else None."""
        from optcli.cpu.measure import reference_accuracy

        if float_art is None:
            return None, ""
        known = artifact.meta.get("accuracy") if artifact is not None and cand.path == artifact.path else None
        if isinstance(known, dict) and known.get("judged") == {"reference": float_art.sha256, "eval": ev.digest()}:
            # The INT8 stage judged this very graph against the same FP32 model on the same data.
            return (cast("AccuracySummary", {k: v for k, v in known.items() if k != "judged"}),
                    "the quantize stage (same graph, reference and held-out data)")
        if cand.path == float_art.path and cand.format == registry.ONNX and not cand.runner_options:
            # The candidate is the reference graph, and the reference is its outputs on these rows on the
            # same pooled session (onnxruntime at "all", the bench threads; BERT-base FP32: 1.9 s).
            return reference_accuracy(reference, names, ev), "the FP32 reference (this graph, on the same session)"
        return None, ""

    def _open(self, cand: Candidate, threads: int | None) -> Any:
        """From the run's pool: the chosen candidate's runner serves its stage row and the final measurement."""
        from optcli.runtime.pool import session_options

        assert cand.path is not None and cand.format is not None  # a built candidate
        return self.ctx.runners.borrow(cand.path, cand.format,
                                       **session_options(cand.format, threads, "all", cand.runner_options))

    def _place(self, chosen: Candidate, artifact: Artifact, workdir: Path) -> Artifact:
        """Put the chosen model at the stage folder's top level: the input linked as model.<suffix> where
        it runs as it is, else the built file with its companions (an IR's model.xml + model.bin)."""
        assert chosen.path is not None and chosen.format is not None
        meta: dict[str, object] = {"candidate": chosen.name, "runner_options": chosen.runner_options}
        if chosen.path != artifact.path:
            for src in (chosen.path, *registry.companion_files(chosen.path)):
                shutil.move(str(src), str(workdir / src.name))
            meta["flavour"] = chosen.name
            return Artifact(workdir / chosen.path.name, chosen.format, precision=chosen.precision, stage=self.name,
                            parent=artifact.sha256, backend=chosen.backend, meta=meta)
        return self._place_input(artifact, workdir, chosen.backend, {**meta, "flavour": artifact.meta.get("flavour")})

    def _place_input(self, artifact: Artifact, workdir: Path, backend: str, meta: dict[str, object]) -> Artifact:
        """`artifact` linked (its external data copied) as the stage folder's model.<suffix>, to run on `backend`
        as it is."""
        target = workdir / f"model{artifact.path.suffix}"
        _link_or_copy(artifact.path, target)
        external = onnx_external_files(artifact.path) if registry.is_onnx_file(artifact.path) else []
        for extra in external:  # a copy: onnx.load refuses hard-linked external data
            shutil.copyfile(artifact.path.parent / extra, workdir / extra)
        meta = {**meta, "external_data": external}
        return Artifact(target, artifact.format, precision=artifact.precision, stage=self.name, parent=artifact.sha256,
                        backend=backend, meta=meta)

    def _cpu_facts(self) -> dict[str, object]:
        """The CPU's name and cores, and what each installed backend records of it (its `machine_facts`)."""
        facts: dict[str, object] = {"name": cpu_name(), "cores": os.cpu_count()}
        for backend in registry.all_backends():
            if backend.machine_facts and backend.installed():
                facts.update(registry.load_object(backend.machine_facts)())
        return facts


FLOAT_CHOICE = "onnxruntime-fp32-graph"  # --allow-float's choice: the FP32 reference graph, on onnxruntime


def _float_instead(chosen: Candidate, versus: Versus | None) -> str | None:
    """Why --allow-float ships the FP32 graph instead of `chosen` (None: INT8 stays)."""
    if not chosen.passed:
        return "no INT8 candidate met the tolerance on this CPU"
    if versus is not None and not versus.faster:
        return (f"INT8 was not faster: {versus.int8_name} {versus.int8_p50:.3f} ms vs FP32 {versus.fp32_p50:.3f} ms "
                f"p50 on this CPU ({versus.isa})")
    return None


def _identical(reference: list, names: list[str]) -> AccuracySummary:
    """The accuracy of the FP32 reference graph on onnxruntime: the reference itself (the same graph, runtime and
    held-out rows computed it), so the comparison is of those outputs with themselves."""
    from optcli.accuracy import compare_outputs

    return compare_outputs(reference, reference, names)


def _link_or_copy(src: Path, dst: Path) -> None:
    """A hard link where the file system allows (models can be large), else a copy."""
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)
