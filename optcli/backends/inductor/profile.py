"""What a per-layer profile of an AOTInductor package can show: the operators the compiled model calls
through torch's dispatcher (fallbacks Inductor could not compile, e.g. quantized::max_pool2d, 18% of
the INT8 digits CNN), timed by torch's RecordFunction profiler, and one row for the compiled code: the
C++ kernels Inductor generated and the oneDNN convolutions and matmuls it calls directly, none of
which record a time of their own (the row is the run's wall time minus the operators')."""
from __future__ import annotations

import time
from pathlib import Path

from optcli.benchmark.feeds import FeedSource, check_batch
from optcli.loaded_model import ResolvedArtifact, open_artifact
from optcli.profiling.result import LayerTime, ProfileResult, finish

COMPILED = "compiled code"


def profile_package(resolved: ResolvedArtifact, *, batch: int = 1, runs: int = 100, warmup: int = 10,
                    threads: int | None = None, inputs_dir: Path | None = None,
                    pins: list[str] | None = None) -> ProfileResult:
    """Run the package `warmup + runs` times; the timed runs under the profiler."""
    from torch.autograd.profiler_legacy import profile  # RecordFunction only: kineto prints to fd 2

    from optcli.backends.inductor.quiet import quiet

    runner = open_artifact(resolved, concurrency=1, threads=threads)
    try:
        source = FeedSource.for_runner(runner, inputs_dir, pins)
        check_batch(source.specs, batch)
        feeds = runner.normalize(source.batch(batch))
        for _ in range(warmup):
            runner.run_normalized(feeds)
        with quiet(), profile() as prof:
            t0 = time.perf_counter()
            for _ in range(runs):
                runner.run_normalized(feeds)
            wall_ms = (time.perf_counter() - t0) * 1000.0
        settings = {**runner.settings, "batch": batch, "warmup": warmup, "inputs": source.description}
    finally:
        runner.close()
    layers = [LayerTime(e.key, e.key.removeprefix("aten::"), [], e.self_cpu_time_total / 1000.0, e.count,
                        provider="aten") for e in prof.key_averages() if e.self_cpu_time_total > 0]
    rest = wall_ms - sum(x.total_ms for x in layers)
    if rest > 0:
        layers.append(LayerTime(COMPILED, "compiled", [], rest, runs, provider="inductor",
                                note="generated C++ kernels and direct oneDNN calls: no time per kernel"))
    return ProfileResult(artifact=resolved.to_json(), runtime="inductor", settings=settings, runs=runs,
                         layers=finish(layers, runs), run_ms=wall_ms / runs,
                         warnings=["times include the profiler's own cost per recorded operator"])
