# Host (CPython): no import circles in device/ or host/ (base modules never import extensions).
"""Walks the imports of every module of device/ (module = file name) and of host/ (the
`tinyattn` package) from their source, and fails on any circle: a group of modules each of
which reaches the others through imports. An import is
- an `import` or `from … import` statement anywhere (module level or inside a function);
  `from package import module` is an import of that module (the package's `__init__` runs
  before any of its modules, whoever imports them), `from package import name` of the
  package;
- a load by name: a string literal that names a module of the same tree, given to a call
  (`__import__("attention_build_seq")`, `_load("attention_ops_seq")`,
  `importlib.import_module("tinyattn.learn.train")`) or held in a module-level table
  (`_READER = ("attention_blob", …)`, `COMMANDS = {"train": ("tinyattn.learn.train", …)}`);
  a string naming a package is a word, not a load (`"tinyattn"` is also the command's name,
  in every message that says what to run; nothing imports a package by a string).
A module kind that extends a base registers itself in a table of the base when it is loaded,
so the base never names it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.host

ROOT = Path(__file__).resolve().parent.parent


def _device_modules() -> dict[str, Path]:
    return {p.stem: p for p in sorted((ROOT / "device").glob("*.py"))}


def _host_modules() -> dict[str, Path]:
    out = {}
    for p in sorted((ROOT / "host").rglob("*.py")):
        parts = ("tinyattn",) + p.relative_to(ROOT / "host").with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = p
    return out


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The known module `name` is, or is in (`tinyattn.learn.model.ModelFile` -> the module).
    `tinyattn.tools` (folder tools/: the virtual board, the benchmark drivers) is installed
    inside the package but is not of host/'s tree: an import of it is no import of `tinyattn`."""
    if name == "tinyattn.tools" or name.startswith("tinyattn.tools."):
        return None
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


def _edges(path: Path, modules: dict[str, Path]) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    out: set[str] = set()

    def add(name: str | None) -> None:
        m = _resolve(name or "", modules)
        if m:
            out.add(m)

    def literals(node: ast.AST) -> None:
        for n in ast.walk(node):
            if isinstance(n, ast.Constant) and isinstance(n.value, str):
                named = modules.get(n.value)  # a package by name: its word ("tinyattn" the
                add(n.value) if named and named.name != "__init__.py" else None  # command)

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                add(a.name)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            subs = [f"{node.module}.{a.name}" for a in node.names]  # from tinyattn import remedy
            for sub in subs:
                add(sub)
            if not all(sub in modules for sub in subs):  # a name the package itself defines
                add(node.module)
        elif isinstance(node, ast.Call):
            for arg in node.args:
                literals(arg)
    for node in tree.body:  # module-level tables of modules loaded by name
        if isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None:
            literals(node.value)
    return out


def _circles(modules: dict[str, Path]) -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan)."""
    graph = {m: _edges(p, modules) - {m} for m, p in modules.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def _pairs(modules: dict[str, Path], group: list[str]) -> list[str]:
    graph = {m: _edges(modules[m], modules) for m in group}
    return [f"{a} <-> {b}" for a in group for b in group
            if a < b and b in graph[a] and a in graph[b]]  # fmt: skip


@pytest.mark.parametrize("tree", ["device", "host"])
def test_import_graph_has_no_circles(tree):
    modules = _device_modules() if tree == "device" else _host_modules()
    circles = _circles(modules)
    detail = "; ".join(f"{g} (pairs: {_pairs(modules, g)})" for g in circles)
    assert not circles, f"import circles in {tree}/: {detail}"


def test_import_graph_finds_a_circle_and_a_load_by_name(tmp_path):
    """The walker sees statements inside functions and loads by name."""
    a, b, c = tmp_path / "a.py", tmp_path / "b.py", tmp_path / "c.py"
    a.write_text("def f():\n    import b\n")
    b.write_text("def g():\n    return __import__('a')\n")
    c.write_text("TABLE = {'x': 'a'}\n")
    modules = {"a": a, "b": b, "c": c}
    assert _circles(modules) == [["a", "b"]]
    assert _edges(c, modules) == {"a"}


if __name__ == "__main__":
    for name, mods in (("device", _device_modules()), ("host", _host_modules())):
        for g in _circles(mods):
            print(name, g, _pairs(mods, g))


def test_import_graph_from_package_import_module_is_the_module(tmp_path):
    """`from pkg import sub` depends on pkg.sub, `from pkg import NAME` on the package: a
    package that exports a module's class by name on first use (tinyattn.TinyAttnClassifier)
    is no circle with the modules that import its siblings, but one that a module imports a
    name from is."""
    init, sub, user = tmp_path / "init.py", tmp_path / "sub.py", tmp_path / "user.py"
    init.write_text("def __getattr__(name):\n    from pkg.user import Thing\n    return Thing\n")
    sub.write_text("X = 1\n")
    user.write_text("from pkg import sub\nclass Thing: ...\n")
    modules = {"pkg": init, "pkg.sub": sub, "pkg.user": user}
    assert _edges(user, modules) == {"pkg.sub"} and _circles(modules) == []
    user.write_text("from pkg import sub, Thing2\nclass Thing: ...\n")
    assert _edges(user, modules) == {"pkg.sub", "pkg"}
    assert _circles(modules) == [["pkg", "pkg.user"]]
