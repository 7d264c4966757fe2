# Host (CPython): sequence windows over the serial link — parity and predict (issues 11 and 12).
"""A seq-attn model's windows go to the board's server (device/server.py, server_b64.py) as a
JSON `samples` list of n·C numbers or as a compact batch (`lengths` + one float32 payload),
and `tinyattn parity` / `tinyattn predict` compare them with the host references window by
window (docs/protocol.md):

- a small synthetic seq model (T=12, C=3, P=4, unequal lengths 1..12) on a virtual board, both
  encodings: int8 logits and xq exact, float within 1e-4, argmax equal on every window; the
  same windows through the server under CPython (both encodings, int8 xq in too);
- one window's int8 logit spoiled by a stub server: parity FAILs naming that window;
- BasicMotions (40 TEST windows) and JapaneseVowels (370 TEST windows, unequal lengths) with
  quickly trained models (accuracy does not matter for parity; slow): parity PASS on every
  window, and `predict --ts` gives the same classes on the host and on the board.

Heap: the virtual boards here have the default 100 KiB, the board every command starts
(BasicMotions and JapaneseVowels serve in it: docs/protocol.md, Sequence windows, has the
heap figures); the archive test also restarts the server in the same REPL (parity, then
predict).
"""

from __future__ import annotations

import base64
import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
from seq_models import train_seq

from tinyattn import cli
from tinyattn.board.link import as_sent, b64_batch, decode_b64_reply
from tinyattn.board.parity import FLOAT_TOL, host_reference, load_samples, parity
from tinyattn.data.timeseries import write_ts
from tinyattn.learn.model import save_model, ts_data_meta
from tinyattn.learn.seqmodel import SeqAttnConfig
from tinyattn.paths import DEVICE_DIR

SEQ_HEAP = "100k"  # the default virtual board (tinyattn.board.ports.VIRTUAL_HEAP)
PY_HEAP = "160k"  # a board that compiles the .py sources (the spoiled-window stub's)
T, C, K = 12, 3, 3


def _export(tmp: Path, name: str, train, test=None, config=None, epochs: int = 3):
    """(model.npz, model.bin) of a seq model trained quickly on `train` (a TSDataset)."""
    from tinyattn.intmodel.export import export_model

    model, mean, std = train_seq(train.X, train.lengths, train.y, train.n_classes, config,
                                 epochs=epochs)  # fmt: skip
    data = ts_data_meta(name) if test is None else ts_data_meta(name, train.source, test.source)
    meta = {"model": "seq-attn", "class_names": list(train.class_names), **data}
    npz = save_model(tmp / f"{name}.npz", model, mean, std, meta)
    export_model(npz, tmp / f"{name}.bin")
    return npz, tmp / f"{name}.bin"


@pytest.fixture(scope="module")
def synth(tmp_path_factory):
    """A small seq model on synthetic .ts files: unequal lengths, TEST windows up to 15 steps
    (three longer than T = 12: cut and counted)."""
    from tinyattn.data.timeseries import load_ts

    tmp = tmp_path_factory.mktemp("synth")
    rng = np.random.default_rng(3)
    N = 30
    y = np.arange(N) % K
    t = np.arange(15)[None, :, None]
    X = np.sin(t * (0.3 + 0.4 * y[:, None, None]) + rng.normal(0, 0.2, (N, 15, C))) * 3 + 1
    tr_len = rng.integers(1, T + 1, N)
    te_len = np.where(np.arange(N) < 3, 15, rng.integers(1, T + 1, N))
    names = ["a", "b", "c"]
    write_ts(tmp / "S_TRAIN.ts", X, tr_len, y, names, "S")
    write_ts(tmp / "S_TEST.ts", X, te_len, y, names, "S")
    train, test = load_ts(tmp / "S_TRAIN.ts"), load_ts(tmp / "S_TEST.ts")
    cfg = SeqAttnConfig(patch=4, embed_dim=8, num_heads=2, blocks=1, ff_dim=12)
    npz, blob = _export(tmp, "S", train, test, cfg, epochs=5)
    return {"npz": npz, "blob": blob, "test": test}


@pytest.fixture(scope="module")
def synth_board(tmp_path_factory, synth):
    from tinyattn.board.flash import flash
    from tinyattn.tools.vboard import VirtualBoard, find_micropython

    if find_micropython() is None:
        pytest.skip("MicroPython unix port not installed ('make install')")
    with VirtualBoard(tmp_path_factory.mktemp("synth_board"), heap=SEQ_HEAP) as vb:
        flash(vb.port, synth["blob"], progress=False)
        yield vb


# -- the server under CPython ---------------------------------------------------------------


@pytest.fixture
def device_path():
    sys.path.insert(0, str(DEVICE_DIR))  # server.py imports server_b64 on use
    yield
    sys.path.remove(str(DEVICE_DIR))


@pytest.mark.host
@pytest.mark.usefixtures("device_path")
def test_serial_seq_server_windows_both_encodings_equal_host(synth):
    import server as srv
    from attention import Model

    model = Model(str(synth["blob"]))
    srv._state.update(model=model, out=model.new_logits(), blob=None)
    test = synth["test"]
    X, n = as_sent(test.X[3:11, :T]), test.lengths[3:11]  # 8 windows of 1..12 steps
    ref = host_reference(synth["blob"].read_bytes(), X, n)
    rows = [X[i, : n[i]].reshape(-1) for i in range(len(X))]

    def ask(req):
        rep, _ = srv.handle_line(model, json.dumps(req))
        assert rep["ok"], rep
        return rep

    as_json = ask({"op": "batch", "path": "both", "samples": [r.tolist() for r in rows]})
    fields = b64_batch(np.concatenate(rows)[None, :])
    compact = ask({"op": "batch", "path": "both", **fields, "n": len(rows),
                   "lengths": [int(v) for v in n]})  # fmt: skip
    compact = decode_b64_reply(compact, len(rows), xq_widths=[len(r) for r in rows])
    for rep in (as_json, compact):
        assert rep["xq"] == [x.tolist() for x in ref["xq"]]
        assert rep["logits_q"] == ref["logits_q"].tolist()
        assert np.max(np.abs(np.asarray(rep["logits"]) - ref["logits"])) <= FLOAT_TOL
    xq = np.concatenate(ref["xq"]).astype(np.int8)  # int8 windows in: the same logits
    xq_text = base64.b64encode(xq.tobytes()).decode()
    rep = ask({"op": "batch", "path": "int8", "enc": "b64", "n": len(rows),
               "lengths": [int(v) for v in n], "xq": xq_text})  # fmt: skip
    assert decode_b64_reply(rep, len(rows), [len(r) for r in rows])["logits_q"] == \
        ref["logits_q"].tolist()  # fmt: skip
    for bad, words in [
        ({"lengths": [0] * len(rows)}, "each window has 1 or more steps"),
        ({"lengths": [1]}, "lengths must be a list of n = 8"),
        ({"lengths": [int(v) + 1 for v in n]}, "f32: expected"),
    ]:
        rep, _ = srv.handle_line(model, json.dumps({"op": "batch", **fields, "n": len(rows),
                                                    **bad}))  # fmt: skip
        assert not rep["ok"] and words in rep["error"], rep
    rep, _ = srv.handle_line(model, json.dumps({"op": "infer", "features": [1.0] * (C * T + 1)}))
    assert not rep["ok"] and "a window is n*3 numbers with n >= 1 steps" in rep["error"]
    # the long window rule: 15 steps run their last 12, in every form the server takes
    w = as_sent(test.X[:3, :15])  # 3 windows of 15 steps
    assert test.lengths[:3].tolist() == [15] * 3
    last = host_reference(synth["blob"].read_bytes(), w[:, 3:], None)
    assert last["logits_q"].tolist() == ref_long(synth, w)["logits_q"].tolist()
    for i in range(3):
        one = ask({"op": "infer", "features": w[i].reshape(-1).tolist()})
        assert one["logits_q"] == last["logits_q"][i].tolist()
        assert one["xq"] == last["xq"][i].tolist()
    flat = w.reshape(-1)[None, :]
    rep = ask({"op": "batch", "path": "both", **b64_batch(flat), "n": 3, "lengths": [15] * 3})
    rep = decode_b64_reply(rep, 3, xq_widths=[T * C] * 3)
    assert rep["logits_q"] == last["logits_q"].tolist()
    assert rep["xq"] == [x.tolist() for x in last["xq"]]
    assert np.max(np.abs(np.asarray(rep["logits"]) - last["logits"])) <= FLOAT_TOL


def ref_long(synth, w):
    """The host reference on whole windows longer than T (it applies the rule itself)."""
    return host_reference(synth["blob"].read_bytes(), w, np.full(len(w), w.shape[1]))


# -- over a virtual board --------------------------------------------------------------------


@pytest.mark.serial
@pytest.mark.parametrize("enc", ["b64", "json"])
def test_serial_seq_parity_unequal_windows_exact_both_encodings(synth_board, synth, enc):
    data = load_samples(synth["npz"], None, None, None)
    assert data.lengths.min() < data.lengths.max()  # unequal lengths
    report = parity(synth_board.port, synth["blob"], data.X, data.y, lengths=data.lengths,
                    enc=enc, bench_n=0, progress=False)  # fmt: skip
    s = report["summary"]
    n = len(data.y)
    assert s["passed"] and s["enc"] == enc and s["unit"] == "window", s
    assert s["int8_exact"] == s["xq_match"] == s["argmax_agreement"] == n
    assert s["float_max_abs_diff"] <= FLOAT_TOL
    assert s["windows_truncated"] == 3 and s["max_steps"] == T
    assert [r["steps"] for r in report["rows"]] == np.minimum(data.lengths, T).tolist()


@pytest.mark.serial
@pytest.mark.usefixtures("tmp_cwd")
def test_serial_seq_predict_ts_host_and_board_same_classes(synth_board, synth, capsys):
    def predict(*extra):
        code = cli.main(["predict", "--ts", str(synth["test"].source), "--blob",
                         str(synth["blob"]), "--json", "--quiet", *extra])  # fmt: skip
        out = capsys.readouterr()
        assert code == 0, out.err
        assert "3 of 30 windows longer than the model's T = 12" in out.err
        return json.loads(out.out)["predictions"]

    host = predict()
    assert len(host) == 30 and host == predict("--port", synth_board.port)


# The stub: device/server.py as server_real, its batch op wrapped to add 1 to one int8 logit of
# the window whose first C features are those in sabotage.json (JSON and compact replies).
SPOIL_SERVER = """\
# Device (MicroPython), test stub: device/server.py with one window's int8 logit spoiled.
import array
import json
from binascii import a2b_base64, b2a_base64

import server_real

_batch = server_real._OPS["batch"]


def _spoiled(model, req):
    rep = _batch(model, req)
    with open("sabotage.json") as f:
        head = json.load(f)
    C, nc = model.n_features, model.n_classes
    if req.get("enc") == "b64":
        f32 = req["f32"]  # a str, or the server's Payload: decoded in place by the batch
        x = array.array("f", a2b_base64(f32)) if isinstance(f32, str) else f32.floats(f32.n // 4)
        lq = array.array("i", a2b_base64(rep["logits_q"]))
        base = 0
        for k, n in enumerate(req["lengths"]):
            if all(abs(x[base + i] - head[i]) < 1e-6 for i in range(C)):
                lq[k * nc + 1] += 1
            base += n * C
        rep["logits_q"] = b2a_base64(lq).decode().rstrip()
    else:
        for k, s in enumerate(req["samples"]):
            if all(abs(s[i] - head[i]) < 1e-6 for i in range(C)):
                rep["logits_q"][k][1] += 1
    return rep


server_real._OPS["batch"] = _spoiled
run = server_real.run
"""


@pytest.mark.serial
@pytest.mark.usefixtures("tmp_cwd")
@pytest.mark.parametrize("enc", ["b64", "json"])
def test_serial_seq_parity_spoiled_window_fails_naming_it(tmp_path_factory, synth, capsys, enc):
    from tinyattn.board.flash import device_sources
    from tinyattn.tools.vboard import VirtualBoard, find_micropython

    if find_micropython() is None:
        pytest.skip("MicroPython unix port not installed ('make install')")
    fs = tmp_path_factory.mktemp("spoil_board")
    for src in device_sources():
        shutil.copy(src, fs / src.name)
    (fs / "server.py").rename(fs / "server_real.py")
    (fs / "server.py").write_text(SPOIL_SERVER)
    shutil.copy(synth["blob"], fs / "model.bin")
    bad = 7
    data = load_samples(synth["npz"], None, None, None)
    (fs / "sabotage.json").write_text(json.dumps(as_sent(data.X[bad, 0]).tolist()))
    assert sum(np.allclose(as_sent(x[0]), as_sent(data.X[bad, 0])) for x in data.X) == 1
    out = Path("parity.json")
    # the runtime as .py sources here (the stub stands in for server.py): compiling them on
    # the board takes more than the default 100 KiB (docs/protocol.md, Getting there)
    with VirtualBoard(fs, heap=PY_HEAP) as vb:
        code = cli.main(["parity", "--port", vb.port, "--blob", str(synth["blob"]), "--model",
                         str(synth["npz"]), "--report", str(out), "--bench", "0", "--quiet",
                         "--enc", enc])  # fmt: skip
    got = capsys.readouterr()
    table = got.out
    assert out.exists(), got.err[-3000:]
    s = json.loads(out.read_text())["summary"]
    assert code == 1 and not s["passed"] and "FAIL" in table, table
    assert s["failed_samples"] == [bad] and s["int8_exact"] == len(data.y) - 1, s
    assert f"window {bad} " in table and "int8 logits: device" in table, table


# -- the archive's TEST windows (slow) --------------------------------------------------------


@pytest.fixture(scope="module")
def archive(tmp_path_factory):
    """Quickly trained BasicMotions and JapaneseVowels models of the architecture `tinyattn
    train --dataset NAME` gives (seqdefaults; parity needs no accuracy)."""
    from tinyattn.data.timeseries import load_ts_dataset
    from tinyattn.learn.seqdefaults import seq_defaults

    tmp = tmp_path_factory.mktemp("archive")
    return {name: _export(tmp, name, load_ts_dataset(name, "train"), None,
                          seq_defaults(name).arch)
            for name in ("basicmotions", "japanesevowels")}  # fmt: skip


@pytest.mark.serial
@pytest.mark.slow
@pytest.mark.usefixtures("tmp_cwd")
@pytest.mark.parametrize(("name", "windows"), [("basicmotions", 40), ("japanesevowels", 370)])
def test_serial_seq_archive_test_windows_parity_and_predict(
    vboard_factory, archive, capsys, tmp_path, name, windows
):
    from tinyattn.board.flash import flash
    from tinyattn.data.timeseries import load_ts_dataset, ts_path
    from tinyattn.intmodel.blob import read_blob

    npz, blob = archive[name]
    T = read_blob(blob.read_bytes()).ops[0].iparams["T"]
    longer = int(np.sum(load_ts_dataset(name, "test").lengths > T))  # cut to T steps
    vb = vboard_factory(heap=SEQ_HEAP)
    flash(vb.port, blob, progress=False)
    out = tmp_path / "parity.json"
    code = cli.main(["parity", "--port", vb.port, "--blob", str(blob), "--model", str(npz),
                     "--report", str(out), "--bench", "50", "--quiet"])  # fmt: skip
    got = capsys.readouterr()
    table = got.out
    assert out.exists(), got.err[-3000:]
    s = json.loads(out.read_text())["summary"]
    assert code == 0 and s["passed"] and s["samples"] == windows, table
    assert s["int8_exact"] == s["xq_match"] == s["argmax_agreement"] == windows
    assert s["float_max_abs_diff"] <= FLOAT_TOL and s["windows_truncated"] == longer

    def predict(*extra):
        code = cli.main(["predict", "--ts", str(ts_path(name, "test")), "--blob", str(blob),
                         "--json", "--quiet", *extra])  # fmt: skip
        got = capsys.readouterr()
        assert code == 0, got.err
        return json.loads(got.out)["predictions"]

    host = predict()
    assert len(host) == windows and host == predict("--port", vb.port)
    test = load_ts_dataset(name, "test")
    for i in np.flatnonzero(test.lengths > T):  # JapaneseVowels' 29-step window (T = 26)
        n = int(test.lengths[i])
        ref = host_reference(blob.read_bytes(), test.X[i : i + 1, n - T : n], None)  # last T
        assert host[i]["class"] == test.class_names[int(ref["logits_q"][0].argmax())]
    with capsys.disabled():
        print(f"\n{name}:\n{table}")
