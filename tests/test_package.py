# Host (CPython): the one installed package — what the wheel maps, and what its code may import.
"""Issue 41, "A real package": one wheel, `tinyattn`, from the repository's folders (host/ ->
tinyattn, tools/ -> tinyattn.tools, device/ -> tinyattn.device as package data), with the
developer scripts (tools/dev/) left out. `make wheel-check` (tools/dev/wheel_check.py, run by CI)
builds that wheel and runs the demo from it outside the clone; these tests keep the mapping and
the imports that the wheel relies on, at every `make test`.
"""

from __future__ import annotations

import ast
import json
import re
import sys
from pathlib import Path

import pytest

from tinyattn import paths, remedy
from tinyattn.tools.dev.wheel_check import check_layout

ROOT = Path(__file__).resolve().parents[1]

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - 3.10
    tomllib = pytest.importorskip("tomli")


def _setuptools() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]


def _imports(path: Path) -> list[str]:
    names = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.append(node.module)
    return names


def test_pyproject_maps_the_folders_into_one_package():
    st = _setuptools()
    assert st["package-dir"] == {"tinyattn": "host", "tinyattn.tools": "tools",
                                 "tinyattn.device": "device"}  # fmt: skip
    assert all(p == "tinyattn" or p.startswith("tinyattn.") for p in st["packages"])
    assert not any(p.startswith("tinyattn.tools.dev") for p in st["packages"])
    # every host/ package with an __init__ is listed (a forgotten one is missing from the wheel)
    subs = [d.relative_to(ROOT / "host").parts for d in (ROOT / "host").rglob("*")
            if (d / "__init__.py").is_file()]  # fmt: skip
    host = {"tinyattn", *("tinyattn." + ".".join(parts) for parts in subs)}
    assert host <= set(st["packages"]), host - set(st["packages"])


def test_the_wheel_carries_every_file_the_board_is_flashed_with():
    """package.json lists what flash copies; the package data must match each of them."""
    globs = _setuptools()["package-data"]["tinyattn.device"]
    listed = [src for src, _ in json.loads((ROOT / "device" / "package.json").read_text())["urls"]]
    for name in [*listed, "package.json"]:
        assert any(Path(name).match(g) for g in globs), f"device/{name} is not package data"
        assert (ROOT / "device" / name).is_file(), name


def test_no_code_of_the_wheel_imports_a_top_level_tools_or_the_developer_scripts():
    """A top-level `tools` is not installed, and tools/dev/ is not in the wheel: code under
    host/ and tools/ (but tools/dev/) that imported either would fail for a pip user."""
    bad = []
    for path in [*(ROOT / "host").rglob("*.py"), *(ROOT / "tools").rglob("*.py")]:
        if "dev" in path.relative_to(ROOT).parts[1:2]:
            continue
        for name in _imports(path):
            if name == "tools" or name.startswith(("tools.", "tinyattn.tools.dev")):
                bad.append(f"{path.relative_to(ROOT)}: {name}")
    assert not bad, bad


def test_tests_import_tools_through_the_package():
    bad = [f"{p.name}: {n}" for p in (ROOT / "tests").glob("*.py") for n in _imports(p)
           if n == "tools" or n.startswith("tools.")]  # fmt: skip
    assert not bad, bad


def test_in_a_clone_the_runtime_is_device_and_hints_name_make():
    assert paths.clone_dir() == ROOT
    assert paths.device_dir() == ROOT / "device"
    assert remedy.install("board").startswith("make install")
    assert '".[board]"' in remedy.install("board")


def test_outside_a_clone_hints_name_pip(monkeypatch):
    monkeypatch.setattr(paths, "clone_dir", lambda: None)
    assert remedy.install("board") == 'pip install "tinyattn[board]"'
    assert remedy.install("cluster", "install-cluster") == 'pip install "tinyattn[cluster]"'


def test_wheel_check_sees_a_wrong_layout(tmp_path):
    site = tmp_path / "site-packages"
    (site / "tinyattn" / "device").mkdir(parents=True)
    (site / "tinyattn" / "tools" / "dev").mkdir(parents=True)
    (site / "tools").mkdir()
    for f in ("attention.py", "package.json"):
        (site / "tinyattn" / "device" / f).write_text("")
    (site / "tinyattn" / "tools" / "vboard.py").write_text("")
    wrong = check_layout(site)
    assert any("top-level 'tools'" in w for w in wrong), wrong
    assert any("server.py" in w for w in wrong), wrong
    assert any("tools/dev" in w for w in wrong), wrong
    (site / "tools").rmdir()
    (site / "tinyattn" / "tools" / "dev").rmdir()
    (site / "tinyattn" / "device" / "server.py").write_text("")
    assert check_layout(site) == []


def test_the_readme_gives_the_pip_line_beside_the_two_make_commands():
    text = (ROOT / "README.md").read_text()
    start = text.split("\n## ", 2)[1]  # the first section: "Start here"
    assert re.search(r"^make demo\b", start, re.M) and re.search(r"^make test\b", start, re.M)
    assert 'pip install "tinyattn[board]"' in start and "tinyattn demo" in start


def test_python_m_tinyattn_is_the_command_line():
    """`python -m tinyattn` runs the `tinyattn` command (its --help lists the subcommands; an
    unknown one is refused as the script refuses it)."""
    import subprocess

    run = [sys.executable, "-m", "tinyattn"]
    ok = subprocess.run([*run, "--help"], capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0 and "train" in ok.stdout and "parity" in ok.stdout, ok.stderr
    bad = subprocess.run([*run, "no-such-command"], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "no-such-command" in bad.stderr
