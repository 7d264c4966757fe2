"""Host (CPython): the `@micropython.native` kernel modules, generated from the pure ones.

The pure kernels on the device are the only hand-written copy (issue 21: one source per
kernel). Their native variants are the same functions compiled by MicroPython's native emitter,
so they are written here from the pure source whenever they are needed — by `tinyattn flash`
into its staging folder before mpy-cross, by the tests and the device benchmarks — and never
kept in device/. NATIVE lists them: module -> (pure module, kernels), kernels None for every
top-level function of the pure module (attention_kernels.py, with its INT8 / FLOAT tables), or
the name of the pure module's tuple of kernel names (attention_train.py's `_NAMES`: only those
functions and the module's plain imports are copied). The text is the pure source plus
`import micropython` and `@micropython.native` on each kernel: deterministic, same bytes for
the same source. Viper kernels (attention_viper.py) are different code, hand-written.

A board installed with `mpremote mip install device/package.json` has no native modules
(viper, else pure, as `kernels="auto"` picks); `python -m tinyattn.board.native DIR` writes
them into DIR for copying by hand.
"""

from __future__ import annotations

import ast
import sys
import threading
from pathlib import Path

from tinyattn.atomic import write_atomic

NATIVE = {
    "attention_native": ("attention_kernels", None),
    "attention_train_native": ("attention_train", "_NAMES"),
}
DECORATOR = "@micropython.native\n"
# The text of each native module, generated once per process and pure source: CPython 3.11's
# `ast` is not safe from several threads at once ("AST constructor recursion depth mismatch"),
# and boards flashed side by side ask from threads; the lock makes one thread generate.
_GENERATED: dict[tuple[str, str], str] = {}
_GENERATE_LOCK = threading.Lock()


def _header(name: str, pure: str) -> str:
    return (
        f"# Device (MicroPython only): generated from {pure}.py by tinyattn.board.native.\n"
        f'"""The kernels of {pure}.py under @micropython.native (edit {pure}.py).\n'
        "Same results, less interpreter overhead; on CPython, or a port without the native\n"
        'emitter, the import fails and the pure kernels stay."""\n'
    )


def _names(tree: ast.Module, table: str) -> list[str]:
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == table for t in node.targets
        ):
            return [ast.literal_eval(e) for e in node.value.elts]  # type: ignore[attr-defined]
    raise ValueError(f"no module-level tuple {table} of kernel names")


def native_source(pure_text: str, name: str, pure: str, kernels: str | None = None) -> str:
    """The source of native module `name` from `pure_text`, the source of module `pure`."""
    tree = ast.parse(pure_text)
    lines = pure_text.splitlines(keepends=True)
    body = tree.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]  # the module docstring: replaced by the header
    funcs = [n for n in body if isinstance(n, ast.FunctionDef)]
    if any(f.decorator_list for f in funcs):
        raise ValueError(f"{pure}.py: a kernel is decorated already")
    imports = [n for n in body if isinstance(n, ast.Import)]
    if kernels is not None:  # the plain imports and the named functions only
        names = _names(tree, kernels)
        chosen = {f.name: f for f in funcs}
        missing = [k for k in names if k not in chosen]
        if missing:
            raise ValueError(f"{pure}.py: {kernels} names {missing}, not functions")
        parts = ["".join(lines[n.lineno - 1 : n.end_lineno]) for n in imports]
        parts.append("\nimport micropython\n")
        for k in names:
            f = chosen[k]
            parts.append("\n\n" + DECORATOR + "".join(lines[f.lineno - 1 : f.end_lineno]))
        return _header(name, pure) + "\n" + "".join(parts)
    if not imports:
        raise ValueError(f"{pure}.py: no import statement to put `import micropython` after")
    first = body[0].lineno - 1  # the comments above the first statement stay out too
    at_import = imports[-1].end_lineno
    starts = {f.lineno - 1 for f in funcs}
    out = []
    for i in range(first, len(lines)):
        if i in starts:
            out.append(DECORATOR)
        out.append(lines[i])
        if i + 1 == at_import:
            out.append("\nimport micropython\n")
    return _header(name, pure) + "\n" + "".join(out)


def native_text(device: Path, name: str) -> str:
    """The native module `name` for the pure source in `device`: generated once (one thread
    at a time, `_GENERATE_LOCK`), then the same text for every caller."""
    pure, kernels = NATIVE[name]
    pure_text = (device / f"{pure}.py").read_text()
    with _GENERATE_LOCK:
        key = (name, pure_text)
        if key not in _GENERATED:
            _GENERATED[key] = native_source(pure_text, name, pure, kernels)
        return _GENERATED[key]


def write_native(device: Path, out_dir: Path, names: list[str] | None = None) -> list[Path]:
    """Generate the native modules `names` (default: all of NATIVE) from the pure sources in
    `device` into `out_dir`; returns their paths. A file already holding the same text is left
    alone (boards flashed side by side, test workers)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for name in NATIVE if names is None else names:
        text = native_text(device, name)
        dst = out_dir / f"{name}.py"
        if not dst.is_file() or dst.read_text() != text:
            write_atomic(dst, text)  # a unique temp name: threads of one process write too
        paths.append(dst)
    return paths


def with_native(sources: list[Path], out_dir: Path) -> list[Path]:
    """`sources` (device .py files) with the native module of each pure one among them,
    generated into out_dir, right after its pure source."""
    out = []
    for src in sources:
        out.append(src)
        names = [name for name, (pure, _) in NATIVE.items() if pure == src.stem]
        out += write_native(src.parent, out_dir, names) if names else []
    return out


def runtime_tree(device: Path, out_dir: Path) -> Path:
    """out_dir holding device/*.py (symbolic links) and the generated native modules: the
    runtime as a board gets it, for running the .py sources under MicroPython (tests,
    benchmarks). Links to modules device/ no longer has are removed."""
    out_dir.mkdir(parents=True, exist_ok=True)
    wanted = {src.name: src.resolve() for src in device.glob("*.py")}
    for path in out_dir.glob("*.py"):
        if path.is_symlink() and path.name not in wanted:
            path.unlink(missing_ok=True)
    for name, src in wanted.items():
        link = out_dir / name
        if not link.is_symlink():
            try:
                link.symlink_to(src)
            except FileExistsError:  # made meanwhile (test workers side by side)
                pass
    write_native(device, out_dir)
    return out_dir


def main(argv: list[str]) -> int:
    from tinyattn.paths import device_dir

    if len(argv) != 1:
        print("usage: python -m tinyattn.board.native OUT_DIR", file=sys.stderr)
        return 2
    for path in write_native(device_dir(), Path(argv[0])):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
