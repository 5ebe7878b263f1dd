"""Errors the library raises for the command line (and the dashboard) to show."""


class UserError(Exception):
    """A problem the user can fix (bad option, unreadable input): printed without a traceback."""
