"""`optcli export-triton ARTIFACT_OR_REPORT --repo models/`: write a Triton model repository entry."""
from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import click

from optcli.cli.main import exit_with

if TYPE_CHECKING:
    from optcli.deploy import TritonExport

_GRAPH_LEVELS = ["all", "extended", "basic", "disabled"]


@click.command("export-triton")
@click.argument("source", metavar="ARTIFACT_OR_REPORT")
@click.option("--repo", required=True, type=click.Path(path_type=Path),
              help="Triton model repository folder (created if missing).")
@click.option("--name", help="Model name in the repository [the model's file name]; sanitised to [A-Za-z0-9_.-].")
@click.option("--version", "version", type=int, help="Version folder number [next free number].")
@click.option("--force", is_flag=True, help="Replace an existing version folder.")
@click.option("--replace", is_flag=True,
              help="Versions of a different model under this name (other tensors or platform) are removed; "
                   "without it such an export is refused (config.pbtxt is shared by all versions).")
@click.option("--max-batch-size", type=int,
              help="Largest batch Triton forms; 0 turns batching off. [engine: its profile max; ONNX with a "
                   "dynamic batch: 8; otherwise 0]")
@click.option("--dynamic-batching", "dynamic_batching", metavar="on|off|preferred=8,16,32",
              help="Dynamic batcher, with optional preferred batch sizes. [on when the model batches]")
@click.option("--max-queue-delay-us", type=click.IntRange(0),
              help="How long a request may wait for a fuller batch, in microseconds. [0]")
@click.option("--preserve-ordering", is_flag=True, help="Return responses in request order.")
@click.option("--instances", type=click.IntRange(1), default=1, show_default=True,
              help="Model instances (per GPU for --kind gpu).")
@click.option("--backend", type=click.Choice(["python"]),
              help="python: Triton's Python backend runs the artifact with optcli's runner (any artifact; the "
                   "server's Python needs optcli). [the artifact's own: onnxruntime, openvino, tensorrt]")
@click.option("--kind", type=click.Choice(["cpu", "gpu"]),
              help="Instance kind. [engine: gpu; ONNX: where the run targeted, cpu for a bare .onnx]")
@click.option("--graph-level", type=click.Choice(_GRAPH_LEVELS),
              help="ONNX Runtime graph optimization level in the server. [all]")
@click.option("--intra-op-threads", type=click.IntRange(0), help="ONNX Runtime threads per instance. [all cores]")
@click.option("--ort-tensorrt", is_flag=True,
              help="ONNX on GPU through ONNX Runtime's TensorRT provider (precision from the model).")
@click.option("--no-warmup", is_flag=True, help="Do not add model_warmup samples.")
@click.option("--input", "-i", "inputs", multiple=True, metavar="NAME:SHAPE",
              help="Concrete shape for an input with dynamic dims (sizes warm-up and perf_analyzer --shape), "
                   "e.g. input_ids:1x128.")
@click.option("--json", "as_json", is_flag=True, help="Print what was written as JSON.")
def export_triton_cmd(source: str, repo: Path, name: str | None, version: int | None, force: bool, replace: bool,
                      max_batch_size: int | None, dynamic_batching: str | None, max_queue_delay_us: int | None,
                      preserve_ordering: bool, instances: int, backend: str | None, kind: str | None,
                      graph_level: str | None,
                      intra_op_threads: int | None, ort_tensorrt: bool, no_warmup: bool, inputs: tuple[str, ...],
                      as_json: bool) -> None:
    """Write a ready Triton Inference Server model repository entry for ARTIFACT_OR_REPORT (a run's
    report.json or its folder, an .onnx file, or an .engine/.plan with model.engine.json beside it):
    <repo>/<name>/config.pbtxt, <repo>/<name>/<version>/model.onnx|model.plan and a README.md with
    the tritonserver and perf_analyzer commands."""
    from optcli import api

    options = api.triton_options(max_batch_size=max_batch_size, dynamic_batching=dynamic_batching,
                                 max_queue_delay_us=max_queue_delay_us, preserve_ordering=preserve_ordering,
                                 instances=instances, backend=backend, kind=kind, graph_level=graph_level,
                                 intra_op_threads=intra_op_threads, ort_tensorrt=ort_tensorrt, warmup=not no_warmup,
                                 inputs=list(inputs))
    result = api.export_triton(source, repo, options, name=name, version=version, force=force, replace=replace)
    if as_json:
        click.echo(json.dumps(result.to_json(), indent=2))
    else:
        echo_export(result)
    exit_with(0)


def echo_export(result: TritonExport, err: bool = False) -> None:
    """The human summary of an export (compile --triton-repo prints the same; to stderr with --json)."""
    verb = "replaced" if result.replaced else "wrote"
    click.echo(f"{verb} Triton model {result.name!r} version {result.version} in {result.model_dir}", err=err)
    click.echo(f"  {result.config_path}  ({result.platform}, max_batch_size {result.max_batch_size}, "
               f"{result.instances} x {result.kind})", err=err)
    click.echo(f"  {result.model_path}", err=err)
    click.echo(f"  {result.readme_path}  (tritonserver and perf_analyzer commands)", err=err)
    for note in result.notes:
        click.secho(f"note: {note}", fg="yellow", err=True)
