"""Host (CPython): `python -m tinyattn`, the `tinyattn` command line (tinyattn.cli) by module
name, for an environment whose scripts folder is not on PATH."""

import sys

from tinyattn.cli import main

sys.exit(main())
