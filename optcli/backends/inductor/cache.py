"""The package cache: AOTInductor packages kept across runs and output folders, keyed by what made
them, so a re-run skips the C++ compile (tens of seconds even for a small CNN).

Key = sha256 of (the serialized exported program after quantization, the Inductor configs, the torch
version, this CPU's name and vector ISA). Layout under the cache root ($OPTCLI_CACHE_DIR/inductor,
else $XDG_CACHE_HOME/optcli/inductor, else ~/.cache/optcli/inductor):

    <root>/<key[:2]>/<key>/model.pt2     the package
    <root>/<key[:2]>/<key>/entry.json    {key, sha256}

An entry is used only if entry.json names the same key and the package bytes hash to its sha256;
otherwise it is removed and the package rebuilt.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Mapping
from pathlib import Path

from optcli.artifact import sha256_file
from optcli.atomic_write import atomic_dir

KEY_VERSION = 1
PACKAGE_FILE = "model.pt2"
ENTRY_FILE = "entry.json"


def default_root() -> Path:
    """$OPTCLI_CACHE_DIR/inductor, else $XDG_CACHE_HOME/optcli/inductor, else ~/.cache/optcli/inductor."""
    base = os.environ.get("OPTCLI_CACHE_DIR")
    if base:
        return Path(base).expanduser() / "inductor"
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "optcli" / "inductor"


def cache_key(program_sha256: str, configs: Mapping[str, object], machine: Mapping[str, object]) -> str:
    """Changes whenever anything that changes the compiled package changes."""
    blob = json.dumps({"key_version": KEY_VERSION, "program": program_sha256, "configs": configs,
                       "machine": machine}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


class PackageCache:
    """A folder of packages keyed by cache_key()."""

    def __init__(self, root: Path | None = None) -> None:
        self.root = Path(root) if root is not None else default_root()

    def entry(self, key: str) -> Path:
        return self.root / key[:2] / key

    def lookup(self, key: str) -> tuple[Path | None, str]:
        """(the cached package, "hit") or (None, "miss" | why the entry was dropped)."""
        folder = self.entry(key)
        if not folder.exists():
            return None, "miss"
        package, record = folder / PACKAGE_FILE, folder / ENTRY_FILE
        try:
            entry = json.loads(record.read_text(encoding="utf-8"))
            ok = isinstance(entry, dict) and entry.get("key") == key and package.is_file() \
                and sha256_file(package) == entry.get("sha256")
        except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError):
            ok = False
        if ok:
            return package, "hit"
        self.evict(key)
        return None, "corrupt entry removed"

    def store(self, key: str, package: Path) -> Path:
        """Copy `package` in atomically (a crash leaves no half entry under the key); returns its path."""
        with atomic_dir(self.entry(key)) as tmp:
            shutil.copy2(package, tmp / PACKAGE_FILE)
            (tmp / ENTRY_FILE).write_text(json.dumps({"key": key, "sha256": sha256_file(package)}), encoding="utf-8")
        return self.entry(key) / PACKAGE_FILE

    def evict(self, key: str) -> None:
        shutil.rmtree(self.entry(key), ignore_errors=True)
