"""Grouping sequences by length: the lengths rounded up to a bucket, adjacent groups merged while there are
too many, where the merge adds the least padded work. Pure functions of lengths, shared by the length
bucketing of padded batches (length_buckets.py) and the padding-aware merge of requests (batch_merge.py)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

DEFAULT_BUCKET = 16
DEFAULT_MAX_GROUPS = 4


@dataclass(frozen=True)
class BucketOptions:
    bucket: int = DEFAULT_BUCKET
    max_groups: int = DEFAULT_MAX_GROUPS

    def to_json(self) -> dict[str, int]:
        return {"bucket": self.bucket, "max_groups": self.max_groups}


def row_extents(mask: np.ndarray) -> np.ndarray:
    """Per row of a batch x sequence mask (non-zero = token): the position after its last token, as the
    unpad rewrite reads it; a row of padding only counts as the full length (the rewrite computes its
    batch at full length: only there are its outputs the original's)."""
    valid = np.asarray(mask) != 0
    return np.where(valid.any(1), valid.shape[1] - np.argmax(valid[:, ::-1], axis=1), valid.shape[1])


def group_lengths(extent: np.ndarray, options: BucketOptions, limit: int | None = None) -> list[np.ndarray]:
    """Indices per group, shortest first: each length rounded up to `bucket` (at most `limit`), then
    adjacent groups merged while there are more than `max_groups`, where the merge adds the least work."""
    buckets = -(-np.asarray(extent) // options.bucket) * options.bucket
    if limit is not None:
        buckets = np.minimum(buckets, limit)
    bounds = [int(b) for b in np.unique(buckets)]
    members = [np.flatnonzero(buckets == b) for b in bounds]
    while len(bounds) > options.max_groups:
        # Merge the neighbours whose merge adds the least padded work: the shorter group's rows
        # computed up to the longer group's bucket.
        cost = [len(members[i]) * (bounds[i + 1] - bounds[i]) for i in range(len(bounds) - 1)]
        i = int(np.argmin(cost))
        members[i + 1] = np.concatenate([members[i], members[i + 1]])
        del bounds[i], members[i]
    return members
