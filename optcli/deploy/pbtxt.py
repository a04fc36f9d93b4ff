"""Render protobuf text format (Triton's config.pbtxt) from plain Python values, without protobuf, and
read one back (parse) to compare an existing config with a new one.

The product code must not depend on tritonclient (a test-only dependency), so the config is built as
nested dicts and rendered here; tests parse the output back into Triton's own ModelConfig message.

Value mapping: dict -> message `{ ... }`; list of dicts -> repeated message `[ {...}, {...} ]`;
list of scalars -> `[ a, b ]`; `Enum("KIND_GPU")` -> a bare enum identifier; `MapEntries` -> one
`key { key: ... value: ... }` block per entry (how Triton's own examples write map fields);
str -> a quoted, escaped string; bool -> true/false; int -> decimal. `Comment` values become
`# ...` lines (text format allows comments), so the file explains itself.
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any


class Enum(str):
    """An enum value: rendered bare (KIND_GPU), never quoted."""


class Comment(str):
    """A `# ...` line placed where the key appears; the key itself is not rendered."""


class MapEntries(list):
    """Entries of a protobuf map field, each a dict {"key": ..., "value": ...}."""


_INDENT = "  "


def quote(text: str) -> str:
    """A text-format string literal: UTF-8 bytes, with quotes, backslashes and non-printables escaped."""
    out = []
    for byte in text.encode("utf-8"):
        ch = chr(byte)
        if ch == '"':
            out.append('\\"')
        elif ch == "\\":
            out.append("\\\\")
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif 0x20 <= byte < 0x7F:
            out.append(ch)
        else:
            # Octal escapes carry any byte, so non-ASCII tensor names survive byte for byte.
            out.append(f"\\{byte:03o}")
    return '"' + "".join(out) + '"'


def _scalar(value: Any) -> str:
    if isinstance(value, Enum):
        return str(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, str):
        return quote(value)
    raise TypeError(f"cannot render {type(value).__name__} in protobuf text format")


def _message_lines(message: Mapping[str, object], depth: int) -> list[str]:
    pad = _INDENT * depth
    lines: list[str] = []
    for key, value in message.items():
        if value is None:
            continue
        if isinstance(value, Comment):
            lines.extend(f"{pad}# {line}".rstrip() for line in str(value).splitlines())
        elif isinstance(value, MapEntries):
            for entry in value:
                lines.append(f"{pad}{key} {{")
                lines.extend(_message_lines(entry, depth + 1))
                lines.append(f"{pad}}}")
        elif isinstance(value, dict) and not value:
            lines.append(f"{pad}{key} {{ }}")
        elif isinstance(value, dict):
            lines.append(f"{pad}{key} {{")
            lines.extend(_message_lines(value, depth + 1))
            lines.append(f"{pad}}}")
        elif isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            lines.append(f"{pad}{key} [")
            for i, item in enumerate(value):
                lines.append(f"{pad}{_INDENT}{{")
                lines.extend(_message_lines(item, depth + 2))
                lines.append(f"{pad}{_INDENT}}}" + ("," if i < len(value) - 1 else ""))
            lines.append(f"{pad}]")
        elif isinstance(value, list):
            lines.append(f"{pad}{key}: [ " + ", ".join(_scalar(v) for v in value) + " ]" if value
                         else f"{pad}{key}: [ ]")
        else:
            lines.append(f"{pad}{key}: {_scalar(value)}")
    return lines


def render(message: Mapping[str, object]) -> str:
    """The whole message as protobuf text format, ending with a newline. The values may be any of the
    module docstring's mapping (checked here, one by one): a value of another type is a TypeError."""
    return "\n".join(_message_lines(message, 0)) + "\n"


# -- reading one back --------------------------------------------------------------------------------
# Only to compare what an existing config.pbtxt declares with what an export would write
# (triton_repo.py): the tensors and the platform. Tokens of protobuf text format: comments, strings,
# punctuation, and bare words (identifiers, numbers, enum values).
_TOKEN = re.compile(r'\s*(?:#[^\n]*|("(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\')|([{}\[\]:,;<>])|([A-Za-z0-9_.+\-]+))')
MAX_PARSE_DEPTH = 32


def parse(text: str) -> dict[str, list[Any]]:
    """Protobuf text format -> {field: [values]} (every field as a list, as repeated ones are); messages
    are such dicts, numbers ints or floats, strings and enum words str. ValueError when it is not."""
    fields, _ = _parse_fields(_tokens(text), 0, None, 0)
    return fields


def _tokens(text: str) -> list[str]:
    out: list[str] = []
    pos = 0
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if match is None or match.end() == pos:
            if text[pos:].strip() == "":
                break
            raise ValueError(f"unexpected text at offset {pos}: {text[pos:pos + 20]!r}")
        pos = match.end()
        token = match.group(1) or match.group(2) or match.group(3)
        if token:
            out.append(token)
    return out


def _parse_fields(tokens: list[str], pos: int, closer: str | None, depth: int) -> tuple[dict[str, list[Any]], int]:
    if depth > MAX_PARSE_DEPTH:
        raise ValueError("messages nested too deeply")
    fields: dict[str, list[Any]] = {}
    while pos < len(tokens):
        token = tokens[pos]
        if token == closer:
            return fields, pos + 1
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", token):
            raise ValueError(f"expected a field name, got {token!r}")
        pos += 1
        if pos < len(tokens) and tokens[pos] == ":":
            pos += 1
        value, pos = _parse_value(tokens, pos, depth)
        fields.setdefault(token, []).extend(value if isinstance(value, _Repeated) else [value])
        if pos < len(tokens) and tokens[pos] in (",", ";"):
            pos += 1
    if closer is not None:
        raise ValueError(f"missing {closer!r}")
    return fields, pos


class _Repeated(list):
    """The values of a `[ ... ]` list: they extend the field rather than being one value."""


def _parse_value(tokens: list[str], pos: int, depth: int) -> tuple[Any, int]:
    if pos >= len(tokens):
        raise ValueError("a field without a value")
    token = tokens[pos]
    if token in ("{", "<"):
        return _parse_fields(tokens, pos + 1, "}" if token == "{" else ">", depth + 1)
    if token == "[":
        values = _Repeated()
        pos += 1
        while pos < len(tokens) and tokens[pos] != "]":
            value, pos = _parse_value(tokens, pos, depth + 1)
            values.append(value)
            if pos < len(tokens) and tokens[pos] == ",":
                pos += 1
        if pos >= len(tokens):
            raise ValueError("missing ']'")
        return values, pos + 1
    if token in ("}", ">", "]", ":", ",", ";"):
        raise ValueError(f"unexpected {token!r}")
    return _scalar_value(token), pos + 1


def _scalar_value(token: str) -> Any:
    if token[0] in "\"'":
        return _unquote(token[1:-1])
    for kind in (int, float):
        try:
            return kind(token)
        except ValueError:
            pass
    return token


def _unquote(body: str) -> str:
    """Text-format escapes back to the UTF-8 text quote() wrote (octal bytes included)."""
    out = bytearray()
    i = 0
    simple = {"n": 10, "t": 9, "r": 13, '"': 34, "'": 39, "\\": 92}
    raw = body.encode("utf-8")
    while i < len(raw):
        ch = raw[i]
        if ch == 92 and i + 1 < len(raw):
            nxt = chr(raw[i + 1])
            if nxt in simple:
                out.append(simple[nxt])
                i += 2
                continue
            octal = re.match(rb"[0-7]{1,3}", raw[i + 1:i + 4])
            if octal:
                out.append(int(octal.group(0), 8) & 0xFF)
                i += 1 + len(octal.group(0))
                continue
        out.append(ch)
        i += 1
    return out.decode("utf-8", errors="replace")
