# Host (CPython): compact (base64) batches — the server's decode/encode and the host's decoder.
"""`batch` with `enc: "b64"` (docs/protocol.md, Compact batches): float32 features or int8 `xq`
in, int8/int32/float32 arrays out. The server runs here under CPython (device/server.py is
CPython-clean) and over a serial link on a virtual board; both forms must give the same answers
as the JSON form on the same float32 features, and a malformed compact request gets an error
reply naming the field.
"""

from __future__ import annotations

import base64
import json
import sys

import numpy as np
import pytest

from tinyattn.board.link import as_sent, b64_batch, decode_b64_reply
from tinyattn.data.tabular import load_dataset
from tinyattn.paths import DEVICE_DIR


@pytest.fixture(scope="module")
def server(reference_model):
    sys.path.insert(0, str(DEVICE_DIR))
    try:
        import server as srv
        from attention import Model

        model = Model(str(reference_model["blob"]))
        srv._state.update(model=model, out=model.new_logits(),
                          blob=srv._blob_identity(str(reference_model["blob"])))  # fmt: skip
        yield srv, model
    finally:
        sys.path.remove(str(DEVICE_DIR))


def _ask(server, req: dict) -> dict:
    srv, model = server
    rep, keep = srv.handle_line(model, json.dumps(req))
    assert keep
    return rep


@pytest.mark.host
def test_compact_batch_equals_json_batch_on_the_same_float32_features(server):
    X = as_sent(load_dataset("iris").X[::10][:16])  # (16, 4): what a b64 batch delivers
    want = _ask(server, {"op": "batch", "samples": X.tolist(), "path": "both"})
    got = _ask(server, {"op": "batch", "path": "both", **b64_batch(X)})
    assert want["ok"] and got["ok"] and got["enc"] == "b64"
    dec = decode_b64_reply(got, len(X))
    assert dec["pred"] == want["pred"]
    assert dec["xq"] == want["xq"] and dec["logits_q"] == want["logits_q"]
    np.testing.assert_allclose(dec["logits"], want["logits"], rtol=1e-6, atol=1e-5)
    # int8 xq in (the host quantized): the same integer logits
    xq = np.asarray(want["xq"], dtype=np.int8)
    rep = _ask(server, {"op": "batch", "path": "int8", "enc": "b64", "n": len(X),
                        "xq": base64.b64encode(xq.tobytes()).decode()})  # fmt: skip
    assert rep["ok"] and decode_b64_reply(rep, len(X))["logits_q"] == want["logits_q"]


@pytest.mark.host
def test_compact_batch_is_smaller_on_the_wire(server):
    X = as_sent(load_dataset("iris").X[:16])
    as_json = json.dumps({"op": "batch", "samples": X.tolist()})
    as_b64 = json.dumps({"op": "batch", **b64_batch(X)})
    assert len(as_b64) < len(as_json) / 2, (len(as_b64), len(as_json))


@pytest.mark.host
@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({"n": 0, "f32": ""}, "n must be an integer from 1 to 64"),
        ({"n": 65, "f32": ""}, "n must be an integer from 1 to 64"),
        ({"n": 1}, "exactly one of 'f32' and 'xq'"),
        ({"n": 1, "f32": "AAAA", "xq": "AAAA"}, "exactly one of 'f32' and 'xq'"),
        ({"n": 1, "f32": base64.b64encode(bytes(12)).decode()}, "expected 16 bytes"),
        ({"n": 1, "f32": "!!!!"}, "f32"),
        ({"n": 1, "f32": 5}, "f32 must be a base64 string"),
        ({"n": 1, "xq": base64.b64encode(bytes(4)).decode()}, "int8 path only"),
        ({"n": 1, "path": "int8", "xq": base64.b64encode(bytes(3)).decode()}, "expected 4 int8"),
        (
            {
                "n": 1,
                "f32": base64.b64encode(np.array([np.nan, 0, 0, 0], "<f4").tobytes()).decode(),
            },
            "finite",
        ),  # fmt: skip
    ],
)
def test_compact_batch_malformed_requests_get_error_replies(server, fields, words):
    rep = _ask(server, {"op": "batch", "enc": "b64", **fields})
    assert rep["ok"] is False and words in rep["error"], rep
    rep = _ask(server, {"op": "batch", "enc": "xml", "samples": [[1, 2, 3, 4]]})
    assert rep["ok"] is False and "enc must be" in rep["error"]


@pytest.mark.host
def test_compact_reply_decoder_refuses_what_does_not_split_into_rows():
    logits_q = base64.b64encode(np.arange(6, dtype="<i4").tobytes()).decode()
    good = {"ok": True, "enc": "b64", "pred": [0, 1], "logits_q": logits_q}
    assert decode_b64_reply(good, 2)["logits_q"] == [[0, 1, 2], [3, 4, 5]]
    cut = dict(good, logits_q=base64.b64encode(np.arange(6, dtype="<i4").tobytes()[:-1]).decode())
    assert decode_b64_reply(cut, 2)["logits_q"] is None  # then parity halves the batch
    assert decode_b64_reply(dict(good, logits_q="@@"), 2)["logits_q"] is None


@pytest.mark.serial
@pytest.mark.parametrize("enc", ["b64", "json"])
def test_compact_parity_both_encodings_pass_on_the_board(flashed_port, reference_model, enc):
    from tinyattn.board.parity import parity

    data = load_dataset("iris")
    report = parity(flashed_port, reference_model["blob"], data.X, data.y, enc=enc, bench_n=0,
                    progress=False)  # fmt: skip
    s = report["summary"]
    assert s["passed"] and s["enc"] == enc and s["int8_exact"] == 150 and s["xq_match"] == 150
