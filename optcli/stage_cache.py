"""The stage cache: each stage folder holds a record (stage.json) of the artifact it made, the key it was
made under, and the measurements around it. A later run reuses the stage (`cached`) when the key is
the same, the record is well formed, its artifact lies inside the stage folder and still has the
recorded sha256. A record that points outside its folder was tampered with: exit 2 naming it.

The key (Olive's idea of caching by pass, config and input): the stage's name, the optcli version,
the input artifact's sha256, the stage's config fingerprint and the target.
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from optcli.artifact import Artifact, sha256_file
from optcli.atomic_write import write_text_atomic
from optcli.report import StageRecord
from optcli.safe_paths import contained
from optcli.version import __version__

if TYPE_CHECKING:
    from optcli.stages.base import Stage

STAGE_RECORD = "stage.json"
_STRINGS = ("artifact", "sha256", "format", "precision", "backend")
_DICTS = ("details", "graph", "latency_ms")


def cache_key(stage: Stage, artifact: Artifact) -> str:
    """The stage's cache key for `artifact`: its fingerprint's values are hashed as JSON, a value JSON has no
    form for (a Path, an enum) by its str()."""
    blob = json.dumps({"stage": stage.name, "optcli": __version__, "input": artifact.sha256,
                       "config": stage.fingerprint(), "target": stage.ctx.target}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


def well_formed(record: Mapping[str, object]) -> bool:
    """The fields a cache hit reads, with the right types, and runner options only those a record may
    carry (optcli/runtime/recorded_options.py); else the stage is rebuilt."""
    from optcli.runtime.recorded_options import problem

    meta = record.get("meta", {})
    return (all(isinstance(record.get(k), str) for k in _STRINGS)
            and all(isinstance(record.get(k), dict) for k in _DICTS)
            and isinstance(record.get("seconds"), (int, float)) and isinstance(meta, dict)
            and isinstance(record.get("accuracy"), (dict, type(None)))
            and problem(str(record["format"]), meta.get("runner_options", {})) is None)


def load_record(stage_dir: Path, key: str) -> dict[str, object] | None:
    """The stage's record when it can be reused, else None; a record naming a file outside the stage
    folder raises UsageError (exit 2)."""
    record_path = stage_dir / STAGE_RECORD
    if not record_path.is_file():
        return None
    try:
        record = json.loads(record_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        return None
    if not isinstance(record, dict) or record.get("key") != key or not well_formed(record):
        return None
    art = contained(stage_dir, record["artifact"], record_path)
    for extra in record.get("meta", {}).get("external_data") or []:
        contained(stage_dir, extra, record_path)
    if not art.exists() or sha256_file(art) != record["sha256"]:
        return None
    return record


def cached_artifact(stage_dir: Path, record: Mapping[str, object], stage: str, parent: str) -> Artifact:
    """The artifact of a record load_record returned (well_formed: its strings are strings, its meta a dict)."""
    # meta's "accuracy" (what the INT8 stage judged, which the CPU build would take as known) is a claim of the
    # file: the pipeline measures a reused artifact again instead (optcli/cache_recheck.py)
    recorded = record.get("meta", {})
    meta = {k: v for k, v in recorded.items() if k != "accuracy"} if isinstance(recorded, dict) else {}
    text = {k: str(record[k]) for k in _STRINGS}
    return Artifact(stage_dir / text["artifact"], text["format"], precision=text["precision"], stage=stage,
                    parent=parent, backend=text["backend"], meta=meta, _sha256=text["sha256"])


def write_record(folder: Path, key: str, bench_key: str, relative: Path, artifact: Artifact,
                 stage_report: StageRecord) -> None:
    """stage.json for `artifact` (at `relative` inside the stage folder) and the stage's report."""
    record = {"key": key, "bench_key": bench_key, "artifact": str(relative), "sha256": artifact.sha256,
              "format": artifact.format, "precision": artifact.precision, "backend": artifact.backend,
              "meta": artifact.meta, "seconds": stage_report.seconds, "details": stage_report.details.to_json(),
              "graph": stage_report.graph.to_json(), "latency_ms": stage_report.latency_ms.to_json(),
              "accuracy": stage_report.accuracy.to_json() if stage_report.accuracy is not None else None}
    write_text_atomic(folder / STAGE_RECORD, json.dumps(record, indent=2, default=str))
