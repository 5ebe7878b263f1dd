"""Errors the library raises for the command line (and the dashboard) to show."""
from typing import Any


class UserError(Exception):
    """A problem the user can fix (bad option, unreadable input): printed without a traceback."""


def shown(value: Any) -> str:
    """A value in an error message: its repr, cut short (a config may hold a megabyte string)."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
