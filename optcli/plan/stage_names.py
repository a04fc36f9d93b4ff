"""The pipeline's stage names: one enum, whose values are the names the report and the run folders use."""
from __future__ import annotations

import sys
from enum import Enum

if sys.version_info >= (3, 11):
    from enum import StrEnum
else:  # Python 3.10: the same behaviour (str() and format() give the value)
    class StrEnum(str, Enum):
        __str__ = str.__str__
        __format__ = str.__format__


class StageName(StrEnum):
    """A stage's name (a str: `StageName.BUILD == "build"`, and JSON writes it as the string)."""

    EXPORT = "export"
    SIMPLIFY = "simplify"
    FUSE = "fuse"
    UNPAD = "unpad"
    QUANTIZE_INT8 = "quantize-int8"
    QUANTIZE_FP16 = "quantize-fp16"
    BUILD = "build"


# Names reports of schema_version 1 used for the one build stage (optcli/report/io.py migrates them).
FORMER_BUILD_NAMES = ("build-cpu", "build-tensorrt")
