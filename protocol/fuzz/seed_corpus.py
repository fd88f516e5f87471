#!/usr/bin/env python3
"""Seed the cargo-fuzz corpora from the golden fixtures (valid and malformed inputs alike).

Coverage-guided fuzzing starting from real records reaches the command body decoders at once
instead of first having to guess the 5A 4D 01 head and a valid command id. Called by
scripts/fuzz; safe to run repeatedly (file names are content hashes).

    python3 protocol/fuzz/seed_corpus.py
"""
import hashlib
import json
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent
GOLDEN = ROOT.parent / "golden"
CORPUS = ROOT / "corpus"


def put(target: str, data: bytes) -> None:
    d = CORPUS / target
    d.mkdir(parents=True, exist_ok=True)
    (d / hashlib.sha1(data).hexdigest()).write_bytes(data)


def record_input(frames: list[bytes]) -> bytes:
    # record_decode layout: count byte ((n - 1) % 4), then u16-length-prefixed frames.
    out = bytearray([(len(frames) - 1) % 4])
    for f in frames[:4]:
        f = f[:0xFFFF]
        out += len(f).to_bytes(2, "big") + f
    return bytes(out)


def items(doc: dict):
    yield from doc.get("valid", [])
    yield from doc.get("invalid", [])


def main() -> None:
    n = 0
    for path in sorted((GOLDEN / "commands").glob("*.json")) + [GOLDEN / "records-invalid.json"]:
        for item in items(json.loads(path.read_text())):
            frames = [bytes.fromhex(f) for f in item["frames"]]
            if frames:
                put("record_decode", record_input(frames))
                n += 1
    for path in sorted((GOLDEN / "durable").glob("*.json")):
        for item in items(json.loads(path.read_text())):
            blob = bytes.fromhex(item["hex"])
            if len(blob) <= 65536:
                put("record_decode", blob)
                n += 1
    for name, target in [("stream.json", "stream_decode"), ("metadata.json", "metadata_decode"),
                         ("multipart.json", "multipart_decode")]:
        for item in items(json.loads((GOLDEN / name).read_text())):
            data = bytes.fromhex(item["hex"])
            if target == "stream_decode":
                data = bytes([len(data) // 2 % 256]) + data  # byte 0 = split point
                # stream_session: one read of the fixture (op 0, length), then write it all out.
                if len(data) <= 256:
                    put("stream_session", bytes([0, len(data) - 1]) + data[1:] + bytes([7, 255]))
                    n += 1
            put(target, data)
            n += 1
    doc = json.loads((GOLDEN / "channel-envelope.json").read_text())
    for item in doc["valid"] + doc["invalid"]:
        frames = [bytes.fromhex(f) for f in item["frames"]]
        if len(frames) == 2 and len(frames[0]) < 65536:
            put("channel_envelope_decode", len(frames[0]).to_bytes(2, "big") + frames[0] + frames[1])
            n += 1
    print(f"seeded {n} corpus inputs under {CORPUS}")


if __name__ == "__main__":
    main()
