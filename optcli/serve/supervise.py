"""Keep a served model up: notice that the Triton process exited, or that the Python-backend stub
running the model died while the server lives on (Triton then answers every request with "Stub process
... is not healthy" and still reports itself ready), and start it again, a bounded number of times,
saying why each time. Also ending a server's process group, shared by stop() and restart().

Linux only, as the server is: the stubs are found as the server's children in /proc.
"""
from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from optcli.errors import ServeError

POLL_S = 0.5
RESTART_WINDOW_S = 600.0
STUB_NAME = "triton_python_b"     # the stub's comm (its executable's name, cut to 15 characters)
# Lines of the server's log that say why it or a stub died, most telling first.
_CAUSES = (re.compile(r"what\(\):\s*(.*)"), re.compile(r"(terminate called .*)"),
           re.compile(r"(Signal \(\d+\) received)"), re.compile(r"(Stub process .* is not healthy)"))


def end_group(process: subprocess.Popen[bytes], timeout: float) -> int | None:
    """SIGTERM the server (it finishes requests in flight), wait up to `timeout`, then SIGKILL its whole
    process group (the stubs with it). The group is killed even when the wait is interrupted."""
    code = None
    try:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
        try:
            code = process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pass
    finally:
        try:
            os.killpg(process.pid, signal.SIGKILL)  # stubs left behind by a server that died or hung
        except (ProcessLookupError, PermissionError):
            pass
        if code is None:
            code = process.wait()
    return code


def stub_pids(server_pid: int) -> list[int]:
    """The server's Python-backend stub processes (its children named like the stub)."""
    found = []
    for child in _children(server_pid):
        try:
            if Path(f"/proc/{child}/comm").read_text().strip() == STUB_NAME:
                found.append(child)
        except OSError:
            continue
    return sorted(found)


def _children(pid: int) -> list[int]:
    out: list[int] = []
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            out += [int(p) for p in (task / "children").read_text().split()]
    except OSError:
        pass
    return out


def _alive_child(pid: int, parent: int) -> bool:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return False
    return fields[0] != "Z" and int(fields[1]) == parent


def describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"signal {-code} ({signal.Signals(-code).name})"
        except ValueError:
            return f"signal {-code}"
    return f"code {code}"


def crash_cause(lines: list[str]) -> str | None:
    """The log line that says why the server or a stub died (`what(): std::bad_alloc`, ...)."""
    tail = [ln.strip() for ln in lines[-200:]]
    for pattern in _CAUSES:
        for line in reversed(tail):
            match = pattern.search(line)
            if match:
                return match.group(1).strip()[:300]
    return None


def failure(server: Any) -> str | None:
    """Why the running server needs a restart, or None while it is healthy."""
    process = server.process
    if process is None:
        return None
    code = process.poll()
    if code is not None:
        why = f"the server exited with {describe_exit(code)}"
    else:
        dead = [p for p in server.stub_pids if not _alive_child(p, process.pid)]
        if not dead:
            return None
        why = f"the model's Python-backend stub (pid {dead[0]}) died; the server answers no request without it"
    cause = crash_cause(server.log_lines())
    return f"{why}: {cause}" if cause else why


def watch(server: Any, on_event: Callable[[str], None]) -> None:
    """Block until the server is stopped; restart it when failure() says so, at most
    `server.options.max_restarts` times within RESTART_WINDOW_S, then raise ServeError."""
    limit = server.options.max_restarts
    recent: list[float] = []
    while server.process is not None:
        time.sleep(POLL_S)
        why = failure(server)
        if why is None:
            continue
        now = time.monotonic()
        recent = [t for t in recent if now - t < RESTART_WINDOW_S]
        if len(recent) >= limit:
            raise ServeError(f"{why}; not restarting it again ({len(recent)} restart(s) in the last "
                             f"{RESTART_WINDOW_S / 60:g} minutes, --max-restarts {limit})",
                             hint="rerun with --verbose to see the server's log; raise --max-restarts to allow more")
        recent.append(now)
        on_event(f"{why}; restarting it ({len(recent)} of at most {limit} in {RESTART_WINDOW_S / 60:g} minutes)")
        started = time.monotonic()
        server.restart()
        on_event(f"the server is ready again after {time.monotonic() - started:.1f} s (restart {server.restarts})")
