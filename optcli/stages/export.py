"""Stage export: PyTorch -> ONNX, with a dynamic batch that is checked, and outputs verified against PyTorch.

The dynamo exporter is tried first (the only one that takes a .pt2 program); TorchScript input and
models the dynamo exporter fails on, or specialises to a fixed batch, fall back to the TorchScript
exporter. Either way the ONNX must match PyTorch at batch 1 and batch 2 or the stage fails.

Some CPU backends build from the PyTorch model itself (AOTInductor): with `--backend` one of them the
stage is skipped; when no exporter makes a correct ONNX, the error's hint offers them, and with
`--backend auto` on the CPU the run goes on without ONNX: the stage saves the torch.export program
instead and the CPU build builds only what needs no ONNX.
"""
from __future__ import annotations

import contextlib
import io
import logging
import os
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any

from optcli.accuracy import compare_outputs, float32_mismatch
from optcli.artifact import Artifact
from optcli.backends.registry import ONNX, cpu_backends_without_onnx
from optcli.backends.torch.archive_file import archive_file
from optcli.backends.torch.attention import eager_attention, sdpa_model
from optcli.backends.torch.export_errors import environment_fault, last_line, source_of
from optcli.backends.torch.loader import TorchModel, needs_torchscript_exporter
from optcli.cpu.options import cpu_config
from optcli.errors import StageError, disk_full
from optcli.input_limits import record_max_dims
from optcli.onnx_model import has_symbolic_batch, load_onnx, near_protobuf_limit, save_onnx
from optcli.optional_imports import require
from optcli.plan.build_choice import builds_on_cpu
from optcli.plan.stage_names import StageName
from optcli.report import DynamicSequence, ExportAttempt, ExportDetails
from optcli.sequence_axis import SequenceAxis, example_lengths, other_length, record_lengths, sequence_axis, with_length
from optcli.stages.base import Stage, StageResult, config_dict, register
from optcli.tensor_spec import TensorSpec, random_inputs

# The exported graph must reproduce PyTorch this closely, else export is a failure (per output, at its own
# scale; an output within float32 resolution of PyTorch's is equal: accuracy.float32_mismatch).
VERIFY_COSINE = 0.9999
VERIFY_MAX_ABS_REL = 1e-3  # relative to the output's largest magnitude


@contextlib.contextmanager
def _quiet() -> Any:
    """The exporters print progress and warnings; a library must not, so keep them for error messages."""
    buf = io.StringIO()
    # torch logs "torchvision is not installed" through its own handlers, bound to the real stderr.
    onnx_logger = logging.getLogger("torch.onnx")
    level = onnx_logger.level
    onnx_logger.setLevel(logging.ERROR)
    try:
        with _native_output_silenced(), contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf), \
                warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield buf
    finally:
        onnx_logger.setLevel(level)


@contextlib.contextmanager
def _native_output_silenced() -> Any:
    """File descriptors 1 and 2 to a scratch file: the TorchScript exporter's C++ side prints the whole
    graph ("Torch IR graph at exception: ...") straight to the process's stdout when an op has no ONNX
    symbolic, past Python's redirects (and --json promises nothing but JSON on stdout)."""
    try:
        sys.stdout.flush()
        sys.stderr.flush()
        saved = [os.dup(1), os.dup(2)]
    except (OSError, ValueError, AttributeError):  # no real fds (embedded interpreters, some runners)
        yield
        return
    with tempfile.TemporaryFile() as scratch:
        os.dup2(scratch.fileno(), 1)
        os.dup2(scratch.fileno(), 2)
        try:
            yield
        finally:
            for fd, copy in ((1, saved[0]), (2, saved[1])):
                os.dup2(copy, fd)
                os.close(copy)


@register
class ExportStage(Stage):
    """PyTorch (.pt2, TorchScript, file.py:factory) -> ONNX."""

    name = StageName.EXPORT
    order = 10
    # Its "before" is PyTorch, which has no setting: the exported graph is timed as the next stage that
    # runs will time it ("disabled" before simplify; "all" where the fast route goes to unpad, quantize or
    # build: a BERT-base .pt2 timed it both ways and opened two sessions of it, 1.2 s).
    measure_optimization = None

    def skip_reason(self, artifact: Artifact) -> str | None:
        if artifact.format == ONNX:
            return "input is already ONNX"
        backend = cpu_config(self.ctx.config).backend
        if builds_on_cpu(self.ctx.target) and backend in cpu_backends_without_onnx():
            return f"--backend {backend} compiles the PyTorch model itself: no ONNX needed"
        return None

    def fingerprint(self) -> dict[str, object]:
        return {"export": config_dict(self.ctx.config.export), "inputs": [s.to_json() for s in self.ctx.inputs]}

    def _model(self) -> TorchModel:
        """The PyTorch model being exported (run() refuses a run without one before anything reads it)."""
        tm = self.ctx.torch_model
        assert tm is not None
        return tm

    def _example_args(self, torch: Any, batch: int | None) -> tuple[Any, ...]:
        tm = self._model()
        feeds = random_inputs(self.ctx.inputs, batch, seed=1234, int_high=tm.int_high)
        return tuple(torch.from_numpy(feeds[s.name]) for s in self.ctx.inputs)

    def run(self, artifact: Artifact, workdir: Path) -> StageResult:
        torch = require("torch", "exporting PyTorch models")
        cfg = self.ctx.config.export
        tm = self.ctx.torch_model
        if tm is None:
            raise StageError("export needs a PyTorch model")
        exporters = {"auto": ["dynamo", "torchscript"], "dynamo": ["dynamo"],
                     "torchscript": ["torchscript"]}[cfg.exporter]
        if needs_torchscript_exporter(artifact.format) and "torchscript" in exporters:
            exporters = ["torchscript"]  # the dynamo exporter refuses ScriptModules
        elif tm.exported_program is not None and len(exporters) > 1:
            exporters = ["dynamo"]  # a .pt2 program is not a module the TorchScript exporter can trace
        out = workdir / "model.onnx"
        attempts: list[dict[str, str]] = []
        last: Exception | None = None  # the last exporter's exception: --debug prints its traceback
        broken: str | None = None  # a dependency's removed API, seen in any attempt
        axis = sequence_axis(self.ctx.inputs, self.ctx.config.inputs, tm.module, self.ctx.target)
        if axis is not None and tm.exported_program is not None and _fixed_length(tm.exported_program, axis):
            # A .pt2 program's shapes were fixed when it was exported: a symbolic sequence cannot be asked
            # of it here (trying cost BERT-base a 3 s export that always failed "specialised"; issue 16).
            axis = None
        # A dynamic sequence first; where an exporter cannot make one, the example's length (as before).
        tries = [(e, a) for e in exporters for a in ([axis, None] if axis else [None])]
        for exporter, seq in tries:
            label = f"{exporter} (dynamic sequence)" if seq else exporter
            try:
                model, attention = self._export(torch, exporter, out, seq)
                if cfg.static_batch:
                    first = self.ctx.inputs[0].shape[0]
                    _pin_batch(model, first if isinstance(first, int) else 1)
                elif not has_symbolic_batch(model):
                    attempts.append({"exporter": label, "error": "batch dim was specialised to a fixed size"})
                    continue
                else:
                    _name_dim(model, 0, [s.name for s in self.ctx.inputs], "batch")
                if seq and not _name_sequence_dims(model, seq):
                    attempts.append({"exporter": label, "error": "sequence dim was specialised to a fixed size"})
                    continue
                if seq:
                    record_lengths(model, example_lengths(self.ctx.inputs, seq))
                if seq and seq.limit:  # the position table's length: a longer input is refused by name, not
                    record_max_dims(model, {name: {1: seq.limit} for name in seq.inputs})  # deep in a runtime
                external = save_onnx(model, out)
                verify = self._verify(out, torch, static=cfg.static_batch, seq=seq)
            except StageError as exc:
                attempts.append({"exporter": label, "error": exc.message})
                last = exc
                continue
            except Exception as exc:  # exporter internals raise anything; we try the next one
                if disk_full(exc) is not None:
                    raise  # no exporter does better on a full disk, and the fallback's .pt2 writer aborted on it
                error = f"{type(exc).__name__}: {last_line(exc)}{source_of(exc)}"
                attempts.append({"exporter": label, "error": error})
                last = exc
                broken = broken or environment_fault(exc)
                continue
            # What the file holds: the exporters quietly pick another opset when they cannot convert.
            opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)
            sequence = DynamicSequence.from_json(seq.to_json()) if seq else None
            details = ExportDetails(exporter=exporter, opset=opset, opset_requested=cfg.opset,
                                    dynamic_batch=not cfg.static_batch, dynamic_sequence=sequence,
                                    verify=verify, attention=attention or None, attempts=_attempts(attempts))
            return StageResult(Artifact(out, "onnx", stage=self.name, parent=artifact.sha256,
                                        meta={"external_data": external}), details)
        if broken is not None:
            # Not the model's fault: falling back to a backend without ONNX would hide a broken install.
            raise StageError(f"the ONNX export failed inside an installed package, not on the model: {broken}",
                             hint="install the versions optcli was tested with (requirements/*.lock, "
                                  "docs/install.md); --debug prints the traceback") from last
        reasons = "; ".join(f"{a['exporter']}: {a['error']}" for a in attempts)
        # Suggest only what this run did not already try.
        suggest = [] if "torchscript" in exporters else ["--exporter torchscript"]
        suggest += [] if cfg.static_batch else ["--static-batch"]
        suggest.append("another --opset")
        message = f"no exporter produced a correct ONNX ({reasons})"
        hint = (f"try {', '.join(suggest[:-1]) + ' or ' if len(suggest) > 1 else ''}{suggest[-1]}; "
                "--debug prints the exporter's traceback")
        without = cpu_backends_without_onnx()
        if without and builds_on_cpu(self.ctx.target) and cpu_config(self.ctx.config).backend == "auto":
            return self._without_onnx(artifact, workdir, message, attempts, without, last)
        if without:
            hint += (f"; or skip ONNX: --backend {without[0]}"
                     f"{'' if builds_on_cpu(self.ctx.target) else ' --target cpu'} compiles the PyTorch model itself")
        raise StageError(message, hint=hint) from last

    def _without_onnx(self, artifact: Artifact, workdir: Path, message: str, attempts: list[dict[str, str]],
                      backends: tuple[str, ...], last: Exception | None) -> StageResult:
        """--backend auto after every exporter failed: the torch.export program (.pt2) instead of ONNX, for
        the backends that build from it. A model torch.export cannot take either fails as before."""
        torch = require("torch", "exporting PyTorch models")
        tm = self._model()
        out = workdir / "program.pt2"
        try:
            with _quiet():
                program = tm.exported_program or self._export_program(torch)
            with archive_file(out) as fh:  # a full disk: an OSError, not an aborted process
                torch.export.save(program, fh)
        except Exception as exc:  # torch.export raises anything
            if disk_full(exc) is not None:
                raise
            raise StageError(f"{message}; torch.export failed too: {last_line(exc)}",
                             hint="--debug prints the exporter's traceback") from last
        details = ExportDetails(onnx=message, attempts=_attempts(attempts),
                                without_onnx=f"saved the torch.export program: the CPU build builds only what needs no "
                                             f"ONNX ({', '.join(backends)})")
        return StageResult(Artifact(out, "pt2", stage=self.name, parent=artifact.sha256), details)

    def _export_program(self, torch: Any) -> Any:
        """torch.export of the module with a dynamic batch (example batch 2: a batch of 1 gets specialised)."""
        tm = self._model()
        if isinstance(tm.module, torch.jit.ScriptModule):
            raise StageError("TorchScript cannot be exported with torch.export")
        dims = tuple({0: torch.export.Dim.DYNAMIC} for _ in self.ctx.inputs)
        return torch.export.export(tm.module, self._example_args(torch, batch=2), dynamic_shapes=dims)

    def _export(self, torch: Any, exporter: str, out: Path, seq: SequenceAxis | None) -> tuple[Any, str | None]:
        """The ONNX model, and what was changed to export it: a transformers model whose SDPA attention the
        dynamo exporter cannot decompose with a symbolic dim is exported once more with eager attention."""
        try:
            with _quiet():
                if exporter == "torchscript":
                    return self._export_torchscript(torch, seq), None
                return self._export_dynamo(torch, out, seq), None
        except Exception as exc:  # exporter internals raise anything
            tm = self._model()
            model = sdpa_model(tm.keyword_module, tm.module) if exporter == "dynamo" else None
            if model is None:
                raise
            reason = f"{last_line(exc)}{source_of(exc)}"
        with eager_attention(model), _quiet():
            onnx_model = self._export_dynamo(torch, out, seq)
        return onnx_model, f"eager (the SDPA export failed: {reason})"

    def _export_dynamo(self, torch: Any, out: Path, seq: SequenceAxis | None) -> Any:
        prog = self._dynamo_program(torch, seq)
        if not near_protobuf_limit(_initializer_bytes(prog)):
            return prog.model_proto
        # A large model goes to disk straight from the exporter's tensors: model_proto would hold a
        # serialized copy of every weight in memory (a 2.1 GB model peaked at 13 GB that way).
        prog.save(out, external_data=True)
        del prog
        return load_onnx(out, load_weights=False)

    def _dynamo_program(self, torch: Any, seq: SequenceAxis | None) -> Any:
        tm = self._model()
        cfg = self.ctx.config.export
        if tm.exported_program is not None:
            prog = torch.onnx.export(tm.exported_program, args=(), dynamo=True, opset_version=cfg.opset,
                                     external_data=False)
        else:
            # batch >= 2: a batch of 1 gets specialised; a static batch exports at its own size.
            args = self._example_args(torch, batch=None if cfg.static_batch else 2)
            names = [s.name for s in self.ctx.inputs]
            dyn: dict[str, Any] | None = None if cfg.static_batch else {n: {0: torch.export.Dim.DYNAMIC} for n in names}
            if seq is not None:
                dyn = seq.dynamic_shapes(torch, names, batch_dynamic=not cfg.static_batch)
            if tm.keyword_module is not None:  # inputs by keyword: trace the user's module itself
                constants = getattr(tm.module, "constants", {})
                kwargs = {**dict(zip(names, args)), **constants}
                dyn = None if dyn is None else {**dyn, **{k: None for k in constants}}
                prog = torch.onnx.export(tm.keyword_module, (), kwargs=kwargs, dynamo=True,
                                         opset_version=cfg.opset, dynamic_shapes=dyn, input_names=names,
                                         external_data=False)
            else:
                prog = torch.onnx.export(tm.module, args, dynamo=True, opset_version=cfg.opset,
                                         dynamic_shapes=dyn, input_names=names, external_data=False)
        return prog

    def _export_torchscript(self, torch: Any, seq: SequenceAxis | None) -> Any:
        tm = self._model()
        cfg = self.ctx.config.export
        args = self._example_args(torch, batch=None if cfg.static_batch else 2)
        module = tm.module
        with torch.inference_mode():
            from optcli.backends.torch.runner import flatten_outputs
            n_out = len(flatten_outputs(module(*args)))
        names_in = [s.name for s in self.ctx.inputs]
        names_out = ["output"] if n_out == 1 else [f"output_{i}" for i in range(n_out)]
        dynamic_axes = {} if cfg.static_batch else {n: {0: "batch"} for n in names_in + names_out}
        for name, group in (seq.inputs if seq else {}).items():
            dynamic_axes[name] = {**dynamic_axes.get(name, {}), 1: group}
        buf = io.BytesIO()
        torch.onnx.export(module, args, buf, dynamo=False, opset_version=min(cfg.opset, 20),
                          input_names=names_in, output_names=names_out, dynamic_axes=dynamic_axes or None,
                          do_constant_folding=True)
        import onnx

        return onnx.load_from_string(buf.getvalue())

    def _verify(self, path: Path, torch: Any, static: bool, seq: SequenceAxis | None) -> dict[str, dict[str, float]]:
        """Run the ONNX and PyTorch on the same random inputs, at batch 1 and 2 (one batch if static);
        with a dynamic sequence, the second run at another length."""
        from optcli.backends.onnxruntime.runner import OnnxRuntimeRunner

        tm = self._model()
        results: dict[str, dict[str, float]] = {}
        runner = OnnxRuntimeRunner(path, optimization="disabled", threads=1)
        try:
            runs: list[tuple[int | None, list[TensorSpec]]] = \
                [(None, self.ctx.inputs)] if static else [(1, self.ctx.inputs), (2, self.ctx.inputs)]
            if seq is not None:
                lengths = example_lengths(self.ctx.inputs, seq)
                others = {g: other_length(n, seq.limit) for g, n in lengths.items()}
                runs[-1] = (runs[-1][0], with_length(self.ctx.inputs, seq, others))
                if static:
                    runs.insert(0, (None, self.ctx.inputs))
            for batch, specs in runs:
                label = f"batch{batch or 'static'}" + _length_label(specs, seq)
                feeds = random_inputs(specs, batch, seed=7, int_high=tm.int_high)
                with torch.inference_mode():
                    from optcli.backends.torch.runner import flatten_outputs
                    ref = [t.detach().numpy() for t in flatten_outputs(
                        tm.module(*[torch.from_numpy(feeds[s.name]) for s in self.ctx.inputs]))]
                got = runner.run_normalized(feeds)
                if len(got) != len(ref):
                    raise StageError(f"the ONNX has {len(got)} outputs, PyTorch gives {len(ref)}")
                acc = compare_outputs(ref, got, [o.name for o in runner.outputs])
                results[label] = {"max_abs_err": acc["max_abs_err"], "cosine_min": acc["cosine_min"]}
                mismatch = float32_mismatch(acc, VERIFY_COSINE, VERIFY_MAX_ABS_REL)
                if mismatch:
                    raise StageError(f"ONNX outputs differ from PyTorch at {label}: {mismatch}")
        finally:
            runner.close()
        return results


def _fixed_length(program: Any, seq: SequenceAxis) -> bool:
    """Whether the exported program has a fixed size at dim 1 of any of the sequence inputs."""
    placeholders = {n.name: n for n in program.graph.nodes if n.op == "placeholder"}
    for name in seq.inputs:
        fake = placeholders[name].meta.get("val") if name in placeholders else None
        if fake is not None and len(fake.shape) > 1 and isinstance(fake.shape[1], int):
            return True
    return False


def _initializer_bytes(prog: Any) -> int:
    """Bytes of the exported program's weights (without serializing them)."""
    return sum(v.const_value.nbytes for v in prog.model.graph.initializers.values() if v.const_value is not None)


def _pin_batch(model: Any, batch: int) -> None:
    """Fix dim 0 of every graph input and output to `batch` (for --static-batch)."""
    for vi in list(model.graph.input) + list(model.graph.output):
        dims = vi.type.tensor_type.shape.dim
        if dims:
            dims[0].ClearField("dim_param")
            dims[0].dim_value = batch


def _name_dim(model: Any, axis: int, inputs: list[str], name: str) -> bool:
    """Call the symbol at `axis` of `inputs` `name` everywhere in the graph (torch names it s77 or
    similar); False where those inputs do not share one symbol there (renaming would merge several)."""
    wanted = set(inputs)
    symbols = set()
    for vi in model.graph.input:
        dims = vi.type.tensor_type.shape.dim
        if vi.name in wanted:
            symbols.add(dims[axis].dim_param if len(dims) > axis else "")
    if len(symbols) != 1 or "" in symbols:
        return False
    old = symbols.pop()
    for vi in list(model.graph.input) + list(model.graph.output) + list(model.graph.value_info):
        for d in vi.type.tensor_type.shape.dim:
            if d.dim_param == old:
                d.dim_param = name
    return True


def _name_sequence_dims(model: Any, seq: SequenceAxis) -> bool:
    """Name each group's symbolic dim 1 after the group; False where the exporter made it fixed."""
    groups: dict[str, list[str]] = {}
    for name, group in seq.inputs.items():
        groups.setdefault(group, []).append(name)
    return all(_name_dim(model, 1, names, group) for group, names in groups.items())


def _length_label(specs: list[Any], seq: SequenceAxis | None) -> str:
    """`_seq12` (`_seq12x6` with a decoder sequence) for the verify table, '' without a dynamic sequence."""
    if seq is None:
        return ""
    return "_seq" + "x".join(str(n) for n in example_lengths(specs, seq).values())


def _attempts(attempts: list[dict[str, str]]) -> list[ExportAttempt]:
    return [ExportAttempt.from_json(a) for a in attempts]
