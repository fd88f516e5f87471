#!/usr/bin/env python3
"""Builds channel-envelope.json: the ClientServer channel envelope (wire §4), written from the
layout in protocol/src/channel_envelope.rs without the Rust codec. Stdlib only, deterministic.

    python3 protocol/golden/build_channel_envelope.py
"""
import json
import os

MARKER = b"\xf2"
JSON_CT = "application/json; profile=framework-json-v1"


def header(obj):
    # Canonical: members in the documented order, no whitespace, UTF-8 kept as is.
    order = ["kind", "packetName", "contentType", "correlationId", "deadlineUnixMs",
             "errorCode", "errorDetail"]
    ordered = {k: obj[k] for k in order if k in obj}
    return MARKER + json.dumps(ordered, separators=(",", ":"), ensure_ascii=False).encode()


def raw(text):
    return MARKER + text.encode()


valid = [
    ("request-json-with-deadline",
     {"kind": "request", "packetName": "game.Echo", "contentType": JSON_CT,
      "correlationId": "17", "deadlineUnixMs": 1767225600000}, b'{"text":"hi"}'),
    ("request-no-content-type-no-deadline",
     {"kind": "request", "packetName": "lobby.Join", "correlationId": "c-1"}, b"\x01\x02"),
    ("response-json", {"kind": "response", "contentType": JSON_CT, "correlationId": "17"},
     b'{"text":"hi"}'),
    ("response-empty-payload", {"kind": "response", "correlationId": "17"}, b""),
    ("command-korean-packet-name",
     {"kind": "command", "packetName": "채팅.메시지", "contentType": "text/plain"},
     "안녕".encode()),
    ("error-handler-failed",
     {"kind": "error", "correlationId": "17", "errorCode": "handlerFailed",
      "errorDetail": "boom"}, b""),
    ("error-no-detail", {"kind": "error", "correlationId": "~!", "errorCode": "shuttingDown"},
     b""),
    # JSON escapes in the canonical header: quote, backslash, the short forms (\b \f \n \r
    # \t), other control characters as lowercase \u00xx, DEL and non-ASCII kept as is.
    ("error-detail-with-escapes",
     {"kind": "error", "correlationId": "17", "errorCode": "handlerFailed",
      "errorDetail": 'say "hi" \\ path\b\f\n\r\t\x01\x1f\x7f é \u2028'}, b""),
    ("command-packet-name-with-quote-and-backslash",
     {"kind": "command", "packetName": 'a"b\\c', "contentType": "text/plain"}, b"x"),
]

invalid = [
    ("one-frame", [header({"kind": "command", "packetName": "p"})], "WrongFrameCount"),
    ("three-frames", [header({"kind": "command", "packetName": "p"}), b"", b""],
     "WrongFrameCount"),
    ("service-wire-record-head", [b"\x5a\x4d\x01\x10\x00", b""], "BadMarker"),
    ("empty-header-frame", [b"", b""], "BadMarker"),
    ("header-8193-bytes",
     [raw('{"kind":"command","packetName":"p","contentType":"' + "x" * 8140 + '"}'), b""],
     "HeaderTooLarge"),
    ("not-json", [raw("{kind"), b""], "InvalidJson"),
    ("json-array", [raw("[]"), b""], "InvalidJson"),
    ("unknown-member", [raw('{"kind":"command","packetName":"p","x":1}'), b""], "InvalidJson"),
    ("duplicate-member", [raw('{"kind":"command","packetName":"p","packetName":"q"}'), b""],
     "InvalidJson"),
    ("null-member", [raw('{"kind":"command","packetName":null}'), b""], "InvalidJson"),
    ("unknown-kind", [raw('{"kind":"publish","packetName":"p"}'), b""], "InvalidJson"),
    ("deadline-negative", [raw('{"kind":"request","packetName":"p","correlationId":"1",'
                               '"deadlineUnixMs":-1}'), b""], "InvalidJson"),
    ("missing-kind", [raw('{"packetName":"p"}'), b""], "MissingField"),
    ("request-without-correlation", [header({"kind": "request", "packetName": "p"}), b""],
     "MissingField"),
    ("command-without-packet-name", [header({"kind": "command"}), b""], "MissingField"),
    ("error-without-code", [header({"kind": "error", "correlationId": "1"}), b""],
     "MissingField"),
    ("command-with-correlation",
     [header({"kind": "command", "packetName": "p", "correlationId": "1"}), b""],
     "FieldNotAllowed"),
    ("response-with-packet-name",
     [header({"kind": "response", "packetName": "p", "correlationId": "1"}), b""],
     "FieldNotAllowed"),
    ("error-with-content-type",
     [header({"kind": "error", "contentType": "t", "correlationId": "1",
              "errorCode": "unavailable"}), b""], "FieldNotAllowed"),
    ("request-with-error-code",
     [header({"kind": "request", "packetName": "p", "correlationId": "1",
              "errorCode": "unavailable"}), b""], "FieldNotAllowed"),
    ("packet-name-empty", [header({"kind": "command", "packetName": ""}), b""], "OutOfBounds"),
    ("packet-name-256-bytes", [header({"kind": "command", "packetName": "p" * 256}), b""],
     "OutOfBounds"),
    ("deadline-zero",
     [header({"kind": "request", "packetName": "p", "correlationId": "1",
              "deadlineUnixMs": 0}), b""], "OutOfBounds"),
    ("error-detail-4097-bytes",
     [header({"kind": "error", "correlationId": "1", "errorCode": "unavailable",
              "errorDetail": "d" * 4097}), b""], "OutOfBounds"),
    ("correlation-with-space",
     [header({"kind": "response", "correlationId": "a b"}), b""], "InvalidCorrelationId"),
    ("correlation-65-bytes",
     [header({"kind": "response", "correlationId": "c" * 65}), b""], "InvalidCorrelationId"),
    ("correlation-empty", [header({"kind": "response", "correlationId": ""}), b""],
     "InvalidCorrelationId"),
    ("error-code-ok",
     [header({"kind": "error", "correlationId": "1", "errorCode": "ok"}), b""],
     "UnknownErrorCode"),
    ("error-code-unknown",
     [header({"kind": "error", "correlationId": "1", "errorCode": "teapot"}), b""],
     "UnknownErrorCode"),
    ("error-with-payload",
     [header({"kind": "error", "correlationId": "1", "errorCode": "unavailable"}), b"x"],
     "PayloadNotAllowed"),
]

assert len(invalid[4][1][0]) == 8193, len(invalid[4][1][0])

doc = {
    "description": "ClientServer channel envelope (wire §4): frame 0 = F2 + canonical JSON "
                   "header, frame 1 = payload. Built by build_channel_envelope.py.",
    "valid": [{"name": n, "frames": [header(h).hex(), p.hex()], "decoded": h}
              for n, h, p in valid],
    "invalid": [{"name": n, "frames": [f.hex() for f in fs], "error": e}
                for n, fs, e in invalid],
}
path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "channel-envelope.json")
with open(path, "w", encoding="utf-8") as f:
    json.dump(doc, f, ensure_ascii=False, indent=2)
    f.write("\n")
