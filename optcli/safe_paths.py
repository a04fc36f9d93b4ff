"""Paths read from files optcli wrote (report.json, stage.json, caches) are data, not instructions:
each is resolved, must stay inside the folder of the file that named it, and the file it names must
have the sha256 recorded beside it. Anything else is refused with exit 2 naming the file."""
from __future__ import annotations

import re
from pathlib import Path, PurePosixPath

from optcli.errors import UsageError

_HINT = "the file was edited or the folder tampered with: rerun `optcli compile` (with --force) to rebuild it"


def shown(path: object) -> str:
    """A path for a one-line message: control characters (a newline in a file name) escaped."""
    return re.sub(r"[\x00-\x1f\x7f]", lambda m: f"\\x{ord(m.group()):02x}", str(path))


def contained(base: Path, relative: object, named_in: Path) -> Path:
    """`base / relative`, refused unless `relative` is a plain relative path that resolves inside `base`
    (no absolute path, no `..`, no symbolic link leading out)."""
    if not isinstance(relative, str) or not relative or "\x00" in relative:
        raise UsageError(f"{shown(named_in)}: artifact path {relative!r} is not a relative file path", hint=_HINT)
    rel = PurePosixPath(relative.replace("\\", "/"))
    if rel.is_absolute() or ".." in rel.parts or Path(relative).is_absolute() or Path(relative).drive:
        raise UsageError(f"{shown(named_in)}: artifact path {relative!r} points outside {shown(base)}", hint=_HINT)
    root = base.resolve()
    path = (root / Path(*rel.parts)).resolve()
    if path != root and root not in path.parents:
        raise UsageError(f"{shown(named_in)}: artifact path {relative!r} leads outside {shown(base)} (a link?)",
                         hint=_HINT)
    return path


def verified(path: Path, expected: object, named_in: Path) -> Path:
    """`path`, refused unless its sha256 equals the one `named_in` recorded for it."""
    from optcli.artifact import sha256_file

    if not isinstance(expected, str) or len(expected) != 64:
        raise UsageError(f"{shown(named_in)}: no sha256 recorded for {shown(path.name)}", hint=_HINT)
    if not path.exists():
        raise UsageError(f"{shown(named_in)} names {shown(path.name)}, which is not there",
                         hint="the output folder was moved or cleaned; rerun `optcli compile`")
    actual = sha256_file(path)
    if actual != expected:
        raise UsageError(f"{shown(path)} does not match the sha256 {shown(named_in.name)} recorded for it "
                         f"({actual[:12]}... != {expected[:12]}...)", hint=_HINT)
    return path
