"""Developer scripts (host, CPython; folder tools/dev/): golden-data makers, heap fitting, the
int8-loss harness. A clone only (they read and write tests/golden): not in the wheel; run them
from a clone's .venv as `python -m tinyattn.tools.dev.NAME`."""
