"""What the user passed as MODEL: detect its format and load it into PyTorch (the export stage's input
and the FP32 reference), refusing what cannot be loaded safely.

| MODEL                 | format       | loaded with                                   |
| `.onnx`               | onnx         | onnx (export is skipped)                      |
| `.pt2`                | pt2          | torch.export.load (no source needed)          |
| `.pt/.pth/.ts/.jit`   | torchscript  | torch.jit.load (no source needed)             |
| `file.py:factory`     | python       | imports the file, calls factory()             |
| a folder with config.json | hf-folder | transformers, safetensors weights only (optcli/hf_folder.py) |
| pickled module        | pickle       | torch.load(weights_only=False), only with --allow-pickle |
"""
from __future__ import annotations

import importlib.util
import inspect
import re
import sys
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from optcli.backends.registry import ONNX
from optcli.errors import UsageError, foreign_exit
from optcli.optional_imports import require
from optcli.tensor_spec import TensorSpec, canonical_dtype, merge_pinned, with_default_dtype

if TYPE_CHECKING:
    from optcli.hf_folder import LoadedAs

TORCHSCRIPT_SUFFIXES = (".pt", ".pth", ".ts", ".jit", ".torchscript")
_PICKLE_MAGIC = (b"\x80\x02", b"\x80\x03", b"\x80\x04", b"\x80\x05")
_INPUTS_HINT = "give the input shapes with --input NAME:SHAPE[:DTYPE], e.g. --input x:1x3x224x224"


@dataclass
class ModelSource:
    """The user's model file as given: where it is and what format it is."""

    spec: str                 # as typed: a path, or path.py:factory
    path: Path
    format: str               # onnx | pt2 | torchscript | python | pickle
    factory: str | None = None

    @property
    def is_torch(self) -> bool:
        return self.format != ONNX


@dataclass
class TorchModel:
    """A loaded PyTorch model with everything export and the reference runner need."""

    module: Any                          # callable nn.Module / ScriptModule
    inputs: list[TensorSpec]
    example: dict[str, object] = field(default_factory=dict)   # name -> example tensor, if known
    exported_program: Any = None         # for .pt2
    int_high: dict[str, int] = field(default_factory=dict)  # upper bound for random int inputs
    fixed_batch: int | None = None       # a batch size the model itself fixes (.pt2 exported static)
    keyword_module: Any = None           # the user's module when its inputs go by keyword (`module` wraps it)
    loaded_as: LoadedAs | None = None    # what optcli chose (Hugging Face folders)


def detect(spec: str, allow_pickle: bool = False) -> ModelSource:
    """Work out what MODEL is, with a one-line error for everything optcli cannot take."""
    factory = None
    path_text = spec
    if ".py:" in spec:
        path_text, factory = spec.rsplit(":", 1)
        if not factory.isidentifier():
            raise UsageError(f"{spec!r}: {factory!r} is not a function name", hint="write path/to/file.py:make_model")
    path = Path(path_text)
    if not path.exists():
        raise UsageError(f"model not found: {path}",
                         hint="check the path; optcli takes .onnx, .pt2, TorchScript or file.py:factory")
    from optcli.hf_folder import is_model_folder

    if factory is None and is_model_folder(path):
        return ModelSource(spec, path, "hf-folder")
    if path.is_dir():
        raise UsageError(f"{path} is a directory, not a model file",
                         hint="pass the model file itself (.onnx, .pt2, TorchScript .pt) or file.py:factory")
    if path.stat().st_size == 0:
        raise UsageError(f"{path} is empty", hint="re-save the model; the file has no bytes")
    suffix = path.suffix.lower()
    if factory is not None or suffix == ".py":
        if factory is None:
            raise UsageError(f"{path}: a Python file needs a factory function",
                             hint=f"write {path}:make_model (a function returning an nn.Module)")
        return ModelSource(spec, path, "python", factory)
    if suffix == ".onnx":
        return ModelSource(spec, path, ONNX)
    if suffix == ".pt2":
        if not zipfile.is_zipfile(path):
            raise UsageError(f"{path} is not a torch.export archive (not a zip file): truncated or renamed?",
                             hint="re-save it with torch.export.save(torch.export.export(model, args), path)")
        return ModelSource(spec, path, "pt2")
    if suffix in TORCHSCRIPT_SUFFIXES:
        return ModelSource(spec, path, _torch_file_kind(path, allow_pickle))
    raise UsageError(f"{path}: unknown model format {suffix or '(no suffix)'!r}",
                     hint="optcli takes .onnx, .pt2, TorchScript (.pt/.pth/.ts) or file.py:factory")


def needs_torchscript_exporter(fmt: str) -> bool:
    """Whether a model of this source format must be exported with the TorchScript exporter (the dynamo
    exporter refuses ScriptModules)."""
    return fmt in ("torchscript", "pickle")


def _torch_file_kind(path: Path, allow_pickle: bool) -> str:
    """TorchScript, or a torch.save pickle (state_dict or whole module), told apart without running code."""
    if zipfile.is_zipfile(path):
        try:
            with zipfile.ZipFile(path) as zf:
                names = zf.namelist()
        except zipfile.BadZipFile:
            names = []
        if any("/code/" in n or n.endswith("constants.pkl") for n in names):
            return "torchscript"
        if any(n.endswith("data.pkl") for n in names):
            return _classify_pickle(path, allow_pickle)
        raise UsageError(f"{path} is a zip archive but not a TorchScript or torch.save file",
                         hint="save TorchScript with torch.jit.save, "
                              "or an exported program (.pt2) with torch.export.save")
    with open(path, "rb") as fh:
        head = fh.read(2)
    if head in _PICKLE_MAGIC:
        return _classify_pickle(path, allow_pickle)
    raise UsageError(f"{path} is not a PyTorch model file (neither TorchScript nor a torch.save archive)",
                     hint="is it a renamed text/other file? pass .onnx, .pt2, TorchScript or file.py:factory")


def _classify_pickle(path: Path, allow_pickle: bool) -> str:
    torch = require("torch", "loading PyTorch models")
    try:
        obj = torch.load(path, map_location="cpu", weights_only=True)
    except Exception:
        obj = None  # weights_only refuses anything that is not plain tensors/containers: a pickled module
    if isinstance(obj, dict):
        raise UsageError(f"{path} holds a state_dict (weights only, no architecture)",
                         hint="pass a .pt2 (torch.export.save), a TorchScript file (torch.jit.save), "
                              "or file.py:factory that builds the model and loads these weights")
    if obj is not None:
        raise UsageError(f"{path} holds a {type(obj).__name__}, not a model",
                         hint="pass a .pt2, a TorchScript file, or file.py:factory")
    if not allow_pickle:
        raise UsageError(f"{path} is a pickled module; loading it runs arbitrary code",
                         hint="pass --allow-pickle if you trust it (its class must be importable), "
                              "or better, save it with torch.export.save as .pt2")
    return "pickle"


def load_torch(source: ModelSource, pinned: list[TensorSpec], task: str = "auto", device: str = "cpu") -> TorchModel:
    """Load a PyTorch model and work out its input specs (dim 0 is the batch). `device` places a .pt2's
    program there (the caller moves the other formats' modules)."""
    torch = require("torch", "loading PyTorch models")
    from optcli.library_logs import quiet_model_loading

    with quiet_model_loading():  # transformers' and torchao's logs and progress bars: --debug shows them
        return _load_torch(torch, source, pinned, task, device)


def _load_torch(torch: Any, source: ModelSource, pinned: list[TensorSpec], task: str, device: str) -> TorchModel:
    if source.format == "pt2":
        return _load_pt2(torch, source, pinned, device)
    if source.format == "torchscript":
        try:
            module = torch.jit.load(str(source.path), map_location="cpu")
        except Exception as exc:
            raise UsageError(f"{source.path} could not be loaded as TorchScript: {str(exc).splitlines()[0][:200]}",
                             hint="is the file truncated? re-save it with torch.jit.save") from None
        if not pinned:
            raise UsageError(f"{source.path} is TorchScript, which does not record input shapes", hint=_INPUTS_HINT)
        return _from_pins(module.eval(), pinned)
    if source.format == "pickle":
        # As under `python`, the working folder is importable, so "run from its project" works for the
        # `optcli` script too (its sys.path[0] is the script's bin folder).
        sys.path.insert(0, str(Path.cwd()))
        try:
            module = torch.load(source.path, map_location="cpu", weights_only=False)
        except Exception as exc:
            raise UsageError(f"{source.path} could not be unpickled: {str(exc).splitlines()[0][:200]}",
                             hint="the module's class must be importable "
                                  "(run from its project, or set PYTHONPATH)") from None
        finally:
            sys.path.remove(str(Path.cwd()))
        if not pinned:
            raise UsageError(f"{source.path} is a pickled module with no recorded input shapes", hint=_INPUTS_HINT)
        return _from_pins(module.eval(), pinned)
    if source.format == "python":
        return _load_python(torch, source, pinned)
    if source.format == "hf-folder":
        from optcli.hf_folder import load_model_folder

        pinned_seq = next((p.shape[1] for p in pinned if p.name == "input_ids" and len(p.shape) == 2
                           and isinstance(p.shape[1], int)), None)
        model, example, described = load_model_folder(source.path, task, pinned_seq)
        loaded = _from_example(torch, model, example, pinned, source.spec)
        loaded.loaded_as = described
        return loaded
    raise UsageError(f"{source.path} is not a PyTorch model")


def _from_pins(module: Any, pinned: list[TensorSpec]) -> TorchModel:
    """A model known only by its --input pins: random token ids must stay inside its embedding tables."""
    specs = [with_default_dtype(p) for p in pinned]
    rows = [int(m.weight.shape[0]) for m in module.modules()
            if "Embedding" in (getattr(m, "original_name", None) or type(m).__name__)
            and getattr(m, "weight", None) is not None and m.weight.dim() == 2]
    int_high = {s.name: min(rows) for s in specs if rows and s.dtype.startswith(("int", "uint"))}
    return TorchModel(module, specs, int_high=int_high)


def _load_pt2(torch: Any, source: ModelSource, pinned: list[TensorSpec], device: str = "cpu") -> TorchModel:
    from optcli.library_logs import captured_logs, last_error_line

    with captured_logs("torch") as logs:
        try:
            ep = torch.export.load(str(source.path))
        except Exception as exc:
            cause = last_error_line(logs) or str(exc).splitlines()[0][:200]
            ep = _load_pt2_with_output_types(torch, source.path, cause)
            if ep is None:
                raise UsageError(f"{source.path} could not be loaded with torch.export.load: {cause}",
                                 hint="is it a torch.export.save archive? truncated, or saved by a much newer "
                                      "torch?") from None
    # Tensor inputs only: a constant the program was exported with (use_cache=False) is no input.
    names = [s.arg.name for s in ep.graph_signature.input_specs
             if s.kind.name == "USER_INPUT" and type(s.arg).__name__ == "TensorArgument"]
    args, kwargs = ep.example_inputs or ((), {})
    kwargs = kwargs or {}
    constants = {k: v for k, v in kwargs.items() if not isinstance(v, torch.Tensor)}
    kwargs = {k: v for k, v in kwargs.items() if isinstance(v, torch.Tensor)}
    example_values = list(args) + list(kwargs.values())
    if device != "cpu":
        # module().to(device) moves parameters but not the devices written into the graph (an arange or
        # ones(..., device="cpu") that transformers makes for masks and positions): found on an H100,
        # where a BERT .pt2 failed "Tensor device mismatch". The pass rewrites both.
        from torch.export.passes import move_to_device_pass

        ep = move_to_device_pass(ep, device)
    module = ep.module()
    if kwargs or constants:
        # Programs exported with keyword inputs (the transformers style) must be called by keyword;
        # everything else in optcli calls models positionally in input order.
        module = _keyword_adapter(torch, module, positional=len(args), keywords=list(kwargs), constants=constants)
    if not example_values:
        if not pinned:
            raise UsageError(f"{source.path} carries no example inputs", hint=_INPUTS_HINT)
        return TorchModel(module, [with_default_dtype(p) for p in pinned], exported_program=ep)
    specs, example, int_high = [], {}, {}
    fixed_batch = None
    placeholders = {n.name: n for n in ep.graph.nodes if n.op == "placeholder"}
    for name, value in zip(names, example_values):
        node = placeholders.get(name)
        fake = node.meta.get("val") if node is not None else None
        shape = []
        for i, d in enumerate(value.shape):
            sym = fake is not None and not isinstance(fake.shape[i], int)
            # Another dynamic dim (a sequence the program left free) is taken at the example's size, as an
            # ONNX's recorded length is: calibration, checks and latency run at one shape.
            shape.append("batch" if sym and i == 0 else int(d))
            if i == 0 and not sym and fake is not None and fixed_batch is None:
                fixed_batch = int(d)
        specs.append(TensorSpec(name, tuple(shape), str(value.dtype).replace("torch.", "")))
        example[name] = value
        if not value.dtype.is_floating_point and value.numel():
            int_high[name] = int(value.max()) + 1
    specs = merge_pinned(specs, pinned) if pinned else specs
    return TorchModel(module, specs, example=example, exported_program=ep, int_high=int_high,
                      fixed_batch=fixed_batch)


def _no_cache(params: Any, given: Mapping[str, object]) -> dict[str, bool]:
    """`use_cache=False` for a forward() that takes it (decoder LMs) and was not given it: optcli compiles
    the forward pass without a KV cache (docs/model-families.md says what that means for generation)."""
    return {"use_cache": False} if "use_cache" in params and "use_cache" not in given else {}


# A program may return output types whose pytree registration happens when their module is imported
# (transformers' ModelOutput classes: BaseModelOutput, CLIPOutput...). Only modules of the installed
# transformers package are imported for that, never another module a file names.
_TRANSFORMERS_TYPE = re.compile(r"Deserializing (transformers(?:\.[A-Za-z0-9_]+)+)\.([A-Za-z0-9_]+) in pytree")


def _load_pt2_with_output_types(torch: Any, path: Path, cause: str) -> Any:
    """Retry torch.export.load after importing the transformers module that registers an output type."""
    match = _TRANSFORMERS_TYPE.search(cause)
    if match is None:
        return None
    import importlib
    import importlib.util

    try:
        if importlib.util.find_spec(match.group(1)) is None:
            return None
        importlib.import_module(match.group(1))
        return torch.export.load(str(path))
    except Exception:  # noqa: BLE001 - still not loadable: the caller reports the first cause
        return None


def _keyword_adapter(torch: Any, module: Any, positional: int, keywords: list[str],
                     constants: Mapping[str, object] | None = None) -> Any:
    """Wrap `module` so module(*inputs) calls it with the last inputs as keywords (plus `constants`)."""
    fixed = dict(constants or {})

    class KeywordAdapter(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = module
            self.constants = fixed  # export passes them too, when it traces `inner` itself

        def forward(self, *inputs: Any) -> Any:
            return self.inner(*inputs[:positional], **dict(zip(keywords, inputs[positional:])), **fixed)

    return KeywordAdapter()  # no .eval(): an exported module refuses train()/eval() calls


def _load_python(torch: Any, source: ModelSource, pinned: list[TensorSpec]) -> TorchModel:
    mod_name = f"optcli_user_{source.path.stem}"
    spec = importlib.util.spec_from_file_location(mod_name, source.path)
    if spec is None or spec.loader is None:
        raise UsageError(f"cannot import {source.path}", hint="pass a .py file")
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(source.path.parent.resolve()))
    try:
        spec.loader.exec_module(module)
    except BaseException as exc:  # its SystemExit must not decide the exit code
        if not isinstance(exc, Exception) and not foreign_exit(exc):
            raise
        raise UsageError(f"importing {source.path} failed: {type(exc).__name__}: "
                         f"{str(exc).splitlines()[0][:200] if str(exc) else ''}",
                         hint="run the file with python to see the error (or use --debug)") from None
    finally:
        sys.path.pop(0)
    fn = getattr(module, source.factory or "", None)
    if not callable(fn):
        raise UsageError(f"{source.path} has no function {source.factory!r}",
                         hint=f"define def {source.factory}() -> nn.Module in {source.path.name}")
    try:
        result = fn()
    except BaseException as exc:  # the user's code failed, not optcli (its SystemExit too)
        if not isinstance(exc, Exception) and not foreign_exit(exc):
            raise
        raise UsageError(f"{source.spec} raised {type(exc).__name__}: "
                         f"{str(exc).splitlines()[0][:200] if str(exc) else ''}",
                         hint="run the factory with python to see the error (or use --debug)") from exc
    example_inputs = None
    if isinstance(result, tuple) and len(result) == 2 and isinstance(result[0], torch.nn.Module):
        result, example_inputs = result
    if not isinstance(result, torch.nn.Module):
        raise UsageError(f"{source.spec} returned a {type(result).__name__}, not an nn.Module",
                         hint="return the model, or (model, example_inputs)")
    return _from_example(torch, result, example_inputs, pinned, source.spec)


def _from_example(torch: Any, result: Any, example_inputs: Any, pinned: list[TensorSpec], spec: str) -> TorchModel:
    """A module and its example inputs (a tuple in forward order, or a dict by name) -> a TorchModel
    whose dim 0 is the batch; without examples, the --input pins are the specs."""
    result.eval()
    signature = inspect.signature(result.forward).parameters
    params = [p for p in signature.values() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if example_inputs is None:
        if not pinned:
            raise UsageError(f"{spec} returns no example inputs", hint=_INPUTS_HINT)
        names = [p.name for p in params]
        for p in pinned:
            if p.name not in names:
                raise UsageError(f"--input {p.name}: forward() has no parameter of that name",
                                 hint=f"forward takes: {', '.join(names)}")
        return _from_pins(result, pinned)
    keyword_module = None
    if isinstance(example_inputs, dict):
        # A dict is passed by keyword, as the model's own callers do: GPT-2's second parameter is
        # past_key_values, not attention_mask. Everything in optcli calls models positionally in input
        # order, so the module is wrapped; export traces the original with keyword inputs.
        items = list(example_inputs.items())
        takes_any = any(p.kind is p.VAR_KEYWORD for p in signature.values())
        unknown = [n for n, _ in items if n not in signature and not takes_any]
        if unknown:
            raise UsageError(f"{spec}: example input {unknown[0]!r} is not a parameter of forward()",
                             hint=f"forward takes: {', '.join(p.name for p in params)}")
    else:
        values = list(example_inputs) if isinstance(example_inputs, (list, tuple)) else [example_inputs]
        items = [(params[i].name if i < len(params) else f"input_{i}", v) for i, v in enumerate(values)]
    constants = _no_cache(signature, dict(items))
    if isinstance(example_inputs, dict) or constants:
        keyword_module = result  # export traces the user's module itself, by keyword, with the constants
        by_keyword = isinstance(example_inputs, dict)
        result = _keyword_adapter(torch, result, 0 if by_keyword else len(items),
                                  [n for n, _ in items] if by_keyword else [], constants)
    specs, example, int_high = [], {}, {}
    for name, value in items:
        shape = ("batch",) + tuple(int(d) for d in value.shape[1:])
        specs.append(TensorSpec(name, shape, canonical_dtype(str(value.dtype).replace("torch.", ""))))
        example[name] = value
        if not value.dtype.is_floating_point and value.numel():
            int_high[name] = int(value.max()) + 1
    specs = merge_pinned(specs, pinned) if pinned else specs
    return TorchModel(result, specs, example=example, int_high=int_high, keyword_module=keyword_module)
