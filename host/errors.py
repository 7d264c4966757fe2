"""Host (CPython): `CLIError`, the error every `tinyattn` command raises for its user.

A leaf module (it imports nothing of tinyattn), so the command modules and the dispatcher
(`tinyattn.cli`, which re-exports it as `tinyattn.cli.CLIError`) share one class without
importing each other.
"""


class CLIError(Exception):
    """An error meant for the user: printed as one line, exit status 2."""
