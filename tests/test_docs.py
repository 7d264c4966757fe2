# Host (CPython): the docs a user reads — help texts, make help, the README, quoted figures.
"""What a new user reads first must be true and self-contained: `tinyattn --help` and every
option's help, `make help`, the README (a guide: no measured figure, its links and its
commands those that the CLI and the Makefile take), the figures the docs quote in words (the
same as docs/benchmarks.md's tables), the data READMEs (no folders a clone lacks, no issue
numbers), and `make bench` never making docs/benchmarks.md worse: a run without an optional
extra keeps the committed measured sections and summary rows, the hand-written sections stay as
they are, and no run writes this machine's paths into it.
"""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

import pytest

from tinyattn import bench, cli

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.host


def _subparsers():
    sub = next(a for a in cli.build_parser()._actions if a.dest == "command")
    return sub.choices


# -- help texts -------------------------------------------------------------------------------


def test_docs_cli_help_names_windows_and_ts(capsys):
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    out = capsys.readouterr().out
    lines = {line.split()[0]: line for line in out.splitlines() if line.startswith("    ")}
    for command in ("train", "predict"):
        assert ".ts" in lines[command] and "windows" in lines[command], lines[command]
    assert "Iris (or any CSV)" not in out and "--ts" in out, out


def test_docs_every_option_has_help_without_issue_numbers():
    for name, parser in _subparsers().items():
        for action in parser._actions:
            if not action.option_strings or action.option_strings[0] == "-h":
                continue
            text = action.help or ""
            assert text.strip(), f"tinyattn {name} {action.option_strings[0]}: no help text"
            assert not re.search(r"issue[- ]?\d|DESIGN", text, re.I), (name, text)
        for group in parser._action_groups:
            assert "DESIGN" not in (group.title or ""), (name, group.title)


def test_docs_make_help_says_what_each_target_covers():
    out = subprocess.run(["make", "-s", "help"], cwd=ROOT, capture_output=True, text=True,
                         check=True).stdout  # fmt: skip
    lines = {line.split()[0]: line for line in out.splitlines() if line.strip()}
    for extra in ("scikit-learn", "sktime", "numba"):
        assert extra in lines["install-peers"], lines["install-peers"]
    assert "time series" in lines["bench-accuracy"], lines["bench-accuracy"]
    assert re.search(r"\d+ min", lines["bench"]), lines["bench"]


# -- what the docs say ------------------------------------------------------------------------


def test_docs_data_readmes_describe_the_files_themselves():
    for path in ("host/data/README.md", "host/data/ts/README.md", "README.md",
                 "docs/model-format.md", "docs/reliability.md", "docs/benchmarks.md",
                 "docs/blob-format.md", "docs/quantization.md", "docs/protocol.md",
                 "docs/usage.md"):  # fmt: skip
        text = (ROOT / path).read_text()
        assert "shared/data" not in text, path
        assert not re.search(r"\bissue[- ]?\d|\(#\d", text, re.I), path
        assert "DESIGN §" not in text, path  # a file a user's clone does not have


def _bench(pattern: str, section: str | None = None) -> float:
    """The figure `pattern` finds in docs/benchmarks.md (in its `## section` when given)."""
    text = (ROOT / "docs" / "benchmarks.md").read_text()
    if section is not None:
        text = bench.read_doc(ROOT / "docs" / "benchmarks.md")[0][section]
    m = re.search(pattern, text, re.M)
    assert m, pattern
    return float(m[1])


DEFAULT = bench.SEARCH_TITLE  # the default budget's search table
RP2040 = bench.search_title(("--board", "rp2040", "--max-ms", "50"))


WHERE = "Where we stand"  # docs/benchmarks.md's hand-written section

# A figure quoted in words -> the same figure in docs/benchmarks.md's tables: (the doc quoting
# it and its `## section` or None, the phrase with the figure as group 1, the table's pattern
# (group 1), the digits shown, the table's section when not the whole file). The README quotes
# none: it links to these docs.
DOC_FIGURES = [
    ("docs/benchmarks.md", WHERE, r"the int8 blob is (\d+) bytes",
     r"^blob bytes \(reference\)\s+(\d+)", 0),
    ("docs/benchmarks.md", WHERE, r"viper, ([\d.]+) µs\)",
     r"^device µs/inference int8-viper\s+([\d.]+)", 1),
    ("docs/benchmarks.md", WHERE, r"is ([\d.]+)× the naive",
     r"^device speedup int8-viper vs naive\s+([\d.]+)", 1),
    ("docs/benchmarks.md", WHERE, r"model takes (\d+) B of heap",
     r"^device model heap B \(int8-viper\)\s+(\d+)", 0),
    ("docs/benchmarks.md", WHERE, r"training takes ([\d.]+)× PyTorch",
     r"^train: ratio NumPy/PyTorch\s+([\d.]+)", 2),
    ("docs/benchmarks.md", WHERE, r"iris-attn ([\d.]+) float",
     r"^iris\s+tinyattn iris-attn\s+\d+\s+([\d.]+)", 3),
    ("docs/benchmarks.md", WHERE, r"float / ([\d.]+) int8, next",
     r"^iris\s+tinyattn iris-attn\s+\d+\s+[\d.]+ ± [\d.]+\s+([\d.]+)", 3),
    ("docs/benchmarks.md", WHERE, r"LDA ([\d.]+)", r"^iris\s+LDA\s+([\d.]+)", 3),
    ("docs/benchmarks.md", WHERE, r"logistic regression ([\d.]+)",
     r"^iris\s+logistic regression \(C=100\)\s+([\d.]+)", 3),
    ("docs/benchmarks.md", WHERE, r"RBF-SVM ([\d.]+)", r"^iris\s+RBF-SVM \(C=1\)\s+([\d.]+)", 3),
    ("docs/benchmarks.md", WHERE, r"kNN ([\d.]+)", r"^iris\s+kNN \(k=5\)\s+([\d.]+)", 3),
    ("docs/benchmarks.md", WHERE, r"int8, ([\d,]+)-byte blob", r"^blob bytes basicmotions\s+(\d+)",
     0),
    ("docs/benchmarks.md", WHERE, r"blob, ([\d,]+) MACs; Japanese",
     r"^device seq MACs/inference\s+(\d+)", 0),
    ("docs/benchmarks.md", WHERE, r"([\d,]+) bytes, [\d,]+ MACs — its",
     r"^blob bytes japanesevowels\s+(\d+)", 0),
    ("docs/benchmarks.md", WHERE, r"BasicMotions ([\d,]+) µs against",
     r"^Pico int8 thumb µs BasicMotions\s+(\d+)", 0),
    ("docs/benchmarks.md", WHERE, r"\(Iris: ([\d,]+) against", r"^Pico int8 thumb µs Iris\s+(\d+)",
     0),
    ("docs/protocol.md", None, r"an epoch takes ([\d.]+) s, against", r"^100k\s+\d+\s+([\d.]+)",
     2),
    ("docs/protocol.md", None, r"against ([\d.]+) s on a 160k board", r"^160k\s+\d+\s+([\d.]+)",
     2),
    ("docs/protocol.md", None, r"test accuracy equals the host run's \(([\d.]+)\)",
     r"^100k\s+\d+\s+[\d.]+\s+[\d.]+\s+\S+\s+\S+\s+([\d.]+)", 3),
    ("docs/search.md", None, r"JapaneseVowels ([\d.]+) \(P2 E16",
     r"^japanesevowels\s+([\d.]+)", 3, DEFAULT),
    ("docs/search.md", None, r"PickupGestureWiimoteZ ([\d.]+) \(seq-rocket",
     r"^pickupgesturewiimotez\s+([\d.]+)", 3, DEFAULT),
    ("docs/search.md", None, r"PLAID ([\d.]+), above 1-NN DTW", r"^plaid\s+([\d.]+)", 3, DEFAULT),
    ("docs/search.md", None, r"above 1-NN DTW's ([\d.]+) \(seq-rocket N128",
     r"^plaid(?:\s+\S+){10}\s+([\d.]+)", 3, DEFAULT),
    ("docs/search.md", None, r"ACSF1\n?\s*([\d.]+), above 1-NN DTW", r"^acsf1\s+([\d.]+)",
     3, DEFAULT),
    ("docs/search.md", None, r"above 1-NN DTW's ([\d.]+) \(seq-rocket",
     r"^acsf1(?:\s+\S+){10}\s+([\d.]+)", 3, DEFAULT),
    ("docs/search.md", None, r"mean gap ([\d.]+) points \(was 1.11 the run",
     r"^mean gap to MiniRocket.*: ([\d.]+) points", 2, DEFAULT),
    ("docs/search.md", None, r"ACSF1 \*\*([\d.]+)\*\* \(seq-rocket", r"^acsf1\s+([\d.]+)", 3,
     RP2040),
    ("docs/search.md", None, r"PLAID ([\d.]+) \(seq-rocket N128", r"^plaid\s+([\d.]+)", 3,
     RP2040),
    ("docs/search.md", None, r"mean gap to MiniRocket is \*\*(-?[\d.]+) points",
     r"^mean gap to MiniRocket.*: (-?[\d.]+) points", 2, RP2040),
]  # fmt: skip


@pytest.mark.parametrize("figure", DOC_FIGURES, ids=lambda f: f"{f[0]}: {f[2]}")
def test_docs_figures_quoted_in_words_are_those_of_the_tables(figure):
    doc, section, quoted, table, digits, *table_section = figure
    text = (ROOT / doc).read_text()
    if section is not None:
        text = bench.read_doc(ROOT / doc)[0][section]
    m = re.search(quoted, re.sub(r"\s+", " ", text))
    assert m, f"{doc}: {quoted}"
    want = format(_bench(table, *table_section), f".{digits}f")
    assert m[1].replace(",", "") == want, f"{doc} says {m[0]!r}; docs/benchmarks.md: {want}"


# -- the README: a guide that quotes no figure, its links and commands ------------------------

# Measured figures, as the README once quoted them in its prose: accuracies and ratios, times,
# speed-ups, bytes, counts out of a total.
FIGURE = re.compile(r"\b0\.\d+|\d+(?:\.\d+)?\s?(?:µs|×|%)|\d[\d,]*\s?(?:B|bytes|MACs)\b"
                    r"|\b\d+/\d+\b|\d+(?:\.\d+)?\s?(?:s|min|minutes)\b")  # fmt: skip


def _prose(markdown: str) -> str:
    """`markdown` without its fenced code blocks."""
    return re.sub(r"^```.*?^```", "", markdown, flags=re.M | re.S)


def test_docs_readme_quotes_no_measured_figure():
    """Measured figures live in docs/ (benchmarks.md and the doc of each feature), each with
    its command; the README, a guide, links to them."""
    found = FIGURE.findall(_prose((ROOT / "README.md").read_text()))
    assert not found, found
    assert FIGURE.search("the fastest int8 kernel (viper, 5.3 µs) is 104.6× the naive")


def _slug(heading: str) -> str:
    """GitHub's anchor for a Markdown heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


@pytest.mark.parametrize("page", ["README.md", *sorted(
    str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md"))])  # fmt: skip
def test_docs_links_name_files_and_headings_that_exist(page):
    text = _prose((ROOT / page).read_text())
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target):
            continue  # a URL
        path, _, anchor = target.partition("#")
        file = (ROOT / page).parent / path if path else ROOT / page
        assert file.exists(), f"{page}: link to {target}: no such file"
        headings = re.findall(r"^#+ (.*)$", _prose(file.read_text()), re.M)
        assert not anchor or anchor in map(_slug, headings), f"{page}: {target}: no such heading"


def _commands(page: str):
    """The shell commands of `page`'s sh blocks: one argv per command (`a && b` is two)."""
    for block in re.findall(r"^```sh\n(.*?)^```", (ROOT / page).read_text(), re.M | re.S):
        for line in block.splitlines():
            for part in re.split(r"&&|;", line):
                argv = shlex.split(part, comments=True)
                while argv and "=" in argv[0]:  # VAR=value before the command
                    argv = argv[1:]
                if argv:
                    yield argv


def _make_targets() -> set[str]:
    return set(re.findall(r"^([a-z][\w-]*):", (ROOT / "Makefile").read_text(), re.M))


@pytest.mark.parametrize("page", ["README.md", "docs/usage.md"])
def test_docs_readme_commands_are_commands_tinyattn_and_make_take(page):
    """Every `tinyattn …` of the README and docs/usage.md parses as the CLI parses it (a
    renamed option fails here), every `make …` names a Makefile target; the README gives the
    pip user's line and keeps the two `make` commands that CI runs."""
    parser, targets, seen = cli.build_parser(), _make_targets(), set()
    for argv in _commands(page):
        prog = Path(argv[0]).name
        seen.add(prog)
        if prog == "tinyattn":
            try:
                parser.parse_args(argv[1:])
            except SystemExit:
                pytest.fail(f"{page}: {shlex.join(argv)}: tinyattn refuses it")
        elif prog == "make":
            named = [a for a in argv[1:] if "=" not in a and not a.startswith("-")]
            assert set(named) <= targets, f"{page}: {shlex.join(argv)}: no such target"
    assert "tinyattn" in seen and "make" in seen, seen
    if page == "README.md":
        text = (ROOT / page).read_text()
        assert 'pip install "tinyattn[board]"' in text and 'pip install ".[board]"' in text
        assert re.search(r"^tinyattn demo\b", text, re.M), text
        ci = (ROOT / ".ci" / "run").read_text()
        for command in ("make demo", "make test"):
            assert re.search(rf"^{command}\b", text, re.M), command
            assert re.search(rf"^{command}$", ci, re.M), f".ci/run does not run {command}"


# -- make bench writing docs/benchmarks.md ----------------------------------------------------


def _result(torch: bool, peers: bool) -> dict:
    """A bench result as main() builds it (only the parts write_doc reads)."""
    date = "2026-01-02 03:04 UTC" if torch else "2026-02-03 04:05 UTC"
    machine = {"cpu": "cpu", "os": "Linux", "python": "3.11", "numpy": "2.4", "date": date}
    skipped = [] if peers else ["LDA (scikit-learn not installed)"]
    seq_peer = {"accuracy": 0.97} if peers else {"skipped": "sktime not installed"}
    return {
        "machine": machine,
        "train": {"numpy_seconds": 0.106, "torch_seconds": 0.766 if torch else None,
                  "ratio": 0.14 if torch else None},
        "train_seq": {"ratio": 0.30 if torch else None, "torch_seconds": 1 if torch else None},
        "accuracy": {"peers_skipped": skipped, "datasets": {}, "k": 5, "repeats": 10},
        "accuracy_seq": {"basicmotions": {"ours": [{"float": 1.0, "int8": 1.0, "bytes": 6200}],
                                          "peers": {"MiniRocket": seq_peer}}},
        "blob_bytes": 1880,
    }  # fmt: skip


def _sections(torch: bool, peers: bool, tmp: Path) -> list[tuple[str, str]]:
    return [
        (bench.TRAIN_TITLE, "NumPy 0.106\n" + ("PyTorch 0.766" if torch else
                                               "PyTorch  —  (torch not installed)")),
        ("Device runtime (MicroPython unix port)",
         f"device benchmark: {Path.cwd()}/build/model.bin (one sample per Iris class)\n"
         f"seq model {tmp}/basicmotions.bin (full windows), 1.7x µs/inference"),
        (bench.ACCURACY_TITLE, "iris LDA 0.9800" if peers else "peers skipped: LDA"),
        (bench.SEQ_TITLE, "MiniRocket 1.0000" if peers else "MiniRocket skipped: sktime"),
    ]  # fmt: skip


def test_docs_bench_write_never_degrades_the_committed_figures(tmp_cwd, tmp_path):
    doc = tmp_cwd / "docs" / "benchmarks.md"
    doc.parent.mkdir()
    full = _result(torch=True, peers=True)
    assert bench.write_doc(doc, full, _sections(True, True, tmp_path),
                           bench.summary_rows(full)) == []  # fmt: skip
    text = doc.read_text()
    assert "PyTorch 0.766" in text and str(tmp_cwd) not in text and str(tmp_path) not in text
    assert "device benchmark: build/model.bin (one" in text, text
    assert "seq model basicmotions.bin (full windows), 1.7x µs/inference" in text, text
    # a run without PyTorch and the peers: their sections and summary rows stay as committed
    part = _result(torch=False, peers=False)
    notes = bench.write_doc(doc, part, _sections(False, False, tmp_path),
                            bench.summary_rows(part))  # fmt: skip
    text = doc.read_text()
    assert len(notes) == 3, notes
    assert "PyTorch 0.766" in text and "iris LDA 0.9800" in text and "MiniRocket 1.0000" in text
    assert "not installed" not in text and "skipped" not in text, text
    assert re.search(r"^train: PyTorch wall s\s+0\.766", text, re.M), text
    assert re.search(r"^train: ratio NumPy/PyTorch\s+0\.14\s+≤ 0\.5\s+ok", text, re.M), text
    assert "(kept from the run of 2026-01-02 03:04 UTC: later runs lacked PyTorch" in text
    assert "Machine: cpu, Linux, Python 3.11, NumPy 2.4; 2026-02-03 04:05 UTC." in text
    # a full run again replaces them
    bench.write_doc(doc, full, _sections(True, True, tmp_path), bench.summary_rows(full))
    assert "kept from" not in doc.read_text()


def test_docs_bench_write_keeps_the_hand_written_sections_as_they_are(tmp_cwd, tmp_path):
    """docs/benchmarks.md's sections above the Summary are written by hand (the figures in
    words, for the README's readers): a full `make bench` keeps them, word for word and in
    their place, and a section's update too."""
    doc = tmp_cwd / "docs" / "benchmarks.md"
    doc.parent.mkdir()
    full = _result(torch=True, peers=True)
    bench.write_doc(doc, full, _sections(True, True, tmp_path), bench.summary_rows(full))
    hand = (f"## {WHERE}\nIn words: the blob is 1880 bytes (`make bench`).\n```\nresult  PASS\n"
            "```\n\n### Windows\nBasicMotions 40/40.")  # fmt: skip
    text = doc.read_text()
    doc.write_text(text.replace("## Summary", hand + "\n\n## Summary"))
    assert bench.hand_written(doc) == hand
    bench.write_doc(doc, full, _sections(True, True, tmp_path), bench.summary_rows(full))
    text = doc.read_text()
    assert text.count(f"## {WHERE}") == 1 and f"object there.\n\n{hand}\n\n## Summary\n" in text
    assert "PyTorch 0.766" in text  # the measured sections are written as before
    bench.update_doc_section(doc, bench.ACCURACY_TITLE, "iris LDA 0.9800")
    assert bench.hand_written(doc) == hand


def test_docs_bench_accuracy_write_keeps_measured_sections(tmp_cwd, tmp_path, monkeypatch):
    """`make bench-accuracy` without the peers: the accuracy sections stay as committed."""
    import tinyattn.tools.bench_accuracy as acc
    import tinyattn.tools.bench_seq as seq

    doc = tmp_path / "benchmarks.md"
    doc.write_text(f"# Benchmarks\n\n## {bench.ACCURACY_TITLE}\n```\niris LDA 0.9800\n```\n\n"
                   f"## {bench.SEQ_TITLE}\n```\nMiniRocket 1.0000\n```\n")  # fmt: skip
    part = _result(torch=False, peers=False)
    monkeypatch.setattr(acc, "bench_accuracy", lambda progress=None: part["accuracy"])
    monkeypatch.setattr(acc, "format_table", lambda r: "peers skipped: LDA")
    monkeypatch.setattr(seq, "bench_seq", lambda seeds=5: part["accuracy_seq"])
    monkeypatch.setattr(seq, "format_table", lambda r: "MiniRocket skipped: sktime")
    monkeypatch.setattr(bench, "summary_rows", lambda r: [("x", "1", "", "—")])
    assert cli.main(["bench", "--accuracy", "--write", str(doc)]) == 0
    text = doc.read_text()
    assert "iris LDA 0.9800" in text and "MiniRocket 1.0000" in text and "skipped" not in text


def test_docs_bench_search_section_kept_by_runs_that_do_not_measure_it(tmp_cwd, tmp_path,
                                                                        monkeypatch):  # fmt: skip
    """The search section (`make bench-accuracy`, ~40 min) is not part of `make bench`: a full
    write keeps the committed one as it is, and a search run without the peers keeps it too."""
    import tinyattn.tools.bench_search as bs

    doc = tmp_cwd / "docs" / "benchmarks.md"
    doc.parent.mkdir()
    doc.write_text(f"# Benchmarks\n\n## {bench.SEARCH_TITLE}\n```\ntrace 1.000 measured\n```\n")
    full = _result(torch=True, peers=True)
    bench.write_doc(doc, full, _sections(True, True, tmp_path), bench.summary_rows(full))
    text = doc.read_text()
    assert f"## {bench.SEARCH_TITLE}\n```\ntrace 1.000 measured\n```" in text, text
    assert "PyTorch 0.766" in text  # the full run's own sections are written
    no_peers = {"problems": {"trace": {"peers": {"1-NN DTW": {"skipped": "sktime"}}}}}
    monkeypatch.setattr(bs, "bench_search", lambda progress=None, budget=(): no_peers)
    monkeypatch.setattr(bs, "format_table", lambda r: "trace 0.5 1-NN DTW skipped")
    assert cli.main(["bench", "--search", "--write", str(doc)]) == 0  # no summary row: none
    text = doc.read_text()
    assert "trace 1.000 measured" in text and "skipped" not in text


def test_docs_bench_search_under_a_preset_is_a_section_beside_the_default_budgets(
        tmp_cwd, monkeypatch):  # fmt: skip
    """`bench --search --search-board rp2040 --search-max-ms 50` runs every search under the
    preset and writes its table under its own title: the default budget's section stays."""
    import tinyattn.tools.bench_search as bs

    doc = tmp_cwd / "docs" / "benchmarks.md"
    doc.parent.mkdir()
    doc.write_text(f"# Benchmarks\n\n## {bench.SEARCH_TITLE}\n```\ntrace 1.000 default\n```\n")
    seen = []
    measured = {"budget": ["--board", "rp2040", "--max-ms", "50"],
                "problems": {"trace": {"peers": {"1-NN DTW": {"float": 1.0}}}}}
    monkeypatch.setattr(bs, "bench_search",
                        lambda progress=None, budget=(): seen.append(budget) or measured)
    monkeypatch.setattr(bs, "format_table", lambda r: "trace 0.990 under the preset")
    argv = ["bench", "--search", "--search-board", "rp2040", "--search-max-ms", "50"]
    assert cli.main([*argv, "--write", str(doc)]) == 0
    assert seen == [("--board", "rp2040", "--max-ms", "50")]
    text = doc.read_text()
    title = "Model search on the development problems, rp2040 preset at 50 ms"
    assert f"## {bench.SEARCH_TITLE}\n```\ntrace 1.000 default\n```" in text, text
    assert f"## {title} (peers on the same split, same run)\n```\ntrace 0.990 under" in text


@pytest.mark.parametrize("argv, said", [
    (["--search", "--search-board", "rp2040"], "--search-board and --search-max-ms go together"),
    (["--search-board", "rp2040", "--search-max-ms", "50"], "the budget of --search"),
])  # fmt: skip
def test_docs_bench_search_budget_flags_refused_alone(argv, said, capsys):
    assert cli.main(["bench", *argv]) == 2
    assert said in capsys.readouterr().err


@pytest.mark.host
def test_docs_long_windows_are_said_to_keep_their_last_t_steps_everywhere():
    """A window longer than T runs its last T steps (fit_to_model); the accuracy bench said
    "cut to their first T steps"."""
    wrong = re.compile(r"first T steps|first \{?T\}? steps", re.I)
    found = [f"{p.relative_to(ROOT)}:{i}" for folder in ("host", "tools", "device", "docs")
             for p in sorted((ROOT / folder).rglob("*")) if p.suffix in (".py", ".md")
             for i, line in enumerate(p.read_text().splitlines(), 1) if wrong.search(line)]
    assert not found, found
