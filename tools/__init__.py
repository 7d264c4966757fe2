"""Developer tools (host, CPython): virtual board, benchmark drivers, golden-data makers."""
