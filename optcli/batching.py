"""In-process dynamic batching: concurrent `predict` calls gathered into one batch, run once, split back.

`optcli.load(path, batching=...)` wraps the loaded runner in a BatchedRunner. The knobs and their
meaning are those of Triton's `dynamic_batching` (docs/serve.md): a batch is sent when it reaches
`max_batch_size`, when it reaches the largest of `preferred_batch_size`, or when the oldest request
has waited `max_queue_delay_microseconds`; with a delay of 0 (Triton's default) whatever is queued
when a backend handle frees up goes as one batch, so batches grow exactly when the model is busy.
Requests are merged when every input has the same non-batch shape and dtype; for an encoder with a
dynamic sequence axis, requests of different lengths share a batch padded to its longest member and
each caller gets its outputs cut back to its own length (`padding`: "auto", the default, runs the
gathered batch as the calls of similar length that cost least; "longest": one call padded to the
longest; "bucket": sub-batches by `padding_bucket`; "off": equal shapes only). The merge is
optcli/batch_merge.py, shared with the model that `optcli serve` runs inside Triton.
"""
from __future__ import annotations

import threading
import time
import weakref
from collections import Counter, deque
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from itertools import accumulate
from typing import Any, Protocol, TypedDict

from optcli.batch_merge import (
    PaddingPlan,
    Tensor,
    Tensors,
    batch_blocker,
    call_groups,
    merge_key,
    padding_plan,
    rows,
    run_group,
    spread,
)
from optcli.errors import UsageError
from optcli.length_groups import DEFAULT_BUCKET, DEFAULT_MAX_GROUPS
from optcli.tensor_spec import TensorSpec

_KNOBS = "max_batch_size, max_queue_delay_microseconds, preferred_batch_size, padding, padding_bucket"
PADDING = ("auto", "longest", "bucket", "off")
# CLI spellings (`--batching max-batch-size=16,delay-us=500`) for Triton's names.
_ALIASES = {"max-batch-size": "max_batch_size", "max": "max_batch_size",
            "max-queue-delay-us": "max_queue_delay_microseconds", "max_queue_delay_us": "max_queue_delay_microseconds",
            "delay-us": "max_queue_delay_microseconds", "delay_us": "max_queue_delay_microseconds",
            "preferred": "preferred_batch_size", "preferred-batch-size": "preferred_batch_size",
            "pad": "padding", "bucket": "padding_bucket", "padding-bucket": "padding_bucket"}


class InnerRunner(Protocol):
    """What the batcher runs: a Runner (optcli/runtime/base.py), or a LengthBucketedRunner around one."""

    @property
    def inputs(self) -> list[TensorSpec]: ...
    @property
    def outputs(self) -> list[TensorSpec]: ...
    @property
    def concurrency(self) -> int: ...
    def normalize(self, feeds: Any) -> Tensors: ...
    def run_normalized(self, feeds: Tensors) -> Sequence[Tensor]: ...
    def describe_inputs(self) -> str: ...
    def close(self) -> None: ...


class BatchingJson(TypedDict):
    max_batch_size: int
    max_queue_delay_microseconds: int
    preferred_batch_size: list[int]
    padding: str
    padding_bucket: int


@dataclass(frozen=True)
class BatchingOptions:
    """Triton's dynamic_batching knobs, under Triton's names, and how requests of different sequence
    lengths share a batch (optcli/batch_merge.py)."""

    max_batch_size: int = 8
    max_queue_delay_microseconds: int = 0
    preferred_batch_size: tuple[int, ...] = ()
    padding: str = "auto"
    padding_bucket: int = DEFAULT_BUCKET

    def __post_init__(self) -> None:
        if not isinstance(self.max_batch_size, int) or self.max_batch_size < 1:
            raise UsageError(f"batching max_batch_size {self.max_batch_size!r}: must be an integer >= 1",
                             hint="e.g. batching={'max_batch_size': 16}")
        if not isinstance(self.max_queue_delay_microseconds, int) or self.max_queue_delay_microseconds < 0:
            raise UsageError(f"batching max_queue_delay_microseconds {self.max_queue_delay_microseconds!r}: "
                             "must be an integer >= 0", hint="e.g. 500 (half a millisecond)")
        preferred = tuple(sorted(set(self.preferred_batch_size)))
        if any(not isinstance(p, int) or not 1 <= p <= self.max_batch_size for p in preferred):
            raise UsageError(f"batching preferred_batch_size {list(self.preferred_batch_size)}: each must be within "
                             f"1..{self.max_batch_size} (max_batch_size)", hint="e.g. preferred_batch_size=[4, 8]")
        object.__setattr__(self, "preferred_batch_size", preferred)
        if self.padding not in PADDING:
            raise UsageError(f"batching padding {self.padding!r}: must be one of {', '.join(PADDING)}",
                             hint="auto: the cheapest calls of similar length; longest: one call padded to the "
                                  "longest; bucket: sub-batches by padding_bucket; off: equal shapes only")
        if isinstance(self.padding_bucket, bool) or not isinstance(self.padding_bucket, int) or self.padding_bucket < 1:
            raise UsageError(f"batching padding_bucket {self.padding_bucket!r}: must be an integer >= 1",
                             hint="e.g. padding_bucket=16")

    def plan(self, runner: InnerRunner) -> PaddingPlan | None:
        """The padding plan for this runner's model under these options (None: equal shapes only)."""
        if self.padding == "off":
            return None
        return padding_plan(runner.inputs, runner.outputs, self.padding, self.padding_bucket, DEFAULT_MAX_GROUPS)

    @property
    def delay_s(self) -> float:
        return self.max_queue_delay_microseconds / 1e6

    def to_json(self) -> BatchingJson:
        return {"max_batch_size": self.max_batch_size,
                "max_queue_delay_microseconds": self.max_queue_delay_microseconds,
                "preferred_batch_size": list(self.preferred_batch_size),
                "padding": self.padding, "padding_bucket": self.padding_bucket}


def batching_options(value: object) -> BatchingOptions:
    """`True` (defaults), a dict of Triton's knob names, a BatchingOptions, or the CLI text; anything else
    is a UsageError (the caller's value, checked here)."""
    if isinstance(value, BatchingOptions):
        return value
    if value is True:
        return BatchingOptions()
    if isinstance(value, str):
        return parse_batching(value)
    if isinstance(value, Mapping):
        fields: dict[str, Any] = {_ALIASES.get(str(k), str(k)): v for k, v in value.items()}  # checked by the class
        unknown = sorted(set(fields) - set(BatchingOptions.__dataclass_fields__))
        if unknown:
            raise UsageError(f"unknown batching option {unknown[0]!r}", hint=f"options: {_KNOBS}")
        if "preferred_batch_size" in fields:
            fields["preferred_batch_size"] = tuple(fields["preferred_batch_size"])
        return BatchingOptions(**fields)
    raise UsageError(f"batching={value!r}: pass True, a dict or optcli.batching.BatchingOptions",
                     hint=f"e.g. batching={{'max_batch_size': 16, 'max_queue_delay_microseconds': 500}} ({_KNOBS})")


def parse_batching(text: str) -> BatchingOptions:
    """`on`, or `max_batch_size=16,max_queue_delay_microseconds=500,preferred_batch_size=4/8`
    (also `max=16,delay-us=500,preferred=4/8`)."""
    hint = "e.g. --batching max_batch_size=16,max_queue_delay_microseconds=500,preferred_batch_size=4/8"
    if text.strip().lower() in ("on", "true", "yes", ""):
        return BatchingOptions()
    fields: dict[str, int | str | tuple[int, ...]] = {}
    for item in (p.strip() for p in text.split(",") if p.strip()):
        key, sep, value = item.partition("=")
        key = _ALIASES.get(key.strip().lower(), key.strip().lower())
        if not sep or key not in BatchingOptions.__dataclass_fields__:
            raise UsageError(f"bad --batching item {item!r}", hint=f"{hint} ({_KNOBS})")
        try:
            if key == "preferred_batch_size":
                fields[key] = tuple(int(p) for p in value.replace("/", " ").split())
            elif key == "padding":
                fields[key] = value.strip().lower()
            else:
                fields[key] = int(value)
        except ValueError:
            raise UsageError(f"bad --batching item {item!r}: not an integer", hint=hint) from None
    return batching_options(fields)


def pick_batch(sizes: list[int], options: BatchingOptions, expired: bool) -> int:
    """How many of the queued compatible requests (their sizes, oldest first) to send now, 0 to wait.

    Full (max_batch_size reached) or the largest preferred size reached: send now. Otherwise wait
    until the delay expires, then send the largest preferred size that can be formed, else all."""
    count, total = 0, 0
    for size in sizes:
        if count and total + size > options.max_batch_size:
            break
        count, total = count + 1, total + size
    if not count:
        return 0
    preferred = options.preferred_batch_size
    full = total >= options.max_batch_size or count < len(sizes)
    if not (full or expired or (preferred and total >= preferred[-1])):
        return 0
    if preferred:
        prefix = list(accumulate(sizes[:count]))
        fits = [i + 1 for i, s in enumerate(prefix) if s in preferred]
        if fits:
            return fits[-1]
    return count


class BatchStats(TypedDict):
    """What a BatchedRunner ran so far. A gathered batch of mixed lengths may run as several runner calls
    (padding "auto" or "bucket" split it by length): `batches` counts the gathered ones (`histogram`: by
    rows), `calls` the runner calls they ran as, `wide_calls` those of them that ran on the session with
    every core (an adaptive layout, BatchedRunner)."""

    batches: int
    calls: int
    wide_calls: int
    rows: int
    histogram: dict[int, int]


# -- the batcher ------------------------------------------------------------------------------------
class _Request:
    """One call in the queue. A caller of run() waits on `wake` (made only if it has to wait) for its
    result or for its turn to lead; a predict_async call has a Future instead."""

    __slots__ = ("feeds", "rows", "key", "enqueued", "future", "wake", "lead", "done", "result", "error")

    def __init__(self, feeds: Tensors, future: Future[Tensors] | None, plan: PaddingPlan | None) -> None:
        self.feeds = feeds
        self.key = merge_key(feeds, plan)
        self.rows = rows(feeds)
        self.enqueued = time.perf_counter()
        self.future = future
        self.wake: threading.Event | None = None
        self.lead = False            # this caller holds a free handle and runs the next batch
        self.done = False
        self.result: Tensors | None = None
        self.error: BaseException | None = None


class _Batcher:
    """Batching with no dispatcher thread: a caller that finds a backend handle free runs the next batch
    itself (its own request and whatever is queued), so a lone caller pays no thread switch, and stops
    once its own answer is ready. Work still queued then goes to pool threads (at most one per handle)
    that keep running calls while anything is queued: under load the handles pass from call to call
    without a thread switch, and each waiting caller is woken once, by its answer. `predict_async`
    calls are led by a pool thread. Kept apart from BatchedRunner so a wrapper dropped without close()
    is still closed by its finalizer."""

    def __init__(self, runner: InnerRunner, options: BatchingOptions, wide: InnerRunner | None = None) -> None:
        self.runner = runner
        self.wide = wide                 # a session with every core, for a lone request (BatchedRunner)
        self.options = options
        self.names = [s.name for s in runner.outputs]
        self.plan = options.plan(runner)
        self.handles = runner.concurrency
        self.idle = runner.concurrency   # handles no leader holds
        self.queue: list[_Request] = []
        self.calls_queued: deque[list[_Request]] = deque()  # calls of gathered batches no handle has taken yet
        self.cond = threading.Condition()
        self.closed = False
        self.pool: ThreadPoolExecutor | None = None
        self.histogram: Counter[int] = Counter()   # gathered batches by rows
        self.calls = 0                              # runner calls: a gathered batch split by length runs several
        self.wide_calls = 0

    def run(self, feeds: Tensors) -> Tensors:
        """Run one request in the caller's thread, batched with whatever is in flight."""
        request = self._enqueue(_Request(feeds, None, self.plan))
        while True:
            with self.cond:
                # A handle given to this caller is used even when its own request is already done
                # (another leader took it): a handle left unused would be lost to the batcher.
                lead, request.lead = request.lead, False
                if not lead:
                    if request.done:
                        break
                    if request.wake is None:
                        request.wake = threading.Event()
                    wake = request.wake
            if lead:
                self._lead(request)
                continue
            wake.wait()
            wake.clear()
        if request.error is not None:
            raise request.error
        assert request.result is not None
        return request.result

    def submit(self, feeds: Tensors) -> Future[Tensors]:
        """Queue one request; a pool thread leads when a handle is free."""
        future: Future[Tensors] = Future()
        self._enqueue(_Request(feeds, future, self.plan))
        return future

    def _enqueue(self, request: _Request) -> _Request:
        with self.cond:
            if self.closed:
                raise UsageError("this model was closed", hint="load it again with optcli.load()")
            self.queue.append(request)
            self.cond.notify_all()  # a leader waiting out the queue delay takes it into its batch
            if self.idle:
                self.idle -= 1
                if request.future is None:
                    request.lead = True
                else:
                    self._pool().submit(self._lead)
        return request

    def _pool(self) -> ThreadPoolExecutor:
        if self.pool is None:
            self.pool = ThreadPoolExecutor(max_workers=self.handles, thread_name_prefix="optcli-batch")
        return self.pool

    def _lead(self, own: _Request | None = None) -> None:
        """With a handle held: run the calls of gathered batches still waiting for a handle, else gather
        the next batch; then give the handle back, or on to a pool thread while work is queued. A caller
        (`own`: its request) stops as soon as its own answer is ready, so it never waits on other callers'
        calls; a pool thread keeps going while anything is queued, so under load the sessions pass from
        call to call without a thread switch and each caller is woken once, by its answer."""
        try:
            with self.cond:
                call, wide = self._next_call(own)
            while call:
                self._run_call(call, wide)
                with self.cond:
                    if wide:  # the other handles it held come back
                        self.idle += self.handles - 1
                        wide = False
                        self._hand_over()
                    if own is not None and own.done:
                        break
                    call, wide = self._next_call(own)
        finally:
            with self.cond:
                self.idle += 1
                self._hand_over()

    def _next_call(self, own: _Request | None = None) -> tuple[list[_Request], bool]:
        """The requests of the next runner call, and whether it runs on the wide session (lock held).

        Calls of batches already gathered come first. Else the next batch is gathered and cut into calls
        by the padding plan and, with several handles, cut further so each handle can take a call
        (batch_merge.spread); the caller's own call is its first, the others are queued for free handles.
        A lone request with every handle free runs on the wide session, holding every handle: its
        intra-op threads then have the cores to themselves."""
        if self.calls_queued:
            return self.calls_queued.popleft(), False
        batch = self._take_batch()
        if not batch:
            return [], False
        self.histogram[sum(r.rows for r in batch)] += 1
        feeds = [r.feeds for r in batch]
        groups = spread(call_groups(feeds, self.plan), feeds, self.plan, self.handles)
        calls = [[batch[i] for i in g] for g in groups]
        if len(calls) == 1 and self.wide is not None and self.idle == self.handles - 1:
            self.idle = 0
            return calls[0], True
        mine = next((c for c in calls if own is not None and any(r is own for r in c)), calls[0])
        self.calls_queued.extend(c for c in calls if c is not mine)
        self._hand_over()
        return mine, False

    def _hand_over(self) -> None:
        """Give free handles to pool threads while work is queued (lock held)."""
        while self.idle and (self.queue or self.calls_queued):
            self.idle -= 1
            self._pool().submit(self._lead)
        if self.idle == self.handles and not self.queue:
            self.cond.notify_all()  # close() waits for this

    def _take_batch(self) -> list[_Request]:
        """The next batch by pick_batch's rule, oldest request first (lock held)."""
        while self.queue:
            first = self.queue[0]
            if len(self.queue) == 1 or first.key is None:
                same = [first]
            else:
                same = [r for r in self.queue if r.key == first.key]
            wait = first.enqueued + self.options.delay_s - time.perf_counter()
            count = pick_batch([r.rows for r in same], self.options, expired=wait <= 0 or self.closed)
            if not count:
                self.cond.wait(wait)
                continue
            batch = same[:count]
            if count == len(self.queue):
                self.queue = []
            else:
                taken = {id(r) for r in batch}
                self.queue = [r for r in self.queue if id(r) not in taken]
            live = [r for r in batch if r.future is None or r.future.set_running_or_notify_cancel()]
            if live:
                return live
        return []

    def _run_call(self, call: list[_Request], wide: bool) -> None:
        """One runner call; each of its requests gets its rows (or the model's error) as soon as it ends."""
        runner = self.wide if wide and self.wide is not None else self.runner
        results: list[Tensors] = []
        error: BaseException | None = None
        try:
            parts = run_group(runner.run_normalized, [r.feeds for r in call], self.names, self.plan)
            results = [dict(zip(self.names, outs)) for outs in parts]
        except BaseException as exc:  # noqa: BLE001 - every caller of the call gets the model's error
            error = exc
        with self.cond:
            self.calls += 1
            self.wide_calls += wide
            for i, r in enumerate(call):
                if r.future is None:
                    r.result, r.error, r.done = (results[i] if results else None), error, True
                    if r.wake is not None:
                        r.wake.set()
        for i, r in enumerate(call):  # outside the lock: a Future runs its callbacks here
            if r.future is not None:
                if error is not None:
                    r.future.set_exception(error)
                else:
                    r.future.set_result(results[i])

    def close(self) -> None:
        """Refuse new requests, run the queued ones, then close the runner."""
        with self.cond:
            if self.closed:
                return
            self.closed = True
            self.cond.notify_all()
            while self.queue or self.idle < self.handles:
                self.cond.wait()
        if self.pool is not None:
            self.pool.shutdown(wait=True)
        self.runner.close()
        if self.wide is not None:
            self.wide.close()


class BatchedRunner:
    """A loaded model whose concurrent calls are batched: `predict`, `predict_async`, `close`, like
    a Runner. `stats()` counts the gathered batches by size and the runner calls they ran as."""

    def __init__(self, runner: InnerRunner, options: BatchingOptions, wide: InnerRunner | None = None) -> None:
        """`wide`: a second runner of the same model (one session, every core) for a request that runs
        alone while `runner` has one single-threaded session per core (optcli.load's
        concurrency="adaptive")."""
        # The PyTorch runner records no output shapes (shape ()): split() checks those per batch.
        blocker = batch_blocker(runner.inputs, [o for o in runner.outputs if o.shape])
        if blocker:
            runner.close()
            if wide is not None:
                wide.close()
            raise UsageError(f"cannot batch requests for this model: {blocker}",
                             hint="re-export it with a dynamic batch dim (no --static-batch), or load it without "
                                  "batching and raise concurrency instead")
        self.options = options
        self._runner = runner
        self._batcher = _Batcher(runner, options, wide)
        self._finalizer = weakref.finalize(self, self._batcher.close)

    def __getattr__(self, name: str) -> Any:
        # inputs, outputs, backend, concurrency, path...: the wrapped runner's.
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._runner, name)

    @property
    def settings(self) -> dict[str, object]:
        wide = self._batcher.wide
        return {**dict(getattr(self._runner, "settings", {}) or {}), "batching": self.options.to_json(),
                **({"wide_session": dict(getattr(wide, "settings", {}) or {})} if wide is not None else {})}

    def normalize(self, feeds: Any) -> Tensors:
        return self._runner.normalize(feeds)

    def describe_inputs(self) -> str:
        return self._runner.describe_inputs()

    def predict(self, feeds: Any) -> Tensors:
        """Run one call (batched with whatever else is in flight); returns {output name: array}."""
        return self._batcher.run(self._runner.normalize(feeds))

    def predict_async(self, feeds: Any) -> Future[Tensors]:
        """Queue one call; the Future's result is what predict() returns."""
        return self._batcher.submit(self._runner.normalize(feeds))

    def run_normalized(self, feeds: Tensors) -> list[Tensor]:
        """The hot path for benchmarks: inputs already checked by normalize()."""
        return list(self._batcher.run(feeds).values())

    def stats(self) -> BatchStats:
        """{"batches": gathered, "calls": runner calls, "rows": R, "histogram": {batch size: count}} so far."""
        with self._batcher.cond:
            hist = dict(sorted(self._batcher.histogram.items()))
            calls, wide_calls = self._batcher.calls, self._batcher.wide_calls
        return {"batches": sum(hist.values()), "calls": calls, "wide_calls": wide_calls,
                "rows": sum(k * v for k, v in hist.items()), "histogram": hist}

    def close(self) -> None:
        """Refuse new calls, run the queued ones, then close the model. Safe to call twice."""
        self._finalizer()

    def __enter__(self) -> BatchedRunner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
