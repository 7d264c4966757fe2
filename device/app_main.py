# tinyattn app (Device, MicroPython): installed as main.py by `tinyattn flash --app`.
# At reset it reads the source named in app.json, classifies a sliding window every `hop`
# steps and prints one line per decision:
#     TA <ms since start> <class or uncertain> <score %> <µs of inference>
# Ctrl-C stops it and leaves the REPL. `tinyattn flash` without --app removes this file.
# A bad app.json or a missing sensor prints one "TA! ..." line and returns to the REPL.
import json
import time


def on_decision(stream):
    """Your hook, called after every decision: stream.label() (class name or "uncertain"),
    stream.smoothed (class index), stream.score (16384 = 100 %), stream.logits.
    Example: an LED on while the class is "Running"."""


def start(cfg):
    import gc

    from attention_source import feed, open_source, parse_source

    parse_source(cfg["source"], cfg.get("i2c"))  # a bad source is said before the model loads
    from attention import Model

    # the model before the source opens and the stream module is imported: they then fill
    # holes its load leaves (BasicMotions' app starts on every heap from 96 KiB up so, from
    # 99 KiB with the model loaded after them)
    gc.collect()  # what the imports left: the load's large buffers need whole spans
    model = Model(cfg.get("blob", "model.bin"), kernels=cfg.get("kernels", "auto"))
    gc.collect()
    source = open_source(cfg["source"], cfg.get("i2c"))  # i2c: [id, scl, sda] or None
    from attention_stream import Stream

    if source.C != model.n_features:
        raise ValueError("source gives %d values per step, the model takes %d"
                         % (source.C, model.n_features))  # fmt: skip
    hop = cfg.get("hop", 10)
    stream = Stream(model, hop, cfg.get("smooth", 1), cfg.get("threshold"), on_decision)
    return stream, source, feed, bytearray(4 * model.n_features * hop)


def main():
    try:
        with open("app.json") as f:
            cfg = json.load(f)
        stream, source, feed, buf = start(cfg)
    except Exception as exc:  # bad config, missing sensor or model: one line, REPL stays
        print("TA! app not started: %s" % (exc,))
        return
    names = stream.model.class_names
    print("TA+ hop=%d smooth=%d classes=%s" % (stream.hop, stream.smooth, ",".join(names)))
    t0 = time.ticks_ms()
    while True:
        made = feed(stream, source, buf)
        if made < 0:
            print("TA. end of source")
            return
        if made:
            ms = time.ticks_diff(time.ticks_ms(), t0)
            score = stream.score * 100 // 16384
            print("TA %d %s %d %d" % (ms, stream.label(), score, stream.us))


main()
