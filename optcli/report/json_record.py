"""JsonRecord: the base of the report's dataclasses. `from_json` reads an object (keys it does not know kept in
`extra`, so a report written by a newer optcli survives a load and a write), `to_json` writes it back in field
order. Nested records, lists and maps of records convert by the fields' type hints."""
from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, ClassVar, TypeAlias, TypeVar, Union

# A JSON value as a stage or library wrote it, for the parts of the report whose inner shape belongs to one
# stage's algorithm (a search's candidates, a fallback's units): docs/report-schema.md and the stage's page.
JSONValue: TypeAlias = Any
JSONObject: TypeAlias = dict[str, JSONValue]

# A field with this metadata is left out of the JSON while it is None (a key the report writes only sometimes).
OMIT_NONE = {"omit_none": True}

R = TypeVar("R", bound="JsonRecord")


def _record_type(hint: Any) -> tuple[str, type[Any] | None]:
    """("one" | "list" | "dict" | "enum" | "", the record or enum class) for a field's type hint."""
    origin = typing.get_origin(hint)
    if origin in (Union, types.UnionType):
        inner = [a for a in typing.get_args(hint) if a is not type(None)]
        return _record_type(inner[0]) if len(inner) == 1 else ("", None)
    if isinstance(hint, type) and issubclass(hint, StrEnum):
        return "enum", hint
    if isinstance(hint, type) and issubclass(hint, JsonRecord):
        return "one", hint
    args = typing.get_args(hint)
    if origin is list and args and isinstance(args[0], type) and issubclass(args[0], JsonRecord):
        return "list", args[0]
    if origin is dict and len(args) == 2 and isinstance(args[1], type) and issubclass(args[1], JsonRecord):
        return "dict", args[1]
    return "", None


def _member(enum: type[StrEnum], value: str) -> StrEnum | str:
    """A member of `enum`, or the string itself where it is none (a word of a newer optcli: kept, not refused)."""
    try:
        return enum(value)
    except ValueError:
        return value


def _convert(kind: str, sub: type[Any] | None, value: Any) -> Any:
    """`value` as the field's type: a member of its enum, its record (or a list or map of them) from JSON."""
    if sub is None:
        return value
    if kind == "enum" and isinstance(value, str) and not isinstance(value, sub):
        return _member(sub, value)
    if kind == "one" and isinstance(value, dict):
        return sub.from_json(value)
    if kind == "list" and isinstance(value, list) and any(isinstance(v, dict) for v in value):
        return [sub.from_json(v) if isinstance(v, dict) else v for v in value]
    if kind == "dict" and isinstance(value, dict) and any(isinstance(v, dict) for v in value.values()):
        return {k: sub.from_json(v) if isinstance(v, dict) else v for k, v in value.items()}
    return value


def _dump(value: Any) -> Any:
    if isinstance(value, JsonRecord):
        return value.to_json()
    if isinstance(value, list):
        return [_dump(v) for v in value]
    if isinstance(value, dict):
        return {k: _dump(v) for k, v in value.items()}
    if isinstance(value, StrEnum):
        return str(value)
    return value


@dataclass
class JsonRecord:
    """A typed JSON object of the report. Read-only `record["key"]` / `.get` / `in` answer as its JSON would
    (for code written when the report was dicts); new code reads the attributes."""

    extra: JSONObject = field(default_factory=dict, repr=False, compare=False, kw_only=True)
    # keys the JSON carries that are computed from the fields (LatencyStats' throughput; docs list them)
    derived: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def _kinds(cls) -> dict[str, tuple[str, type[Any] | None]]:
        cached = cls.__dict__.get("_kinds_cache")
        if cached is None:
            hints = typing.get_type_hints(cls)
            cached = {f.name: _record_type(hints[f.name]) for f in dataclasses.fields(cls) if f.name != "extra"}
            cls._kinds_cache = cached  # type: ignore[attr-defined]
        return cached

    def __setattr__(self, name: str, value: Any) -> None:
        # a JSON object given where a record belongs (RunReport(model={...}), report.final = {...}) becomes the
        # record, a status string its Status member: the record holds its types whichever way it was filled
        kind, sub = self._kinds().get(name, ("", None))
        object.__setattr__(self, name, _convert(kind, sub, value))

    @classmethod
    def from_json(cls: type[R], data: JSONObject) -> R:
        """The record of a JSON object; nested records convert, keys not known go to `extra`."""
        kinds = cls._kinds()
        known = {k: v for k, v in data.items() if k in kinds}
        # derived keys (LatencyStats' throughput) are kept as read too: computed again from rounded fields they
        # could differ in the last digit, and a cached stage must report the figures it reported
        extra = {k: v for k, v in data.items() if k not in kinds}
        return cls(**known, extra=extra)

    def to_json(self) -> JSONObject:
        """The JSON object, fields in order, then the keys kept from the JSON this record was read from."""
        out: JSONObject = {}
        for f in dataclasses.fields(self):
            if f.name == "extra":
                continue
            value = getattr(self, f.name)
            if value is None and f.metadata.get("omit_none"):
                continue
            out[f.name] = _dump(value)
        out.update(self.json_extras())
        out.update(_dump(self.extra))
        return out

    def json_extras(self) -> JSONObject:
        """Derived keys the JSON carries besides the fields (see `derived`)."""
        return {}

    # -- read-only dict-style access, as the JSON reads -----------------------------------------------
    def __getitem__(self, key: str) -> JSONValue:
        data = self.to_json()
        return data[key]

    def get(self, key: str, default: JSONValue = None) -> JSONValue:
        return self.to_json().get(key, default)

    def __contains__(self, key: object) -> bool:
        return key in self.to_json()

    def keys(self) -> Iterator[str]:
        return iter(self.to_json())
