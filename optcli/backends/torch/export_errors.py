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


# A dependency's API that is gone (a removed attribute, a module that no longer imports) breaks every
# model alike: the environment is broken, not the model, so the run must not fall back and call it done.
_ENVIRONMENT_ERRORS = (AttributeError, ImportError)


def environment_fault(exc: BaseException) -> str | None:
    """`protobuf 7.36.2: AttributeError: ...` where the exception chain holds an AttributeError or
    ImportError from inside an installed package (a removed API), else None (the model's own failure,
    or an exporter's refusal). torch counts only where a torch module lacks an attribute: its exporters
    raise AttributeErrors of their own on models they cannot take."""
    for e in reversed(_chain(exc)):
        if not isinstance(e, _ENVIRONMENT_ERRORS):
            continue
        module = _module_of(e)
        dist = _distribution(module) if module else None
        if dist is None or (dist[0] == "torch" and not _missing_module_attribute(e)):
            continue
        return f"{dist[0]} {dist[1]}: {type(e).__name__}: {_first_line(e)}"
    return None


def _first_line(e: BaseException) -> str:
    lines = [ln.strip() for ln in _ANSI.sub("", str(e)).splitlines() if ln.strip()]
    return (lines[0] if lines else type(e).__name__)[:MAX_LINE]


def _missing_module_attribute(e: BaseException) -> bool:
    import types

    return isinstance(e, ImportError) or isinstance(getattr(e, "obj", None), types.ModuleType)


def _module_of(e: BaseException) -> str | None:
    """The module the failure belongs to: the object missing the attribute, the module that did not
    import, else the innermost frame's."""
    import types

    obj = getattr(e, "obj", None) if isinstance(e, AttributeError) else None
    if obj is not None:
        return obj.__name__ if isinstance(obj, types.ModuleType) else type(obj).__module__
    if isinstance(e, ImportError) and e.name:
        return e.name
    tb = e.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb.tb_frame.f_globals.get("__name__") if tb is not None else None


def _distribution(module: str) -> tuple[str, str] | None:
    """(distribution, version) that installs `module`, or None for optcli, the standard library, the
    user's own code and namespace packages no single distribution owns."""
    from importlib import metadata

    top = module.split(".")[0]
    if top in ("optcli", "__main__", "builtins"):
        return None
    names = metadata.packages_distributions().get(top, [])
    if len(names) > 1:  # a namespace package (google.*): the distribution that holds the submodule
        path = module.replace(".", "/")
        names = [n for n in names if any(str(f).startswith(path) for f in (metadata.files(n) or []))] or names[:1]
    if not names:
        return None
    try:
        return names[0], metadata.version(names[0])
    except metadata.PackageNotFoundError:
        return None
