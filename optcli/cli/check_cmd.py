"""`optcli check MODEL.onnx --target tensorrt`: what TensorRT's ONNX parser would refuse, on any machine."""
from __future__ import annotations

import json
from pathlib import Path

import click

from optcli.cli.main import exit_with
from optcli.errors import EXIT_OK, EXIT_STAGE_FAILED, UsageError


@click.command("check")
@click.argument("model", type=click.Path(path_type=Path))
@click.option("--target", type=click.Choice(["tensorrt"]), default="tensorrt", show_default=True,
              help="What to check the graph against.")
@click.option("--matrix", "matrix_only", is_flag=True,
              help="Use the documented support matrix even where a real parser is installed.")
@click.option("--json", "as_json", is_flag=True, help="Print the findings as JSON.")
def check_cmd(model: Path, target: str, matrix_only: bool, as_json: bool) -> None:
    """Check an ONNX graph against TensorRT's ONNX parser: the real one where TensorRT or TensorRT-RTX is
    installed (in a child process, no GPU needed for TensorRT-RTX), else the documented support matrix
    (ops and their types, Q/DQ types, zero points and axes, constant inputs, opset range, data-dependent
    shapes). Prints one line per finding (node, op, reason, rule and its source) and which oracle answered.
    Exit 0 clean, 1 findings, 2 bad input."""
    from optcli.backends.registry import is_onnx_file
    from optcli.backends.tensorrt.graph_check import check_graph

    if not model.is_file() or not is_onnx_file(model):
        raise UsageError(f"{model} is not an ONNX file", hint="pass a .onnx file (optcli compile writes one per stage)")
    result = check_graph(model, use_parser=not matrix_only)
    findings = result.findings
    if as_json:
        click.echo(json.dumps({"model": str(model), "target": target, **result.to_json()}, indent=2))
    else:
        for f in findings:
            click.echo(f.describe())
        for note in result.notes:
            click.echo(f"note: {note}")
        nodes = len({f.node for f in findings})
        summary = (f"{model.name}: {len(findings)} finding(s) in {nodes} node(s) for TensorRT" if findings
                   else f"{model.name}: no findings for TensorRT")
        click.echo(f"{summary} (oracle: {result.oracle})")
    exit_with(EXIT_STAGE_FAILED if findings else EXIT_OK)
