"""The one exception every bad input becomes: the CLI prints its message as one line, exits 2."""


class UsageError(Exception):
    """Bad input, found before any job is submitted or device taken; the message says the fix."""
