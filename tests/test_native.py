# Host (CPython): the native kernel modules are generated from the pure ones (issue 21).
"""tinyattn.board.native writes attention_native.py from device/attention_kernels.py and
attention_train_native.py from attention_train.py's kernels: the pure source plus
`import micropython` and `@micropython.native` on each kernel, nothing else, the same bytes
every time. device/ keeps no copy; flash and the tests get them generated (their results on
MicroPython are checked by tests/test_device_*mp*.py and test_trained_golden.py).
"""

from __future__ import annotations

import ast
import json
import re

import pytest
from device_support import DEVICE_DIR

from tinyattn.board.native import DECORATOR, NATIVE, native_source, with_native, write_native

pytestmark = pytest.mark.host


def _code(text: str) -> str:
    """The statements after the module docstring, decorators and `import micropython` gone."""
    tree = ast.parse(text)
    lines = text.splitlines(keepends=True)[tree.body[1].lineno - 1 :]
    text = "".join(lines).replace(DECORATOR, "").replace("\nimport micropython\n", "")
    return re.sub(r"\n{3,}", "\n\n", text).strip()


def _pure(name: str) -> str:
    return (DEVICE_DIR / f"{NATIVE[name][0]}.py").read_text()


def test_native_kernels_are_the_pure_kernels_decorated(tmp_path):
    (path,) = write_native(DEVICE_DIR, tmp_path, ["attention_native"])
    native = path.read_text()
    assert _code(native) == _code(_pure("attention_native"))
    funcs = [n for n in ast.parse(native).body if isinstance(n, ast.FunctionDef)]
    assert len(funcs) == 17  # 10 int8 (softmax_q14 a helper; conv also the float conv), 7 float
    assert all(ast.unparse(f.decorator_list[0]) == "micropython.native" for f in funcs)
    assert "\nimport math\n\nimport micropython\n" in native  # the emitter's module, once


def test_native_train_kernels_are_the_named_pure_kernels_decorated(tmp_path):
    (path,) = write_native(DEVICE_DIR, tmp_path, ["attention_train_native"])
    native = path.read_text()
    pure = _pure("attention_train_native")
    tree = ast.parse(pure)
    names = next(ast.literal_eval(n.value) for n in tree.body if isinstance(n, ast.Assign)
                 and getattr(n.targets[0], "id", None) == "_NAMES")  # fmt: skip
    funcs = [n for n in ast.parse(native).body if isinstance(n, ast.FunctionDef)]
    assert [f.name for f in funcs] == list(names) and len(names) == 8
    lines = pure.splitlines(keepends=True)
    for f in funcs:
        src = next(n for n in tree.body if getattr(n, "name", None) == f.name)
        assert [ast.unparse(d) for d in f.decorator_list] == ["micropython.native"]
        body = "".join(native.splitlines(keepends=True)[f.lineno - 1 : f.end_lineno])
        assert body == "".join(lines[src.lineno - 1 : src.end_lineno])
    imports = [ast.unparse(n) for n in ast.parse(native).body if isinstance(n, ast.Import)]
    assert imports == ["import math", "import micropython"]


def test_native_generation_is_deterministic_and_idempotent(tmp_path):
    a = write_native(DEVICE_DIR, tmp_path / "a")
    b = write_native(DEVICE_DIR, tmp_path / "b")
    assert [p.read_bytes() for p in a] == [p.read_bytes() for p in b]
    mtimes = [p.stat().st_mtime_ns for p in a]
    assert [p.stat().st_mtime_ns for p in write_native(DEVICE_DIR, tmp_path / "a")] == mtimes
    assert [p.name for p in a] == ["attention_native.py", "attention_train_native.py"]


def test_native_generation_from_threads_of_one_process(tmp_path):
    """Boards flashed side by side (a fleet) generate into one directory from threads of one
    process: every thread gets the files, none trips over another's temporary file (CI failed
    on a temp name made of the process id alone)."""
    from concurrent.futures import ThreadPoolExecutor

    for round_ in range(5):
        out = tmp_path / str(round_)
        with ThreadPoolExecutor(8) as pool:
            runs = list(pool.map(lambda _, out=out: write_native(DEVICE_DIR, out), range(8)))
        assert all(run == runs[0] for run in runs)
        assert sorted(p.name for p in out.iterdir()) == [p.name for p in runs[0]]


def test_native_generation_is_done_once_not_per_thread(tmp_path, monkeypatch):
    """CPython 3.11's `ast` is not thread-safe ('AST constructor recursion depth mismatch'
    under `tinyattn flash --boards 3`): threads asking for the native modules at once get
    them from one generation per module, never two parses side by side."""
    import threading
    import time

    from tinyattn.board import native

    monkeypatch.setattr(native, "_GENERATED", {})
    calls, inside, overlap = [], [0], []
    real = native.native_source
    lock = threading.Lock()

    def counted(*args, **kwargs):
        with lock:
            inside[0] += 1
            overlap.append(inside[0])
            calls.append(args[1])
        time.sleep(0.05)  # wide open for another thread
        try:
            return real(*args, **kwargs)
        finally:
            with lock:
                inside[0] -= 1

    monkeypatch.setattr(native, "native_source", counted)
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(6) as pool:
        runs = list(pool.map(lambda i: write_native(DEVICE_DIR, tmp_path / str(i)), range(6)))
    assert sorted(calls) == sorted(native.NATIVE) and max(overlap) == 1, (calls, overlap)
    assert all([p.read_text() for p in run] == [p.read_text() for p in runs[0]] for run in runs)


def test_native_source_refuses_what_it_cannot_decorate():
    with pytest.raises(ValueError, match="decorated already"):
        native_source("import math\n\n@f\ndef k():\n    pass\n", "n", "p")
    with pytest.raises(ValueError, match="no import"):
        native_source("def k():\n    pass\n", "n", "p")
    with pytest.raises(ValueError, match="not functions"):
        native_source("import math\n_NAMES = ('k', 'x')\n\ndef k():\n    pass\n", "n", "p",
                      "_NAMES")  # fmt: skip


def test_native_modules_are_generated_never_kept_in_device(tmp_path):
    """device/ has no native copy, package.json (mip's manifest) names only files device/
    holds, and flash's file list has each native module right after its pure source, from
    the build folder."""
    assert not [n for n in NATIVE if (DEVICE_DIR / f"{n}.py").exists()]
    manifest = json.loads((DEVICE_DIR / "package.json").read_text())
    for _dest, src in manifest["urls"] + manifest["train_urls"]:
        assert (DEVICE_DIR / src).is_file(), src
    sources = [DEVICE_DIR / "attention_kernels.py", DEVICE_DIR / "attention_train.py"]
    out = with_native(sources, tmp_path)
    names = ["attention_kernels", "attention_native", "attention_train", "attention_train_native"]
    assert [p.stem for p in out] == names
    assert out[1].parent == tmp_path == out[3].parent
