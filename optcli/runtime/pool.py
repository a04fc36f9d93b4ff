"""Runners kept open for the rest of one compile run: where a stage row, the CPU build's check and
measurement and the final measurement open the same artifact with the same options, they share one
session (compiling an OpenVINO BERT-base IR costs ~0.7 s, and a run opened it four times: issue 16).
Idle runners are bounded by count and by their model files' bytes; the run closes them at its end."""
from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from optcli.runtime.base import Runner

MAX_IDLE = 3
MAX_IDLE_BYTES = 1 << 30  # a larger model's sessions are closed as before: memory over seconds


def session_options(fmt: str, threads: int | None, optimization: str = "all",
                    extra: Mapping[str, object] | None = None) -> dict[str, object]:
    """A runner's options with its defaults named (the threads, and onnxruntime's level where the format
    takes one), plus `extra` (e.g. an IR's precision): one session asked for by a stage row, a candidate
    check and the final measurement is one pool key only if they all spell its options this way."""
    from optcli.backends.registry import for_format

    options: dict[str, object] = {"threads": threads}
    if for_format(fmt).takes_optimization:
        options["optimization"] = optimization
    return {**options, **(extra or {})}


def _model_files(path: Path) -> list[Path]:
    """The file and what belongs to it: an IR's .bin, an ONNX graph's external data (the weights)."""
    from optcli.artifact import onnx_external_files
    from optcli.backends import registry

    files = [path, *registry.companion_files(path)]
    if registry.is_onnx_file(path):
        files += [path.parent / f for f in onnx_external_files(path)]
    return files


def _content_key(files: list[Path]) -> tuple:
    """The model's files by device, inode, size and mtime, not by path: the chosen candidate is moved
    (renamed) into the stage folder and is still the same model; a save unlinks and rewrites, so a new
    version is a new key."""
    return tuple((st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns) for st in (f.stat() for f in files))


class RunnerPool:
    """`with pool.runner(path, fmt, **options) as r:` opens a runner or lends an idle one opened from
    the same file with the same options; one borrower at a time per runner."""

    def __init__(self, max_idle: int = MAX_IDLE, max_idle_bytes: int = MAX_IDLE_BYTES) -> None:
        self.max_idle, self.max_idle_bytes = max_idle, max_idle_bytes
        self._idle: OrderedDict[int, tuple[tuple, Runner, int]] = OrderedDict()  # id -> (key, runner, bytes)
        self._lent: dict[int, tuple[tuple, int, Runner]] = {}  # holding the runner keeps its id unique
        self.opened = self.reused = 0

    def borrow(self, path: str | Path, fmt: str, **options: Any) -> Runner:
        from optcli.runtime import open_runner

        path = Path(path)
        key, size = None, 0  # a folder model (its files change, the folder's key does not): not kept
        if path.is_file():
            try:
                content = _content_key(_model_files(path))
                key = (fmt, content, json.dumps(options, sort_keys=True, default=str))
                size = sum(st_size for _, _, st_size, _ in content)
            except OSError:
                key = None
        if key is not None:
            for rid, (k, idle, _) in self._idle.items():
                if k == key:
                    del self._idle[rid]
                    self._lent[rid] = (key, size, idle)
                    self.reused += 1
                    return idle
        runner = open_runner(path, fmt, **options)
        self.opened += 1
        if key is not None:
            self._lent[id(runner)] = (key, size, runner)
        return runner

    def release(self, runner: Runner) -> None:
        """Keep the runner idle for the next borrower with the same key, or close it."""
        lent = self._lent.pop(id(runner), None)
        if lent is None or lent[2] is not runner or lent[1] > self.max_idle_bytes:
            runner.close()
            return
        self._idle[id(runner)] = (lent[0], runner, lent[1])
        while len(self._idle) > self.max_idle or sum(s for _, _, s in self._idle.values()) > self.max_idle_bytes:
            _, (_, oldest, _) = self._idle.popitem(last=False)
            oldest.close()

    def discard(self, runner: Runner) -> None:
        """Close a borrowed runner for good (its model file is about to be deleted)."""
        self._lent.pop(id(runner), None)
        runner.close()

    @contextmanager
    def runner(self, path: str | Path, fmt: str, **options: Any) -> Iterator[Runner]:
        runner = self.borrow(path, fmt, **options)
        try:
            yield runner
        finally:
            self.release(runner)

    def close(self) -> None:
        """Close every idle runner (the run's end); runners still lent are their borrowers' to release."""
        while self._idle:
            _, (_, runner, _) = self._idle.popitem(last=False)
            runner.close()
