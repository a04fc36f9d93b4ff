"""The README.md written beside config.pbtxt: what was exported, and the exact commands to serve the
model with tritonserver and to measure it with a perf_analyzer concurrency sweep."""
from __future__ import annotations

import shlex
from pathlib import Path
from typing import TYPE_CHECKING

from optcli.version import __version__

if TYPE_CHECKING:
    from optcli.deploy.triton_config import ResolvedConfig, TritonOptions
    from optcli.deploy.triton_source import ServedModel

# perf_analyzer steps concurrency linearly; about this many points keep a sweep to a few minutes.
SWEEP_POINTS = 8
SWEEP_CAP = 256


def sweep_range(instances: int, max_batch_size: int, preferred: list[int]) -> tuple[int, int, int]:
    """start:end:step for --concurrency-range: up to twice the requests that fill every instance's batch.

    With dynamic batching, an instance only runs full batches of B when about B requests are in
    flight for it, so throughput keeps rising until concurrency ~ instances x B and then only latency
    grows; sweeping to twice that shows the knee.
    """
    batch = max(preferred) if preferred else max(max_batch_size, 1)
    end = min(max(2 * instances * batch, SWEEP_POINTS), SWEEP_CAP)
    step = max(1, end // SWEEP_POINTS)
    return 1, end, step


def _cmd(lines: list[str]) -> str:
    return "    " + " \\\n      ".join(lines)


def readme_text(model: ServedModel, cfg: ResolvedConfig, name: str, version: int, repo: Path,
                options: TritonOptions, notes: list[str]) -> str:
    from optcli.deploy.triton_backend import piece_of

    piece = piece_of(model)
    repo_arg = shlex.quote(str(repo))
    gpu = cfg.kind == "gpu"
    tree = cfg.tree
    batching = cfg.max_batch_size > 0
    lines = [f"# {name}", "",
             f"Triton Inference Server model repository entry written by optcli {__version__} "
             "(`optcli export-triton`).",
             "",
             f"- source: {model.source}",
             piece.readme_files(model, version),
             f"- precision: {model.precision}; max_batch_size: {cfg.max_batch_size}"
             + ("" if batching else " (no batching: requests carry the full shape)"),
             "- dynamic batching: " + (("on, preferred batch sizes " + ", ".join(map(str, cfg.preferred_batch_sizes))
                                        if cfg.preferred_batch_sizes else "on (Triton picks the batch sizes)")
                                       + (f", max queue delay {options.max_queue_delay_us} µs"
                                          if options.max_queue_delay_us else ", no queue delay")
                                       if cfg.dynamic_batching else "off"),
             f"- instances: {options.instances} x {'KIND_GPU (per GPU)' if gpu else 'KIND_CPU'}"]
    lines += piece.readme_facts(model)
    lines += ["", "| tensor | | data_type | dims (config) |", "|---|---|---|---|"]
    for kind in ("input", "output"):
        for t in cfg.tensors[kind]:
            lines.append(f"| `{t['name']}` | {kind} | {t['data_type']} | [{', '.join(map(str, t['dims']))}]"
                         + (" (reshape [])" if "reshape" in t else "") + " |")
    if batching:
        lines.append("\nWith max_batch_size > 0 the batch dim is not in `dims`; Triton adds it (shape [-1] + dims). "
                     "-1 is a dynamic dim.")

    warmup = tree.get("model_warmup")
    if isinstance(warmup, list):
        sizes = " and ".join(str(w["batch_size"]) for w in warmup)
        lines += ["", f"Warm-up: each instance runs batch {sizes} before the model reports ready (random data for "
                  "float inputs, zeros for integer inputs, which are often indices)."]
    docker_gpu = ["--gpus all"] if gpu else []
    lines += ["", "## Serve", "",
              "Run from the folder where `optcli export-triton` was run (the repository is "
              f"`{repo}`). With Docker, picking the Triton release `<YY.MM>` "
              + piece.readme_release(model), "",
              _cmd(["docker run --rm " + " ".join(docker_gpu + ["-p 8000:8000 -p 8001:8001 -p 8002:8002"]),
                    f'-v "$(realpath {repo_arg})":/models',
                    "nvcr.io/nvidia/tritonserver:<YY.MM>-py3",
                    f"tritonserver --model-repository=/models --model-control-mode=explicit --load-model={name}"]),
              *(["", "The Python backend imports optcli: the Triton image needs it and the model's runtime "
                  "(e.g. an image built `FROM nvcr.io/nvidia/tritonserver:<YY.MM>-py3` that runs "
                  "`pip install 'optcli[cpu]'`). On one machine, `optcli serve` runs this without Docker "
                  "(docs/serve.md)."] if model.platform == "python" else []),
              "", "or with `tritonserver` installed on the host:", "",
              _cmd([f'tritonserver --model-repository="$(realpath {repo_arg})"',
                    f"--model-control-mode=explicit --load-model={name}"]),
              "", "Then check it is ready (warm-up runs before it reports ready) and see the config Triton uses:", "",
              f"    curl -fsS localhost:8000/v2/models/{name}/versions/{version}/ready && echo ready",
              f"    curl -s localhost:8000/v2/models/{name}/config"]

    start, end, step = sweep_range(options.instances, cfg.max_batch_size, cfg.preferred_batch_sizes)
    perf = [f"perf_analyzer -m {name} -x {version} -i grpc -u localhost:8001 --async",
            f"--concurrency-range {start}:{end}:{step} --percentile=95 --measurement-interval 5000"]
    shapes = " ".join(f"--shape {shlex.quote(n + ':' + ','.join(map(str, dims)))}"
                      for n, dims in cfg.perf_shapes.items())
    if shapes:
        perf.append(shapes)
    perf.append(f"-f {name}-v{version}-perf.csv")
    lines += ["", "## Measure: a concurrency sweep", "",
              "With the server up (perf_analyzer is in the `nvcr.io/nvidia/tritonserver:<YY.MM>-py3-sdk` image; "
              "run it there with `docker run --rm --net=host ...`):", "", _cmd(perf), "",
              f"Each request carries batch 1 (`-b 1`, the default); the dynamic batcher forms the batches. "
              f"The sweep raises concurrency from {start} in steps of {step}, up to {end}: throughput "
              f"(infer/sec) rises until the {options.instances} instance(s) run full batches, after which only "
              "latency grows. Choose the concurrency at the knee for your latency budget (p95 column), then "
              "tune: more instances when the device is idle between batches, a longer "
              "`max_queue_delay_microseconds` for fuller batches at low load, preferred batch sizes where the "
              "backend is fastest."]
    dynamic_inputs = [s.name for s in model.inputs if s.name not in cfg.perf_shapes
                      and any(not isinstance(d, int) for d in (s.shape[1:] if batching else s.shape))]
    if dynamic_inputs:
        lines.append("\nInputs " + ", ".join(f"`{n}`" for n in dynamic_inputs) + " have dynamic dims of unknown "
                     "size: add `--shape NAME:d1,d2` (dims without the batch) for each.")
    if notes:
        lines += ["", "## Notes", ""] + [f"- {n}" for n in notes]
    return "\n".join(lines) + "\n"
