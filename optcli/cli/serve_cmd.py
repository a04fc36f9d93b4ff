"""`optcli serve ARTIFACT`: a real Triton Inference Server on this machine, until Ctrl-C or SIGTERM."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from optcli.cli.bench_cmd import int_list

# optcli.batching.PADDING, spelled out here: importing it would import numpy at CLI start-up.
PADDING_MODES = ("auto", "longest", "bucket", "off")
# Triton data type -> numpy dtype name, for the printed client example.
_NUMPY = {"BOOL": "bool_", "UINT8": "uint8", "UINT16": "uint16", "UINT32": "uint32", "UINT64": "uint64",
          "INT8": "int8", "INT16": "int16", "INT32": "int32", "INT64": "int64", "FP16": "float16",
          "FP32": "float32", "FP64": "float64"}


def client_example(server: Any) -> str:
    """A tritonclient (gRPC) snippet that sends one request of zeros to the served model."""
    export = server.export
    batch = [1] if export.max_batch_size > 0 else []
    lines = ["import numpy as np", "import tritonclient.grpc as grpcclient",
             f"client = grpcclient.InferenceServerClient({server.urls['grpc']!r})", "inputs = []"]
    for name, dtype in export.tensors["input"]:
        triton = dtype.removeprefix("TYPE_")
        shape = tuple(batch + [d if d > 0 else 1 for d in export.example_dims.get(name, ())])
        lines += [f"x = np.zeros({shape}, np.{_NUMPY.get(triton, 'float32')})",
                  f"inputs.append(grpcclient.InferInput({name!r}, x.shape, {triton!r}))",
                  "inputs[-1].set_data_from_numpy(x)"]
    first_output = export.tensors["output"][0][0]
    lines.append(f"print(client.infer({export.name!r}, inputs).as_numpy({first_output!r}))")
    return "\n".join(lines)


def _ready_text(server: Any) -> str:
    export, urls = server.export, server.urls
    batching = (f"max_batch_size {export.max_batch_size}, Triton's dynamic batcher"
                if export.max_batch_size > 0 else "no batching (the model has a fixed batch)")
    example = "\n".join("    " + line for line in client_example(server).splitlines())
    return (f"ready: {urls['http']} (HTTP)  {urls['grpc']} (gRPC)\n"
            f"  Triton {server.version} serving {export.name!r}: {batching}, {export.instances} x {export.kind} "
            "instance(s), Python backend running optcli's runner\n"
            f"  health:  curl -fsS {urls['health']}\n"
            f"  metrics: curl -s {urls['metrics']}\n"
            f"  stats:   curl -s {server.base_url}/v2/models/{export.name}/stats\n"
            f"  client (pip install 'tritonclient[grpc]'):\n{example}\n"
            "Ctrl-C or SIGTERM stops the server (requests in flight finish first).")


@click.command("serve")
@click.argument("artifact")
@click.option("--name", help="Model name in Triton's URLs [the model's file or run name].")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on; 0.0.0.0 serves every interface (anyone who reaches this machine).")
@click.option("--http-port", type=click.IntRange(0, 65535), default=8000, show_default=True,
              help="HTTP/REST port (0: any free port).")
@click.option("--grpc-port", type=click.IntRange(0, 65535), default=8001, show_default=True, help="gRPC port.")
@click.option("--metrics-port", type=click.IntRange(0, 65535), default=8002, show_default=True,
              help="Prometheus metrics port.")
@click.option("--max-batch-size", type=click.IntRange(0),
              help="Largest batch Triton's dynamic batcher forms; 0 turns batching off. [8 for a dynamic batch]")
@click.option("--max-queue-delay-us", type=click.IntRange(0),
              help="How long a request may wait for a fuller batch, in microseconds. [0]")
@click.option("--preferred-batch-sizes", metavar="N[,N...]", help="Batch sizes the batcher aims for.")
@click.option("--instances", type=click.IntRange(1), default=1, show_default=True,
              help="Model instances (each runs batches on its own; on CPU they split the cores).")
@click.option("--kind", type=click.Choice(["cpu", "gpu"]), help="Instance kind. [engine: gpu; otherwise cpu]")
@click.option("--threads", type=click.IntRange(1), help="Runner threads per instance [cores / instances].")
@click.option("--input", "-i", "inputs", multiple=True, metavar="NAME:SHAPE",
              help="Concrete shape for an input with dynamic dims (sizes the warm-up), e.g. input_ids:1x128.")
@click.option("--startup-timeout", type=click.FloatRange(1), default=300.0, show_default=True,
              help="Seconds to wait for the model to be ready.")
@click.option("--max-request-mib", type=click.FloatRange(min=0, min_open=True), default=64.0, show_default=True,
              help="Largest request: the bytes its input shapes claim, checked before anything is allocated.")
@click.option("--max-restarts", type=click.IntRange(0), default=5, show_default=True,
              help="Restarts of a server that died, within 10 minutes, before optcli serve gives up (exit 1).")
@click.option("--padding", type=click.Choice(PADDING_MODES), default="auto", show_default=True,
              help="How an encoder's requests of different lengths share a call: auto (the cheapest calls of "
                   "similar length), longest (one call padded to the longest), bucket (calls by length bucket of "
                   "16), off (equal shapes only). See docs/serve.md.")
@click.option("--verbose", is_flag=True, help="Show the server's own log on stderr.")
@click.option("--json", "as_json", is_flag=True, help="Print the ready line as one JSON object.")
def serve_cmd(artifact: str, preferred_batch_sizes: str | None, inputs: tuple[str, ...], startup_timeout: float,
              as_json: bool, max_request_mib: float, **options: Any) -> None:
    """Serve ARTIFACT (a run's report.json or folder, .onnx, OpenVINO .xml, .engine) with a real Triton
    Inference Server on this machine (the `serve` extra ships it), over HTTP and gRPC, with Triton's
    dynamic batcher; runs until Ctrl-C or SIGTERM. See docs/serve.md."""
    from optcli import api

    click.echo(f"starting Triton for {artifact} ...", err=True)
    server = api.serve(Path(artifact), preferred_batch_sizes=int_list(preferred_batch_sizes, "--preferred-batch-sizes")
                       if preferred_batch_sizes else [], inputs=list(inputs), startup_timeout_s=startup_timeout,
                       max_request_bytes=int(max_request_mib * 2**20), **options)
    try:
        if server.cleaned:
            click.echo(f"removed what an earlier optcli serve left (its processes are gone): "
                       f"{', '.join(server.cleaned)}", err=True)
        if as_json:
            click.echo(json.dumps({"ready": True, "name": server.name, "triton_version": server.version,
                                   "pid": server.process.pid if server.process else None,
                                   "urls": server.urls, "max_batch_size": server.export.max_batch_size,
                                   "instances": server.export.instances}))
        else:
            click.echo(_ready_text(server))
        for note in server.export.notes:
            click.secho(f"note: {note}", fg="yellow", err=True)
        server.watch(on_event=lambda text: click.secho(f"warning: {text}", fg="yellow", err=True))
    finally:
        try:
            if server.poll() is None:
                click.echo("stopping the server (requests in flight finish first) ...", err=True)
        finally:  # even when stderr is gone (a closed pipe): the server and its files must not outlive us
            server.stop()
