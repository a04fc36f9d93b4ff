"""Render protobuf text format (Triton's config.pbtxt) from plain Python values, without protobuf.

The product code must not depend on tritonclient (a test-only dependency), so the config is built as
nested dicts and rendered here; tests parse the output back into Triton's own ModelConfig message.

Value mapping: dict -> message `{ ... }`; list of dicts -> repeated message `[ {...}, {...} ]`;
list of scalars -> `[ a, b ]`; `Enum("KIND_GPU")` -> a bare enum identifier; `MapEntries` -> one
`key { key: ... value: ... }` block per entry (how Triton's own examples write map fields);
str -> a quoted, escaped string; bool -> true/false; int -> decimal. `Comment` values become
`# ...` lines (text format allows comments), so the file explains itself.
"""
from __future__ import annotations

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


def _message_lines(message: dict[str, Any], depth: int) -> list[str]:
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


def render(message: dict[str, Any]) -> str:
    """The whole message as protobuf text format, ending with a newline."""
    return "\n".join(_message_lines(message, 0)) + "\n"
