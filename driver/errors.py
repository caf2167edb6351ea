"""Errors shared across components."""


class CliError(Exception):
    """A usage error the user can fix; `carve` prints it as one line and exits 2."""
