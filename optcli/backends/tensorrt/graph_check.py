"""`optcli check --target tensorrt`: what TensorRT would refuse in a graph, and who said so.

The oracle, in order: a real ONNX parser where one is installed (full TensorRT first, then
TensorRT-RTX: the same onnx-tensorrt parser), run in a child process (parser_check.py); otherwise
the documented support matrix (preflight.py), with the opset window of the installed version where
one is installed but could not answer (a full TensorRT without a usable GPU). With a real parser,
the parser's errors are the findings, plus optcli's own rules that no parser knows (its runner's
refusal of data-dependent output shapes). `require_clean` is what the stages call: the same check,
failing the stage on any finding.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypedDict

from optcli.backends.tensorrt.onnx_support import SOURCE
from optcli.backends.tensorrt.parser_check import ParserIssueJSON, ask, installed_toolkits
from optcli.backends.tensorrt.preflight import Finding, FindingJSON, check_file
from optcli.errors import StageError

# Rules that are optcli's, not TensorRT's: they apply whoever answers.
OWN_RULES = ("data-dependent",)


class GraphCheckJSON(TypedDict):
    oracle: str
    oracle_kind: str
    notes: list[str]
    findings: list[FindingJSON]


@dataclass
class GraphCheck:
    """The findings, the oracle that produced them, and why a better oracle did not answer."""

    oracle: str                       # "TensorRT-RTX 1.7.1.116 ONNX parser" | "documented support matrix (...)"
    kind: str                         # parser | matrix
    findings: list[Finding]
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> GraphCheckJSON:
        return {"oracle": self.oracle, "oracle_kind": self.kind, "notes": self.notes,
                "findings": [f.to_json() for f in self.findings]}


def check_graph(path: Path, use_parser: bool = True) -> GraphCheck:
    """Check `path` with the best oracle installed (see the module docstring). UsageError for a file
    that is not a readable ONNX graph, or whose external data lies outside its folder (the parser would
    follow it), before any parser sees it."""
    from optcli.onnx_model import external_data_files, load_onnx

    load_onnx(path, load_weights=False)
    external_data_files(path)
    notes: list[str] = []
    fallback: tuple[str | None, str | None] = (None, None)
    for toolkit in installed_toolkits() if use_parser else []:
        answer = ask(path, toolkit)
        if answer.failure is None:
            findings = [_parser_finding(i, answer.oracle) for i in answer.issues]
            findings += check_file(path, toolkit.name, answer.version, rules=OWN_RULES)
            return GraphCheck(answer.oracle, "parser", findings, notes)
        notes.append(answer.failure)
        if answer.version and fallback == (None, None):
            fallback = (toolkit.name, answer.version)
    toolkit_name, version = fallback
    scope = f"; opset window of {toolkit_name} {version}" if toolkit_name else ""
    if not notes and use_parser:
        notes.append("no TensorRT or TensorRT-RTX installed: pip install 'optcli[tensorrt-rtx]' asks NVIDIA's parser")
    return GraphCheck(f"documented support matrix ({SOURCE}{scope})", "matrix", check_file(path, toolkit_name, version),
                      notes)


def _parser_finding(issue: ParserIssueJSON, oracle: str) -> Finding:
    node = issue.get("node")
    index = int(node) if isinstance(node, int) and node >= 0 else None
    return Finding(index, str(issue.get("node_name") or ""), str(issue.get("op") or ""), "parser",
                   str(issue.get("message") or "").strip(), oracle)


SKIP_ENV = "OPTCLI_TENSORRT_PREFLIGHT"


class PreflightFailure(StageError):
    """The preflight found what TensorRT's parser would refuse; `findings` holds them all."""

    def __init__(self, path: Path, findings: list[Finding], what: str, oracle: str = "the documented matrix") -> None:
        shown = "; ".join(f.describe() for f in findings[:3])
        more = f" (+{len(findings) - 3} more)" if len(findings) > 3 else ""
        super().__init__(f"{what} has what TensorRT's ONNX parser refuses ({oracle}): {shown}{more}",
                         hint=f"optcli check {path} --target tensorrt lists every finding; if a real TensorRT "
                              f"accepts the graph, set {SKIP_ENV}=off and report the rule")
        self.findings = findings


def require_clean(path: Path, what: str) -> None:
    """Raise PreflightFailure when `path` has findings (unless OPTCLI_TENSORRT_PREFLIGHT=off), from the
    same oracle as `optcli check`: the real parser where one is installed (the matrix refused, e.g.,
    RoBERTa's INT64 CumSum, which NVIDIA's parser imports), else the documented matrix."""
    if os.environ.get(SKIP_ENV, "").lower() in ("off", "0", "no"):
        return
    result = check_graph(path)
    if result.findings:
        raise PreflightFailure(path, result.findings, what, result.oracle)
