"""Length bucketing for padded batches: a batch of right-padded sequences runs as a few sub-batches of
rows with similar valid lengths, and the outputs come back in the caller's row order.

Why: an artifact compiled with the unpad stage (docs/unpad.md) computes a batch up to its LONGEST valid
length (rounded up to the bucket). One long sentence in a batch of short ones makes every row pay for
it; grouped by length, the short rows run at their own bucket. It changes nothing for a model that
computes the padded length regardless (there the split only costs the extra calls), so it is opt-in:
`optcli.load(path, length_buckets=True)`.

Rows are grouped by bucket (the mask's extent rounded up to `bucket`, the unpad stage's default 16),
and adjacent groups are merged while there are more than `max_groups`, each time where merging adds
the least padded work (rows x extra positions). Outputs are equal to the unsplit call's on every
valid position (the unpad stage's proof), and exactly equal for outputs without a sequence axis.
"""
from __future__ import annotations

import threading
from collections.abc import Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, TypedDict

import numpy as np

from optcli.errors import UsageError
from optcli.length_groups import BucketOptions, group_lengths, row_extents

if TYPE_CHECKING:
    from optcli.batch_merge import Tensor, Tensors
    from optcli.batching import InnerRunner


class BucketStats(TypedDict):
    calls: int          # run_normalized calls (a padded batch each)
    sub_batches: int    # the runner calls they were split into


def bucket_options(value: object) -> BucketOptions:
    """`length_buckets=True`, an int (the bucket), or {"bucket": N, "max_groups": M}."""
    if value is True:
        return BucketOptions()
    if isinstance(value, int) and not isinstance(value, bool):
        value = {"bucket": value}
    if not isinstance(value, Mapping) or set(value) - {"bucket", "max_groups"}:
        raise UsageError(f"length_buckets={value!r} is not understood",
                         hint='use True, a bucket size such as 16, or {"bucket": 16, "max_groups": 4}')
    opts = BucketOptions(**value)
    if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in (opts.bucket, opts.max_groups)):
        raise UsageError(f"length_buckets={value!r}: bucket and max_groups are positive integers",
                         hint='e.g. {"bucket": 16, "max_groups": 4}')
    return opts


def group_rows(mask: np.ndarray, options: BucketOptions) -> list[np.ndarray]:
    """Row indices per sub-batch, shortest first. `mask` is batch x sequence (non-zero = token)."""
    return group_lengths(row_extents(mask), options, np.asarray(mask).shape[1])


class LengthBucketedRunner:
    """A loaded model whose padded batches run as sub-batches of similar length: `predict`,
    `predict_async`, `close`, like a Runner. `stats()` counts the calls and sub-batches run."""

    def __init__(self, runner: InnerRunner, options: BucketOptions) -> None:
        from optcli.batch_merge import batch_blocker

        masks = [i for i in runner.inputs if "mask" in i.name.lower() and len(i.shape) == 2]
        blocker = None if masks else "it has no attention-mask input (an input named *mask*, batch x sequence)"
        blocker = blocker or batch_blocker(runner.inputs, [o for o in runner.outputs if o.shape])
        if blocker:
            runner.close()
            raise UsageError(f"cannot bucket this model's batches by length: {blocker}",
                             hint="load it without length_buckets")
        self.options = options
        self._runner = runner
        self._lock = threading.Lock()
        self._calls = self._sub_batches = 0
        self._pool: ThreadPoolExecutor | None = None

    def __getattr__(self, name: str) -> Any:
        # inputs, outputs, backend, concurrency, path...: the wrapped runner's.
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._runner, name)

    @property
    def settings(self) -> dict[str, object]:
        return {**dict(getattr(self._runner, "settings", {}) or {}), "length_buckets": self.options.to_json()}

    def normalize(self, feeds: Any) -> Tensors:
        return self._runner.normalize(feeds)

    def describe_inputs(self) -> str:
        return self._runner.describe_inputs()

    def predict(self, feeds: Any) -> Tensors:
        """Run one (padded) batch as sub-batches of similar length; {output name: array}, rows in order."""
        names = [o.name for o in self._runner.outputs]
        return dict(zip(names, self.run_normalized(self._runner.normalize(feeds))))

    def predict_async(self, feeds: Any) -> Future[Tensors]:
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=max(1, getattr(self._runner, "concurrency", 1)),
                                                thread_name_prefix="optcli-buckets")
            pool = self._pool
        return pool.submit(self.predict, feeds)

    def run_normalized(self, feeds: Tensors) -> list[Tensor]:
        """The hot path for benchmarks: inputs already checked by normalize()."""
        from optcli.accuracy import sequence_mask

        mask = sequence_mask({k: np.asarray(v) for k, v in feeds.items() if _is_host(v)})
        groups = group_rows(mask, self.options) if mask is not None and len(mask) > 1 else None
        with self._lock:
            self._calls += 1
            self._sub_batches += len(groups) if groups else 1
        if not groups or len(groups) == 1:
            return list(self._runner.run_normalized(feeds))
        parts = [self._runner.run_normalized({k: v[rows] for k, v in feeds.items()}) for rows in groups]
        order = np.argsort(np.concatenate(groups), kind="stable")
        return [np.concatenate([np.asarray(p[j]) for p in parts])[order] for j in range(len(parts[0]))]

    def stats(self) -> BucketStats:
        """{"calls": N, "sub_batches": M}: how many runs the calls were split into."""
        with self._lock:
            return {"calls": self._calls, "sub_batches": self._sub_batches}

    def close(self) -> None:
        pool = self._pool
        if pool is not None:
            pool.shutdown(wait=True)
        self._runner.close()

    def __enter__(self) -> LengthBucketedRunner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _is_host(value: object) -> bool:
    return isinstance(value, np.ndarray)
