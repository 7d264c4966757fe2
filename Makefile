# tinyattn — every target installs what it needs into .venv first.
# PORT: a real board (/dev/ttyACM0 for RP2040 USB-CDC, /dev/ttyUSB0 for ESP32 at 115200 baud).
# Without PORT the serial targets start a virtual board (MicroPython unix port on a pty).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
PORT   ?=
BAUD   ?= 115200
# DATASET: iris, wine, or the windows basicmotions / japanesevowels (seq-attn). Each dataset
# has its own model and blob, so 'make demo DATASET=basicmotions' never reuses Iris's files.
DATASET ?= iris
MODEL  ?= $(if $(filter iris,$(DATASET)),build/model.npz,build/$(DATASET).npz)
BLOB   ?= $(if $(filter iris,$(DATASET)),build/model.bin,build/$(DATASET).bin)
PORTARG := $(if $(PORT),--port $(PORT) --baud $(BAUD),)

.PHONY: help install install-dev install-oracle install-cluster install-peers test test-slow test-host train export flash \
        parity demo board bench bench-train bench-pico test-boards test-boards-all bench-device bench-accuracy bench-picks bench-stream report lint wheel-check clean \
        train-board

help:  ## list targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/' | column -t -s "$$(printf '\t')"

install: $(VENV)/.installed  ## create .venv and install tinyattn with test extras

$(VENV)/.installed: pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[test,report]'
	@touch $@

install-oracle: install  ## add PyTorch (CPU) so the oracle tests and bench-train run
	$(BIN)/python -m pip install --quiet --disable-pip-version-check torch==2.13.0

install-cluster: install  ## add dask.distributed (extra 'cluster') so the search runs on a Dask cluster
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[cluster]'

install-peers: install  ## add scikit-learn, sktime, numba and dtaidistance (extra 'peers'): the peers bench-accuracy compares
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[peers]'

# The suite runs in parallel (pytest-xdist); a real board on TINYATTN_PORT is one board, so
# then the tests run in one process. `make test` leaves out the long end-to-end sessions (the
# `slow` marker: ~5 s or more each here, most of them a whole flash/parity/training session on a
# virtual board) and the large fuzz volumes: `make test-slow` and `make test-fuzz` (CI runs all
# three). On 2 cores: test ~4.5 min; test-slow ~6 min.
# WORKERS: one and a half per core, because a third of a worker's time is spent waiting, not
# computing (serial links, virtual boards starting and resetting, timeouts a test provokes):
# on 2 cores the suite took ~572 CPU-s in 408 s of wall time with 2 workers (70 % busy).
# worksteal: each worker starts with its share of the tests in order (a file's tests stay
# together), and one that runs out takes half of another's queue, so the run does not end
# with one worker idle while another still holds queued long tests.
WORKERS ?= $(shell $(PYTHON) -c 'import os; n = os.cpu_count() or 1; print(n + (n + 1) // 2)')
XDIST = $(if $(TINYATTN_PORT),,-n $(WORKERS) --dist worksteal)

test: install  ## run the test suite in parallel, all but the slow sessions (starts virtual boards itself)
	$(BIN)/python -m pytest $(XDIST) -m "not fuzz and not emulated and not slow"

test-slow: install  ## the long end-to-end sessions (marker `slow`: on-board training to default epochs, the app, fleets; CI runs them)
	$(BIN)/python -m pytest $(XDIST) -m "slow and not fuzz and not emulated"

test-boards: install  ## the emulated ARM boards (../shared/boards: Pico, Cortex-M3), one of each, ~5.5 min alone
	$(BIN)/python -m pytest -m emulated

test-boards-all: install  ## test-boards on every golden record with every kernel set (TINYATTN_EMULATED_ALL=1; pure JapaneseVowels alone ~70 min of wall time)
	TINYATTN_EMULATED_ALL=1 $(BIN)/python -m pytest -m emulated $(ARGS)

test-fuzz: install  ## the large fuzz volumes (hypothesis, thousands of blobs; CI runs them)
	$(BIN)/python -m pytest $(XDIST) -m fuzz

test-host: install  ## host-only tests (no MicroPython, no serial)
	$(BIN)/python -m pytest -m host

train: install  ## train on DATASET (default iris; basicmotions, japanesevowels: seq-attn) -> MODEL
	$(BIN)/tinyattn train --dataset $(DATASET) --out $(MODEL)

train-board: install  ## train DATASET on the board (PORT, or a virtual board) -> MODEL; ARGS=… e.g. "--head-only --csv mine.csv"
	$(BIN)/tinyattn train --on-board --dataset $(DATASET) $(PORTARG) --out $(MODEL) $(ARGS)

$(MODEL): | $(VENV)/.installed
	$(BIN)/tinyattn train --dataset $(DATASET) --out $(MODEL)

export: $(BLOB)  ## quantize and write build/model.bin (trains first if needed; only when the model changed)

# A file target: flash, parity, demo, bench and report re-export (and print the export table)
# only when the model is newer than the blob. 'make -B export' forces it.
$(BLOB): $(MODEL)
	$(BIN)/tinyattn export --model $(MODEL) --out $(BLOB)

flash: export  ## copy device files (.mpy; MPY=0: .py) + blob to PORT (or the virtual board); ARGS=… passed on
	$(BIN)/tinyattn flash $(PORTARG) --blob $(BLOB) $(if $(filter 0,$(MPY)),--py,$(if $(filter 1,$(MPY)),--mpy)) $(ARGS)

parity: export  ## host-vs-device parity over serial -> build/parity.json
	$(BIN)/tinyattn parity $(PORTARG) --blob $(BLOB) --model $(MODEL) --report build/parity.json $(ARGS)

demo: export  ## the main job: install, train, export, virtual board, flash, parity (DATASET=…)
	$(BIN)/tinyattn demo $(PORTARG) --dataset $(DATASET) --model $(MODEL) --blob $(BLOB) $(if $(filter 0,$(MPY)),--py,$(if $(filter 1,$(MPY)),--mpy)) $(ARGS)

board: install  ## run a virtual board in the foreground; prints its PORT (PACE=115200: paced like a UART)
	$(BIN)/tinyattn board $(if $(PACE),--baud $(PACE),)

bench: export  ## every benchmark in one table, ~9 min; updates docs/benchmarks.md (keeps rows a run skips)
	$(BIN)/tinyattn bench --all --blob $(BLOB) --model $(MODEL) --write docs/benchmarks.md

bench-train: install  ## training time: our NumPy vs PyTorch, same run
	$(BIN)/tinyattn bench --train

bench-device: export  ## µs/inference under MicroPython: float/int8, pure/accelerated vs naive
	$(BIN)/tinyattn bench --device --blob $(BLOB)

# SEARCH_BUDGET: the search's budget, e.g. SEARCH_BUDGET="--search-board rp2040 --search-max-ms 50"
# (a section of its own); empty: the default budget
SEARCH_BUDGET ?=
bench-accuracy: install  ## ~50 min: 10x5-fold CV on Iris+Wine, the time series' TEST splits, and train --search on the seven development problems, ours vs peers
	$(BIN)/tinyattn bench --accuracy --search $(SEARCH_BUDGET) --write docs/benchmarks.md

bench-picks: install  ## ~2 min a pick (~15 min for seven): the picks the last bench-accuracy search left in build/bench-search on the emulated Pico and Cortex-M3: parity, Pico µs vs the time model and each pick's --max-ms
	$(BIN)/tinyattn bench --picks --write docs/benchmarks.md

bench-stream: install  ## ~1 min: BasicMotions TEST as one live stream, host vs the app on a virtual board
	$(BIN)/tinyattn bench --stream --write docs/benchmarks.md

bench-pico: install  ## ~9 min: the int8 kernel sets and the stream on the emulated Pico (../shared/boards); rewrites host/board/rp2040.json
	$(BIN)/tinyattn bench --pico --write docs/benchmarks.md

report: export  ## PNG + HTML/Markdown report: curves, confusion matrices, attention maps
	$(BIN)/tinyattn report --model $(MODEL) --blob $(BLOB) --out build/report

install-dev: install  ## add developer tools (ruff, build, twine) to .venv
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[test,report,dev]'

lint: install-dev  ## ruff check host device tools tests
	$(BIN)/ruff check host device tools tests

wheel-check: install-dev  ## ~3 min: build sdist + wheel, twine check, pip install the wheel[board] in a fresh venv outside the clone, tinyattn demo there
	$(BIN)/python -m tinyattn.tools.dev.wheel_check

clean:  ## remove build outputs (keeps .venv)
	rm -rf build .pytest_cache .hypothesis
