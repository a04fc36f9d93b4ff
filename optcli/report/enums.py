"""The report's closed vocabularies. StrEnums: a member equals its string ("ok" == Status.OK), so JSON and the
code written against strings read the same."""
from __future__ import annotations

from enum import StrEnum


class Status(StrEnum):
    """A stage's status, and the run's (a run is RUNNING until it ends OK, FAILED or INTERRUPTED)."""

    PENDING = "pending"
    RUNNING = "running"
    OK = "ok"
    CACHED = "cached"
    SKIPPED = "skipped"
    FAILED = "failed"
    INTERRUPTED = "interrupted"
    NOT_RUN = "not-run"
    UNKNOWN = "unknown"  # a loaded report without a status


# What a stage record may say (RUNNING is the run's own, UNKNOWN only a loaded report's).
STAGE_STATUSES = (Status.PENDING, Status.OK, Status.CACHED, Status.SKIPPED, Status.FAILED, Status.INTERRUPTED,
                  Status.NOT_RUN)
# A stage that produced its artifact in this run or reused it.
DONE = (Status.OK, Status.CACHED)


class Precision(StrEnum):
    FP32 = "fp32"
    FP16 = "fp16"
    INT8 = "int8"
    BF16 = "bf16"


class Target(StrEnum):
    """What a run builds for; the report's `target` is never AUTO (resolved before the first stage)."""

    AUTO = "auto"
    CPU = "cpu"
    TENSORRT = "tensorrt"
    TENSORRT_RTX = "tensorrt-rtx"

