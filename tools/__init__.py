"""tinyattn.tools (host, CPython; folder tools/): the virtual board and the benchmark drivers
that the CLI runs. tools/dev/ (golden-data makers, fitting helpers) is for a clone only and is
not in the wheel."""
