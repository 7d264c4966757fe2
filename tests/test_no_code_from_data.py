# Host (CPython): nothing the board or the host receives is ever run as code (issue 6, item 5).
"""The device server and the readers treat what they receive as data, never as code.

A grep for eval/exec cannot show that (code can be run in many ways, and a grep cannot see
what a parser does), so the main tests are behavioural:
- the device server on a virtual board gets strings that would do something if anything ran
  them — `__import__('os')…`, `exec(…)`, `eval(…)`, `open(…)`, `os.system(…)`, attribute and
  dunder names — as op names, ids, keys, feature values, paths, nested in batches, and as raw
  lines, plus Python-only literals that only an eval-based parser would accept. Afterwards the
  board's filesystem (its flash folder) and a marker folder on the host are exactly as before,
  every payload got an error reply (or, as an id, came back verbatim as a string), and the
  server still answers correctly;
- under CPython, `server.handle_line` gets hypothesis-generated lines built from the same
  strings while eval, exec, compile, __import__, open, os.system, os.popen, subprocess.Popen
  and pickle/marshal loads are replaced by tripwires: none may fire, no exception may escape.
The cheap extra: an AST scan of the host reader, the link, parity and device/*.py for calls
of eval/exec/compile, pickle/marshal loads, np.load without allow_pickle=False, and
`__import__` of a computed name outside the known load-time helpers of device/attention.py
(whose arguments are module names from its own tables); `__import__("server_b64")` and the
like, one string literal, name their module in the code and are allowed anywhere.
"""

from __future__ import annotations

import ast
import builtins
import hashlib
import importlib
import json
import marshal
import os
import pickle
import random
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tinyattn.board.flash import flash
from tinyattn.board.link import BoardLink, frame, unframe
from tinyattn.tools.vboard import VirtualBoard, find_micropython

REPO = Path(__file__).resolve().parent.parent
DEVICE_DIR = REPO / "device"


def payloads(marker: str) -> list[str]:
    """Strings that would leave a trace (a file or folder in the board's flash or under
    `marker` on the host, a removed model) if anything ran them."""
    return [
        f"__import__('os').mkdir('{marker}/import')",
        "__import__('os').mkdir('pwned_import')",
        f"exec(\"open('{marker}/exec', 'w').write('x')\")",
        "exec(\"open('pwned_exec', 'w').write('x')\")",
        "eval(\"open('pwned_eval', 'w')\")",
        f"eval(compile(\"open('{marker}/eval', 'w')\", 'x', 'exec'))",
        "open('pwned_open', 'w').write('x')",
        "__import__('os').system('touch pwned_system')",
        f"__import__('os').system('touch {marker}/system')",
        "__import__('os').remove('model.bin')",
        "import os; os.rename('model.bin', 'gone.bin')",
        "__import__('server').MAX_LINE",
        "server.run('model.bin')",
        "';__import__('os').mkdir('pwned_quote');'",
        "\"); __import__('os').mkdir('pwned_dq'); (\"",
        "${IFS}touch${IFS}pwned_shell",
        "$(touch pwned_subshell)",
        "`touch pwned_backtick`",
    ]


NAMES = [  # op names that would reach code if dispatch used getattr/globals()
    "__class__", "__init__", "__dict__", "__import__", "_op_info", "_op_bench", "_OPS", "run",
    "handle_line", "unframe", "write_reply", "gc", "gc.collect", "sys.exit", "machine.reset",
    "os.remove", "eval", "exec", "INFO", "info ", " info", "info\x00",
]  # fmt: skip

# lines only an eval-based parser would take (Python literals, not JSON; MicroPython's json
# does accept a trailing comma, which is leniency, not evaluation, so it is not listed)
PYTHON_ONLY = [
    "{'op': 'info'}",
    '{"op": "info", "id": True}',
    '{"op": "info", "id": None}',
    '{"op": "info", "id": 0x10}',
    '{"op": "info", "id": (1)}',
    '{"op": ("info")}',
    '{"op": "in" "fo"}',
    'dict(op="info")',
]


def _tree(folder: Path) -> dict[str, str]:
    """Relative path -> sha256 of every file and folder under `folder`."""
    out = {}
    for path in sorted(folder.rglob("*")):
        rel = str(path.relative_to(folder))
        out[rel] = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "dir"
    return out


def _requests(marker: str, rng: random.Random) -> list[tuple[str, bytes, str]]:
    """(what, line, expectation) with expectation "error", "echo-id" (an ok reply whose id is
    the payload string) or "ok" (the payload sits in a key the server ignores)."""
    out: list[tuple[str, bytes, str]] = []
    strings = payloads(marker)
    for s in strings:
        out += [
            ("op", frame({"op": s}), "error"),
            ("id", frame({"id": s, "op": "info"}), "echo-id"),
            ("key", frame({s: 1, "op": "info", "id": 7}), "ok"),
            ("value of an ignored key", frame({"op": "info", "id": 8, "note": s}), "ok"),
            ("features", frame({"op": "infer", "features": [s] * 4}), "error"),
            ("features string", frame({"op": "infer", "features": s}), "error"),
            ("path", frame({"op": "infer", "features": [5.1, 3.5, 1.4, 0.2], "path": s}), "error"),
            ("bench n", frame({"op": "bench", "n": s}), "error"),
            ("batch", frame({"op": "batch", "samples": [[1, 2, 3, 4], [s, 1, 2, 3]]}), "error"),
            ("nested", frame({"op": "infer", "features": {"__class__": s}}), "error"),
            ("raw line", s.encode() + b"\n", "error"),
            ("raw, unframed JSON", json.dumps({"op": s}).encode() + b"\n", "error"),
        ]
    for name in NAMES:
        out.append(("op name", frame({"op": name}), "error"))
    for line in PYTHON_ONLY:
        out.append(("python literal", line.encode() + b"\n", "error"))
    # control bytes a REPL would act on (paste mode, raw REPL, run) inside a request line
    for ctl in (b"\x01", b"\x02", b"\x04", b"\x05"):
        code = strings[0].encode()
        out.append(("REPL control bytes", ctl + code + ctl + b"\x04\n", "error"))
    # random mixes of the above
    pieces = strings + NAMES + ["info", "infer", "batch", "bench", "features", "samples", "op"]
    for _ in range(200):
        obj = {rng.choice(pieces): rng.choice(pieces + [[rng.choice(pieces)] * 4, 1, None])
               for _ in range(rng.randrange(1, 5))}  # fmt: skip
        obj["op"] = rng.choice(pieces)
        out.append(("random mix", frame(obj), "any"))
    return out


@pytest.mark.serial
def test_no_code_from_data_server_runs_nothing_it_receives(tmp_path, reference_model):
    if find_micropython() is None:
        pytest.skip("MicroPython unix port not installed ('make install')")
    marker = tmp_path / "host_markers"
    marker.mkdir()
    cases = _requests(str(marker), random.Random(6))
    with VirtualBoard(tmp_path / "flash") as vb:
        flash(vb.port, reference_model["blob"], progress=False)
        before = _tree(vb.fs_dir)
        with BoardLink(vb.port, timeout=5) as link:
            link.start_server()
            info0 = link.request("info")
            replies = []
            for what, line, expect in cases:
                link._write(line)
                reply = _next_reply(link)
                replies.append(reply)
                assert reply is not None, f"no reply to {what}: {line[:80]!r}"
                if expect == "error":
                    assert reply["ok"] is False and reply["error"], (what, line[:80], reply)
                elif expect == "echo-id":
                    sent = unframe(line)
                    assert sent and reply["ok"] and reply["id"] == sent["id"], (what, reply)
                elif expect == "ok":
                    assert reply["ok"] and reply["protocol"] == 1, (what, reply)
            info1 = link.request("info")
            infer = link.request("infer", features=[5.1, 3.5, 1.4, 0.2])
            link.stop_server()
        after = _tree(vb.fs_dir)
    assert after == before, f"the board's flash changed: {set(after) ^ set(before)}"
    assert list(marker.iterdir()) == []
    assert info1["ok"] and infer["ok"] and infer["class"] == "setosa"
    errors = [r for r in replies if not r["ok"]]
    assert len(errors) >= len([c for c in cases if c[2] == "error"])
    assert all("internal error" not in r["error"] for r in errors), [
        r for r in errors if "internal error" in r["error"]
    ][:3]
    if info0.get("free_heap") is not None:
        assert abs(info1["free_heap"] - info0["free_heap"]) <= 4096
    print(f"\n{len(cases)} lines with code in them, {len(errors)} error replies, flash unchanged")


def _next_reply(link: BoardLink, timeout: float = 5.0) -> dict | None:
    """The next framed reply line from the server (one request line gets one reply)."""
    deadline = time.monotonic() + timeout
    while True:
        line = link._read_line(deadline)
        if line is None:
            return None
        obj = unframe(line)
        if obj is not None:
            return obj


# -- CPython: handle_line under tripwires ------------------------------------------------------


class Tripped(BaseException):
    """Raised by a tripwire; a BaseException so no `except Exception` in the server eats it."""


@pytest.fixture(scope="module")
def server(reference_model):
    sys.path.insert(0, str(DEVICE_DIR))
    try:
        srv = importlib.import_module("server")
        # server.run imports Model when it loads a model (a training session never does)
        model = importlib.import_module("attention").Model(reference_model["blob"].read_bytes())
        srv._state["model"], srv._state["out"] = model, model.new_logits()
        yield srv, model
    finally:
        sys.path.remove(str(DEVICE_DIR))


TRIPWIRES = [
    (builtins, n) for n in ("eval", "exec", "compile", "__import__", "open", "input", "breakpoint")
]
TRIPWIRES += [
    (os, "system"),
    (os, "popen"),
    (os, "remove"),
    (os, "rename"),
    (os, "mkdir"),
    (subprocess, "Popen"),
    (pickle, "loads"),
    (pickle, "load"),
    (marshal, "loads"),
]


@contextmanager
def _tripwires(fired: list[str]):
    """Replace every way of running code or touching files by a wire that records and raises
    (set and restored by hand: monkeypatch itself imports while patching)."""

    def wire(name: str):
        def tripped(*args, **kwargs):
            fired.append(f"{name}{args[:1]!r}")
            raise Tripped(name)

        return tripped

    saved = [(mod, name, getattr(mod, name)) for mod, name in TRIPWIRES]
    wires = [(mod, name, wire(f"{mod.__name__}.{name}")) for mod, name, _ in saved]
    try:
        for mod, name, value in wires:
            setattr(mod, name, value)
        yield
    finally:
        for mod, name, value in saved:
            setattr(mod, name, value)


@st.composite
def request_lines(draw) -> str:
    strings = payloads("/tmp/tinyattn-no-such-dir")
    text = st.one_of(st.sampled_from(strings + NAMES), st.text(max_size=40))
    scalar = st.one_of(text, st.integers(), st.floats(allow_nan=False), st.none(), st.booleans())
    value = st.recursive(scalar, lambda inner: st.lists(inner, max_size=5), max_leaves=20)
    if draw(st.integers(0, 4)) == 0:  # a raw line, not JSON
        return draw(st.one_of(st.sampled_from(strings + PYTHON_ONLY), st.text(max_size=200)))
    obj = draw(st.dictionaries(text, value, max_size=4))
    # not the train_* ops: they read and write the board's training files by design (an
    # import and open() the wires would catch); tests/test_onboard.py gives them bad input.
    # Hypothesis draws them: it mines string constants from the code under test.
    obj["op"] = draw(st.one_of(st.sampled_from(["info", "infer", "batch", "bench"]), text)
                     .filter(lambda op: not op.startswith("train_")))  # fmt: skip
    if obj["op"] == "batch" and draw(st.booleans()):
        obj["samples"] = draw(st.lists(st.lists(scalar, min_size=4, max_size=4), max_size=3))
    line = json.dumps(obj)
    return frame(obj).decode().rstrip("\n") if draw(st.booleans()) else line


LINES = {"quick": 200, "fuzz": 1000}  # request lines: make test, and make test-fuzz (CI)
TRIPWIRE_SETTINGS = dict(deadline=None, derandomize=True, database=None,
                         suppress_health_check=[HealthCheck.too_slow,
                                                HealthCheck.function_scoped_fixture])  # fmt: skip


def _handle_line_under_tripwires(server, line: str) -> None:
    srv, model = server
    fired: list[str] = []
    with _tripwires(fired):
        reply, keep = srv.handle_line(model, line.strip())
    assert fired == []
    assert isinstance(reply, dict) and reply["ok"] in (True, False)
    assert keep is True or reply.get("bye")
    if not reply["ok"] and reply["error"].startswith("internal error"):
        # the one known cause (test_no_code_from_data_float_path_large_features): the float
        # kernel's softmax on a feature far outside the training range
        known = "OverflowError" in reply["error"] or "ZeroDivisionError" in reply["error"]
        assert known and _largest_number(line) >= 1e5, (line, reply)


@pytest.mark.host
@settings(max_examples=LINES["quick"], **TRIPWIRE_SETTINGS)
@given(line=request_lines())  # fmt: skip
def test_no_code_from_data_handle_line_under_tripwires(server, line):
    _handle_line_under_tripwires(server, line)


@pytest.mark.host
@pytest.mark.fuzz
@pytest.mark.slow
@settings(max_examples=LINES["fuzz"], **TRIPWIRE_SETTINGS)
@given(line=request_lines())  # fmt: skip
def test_no_code_from_data_handle_line_under_tripwires_fuzz_volume(server, line):
    _handle_line_under_tripwires(server, line)


def _largest_number(line: str) -> float:
    """The largest |number| in a JSON request line (0 if it is not JSON)."""
    try:
        obj = json.loads(line[: line.rindex(',"crc":')] + "}" if ',"crc":' in line else line)
    except ValueError:
        return 0.0

    def walk(v) -> float:
        if isinstance(v, bool):
            return 0.0
        if isinstance(v, int | float):
            return abs(float(v))
        if isinstance(v, list):
            return max((walk(x) for x in v), default=0.0)
        if isinstance(v, dict):
            return max((walk(x) for x in v.values()), default=0.0)
        return 0.0

    return walk(obj)


@pytest.mark.host
def test_no_code_from_data_float_path_large_features(server):
    srv, model = server
    failed = []
    for value in (1e6, -1e6, 1e8, -1e8, 1e12, -1e12):
        for j in range(model.n_features):
            features = [5.1, 3.5, 1.4, 0.2][: model.n_features]
            features[j] = value
            line = json.dumps({"id": 1, "op": "infer", "features": features, "path": "float"})
            reply, _ = srv.handle_line(model, line)
            if not reply["ok"]:
                failed.append((features, reply["error"]))
    assert failed == []


# -- the cheap extra: a scan of the code ------------------------------------------------------

SCANNED = [REPO / "host" / name for name in (
    "intmodel/blob.py", "board/link.py", "board/parity.py", "data/tabular.py")]  # fmt: skip
SCANNED += sorted(DEVICE_DIR.glob("*.py"))
IMPORT_HELPERS = {  # (file, function) that call __import__ with module names from a table
    ("attention.py", "_load"),
    ("attention.py", "_call"),
    ("attention.py", "_kernel_module"),
    ("attention.py", "__init__"),
    ("attention_source.py", "open_imu"),  # a micropython-lib IMU driver, checked against IMUS
    # attention_ops_<kind> of the conv and rocket ops: the kind is attention_blob's OPS table's
    # (the code's own; an opcode not in it is refused before)
    ("attention_ops.py", "_slots"),
    ("attention_ops.py", "_check_op"),
}


def _literal_module(call: ast.Call) -> bool:
    """`__import__("name")`: one string literal, a module chosen in the code, not by data
    (the lazily imported modules: server_b64, server_train, attention_build, ...)."""
    return (
        len(call.args) == 1
        and not call.keywords
        and isinstance(call.args[0], ast.Constant)
        and isinstance(call.args[0].value, str)
    )


def _calls(path: Path) -> list[tuple[str, ast.Call]]:
    """(innermost enclosing function or "<module>", call) for every call in the file."""
    out: list[tuple[str, ast.Call]] = []

    def visit(node: ast.AST, owner: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                visit(child, child.name)
                continue
            if isinstance(child, ast.Call):
                out.append((owner, child))
            visit(child, owner)

    visit(ast.parse(path.read_text(), filename=str(path)), "<module>")
    return out


@pytest.mark.host
def test_no_code_from_data_scan_finds_no_eval_exec_pickle():
    found = []
    for path in SCANNED:
        for owner, call in _calls(path):
            f = call.func
            name = (
                f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
            )
            base = (
                f.value.id
                if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name)
                else ""
            )
            where = f"{path.name}:{call.lineno} in {owner}"
            if name in ("eval", "exec", "compile") and not base:
                found.append(f"{where}: {name}()")
            if base in ("pickle", "marshal", "dill", "shelve"):
                found.append(f"{where}: {base}.{name}()")
            if name == "load" and base in ("np", "numpy"):
                kw = {k.arg: k.value for k in call.keywords}
                ok = (
                    isinstance(kw.get("allow_pickle"), ast.Constant)
                    and not kw["allow_pickle"].value
                )
                if not ok:
                    found.append(f"{where}: np.load without allow_pickle=False")
            if name == "__import__" and not _literal_module(call):
                if (path.name, owner) not in IMPORT_HELPERS:
                    found.append(f"{where}: __import__ of a computed name outside the known "
                                 "load-time helpers")  # fmt: skip
    assert found == []
