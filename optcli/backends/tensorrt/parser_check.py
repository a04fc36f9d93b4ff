"""Ask a real ONNX parser (TensorRT's or TensorRT-RTX's) what it refuses in a graph, node by node.

The parser runs in a child process (`python -m optcli.backends.tensorrt.parser_check MODULE MODEL`):
creating a TensorRT builder where no GPU is usable can abort the whole process instead of raising,
and a parser fed a malformed graph should not take optcli down with it. The child parses into a
strongly typed network and prints one JSON line: the toolkit's version and the parser's errors as
(node index, node name, op, message). `optcli check` uses it where a parser is installed and falls
back to the documented support matrix otherwise (optcli/backends/tensorrt/preflight.py).
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict

from optcli.backends.tensorrt.toolkit import TOOLKITS, Toolkit

MARKER = "OPTCLI_PARSER_CHECK "
TIMEOUT_S = 600.0


class ParserIssueJSON(TypedDict):
    """One parser error, by its node in the original graph (-1: about the whole model)."""

    node: int
    node_name: str
    op: str
    message: str


class ChildAnswer(TypedDict, total=False):
    """What the parser child prints: the version and issues, or the error that stopped it."""

    version: str
    issues: list[ParserIssueJSON]
    error: str


@dataclass
class ParserAnswer:
    """What a real parser said about one graph, or why it could not say (`failure`)."""

    toolkit: Toolkit
    version: str | None = None
    issues: list[ParserIssueJSON] = field(default_factory=list)
    failure: str | None = None

    @property
    def oracle(self) -> str:
        return f"{self.toolkit.label} {self.version or '?'} ONNX parser"


def installed_toolkits() -> list[Toolkit]:
    """The toolkits whose bindings are installed, full TensorRT first."""
    return [t for t in TOOLKITS if t.installed()]


def ask(path: Path, toolkit: Toolkit, timeout: float = TIMEOUT_S) -> ParserAnswer:
    """Run the parser child for `toolkit` on `path`; a crash, a hang or no answer is a `failure`."""
    env = dict(os.environ)
    package_root = str(Path(__file__).resolve().parents[3])
    env["PYTHONPATH"] = package_root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    cmd = [sys.executable, "-m", "optcli.backends.tensorrt.parser_check", toolkit.module, str(Path(path).resolve())]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return ParserAnswer(toolkit, failure=f"the {toolkit.label} parser did not answer within {timeout:.0f} s")
    except OSError as exc:
        return ParserAnswer(toolkit, failure=f"the {toolkit.label} parser could not start: {exc}")
    line = next((ln[len(MARKER):] for ln in reversed(proc.stdout.splitlines()) if ln.startswith(MARKER)), None)
    if proc.returncode < 0:
        sig = -proc.returncode
        name = signal.Signals(sig).name if sig in signal.valid_signals() else str(sig)
        return ParserAnswer(toolkit, failure=f"the {toolkit.label} parser crashed ({name})")
    if line is None:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1][:200]
        return ParserAnswer(toolkit, failure=f"the {toolkit.label} parser failed (exit {proc.returncode}): {last}")
    try:
        data = json.loads(line)
    except json.JSONDecodeError:
        return ParserAnswer(toolkit, failure=f"the {toolkit.label} parser printed unreadable output")
    if data.get("error"):
        return ParserAnswer(toolkit, version=data.get("version"), failure=str(data["error"])[:300])
    return ParserAnswer(toolkit, version=data.get("version"), issues=list(data.get("issues", [])))


# -- the child ---------------------------------------------------------------------------------
# The parser stops at the first node it refuses. To name every such node, the child cuts each refused
# node out (its outputs become constants or graph inputs of the same type and shape) and parses again,
# up to this many rounds: every finding is still the parser's own verdict on a real node.
MAX_ROUNDS = 12
# Logged by every error on a machine without a GPU driver (TensorRT-RTX builds there): not the graph's fault.
_NOISE = ("cudaError 35", "catchCudaError", "Thread context has not been set")
_WHERE = re.compile(r"\s+In \w+ at /\S+:\d+\)?")


def clean_message(desc: str) -> str:
    """The parser's error text on one line: no-GPU noise and source locations dropped."""
    lines = [ln.strip() for ln in str(desc).splitlines() if ln.strip() and not any(n in ln for n in _NOISE)]
    text = " | ".join(lines)
    return _WHERE.sub(")", text).replace("))", ")").strip()


def parse_issues(trt: Any, path: Path, rounds: int = MAX_ROUNDS) -> list[ParserIssueJSON]:
    """Parse `path` into a strongly typed network with `trt`: the parser's errors by node (index and name
    in the original graph), over up to `rounds` parses (see MAX_ROUNDS)."""
    from optcli.backends.tensorrt.builder import ParserFailure, create_network, parse_onnx
    from optcli.backends.tensorrt.logger import make_logger

    logger = make_logger(trt)
    trt.init_libnvinfer_plugins(logger, "")
    builder = trt.Builder(logger)
    issues: list[ParserIssueJSON] = []
    model: Any = None
    origin: list[int] = []        # node position in `model` -> index in the original graph
    for _ in range(rounds):
        network = create_network(trt, builder)
        try:
            parse_onnx(trt, network, logger, path, None if model is None else model.SerializeToString())
            return issues
        except ParserFailure as failure:
            if model is None:
                import onnx

                model = onnx.load(str(path), load_external_data=False)
                origin = list(range(len(model.graph.node)))
            refused = sorted({i.node for i in failure.issues if 0 <= i.node < len(origin)})
            for i in failure.issues:
                where = origin[i.node] if 0 <= i.node < len(origin) else -1
                issues.append({"node": where, "node_name": i.node_name, "op": i.op,
                               "message": clean_message(i.message)})
            if not refused or len(refused) < len(failure.issues):
                return issues  # an error about the whole model: nothing to cut
            _cut(model, refused)
            origin = [o for k, o in enumerate(origin) if k not in set(refused)]
    issues.append({"node": -1, "node_name": "", "op": "",
                   "message": f"stopped after {rounds} parses: later nodes were not checked"})
    return issues


def _cut(model: Any, positions: list[int]) -> None:
    """Remove the nodes at `positions`; each output they made becomes a constant of zeros (static shape)
    or a graph input (otherwise) of the type and shape ONNX shape inference gives it."""
    import numpy as np
    import onnx
    from onnx import helper, numpy_helper

    try:
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False)
    except Exception:  # noqa: BLE001 - types unknown: the outputs become float inputs of unknown shape
        inferred = model
    infos = {vi.name: vi for vi in list(inferred.graph.value_info) + list(inferred.graph.output)}
    graph = model.graph
    cut = [graph.node[k] for k in positions]
    for node in cut:
        for name in (o for o in node.output if o):
            vi = infos.get(name)
            elem = vi.type.tensor_type.elem_type if vi is not None and vi.type.tensor_type.elem_type else 1
            dims = [d.dim_value if d.HasField("dim_value") else None for d in vi.type.tensor_type.shape.dim] \
                if vi is not None and vi.type.tensor_type.HasField("shape") else None
            sizes = [int(d) for d in dims if d is not None] if dims is not None else None
            if sizes is not None and len(sizes) == len(dims or []) and int(np.prod(sizes or [1])) <= 1 << 20:
                dtype = helper.tensor_dtype_to_np_dtype(elem)
                graph.initializer.append(numpy_helper.from_array(np.zeros(sizes, dtype), name))
            else:
                graph.input.append(helper.make_tensor_value_info(name, elem, dims))
    for node in cut:
        graph.node.remove(node)


def _child(module: str, model: str) -> ChildAnswer:
    if module not in {t.module for t in TOOLKITS}:  # only the bindings optcli knows are ever imported
        return {"error": f"unknown parser module {module!r}"}
    try:
        import importlib

        trt = importlib.import_module(module)
    except Exception as exc:  # ImportError, or OSError from the libraries
        return {"error": f"{module} does not import: {type(exc).__name__}: {exc}"[:300]}
    try:
        issues = parse_issues(trt, Path(model))
    except Exception as exc:  # noqa: BLE001 - reported to the parent as the parser's failure
        return {"version": str(trt.__version__), "error": f"{type(exc).__name__}: {exc}"[:300]}
    return {"version": str(trt.__version__), "issues": issues}


def main() -> None:
    if len(sys.argv) != 3:
        print("usage: python -m optcli.backends.tensorrt.parser_check MODULE MODEL.onnx", file=sys.stderr)
        sys.exit(2)
    print(MARKER + json.dumps(_child(sys.argv[1], sys.argv[2])), flush=True)


if __name__ == "__main__":
    main()
