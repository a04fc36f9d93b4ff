"""A click choice whose values come from a registry when the CLI parses or shows help, not when the
command is defined: a backend registered by its one line appears in `--backend` with nothing else to edit."""
from __future__ import annotations

from collections.abc import Callable, Sequence

import click


class RegistryChoice(click.Choice):
    """click.Choice over `values()`, asked each time (the registry loads lazily and cheaply)."""

    def __init__(self, values: Callable[[], Sequence[str]]) -> None:
        self._values = values
        super().__init__([])

    @property
    def choices(self) -> tuple[str, ...]:
        return tuple(self._values())

    @choices.setter
    def choices(self, _ignored: Sequence[str]) -> None:
        pass
