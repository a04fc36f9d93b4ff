"""The backend registry: one descriptor per runtime, and the lookups everything else asks.

A backend is a runtime optcli can build for and run on (onnxruntime, openvino, tensorrt, torch). All it
knows lives in its folder, optcli/backends/<name>/; the rest of optcli (the CLI's `--backend` choices,
`[cpu] backend` validation, the CPU build's candidates, `optcli.load`, `bench`, `profile`, `compare`,
`export-triton`) asks this module, never compares a format or backend name itself.

How to add a backend `foo` (nothing outside its folder changes but the one line of step 4):

1. optcli/backends/foo/__init__.py defines `BACKEND = Backend(name="foo", ...)` (fields below). It may
   import only this module and the standard library: the registry imports it whenever it is asked
   anything, including for `optcli --help`, which must stay fast.
2. optcli/backends/foo/runner.py: a `optcli.runtime.base.Runner` subclass, `__init__(self, path, **options)`
   (options: threads, concurrency, device, or its own), with `backend = "foo"`; heavy imports inside
   functions (`optcli.optional_imports.require("foo", "running foo models")` names the extra). Point
   `runner="optcli.backends.foo.runner:FooRunner"` at it.
3. Build recipes, one per file, optcli/backends/foo/recipes/<recipe>.py, each defining
   `RECIPE = SomeRecipe()`, an `optcli.backends.recipe.CpuRecipe` (read that module: `plan()` says which
   candidates it offers for a precision and why any is skipped, `build()` makes one from a
   `RecipeContext`: the input ONNX and its FP32 lineage, the user's model source and `.pt2` exported
   program where the input was PyTorch, the calibration and evaluation SampleSets, the precision, the
   tolerance and the [cpu] config; it returns a `Built` (path, format, runner options, details)).
   List them in build order: `cpu_recipes=("optcli.backends.foo.recipes.bar:RECIPE", ...)`. The CPU build
   gates every candidate on accuracy and measures them all in one interleaved run, whoever built them.
4. Register it: add "optcli.backends.foo" to BACKEND_MODULES below. That line is the registration; the
   backend then appears in `--backend`, `[cpu] backend`, the runner lookup, load/bench/profile/compare,
   and export-triton (when it names a Triton piece).

A backend that ends the pipeline for its own --target (`target="foo"`, a GPU builder) also says what the
ONNX stages must prepare for its builder: `takes_contrib_ops`, `int8_flavours`, `unpad_default`,
`dynamic_sequence`, `graph_check`, `int8_fp16_setting` (the stages ask `graph_needs(target)`, never a name),
and whether its build needs the device (`build_needs_device`).

Descriptors are plain data (a frozen dataclass); the code they name ("module:attribute" strings) is
imported only when used, by `load_object`. Order matters where two backends claim one suffix: the
first registered whose `format_of` (if any) recognises the file wins.
"""
from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from optcli.errors import MissingDependencyError, UsageError

# THE registration: one module per backend, each defining BACKEND. Add a backend by adding its line.
BACKEND_MODULES: tuple[str, ...] = (
    "optcli.backends.onnxruntime",
    "optcli.backends.openvino",
    "optcli.backends.tensorrt_rtx",     # before tensorrt: both open .engine files, its format_of tells them apart
    "optcli.backends.tensorrt",
    "optcli.backends.inductor",
    "optcli.backends.torch",
)

# The pipeline's interchange format: export writes it, the graph and quantize stages rewrite it, the
# build stages start from it. Not a backend: onnxruntime runs it, TensorRT and OpenVINO build from it.
ONNX = "onnx"


@dataclass(frozen=True)
class RecordedOption:
    """A runner option that a record optcli wrote (stage.json, a candidate-cache entry) may carry for this
    backend's artifacts: a word from `choices`, or a list of at most `max_names` identifiers. Only what a
    stage records goes here, never a path or a count: a file on disk must not decide where a runner
    writes (onnxruntime's profile_prefix) or how many threads it starts (docs/security.md)."""

    name: str
    choices: tuple[str, ...] = ()               # the option is one of these strings
    max_names: int = 0                          # or a list of up to this many names ([A-Za-z0-9_], <= 64 chars)


@dataclass(frozen=True)
class Backend:
    """What optcli knows about one runtime. Strings named "module:attribute" are imported lazily."""

    name: str                                   # --backend value, report `backend`, Runner.backend
    label: str                                  # how messages name it ("OpenVINO")
    formats: tuple[str, ...]                    # artifact formats it runs (report final.format); [0] its own
    suffixes: tuple[str, ...] = ()              # file suffixes it opens (lower case, with the dot)
    format_of: str | None = None                # "module:function" (Path) -> format | None, where the suffix
                                                # alone cannot tell (TorchScript vs pickle); None: not ours
    folder_files: tuple[str, ...] = ()          # a file whose presence makes a folder this backend's artifact
    companions: tuple[str, ...] = ()            # suffixes of files that are part of the model (an IR's .bin)
    package: str | None = None                  # import name that must be installed ("openvino")
    extra: str | None = None                    # pip extra that installs it: optcli[extra]
    runner: str | None = None                   # "module:Class", a Runner taking (path, **options)
    takes_optimization: bool = False            # its runner takes optimization= (a graph optimization level)
    shapeless: tuple[str, ...] = ()             # formats whose files record no input shapes: pins go to the
                                                # runner as inputs= (TorchScript)
    device_option: str | None = None            # "module:function" (str | None) -> the runner's device value
    cpu_recipes: tuple[str, ...] = ()           # "module:RECIPE" CpuRecipe objects, in the CPU build's plan order
    cpu_precisions: tuple[str, ...] = ()        # precisions its CPU recipes can compute in
    cpu_refusals: tuple[tuple[str, str, str], ...] = ()  # (precision, message, hint) when forced to one it lacks
    cpu_facts: str | None = None                # "module:function" (precision, CpuConfig) -> dict: facts its
                                                # recipes plan with (PlanRequest.facts[name]); pure data after
    machine_facts: str | None = None            # "module:function" () -> dict the CPU build records about the CPU
    priors: str | None = None                   # "module:PRIORS" the CPU search's priors for its recipes'
                                                # candidates (optcli.search.priors.Prior rows, with evidence)
    build_packages: tuple[str, ...] = ()        # other packages whose versions change what its recipes build
    heavy_builds: bool = False                  # its CPU builds hold whole extra copies of the weights (a
                                                # converted model, a compiled one): the fast search skips them
                                                # on models over 2 GB (optcli/cpu/search_run.py)
    target: str | None = None                   # the --target whose pipeline ends in building its artifact
    target_check: str | None = None             # "module:function" () -> str: why the target is usable here
                                                # (a summary), raising an OptcliError (exit 4) where it is not
    engine_build: str | None = None             # "module:Class" the build stage's work for its target
                                                # (an optcli.plan.build_work.BuildWork)
    toolkit: str | None = None                  # "module:TOOLKIT" the NVIDIA builder it builds with
                                                # (optcli.backends.tensorrt.toolkit)
    build_needs_device: bool = False            # building its artifact needs its accelerator here (TensorRT:
                                                # yes; TensorRT-RTX builds on any machine)
    # What the ONNX stages and export must know of the builder that ends its --target: graph_needs(target)
    # hands them these. The defaults are the cpu target's (the CPU build's backends, onnxruntime first).
    takes_contrib_ops: bool = True              # its builder takes onnxruntime's com.microsoft ops (FusedConv,
                                                # Attention); False: simplify and fuse keep plain ONNX ops
    int8_flavours: tuple[str, ...] = ()         # the INT8 flavours (optcli.quantize.flavour) it builds, [0] the
                                                # one `auto` gives; (): all, chosen per model as for the CPU
    unpad_default: bool = True                  # the unpad stage runs for its target; False: only where asked
                                                # ([unpad] tensorrt = true)
    dynamic_sequence: bool = True               # its builds take a symbolic sequence axis (text inputs' dim 1);
                                                # False: export keeps every dim but the batch static
    graph_check: str | None = None              # "module:function" (path, what) raising a StageError on what its
                                                # builder refuses: run on quantize's output and unpad's rewrite
    int8_fp16_setting: str | None = None        # "module:function" (config) -> bool: the float parts of an INT8
                                                # graph go FP16 ([tensorrt] int8_fp16, --no-fp16)
    runs_here: str | None = None                # "module:function" () -> str | None: why its artifacts cannot
                                                # run on this machine (latency "not measured"), None: they can
    profiler: str | None = None                 # "module:function" per-layer profile (resolved, **settings)
    triton_platform: str | None = None          # Triton's name for it: platform (or backend) in config.pbtxt
    triton: str | None = None                   # "module:TRITON" its optcli.deploy TritonBackend piece
    recorded_options: tuple[RecordedOption, ...] = ()  # runner options a record on disk may supply

    @property
    def format(self) -> str:
        """The format of the artifacts it builds."""
        return self.formats[0]

    @property
    def install_hint(self) -> str:
        return f"pip install 'optcli[{self.extra}]'" if self.extra else f"pip install {self.package}"

    def installed(self) -> bool:
        """Whether its package can be imported, without importing it (--help stays fast)."""
        return self.package is None or is_installed(self.package)

    def require_installed(self, purpose: str) -> None:
        """MissingDependencyError (exit 4, naming the extra) when its package is absent."""
        if not self.installed():
            raise MissingDependencyError(self.package or self.name, self.extra or "cpu", purpose)

    def offers_cpu(self) -> bool:
        return bool(self.cpu_recipes)


@dataclass(frozen=True)
class GraphNeeds:
    """What the ONNX stages (simplify, fuse, unpad, quantize) and export must know of the builder at the end
    of a --target: its descriptor's fields of the same names (Backend), or these defaults for the cpu target,
    where the CPU build chooses among the CPU backends from whatever graph the stages wrote."""

    label: str = "the CPU backends"             # how messages name the builder
    takes_contrib_ops: bool = True
    int8_flavours: tuple[str, ...] = ()
    unpad_default: bool = True
    dynamic_sequence: bool = True
    graph_check: str | None = None
    int8_fp16_setting: str | None = None

    def check_graph(self, path: Path, what: str) -> None:
        """Raise the builder's StageError where `path` has what it refuses; nothing where it has no check."""
        if self.graph_check:
            load_object(self.graph_check)(path, what)

    def int8_fp16(self, config: Any) -> bool | None:
        """Whether an INT8 graph's float parts go FP16 (the builder's setting); None where it has none."""
        return bool(load_object(self.int8_fp16_setting)(config)) if self.int8_fp16_setting else None


_index: dict[str, Backend] | None = None


def _load() -> dict[str, Backend]:
    global _index
    if _index is None:
        index: dict[str, Backend] = {}
        for module in BACKEND_MODULES:
            backend = importlib.import_module(module).BACKEND
            if backend.name in index:
                raise RuntimeError(f"two backends named {backend.name!r}")
            index[backend.name] = backend
        _index = index
    return _index


def reload() -> None:
    """Forget the loaded descriptors (after BACKEND_MODULES changed: tests)."""
    global _index
    _index = None


def all_backends() -> tuple[Backend, ...]:
    """Every registered backend, in registration order."""
    return tuple(_load().values())


def names() -> tuple[str, ...]:
    return tuple(_load())


def cpu_backends_without_onnx() -> tuple[str, ...]:
    """Installed backends with a CPU recipe that builds from the PyTorch model, needing no ONNX."""
    return tuple(b.name for b in all_backends() if b.installed()
                 and any(not load_object(ref).needs_onnx for ref in b.cpu_recipes))


def cpu_backend_names() -> tuple[str, ...]:
    """Backends the CPU build can build candidates for: `--backend` and `[cpu] backend` take these (and auto)."""
    return tuple(b.name for b in all_backends() if b.offers_cpu())


def get(name: str) -> Backend:
    """The backend called `name` (UsageError naming the known ones)."""
    backend = _load().get(name)
    if backend is None:
        raise UsageError(f"unknown backend {name!r}", hint=f"known backends: {', '.join(names())}")
    return backend


def for_format(fmt: str) -> Backend:
    """The backend that runs artifacts of format `fmt`."""
    for backend in all_backends():
        if fmt in backend.formats:
            return backend
    runnable = sorted(f for b in all_backends() if b.runner for f in b.formats)
    raise UsageError(f"no runner for {fmt!r} artifacts", hint=f"runnable formats: {', '.join(runnable)}")


def formats() -> tuple[str, ...]:
    return tuple(f for b in all_backends() for f in b.formats)


def suffixes() -> tuple[str, ...]:
    return tuple(s for b in all_backends() for s in b.suffixes)


def for_path(path: Path) -> tuple[Backend, str] | None:
    """(backend, format) of a model file by its suffix (and the backend's format_of where it has one);
    None when no backend opens it."""
    suffix = path.suffix.lower()
    for backend in all_backends():
        if suffix not in backend.suffixes:
            continue
        fmt = load_object(backend.format_of)(path) if backend.format_of else backend.format
        if fmt is not None:
            return backend, fmt
    return None


def for_folder(folder: Path) -> tuple[Backend, Path] | None:
    """(backend, model file) of a folder that holds one backend's artifact (a TensorRT engine cache
    entry's model.engine), or None. Where two backends name the same file, a backend's format_of
    (if any) must recognise it, as for_path does."""
    for backend in all_backends():
        for name in backend.folder_files:
            path = folder / name
            if path.is_file() and (backend.format_of is None or load_object(backend.format_of)(path) is not None):
                return backend, path
    return None


def for_target(target: str) -> Backend | None:
    """The backend whose build ends the pipeline for --target `target` (tensorrt, tensorrt-rtx), or None
    (cpu, auto: the CPU build chooses among the CPU backends)."""
    return next((b for b in all_backends() if b.target == target), None)


def graph_needs(target: str) -> GraphNeeds:
    """What the graph stages must know of the builder that ends --target `target` (GraphNeeds); the cpu
    target's defaults where no backend owns the target."""
    backend = for_target(target)
    if backend is None:
        return GraphNeeds()
    return GraphNeeds(label=backend.label, **{f.name: getattr(backend, f.name) for f in fields(GraphNeeds)
                                              if f.name != "label"})


def targets() -> tuple[str, ...]:
    """Every --target a backend ends the pipeline for, in registration order."""
    return tuple(b.target for b in all_backends() if b.target)


def is_onnx_file(path: Path) -> bool:
    """Whether `path` names an ONNX file (by its suffix: nothing is read)."""
    return path.suffix.lower() in for_format(ONNX).suffixes


def companion_files(path: Path) -> list[Path]:
    """Files that are part of the model at `path` besides itself (an OpenVINO IR's .bin), where present."""
    suffix = path.suffix.lower()  # by suffix alone: no format_of (hashing a file must not read it twice)
    wanted = [s for b in all_backends() if suffix in b.suffixes for s in b.companions]
    return [path.with_suffix(s) for s in wanted if path.with_suffix(s).is_file()]


def runner_class(fmt: str) -> type:
    """The Runner class for artifacts of format `fmt` (imports its module)."""
    backend = for_format(fmt)
    if backend.runner is None:
        raise UsageError(f"no runner for {fmt!r} artifacts", hint=f"{backend.label} builds them but cannot run them")
    return load_object(backend.runner)


def with_triton() -> tuple[Backend, ...]:
    """Backends export-triton can serve."""
    return tuple(b for b in all_backends() if b.triton)


def is_installed(module: str) -> bool:
    """Whether `module` can be imported, without importing it."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def load_object(ref: str) -> Any:
    """The attribute named by "package.module:attribute"."""
    module, _, attr = ref.partition(":")
    return getattr(importlib.import_module(module), attr)
