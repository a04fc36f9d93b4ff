"""The bound on intra-op threads, wherever they are asked for (--threads, [bench] threads, the API's
threads=): at most the machine's logical cores. More threads than cores only slow a model down, and
`--threads 100000` once started ~9,000 threads and 16 GB before the process stopped answering SIGTERM."""
from __future__ import annotations

import os
from typing import Any

from optcli.errors import UsageError


def max_threads() -> int:
    """The machine's logical cores: the most intra-op threads optcli starts per session."""
    return os.cpu_count() or 1


def check_threads(value: Any, where: str) -> None:
    """UsageError (exit 2) unless `value` is None (the backend's default) or a whole number from 1 to
    max_threads(); `where` names the setting in the message (`--threads`, `[bench] threads`)."""
    if value is None:
        return
    limit = max_threads()
    if isinstance(value, bool) or not isinstance(value, int):
        raise UsageError(f"{where} {value!r} is not a whole number", hint=f"pass 1 to {limit} (this machine's cores)")
    if not 1 <= value <= limit:
        raise UsageError(f"{where} {value} is out of range: this machine has {limit} cores",
                         hint=f"pass 1 to {limit}, or leave it out to use every core")
