"""UnpadConfig: the `[unpad]` section of a compile config (the unpad stage).

    [unpad]
    enabled = true      # --no-unpad turns it off
    bucket = 16         # the computed length is rounded up to a multiple of this (fewer distinct shapes)
    tensorrt = false    # also on the tensorrt target: unverified on a GPU (docs/unpad.md, TensorRT)

Registered in optcli.config.SECTIONS; stored in CompileConfig.extra["unpad"] as set through set_option.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from optcli.errors import UsageError

SECTION = "unpad"


@dataclass
class UnpadConfig:
    """Whether encoders skip padded tokens, and the length granularity."""

    enabled: bool = True
    bucket: int = 16
    tensorrt: bool = False

    def validate(self) -> None:
        for key in ("enabled", "tensorrt"):
            if not isinstance(getattr(self, key), bool):
                raise UsageError(f"[unpad] {key} = {getattr(self, key)!r}", hint="use true or false")
        if isinstance(self.bucket, bool) or not isinstance(self.bucket, int) or not 1 <= self.bucket <= 4096:
            raise UsageError(f"[unpad] bucket = {self.bucket!r}", hint="a whole number of tokens, e.g. 8 or 16")


def unpad_config(config: Any) -> UnpadConfig:
    """The validated [unpad] section of a CompileConfig (defaults where absent)."""
    from optcli.config import stage_section

    return stage_section(config, SECTION, "bucket = 8")
