"""Runner options read back from a record optcli wrote (a stage.json beside an artifact, a cached
stage, a candidate-cache entry). Such a record is a file on disk that anyone may have edited, so it may
carry only what its backend's descriptor allows (`Backend.recorded_options`): a word from a fixed list or
a short list of names. Everything else a runner takes (threads, concurrency, device, onnxruntime's
profile_prefix, which decides where a profile is written) comes from the command line or the API only
(docs/security.md)."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from optcli.errors import UsageError

_NAME = re.compile(r"[A-Za-z0-9_]{1,64}")


def problem(fmt: str, options: Any) -> str | None:
    """Why `options` may not come from a record for a `fmt` artifact, or None when every one is allowed."""
    from optcli.backends.registry import for_format

    if not isinstance(options, dict):
        return f"runner_options is a {type(options).__name__}, not a table"
    try:
        rules = {r.name: r for r in for_format(fmt).recorded_options}
    except UsageError:
        return f"format {fmt!r} is not one optcli runs"
    for name, value in options.items():
        rule = rules.get(name)
        if rule is None:
            allowed = ", ".join(sorted(rules)) or "none"
            return f"runner option {str(name)[:40]!r} cannot come from a file (allowed there: {allowed})"
        if rule.choices:
            if not (isinstance(value, str) and value in rule.choices):
                return f"runner option {name!r} = {_short(value)} is not one of {', '.join(rule.choices)}"
        elif not (isinstance(value, list) and len(value) <= rule.max_names
                  and all(isinstance(v, str) and _NAME.fullmatch(v) for v in value)):
            return (f"runner option {name!r} = {_short(value)} is not a list of at most {rule.max_names} names "
                    "(letters, digits, _)")
    return None


def checked(fmt: str, options: Any, record: Path) -> dict[str, object]:
    """`options` as a dict when every one is on the backend's allow-list with its type and bounds; else a
    UsageError (exit 2) naming the record."""
    reason = problem(fmt, options)
    if reason is not None:
        raise UsageError(f"{record}: {reason}",
                         hint="runner options such as threads or profile_prefix go on the command line or to the "
                              "API; re-run `optcli compile` to rewrite the record")
    return dict(options)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
