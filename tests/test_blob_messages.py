# Host (CPython): the readers' problem messages are the one list of docs/blob-format.md.
"""docs/blob-format.md "Messages" lists the problem part of every reader message, `<…>`
standing for a value. This test reads the message templates out of both readers' sources
(`fail(...)`/`mismatch(...)` calls: host f-strings, device `"..." % args`, module constants
resolved to their values) and checks both ways: every documented message is one each reader
can print, and every message a reader can print is documented. A reworded message in one
reader, or a doc row nobody prints, fails here.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest

from tinyattn.intmodel import blob as host_blob
from tinyattn.intmodel import blob_rocket

pytestmark = pytest.mark.host

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "blob-format.md"
DEVICE = ROOT / "device"
DEVICE_READERS = ("attention.py", "attention_blob.py", "attention_tensors.py", "attention_ops.py",
                  "attention_ops_seq.py", "attention_ops_conv.py",
                  "attention_ops_rocket.py")  # fmt: skip
HOST_READERS = (host_blob, blob_rocket)  # the host reader and its rocket op's rules
HOLE = "\x00"  # a value in a source template


def _doc_rows() -> list[str]:
    text = DOC.read_text()
    part = text[text.index("### Messages") : text.index("What a reader cannot see")]
    # | check or op | `problem` (note) |: the problem may hold '|' (max|acc|), not '`'
    return re.findall(r"^\|[^|`]*\| `([^`]*)`", part, re.M)


def _doc_regex(row: str) -> re.Pattern:
    parts = re.split(r"<[^>]*>", row)
    return re.compile(".*".join(re.escape(p) for p in parts), re.S)


def _calls(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.args:
            f = node.func
            name = getattr(f, "id", None) or getattr(f, "attr", "")
            if name in ("fail", "mismatch"):
                yield node


def _host_templates() -> set[str]:
    """Host reader: f-strings, module constants (MAX_OPS, MAGIC, …) resolved."""

    def render(node) -> str | None:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        if isinstance(node, ast.JoinedStr):
            out = []
            for v in node.values:
                if isinstance(v, ast.Constant):
                    out.append(v.value)
                elif isinstance(v.value, ast.Name) and any(
                    hasattr(m, v.value.id) for m in HOST_READERS
                ):
                    value = next(getattr(m, v.value.id) for m in HOST_READERS
                                 if hasattr(m, v.value.id))  # fmt: skip
                    out.append(repr(value) if v.conversion == ord("r") else str(value))
                else:
                    out.append(HOLE)
            return "".join(out)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):  # "…" + (optional)
            left = render(node.left)
            return None if left is None else left + HOLE
        return None

    out = set()
    for module in HOST_READERS:
        tree = ast.parse(Path(module.__file__).read_text())
        out |= {render(c.args[0]) for c in _calls(tree)}
    out.discard(None)
    out.discard(f"op {HOLE}: no shape rule for {HOLE}")  # unreachable: table and rules agree
    return out


def _device_templates() -> set[str]:
    """Device reader: `"..." % args`, each conversion a value, but module constants (MAGIC,
    _MIN_FILE = const(36), …) resolved."""
    trees = [ast.parse((DEVICE / name).read_text()) for name in DEVICE_READERS]
    consts = {}
    for tree in trees:
        for node in tree.body:
            if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
                value = node.value
                if isinstance(value, ast.Call) and getattr(value.func, "id", "") == "const":
                    value = value.args[0]
                if isinstance(value, ast.Constant):
                    consts[node.targets[0].id] = value.value
    out = set()
    for tree in trees:
        for c in _calls(tree):
            node, args = c.args[0], []
            if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):
                args = node.right.elts if isinstance(node.right, ast.Tuple) else [node.right]
                node = node.left
            if not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
                continue
            out.add(_render(node.value, args, consts))
    return out


def _render(fmt: str, args: list[ast.expr], consts: dict) -> str:
    """A `%` format with each conversion a HOLE, but a module constant's value."""
    it = iter(args)

    def value(m: re.Match) -> str:
        arg = next(it, None)
        if isinstance(arg, ast.Name) and arg.id in consts:
            return m.group(0) % consts[arg.id]
        return HOLE

    return re.sub(r"%[-0-9.]*[dsrxf]", value, fmt)


def _covered(templates: set[str], rows: list[str], who: str) -> None:
    regexes = [_doc_regex(r) for r in rows]
    undocumented = [t.replace(HOLE, "<…>") for t in sorted(templates)
                    if not any(rx.fullmatch(t) for rx in regexes)]  # fmt: skip
    assert not undocumented, f"{who} prints messages docs/blob-format.md does not list"
    unprinted = [r for r, rx in zip(rows, regexes, strict=True)
                 if not any(rx.fullmatch(t) for t in templates)]  # fmt: skip
    assert not unprinted, f"docs/blob-format.md lists messages {who} never prints: {unprinted}"


# MicroPython's UTF-8 decoder gives no reason: only the device reader has the bare message
DEVICE_ONLY = {"class names are not UTF-8"}


def test_blob_messages_doc_list_is_what_the_host_reader_prints():
    rows = [r for r in _doc_rows() if r not in DEVICE_ONLY]
    _covered(_host_templates(), rows, "the host reader")


def test_blob_messages_doc_list_is_what_the_device_reader_prints():
    _covered(_device_templates(), _doc_rows(), "the device reader")


def test_blob_messages_doc_list_is_not_empty_and_names_the_checks():
    rows = _doc_rows()
    assert len(rows) > 60
    for words in ("refers to tensor", "tensors, its parameters need", "activation range",
                  "m[<i>] = <v>, must be rint(2**14 / <i+1>)"):  # fmt: skip
        assert any(words in r for r in rows), words


if __name__ == "__main__":  # print the templates, to write the doc rows
    for t in sorted(_host_templates()):
        print("host  ", t.replace(HOLE, "<…>"))
    for t in sorted(_device_templates()):
        print("device", t.replace(HOLE, "<…>"))
    sys.exit(0)


def _doc_sections() -> set[str]:
    """The `<what>` of "at offset P needs N bytes" as check A's paragraph lists them."""
    text = DOC.read_text()
    part = text[text.index("names the section: `<what> at offset") : text.index("A. Header")]
    listed = part[part.index("`<what>` one of") : part.index("and `padding after <section>`")]
    names = {re.sub(r"\s+", " ", n) for n in re.findall(r"`([^`]*)`", listed)} - {"<what>"}
    after = part[part.index("padding after `class names`") :]
    names |= {"padding after " + re.sub(r"\s+", " ", n) for n in re.findall(r"`([^`]*)`", after)}
    return names


def _source_sections() -> tuple[set[str], set[str]]:
    """(host, device): the section names the readers pass to take/unpack/padding, their
    indices written as the docs do (`<k>` for ops, `<t>` for tensors)."""

    def norm(text: str) -> str:
        text = re.sub(r"op (\{k\}|%d)", "op <k>", text)
        return re.sub(r"tensor (record )?(\{t\}|%d)", lambda m: f"tensor {m[1] or ''}<t>", text)

    host_src = (ROOT / "host" / "intmodel" / "blob.py").read_text()
    taken = r"r\.(?:take|unpack)\([^\n]*?, f?\"([^\"]+)\"\)"
    host = {norm(m) for m in re.findall(taken, host_src)}
    host |= {"padding after " + norm(m) for m in re.findall(r"r\.padding\(f?\"([^\"]+)\"\)",
                                                              host_src)}  # fmt: skip
    host |= {"log floor", "clip low", "clip high"}  # VIEW_SECTIONS, taken in a loop
    dev_src = "".join((DEVICE / f).read_text()
                      for f in ("attention_blob.py", "attention_tensors.py"))  # fmt: skip
    dev = {norm(m) for m in re.findall(r"(?:take|unpack|skip)\([^\n]*?, \"([^\"]+)\"", dev_src)
           if not m.endswith(" ")}  # not padding()'s own "padding after " + what
    dev |= {"padding after " + norm(m) for m in re.findall(r"padding\(\"([^\"]+)\"", dev_src)}
    dev |= {"log floor", "clip low", "clip high"}  # _VIEW_PARTS, taken in a loop
    return host, dev


def test_blob_messages_sections_of_needs_n_bytes_are_the_documented_ones():
    """The section names of `<what> at offset P needs N bytes` were not listed in the docs."""
    doc = _doc_sections()
    host, dev = _source_sections()
    assert host == doc, (sorted(host - doc), sorted(doc - host))
    assert dev == doc, (sorted(dev - doc), sorted(doc - dev))


def test_blob_messages_name_tensors_plainly_and_tensor_multipliers_with_their_index():
    """A reader written from the docs gave other messages than the host on 10 of 97 edited
    blobs: tensor names without repr quotes, a multiplier element with its index."""
    host = _host_templates()
    dev = _device_templates()
    for templates in (host, dev):
        assert not any("('" in t or "(%r)" in t for t in templates if t.startswith("tensor"))
    src = (DEVICE / "attention_ops.py").read_text()
    assert '"%s[%d]" % (p, i)' in src
    assert 'f"{role}[{i}]"' in (ROOT / "host" / "intmodel" / "blob.py").read_text()
