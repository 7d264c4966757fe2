"""Host (CPython): `make wheel-check` — the package as a pip user gets it, outside the clone.

1. `python -m build`: the sdist, then the wheel built from that sdist (so the sdist is whole);
2. `twine check`: their metadata as PyPI would check it (the README renders);
3. a fresh venv in a temporary folder outside the clone, and the README's pip line on the
   built wheel: `pip install "<wheel>[board]"` (the registry gives the dependencies);
4. what landed in site-packages: one top-level package, `tinyattn`, with the device runtime as
   package data (`tinyattn/device/attention.py`, `package.json`) and the virtual board
   (`tinyattn/tools/vboard.py`); no top-level `tools`, `device` or `host`, no developer scripts
   (`tinyattn/tools/dev`);
5. `tinyattn demo` in an empty folder, run from that venv with the clone out of reach (no
   PYTHONPATH, another working directory): train -> export -> virtual board -> flash -> parity,
   and it must print PASS.

Exit status 0 when every step held; otherwise the step that failed, its output's tail, and the
folder kept for a look (`--keep` keeps it in any case). Usage:

    .venv/bin/python -m tinyattn.tools.dev.wheel_check [--keep] [--outdir DIR]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CLONE = Path(__file__).resolve().parents[2]
RUNTIME = ("attention.py", "server.py", "package.json")  # a few of device/'s files, as a check


class CheckFailed(Exception):
    pass


def _run(step: str, argv: list[str], cwd: Path, env: dict[str, str] | None = None) -> str:
    """Run one step; its output, or CheckFailed with the command and the output's tail."""
    t0 = time.monotonic()
    print(f"== {step}: {' '.join(argv)}", flush=True)
    proc = subprocess.run(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT)  # fmt: skip
    if proc.returncode != 0:
        tail = "\n".join(proc.stdout.splitlines()[-30:])
        raise CheckFailed(f"{step} failed (exit {proc.returncode}):\n{tail}")
    print(f"   ok ({time.monotonic() - t0:.0f} s)", flush=True)
    return proc.stdout


def _clean_env() -> dict[str, str]:
    """The environment of a user's shell: no PYTHONPATH, no virtualenv of ours, no overrides
    that point into the clone (TINYATTN_MICROPYTHON, TINYATTN_MPY_CROSS)."""
    drop = ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME", "TINYATTN_MICROPYTHON",
            "TINYATTN_MPY_CROSS", "TINYATTN_PORT")  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k not in drop}
    bindir = str(CLONE / ".venv" / "bin")
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if p != bindir)
    return env


def site_packages(venv: Path) -> Path:
    found = sorted(venv.glob("lib/python*/site-packages"))
    if not found:
        raise CheckFailed(f"no site-packages under {venv}")
    return found[0]


def check_layout(site: Path) -> list[str]:
    """What is wrong with the installed files (an empty list: nothing)."""
    wrong = []
    for name in ("tools", "device", "host"):
        if (site / name).exists():
            wrong.append(f"a top-level '{name}' in site-packages ({site / name})")
    pkg = site / "tinyattn"
    for f in RUNTIME:
        if not (pkg / "device" / f).is_file():
            wrong.append(f"the device runtime's {f} is not in the wheel (tinyattn/device/{f})")
    if not (pkg / "tools" / "vboard.py").is_file():
        wrong.append("the virtual board is not in the wheel (tinyattn/tools/vboard.py)")
    if (pkg / "tools" / "dev").exists():
        wrong.append("the developer scripts (tools/dev) are in the wheel")
    return wrong


def check(work: Path) -> None:
    dist = work / "dist"
    py = sys.executable
    _run("build", [py, "-m", "build", "--outdir", str(dist), str(CLONE)], cwd=work)
    wheels, sdists = sorted(dist.glob("*.whl")), sorted(dist.glob("*.tar.gz"))
    if len(wheels) != 1 or len(sdists) != 1:
        raise CheckFailed(f"build made {[p.name for p in dist.iterdir()]}: one wheel and one "
                          "sdist expected")  # fmt: skip
    _run("twine check", [py, "-m", "twine", "check", "--strict", str(wheels[0]), str(sdists[0])],
         cwd=work)  # fmt: skip
    venv = work / "venv"
    base = getattr(sys, "_base_executable", None) or shutil.which("python3") or py
    env = _clean_env()
    _run("fresh venv", [base, "-m", "venv", str(venv)], cwd=work, env=env)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "--disable-pip-version-check"]
    _run("pip install (the README's line, on the built wheel)",
         [*pip, "install", "--quiet", f"{wheels[0]}[board]"], cwd=work, env=env)  # fmt: skip
    wrong = check_layout(site_packages(venv))
    if wrong:
        raise CheckFailed("the installed package:\n  " + "\n  ".join(wrong))
    print("   layout ok: one top-level package, tinyattn (runtime and virtual board inside)")
    empty = work / "empty"
    empty.mkdir()
    out = _run("tinyattn demo in an empty folder", [str(venv / "bin" / "tinyattn"), "demo"],
               cwd=empty, env=env)  # fmt: skip
    verdict = [line for line in out.splitlines() if "PASS" in line or "FAIL" in line]
    if not any("PASS" in line for line in verdict):
        tail = "\n".join(out.splitlines()[-30:])
        raise CheckFailed(f"tinyattn demo did not print PASS:\n{tail}")
    print("   " + verdict[-1].strip())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m tinyattn.tools.dev.wheel_check",
        description="Build the sdist and wheel, twine-check them, install the wheel with the "
        "board extra in a fresh venv outside the clone and run 'tinyattn demo' there.",
    )
    p.add_argument("--keep", action="store_true", help="keep the temporary folder")
    p.add_argument("--outdir", type=Path,
                   help="copy the built sdist and wheel here (e.g. dist/)")  # fmt: skip
    args = p.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="tinyattn-wheel-"))
    if CLONE in work.parents:
        print(f"wheel_check: {work} is inside the clone; set TMPDIR elsewhere", file=sys.stderr)
        return 2
    ok = False
    try:
        check(work)
        ok = True
        if args.outdir is not None:
            args.outdir.mkdir(parents=True, exist_ok=True)
            for f in (work / "dist").iterdir():
                shutil.copy2(f, args.outdir / f.name)
        print("wheel check PASS: built, checked, installed outside the clone, demo PASS")
        return 0
    except CheckFailed as exc:
        print(f"wheel check FAIL: {exc}", file=sys.stderr)
        return 1
    finally:
        if ok and not args.keep:
            shutil.rmtree(work, ignore_errors=True)
        else:
            print(f"(kept {work})", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
