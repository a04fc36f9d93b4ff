"""PyTorch module paths for ONNX nodes, and `--exclude` patterns that take either name.

The exporters record where a node came from: the dynamo exporter in the node's metadata
(`pkg.torch.onnx.name_scopes`: the enclosing module paths, then the op), the TorchScript exporter in
the node name itself (`/encoder/layer.11/attention/output/dense/MatMul`). Users know the module
paths (`encoder.layer.11.attention.output.dense`), not the ONNX names.
"""
from __future__ import annotations

import ast
import fnmatch
from collections.abc import Set as AbstractSet
from typing import Any

from optcli.errors import UsageError

SCOPES_KEY = "pkg.torch.onnx.name_scopes"


def _from_scopes(value: str) -> str | None:
    try:
        scopes = ast.literal_eval(value)
    except (ValueError, SyntaxError):
        return None
    if not isinstance(scopes, list) or len(scopes) < 2:
        return None
    # [..., 'encoder.0.conv', 'conv2d']: the last entry is the op, the one before it the module.
    return str(scopes[-2]) or None


def _from_torchscript_name(name: str) -> str | None:
    """'/encoder/encoder.0/conv/Conv' -> 'encoder.0.conv': scope names of container children
    repeat their parent's name ('layer/layer.1'), so a prefix that repeats is dropped."""
    if not name.startswith("/") or name.count("/") < 2:
        return None
    parts: list[str] = []
    for scope in name.strip("/").split("/")[:-1]:
        if parts and scope.startswith(parts[-1] + "."):
            parts.append(scope[len(parts[-1]) + 1:])
        else:
            parts.append(scope)
    return ".".join(parts) or None


def module_path(node: Any) -> str | None:
    """The PyTorch module a node came from, or None when the exporter recorded nothing."""
    for prop in node.metadata_props:
        if prop.key == SCOPES_KEY:
            found = _from_scopes(prop.value)
            if found:
                return found
    return _from_torchscript_name(node.name)


def node_modules(model: Any, *origins: Any) -> dict[str, str]:
    """{node name: module path} for `model`'s nodes. A node whose metadata a later rewrite dropped
    (simplify, fuse: MatMul + Add fused into a new Gemm) is found in the `origins` (earlier graphs of
    the same run): by its name, else by a tensor it produces, else by a weight it reads."""
    by_name: dict[str, str] = {}
    by_output: dict[str, str] = {}
    by_weight: dict[str, str] = {}
    for origin in origins:
        inits = {i.name for i in origin.graph.initializer}
        for node in origin.graph.node:
            path = module_path(node)
            if not path:
                continue
            if node.name:
                by_name.setdefault(node.name, path)
            for t in node.output:
                by_output.setdefault(t, path)
            for t in node.input:
                if t in inits:
                    by_weight.setdefault(t, path)
    out = {}
    for node in model.graph.node:
        path = (module_path(node) or by_name.get(node.name)
                or next((by_output[t] for t in node.output if t in by_output), None)
                or next((by_weight[t] for t in node.input if t in by_weight), None))
        if path:
            out[node.name] = path
    return out


def resolve_excludes(patterns: list[str], nodes: list[str], modules: dict[str, str]) -> list[str]:
    """Node names matched by `patterns`: an ONNX node name, a module path (the nodes inside it too),
    or a glob over either (`encoder.layer.11.*`). A pattern that matches nothing is a usage error."""
    chosen: list[str] = []
    for pattern in patterns:
        hits = [n for n in nodes if _matches(pattern, n, modules.get(n))]
        if not hits:
            examples = sorted({m for m in modules.values()})[:6] or nodes[:6]
            raise UsageError(f"--exclude {pattern}: no node of that name, module path or pattern",
                             hint=f"names look like: {', '.join(examples)}{' ...' if len(examples) >= 6 else ''} "
                                  "(`optcli debug-int8 MODEL --calib DIR` lists them)")
        chosen += [n for n in hits if n not in chosen]
    return chosen


def check_exclude_ops(op_types: list[str], present: set[str], earlier: AbstractSet[str] = frozenset()) -> list[str]:
    """--exclude-op types, each of which the graph being quantized has (`present`); one it lacks is a usage
    error, as an --exclude that matches nothing is (`--exclude-op Matmul`, a typo of MatMul, silently kept
    nothing in float). `earlier`: op types of the run's earlier graphs, to say when a rewrite removed them."""
    for op in op_types:
        if op in present:
            continue
        known = present | set(earlier)
        near = [p for p in sorted(known) if p.lower() == str(op).lower() and p != op]
        if op in earlier:
            raise UsageError(f"--exclude-op {op}: no {op} node is left in the graph being quantized (an earlier "
                             "stage rewrote them)",
                             hint=f"its op types: {_listed(present)}; exclude those, or keep the graph with --no-fuse")
        raise UsageError(f"--exclude-op {op}: the model has no node of that op type"
                         + (f" (did you mean {near[0]}?)" if near else ""),
                         hint=f"op types in the graph: {_listed(present)} (ONNX names, case-sensitive)")
    return list(op_types)


def _listed(names: set[str]) -> str:
    ordered = sorted(names)
    return ", ".join(ordered[:12]) + (" ..." if len(ordered) > 12 else "")


def _matches(pattern: str, node: str, module: str | None) -> bool:
    if pattern == node or fnmatch.fnmatchcase(node, pattern):
        return True
    if module is None:
        return False
    return module == pattern or module.startswith(pattern + ".") or fnmatch.fnmatchcase(module, pattern)
