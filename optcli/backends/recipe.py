"""The CPU build-recipe interface: how a backend offers the CPU build its candidates.

A recipe is one way to make a CPU artifact (run the input ONNX as it is, convert it to an OpenVINO IR,
quantize with NNCF, compile the exported program with AOTInductor ...). One recipe per file under
optcli/backends/<name>/recipes/, an instance named RECIPE, listed in the backend's descriptor
(`cpu_recipes`). The CPU build asks every registered backend's recipes to `plan` for the precision asked,
skips what a forced `--backend` or a missing package rules out, `build`s the rest, gates each on
accuracy against the FP32 ONNX on held-out data, measures all in one interleaved run and keeps the
fastest within tolerance. A recipe builds; it does not evaluate, measure or choose.

    class ConvertRecipe(CpuRecipe):
        name = "convert"                 # the report's candidate `recipe`
        backend = "openvino"             # whose runner runs what it builds
        simplicity = 1                   # ties in speed and accuracy go to the simplest recipe

        def plan(self, req: PlanRequest) -> list[Candidate]:
            if req.precision not in ("fp32", "bf16"):
                return []
            return [self.candidate(f"openvino-{req.precision}", req.precision)]

        def build(self, cand: Candidate, ctx: RecipeContext) -> Built:
            xml, facts = convert_onnx(ctx.first_float_onnx().path, ctx.folder, ...)
            return Built(xml, "openvino", runner_options={"precision": ...}, details=facts)

Raise an OptcliError (or let the backend's own exception through) when a build fails: that candidate
fails with the first line of the message and the others still compete.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, NotRequired, TypeAlias, TypedDict

from optcli.accuracy_summary import AccuracySummary, headline
from optcli.backends.registry import ONNX
from optcli.errors import StageError
from optcli.plan.stage_names import StageName

if TYPE_CHECKING:
    from optcli.artifact import Artifact
    from optcli.backends.torch.loader import ModelSource, TorchModel
    from optcli.calibration.dataset import SampleSet
    from optcli.cpu.options import CpuConfig
    from optcli.quantize.tolerance import Tolerance
    from optcli.search.search import EntryFacts
    from optcli.stages.base import StageContext


# What a backend's recipes plan with (its descriptor's `cpu_facts`): whether NNCF can run (True or why not),
# whether the CPU has BF16 (None: not asked) ...
PlanFacts: TypeAlias = dict[str, bool | str | None]


class CandidateLatency(TypedDict):
    """A measured candidate's latency (ms, at the search's batch): the report's candidate `latency_ms`."""

    p50: float
    p90: float
    mean: float
    min: float
    cv: float
    runs: int
    p50_ci: list[float]         # the median's bootstrap 95% interval


class CandidateJSON(TypedDict):
    """A candidate as the build stage's details write it (`candidates`)."""

    name: str
    backend: str
    precision: str
    recipe: str
    status: str                 # passed | failed | skipped
    search: NotRequired[EntryFacts]
    reason: NotRequired[str]
    build: NotRequired[dict[str, object]]
    runner_options: NotRequired[dict[str, object]]
    accuracy: NotRequired[dict[str, float]]
    latency_ms: NotRequired[CandidateLatency]


@dataclass
class Candidate:
    """One way to run the model on this CPU: planned, then built, evaluated and measured."""

    name: str                       # e.g. openvino-int8-nncf
    backend: str                    # the registered backend whose runner runs it
    precision: str                  # fp32 | bf16 | fp16 | int8 (what the graph computes in)
    recipe: str                     # the recipe's name: input | convert | nncf ... (optcli/backends/*/recipes/)
    skip: str | None = None         # why it is not built
    path: Path | None = None        # the built model (.onnx, .xml ...)
    runner_options: dict[str, object] = field(default_factory=dict)
    build: dict[str, object] = field(default_factory=dict)  # how it was made, build seconds (the recipe's facts)
    accuracy: AccuracySummary | None = None
    failure: str | None = None      # the tolerance it missed, or why it did not build/run
    latency: CandidateLatency | None = None
    format: str | None = None       # the built model's artifact format
    simplicity: int = 9             # ties go to fewer moving parts (0: the input as it is)
    builder: CpuRecipe | None = field(default=None, repr=False, compare=False)  # the recipe that builds it
    search: EntryFacts | None = None  # prediction, seconds per phase (optcli/search)

    @property
    def passed(self) -> bool:
        return self.skip is None and self.accuracy is not None and self.failure is None

    @property
    def p50(self) -> float | None:
        return self.latency.get("p50") if self.latency else None

    def to_json(self) -> CandidateJSON:
        status = "skipped" if self.skip else ("passed" if self.passed else "failed")
        out: CandidateJSON = {"name": self.name, "backend": self.backend, "precision": self.precision,
                              "recipe": self.recipe, "status": status}
        if self.search:
            out["search"] = self.search
        if self.skip:
            out["reason"] = self.skip
            return out
        if self.failure:
            out["reason"] = self.failure
        out["build"] = self.build
        out["runner_options"] = self.runner_options
        if self.accuracy is not None:
            keys = ("cosine_mean", "cosine_min", "max_abs_err", "top1_agreement", "top1_accuracy")
            out["accuracy"] = headline(self.accuracy, keys)
        if self.latency is not None:
            out["latency_ms"] = self.latency
        return out


@dataclass(frozen=True)
class PlanRequest:
    """What planning knows before anything is built (pure data: tests build one by hand)."""

    precision: str                              # fp32 | bf16 | fp16 | int8
    backend: str = "auto"                       # --backend / [cpu] backend
    input_flavour: str | None = None            # the quantize stage's flavour of the input (int8-qdq-u8s8 ...)
    dynamic_input: bool = False                 # the input ONNX is dynamically quantized
    encoder: bool = False                       # the input ONNX looks like a transformer encoder
    input_format: str = "onnx"                  # the CPU build's input artifact format
    torch_source: bool = False                  # the user's model is PyTorch (a .pt2 or module to build from)
    batch: int = 1                              # the batch candidates are measured at ([bench] batch)
    installed: dict[str, bool] = field(default_factory=dict)   # backend name -> installed (absent: ask)
    facts: dict[str, PlanFacts] = field(default_factory=dict)  # backend name -> its cpu_facts()
    no_int8_graph: str | None = None            # int8: why the CPU build's input is not the quantize stage's INT8 graph


@dataclass
class Built:
    """What a recipe made: the model file, its format, how to open it, and how it was made."""

    path: Path
    format: str
    runner_options: dict[str, object] = field(default_factory=dict)
    details: dict[str, object] = field(default_factory=dict)    # the report's candidate `build`


@dataclass
class RecipeContext:
    """Everything a recipe may read to build one candidate."""

    stage: StageContext                         # the run: config, the user's model, inputs, facts
    artifact: Artifact                          # the CPU build's input ONNX (quantized where int8)
    lineage: list[Artifact]                     # this run's artifacts, newest first (`artifact` first)
    calib: SampleSet | None                     # calibration samples (int8), None otherwise
    eval: SampleSet                             # held-out evaluation samples (the gate runs on these)
    precision: str
    tolerance: Tolerance
    cpu: CpuConfig
    workdir: Path                               # the stage's folder: files candidates share
    folder: Path                                # this candidate's own folder (create it)
    candidates: list[Candidate]                 # every candidate of this run (earlier ones already gated)
    records: dict[str, str] = field(default_factory=dict)  # facts to record in what it builds

    @property
    def source(self) -> ModelSource:
        """The user's model as given (path and format)."""
        return self.stage.source

    @property
    def torch_model(self) -> TorchModel | None:
        """The loaded PyTorch model where the input was PyTorch (module, example inputs), else None."""
        return self.stage.torch_model

    @property
    def exported_program(self) -> Path | None:
        """The user's torch.export program (.pt2) where that was the input, else None."""
        return self.stage.source.path if self.stage.source.format == "pt2" else None

    def float_onnx(self) -> Artifact:
        """The newest FP32 ONNX of the run (the quantize stage's input; the input itself at fp32)."""
        return newest_float_onnx(self.lineage)

    def first_float_onnx(self) -> Artifact:
        """The oldest FP32 ONNX of the run: the exporter's, or the user's own; with the unpad stage's
        rewrite where that stage applied it (made and proven here, once per run, on first use: the
        padded positions are not computed, whichever graph a candidate starts from)."""
        first = oldest_float_onnx(self.lineage)
        unpad = next((a for a in self.lineage if a.stage == StageName.UNPAD and a.format == ONNX), None)
        bucket = unpad.meta.get("unpad_bucket") if unpad is not None else None
        if unpad is None or unpad.path == first.path or not isinstance(bucket, int) or not 1 <= bucket <= 4096:
            return first
        if unpad.parent == first.sha256:  # the stage rewrote this very graph (the fast search's route)
            return unpad
        from optcli.unpad.apply import unpadded_twin

        twin, _ = unpadded_twin(first, bucket, self.stage, self.workdir,
                                known_axes=unpad.meta.get("unpad_sequence_outputs"))
        return twin or first

def _float_onnx(lineage: list[Artifact]) -> list[Artifact]:
    return [a for a in lineage if a.format == ONNX and a.precision == "fp32" and a.path.exists()]


def newest_float_onnx(lineage: list[Artifact]) -> Artifact:
    """The first FP32 ONNX of `lineage` (newest first) that still exists."""
    found = _float_onnx(lineage)
    if not found:
        raise StageError("cannot find the FP32 ONNX this model was made from",
                         hint="run the whole pipeline (optcli compile MODEL) rather than a single stage")
    return found[0]


def oldest_float_onnx(lineage: list[Artifact]) -> Artifact:
    """The last FP32 ONNX of `lineage` (newest first): the exporter's graph, or the user's own ONNX."""
    return (_float_onnx(lineage) or [newest_float_onnx(lineage)])[-1]


class CpuRecipe(ABC):
    """One way to build a CPU candidate (see the module docstring)."""

    name: ClassVar[str]                         # the candidate's `recipe` in the report
    backend: ClassVar[str]                      # the registered backend that runs what it builds
    simplicity: ClassVar[int] = 5               # 0 = the input as it is; higher = more moving parts
    needs_onnx: ClassVar[bool] = True           # False: builds from the PyTorch model (the run needs no ONNX)
    needs_int8_graph: ClassVar[bool] = False    # int8: builds from the quantize stage's INT8 graph
    # Builds from the run's first float ONNX (the exporter's graph, or its unpad rewrite), never from what
    # simplify and fuse wrote (at INT8 unless --exclude names nodes): the fast route's test at FP32 / BF16.
    starts_from_export: ClassVar[bool] = False

    @abstractmethod
    def plan(self, req: PlanRequest) -> list[Candidate]:
        """The candidates it offers for req.precision ([] for none); a candidate it cannot build here
        carries its reason in `skip` so the report says why it is absent."""

    @abstractmethod
    def build(self, cand: Candidate, ctx: RecipeContext) -> Built:
        """Build `cand` (files under ctx.folder, or the input itself) and say what was made."""

    def candidate(self, name: str, precision: str, skip: str | None = None) -> Candidate:
        """A planned candidate of this recipe."""
        return Candidate(name, self.backend, precision, self.name, skip, simplicity=self.simplicity, builder=self)
