"""One Triton Inference Server process serving one optcli artifact: the repository written into a
private folder (export-triton's Python-backend target), the bundled `tritonserver` started on it,
ready when Triton says so, stopped gracefully (SIGTERM: Triton finishes in-flight requests), and
killed with its backend stubs if it does not stop in time. The folder and the server's shared-memory
regions are removed on stop, and what a dead earlier server left is removed on start (leftovers.py).
HTTP reaches Triton through a checking proxy (http_guard.py); `watch()` restarts a server that died
(supervise.py).
"""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from optcli.errors import OptcliError, ServeError, UsageError
from optcli.serve.bundled_triton import find_bundled_triton
from optcli.serve.health import ModelStatistics, batch_sizes, check_port_free, free_port, http_json, http_status
from optcli.serve.http_guard import HttpGuard
from optcli.serve.leftovers import Workdir, claim_workdir, remove_shm, sweep
from optcli.serve.request_check import DEFAULT_MAX_REQUEST_BYTES, ModelShapes
from optcli.serve.supervise import end_group, stub_pids, watch

EXIT_TIMEOUT_S = 10       # Triton's own wait for in-flight requests on shutdown
_FAILED_LOAD = re.compile(r"failed to load '[^']*' version \d+: (.*?)\"?$")
_LISTEN_FAILED = re.compile(r"(failed to start|Address already in use|Socket '.*' already in use)", re.I)


@dataclass
class ServeOptions:
    """How `optcli serve` runs the server (the command's flags)."""

    name: str | None = None
    host: str = "127.0.0.1"               # loopback by default: 0.0.0.0 exposes it on every interface
    http_port: int = 8000                 # 0: any free port
    grpc_port: int = 8001
    metrics_port: int = 8002
    max_batch_size: int | None = None
    max_queue_delay_us: int | None = None
    preferred_batch_sizes: list[int] = field(default_factory=list)
    instances: int = 1
    kind: str | None = None
    threads: int | None = None            # runner threads per instance [cores / instances on CPU]
    inputs: list[str] = field(default_factory=list)   # NAME:SHAPE pins that size the warm-up
    startup_timeout_s: float = 300.0
    verbose: bool = False                 # the server's log on stderr instead of a file
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES   # one request's inputs, checked before Triton sizes them
    max_restarts: int = 5                 # watch(): restarts allowed within supervise.RESTART_WINDOW_S
    padding: str = "auto"                 # an encoder's requests of different lengths: optcli/batching.py's padding


class TritonServer:
    """A started server: `urls`, `statistics()`, `stop()`, `wait()`; a context manager."""

    def __init__(self, artifact: str | Path, options: ServeOptions | None = None) -> None:
        self.artifact = artifact
        self.options = options or ServeOptions()
        self.process: subprocess.Popen[bytes] | None = None
        self.workdir: Path | None = None
        self.export: Any = None
        self.version = "?"
        self.cleaned: list[str] = []      # what start() removed of dead earlier servers
        self.restarts = 0
        self.guard: HttpGuard | None = None
        self.stub_pids: list[int] = []    # the model's Python-backend stubs once ready (supervise.py)
        self._owned: Workdir | None = None
        self._launch_args: tuple[Path, Path, dict[str, str]] | None = None
        self._lock = threading.Lock()

    # -- lifecycle ------------------------------------------------------------------------------
    def start(self) -> TritonServer:
        """Write the repository, start tritonserver and wait until the model is ready."""
        triton = find_bundled_triton()
        opts = self.options
        if opts.instances < 1:
            raise UsageError(f"--instances {opts.instances}: need at least 1")
        ports = {"--http-port": opts.http_port, "--grpc-port": opts.grpc_port, "--metrics-port": opts.metrics_port}
        for flag, port in ports.items():
            if port == 0:
                ports[flag] = port = free_port(opts.host)
            check_port_free(opts.host, port, flag)
        if len(set(ports.values())) < 3:
            raise UsageError(f"the HTTP, gRPC and metrics ports must differ (got {sorted(ports.values())})",
                             hint="pass distinct --http-port, --grpc-port and --metrics-port")
        self.http_port, self.grpc_port, self.metrics_port = ports.values()
        if opts.max_request_bytes < 1:
            raise UsageError(f"max_request_bytes {opts.max_request_bytes}: must be positive")
        from optcli.batching import PADDING

        if opts.padding not in PADDING:
            raise UsageError(f"padding {opts.padding!r}: must be one of {', '.join(PADDING)}",
                             hint="e.g. optcli serve MODEL --padding bucket")
        self.cleaned = sweep()
        self._owned = claim_workdir()
        self.workdir = self._owned.path
        try:
            # The public HTTP port is the checking proxy's; Triton's own listens on a private loopback one.
            self.guard = HttpGuard(opts.host, self.http_port, free_port("127.0.0.1"))
            self.guard.start()
            self.export = self._write_repository()
            backends = triton.backend_dir(self.workdir)
            self._launch_args = (triton.binary, backends, triton.environment())
            self._launch(*self._launch_args)
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def restart(self) -> None:
        """Stop what is left of the server (its process group, its shared memory) and start it again on
        the same repository and ports; returns once the model is ready."""
        with self._lock:
            process, self.process = self.process, None
        if process is not None:
            end_group(process, EXIT_TIMEOUT_S)
        if self._owned is not None:
            remove_shm(self._owned.shm_prefix)  # the dead server's regions: the new one makes its own
        assert self._launch_args is not None
        self.restarts += 1
        self._launch(*self._launch_args)
        self._wait_ready()

    def watch(self, on_event: Callable[[str], None] | None = None) -> None:
        """Serve until stop(): restart the server when it exits or its model's backend stub dies, at most
        `max_restarts` times within supervise.RESTART_WINDOW_S (ServeError past that). `on_event(text)`
        hears each restart and why."""
        watch(self, on_event or (lambda text: None))

    def _write_repository(self) -> Any:
        from optcli.deploy import TritonOptions, export_triton
        from optcli.tensor_spec import parse_input_spec

        opts = self.options
        threads = opts.threads
        if threads is None and opts.instances > 1 and (opts.kind or "cpu") == "cpu":
            threads = max(1, (os.cpu_count() or 1) // opts.instances)  # instances share the cores
        triton_options = TritonOptions(
            backend="python", max_batch_size=opts.max_batch_size, max_queue_delay_us=opts.max_queue_delay_us,
            preferred_batch_sizes=list(opts.preferred_batch_sizes), instances=opts.instances, kind=opts.kind,
            intra_op_threads=threads, inputs=[parse_input_spec(s) for s in opts.inputs], padding=opts.padding)
        assert self.workdir is not None
        triton_options.max_request_bytes = opts.max_request_bytes
        return export_triton(self.artifact, self.workdir / "models", triton_options, name=opts.name, version=1,
                             command="optcli serve")

    def _launch(self, binary: Path, backends: Path, env: dict[str, str]) -> None:
        assert self.workdir is not None and self.guard is not None and self._owned is not None
        opts = self.options
        cmd = [str(binary), f"--model-repository={self.workdir / 'models'}", f"--backend-directory={backends}",
               "--http-address=127.0.0.1", f"--http-port={self.guard.upstream_port}", *self.guard.triton_flags(),
               f"--grpc-address={opts.host}", f"--grpc-port={self.grpc_port}",
               f"--metrics-address={opts.host}", f"--metrics-port={self.metrics_port}",
               "--allow-gpu-metrics=false", f"--exit-timeout-secs={EXIT_TIMEOUT_S}", "--strict-readiness=true",
               # Regions named after the private folder: provably this server's (leftovers.py).
               f"--backend-config=python,shm-region-prefix-name={self._owned.shm_prefix}"]
        self.log_path = self.workdir / "tritonserver.log"
        out = None if opts.verbose else self.log_path.open("wb")
        try:
            # Its own session: Ctrl-C reaches optcli, which stops the server in order; on a timeout the
            # whole group (the server and its Python-backend stubs) is killed by its id. The folder's lock
            # goes with it (pass_fds), so the folder counts as alive while any of them lives.
            self.process = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out,
                                            stderr=subprocess.STDOUT if out else None, env=env,
                                            start_new_session=True, preexec_fn=_die_with_parent(),
                                            pass_fds=(self._owned.lock_fd,))
        finally:
            if out is not None:
                out.close()

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.options.startup_timeout_s
        assert self.guard is not None
        while True:
            assert self.process is not None
            if self.process.poll() is not None:
                raise self._start_failure(f"the server exited with code {self.process.returncode} while starting")
            if http_status(f"{self.base_url}/v2/health/ready", timeout=1.0) == 200:
                break
            if time.monotonic() > deadline:
                raise self._start_failure(f"the model was not ready after {self.options.startup_timeout_s:g} s")
            time.sleep(0.25)
        try:
            self.version = str(http_json(f"{self.base_url}/v2").get("version", "?"))
            config = self.guard.upstream_json(f"/v2/models/{self.name}/config")
            self.guard.model = ModelShapes.from_triton_config(config, self.options.max_request_bytes)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise self._start_failure(f"the server did not report the model's configuration ({exc})") from None
        self.stub_pids = stub_pids(self.process.pid)

    def _start_failure(self, what: str) -> OptcliError:
        """The error to raise, with the line of the server's log that says why."""
        lines = self.log_lines()
        for line in lines:
            if _LISTEN_FAILED.search(line):
                return UsageError(f"{what}: {line.strip()[:300]}",
                                  hint="a port is taken: pass other --http-port/--grpc-port/--metrics-port")
        cause = next((m.group(1) for m in map(_FAILED_LOAD.search, lines) if m), None)
        python = [ln.strip() for ln in lines if re.match(r"^\w*(Error|Exception)\b", ln.strip())]
        detail = cause or (python[-1] if python else None) or (lines[-1].strip() if lines else "no log")
        detail = detail.replace('\\"', '"').split("\\n")[0]  # the log escapes the Python traceback after it
        return ServeError(f"{what}: {detail[:500]}",
                          hint="rerun with --verbose to see the server's whole log")

    def log_lines(self) -> list[str]:
        """The server's log so far (empty with --verbose, where it goes to stderr)."""
        path = getattr(self, "log_path", None)
        if path is None or not path.is_file():
            return []
        return path.read_text(encoding="utf-8", errors="replace").splitlines()

    def stop(self) -> int | None:
        """Stop gracefully (in-flight requests finish), kill what is left, remove the folder and the
        server's shared memory. Returns the server's exit code (None if it never started). Safe to call
        twice, and finishes its cleanup even when interrupted (a second Ctrl-C)."""
        with self._lock:
            process, self.process = self.process, None
            guard, self.guard = self.guard, None
            owned, self._owned = self._owned, None
            code = None
            try:
                if process is not None:
                    code = end_group(process, EXIT_TIMEOUT_S + 10)
            finally:
                if guard is not None:
                    guard.stop()
                if owned is not None:
                    owned.release()
                self.workdir = None
            return code

    def poll(self) -> int | None:
        """The server's exit code if it has exited, else None."""
        return self.process.poll() if self.process is not None else None

    def __enter__(self) -> TritonServer:
        return self if self.process is not None else self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- what clients need ----------------------------------------------------------------------
    @property
    def name(self) -> str:
        return str(self.export.name) if self.export is not None else "?"

    @property
    def client_host(self) -> str:
        """Where a client on this machine connects (the wildcard address is not one)."""
        return "127.0.0.1" if self.options.host in ("0.0.0.0", "") else \
            "::1" if self.options.host == "::" else self.options.host

    @property
    def base_url(self) -> str:
        return f"http://{_url_host(self.client_host)}:{self.http_port}"

    @property
    def urls(self) -> dict[str, str]:
        host = _url_host(self.client_host)
        return {"http": f"{self.base_url}/v2/models/{self.name}", "grpc": f"{host}:{self.grpc_port}",
                "metrics": f"http://{host}:{self.metrics_port}/metrics", "health": f"{self.base_url}/v2/health/ready"}

    def statistics(self) -> ModelStatistics:
        """Triton's statistics for the model (/v2/models/<name>/stats)."""
        stats: ModelStatistics = http_json(f"{self.base_url}/v2/models/{self.name}/stats")
        return stats

    def batch_sizes(self) -> dict[int, int]:
        """{batch size: executions} so far, from Triton's statistics."""
        return batch_sizes(self.statistics())


def start_server(artifact: str | Path, **options: Any) -> TritonServer:
    """optcli.serve(): `options` are ServeOptions fields; an unknown one is a UsageError."""
    known = set(ServeOptions.__dataclass_fields__)
    unknown = sorted(set(options) - known)
    if unknown:
        raise UsageError(f"unknown serve option {unknown[0]!r}", hint=f"options: {', '.join(sorted(known))}")
    return TritonServer(artifact, ServeOptions(**options)).start()


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def _die_with_parent() -> Any:
    """On Linux, from the main thread: the server gets SIGTERM if optcli dies without stopping it
    (PR_SET_PDEATHSIG fires when the thread that started it ends, hence the main thread only)."""
    if not sys.platform.startswith("linux") or threading.current_thread() is not threading.main_thread():
        return None
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)

    def set_pdeathsig() -> None:
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG = 1
    return set_pdeathsig
