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
    X = as_sent(load_dataset("iris").rows[::10][:16])  # (16, 4): what a b64 batch delivers
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
    X = as_sent(load_dataset("iris").rows[:16])
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


def _read(server, line: bytes):
    """(text, payload) of one request line through the server's LineReader (a binary stream:
    the board's path, where a long base64 field stays in the line buffer)."""
    import io

    srv, _ = server
    reader = srv.LineReader(io.BytesIO(line + b"\n"), srv.MAX_LINE)
    return reader.readline(), reader.payload


@pytest.mark.host
def test_compact_batch_payload_decoded_in_place_answers_as_the_whole_line(server):
    """A 64-row batch (1368 base64 characters; xq: 344) read as on the board: the line comes back
    without its payload (a short str, the CRC field recomputed for it), the payload is decoded
    in the line buffer, and the reply is the one the whole line gets; xq (int8, negative
    values) too. A byte changed in the payload fails the CRC (with the id); a payload whose
    length is not a multiple of 4 is not base64."""
    from tinyattn.board.link import frame

    srv, model = server
    X = as_sent(load_dataset("iris").rows[:64])
    req = {"id": 7, "op": "batch", "path": "both", **b64_batch(X)}
    line = frame(req).rstrip(b"\n")
    want, _ = srv.handle_line(model, line.decode())
    text, payload = _read(server, line)
    assert payload is not None and payload.key == "f32" and len(text) < 120, text
    got, keep = srv.handle_line(model, text, payload)
    assert keep and got == want and got["ok"], got
    assert payload.n == 4 * X.size  # decoded in place: the line buffer holds the floats
    np.testing.assert_array_equal(np.asarray(payload.floats(X.size)), X.reshape(-1))
    xq = np.asarray(decode_b64_reply(want, len(X))["xq"], dtype=np.int8)
    assert xq.min() < 0
    xq_req = {"id": 8, "op": "batch", "path": "int8", "enc": "b64", "n": len(X),
              "xq": base64.b64encode(xq.tobytes()).decode()}  # fmt: skip
    line = frame(xq_req).rstrip(b"\n")
    text, payload = _read(server, line)
    assert payload is not None and payload.key == "xq"
    got, _ = srv.handle_line(model, text, payload)
    assert got["ok"] and got["logits_q"] == want["logits_q"], got
    bad = bytearray(frame(req).rstrip(b"\n"))
    at = bad.index(b'"f32":"') + 100
    bad[at] = ord("A") if bad[at] != ord("A") else ord("B")
    text, payload = _read(server, bytes(bad))
    got, _ = srv.handle_line(model, text, payload)
    assert not got["ok"] and "crc mismatch" in got["error"] and got["id"] == 7, got
    short = json.dumps({"op": "batch", "enc": "b64", "n": 64, "f32": "A" * 1365}).encode()
    text, payload = _read(server, short)
    got, _ = srv.handle_line(model, text, payload)
    assert not got["ok"] and "f32 is not valid base64" in got["error"], got


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
