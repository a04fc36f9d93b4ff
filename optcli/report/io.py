"""Reading, writing and migrating report.json: the one place that knows the file.

`schema_version` says how compatible a report is (docs/report-schema.md, "Version policy"): keys added within a
version are ignored by older readers and kept by newer ones; a report of an older version is migrated to this
one as it loads; one of a newer version than this optcli knows is refused (exit 2) rather than misread."""
from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from optcli.atomic_write import write_text_atomic
from optcli.report.json_record import JSONObject
from optcli.report.markdown import to_markdown
from optcli.report.run import SCHEMA_VERSION, RunRecord


@dataclass
class RunReport(RunRecord):
    """The run report, read from and written to its files."""

    @classmethod
    def load(cls, path: Path, hint: str) -> RunReport:
        """Read a report.json; anything that is not one (unreadable, not JSON, no stages) is a UsageError."""
        return load_report(path, hint)

    def write(self, out_dir: Path) -> None:
        """report.json and report.md into `out_dir`, each replaced atomically."""
        write_report(self, out_dir)


def _one_build_stage(data: JSONObject) -> JSONObject:
    """1 -> 2: build-cpu and build-tensorrt were two rows, the one for the other target skipped; they are one
    `build` row now: the row that was not skipped (the first where both were), renamed, and a deferred gate's
    `gate_deferred_to` says "build"."""
    from optcli.plan.stage_names import FORMER_BUILD_NAMES, StageName

    builds = [row for row in data["stages"] if row.get("name") in FORMER_BUILD_NAMES]
    kept: JSONObject = next((row for row in builds if row.get("status") != "skipped"), builds[0]) if builds else {}
    stages: list[JSONObject] = []
    for row in data["stages"]:
        if row.get("name") in FORMER_BUILD_NAMES:
            if row is builds[0]:  # the build row stands where the first of the two stood
                stages.append({**kept, "name": str(StageName.BUILD)})
            continue
        accuracy = row.get("accuracy")
        if isinstance(accuracy, dict) and accuracy.get("gate_deferred_to") in FORMER_BUILD_NAMES:
            row = {**row, "accuracy": {**accuracy, "gate_deferred_to": str(StageName.BUILD)}}
        stages.append(row)
    return {**data, "stages": stages}


# version n -> the function that turns a report of version n into one of n + 1.
MIGRATIONS: dict[int, Callable[[JSONObject], JSONObject]] = {1: _one_build_stage}
_OBJECTS = ("model", "environment", "config")      # an object that is missing or not one reads as {}
_OPTIONAL = ("error", "config_file")               # an object that is missing or not one reads as null


def migrate(data: JSONObject, path: Path, hint: str) -> JSONObject:
    """`data` (a report.json of any version this optcli knows) as a report of SCHEMA_VERSION."""
    from optcli.errors import UsageError

    version = data.get("schema_version", 1)  # reports before the field existed are version 1
    if not isinstance(version, int) or version < 1:
        raise UsageError(f"{path}: schema_version {version!r} is not a version number", hint=hint)
    if version > SCHEMA_VERSION:
        raise UsageError(f"{path} has report schema_version {version}; this optcli reads up to {SCHEMA_VERSION}",
                         hint="upgrade optcli to read it (pip install -U optcli)")
    while version < SCHEMA_VERSION:
        data = MIGRATIONS[version](data)
        version += 1
    return {**data, "schema_version": version}


def report_from_json(data: object, path: Path, hint: str) -> RunReport:
    """The RunReport of a parsed report.json; what is not one is a UsageError naming `path`."""
    from optcli.errors import UsageError

    if not isinstance(data, dict) or not isinstance(data.get("stages"), list):
        raise UsageError(f"{path} is not an optcli run report (no 'stages' list)", hint=hint)
    for s in data["stages"]:
        if not isinstance(s, dict) or not isinstance(s.get("name"), str):
            raise UsageError(f"{path}: a stage record is malformed", hint=hint)
    final = data.get("final")
    if final is not None and not isinstance(final, dict):
        raise UsageError(f"{path}: 'final' is not an object", hint=hint)
    data = migrate(data, path, hint)
    clean = {**data, **{k: data.get(k) if isinstance(data.get(k), dict) else {} for k in _OBJECTS},
             **{k: data.get(k) if isinstance(data.get(k), dict) else None for k in _OPTIONAL},
             "optcli_version": str(data.get("optcli_version", "")), "target": str(data.get("target", "")),
             "status": str(data.get("status", "unknown"))}
    return RunReport.from_json(clean)


def load_report(path: Path, hint: str) -> RunReport:
    """Read a report.json; anything that is not one (unreadable, not JSON, no stages) is a UsageError."""
    from optcli.errors import UsageError

    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise UsageError(f"cannot read {path}: {type(exc).__name__}: {str(exc)[:200]}", hint=hint) from None
    return report_from_json(data, path, hint)


def report_json_text(report: RunRecord) -> str:
    """report.json's text."""
    return json.dumps(report.to_json(), indent=2, default=str) + "\n"


def write_report(report: RunRecord, out_dir: Path) -> None:
    """report.json and report.md into `out_dir`, each replaced atomically. The Markdown is rendered from the JSON as
    written (figures rounded), so report.md says what report.json says, and what rendering a loaded report says."""
    text_json = report_json_text(report)
    written = RunRecord.from_json(json.loads(text_json))
    for name, text in (("report.json", text_json), ("report.md", to_markdown(written))):
        try:
            write_text_atomic(out_dir / name, text)
        except OSError as exc:  # a full disk: say which file (the temporary's write names none)
            if exc.filename is not None:
                raise
            raise OSError(exc.errno, exc.strerror, str(out_dir / name)) from exc
