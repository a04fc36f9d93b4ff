"""ONNX -> serialized TensorRT engine, through the engine cache and a persistent timing cache.

Every function takes the `tensorrt` module as its first argument: the stage passes the real one,
contract tests pass a test double of exactly this API slice. The calls, all documented in the
TensorRT Python API for 10.x and 11.x (and used the same way by Polygraphy's
polygraphy/backend/trt/loader.py):

- trt.ILogger subclass with log(severity, msg), one per process; trt.Logger.{INTERNAL_ERROR,ERROR,WARNING}
- trt.init_libnvinfer_plugins(logger, "")           (before parsing AND before every deserialization)
- trt.Builder(logger); builder.create_network(flags); builder.create_builder_config();
  builder.create_optimization_profile(); builder.build_serialized_network(network, config) -> IHostMemory | None
- trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED  (10.x: value 1; 11.x is always strongly typed and ignores it)
- trt.OnnxParser(network, logger); parser.parse_from_file(path) -> bool; parser.num_errors;
  parser.get_error(i) -> .desc() .node() .node_name() .node_operator()
- network.num_inputs / num_outputs; network.get_input(i) / get_output(i) -> .name .shape .dtype .is_shape_tensor
- config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, bytes); config.builder_optimization_level;
  config.profiling_verbosity = trt.ProfilingVerbosity.DETAILED;
  config.hardware_compatibility_level = trt.HardwareCompatibilityLevel.*;
  config.set_flag(trt.BuilderFlag.VERSION_COMPATIBLE);
  config.add_optimization_profile(profile) -> index; profile.set_shape(name, min, opt, max);
  profile.set_shape_input(name, min, opt, max)   (values of shape-tensor inputs)
- config.create_timing_cache(bytes); config.set_timing_cache(cache, ignore_mismatch) -> bool;
  config.get_timing_cache().serialize(); cache.combine(other, ignore_mismatch) -> bool
- trt.Runtime(logger); runtime.engine_host_code_allowed; runtime.deserialize_cuda_engine(bytes) -> engine | None

tests/contract/tensorrt_api.py records each with its signature, bindings file and versions.

No precision flags are ever set: FP16 and INT8 come from the ONNX (casts, Q/DQ nodes), which is the
only way in 11.x and what a strongly typed 10.x network requires.
"""
from __future__ import annotations

import hashlib
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from optcli.atomic_write import atomic_path
from optcli.backends.tensorrt.engine_cache import CacheInfo, EngineCache, Lookup, cache_key, onnx_digest
from optcli.backends.tensorrt.logger import make_logger
from optcli.backends.tensorrt.metadata import EngineMetadata, TensorEntry, engine_io, network_io
from optcli.backends.tensorrt.options import BuildOptions, TensorRTConfig
from optcli.backends.tensorrt.profiles import InputProfile, profiles_json
from optcli.backends.tensorrt.toolkit import always_strongly_typed, is_rtx, toolkit_of
from optcli.errors import StageError, UsageError
from optcli.version import __version__

_HW_COMPAT = {"ampere+": "AMPERE_PLUS", "same-cc": "SAME_COMPUTE_CAPABILITY"}


@dataclass(frozen=True)
class Machine:
    """The facts an engine is tied to."""

    tensorrt_version: str
    gpu: str | None
    compute_capability: str | None
    cuda: str | None = None     # the CUDA major TensorRT was built for (cuda_build.py), not torch's
    toolkit: str = "tensorrt"   # the builder (optcli.backends.tensorrt.toolkit): tensorrt | tensorrt-rtx


@dataclass
class ParserIssue:
    """One ONNX parser error: which node, which op, what TensorRT said."""

    node: int
    node_name: str
    op: str
    message: str

    def describe(self) -> str:
        where = f"node {self.node}" + (f" {self.node_name!r}" if self.node_name else "")
        return f"{where} (op {self.op or '?'}): {self.message}"


class ParserFailure(StageError):
    """TensorRT's ONNX parser rejected the model; `issues` holds (node, op, message) per error."""

    def __init__(self, issues: list[ParserIssue], label: str = "TensorRT") -> None:
        shown = "; ".join(i.describe() for i in issues[:3]) or "the parser gave no reason"
        more = f" (+{len(issues) - 3} more)" if len(issues) > 3 else ""
        super().__init__(f"{label}'s ONNX parser rejected the model: {shown}{more}",
                         hint="the op or attribute is not supported by this TensorRT version; see "
                              "docs/tensorrt.md for the options (--target cpu, another opset, a plugin)")
        self.issues = issues


def create_network(trt: Any, builder: Any) -> Any:
    """A strongly typed network: 10.x needs the STRONGLY_TYPED flag; 11.x and TensorRT-RTX are always
    strongly typed (the flag is deprecated there and ignored), so they get no flags."""
    flags = 0 if always_strongly_typed(trt) else 1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED)
    network = builder.create_network(flags)
    if network is None:
        raise StageError("TensorRT could not create a network definition", hint="see TensorRT's log (--debug)")
    return network


def parse_onnx(trt: Any, network: Any, logger: Any, path: Path, data: bytes | None = None) -> Any:
    """Parse the ONNX into `network` and return the parser, which the caller keeps alive until the
    build ends (TensorRT: the parser owns the weights memory the network refers to).
    parse_from_file (not parse(bytes)) so external weight files beside the model are found; `data`: the
    serialized graph to parse instead, its external weights found beside `path` (pyOnnx.cpp parse(model, path)).
    ParserFailure with (node, op, message) for each parser error."""
    parser = trt.OnnxParser(network, logger)
    ok = parser.parse_from_file(str(path)) if data is None else parser.parse(data, str(path))
    if ok and parser.num_errors == 0:
        return parser
    issues = []
    for index in range(parser.num_errors):
        err = parser.get_error(index)
        issues.append(ParserIssue(node=int(err.node()), node_name=str(err.node_name() or ""),
                                  op=str(err.node_operator() or ""), message=str(err.desc()).strip()))
    raise ParserFailure(issues, toolkit_of(trt).label)


ShapeValues = dict[str, tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]]


def configure(trt: Any, builder: Any, network: Any, options: BuildOptions, profiles: list[InputProfile],
              shape_values: ShapeValues | None = None) -> Any:
    """The builder config: memory, optimization level, compatibility, detailed profiling verbosity,
    and one optimization profile (shapes of dynamic inputs, values of shape-tensor inputs)."""
    config = builder.create_builder_config()
    workspace, level = options.get("workspace"), options.get("builder_opt_level")
    if workspace:
        config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, int(workspace))
    if level is not None:
        config.builder_optimization_level = int(level)
    # Layer names and types for `optcli profile` (the engine inspector says "?" without it); it
    # changes no tactic (pyCore.cpp IBuilderConfig.profiling_verbosity; Polygraphy sets the same).
    config.profiling_verbosity = trt.ProfilingVerbosity.DETAILED
    hw = options.get("hardware_compat", "none")
    if is_rtx(trt) and (hw != "none" or options.get("version_compat")):
        # TensorRT-RTX engines run on any Ampere+ RTX GPU by design; it logs these settings as unsupported.
        raise UsageError("--hardware-compat and --version-compat are TensorRT options; TensorRT-RTX engines are "
                         "portable across RTX GPUs (compute 8.0+) without them", hint="drop those flags")
    if hw != "none":
        level = getattr(trt.HardwareCompatibilityLevel, _HW_COMPAT[hw], None)
        if level is None:  # SAME_COMPUTE_CAPABILITY arrived after 10.0
            raise UsageError(f"TensorRT {trt.__version__} has no hardware compatibility level {hw!r}",
                             hint="use --hardware-compat ampere+, or a newer TensorRT")
        config.hardware_compatibility_level = level
    if options.get("version_compat"):
        config.set_flag(trt.BuilderFlag.VERSION_COMPATIBLE)
    net_inputs, shape_inputs = {}, []
    for i in range(network.num_inputs):
        tensor = network.get_input(i)
        net_inputs[tensor.name] = tuple(int(d) for d in tensor.shape)
        if tensor.is_shape_tensor:  # its values, not its shape, need a range (pyGraph.cpp ITensor.is_shape_tensor)
            shape_inputs.append(tensor.name)
    values = shape_values or {}
    missing = [n for n in shape_inputs if n not in values]
    if missing:
        raise StageError(f"input {missing[0]!r} is a shape tensor (TensorRT needs the range of its values, "
                         "not of its shape)", hint="export the model with that shape as a constant, or build "
                         "through optcli.backends.tensorrt.builder.build_engine(..., "
                         "shape_values={name: (min, opt, max)})")
    dynamic = [p for p in profiles if p.dynamic and p.name not in shape_inputs]
    unknown = [p.name for p in dynamic if p.name not in net_inputs]
    if unknown:
        raise StageError(f"profile for {unknown[0]!r}, which TensorRT's network has no input of",
                         hint=f"network inputs: {', '.join(net_inputs)}")
    uncovered = [n for n, s in net_inputs.items() if -1 in s and n not in {p.name for p in dynamic}]
    if uncovered:
        raise StageError(f"input {uncovered[0]!r} is dynamic in TensorRT's network but has no profile",
                         hint=f"give one with --input {uncovered[0]}:MIN/OPT/MAX")
    if dynamic or shape_inputs:
        profile = builder.create_optimization_profile()
        for p in dynamic:
            _set_range(profile.set_shape, p.name, (p.min, p.opt, p.max), "shape")
        for name in shape_inputs:
            _set_range(profile.set_shape_input, name, values[name], "values")
        if config.add_optimization_profile(profile) < 0:
            raise UsageError("TensorRT rejected the optimization profile: "
                             + ", ".join(p.describe() for p in dynamic), hint="check MIN <= OPT <= MAX per input")
    return config


def _set_range(setter: Any, name: str, bounds: Any, what: str) -> None:
    """profile.set_shape / set_shape_input, whose bindings raise RuntimeError (pyCore.cpp
    PY_ASSERT_RUNTIME_ERROR) or TypeError on a bad range: a usage error naming the input, not a traceback."""
    mn, opt, mx = (tuple(int(d) for d in b) for b in bounds)
    problem = _range_problem(mn, opt, mx)
    if problem is None:
        try:
            setter(name, mn, opt, mx)
            return
        except (RuntimeError, TypeError, ValueError) as exc:
            problem = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    raise UsageError(f"bad profile {what} for input {name!r}: {_fmt(mn)} / {_fmt(opt)} / {_fmt(mx)} ({problem})",
                     hint=f"give MIN/OPT/MAX of one rank with 0 <= MIN <= OPT <= MAX in every dim, e.g. "
                          f"--input {name}:{_fmt(mn)}/{_fmt(mx)}/{_fmt(mx)}")


def _range_problem(mn: tuple[int, ...], opt: tuple[int, ...], mx: tuple[int, ...]) -> str | None:
    if not len(mn) == len(opt) == len(mx):
        return f"ranks {len(mn)}, {len(opt)}, {len(mx)} differ"
    if any(d < 0 or d >= 1 << 31 for d in (*mn, *opt, *mx)):
        return "a dim outside 0..2^31-1"
    if not all(a <= b <= c for a, b, c in zip(mn, opt, mx)):
        return "MIN <= OPT <= MAX does not hold"
    return None


def _fmt(dims: tuple[int, ...]) -> str:
    return "x".join(str(d) for d in dims) or "scalar"


def load_timing_cache(trt: Any, config: Any, path: Path | None) -> str:
    """Attach a timing cache (read from `path` when it exists); returns what happened, for the report."""
    blob = path.read_bytes() if path is not None and path.is_file() else b""
    note = f"loaded {len(blob)} bytes" if blob else "new"
    try:
        cache = config.create_timing_cache(blob)
    except Exception:  # a damaged file: the bindings may raise instead of returning None
        cache = None
    if cache is None and blob:
        note = "unreadable, started a new one"
        cache = config.create_timing_cache(b"")
    if cache is None:
        return "unavailable"
    # ignore_mismatch=False: a cache from another GPU or TensorRT version is refused, not trusted.
    if not config.set_timing_cache(cache, False):
        note = "made on another GPU or TensorRT version, started a new one"
        config.set_timing_cache(config.create_timing_cache(b""), False)
    return note


def save_timing_cache(config: Any, path: Path) -> None:
    """Merge this build's timing cache into the file: under an exclusive lock, read what other builds
    saved meanwhile, combine() it in (pyCore.cpp ITimingCache.combine(input_cache, ignore_mismatch)),
    and replace the file atomically. Overwriting would drop their entries."""
    cache = config.get_timing_cache()
    if cache is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with _locked(path.with_name(path.name + ".lock")):
        blob = path.read_bytes() if path.is_file() else b""
        if blob:
            try:
                theirs = config.create_timing_cache(blob)
            except Exception:  # damaged: ours replaces it
                theirs = None
            if theirs is not None:
                cache.combine(theirs, False)  # False: entries from another GPU/version are not merged
        data = bytes(cache.serialize())
        with atomic_path(path) as tmp:
            tmp.write_bytes(data)


@contextmanager
def _locked(lock_path: Path) -> Iterator[None]:
    """An exclusive advisory lock (fcntl.flock) held for the block; no locking where fcntl is absent."""
    try:
        import fcntl
    except ImportError:  # Windows: builds there are not concurrent in practice
        yield
        return
    with open(lock_path, "a+b") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def init_plugins(trt: Any, logger: Any) -> None:
    """Register TensorRT's plugin library (pyPlugin.cpp init_libnvinfer_plugins(logger, namespace)).
    Needed before parsing (ONNX ops that map to plugins) AND before deserializing: an engine with
    plugin layers (ROIAlign, EfficientNMS, ...) deserializes to None in a process that never
    registered them. Polygraphy calls it before every deserialize (backend/trt/loader.py
    EngineFromBytes); repeated calls are harmless."""
    trt.init_libnvinfer_plugins(logger, "")


def deserialize(trt: Any, engine_bytes: bytes, logger: Any, allow_host_code: bool = False) -> Any:
    """trt.Runtime(logger).deserialize_cuda_engine(bytes) after registering the plugins; None when
    TensorRT refuses the bytes. Host code (the lean runtime inside version-compatible engines) is
    allowed only for those."""
    init_plugins(trt, logger)
    runtime = trt.Runtime(logger)
    if allow_host_code:
        runtime.engine_host_code_allowed = True
    return runtime.deserialize_cuda_engine(engine_bytes)


@dataclass
class BuiltEngine:
    engine_bytes: bytes
    seconds: float
    timing_cache: str
    inputs: list[TensorEntry] = field(default_factory=list)
    outputs: list[TensorEntry] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def build_engine(trt: Any, onnx_path: Path, profiles: list[InputProfile], options: BuildOptions,
                 timing_cache: Path | None, shape_values: ShapeValues | None = None) -> BuiltEngine:
    """Parse, configure and build; the timing cache is loaded first and merged into its file after.
    The engine's I/O is read from the network (what a strongly typed build keeps), so a fresh engine
    is not deserialized here: big engines take seconds each time."""
    logger = make_logger(trt)
    mark = logger.mark()
    init_plugins(trt, logger)
    builder = trt.Builder(logger)
    network = create_network(trt, builder)
    parser = parse_onnx(trt, network, logger, onnx_path)
    config = configure(trt, builder, network, options, profiles, shape_values)
    inputs, outputs = network_io(network, profiles)
    if is_rtx(trt):  # its builder times nothing (no GPU needed): "timing cache operations are no-ops"
        timing_cache, timing_note = None, "unavailable"
    else:
        timing_note = load_timing_cache(trt, config, timing_cache)
    t0 = time.perf_counter()
    serialized = builder.build_serialized_network(network, config)
    seconds = time.perf_counter() - t0
    del parser  # only now: the network's weights lived in it
    if serialized is None:
        raise StageError(f"TensorRT could not build the engine: {logger.last_errors(since=mark)}",
                         hint="try a larger --workspace, or --builder-opt-level 0 to narrow it down")
    if timing_cache is not None and timing_note != "unavailable":
        save_timing_cache(config, timing_cache)
    return BuiltEngine(bytes(serialized), seconds, timing_note, inputs, outputs, logger.warnings_since(mark)[-5:])


@dataclass
class Obtained:
    """An engine from the cache or a fresh build, its metadata, and how it was obtained."""

    engine_bytes: bytes
    metadata: EngineMetadata
    cache: CacheInfo
    timing_cache: str | None = None
    warnings: list[str] = field(default_factory=list)


def default_timing_cache(cfg: TensorRTConfig, machine: Machine) -> Path:
    cc = (machine.compute_capability or "unknown").replace(".", "")
    return cfg.engine_cache_dir().parent / "timing" / f"trt{machine.tensorrt_version}-sm{cc}.cache"


def obtain_engine(trt: Any, onnx_path: Path, profiles: list[InputProfile], cfg: TensorRTConfig, machine: Machine,
                  force: bool = False, shape_values: ShapeValues | None = None) -> Obtained:
    """The engine for this ONNX, profiles, options and machine: from the engine cache when a valid
    entry exists (and `force` is off), else built and cached."""
    options = cfg.build_options()
    if machine.toolkit != "tensorrt":  # another builder, another engine: in the cache key and the metadata
        options["toolkit"] = machine.toolkit
    onnx_sha = onnx_digest(onnx_path)
    ranges = profiles_json(profiles) + ([{"shape_values": {k: [list(v) for v in vs] for k, vs in
                                                         sorted(shape_values.items())}}] if shape_values else [])
    key = cache_key(onnx_sha, options, ranges, machine.tensorrt_version, machine.gpu,
                    machine.compute_capability, cuda=machine.cuda)
    cache = EngineCache(cfg.engine_cache_dir()) if cfg.engine_cache_enabled else None
    lookup = Lookup("disabled") if cache is None else Lookup("forced") if force else None
    if lookup is None and cache is not None:
        def validate(data: bytes, meta: EngineMetadata) -> str | None:
            return _validate(trt, data, meta)

        # An engine built ahead of time (no GPU in the machine: TensorRT-RTX) cannot be deserialized here
        # (CUDA error 35 without a driver): it is trusted on its metadata and sha256, not re-opened, or
        # every lookup would call it corrupt and rebuild it.
        ahead_of_time = machine.gpu is None and machine.toolkit != "tensorrt"
        lookup = cache.lookup(key, tensorrt_version=machine.tensorrt_version, gpu=machine.gpu,
                              compute_capability=machine.compute_capability,
                              validate=None if ahead_of_time else validate, cuda=machine.cuda)
        if lookup.status == "hit" and lookup.engine_bytes is not None and lookup.metadata is not None:
            return Obtained(lookup.engine_bytes, lookup.metadata, lookup.info(key, cache.entry(key)))
    assert lookup is not None
    timing = cfg.timing_cache or default_timing_cache(cfg, machine)
    built = build_engine(trt, onnx_path, profiles, options, timing, shape_values)
    meta = EngineMetadata(
        tensorrt_version=machine.tensorrt_version, gpu=machine.gpu, compute_capability=machine.compute_capability,
        cache_key=key, onnx_sha256=onnx_sha, engine_sha256=hashlib.sha256(built.engine_bytes).hexdigest(),
        engine_bytes=len(built.engine_bytes), profiles=profiles_json(profiles), inputs=built.inputs,
        outputs=built.outputs, options=options, build_seconds=round(built.seconds, 3), optcli_version=__version__,
        cuda=machine.cuda)
    info = lookup.info(key, None if cache is None else cache.store(key, built.engine_bytes, meta))
    timing_info = f"{timing} ({built.timing_cache})" if built.timing_cache != "unavailable" else None
    return Obtained(built.engine_bytes, meta, info, timing_cache=timing_info,
                    warnings=built.warnings)


def _validate(trt: Any, data: bytes, meta: EngineMetadata) -> str | None:
    """None when TensorRT deserializes the cached engine and its I/O is what the metadata says."""
    logger = make_logger(trt)
    mark = logger.mark()
    try:
        engine = deserialize(trt, data, logger, allow_host_code=bool(meta.options.get("version_compat")))
    except Exception as exc:  # the bindings raise for some malformed inputs instead of returning None
        return f"TensorRT cannot deserialize it ({type(exc).__name__}: {exc})"
    if engine is None:
        return f"TensorRT cannot deserialize it ({logger.last_errors(1, since=mark)})"
    inputs, outputs = engine_io(trt, engine)
    if [i["name"] for i in inputs] != [i["name"] for i in meta.inputs] or \
            [o["name"] for o in outputs] != [o["name"] for o in meta.outputs]:
        return "its inputs/outputs differ from its metadata"
    return None
