"""One line out of an exporter's exception: what went wrong, and the op and model source line it was at.

The dynamo exporter wraps the real error in generic ConversionErrors, and the innermost message carries
the FX node it was executing ("While executing %view_4 : ... target=torch.ops.aten.view.default") and
the model code that made it ("Original traceback: File ".../modeling_t5.py", line 366, in forward").
"""
from __future__ import annotations

import re

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_TARGET = re.compile(r"While executing %\S+ : .*?target=(?:torch\.ops\.)?([\w.]+)")
_FRAME = re.compile(r'File "([^"]+)", line (\d+), in \w+\n\s*(\S[^\n]*)')
MAX_LINE = 240
MAX_SOURCE = 160


def _chain(exc: BaseException) -> list[BaseException]:
    chain: list[BaseException] = []
    cur: BaseException | None = exc
    while cur is not None and cur not in chain and len(chain) < 8:
        chain.append(cur)
        cur = cur.__cause__ or cur.__context__
    return chain


def last_line(exc: BaseException) -> str:
    """The line that says what went wrong: the first line of the innermost exception in the chain
    (the dynamo exporter wraps "No ONNX function found for aten.X" in two generic ConversionErrors)."""
    for e in reversed(_chain(exc)):
        lines = [ln.strip() for ln in _ANSI.sub("", str(e)).splitlines() if ln.strip()]
        if lines:
            prefix = f"{type(e).__name__}: " if e is not exc else ""
            return (prefix + lines[0])[:MAX_LINE]
    return type(exc).__name__


def source_of(exc: BaseException) -> str:
    """` (at aten.view.default, modeling_t5.py:366: attn_output = ...)`: the op and the innermost model
    line the exporter names, or '' where it names neither."""
    for e in reversed(_chain(exc)):
        text = _ANSI.sub("", str(e))
        target = _TARGET.search(text)
        frames = _FRAME.findall(text.split("Original traceback:", 1)[1]) if "Original traceback:" in text else []
        parts = [target.group(1)] if target else []
        if frames:
            path, line, code = frames[-1]
            parts.append(f"{path.replace(chr(92), '/').rsplit('/', 1)[-1]}:{line}: {code.strip()}")
        if parts:
            return f" (at {', '.join(parts)[:MAX_SOURCE]})"
    return ""
