"""The sessions a batched model runs on: N side by side (`concurrency=N`, the cores split between them), or
the adaptive layout (`concurrency="adaptive"`): one single-threaded session per core, among which a
gathered batch's calls are shared, plus one session with every core for a request that runs alone.

No fixed layout wins at every load on a CPU (docs/benchmarks/padding-serving.md, run D): one session
with the runtime's threads wins at one caller, one single-threaded session per core at 4 and 16. The
adaptive layout takes each where it wins; it costs one more copy of the model's weights per core.
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from optcli.errors import UsageError

if TYPE_CHECKING:
    from optcli.loaded_model import ResolvedArtifact
    from optcli.runtime.base import Runner

ADAPTIVE = "adaptive"


def check_layout(concurrency: object, batched: bool, threads: object, option: str = "concurrency") -> None:
    """Refuse a layout that is neither N >= 1 nor "adaptive", and the adaptive layout where it cannot apply,
    before anything loads. `option`: how the caller spelt the setting (the API's or the CLI's name)."""
    if concurrency == ADAPTIVE:
        if not batched or threads is not None:
            raise UsageError(f"{option} {ADAPTIVE!r} lays out sessions for batched calls and sets their threads "
                             "itself", hint=f"batch the calls and leave threads out, or pass {option} N")
        return
    if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
        raise UsageError(f"{option} {concurrency!r}: must be a whole number >= 1 or {ADAPTIVE!r}",
                         hint=f"e.g. {option} 2, or {ADAPTIVE} with batching (docs/serve.md)")


def open_layout(resolved: ResolvedArtifact, concurrency: int | str, **options: Any) -> tuple[Runner, Runner | None]:
    """(the runner batched calls share, the wide runner or None). `options` go to both runners."""
    from optcli.loaded_model import open_artifact

    if concurrency != ADAPTIVE:
        return open_artifact(resolved, concurrency=concurrency, **options), None
    cores = os.cpu_count() or 1
    narrow = open_artifact(resolved, concurrency=cores, **{**options, "threads": 1})
    if cores == 1:
        return narrow, None
    try:
        return narrow, open_artifact(resolved, concurrency=1, **{**options, "threads": cores})
    except BaseException:
        narrow.close()
        raise
