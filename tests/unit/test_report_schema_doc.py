"""docs/report-schema.md documents the report's schema, and only it: each section's key table lists exactly the
fields of one dataclass of optcli/report/, and every such dataclass has its section. A field added to the code
without its row here, or a row left for a field that is gone, fails this test."""
from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import optcli.report as report
from optcli.report import JsonRecord, StageDetails

DOC = Path(__file__).resolve().parents[2] / "docs" / "report-schema.md"

# A section's title (a heading, or a **bold** label opening a line) -> the dataclass its key table documents.
SECTIONS: dict[str, type[JsonRecord]] = {
    "Top level": report.RunRecord, "`model`": report.ModelInfo, "`model.inputs[]` (Input)": report.InputRecord,
    "`environment`": report.EnvironmentInfo, "`config_file`": report.ConfigFileRecord,
    "`error`": report.ErrorRecord, "Stage": report.StageRecord, "`graph`": report.GraphStats,
    "`latency_ms`": report.LatencyPair, "Latency": report.LatencyStats, "Accuracy": report.AccuracyResult,
    "Accuracy `outputs` (Output)": report.OutputAccuracy, "any stage": StageDetails, "gate": report.GateResult,
    "export": report.ExportDetails, "export `dynamic_sequence`": report.details.DynamicSequence,
    "export `attempts[]`": report.details.ExportAttempt, "simplify": report.SimplifyDetails,
    "build (CPU)": report.BuildCpuDetails, "unpad": report.UnpadDetails, "quantize-fp16": report.QuantizeFp16Details,
    "quantize-int8": report.QuantizeInt8Details, "build (TensorRT engine)": report.BuildTensorrtDetails,
    "fuse": report.FuseDetails, "fuse `fusions`": report.details.FusionCounts, "`final`": report.FinalArtifact,
    "`plan`": report.PlanRecord,
}
_TITLE = re.compile(r"^(?:#+\s+(?P<heading>.+?)\s*$|\*\*(?P<label>[^*]+)\*\*)")


def documented_keys(text: str) -> dict[str, set[str]]:
    """Each section's title -> the backticked names in the first column of its first `| key |` table."""
    sections: dict[str, set[str]] = {}
    title, in_table = None, False
    for line in text.splitlines():
        m = _TITLE.match(line)
        if m:
            title, in_table = (m.group("heading") or m.group("label")).strip(), False
            continue
        if title is None:
            continue
        if line.startswith("| key |") and title not in sections:
            sections[title], in_table = set(), True
        elif in_table and line.startswith("|") and not line.startswith("|---"):
            sections[title] |= set(re.findall(r"`([^`]+)`", line.split("|")[1]))
        elif in_table and not line.startswith("|"):
            in_table = False
    return sections


def schema_keys(cls: type[JsonRecord]) -> set[str]:
    """The JSON keys of a record: its fields (a stage's details: only its own) and the keys derived from them."""
    names = {f.name for f in dataclasses.fields(cls)} - {"extra"}
    if issubclass(cls, StageDetails) and cls is not StageDetails:
        names = cls.own_fields()
    return names | set(cls.derived)


def records() -> set[type[JsonRecord]]:
    """Every record class the report package defines."""
    modules = (report.records, report.details, report.run)
    return {v for m in modules for v in vars(m).values()
            if isinstance(v, type) and issubclass(v, JsonRecord) and v is not JsonRecord and v.__module__ == m.__name__}


def test_every_section_lists_exactly_its_dataclass_fields() -> None:
    documented = documented_keys(DOC.read_text(encoding="utf-8"))
    problems = []
    for title, cls in SECTIONS.items():
        if title not in documented:
            problems.append(f"no key table under {title!r} ({cls.__name__})")
            continue
        keys = documented[title]
        inherited = schema_keys(StageDetails) if issubclass(cls, StageDetails) else set()
        missing = schema_keys(cls) - keys
        unknown = keys - schema_keys(cls) - inherited
        problems += [f"{title!r}: field {k!r} of {cls.__name__} is not documented" for k in sorted(missing)]
        problems += [f"{title!r}: documented key {k!r} is no field of {cls.__name__}" for k in sorted(unknown)]
    assert not problems, "\n".join(problems)


def test_every_record_class_has_its_section() -> None:
    undocumented = sorted(c.__name__ for c in records() - set(SECTIONS.values()))
    assert not undocumented, f"record classes without a section in docs/report-schema.md: {undocumented}"


def test_the_parser_finds_a_key_in_a_row_that_names_several() -> None:
    text = "## Latency\n\n| key | type | meaning |\n|---|---|---|\n| `p50`, `p90` | float | x `not_a_key` |\n"
    assert documented_keys(text) == {"Latency": {"p50", "p90"}}
