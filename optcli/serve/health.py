"""Talk to a running Triton over its own HTTP API (KServe v2): ready and health checks, model
statistics, and the free-port checks done before a server starts. Client side only."""
from __future__ import annotations

import errno
import json
import socket
import urllib.error
import urllib.request
from typing import Any, TypedDict

from optcli.errors import UsageError


def check_port_free(host: str, port: int, flag: str) -> None:
    """UsageError (exit 2) when `port` is taken on `host`, naming the flag that moves it."""
    if not 0 < port < 65536:
        raise UsageError(f"{flag} {port}: not a TCP port", hint=f"pass {flag} between 1 and 65535")
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM) as sock:
        # As servers do: a port whose last connections linger in TIME_WAIT is free to listen on.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise UsageError(f"port {port} on {host} is in use ({flag})",
                                 hint=f"stop what listens there, or pass another {flag}") from None
            if exc.errno == errno.EADDRNOTAVAIL:
                raise UsageError(f"--host {host} is not an address of this machine",
                                 hint="use 127.0.0.1 (this machine only) or 0.0.0.0 (every interface)") from None
            raise UsageError(f"cannot listen on {host}:{port} ({flag}): {exc.strerror or exc}",
                             hint=f"pass another {flag} (ports below 1024 need root)") from None


def free_port(host: str = "127.0.0.1") -> int:
    """A port the OS reports free right now (tests and `--http-port 0`)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def http_status(url: str, timeout: float = 2.0) -> int | None:
    """The HTTP status of GET `url`, or None when nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310 - our own http:// URL
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except (urllib.error.URLError, OSError):
        return None


def http_json(url: str, timeout: float = 5.0) -> Any:
    """GET `url` and parse its JSON body."""
    with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310 - our own http:// URL
        return json.loads(response.read().decode("utf-8"))


class InferCount(TypedDict, total=False):
    count: int
    ns: int


class BatchStat(TypedDict, total=False):
    batch_size: int
    compute_input: InferCount
    compute_infer: InferCount
    compute_output: InferCount


class ModelStat(TypedDict, total=False):
    name: str
    version: str
    inference_count: int
    execution_count: int
    batch_stats: list[BatchStat]


class ModelStatistics(TypedDict, total=False):
    """Triton's /v2/models/<name>/stats answer, the parts optcli reads."""

    model_stats: list[ModelStat]


def batch_sizes(stats: ModelStatistics) -> dict[int, int]:
    """{batch size: executions} from Triton's /v2/models/<name>/stats answer (its batch_stats)."""
    out: dict[int, int] = {}
    for model in stats.get("model_stats", []):
        for entry in model.get("batch_stats", []):
            size = int(entry.get("batch_size", 0))
            count = int((entry.get("compute_infer") or {}).get("count", 0))
            if count:
                out[size] = out.get(size, 0) + count
    return dict(sorted(out.items()))
