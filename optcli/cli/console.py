"""Rich consoles for the measuring commands: tables on stdout, warnings and progress on stderr."""
from __future__ import annotations

import sys

from rich.console import Console

# Piped or redirected output (CI logs, `> file`) gets wide tables instead of rich's 80 columns.
_PIPED_WIDTH = 160


def stdout_console() -> Console:
    return Console(highlight=False, width=None if sys.stdout.isatty() else _PIPED_WIDTH)


def stderr_console() -> Console:
    return Console(stderr=True, highlight=False, width=None if sys.stderr.isatty() else _PIPED_WIDTH)
