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
@click.option("--json", "as_json", is_flag=True, help="Print the findings as JSON.")
def check_cmd(model: Path, target: str, as_json: bool) -> None:
    """Check an ONNX graph against what TensorRT's ONNX parser documents (ops and their types, Q/DQ
    types, zero points and axes, constant inputs, opset range, data-dependent shapes), without a GPU
    or TensorRT. Prints one line per finding: node, op, reason, rule and its source.
    Exit 0 clean, 1 findings, 2 bad input."""
    from optcli.backends.registry import is_onnx_file
    from optcli.backends.tensorrt.preflight import check_file

    if not model.is_file() or not is_onnx_file(model):
        raise UsageError(f"{model} is not an ONNX file", hint="pass a .onnx file (optcli compile writes one per stage)")
    findings = check_file(model)
    if as_json:
        click.echo(json.dumps({"model": str(model), "target": target, "findings": [f.to_json() for f in findings]},
                              indent=2))
    else:
        for f in findings:
            click.echo(f.describe())
        nodes = len({f.node for f in findings})
        click.echo(f"{model.name}: {len(findings)} finding(s) in {nodes} node(s) for TensorRT" if findings
                   else f"{model.name}: no findings for TensorRT")
    exit_with(EXIT_STAGE_FAILED if findings else EXIT_OK)
