# Device (MicroPython; also runs under CPython): a window model's run in the training session.
"""On-board training of `seq-attn` on windows (DESIGN §11; docs/protocol.md, Training).

Imported by server_train.py only when the run's data file is a windows file (TAWF), never for
an Iris run: the Iris session keeps its 100 KiB board. `load_run` builds the run from the
files, `epoch_shifts` reads a `train_epoch` request's `shifts`.

Files: train_data.bin is a TAWF windows file (attention_train_seq.py's docstring is the byte
layout): the first `n_train` windows (meta "train" "n_train") train, the rest are only
evaluated, all at the model's T (longer test windows cut to their last T steps by the host,
as its evaluation does). The windows are read from the file as they are gathered
(WindowFile): the board never holds them in RAM. Meta "train" of a window run also carries
"rows" (windows a forward holds: the minibatch runs in pieces of that many, so the heap
scales with rows, not batch_size), "shift" (the largest time shift of the host's
augmentation; 0: none) and "average" ({"swa", "ema"}: the host's weight averaging,
attention_train_seq.Averager; its running value is in the checkpoint, TAFM flag AVERAGE,
until the last epoch makes theta the average).

shifts: per position of the epoch's order, the circular time shift of that window (int16
little-endian, base64; SeqNet.shifts): the draws of the host's own run (seqtrain.augment_batch).

References: device/attention_train_seq.py (SeqNet, WindowFile, Averager); server_train.py.
"""

import gc
import json
from array import array

from server_link import RequestError


def _field(cfg, key, lo, hi, path):
    v = cfg.get(key)
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise RequestError("%s: meta 'train' %r must be an integer from %d to %d" % (
            path, key, lo, hi))  # fmt: skip
    return v


def load_run(st, run):
    """Fill `run` (server_train._run) from st.WEIGHTS and st.DATA (server_train is `st`)."""
    import attention_train_seq as ats

    gc.collect()
    try:
        wf = ats.WindowFile(st.DATA)  # header, size and CRC checked (one pass, no copy)
    except OSError:
        raise RequestError("no data on the board: send it (train_put)") from None
    except ValueError as exc:
        raise RequestError(str(exc)) from None
    try:
        return _build(st, run, wf)
    except BaseException:
        wf.close()
        raise


def _build(st, run, wf):
    import attention_train as at
    import attention_train_seq as ats
    from attention_trainfile import load

    try:
        found = []
        meta_b, theta, step, state = load(st.WEIGHTS, None, found)
    except OSError:
        raise RequestError("no weights on the board: send them (train_put)") from None
    except ValueError as exc:
        raise RequestError(str(exc)) from None
    meta = json.loads(meta_b)
    cfg = st._config(meta, st.WEIGHTS)
    ops = meta["ops"]
    if not ops or ops[0].get("op") != "patch_embed":
        op = ops[0].get("op") if ops else None
        raise RequestError(
            "the data is a windows file, the model is not a window model (op 0 "
            "%r); send the rows of a row model" % op
        )
    if int(meta["n_features"]) != wf.C:
        raise RequestError("the windows have %d channels, the model %d" % (
            wf.C, meta["n_features"]))  # fmt: skip
    n_train = _field(cfg, "n_train", 1, wf.N, st.WEIGHTS)
    B = int(cfg["batch_size"])
    rows = _field(cfg, "rows", 1, B, st.WEIGHTS)
    shift = _field(cfg, "shift", 0, 32767, st.WEIGHTS)
    epochs = int(cfg["epochs"])
    av = cfg.get("average") or {}
    swa, ema = float(av.get("swa", 0.0)), float(av.get("ema", 0.0))
    state = st.optimizer_state(cfg, state, len(theta))
    try:
        averager = ats.Averager(epochs, swa, ema) if swa or ema else None
        if found and averager is None:
            raise ValueError("%s holds a weight average, the run has none" % st.WEIGHTS)
        if found:
            averager.value = found[0]
        net = ats.SeqNet(ops, wf.C, B, theta, False, rows)
        opt = at.optimizer(net, cfg["optimizer"], cfg["lr"], cfg["weight_decay"],
                           cfg["momentum"], tuple(state), step)  # fmt: skip
        labels = wf.labels()
        trainer = at.Trainer(net, opt, wf, memoryview(labels)[:n_train], epochs, cfg["lr"],
                             cfg["schedule"] == "cosine", cfg["label_smoothing"], step, None,
                             averager)  # fmt: skip
    except (ValueError, KeyError) as exc:
        raise RequestError("cannot train these ops: %s" % exc) from None
    run.update(meta=meta_b, run=meta.get("run"), cfg=cfg, theta=theta, state=state, opt=opt,
               trainer=trainer, X=wf, labels=labels, n_train=n_train, order=array("H", bytes(
                   2 * n_train)), seen=bytearray(n_train), last=None, average=averager,
               shift=shift, shifts=array("h", bytes(2 * n_train)) if shift else None,
               prep=epoch_shifts)  # fmt: skip
    gc.collect()
    return run


def epoch_shifts(st, run, req):
    """Set the net's time shifts for the epoch from the request's `shifts` (a run with
    augmentation needs them; one without refuses them)."""
    shifts = run["shifts"]
    if shifts is None:
        if "shifts" in req:
            raise RequestError("shifts: this run has no time-shift augmentation (meta 'train' "
                               "'shift' 0)")  # fmt: skip
        return
    if "shifts" not in req:
        raise RequestError(
            "shifts missing: this run shifts its windows by up to %d steps; send "
            "the epoch's shifts (int16 per order position, base64)" % run["shift"]
        )
    raw = st._b64(req, "shifts")
    n, lim = run["n_train"], run["shift"]
    if len(raw) != 2 * n:
        raise RequestError("shifts: expected %d bytes (%d windows x int16), got %d" % (
            2 * n, n, len(raw)))  # fmt: skip
    for i in range(n):
        v = raw[2 * i] | raw[2 * i + 1] << 8
        v = v - 65536 if v > 32767 else v
        if v < -lim or v > lim:
            raise RequestError("shifts: %d at position %d, outside -%d..%d" % (v, i, lim, lim))
        shifts[i] = v
    run["trainer"].net.shifts = shifts
