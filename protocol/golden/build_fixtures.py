#!/usr/bin/env python3
"""Golden fixture builder for the zlink service wire v1 (stdlib only).

This is an *independent second implementation* of the wire encoding, written straight from
the conventions of the normative schema (protocol/schema/service-wire-v1.schema.json).  It
does not use, import or run the Rust codec.  It contains:

* a schema-driven encoder (record frames, metadata frame, typed payload envelope, durable
  formats, CRC-32C);
* a schema-driven reference decoder that every fixture is checked against before it is
  written: every valid fixture must decode back to exactly its `decoded` value, and every
  invalid fixture must fail with exactly its declared `error` (a ProtocolError kind);
* a handful of byte strings assembled by hand (see `hand_assembled_checks`) that pin the
  generic encoder to the byte rules independently of the schema walker;
* the fixture definitions themselves (realistic values, hand-written malformed mutations).

Run from anywhere:  python3 protocol/golden/build_fixtures.py
Output (deterministic, re-running gives identical files):
  protocol/golden/commands/NN-<name>.json   (one per command)
  protocol/golden/records-invalid.json
  protocol/golden/durable/<format-name>.json
  protocol/golden/{metadata,envelope,multipart,stream,fanout,keys}.json   (module fixture sets,
      written from the module docs of protocol/src/<module>.rs, with their own reference decoders)
See protocol/golden/README.md for the file format.
"""

import copy
import hashlib
import json
import os
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SCHEMA_PATH = os.path.normpath(os.path.join(HERE, "..", "schema", "service-wire-v1.schema.json"))

with open(SCHEMA_PATH, encoding="utf-8") as _f:
    SCHEMA = json.load(_f)

TYPES = {t["name"]: t for t in SCHEMA["types"]}
LIMITS = SCHEMA["limits"]
COMMANDS = {c["name"]: c for c in SCHEMA["commands"]}
COMMANDS_BY_ID = {c["id"]: c for c in SCHEMA["commands"]}
DURABLES = {d["name"]: d for d in SCHEMA["durableFormats"]}
FLAG_BY_NAME = {f["name"]: f["bit"] for f in SCHEMA["flags"]}
FLAG_TAIL = {f["bit"]: f.get("tail") for f in SCHEMA["flags"]}
DEFINED_FLAG_BITS = 0
for _fl in SCHEMA["flags"]:
    DEFINED_FLAG_BITS |= _fl["bit"]
RESERVED_IDS = set()
for _r in SCHEMA["reservedCommandIds"]:
    RESERVED_IDS.update(range(_r["from"], _r["to"] + 1))
MAGIC = bytes.fromhex(SCHEMA["magic"])
WIRE_MAJOR = SCHEMA["wireMajor"]
WIDTH = {"u8": 1, "u16": 2, "u32": 4, "u64": 8}
METADATA_LIMIT = LIMITS["metadataFrameBytes"]
PAYLOAD_LIMIT = LIMITS["applicationPayloadAbsoluteBytes"]

# Tail keys of the decoded JSON, in flag-bit order.
TAIL_KEYS = [(2, "boundSession"), (4, "sourceSpotId"), (8, "extension")]

# Error reported when the record's leg contradicts a `legFromField` constraint (instanceSpot
# operationKind).  The schema conventions say "Violations are ConstraintViolated"; the fixture
# brief asks for WrongLeg.  See README "Assumptions".
LEG_FROM_FIELD_ERROR = "WrongLeg"


# ---------------------------------------------------------------------------------------------
# CRC-32C (Castagnoli), reflected, init 0xFFFFFFFF, xorout 0xFFFFFFFF, table driven.
# ---------------------------------------------------------------------------------------------

def _crc32c_table():
    poly = 0x82F63B78  # reflected 0x1EDC6F41
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ poly if c & 1 else c >> 1
        table.append(c)
    return table


CRC32C_TABLE = _crc32c_table()


def crc32c(data):
    c = 0xFFFFFFFF
    t = CRC32C_TABLE
    for b in data:
        c = t[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


assert crc32c(b"123456789") == 0xE3069283, "CRC-32C check value"
assert crc32c(b"") == 0


# ---------------------------------------------------------------------------------------------
# Schema resolution
# ---------------------------------------------------------------------------------------------

def uint(width, v):
    return int(v).to_bytes(width, "big")


class Raw:
    """Verbatim bytes that replace the normal encoding of a field/tail/frame (for mutations)."""

    def __init__(self, b):
        self.b = bytes(b)

    def __deepcopy__(self, memo):
        return self


def _prim(d):
    t = d["type"]
    if t in WIDTH or t == "nonzero-u64":
        width = 8 if t == "nonzero-u64" else WIDTH[t]
        if "max" in d:
            mx = d["max"]
        elif "$bound" in d:
            mx = LIMITS[d["$bound"]]
        else:
            mx = (1 << (8 * width)) - 1
        return {"kind": "int", "width": width, "nonzero": t == "nonzero-u64",
                "min": d.get("min", 0), "max": mx, "const": d.get("const")}
    if t == "bool":
        return {"kind": "bool"}
    if t in ("string", "ascii", "bytes"):
        pw = WIDTH[d["lengthType"]]
        pmax = (1 << (8 * pw)) - 1
        if "maxBytes" in d:
            mx = d["maxBytes"]
        elif "$bound" in d:
            mx = LIMITS[d["$bound"]]
        else:
            mx = pmax
        return {"kind": t, "prefix": pw, "min": d.get("minBytes", 0), "max": min(mx, pmax)}
    if t == "fixed":
        return {"kind": "fixed", "size": d["size"], "nonZero": bool(d.get("nonZero"))}
    if t == "vector":
        pw = WIDTH[d["countType"]]
        pmax = (1 << (8 * pw)) - 1
        if "maxCount" in d:
            mx = d["maxCount"]
        elif "$bound" in d:
            mx = LIMITS[d["$bound"]]
        else:
            mx = pmax
        return {"kind": "vector", "prefix": pw, "min": d.get("minCount", 0), "max": min(mx, pmax),
                "item": d["item"]}
    raise ValueError("unknown primitive type %r" % t)


def resolve(field):
    """Normalise a field (or vector item) declaration into an encoding spec."""
    if "durable" in field:
        return {"kind": "durable", "format": field["durable"], "prefix": WIDTH[field["lengthType"]]}
    if "$ref" in field:
        t = TYPES[field["$ref"]]
        if t["kind"] == "scalar":
            base = {k: v for k, v in t.items() if k not in ("name", "kind", "description")}
            base.update({k: v for k, v in field.items()
                         if k not in ("name", "$ref", "when", "description")})
            return _prim(base)
        if t["kind"] == "enum":
            return {"kind": "enum", "type": t["name"],
                    "byName": {v["name"]: v["value"] for v in t["values"]},
                    "byValue": {v["value"]: v["name"] for v in t["values"]}}
        if t["kind"] == "struct":
            return {"kind": "struct", "type": t["name"], "fields": t["fields"],
                    "constraints": t.get("constraints", []),
                    "prefix": WIDTH[field["lengthType"]] if "lengthType" in field else None,
                    "max": LIMITS[field["$bound"]] if "$bound" in field else None}
        if t["kind"] == "union":
            assert t["tagType"] == "u8"
            return {"kind": "union", "type": t["name"], "prefix": WIDTH[t["lengthType"]],
                    "byName": {c["name"]: c for c in t["cases"]},
                    "byTag": {c["tag"]: c for c in t["cases"]}}
        raise ValueError("unknown type kind %r" % t["kind"])
    return _prim(field)


def min_size_fields(fields):
    return sum(min_size(f) for f in fields if "when" not in f)


def min_size(field):
    """Smallest possible encoding of a field (used for the CountExceedsRemaining guard)."""
    s = resolve(field)
    k = s["kind"]
    if k == "int":
        return s["width"]
    if k in ("bool", "enum"):
        return 1
    if k in ("string", "ascii", "bytes"):
        return s["prefix"] + s["min"]
    if k == "fixed":
        return s["size"]
    if k == "vector":
        return s["prefix"] + s["min"] * min_size(s["item"])
    if k == "struct":
        return (s["prefix"] or 0) + min_size_fields(s["fields"])
    if k == "union":
        return 1 + s["prefix"] + min(min_size_fields(c["fields"]) for c in s["byTag"].values())
    if k == "durable":
        fmt = DURABLES[s["format"]]
        trailer = 4 if fmt["checksum"] == "crc32c-trailer" else 0
        return s["prefix"] + 5 + min_size_fields(fmt["fields"]) + trailer
    raise ValueError(k)


# ---------------------------------------------------------------------------------------------
# Encoder
# ---------------------------------------------------------------------------------------------

def _bytes_of(value):
    if isinstance(value, str):
        return bytes.fromhex(value)
    return bytes(value)


def enc_field(field, value):
    if isinstance(value, Raw):
        return value.b
    s = resolve(field)
    k = s["kind"]
    if k == "int":
        return uint(s["width"], value)
    if k == "bool":
        if value is True:
            return b"\x01"
        if value is False:
            return b"\x00"
        return bytes([value])
    if k in ("string", "ascii"):
        b = value.encode("utf-8") if isinstance(value, str) else bytes(value)
        return uint(s["prefix"], len(b)) + b
    if k == "bytes":
        b = _bytes_of(value)
        return uint(s["prefix"], len(b)) + b
    if k == "fixed":
        return _bytes_of(value)
    if k == "vector":
        return uint(s["prefix"], len(value)) + b"".join(enc_field(s["item"], it) for it in value)
    if k == "enum":
        return bytes([s["byName"][value] if isinstance(value, str) else value])
    if k == "struct":
        body = enc_struct(s["fields"], value)
        if s["prefix"] is not None:
            return uint(s["prefix"], len(body)) + body
        return body
    if k == "union":
        case = s["byName"][value["kind"]]
        body = enc_struct(case["fields"], {a: b for a, b in value.items() if a != "kind"})
        return bytes([case["tag"]]) + uint(s["prefix"], len(body)) + body
    if k == "durable":
        body = encode_durable(s["format"], value)
        return uint(s["prefix"], len(body)) + body
    raise ValueError(k)


def when_holds(field, values):
    w = field.get("when")
    return w is None or values.get(w["field"]) == w["equals"]


def enc_struct(fields, values):
    out = b""
    for f in fields:
        name = f["name"]
        if name in values:
            # A value given for a `when` field whose condition is false is still written
            # (that is how the "present although absent" mutations are built).
            out += enc_field(f, values[name])
        elif "const" in f:
            out += enc_field(f, f["const"])
        elif when_holds(f, values):
            raise KeyError("missing field %r" % name)
    return out


def enc_type(type_name, value):
    return enc_struct(TYPES[type_name]["fields"], value)


def encode_metadata(entries):
    out = uint(2, len(entries))
    for k, v in entries:
        kb = k.encode("utf-8") if isinstance(k, str) else bytes(k)
        vb = v.encode("utf-8") if isinstance(v, str) else bytes(v)
        out += uint(2, len(kb)) + kb + uint(2, len(vb)) + vb
    return out


def encode_payload(p):
    name = p["packetName"].encode("utf-8") if isinstance(p["packetName"], str) else p["packetName"]
    ct = p["contentType"].encode("utf-8") if isinstance(p["contentType"], str) else p["contentType"]
    data = _bytes_of(p["payload"])
    return uint(1, len(name)) + name + uint(1, len(ct)) + ct + uint(4, len(data)) + data


def encode_record(decoded, flags=None, extra0=b""):
    """Encode a decoded record into its frames.

    flags overrides the flag byte computed from the present keys; extra0 is appended to frame 0.
    Values may contain Raw objects (verbatim bytes) for mutations.
    """
    cmd = COMMANDS[decoded["command"]]
    f = 0
    if "metadata" in decoded:
        f |= FLAG_BY_NAME["metadata"]
    for bit, key in TAIL_KEYS:
        if key in decoded:
            f |= bit
    if flags is not None:
        f = flags
    f0 = MAGIC + bytes([WIRE_MAJOR, cmd["id"], f]) + enc_struct(cmd["body"], decoded["body"])
    for bit, key in TAIL_KEYS:
        if key in decoded:
            v = decoded[key]
            if isinstance(v, Raw):
                f0 += v.b
            else:
                f0 += bytes([bit]) + enc_type(FLAG_TAIL[bit], v)
    f0 += extra0
    frames = [f0]
    if "metadata" in decoded:
        m = decoded["metadata"]
        frames.append(m.b if isinstance(m, Raw) else encode_metadata(m))
    if "payload" in decoded:
        p = decoded["payload"]
        frames.append(p.b if isinstance(p, Raw) else encode_payload(p))
    return frames


def durable_content(fmt_name, values, version=None, magic=None):
    """Magic + version + fields (no trailer)."""
    fmt = DURABLES[fmt_name]
    m = bytes.fromhex(fmt["magic"]) if magic is None else magic
    v = fmt["version"] if version is None else version
    return m + bytes([v]) + enc_struct(fmt["fields"], values)


def seal(fmt_name, content):
    """Append the CRC-32C trailer of all preceding bytes when the format has one."""
    if DURABLES[fmt_name]["checksum"] == "crc32c-trailer":
        return content + uint(4, crc32c(content))
    return content


def encode_durable(fmt_name, values, version=None, magic=None):
    return seal(fmt_name, durable_content(fmt_name, values, version, magic))


# ---------------------------------------------------------------------------------------------
# Reference decoder (used only to check the fixtures before writing them)
# ---------------------------------------------------------------------------------------------

COVER = None  # set of covered union cases / `when` branches, collected while checking valid fixtures


class PErr(Exception):
    def __init__(self, kind, where):
        super().__init__("%s at %s" % (kind, where))
        self.kind = kind
        self.where = where


class Reader:
    def __init__(self, buf):
        self.buf = bytes(buf)
        self.pos = 0

    def remaining(self):
        return len(self.buf) - self.pos

    def take(self, n, where):
        if n > self.remaining():
            raise PErr("Incomplete", where)
        out = self.buf[self.pos:self.pos + n]
        self.pos += n
        return out

    def uint(self, width, where):
        return int.from_bytes(self.take(width, where), "big")

    def peek(self):
        return self.buf[self.pos] if self.remaining() else None

    def finish(self, where):
        if self.remaining():
            raise PErr("TrailingBytes", where)


def _utf8(b, where):
    try:
        return b.decode("utf-8")
    except UnicodeDecodeError:
        raise PErr("InvalidUtf8", where)


def dec_field(r, field, where):
    s = resolve(field)
    k = s["kind"]
    if k == "int":
        v = r.uint(s["width"], where)
        if s["const"] is not None and v != s["const"]:
            raise PErr("UnsupportedVersion" if field.get("name") == "version" else "ConstraintViolated", where)
        if s["nonzero"] and v == 0:
            raise PErr("ZeroValue", where)
        if v < s["min"] or v > s["max"]:
            raise PErr("OutOfBounds", where)
        return v
    if k == "bool":
        b = r.take(1, where)[0]
        if b not in (0, 1):
            raise PErr("UnknownEnumValue", where)
        return b == 1
    if k in ("string", "ascii", "bytes"):
        n = r.uint(s["prefix"], where)
        if n < s["min"] or n > s["max"]:
            raise PErr("OutOfBounds", where)
        b = r.take(n, where)
        if k == "bytes":
            return b.hex()
        if k == "ascii":
            if any(not (0x21 <= c <= 0x7E) for c in b):
                raise PErr("InvalidAscii", where)
            return b.decode("ascii")
        return _utf8(b, where)
    if k == "fixed":
        b = r.take(s["size"], where)
        if s["nonZero"] and not any(b):
            raise PErr("ZeroValue", where)
        return b.hex()
    if k == "vector":
        n = r.uint(s["prefix"], where)
        if n < s["min"] or n > s["max"]:
            raise PErr("OutOfBounds", where)
        if n * max(1, min_size(s["item"])) > r.remaining():
            raise PErr("CountExceedsRemaining", where)
        return [dec_field(r, s["item"], "%s[%d]" % (where, i)) for i in range(n)]
    if k == "enum":
        v = r.take(1, where)[0]
        if v not in s["byValue"]:
            raise PErr("UnknownEnumValue", where)
        return s["byValue"][v]
    if k == "struct":
        if s["prefix"] is not None:
            n = r.uint(s["prefix"], where)
            if s["max"] is not None and n > s["max"]:
                raise PErr("OutOfBounds", where)
            sub = Reader(r.take(n, where))
            v = dec_struct(sub, s["fields"], s["constraints"], where)
            sub.finish(where)
            return v
        return dec_struct(r, s["fields"], s["constraints"], where)
    if k == "union":
        tag = r.take(1, where + ".tag")[0]
        if tag not in s["byTag"]:
            raise PErr("UnknownEnumValue", where + ".tag")
        case = s["byTag"][tag]
        n = r.uint(s["prefix"], where + ".length")
        sub = Reader(r.take(n, where + ".body"))
        body = dec_struct(sub, case["fields"], case.get("constraints", []), where + "." + case["name"])
        if COVER is not None:
            COVER.add(("union", s["type"], case["name"]))
        sub.finish(where + ".body")
        out = {"kind": case["name"]}
        out.update(body)
        return out
    if k == "durable":
        n = r.uint(s["prefix"], where)
        blob = r.take(n, where)
        return decode_durable(s["format"], blob)
    raise ValueError(k)


def check_constraints(constraints, values, where):
    for c in constraints:
        kind = c["kind"]
        if kind == "notAllZero":
            if all(values[f] == 0 for f in c["fields"]):
                raise PErr("ConstraintViolated", where + ": " + c["description"])
        elif kind == "sameObject":
            a, b = (values[f] for f in c["fields"])
            if (a["objectKind"], a["objectId"]) != (b["objectKind"], b["objectId"]):
                raise PErr("ConstraintViolated", where + ": " + c["description"])
        elif kind == "objectKind":
            if values[c["field"]]["objectKind"] != c["equals"]:
                raise PErr("ConstraintViolated", where + ": " + c["description"])
        elif kind == "legFromField":
            pass  # needs the record's leg; checked by decode_record
        else:
            raise ValueError("unknown constraint kind %r" % kind)


def dec_struct(r, fields, constraints, where):
    out = {}
    for f in fields:
        if "when" in f and COVER is not None:
            COVER.add(("when", f["name"], f["when"]["field"], when_holds(f, out)))
        if not when_holds(f, out):
            continue
        v = dec_field(r, f, where + "." + f["name"])
        if "const" not in f:
            out[f["name"]] = v
    check_constraints(constraints, out, where)
    return out


def decode_metadata(frame):
    if len(frame) > METADATA_LIMIT:
        raise PErr("MetadataTooLarge", "metadata")
    r = Reader(frame)
    n = r.uint(2, "metadata.count")
    if n * 5 > r.remaining():
        raise PErr("CountExceedsRemaining", "metadata.count")
    entries = []
    for i in range(n):
        kl = r.uint(2, "metadata.key_len")
        if kl < 1:
            raise PErr("OutOfBounds", "metadata.key_len")
        kb = r.take(kl, "metadata.key")
        key = _utf8(kb, "metadata.key")
        if b"\x00" in kb:
            raise PErr("MetadataNul", "key")
        vl = r.uint(2, "metadata.value_len")
        vb = r.take(vl, "metadata.value")
        value = _utf8(vb, "metadata.value")
        if b"\x00" in vb:
            raise PErr("MetadataNul", "value")
        entries.append([key, value])
    r.finish("metadata frame")
    return entries


def decode_payload(frame):
    r = Reader(frame)
    name = _utf8(r.take(r.uint(1, "packetName"), "packetName"), "packetName")
    ct = _utf8(r.take(r.uint(1, "contentType"), "contentType"), "contentType")
    n = r.uint(4, "payload_len")
    if n > PAYLOAD_LIMIT:
        raise PErr("OutOfBounds", "payload_len")
    data = r.take(n, "payload")
    r.finish("typed payload envelope")
    return {"packetName": name, "contentType": ct, "payload": data.hex()}


def decode_record(frames, topology, leg):
    if not frames:
        raise PErr("WrongFrameCount", "record")
    r = Reader(frames[0])
    if r.take(2, "magic") != MAGIC:
        raise PErr("BadMagic", "record")
    major = r.uint(1, "major")
    if major != WIRE_MAJOR:
        raise PErr("UnsupportedVersion", "record")
    cid = r.uint(1, "command")
    if cid in RESERVED_IDS:
        raise PErr("ReservedCommand", "command")
    if cid not in COMMANDS_BY_ID:
        raise PErr("UnknownCommand", "command")
    cmd = COMMANDS_BY_ID[cid]
    flags = r.uint(1, "flags")
    if flags & ~DEFINED_FLAG_BITS:
        raise PErr("UndefinedFlags", cmd["name"])
    allowed = 0
    for n in cmd["flags"]:
        allowed |= FLAG_BY_NAME[n]
    if flags & ~allowed:
        raise PErr("FlagNotAllowed", cmd["name"])
    if topology not in cmd["topologies"]:
        raise PErr("TopologyNotAllowed", cmd["name"])
    if leg not in cmd["legs"]:
        raise PErr("WrongLeg", cmd["name"])
    has_meta = 1 if flags & FLAG_BY_NAME["metadata"] else 0
    lo = 1 + has_meta + (1 if cmd["payload"] == "required" else 0)
    hi = 1 + has_meta + (0 if cmd["payload"] == "none" else 1)
    if not (lo <= len(frames) <= hi):
        raise PErr("WrongFrameCount", cmd["name"])
    body = dec_struct(r, cmd["body"], cmd.get("constraints", []), cmd["name"])
    for c in cmd.get("constraints", []):
        if c["kind"] == "legFromField" and c["map"][body[c["field"]]] != leg:
            raise PErr(LEG_FROM_FIELD_ERROR, cmd["name"])
    out = {"command": cmd["name"], "body": body}
    tails = {}
    for bit, key in TAIL_KEYS:
        if flags & bit:
            if r.peek() != bit:
                raise PErr("ConditionalTailMismatch", "%s tail 0x%02x" % (cmd["name"], bit))
            r.take(1, "tail tag")
            t = TYPES[FLAG_TAIL[bit]]
            tails[key] = dec_struct(r, t["fields"], t.get("constraints", []), key)
    r.finish("frame 0")
    if has_meta:
        out["metadata"] = decode_metadata(frames[1])
    if len(frames) > 1 + has_meta:
        out["payload"] = decode_payload(frames[1 + has_meta])
    out.update(tails)
    return out


def decode_durable(fmt_name, blob):
    fmt = DURABLES[fmt_name]
    if "$bound" in fmt and len(blob) > LIMITS[fmt["$bound"]]:
        raise PErr("OutOfBounds", fmt_name + " size")
    r = Reader(blob)
    if r.take(4, fmt_name + ".magic") != bytes.fromhex(fmt["magic"]):
        raise PErr("BadMagic", fmt_name)
    if r.uint(1, fmt_name + ".version") != fmt["version"]:
        raise PErr("UnsupportedVersion", fmt_name)
    out = dec_struct(r, fmt["fields"], fmt.get("constraints", []), fmt_name)
    if fmt["checksum"] == "crc32c-trailer":
        end = r.pos
        declared = r.uint(4, fmt_name + ".crc32c")
        if declared != crc32c(blob[:end]):
            raise PErr("ChecksumMismatch", fmt_name)
    elif fmt["checksum"] != "none":
        raise ValueError(fmt["checksum"])
    r.finish(fmt_name)
    return out


# ---------------------------------------------------------------------------------------------
# Fixture machinery
# ---------------------------------------------------------------------------------------------

def canon(x):
    return json.dumps(x, sort_keys=True, ensure_ascii=False)


FIX = {c["name"]: {"valid": [], "invalid": []} for c in SCHEMA["commands"]}
RECORDS_INVALID = []
DUR = {d["name"]: {"valid": [], "invalid": []} for d in SCHEMA["durableFormats"]}
_NAMES = set()
COVERED = set()


def _unique(scope, name):
    key = (scope, name)
    assert key not in _NAMES, "duplicate fixture name %r in %s" % (name, scope)
    _NAMES.add(key)


def default_leg(cmd_name):
    return COMMANDS[cmd_name]["legs"][0]


def valid(name, decoded, topology="routeMesh", leg=None):
    """Encode `decoded`, check the reference decoder round-trips it, record the fixture."""
    cmd = decoded["command"]
    leg = leg or default_leg(cmd)
    _unique(cmd, name)
    frames = encode_record(decoded)
    global COVER
    COVER = COVERED
    try:
        got = decode_record(frames, topology, leg)
    except PErr as e:
        raise AssertionError("valid fixture %s/%s does not decode: %s" % (cmd, name, e))
    finally:
        COVER = None
    assert canon(got) == canon(decoded), "round trip mismatch %s/%s:\n%s\n%s" % (
        cmd, name, canon(got), canon(decoded))
    # Re-encoding the decoded value must reproduce the frames byte for byte (canonical form).
    assert encode_record(got) == frames
    FIX[cmd]["valid"].append({"name": name, "topology": topology, "leg": leg,
                              "frames": [f.hex() for f in frames], "decoded": got})
    return frames


def invalid(cmd, name, error, frames, topology="routeMesh", leg=None, target=None):
    """Record a malformed record; the reference decoder must reject it with exactly `error`."""
    leg = leg or default_leg(cmd)
    scope = "records-invalid" if target is RECORDS_INVALID else cmd
    _unique(scope, name)
    try:
        got = decode_record(frames, topology, leg)
    except PErr as e:
        assert e.kind == error, "invalid fixture %s/%s: expected %s, reference decoder says %s (%s)" % (
            scope, name, error, e.kind, e.where)
    else:
        raise AssertionError("invalid fixture %s/%s decodes: %s" % (scope, name, canon(got)))
    item = {"name": name, "topology": topology, "leg": leg,
            "frames": [f.hex() for f in frames], "error": error}
    (RECORDS_INVALID if target is RECORDS_INVALID else FIX[cmd]["invalid"]).append(item)


def bad(name, error, decoded, topology="routeMesh", leg=None, flags=None, extra0=b"",
        patch=None, target=None):
    """Encode a (mutated) decoded value and record it as invalid; patch(frames) -> frames."""
    frames = encode_record(decoded, flags=flags, extra0=extra0)
    if patch is not None:
        frames = patch(frames)
    invalid(decoded["command"], name, error, frames, topology, leg, target)


def dvalid(fmt, name, decoded):
    _unique(fmt, name)
    blob = encode_durable(fmt, decoded)
    global COVER
    COVER = COVERED
    try:
        got = decode_durable(fmt, blob)
    finally:
        COVER = None
    assert canon(got) == canon(decoded), "durable round trip %s/%s" % (fmt, name)
    assert encode_durable(fmt, got) == blob
    DUR[fmt]["valid"].append({"name": name, "hex": blob.hex(), "decoded": got})
    return blob


def dinvalid(fmt, name, error, blob):
    _unique(fmt, name)
    try:
        got = decode_durable(fmt, blob)
    except PErr as e:
        assert e.kind == error, "durable %s/%s: expected %s, reference decoder says %s (%s)" % (
            fmt, name, error, e.kind, e.where)
    else:
        raise AssertionError("invalid durable %s/%s decodes: %s" % (fmt, name, canon(got)[:200]))
    DUR[fmt]["invalid"].append({"name": name, "hex": blob.hex(), "error": error})


def with_(d, path, value):
    """Deep copy of d with d[path] = value (path is dotted; list indices are numbers)."""
    d = copy.deepcopy(d)
    keys = path.split(".")
    cur = d
    for k in keys[:-1]:
        cur = cur[int(k)] if isinstance(cur, list) else cur[k]
    last = keys[-1]
    if isinstance(cur, list):
        cur[int(last)] = value
    elif value is DELETE:
        del cur[last]
    else:
        cur[last] = value
    return d


DELETE = object()


def without(d, *keys):
    d = copy.deepcopy(d)
    for k in keys:
        del d[k]
    return d


def set_header(frames, magic=None, major=None, cmd_id=None, flags=None):
    f0 = bytearray(frames[0])
    if magic is not None:
        f0[0:2] = magic
    if major is not None:
        f0[2] = major
    if cmd_id is not None:
        f0[3] = cmd_id
    if flags is not None:
        f0[4] = flags
    return [bytes(f0)] + list(frames[1:])


def field_bytes(field_decl_or_ref, value):
    if isinstance(field_decl_or_ref, str):
        field_decl_or_ref = {"$ref": field_decl_or_ref}
    return enc_field(field_decl_or_ref, value)


def lp32(b):
    return uint(4, len(b)) + b


def sha(label):
    return hashlib.sha256(label.encode("utf-8")).hexdigest()


# ---------------------------------------------------------------------------------------------
# Realistic values
# ---------------------------------------------------------------------------------------------

RID_ZONE = "zone-7f0c2b1e-4d3a-4f8e-9b21-6c5d4e3f2a10"
RID_LOBBY = "lobby-3c9a51d2-88e7-4b0c-a1f4-0e2d7b6c5a98"
RID_BATTLE = "battle-e4b7c0a9-1f23-4c56-8d9e-a0b1c2d3e4f5"
RID_KR = "서울-게임서버-01"  # manual RID, non-ASCII
RID_CLIENT = "client-0d4f6a2b-9c1e-4b7a-8f3d-2e5c7a9b1d06"

LG_ZONE = 0x1F2E3D4C5B6A7988
LG_LOBBY = 0x0A1B2C3D4E5F6071
LG_BATTLE = 0x7FFFFFFFFFFFFFFF  # boundary: i64::MAX
LG_KR = 0x3C4D5E6F70819203
LG_CLIENT = 0x5D1E0F2A3B4C6D7E

MESH = "prod-kr-1"
MESH_KR = "서울-메시"
ENTRY_SPOT_ZONE = "zone-entry-5b1e9c3a-2f4d-4e6a-b8c7-d9e0f1a2b3c4"
SPOT_ROOM = "room/1001"
SPOT_DUNGEON = "던전/인스턴스-0042"
ACTOR_HONG = "player:홍길동"
ACTOR_8812 = "player:8812"
ST_ROOM = "Game.RoomSpot"
ST_PLAYER = "Game.PlayerActor"
ST_DUNGEON = "게임.인스턴스던전"
DEADLINE = 1764403200000  # 2025-11-29T08:00:00Z
U64_MAX = (1 << 64) - 1
RELOC_ID = "3f8a1c5e9b2d4f60a7e8c9d0b1a2f3e4"
RELOC_ID_2 = "00000000000000000000000000000001"  # smallest non-zero


def node(rid, lg):
    return {"rid": rid, "lifecycleGeneration": lg}


N_ZONE = node(RID_ZONE, LG_ZONE)
N_LOBBY = node(RID_LOBBY, LG_LOBBY)
N_BATTLE = node(RID_BATTLE, LG_BATTLE)
N_KR = node(RID_KR, LG_KR)
N_CLIENT = node(RID_CLIENT, LG_CLIENT)


def opid(low, high=0x0192F3A4B5C6D7E8):
    return {"high": high, "low": low}


def req(low, corr, reply_route=0x51, deadline=DEADLINE):
    return {"operationId": opid(low), "replyRouteId": reply_route, "correlationId": corr,
            "deadlineUnixMs": deadline}


def route(kind, oid, og, target, aog, olg):
    return {"objectKind": kind, "objectId": oid, "objectGeneration": og, "targetNode": target,
            "authorityOwnerGeneration": aog, "ownerLeaseGeneration": olg}


R_ROOM = route("spot", SPOT_ROOM, 42, N_LOBBY, 7, 3)
R_DUNGEON = route("spot", SPOT_DUNGEON, 5, N_KR, 11, 2)
R_ENTRY = route("spot", ENTRY_SPOT_ZONE, 1, N_ZONE, 1, 1)
R_HONG = route("actor", ACTOR_HONG, 17, N_BATTLE, 9, 4)
R_8812 = route("actor", ACTOR_8812, U64_MAX, N_ZONE, 1, 1)  # boundary: Generation = u64::MAX

SESSION = {"ownerNode": N_ZONE, "sessionId": 90210, "bindingGeneration": 6}
SESSION_2 = {"ownerNode": N_LOBBY, "sessionId": 0x00000001000000A5, "bindingGeneration": 1}

META_2 = [["traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"],
          ["x-zlink-locale", "ko-KR"]]
META_KR = [["x-user-name", "홍길동"], ["x-request-origin", "모바일/iOS"]]

PAY_CHAT = {"packetName": "Game.ChatMessage", "contentType": "application/x-protobuf",
            "payload": "0a0b68656c6c6f20776f726c641202" + "6b6f"}
PAY_JSON = {"packetName": "Game.EnterDungeon", "contentType": "application/json",
            "payload": '{"party":[8812,9001],"difficulty":"어려움"}'.encode("utf-8").hex()}
PAY_EMPTY = {"packetName": "", "contentType": "", "payload": ""}
PAY_MOVE = {"packetName": "Game.Move", "contentType": "application/x-msgpack",
            "payload": "83a17812a179cd0100a17a00"}


def multipart(parts):
    out = uint(4, len(parts))
    for p in parts:
        out += uint(4, len(p)) + p
    return out


PAY_JOIN_REPLY = {"packetName": "ZLinkFrameworkMultipart",
                  "contentType": "application/x-zlink-multipart",
                  "payload": multipart(['{"seat":3,"welcome":"환영합니다"}'.encode("utf-8")]).hex()}


def metadata_of_size(n):
    """A well-formed 2-entry metadata frame of exactly n bytes."""
    base = [META_2[0], ["x-zlink-pad", ""]]
    size0 = len(encode_metadata(base))
    assert n >= size0
    return [META_2[0], ["x-zlink-pad", "p" * (n - size0)]]


def descriptor(mesh, nd, rev, endpoint, ident, role, state, app_ver, wave, weight, entry,
               channels, caps):
    return {"meshName": mesh, "node": nd, "descriptorRevision": rev, "endpoint": endpoint,
            "securityIdentity": ident, "objectRole": role, "state": state,
            "applicationVersion": app_ver, "maintenanceWave": wave, "placementWeight": weight,
            "entrySpotId": entry, "channels": channels, "objectCapabilities": caps}


DESC_ZONE = descriptor(
    MESH, N_ZONE, 12, "tcp://10.0.3.17:7400", "spiffe://zlink.prod/mesh/prod-kr-1/node/zone",
    "server", "serving", 0x0001000200030000, "", 100, ENTRY_SPOT_ZONE,
    [{"channelName": "길드-채팅", "role": "server", "weight": 500},
     {"channelName": "match", "role": "client", "weight": 10000}],
    [{"objectKind": "actor", "stableType": ST_PLAYER, "relocationPolicy": "preserveState",
      "capacityLimit": 5000},
     {"objectKind": "spot", "stableType": ST_DUNGEON, "relocationPolicy": "recreateOnRelocation",
      "capacityLimit": 0}])
DESC_LOBBY = descriptor(
    MESH, N_LOBBY, 3, "tcp://10.0.3.21:7400", "spiffe://zlink.prod/mesh/prod-kr-1/node/lobby",
    "server", "draining", 0x0001000200030000, "wave-2025-11-29", 0, "",
    [], [{"objectKind": "spot", "stableType": ST_ROOM, "relocationPolicy": "disableRelocation",
          "capacityLimit": 200}])
DESC_CLIENT = descriptor(
    MESH, N_CLIENT, 1, "tcp://192.168.7.40:0", "spiffe://zlink.prod/client/모바일-게이트웨이",
    "client", "starting", 42, "", 0, "",
    [{"channelName": "로비", "role": "client", "weight": 0}], [])
DESC_SERVER_CS = descriptor(
    MESH, N_LOBBY, 4, "tcp://10.0.3.21:7500", "spiffe://zlink.prod/mesh/prod-kr-1/node/lobby",
    "server", "serving", 0x0001000200030000, "", 10000, "",
    [{"channelName": "로비", "role": "server", "weight": 10000}], [])

NONCE_A = sha("zlink-golden nonce hello")
PROOF_A = sha("zlink-golden proof hello")
NONCE_B = sha("zlink-golden nonce admit")
PROOF_B = sha("zlink-golden proof admit")


# ---------------------------------------------------------------------------------------------
# Command fixtures
# ---------------------------------------------------------------------------------------------

def rec(command, body, **extra):
    d = {"command": command, "body": body}
    d.update(extra)
    return d


def add_frame(frame):
    return lambda frames: list(frames) + [frame]


def drop_frame(i):
    return lambda frames: [f for j, f in enumerate(frames) if j != i]


def trunc0(n):
    return lambda frames: [frames[0][:-n]] + list(frames[1:])


def build_handshake():
    # 1 hello ---------------------------------------------------------------------------------
    hello_rm = rec("hello", {"capability": SCHEMA["requiredCapability"], "topology": "routeMesh",
                             "channelName": "", "descriptor": DESC_ZONE, "maxMessageBytes": 0,
                             "nonce": NONCE_A, "proof": PROOF_A})
    hello_cs = rec("hello", {"capability": SCHEMA["requiredCapability"], "topology": "clientServer",
                             "channelName": "로비", "descriptor": DESC_CLIENT,
                             "maxMessageBytes": 33554432, "nonce": NONCE_B, "proof": PROOF_B})
    valid("routeMesh-zone-node-descriptor", hello_rm)
    valid("clientServer-channel-lobby-32MiB", hello_cs, topology="clientServer")
    valid("routeMesh-draining-node-maintenance-wave", with_(hello_rm, "body.descriptor", DESC_LOBBY))
    bad("metadata-flag-with-metadata-frame", "FlagNotAllowed", dict(hello_rm, metadata=META_2))
    bad("payload-frame-on-payload-none-command", "WrongFrameCount", dict(hello_rm, payload=PAY_EMPTY))
    bad("topology-enum-3", "UnknownEnumValue", with_(hello_rm, "body.topology", 3))
    bad("topology-enum-0", "UnknownEnumValue", with_(hello_rm, "body.topology", 0))
    bad("capability-65-bytes", "OutOfBounds", with_(hello_rm, "body.capability", "f" * 65))
    bad("capability-empty", "OutOfBounds", with_(hello_rm, "body.capability", ""))
    bad("descriptor-channels-count-1025", "OutOfBounds",
        with_(hello_rm, "body.descriptor.channels",
              [{"channelName": "c%d" % i, "role": "server", "weight": 1} for i in range(1025)]))
    bad("descriptor-object-role-3", "UnknownEnumValue", with_(hello_rm, "body.descriptor.objectRole", 3))
    bad("descriptor-state-0", "UnknownEnumValue", with_(hello_rm, "body.descriptor.state", 0))
    bad("descriptor-revision-zero", "ZeroValue", with_(hello_rm, "body.descriptor.descriptorRevision", 0))
    bad("descriptor-endpoint-empty", "OutOfBounds", with_(hello_rm, "body.descriptor.endpoint", ""))
    bad("descriptor-relocation-policy-0", "UnknownEnumValue",
        with_(hello_rm, "body.descriptor.objectCapabilities.0.relocationPolicy", 0))
    bad("proof-truncated-31-bytes", "Incomplete", hello_rm, patch=trunc0(1))
    bad("hello-on-send-leg", "WrongLeg", hello_rm, leg="send")
    bad("hello-on-reply-leg", "WrongLeg", hello_cs, topology="clientServer", leg="reply")

    # 2 admit ---------------------------------------------------------------------------------
    admit_rm = rec("admit", {"descriptor": DESC_LOBBY, "connectionGeneration": 0x00000000000F4241,
                             "receiveChunkLimitBytes": 262144, "maxMessageBytes": 0,
                             "nonce": NONCE_B, "proof": PROOF_B})
    admit_cs = rec("admit", {"descriptor": DESC_SERVER_CS, "connectionGeneration": 1,
                             "receiveChunkLimitBytes": 1048576, "maxMessageBytes": 33554432,
                             "nonce": NONCE_A, "proof": PROOF_A})
    valid("routeMesh-admit", admit_rm)
    valid("clientServer-admit-32MiB", admit_cs, topology="clientServer")
    bad("connection-generation-zero", "ZeroValue", with_(admit_rm, "body.connectionGeneration", 0))
    bad("nonce-truncated", "Incomplete", admit_rm,
        patch=lambda fr: [fr[0][:-(32 + 10)]])
    bad("trailing-byte-after-body", "TrailingBytes", admit_rm, extra0=b"\x00")
    bad("admit-on-request-leg", "WrongLeg", admit_rm, leg="request")
    bad("placement-weight-10001", "OutOfBounds", with_(admit_rm, "body.descriptor.placementWeight", 10001))

    # 3 reject --------------------------------------------------------------------------------
    rej = rec("reject", {"reason": "staleLifecycle",
                         "detail": "lifecycle generation 0x0a1b2c3d4e5f6071 is stale; "
                                   "라이프사이클 세대가 오래되었습니다"})
    valid("stale-lifecycle-korean-detail", rej)
    valid("clientServer-role-mismatch-empty-detail",
          rec("reject", {"reason": "roleMismatch", "detail": ""}), topology="clientServer")
    valid("mesh-mismatch", rec("reject", {"reason": "meshMismatch", "detail": "expected prod-kr-1"}))
    valid("detail-4096-bytes", rec("reject", {"reason": "shuttingDown", "detail": "종료" * 682 + "abcd"}))
    bad("reason-0", "UnknownEnumValue", with_(rej, "body.reason", 0))
    bad("reason-11", "UnknownEnumValue", with_(rej, "body.reason", 11))
    bad("detail-invalid-utf8-fffe", "InvalidUtf8", with_(rej, "body.detail", b"\xff\xfe"))
    bad("detail-invalid-utf8-truncated-sequence", "InvalidUtf8", with_(rej, "body.detail", "종".encode()[:2]))
    bad("detail-4097-bytes", "OutOfBounds", with_(rej, "body.detail", "x" * 4097))
    bad("detail-length-10-only-3-bytes", "Incomplete",
        with_(rej, "body.detail", Raw(uint(2, 10) + b"abc")))
    bad("reject-on-send-leg", "WrongLeg", rej, leg="send")

    # 4 update --------------------------------------------------------------------------------
    upd = rec("update", {"sender": N_ZONE, "descriptorRevision": 13, "state": "draining",
                         "placementWeight": 2500, "placementCapacity": 4000,
                         "maintenanceWave": "wave-2025-11-29",
                         "channelWeights": [{"channelName": "길드-채팅", "weight": 0},
                                            {"channelName": "match", "weight": 10000}]})
    valid("routeMesh-draining-two-channel-weights", upd)
    valid("clientServer-serving-no-channel-weights",
          rec("update", {"sender": N_CLIENT, "descriptorRevision": 2, "state": "serving",
                         "placementWeight": 0, "placementCapacity": 0, "maintenanceWave": "",
                         "channelWeights": []}), topology="clientServer")
    bad("placement-weight-10001", "OutOfBounds", with_(upd, "body.placementWeight", 10001))
    bad("channel-weight-65535", "OutOfBounds", with_(upd, "body.channelWeights.1.weight", 65535))
    bad("channel-weights-count-1024-no-items", "CountExceedsRemaining",
        with_(upd, "body.channelWeights", Raw(uint(2, 1024))))
    bad("channel-weights-count-1025", "OutOfBounds",
        with_(upd, "body.channelWeights", Raw(uint(2, 1025))))
    bad("state-7", "UnknownEnumValue", with_(upd, "body.state", 7))
    bad("maintenance-wave-invalid-utf8", "InvalidUtf8", with_(upd, "body.maintenanceWave", b"wave-\xff\xfe"))
    bad("sender-lifecycle-generation-zero", "ZeroValue", with_(upd, "body.sender.lifecycleGeneration", 0))
    bad("update-on-request-leg", "WrongLeg", upd, leg="request")

    # 5 livenessProbe / 6 livenessAck ---------------------------------------------------------
    for name, probe_id in (("livenessProbe", 0x00000000075BCD15), ("livenessAck", 0x00000000075BCD15)):
        lp = rec(name, {"probeId": probe_id, "connectionGeneration": 0x00000000000F4241})
        valid("routeMesh", lp)
        valid("clientServer", with_(lp, "body.probeId", 1), topology="clientServer")
        valid("max-values", rec(name, {"probeId": U64_MAX, "connectionGeneration": U64_MAX}))
        bad("probe-id-zero", "ZeroValue", with_(lp, "body.probeId", 0))
        bad("connection-generation-zero", "ZeroValue", with_(lp, "body.connectionGeneration", 0),
            topology="clientServer")
        bad("truncated-body", "Incomplete", lp, patch=trunc0(1))
        bad("trailing-byte-after-body", "TrailingBytes", lp, extra0=b"\x00")
        bad("extra-frame", "WrongFrameCount", lp, patch=add_frame(b""))
        bad("on-reply-leg", "WrongLeg", lp, leg="reply")


def build_application_basic():
    # 16 nodeSend -----------------------------------------------------------------------------
    ns = rec("nodeSend", {"source": N_ZONE, "target": N_KR}, metadata=META_2, payload=PAY_CHAT)
    ns_plain = rec("nodeSend", {"source": N_KR, "target": N_ZONE}, payload=PAY_JSON)
    valid("with-2-entry-metadata", ns)
    valid("without-metadata-korean-rid", ns_plain)
    valid("empty-metadata-frame-and-empty-payload", dict(ns, metadata=[], payload=PAY_EMPTY))
    valid("metadata-frame-1024-bytes", dict(ns, metadata=metadata_of_size(1024)))
    valid("korean-metadata", dict(ns, metadata=META_KR))
    bad("missing-required-payload-frame", "WrongFrameCount", without(ns_plain, "payload"))
    bad("metadata-flag-without-metadata-frame", "WrongFrameCount", ns, patch=drop_frame(1))
    bad("extra-frame", "WrongFrameCount", ns_plain, patch=add_frame(encode_payload(PAY_CHAT)))
    bad("on-clientServer", "TopologyNotAllowed", ns, topology="clientServer")
    bad("on-request-leg", "WrongLeg", ns, leg="request")
    bad("source-rid-empty", "OutOfBounds", with_(ns, "body.source.rid", ""))
    bad("target-lifecycle-generation-above-i64-max", "OutOfBounds",
        with_(ns, "body.target.lifecycleGeneration", 1 << 63))
    bad("target-lifecycle-generation-u64-max", "OutOfBounds",
        with_(ns, "body.target.lifecycleGeneration", U64_MAX))
    bad("source-lifecycle-generation-zero", "ZeroValue", with_(ns, "body.source.lifecycleGeneration", 0))
    bad("source-rid-invalid-utf8", "InvalidUtf8", with_(ns, "body.source.rid", b"zone-\xc3\x28"))
    bad("metadata-frame-1025-bytes", "MetadataTooLarge",
        dict(ns, metadata=Raw(encode_metadata(metadata_of_size(1025)))))
    bad("metadata-nul-in-key", "MetadataNul", dict(ns, metadata=[["trace\x00id", "1"], META_2[1]]))
    bad("metadata-nul-in-value", "MetadataNul", dict(ns, metadata=[["x-zlink-locale", "ko\x00KR"]]))
    bad("metadata-value-invalid-utf8", "InvalidUtf8", dict(ns, metadata=[["x-user-name", b"\xff\xfe"]]))
    bad("metadata-trailing-byte-after-entries", "TrailingBytes",
        dict(ns, metadata=Raw(encode_metadata(META_2) + b"\x00")))
    bad("metadata-truncated-entry", "Incomplete",
        dict(ns, metadata=Raw(encode_metadata(META_2)[:-1])))
    bad("payload-envelope-trailing-byte", "TrailingBytes",
        dict(ns, payload=Raw(encode_payload(PAY_CHAT) + b"\x00")))
    bad("payload-envelope-truncated-payload", "Incomplete",
        dict(ns, payload=Raw(encode_payload(PAY_CHAT)[:-1])))
    bad("payload-envelope-missing-payload-length", "Incomplete",
        dict(ns, payload=Raw(b"\x00\x00")))
    bad("payload-envelope-packet-name-invalid-utf8", "InvalidUtf8",
        dict(ns, payload={"packetName": b"Game.\xff", "contentType": "", "payload": "00"}))
    bad("payload-envelope-length-above-absolute-limit", "OutOfBounds",
        dict(ns, payload=Raw(b"\x00\x00" + uint(4, PAYLOAD_LIMIT + 1))))

    # 17 nodeRequest --------------------------------------------------------------------------
    nr = rec("nodeRequest", {"request": req(1, "req-7f0c2b1e-000001"), "source": N_ZONE, "target": N_LOBBY},
             metadata=META_2, payload=PAY_JSON)
    valid("with-metadata", nr)
    valid("without-metadata-64-byte-correlation-id",
          rec("nodeRequest", {"request": req(2, "c" * 63 + "~", reply_route=U64_MAX), "source": N_KR,
                              "target": N_ZONE}, payload=PAY_MOVE))
    bad("correlation-id-with-space", "InvalidAscii", with_(nr, "body.request.correlationId", "req 1"))
    bad("correlation-id-byte-0x80", "InvalidAscii", with_(nr, "body.request.correlationId", b"req-\x80"))
    bad("correlation-id-byte-0x7f", "InvalidAscii", with_(nr, "body.request.correlationId", b"req-\x7f"))
    bad("correlation-id-65-bytes", "OutOfBounds", with_(nr, "body.request.correlationId", "c" * 65))
    bad("correlation-id-empty", "OutOfBounds", with_(nr, "body.request.correlationId", ""))
    bad("operation-id-all-zero", "ConstraintViolated", with_(nr, "body.request.operationId", opid(0, 0)))
    bad("reply-route-id-zero", "ZeroValue", with_(nr, "body.request.replyRouteId", 0))
    bad("deadline-zero", "ZeroValue", with_(nr, "body.request.deadlineUnixMs", 0))
    bad("on-send-leg", "WrongLeg", nr, leg="send")
    bad("missing-payload-with-metadata", "WrongFrameCount", nr, patch=drop_frame(2))

    # 18 channelSend --------------------------------------------------------------------------
    cs = rec("channelSend", {"channelName": "길드-채팅", "source": N_ZONE, "target": N_LOBBY},
             payload=PAY_CHAT)
    valid("korean-channel", cs)
    valid("with-metadata", dict(with_(cs, "body.channelName", "match"), metadata=META_2))
    bad("on-clientServer", "TopologyNotAllowed", cs, topology="clientServer")
    bad("channel-name-empty", "OutOfBounds", with_(cs, "body.channelName", ""))
    bad("on-request-leg", "WrongLeg", cs, leg="request")
    bad("boundSession-flag", "FlagNotAllowed", dict(cs, boundSession={"session": SESSION}))

    # 19 channelRequest -----------------------------------------------------------------------
    cr = rec("channelRequest", {"request": req(3, "chan-req-0003"), "channelName": "match",
                                "source": N_LOBBY, "target": N_ZONE}, metadata=META_KR, payload=PAY_MOVE)
    valid("with-korean-metadata", cr)
    valid("without-metadata", without(cr, "metadata"))
    bad("on-clientServer", "TopologyNotAllowed", cr, topology="clientServer", leg="request")
    bad("on-reply-leg", "WrongLeg", cr, leg="reply")
    bad("channel-name-invalid-utf8", "InvalidUtf8", with_(cr, "body.channelName", b"\xed\xa0\x80"))

    # 20 reply --------------------------------------------------------------------------------
    base = {"operationId": opid(1), "replyRouteId": 0x51, "correlationId": "req-7f0c2b1e-000001",
            "status": "ok", "detail": ""}

    def reply(result, **extra):
        b = dict(base)
        b["result"] = result
        return rec("reply", b, **extra)

    valid("ok-none-no-payload", reply({"kind": "none"}))
    valid("ok-none-with-application-payload", reply({"kind": "none"}, payload=PAY_JSON))
    valid("not-found-with-detail",
          rec("reply", dict(base, status="notFound", detail="spot 던전/인스턴스-0042 없음",
                            result={"kind": "none"})))
    valid("user-spot-create-created",
          reply({"kind": "userSpotCreate", "outcome": "created",
                 "spot": {"spotId": SPOT_DUNGEON, "objectGeneration": 5, "meshName": MESH_KR,
                          "nodeRid": RID_KR}}))
    valid("user-spot-create-existing",
          reply({"kind": "userSpotCreate", "outcome": "existing",
                 "spot": {"spotId": SPOT_ROOM, "objectGeneration": 42, "meshName": MESH,
                          "nodeRid": RID_LOBBY}}))
    valid("user-spot-close-closed", reply({"kind": "userSpotClose", "closed": True}))
    valid("user-spot-close-not-closed", reply({"kind": "userSpotClose", "closed": False}))
    valid("actor-join-with-multipart-reply",
          reply({"kind": "actorJoin", "receiveChunkLimitBytes": 262144}, payload=PAY_JOIN_REPLY))
    valid("actor-join-without-reply-payload", reply({"kind": "actorJoin", "receiveChunkLimitBytes": 65536}))
    valid("actor-create-rejected",
          rec("reply", dict(base, status="rejected", detail="capacity",
                            result={"kind": "actorCreate", "outcome": "rejected",
                                    "actor": {"actorId": ACTOR_8812, "objectGeneration": 3,
                                              "meshName": MESH, "nodeRid": RID_ZONE}})))
    valid("actor-create-created",
          reply({"kind": "actorCreate", "outcome": "created",
                 "actor": {"actorId": ACTOR_HONG, "objectGeneration": 17, "meshName": MESH,
                           "nodeRid": RID_BATTLE}}))
    valid("actor-lookup-route", reply({"kind": "actorLookup", "route": R_HONG}))
    valid("bound-session-bind", reply({"kind": "boundSessionBind", "bindingGeneration": 7}))
    valid("backpressured-status",
          rec("reply", dict(base, status="backpressured", detail="mailbox full",
                            result={"kind": "none"})))
    r_none = reply({"kind": "none"})
    r_close = reply({"kind": "userSpotClose", "closed": True})
    bad("result-tag-7", "UnknownEnumValue", with_(r_none, "body.result", Raw(b"\x07\x00\x00")))
    bad("result-tag-255", "UnknownEnumValue", with_(r_none, "body.result", Raw(b"\xff\x00\x00")))
    bad("status-15", "UnknownEnumValue", with_(r_none, "body.status", 15))
    bad("trailing-byte-inside-union-body", "TrailingBytes",
        with_(r_none, "body.result", Raw(b"\x00\x00\x01\x00")))
    bad("trailing-byte-inside-user-spot-close-body", "TrailingBytes",
        with_(r_none, "body.result", Raw(b"\x02\x00\x02\x01\x00")))
    bad("union-body-shorter-than-case-fields", "Incomplete",
        with_(r_none, "body.result", Raw(b"\x02\x00\x00")))
    bad("union-body-length-beyond-frame", "Incomplete",
        with_(r_none, "body.result", Raw(b"\x02\x00\x05\x01")))
    bad("union-missing-body-length", "Incomplete", with_(r_none, "body.result", Raw(b"\x00")))
    bad("user-spot-close-bool-2", "UnknownEnumValue", with_(r_close, "body.result.closed", 2))
    bad("user-spot-create-outcome-0", "UnknownEnumValue",
        with_(reply({"kind": "userSpotCreate", "outcome": "created",
                     "spot": {"spotId": SPOT_ROOM, "objectGeneration": 42, "meshName": MESH,
                              "nodeRid": RID_LOBBY}}), "body.result.outcome", 0))
    bad("bound-session-bind-generation-zero", "ZeroValue",
        reply({"kind": "boundSessionBind", "bindingGeneration": 0}))
    bad("reply-on-request-leg", "WrongLeg", r_none, leg="request")
    bad("reply-on-send-leg", "WrongLeg", r_none, leg="send")
    bad("reply-on-clientServer", "TopologyNotAllowed", r_none, topology="clientServer", leg="reply")
    bad("three-frames", "WrongFrameCount", dict(r_none, payload=PAY_JSON), patch=add_frame(encode_payload(PAY_JSON)))
    bad("metadata-flag-with-metadata-frame", "FlagNotAllowed", dict(r_none, metadata=META_2))
    bad("correlation-id-non-ascii", "InvalidAscii", with_(r_none, "body.correlationId", "요청-1"))

    # 21 spotSend -----------------------------------------------------------------------------
    ss = rec("spotSend", {"route": R_ROOM, "source": N_ZONE}, payload=PAY_CHAT)
    valid("room-spot", ss)
    valid("entry-spot-with-metadata", rec("spotSend", {"route": R_ENTRY, "source": N_KR},
                                          metadata=META_2, payload=PAY_MOVE))
    valid("korean-instance-spot", rec("spotSend", {"route": R_DUNGEON, "source": N_BATTLE}, payload=PAY_JSON))
    bad("actor-route", "ConstraintViolated", with_(ss, "body.route", R_HONG))
    bad("boundSession-flag-with-tail", "FlagNotAllowed", dict(ss, boundSession={"session": SESSION}))
    bad("sourceSpotId-flag-with-tail", "FlagNotAllowed", dict(ss, sourceSpotId={"spotId": SPOT_ROOM}))
    bad("object-generation-zero", "ZeroValue", with_(ss, "body.route.objectGeneration", 0))
    bad("authority-owner-generation-zero", "ZeroValue", with_(ss, "body.route.authorityOwnerGeneration", 0))
    bad("owner-lease-generation-zero", "ZeroValue", with_(ss, "body.route.ownerLeaseGeneration", 0))
    bad("object-kind-3", "UnknownEnumValue", with_(ss, "body.route.objectKind", 3))
    bad("object-kind-0", "UnknownEnumValue", with_(ss, "body.route.objectKind", 0))
    bad("object-id-empty", "OutOfBounds", with_(ss, "body.route.objectId", ""))
    bad("missing-payload", "WrongFrameCount", without(ss, "payload"))

    # 22 spotRequest --------------------------------------------------------------------------
    sr = rec("spotRequest", {"request": req(4, "spot-req-0004"), "route": R_DUNGEON, "source": N_ZONE},
             metadata=META_2, payload=PAY_JSON)
    valid("with-metadata", sr)
    valid("without-metadata", without(sr, "metadata"))
    bad("actor-route", "ConstraintViolated", with_(sr, "body.route", R_8812))
    bad("on-send-leg", "WrongLeg", sr, leg="send")
    bad("operation-id-all-zero", "ConstraintViolated", with_(sr, "body.request.operationId", opid(0, 0)))

    # 23 logicalMulticast ---------------------------------------------------------------------
    lm = rec("logicalMulticast", {"channelName": "chat", "topic": "월드/공지", "publishSequence": 1001,
                                  "source": N_ZONE}, payload=PAY_CHAT)
    valid("korean-topic", lm)
    valid("with-metadata",
          dict(with_(lm, "body.topic", "match.started"), metadata=META_2))
    bad("publish-sequence-zero", "ZeroValue", with_(lm, "body.publishSequence", 0))
    bad("topic-empty", "OutOfBounds", with_(lm, "body.topic", ""))
    bad("channel-name-empty", "OutOfBounds", with_(lm, "body.channelName", ""))
    bad("on-request-leg", "WrongLeg", lm, leg="request")


def build_actor_commands():
    # 24 actorSend ----------------------------------------------------------------------------
    a = rec("actorSend", {"route": R_HONG, "source": N_ZONE}, payload=PAY_MOVE)
    valid("no-tails", a)
    valid("bound-session-tail", dict(a, boundSession={"session": SESSION}))
    valid("source-spot-tail-korean", dict(a, sourceSpotId={"spotId": SPOT_DUNGEON}))
    valid("metadata-and-both-tails",
          dict(a, metadata=META_2, boundSession={"session": SESSION_2}, sourceSpotId={"spotId": ENTRY_SPOT_ZONE}))
    valid("metadata-only", dict(with_(a, "body.route", R_8812), metadata=META_KR))
    sess_tail = b"\x02" + enc_type("BoundSessionTail", {"session": SESSION})
    spot_tail = b"\x04" + enc_type("SourceSpotTail", {"spotId": SPOT_ROOM})
    bad("boundSession-flag-no-tail-bytes", "ConditionalTailMismatch", a, flags=0x02)
    bad("sourceSpotId-flag-no-tail-bytes", "ConditionalTailMismatch", a, flags=0x04)
    bad("boundSession-flag-tail-tag-0x04", "ConditionalTailMismatch",
        dict(a, boundSession=Raw(b"\x04" + enc_type("BoundSessionTail", {"session": SESSION}))))
    bad("boundSession-flag-tail-tag-0x00", "ConditionalTailMismatch",
        dict(a, boundSession=Raw(b"\x00" + enc_type("BoundSessionTail", {"session": SESSION}))))
    bad("both-flags-tails-in-reverse-order", "ConditionalTailMismatch",
        dict(a, boundSession=Raw(spot_tail), sourceSpotId=Raw(sess_tail)))
    bad("sourceSpotId-flag-but-boundSession-tail", "ConditionalTailMismatch",
        dict(a, sourceSpotId=Raw(sess_tail)))
    bad("both-flags-only-boundSession-tail", "ConditionalTailMismatch",
        dict(a, boundSession={"session": SESSION}), flags=0x06)
    bad("extension-flag-with-extension-tail", "FlagNotAllowed",
        dict(a, extension={"extensionId": 1, "data": "cafe"}))
    bad("trailing-byte-after-last-tail", "TrailingBytes",
        dict(a, sourceSpotId={"spotId": SPOT_ROOM}), extra0=b"\x00")
    bad("tail-bytes-without-flag", "TrailingBytes", a, extra0=spot_tail)
    bad("spot-route", "ConstraintViolated", with_(a, "body.route", R_ROOM))
    bad("bound-session-tail-truncated", "Incomplete",
        dict(a, boundSession=Raw(sess_tail[:-3])))
    bad("source-spot-tail-empty-spot-id", "OutOfBounds", dict(a, sourceSpotId={"spotId": ""}))
    bad("bound-session-tail-session-id-zero", "ZeroValue",
        dict(a, boundSession={"session": dict(SESSION, sessionId=0)}))
    bad("bound-session-tail-binding-generation-zero", "ZeroValue",
        dict(a, boundSession={"session": dict(SESSION, bindingGeneration=0)}))
    bad("tails-but-missing-payload", "WrongFrameCount",
        without(dict(a, boundSession={"session": SESSION}), "payload"))

    # 25 actorRequest -------------------------------------------------------------------------
    ar = rec("actorRequest", {"request": req(5, "actor-req-0005"), "route": R_HONG, "source": N_LOBBY},
             metadata=META_2, payload=PAY_JSON, boundSession={"session": SESSION},
             sourceSpotId={"spotId": SPOT_ROOM})
    valid("metadata-and-both-tails", ar)
    valid("source-spot-tail-only", without(ar, "metadata", "boundSession"))
    valid("no-metadata-no-tails", without(ar, "metadata", "boundSession", "sourceSpotId"))
    valid("bound-session-tail-only", without(ar, "metadata", "sourceSpotId"))
    bad("sourceSpotId-flag-no-tail", "ConditionalTailMismatch",
        without(ar, "metadata", "boundSession", "sourceSpotId"), flags=0x04)
    bad("on-send-leg", "WrongLeg", ar, leg="send")
    bad("spot-route", "ConstraintViolated", with_(ar, "body.route", R_DUNGEON))
    bad("extension-flag", "FlagNotAllowed", dict(ar, extension={"extensionId": 7, "data": ""}))
    bad("undefined-flag-0x20-with-tails", "UndefinedFlags", ar, flags=0x27)

    # 26 actorLookup --------------------------------------------------------------------------
    al = rec("actorLookup", {"request": req(6, "lookup-0006"), "actorId": ACTOR_HONG, "source": N_ZONE})
    valid("korean-actor-id", al)
    valid("ascii-actor-id", with_(al, "body.actorId", ACTOR_8812))
    bad("actor-id-empty", "OutOfBounds", with_(al, "body.actorId", ""))
    bad("actor-id-invalid-utf8", "InvalidUtf8", with_(al, "body.actorId", b"player:\xff\xfe"))
    bad("payload-frame-on-payload-none-command", "WrongFrameCount", dict(al, payload=PAY_EMPTY))
    bad("on-reply-leg", "WrongLeg", al, leg="reply")

    # 27 actorDestroy -------------------------------------------------------------------------
    ad = rec("actorDestroy", {"request": req(7, "destroy-0007"), "route": R_8812, "source": N_ZONE})
    valid("actor-route", ad)
    bad("spot-route", "ConstraintViolated", with_(ad, "body.route", R_ROOM))
    bad("trailing-byte", "TrailingBytes", ad, extra0=b"\xff")

    # 28 actorJoin ----------------------------------------------------------------------------
    aj = rec("actorJoin", {"request": req(8, "join-0008"), "actorRoute": R_HONG, "entry": True,
                           "targetSpotRoute": R_ENTRY})
    valid("entry-join-no-payload", aj)
    valid("room-join-with-payload",
          dict(with_(with_(aj, "body.entry", False), "body.targetSpotRoute", R_ROOM),
               payload={"packetName": "Game.JoinRoom", "contentType": "application/json",
                        "payload": '{"seat":3}'.encode().hex()}))
    bad("on-send-leg", "WrongLeg", aj, leg="send")
    bad("on-reply-leg", "WrongLeg", aj, leg="reply")
    bad("entry-bool-2", "UnknownEnumValue", with_(aj, "body.entry", 2))
    bad("entry-bool-255", "UnknownEnumValue", with_(aj, "body.entry", 255))
    bad("target-spot-route-is-actor", "ConstraintViolated", with_(aj, "body.targetSpotRoute", R_8812))
    bad("actor-route-is-spot", "ConstraintViolated", with_(aj, "body.actorRoute", R_ROOM))
    bad("three-frames", "WrongFrameCount", dict(aj, payload=PAY_EMPTY), patch=add_frame(encode_payload(PAY_EMPTY)))

    # 29 actorLeft ----------------------------------------------------------------------------
    alf = rec("actorLeft", {"request": req(9, "left-0009"), "actorRoute": R_HONG, "spotRoute": R_ROOM})
    valid("leave-room", alf)
    bad("actor-route-is-spot", "ConstraintViolated", with_(alf, "body.actorRoute", R_DUNGEON))
    bad("spot-route-is-actor", "ConstraintViolated", with_(alf, "body.spotRoute", R_HONG))
    bad("on-send-leg", "WrongLeg", alf, leg="send")

    # 36 boundSessionSend ---------------------------------------------------------------------
    bss = rec("boundSessionSend", {"session": SESSION, "actorId": ACTOR_HONG, "objectGeneration": 17},
              payload=PAY_CHAT)
    valid("egress-to-session", bss)
    bad("missing-payload", "WrongFrameCount", without(bss, "payload"))
    bad("metadata-flag", "FlagNotAllowed", dict(bss, metadata=META_2))
    bad("object-generation-zero", "ZeroValue", with_(bss, "body.objectGeneration", 0))
    bad("session-owner-rid-empty", "OutOfBounds", with_(bss, "body.session.ownerNode.rid", ""))

    # 37 actorJoined --------------------------------------------------------------------------
    ajd = rec("actorJoined", {"request": req(10, "joined-0010"), "actorRoute": R_HONG, "entry": False,
                              "spotRoute": R_ROOM})
    valid("joined-room", ajd)
    valid("joined-entry", with_(with_(ajd, "body.entry", True), "body.spotRoute", R_ENTRY))
    bad("spot-route-is-actor", "ConstraintViolated", with_(ajd, "body.spotRoute", R_8812))
    bad("entry-bool-2", "UnknownEnumValue", with_(ajd, "body.entry", 2))
    bad("payload-frame", "WrongFrameCount", dict(ajd, payload=PAY_EMPTY))

    # 38 boundSessionBind ---------------------------------------------------------------------
    bsb = rec("boundSessionBind", {"request": req(11, "bind-0011"), "session": SESSION, "actorRoute": R_HONG})
    valid("bind", bsb)
    bad("binding-generation-zero", "ZeroValue", with_(bsb, "body.session.bindingGeneration", 0))
    bad("actor-route-is-spot", "ConstraintViolated", with_(bsb, "body.actorRoute", R_ROOM))
    bad("on-send-leg", "WrongLeg", bsb, leg="send")

    # 51 boundSessionReplaced -----------------------------------------------------------------
    bsr = rec("boundSessionReplaced", {"actorFence": R_HONG, "previousSession": SESSION_2})
    valid("replaced", bsr)
    bad("actor-fence-is-spot", "ConstraintViolated", with_(bsr, "body.actorFence", R_ROOM))
    bad("previous-session-id-zero", "ZeroValue", with_(bsr, "body.previousSession.sessionId", 0))
    bad("truncated", "Incomplete", bsr, patch=trunc0(8))


def build_instance_and_creates():
    # 39 instanceSpot -------------------------------------------------------------------------
    ready = {"kind": "ready", "route": R_DUNGEON, "storeVersion": 7}
    missing = {"kind": "missing", "targetMesh": MESH_KR, "targetNode": N_KR, "spotId": SPOT_DUNGEON,
               "stableType": ST_DUNGEON, "descriptorVersion": 12, "deadlineUnixMs": DEADLINE + 30000}
    send_ready = rec("instanceSpot", {"operationKind": "send", "operationId": opid(20),
                                      "deadlineUnixMs": DEADLINE, "source": N_ZONE, "sourceSpotId": "",
                                      "route": ready}, payload=PAY_JSON)
    req_missing = rec("instanceSpot", {"operationKind": "request", "operationId": opid(21),
                                       "replyRouteId": 0x52, "correlationId": "inst-req-0021",
                                       "deadlineUnixMs": DEADLINE, "source": N_ZONE,
                                       "sourceSpotId": SPOT_ROOM, "route": missing},
                      metadata=META_2, payload=PAY_JSON)
    valid("send-ready", send_ready, leg="send")
    valid("request-missing-with-metadata", req_missing, leg="request")
    valid("request-ready", with_(without(req_missing, "metadata"), "body.route", ready), leg="request")
    valid("send-missing-with-source-spot",
          dict(with_(with_(send_ready, "body.route", missing), "body.sourceSpotId", ENTRY_SPOT_ZONE),
               metadata=META_KR), leg="send")
    bad("operation-kind-send-on-request-leg", LEG_FROM_FIELD_ERROR, send_ready, leg="request")
    bad("operation-kind-request-on-send-leg", LEG_FROM_FIELD_ERROR, req_missing, leg="send")
    bad("on-reply-leg", "WrongLeg", send_ready, leg="reply")
    bad("ready-route-is-actor", "ConstraintViolated", with_(send_ready, "body.route.route", R_HONG), leg="send")
    bad("route-tag-3", "UnknownEnumValue", with_(send_ready, "body.route", Raw(b"\x03\x00\x00")), leg="send")
    bad("route-tag-0", "UnknownEnumValue", with_(send_ready, "body.route", Raw(b"\x00\x00\x00")), leg="send")
    ready_body = enc_struct(TYPES["InstanceRoute"]["cases"][0]["fields"], without(ready, "kind"))
    bad("trailing-byte-inside-route-body", "TrailingBytes",
        with_(send_ready, "body.route", Raw(b"\x01" + uint(2, len(ready_body) + 1) + ready_body + b"\x00")),
        leg="send")
    bad("route-body-length-short", "Incomplete",
        with_(send_ready, "body.route", Raw(b"\x01" + uint(2, len(ready_body) - 1) + ready_body)), leg="send")
    bad("operation-kind-3", "UnknownEnumValue", with_(send_ready, "body.operationKind", 3), leg="send")
    bad("request-reply-route-id-zero", "ZeroValue", with_(req_missing, "body.replyRouteId", 0), leg="request")
    bad("missing-descriptor-version-zero", "ZeroValue",
        with_(req_missing, "body.route.descriptorVersion", 0), leg="request")
    bad("ready-store-version-zero", "ZeroValue", with_(send_ready, "body.route.storeVersion", 0), leg="send")
    bad("operation-id-all-zero", "ConstraintViolated", with_(send_ready, "body.operationId", opid(0, 0)), leg="send")
    bad("missing-payload", "WrongFrameCount", without(send_ready, "payload"), leg="send")

    # 47 userSpotCreate -----------------------------------------------------------------------
    reservation = {"storeVersion": 7, "objectGeneration": 5, "authorityOwnerGeneration": 11,
                   "targetNode": N_KR, "ownerLeaseGeneration": 2, "pendingCapacity": 1,
                   "deadlineUnixMs": DEADLINE + 60000}
    usc = rec("userSpotCreate", {"request": req(30, "create-spot-0030"), "source": N_ZONE,
                                 "spotId": SPOT_DUNGEON, "stableType": ST_DUNGEON,
                                 "reservation": reservation})
    valid("korean-spot", usc)
    bad("spot-id-invalid-utf8", "InvalidUtf8", with_(usc, "body.spotId", b"\xc0\xaf"))
    bad("reservation-store-version-zero", "ZeroValue", with_(usc, "body.reservation.storeVersion", 0))
    bad("reservation-deadline-zero", "ZeroValue", with_(usc, "body.reservation.deadlineUnixMs", 0))
    bad("stable-type-empty", "OutOfBounds", with_(usc, "body.stableType", ""))

    # 48 userSpotClose ------------------------------------------------------------------------
    uscl = rec("userSpotClose", {"request": req(31, "close-spot-0031"), "source": N_ZONE,
                                 "spot": {"spotId": SPOT_ROOM, "objectGeneration": 42, "meshName": MESH,
                                          "nodeRid": RID_LOBBY},
                                 "targetNode": N_LOBBY, "authorityOwnerGeneration": 7, "storeVersion": 19})
    valid("close-room", uscl)
    bad("mesh-name-empty", "OutOfBounds", with_(uscl, "body.spot.meshName", ""))
    bad("store-version-zero", "ZeroValue", with_(uscl, "body.storeVersion", 0))

    # 49 actorCreate --------------------------------------------------------------------------
    ac = rec("actorCreate", {"request": req(32, "create-actor-0032"), "source": N_ZONE,
                             "actorId": ACTOR_HONG, "stableType": ST_PLAYER,
                             "membershipSpotId": ENTRY_SPOT_ZONE,
                             "reservation": dict(reservation, targetNode=N_BATTLE, pendingCapacity=0)})
    valid("create-player", ac)
    bad("stable-type-empty", "OutOfBounds", with_(ac, "body.stableType", ""))
    bad("membership-spot-id-empty", "OutOfBounds", with_(ac, "body.membershipSpotId", ""))
    bad("reservation-target-lifecycle-above-i64-max", "OutOfBounds",
        with_(ac, "body.reservation.targetNode.lifecycleGeneration", 0x8000000000000001))


def build_message_follow():
    # 50 messageFollow ------------------------------------------------------------------------
    follow = {"sourceRoute": R_HONG, "targetRoute": dict(R_HONG, targetNode=N_LOBBY, ownerLeaseGeneration=5),
              "hopCount": 1, "queueCount": 12, "queueBytes": 4096, "operationId": opid(40),
              "replyRouteId": 0x53}
    mf = rec("messageFollow", {"follow": follow})
    valid("actor-moved", mf)
    valid("spot-moved-hop-8-saturated-queue",
          rec("messageFollow", {"follow": dict(follow, sourceRoute=R_DUNGEON,
                                               targetRoute=dict(R_DUNGEON, targetNode=N_ZONE),
                                               hopCount=8, queueCount=0xFFFFFFFF, queueBytes=0xFFFFFFFF)}))
    fb = enc_type("MessageFollowBody", follow)
    bad("hop-count-0", "OutOfBounds", with_(mf, "body.follow.hopCount", 0))
    bad("hop-count-9", "OutOfBounds", with_(mf, "body.follow.hopCount", 9))
    bad("version-2", "UnsupportedVersion", with_(mf, "body.version", 2))
    bad("version-0", "UnsupportedVersion", with_(mf, "body.version", 0))
    bad("routes-name-different-objects", "ConstraintViolated",
        with_(mf, "body.follow.targetRoute", dict(R_8812, targetNode=N_LOBBY)))
    bad("routes-name-different-kinds", "ConstraintViolated",
        with_(mf, "body.follow.targetRoute", dict(R_HONG, objectKind="spot")))
    bad("trailing-byte-inside-length-delimited-body", "TrailingBytes",
        with_(mf, "body.follow", Raw(uint(4, len(fb) + 1) + fb + b"\x00")))
    bad("trailing-byte-after-length-delimited-body", "TrailingBytes", mf, extra0=b"\x00")
    bad("body-length-shorter-than-struct", "Incomplete",
        with_(mf, "body.follow", Raw(uint(4, len(fb) - 1) + fb)))
    bad("body-length-beyond-frame", "Incomplete",
        with_(mf, "body.follow", Raw(uint(4, len(fb) + 1) + fb)))
    bad("body-length-above-16MiB", "OutOfBounds",
        with_(mf, "body.follow", Raw(uint(4, LIMITS["controlEnvelopeBytes"] + 1) + fb)))
    bad("reply-route-id-zero", "ZeroValue", with_(mf, "body.follow.replyRouteId", 0))
    bad("operation-id-all-zero", "ConstraintViolated", with_(mf, "body.follow.operationId", opid(0, 0)))
    bad("on-request-leg", "WrongLeg", mf, leg="request")


# ---------------------------------------------------------------------------------------------
# Relocation: a coherent set of durable blobs and the commands that carry them
# ---------------------------------------------------------------------------------------------

ZLIA = "instance-activation-recovery-v1"
ZRE1 = "relocation-envelope-v1"
ZRD1 = "relocation-data-chunk-v1"
ZRM1 = "relocation-manifest-v1"
ZRP1 = "relocation-root-pointer"

# Records captured in the relocation unit of actor "player:홍길동" (saved, not yet run).
CAPTURED_1 = encode_record(rec("actorSend", {"route": R_HONG, "source": N_ZONE},
                               metadata=META_2, payload=PAY_MOVE))
CAPTURED_2 = encode_record(rec("actorRequest", {"request": req(50, "actor-req-0050"), "route": R_HONG,
                                                "source": N_LOBBY}, payload=PAY_JSON,
                               sourceSpotId={"spotId": SPOT_ROOM}))
APP_STATE = ('{"hp":87,"inventory":["검","방패"],"gold":1200}'.encode("utf-8") + bytes(range(0, 256, 17))).hex()

ZRE1_ACTOR = {
    "relocationId": RELOC_ID, "objectKind": "actor", "objectId": ACTOR_HONG, "stableType": ST_PLAYER,
    "objectGeneration": 17, "relocationPolicy": "preserveState", "applicationState": APP_STATE,
    "savedQueue": [{"sequence": 1001, "frames": [f.hex() for f in CAPTURED_1]},
                   {"sequence": 1002, "frames": [f.hex() for f in CAPTURED_2]}],
    "timers": [{"timerId": 1, "kind": "oneShot", "remainingMs": 1500, "periodMs": 0,
                "packetName": "Game.RespawnTick", "payload": "0801"},
               {"timerId": 0x00000000DEADBEEF, "kind": "periodic", "remainingMs": 250, "periodMs": 1000,
                "packetName": "", "payload": ""}],
    "boundSessionPresent": False}
ZRE1_SPOT_EMPTY = {
    "relocationId": RELOC_ID_2, "objectKind": "spot", "objectId": SPOT_DUNGEON, "stableType": ST_DUNGEON,
    "objectGeneration": 5, "relocationPolicy": "recreateOnRelocation", "applicationState": "",
    "savedQueue": [], "timers": [], "boundSessionPresent": False}
# An Actor with a bound STREAM session (issue 17 item 2: the optional field exists now so the
# sessions issue carries a binding without a format change).
ZRE1_ACTOR_BOUND = dict(ZRE1_ACTOR, boundSessionPresent=True, boundSession=SESSION)
ZRE1_BLOB = encode_durable(ZRE1, ZRE1_ACTOR)
_half = (len(ZRE1_BLOB) + 1) // 2
ZRE1_CHUNKS = [ZRE1_BLOB[:_half], ZRE1_BLOB[_half:]]
ZRD1_0 = {"chunkOrdinal": 0, "data": ZRE1_CHUNKS[0].hex()}
ZRD1_1 = {"chunkOrdinal": 1, "data": ZRE1_CHUNKS[1].hex()}
STORE_PREFIX = "relocation-store/prod-kr-1/" + RELOC_ID

ZRM1_VALUE = {
    "relocationId": RELOC_ID, "objectKind": "actor", "objectId": ACTOR_HONG, "objectGeneration": 17,
    "payloadTotalLength": len(ZRE1_BLOB), "payloadChecksumCrc32c": crc32c(ZRE1_BLOB),
    "chunks": [{"ordinal": i, "length": len(c), "checksumCrc32c": crc32c(c),
                "reference": "%s/chunk-%04d" % (STORE_PREFIX, i)} for i, c in enumerate(ZRE1_CHUNKS)],
    "inventoryDigest": sha("zlink-golden inventory " + RELOC_ID)}
ZRM1_EMPTY = dict(ZRM1_VALUE, relocationId=RELOC_ID_2, objectKind="spot", objectId=SPOT_DUNGEON,
                  objectGeneration=5, payloadTotalLength=0, payloadChecksumCrc32c=0, chunks=[],
                  inventoryDigest="00" * 32)

ZLIA_REQUEST = {
    "operationKind": "request", "operationId": opid(21), "replyRouteId": 0x52,
    "correlationId": "inst-req-0021", "deadlineUnixMs": DEADLINE, "source": N_ZONE,
    "sourceSpotId": SPOT_ROOM, "targetMesh": MESH_KR, "targetNode": N_KR, "spotId": SPOT_DUNGEON,
    "stableType": ST_DUNGEON, "descriptorVersion": 12, "metadataPresent": True,
    "metadata": encode_metadata(META_2).hex(), "packetName": PAY_JSON["packetName"],
    "contentType": PAY_JSON["contentType"], "payload": PAY_JSON["payload"]}
ZLIA_SEND = {
    "operationKind": "send", "operationId": opid(22), "deadlineUnixMs": DEADLINE, "source": N_BATTLE,
    "sourceSpotId": "", "targetMesh": MESH, "targetNode": N_KR, "spotId": "instance/레이드-7",
    "stableType": ST_DUNGEON, "descriptorVersion": 1, "metadataPresent": False,
    "packetName": "", "contentType": "", "payload": ""}
ZLIA_BLOB = encode_durable(ZLIA, ZLIA_REQUEST)
ZRP1_VALUE = {"reference": "relocation-store/prod-kr-1/zlia/0192f3a4b5c6d7e8-0000000000000015",
              "sha256": hashlib.sha256(ZLIA_BLOB).hexdigest(), "sizeBytes": len(ZLIA_BLOB),
              "inventoryDigest": sha("zlink-golden zlia inventory")}


def build_relocation_commands():
    # 30 relocationReady ----------------------------------------------------------------------
    rr = rec("relocationReady", {"relocationId": RELOC_ID, "targetAttemptGeneration": 3, "target": N_KR,
                                 "receiveChunkLimitBytes": 262144})
    valid("ready", rr)
    bad("relocation-id-all-zero", "ZeroValue", with_(rr, "body.relocationId", "00" * 16))
    bad("relocation-id-truncated", "Incomplete", rr, patch=lambda fr: [fr[0][:5 + 10]])
    bad("on-request-leg", "WrongLeg", rr, leg="request")
    bad("target-attempt-generation-zero", "ZeroValue", with_(rr, "body.targetAttemptGeneration", 0))

    # 31 relocationData -----------------------------------------------------------------------
    rd = rec("relocationData", {"relocationId": RELOC_ID, "targetAttemptGeneration": 3, "relayOrdinal": 0,
                                "frames": [f.hex() for f in CAPTURED_1]})
    valid("three-frames-captured-actorSend", rd)
    valid("two-frames-captured-actorRequest",
          with_(with_(rd, "body.frames", [f.hex() for f in CAPTURED_2]), "body.relayOrdinal", 1))
    valid("one-empty-frame", with_(with_(rd, "body.frames", [""]), "body.relayOrdinal", 2))
    bad("frames-count-0", "OutOfBounds", with_(rd, "body.frames", []))
    bad("frames-count-4", "OutOfBounds", with_(rd, "body.frames", ["00", "00", "00", "00"]))
    bad("frames-count-3-one-short-frame", "CountExceedsRemaining",
        with_(rd, "body.frames", Raw(b"\x03" + uint(4, 2) + b"\x5a\x4d")))
    bad("frame-length-beyond-record", "Incomplete",
        with_(rd, "body.frames", Raw(b"\x01" + uint(4, 1000) + CAPTURED_1[0])))
    bad("payload-frame", "WrongFrameCount", rd, patch=add_frame(encode_payload(PAY_EMPTY)))

    # 33 replyRelay ---------------------------------------------------------------------------
    rl = rec("replyRelay", {"relocationId": RELOC_ID, "sourceLease": {"ownerNode": N_BATTLE,
                                                                       "ownerLeaseGeneration": 4},
                            "operationId": opid(50), "replyRouteId": 0x51, "correlationId": "actor-req-0050",
                            "status": "ok", "detail": ""}, payload=PAY_JSON)
    valid("ok-with-reply-payload", rl)
    valid("deadline-exceeded-no-payload",
          with_(with_(without(rl, "payload"), "body.status", "deadlineExceeded"), "body.detail",
                "relocation 중 deadline 초과"))
    bad("correlation-id-with-space", "InvalidAscii", with_(rl, "body.correlationId", "actor req"))
    bad("status-255", "UnknownEnumValue", with_(rl, "body.status", 255))
    bad("on-send-leg", "WrongLeg", rl, leg="send")
    bad("source-lease-generation-zero", "ZeroValue", with_(rl, "body.sourceLease.ownerLeaseGeneration", 0))
    bad("three-frames", "WrongFrameCount", rl, patch=add_frame(encode_payload(PAY_JSON)))

    # 34 relocationCutover --------------------------------------------------------------------
    rc = rec("relocationCutover", {"relocationId": RELOC_ID, "targetAttemptGeneration": 3,
                                   "coordinatorFence": 0x0000018B2F3C4D5E, "boundaryRecordCount": 2,
                                   "boundaryChecksumCrc32c": crc32c(b"".join(CAPTURED_1 + CAPTURED_2))})
    valid("cutover", rc)
    valid("cutover-no-boundary-records", with_(with_(rc, "body.boundaryRecordCount", 0),
                                               "body.boundaryChecksumCrc32c", 0))
    bad("coordinator-fence-zero", "ZeroValue", with_(rc, "body.coordinatorFence", 0))
    bad("crc-truncated", "Incomplete", rc, patch=trunc0(1))
    bad("metadata-flag", "FlagNotAllowed", dict(rc, metadata=META_2))

    # 40 relocationPrepare --------------------------------------------------------------------
    rp = rec("relocationPrepare", {"relocationId": RELOC_ID, "targetAttemptGeneration": 3,
                                   "coordinatorFence": 0x0000018B2F3C4D5E, "objectRoute": R_HONG,
                                   "source": N_BATTLE, "stage": "base",
                                   "payloadTotalLength": len(ZRE1_BLOB), "payloadChunkCount": 2,
                                   "payloadChecksumCrc32c": crc32c(ZRE1_BLOB)})
    valid("base-stage", rp)
    valid("final-stage-empty", with_(with_(with_(with_(rp, "body.stage", "final"), "body.payloadTotalLength", 0),
                                           "body.payloadChunkCount", 0), "body.payloadChecksumCrc32c", 0))
    bad("stage-3", "UnknownEnumValue", with_(rp, "body.stage", 3))
    bad("target-attempt-generation-zero", "ZeroValue", with_(rp, "body.targetAttemptGeneration", 0))
    bad("on-send-leg", "WrongLeg", rp, leg="send")

    # 42 sessionRelocationSeal ----------------------------------------------------------------
    sse = rec("sessionRelocationSeal", {"relocationId": RELOC_ID, "session": SESSION, "actorId": ACTOR_HONG,
                                        "objectGeneration": 17})
    valid("seal", sse)
    bad("session-id-zero", "ZeroValue", with_(sse, "body.session.sessionId", 0))
    bad("on-reply-leg", "WrongLeg", sse, leg="reply")

    # 43 sessionRelocationSealed --------------------------------------------------------------
    ssd = rec("sessionRelocationSealed", {"relocationId": RELOC_ID, "sessionId": 90210,
                                          "bindingGeneration": 6, "outcome": "sealed"})
    valid("sealed", ssd)
    valid("not-current", with_(ssd, "body.outcome", "notCurrent"))
    valid("session-closed", with_(ssd, "body.outcome", "sessionClosed"))
    bad("outcome-4", "UnknownEnumValue", with_(ssd, "body.outcome", 4))
    bad("on-request-leg", "WrongLeg", ssd, leg="request")

    # 44 sessionRelocationRoute ---------------------------------------------------------------
    srr = rec("sessionRelocationRoute", {"relocationId": RELOC_ID, "session": SESSION, "actorId": ACTOR_HONG,
                                         "objectGeneration": 17, "action": "route",
                                         "targetRoute": dict(R_HONG, targetNode=N_KR, objectGeneration=18)})
    srr_abort = with_(with_(srr, "body.targetRoute", DELETE), "body.action", "abort")
    valid("route-with-target-route", srr)
    valid("abort-without-target-route", srr_abort)
    bad("abort-with-target-route-present", "TrailingBytes",
        with_(srr_abort, "body.targetRoute", R_HONG))
    bad("route-without-target-route", "Incomplete", with_(srr, "body.targetRoute", Raw(b"")))
    bad("action-3", "UnknownEnumValue", with_(srr, "body.action", 3))
    bad("target-route-object-generation-zero", "ZeroValue", with_(srr, "body.targetRoute.objectGeneration", 0))

    # 46 replyRelayAck ------------------------------------------------------------------------
    rra = rec("replyRelayAck", {"relocationId": RELOC_ID, "operationId": opid(50), "replyRouteId": 0x51})
    valid("ack", rra)
    valid("ack-high-word-only", with_(rra, "body.operationId", opid(0, 1)))
    bad("operation-id-all-zero", "ConstraintViolated", with_(rra, "body.operationId", opid(0, 0)))
    bad("on-request-leg", "WrongLeg", rra, leg="request")
    bad("reply-route-id-zero", "ZeroValue", with_(rra, "body.replyRouteId", 0))

    # 52 relocationState ----------------------------------------------------------------------
    rs = rec("relocationState", {"relocationId": RELOC_ID, "targetAttemptGeneration": 3,
                                 "coordinatorFence": 0x0000018B2F3C4D5E, "objectKind": "actor",
                                 "objectId": ACTOR_HONG, "objectGeneration": 17, "senderRole": "source",
                                 "chunk": ZRD1_0})
    valid("chunk-0-from-source", rs)
    valid("chunk-1-from-coordinator", with_(with_(rs, "body.chunk", ZRD1_1), "body.senderRole", "coordinator"))
    valid("empty-chunk", with_(rs, "body.chunk", {"chunkOrdinal": 2, "data": ""}))
    chunk_blob = encode_durable(ZRD1, ZRD1_0)
    bad("chunk-bad-magic", "BadMagic",
        with_(rs, "body.chunk", Raw(lp32(encode_durable(ZRD1, ZRD1_0, magic=bytes.fromhex("5a524531"))))))
    bad("chunk-version-2", "UnsupportedVersion",
        with_(rs, "body.chunk", Raw(lp32(encode_durable(ZRD1, ZRD1_0, version=2)))))
    bad("trailing-byte-inside-chunk", "TrailingBytes",
        with_(rs, "body.chunk", Raw(lp32(chunk_blob + b"\x00"))))
    bad("chunk-data-length-beyond-chunk", "Incomplete",
        with_(rs, "body.chunk", Raw(lp32(chunk_blob[:-1]))))
    bad("chunk-length-beyond-frame", "Incomplete", rs, patch=trunc0(1))
    bad("sender-role-3", "UnknownEnumValue", with_(rs, "body.senderRole", 3))
    bad("object-kind-0", "UnknownEnumValue", with_(rs, "body.objectKind", 0))

    # 53 relocationFailed ---------------------------------------------------------------------
    rf = rec("relocationFailed", {"relocationId": RELOC_ID, "targetAttemptGeneration": 3,
                                  "reason": "checksumMismatch",
                                  "detail": "payload CRC-32C 0x1a2b3c4d != 0x00000000"})
    valid("checksum-mismatch", rf)
    valid("unknown-stable-type-korean-detail",
          with_(with_(rf, "body.reason", "unknownStableType"), "body.detail", "알 수 없는 stable type"))
    bad("reason-9", "UnknownEnumValue", with_(rf, "body.reason", 9))
    bad("reason-0", "UnknownEnumValue", with_(rf, "body.reason", 0))
    bad("on-send-leg", "WrongLeg", rf, leg="send")
    bad("detail-invalid-utf8", "InvalidUtf8", with_(rf, "body.detail", b"\xf8\x88\x80\x80\x80"))


def build_durables():
    # instance-activation-recovery-v1 (ZLIA) --------------------------------------------------
    dvalid(ZLIA, "request-with-metadata", ZLIA_REQUEST)
    dvalid(ZLIA, "send-without-metadata-empty-payload", ZLIA_SEND)
    dvalid(ZLIA, "send-empty-metadata-present", dict(ZLIA_SEND, metadataPresent=True,
                                                      metadata=encode_metadata([]).hex()))
    content = durable_content(ZLIA, ZLIA_REQUEST)
    dinvalid(ZLIA, "bad-magic-zre1", "BadMagic", seal(ZLIA, bytes.fromhex("5a524531") + content[4:]))
    dinvalid(ZLIA, "bad-magic-lowercase-zlia", "BadMagic", seal(ZLIA, b"zlia" + content[4:]))
    dinvalid(ZLIA, "version-2", "UnsupportedVersion", seal(ZLIA, durable_content(ZLIA, ZLIA_REQUEST, version=2)))
    dinvalid(ZLIA, "version-0", "UnsupportedVersion", seal(ZLIA, durable_content(ZLIA, ZLIA_REQUEST, version=0)))
    good = seal(ZLIA, content)
    dinvalid(ZLIA, "trailer-byte-flipped", "ChecksumMismatch", good[:-1] + bytes([good[-1] ^ 0x01]))
    dinvalid(ZLIA, "payload-byte-flipped", "ChecksumMismatch",
             good[:-5] + bytes([good[-5] ^ 0x80]) + good[-4:])
    dinvalid(ZLIA, "trailer-zero", "ChecksumMismatch", good[:-4] + b"\x00\x00\x00\x00")
    dinvalid(ZLIA, "empty", "Incomplete", b"")
    dinvalid(ZLIA, "magic-only", "Incomplete", bytes.fromhex(DURABLES[ZLIA]["magic"]))
    dinvalid(ZLIA, "payload-truncated-8-bytes-resealed", "Incomplete", seal(ZLIA, content[:-8]))
    dinvalid(ZLIA, "trailing-byte-after-trailer", "TrailingBytes", good + b"\x00")
    dinvalid(ZLIA, "operation-kind-3", "UnknownEnumValue", encode_durable(ZLIA, dict(ZLIA_REQUEST, operationKind=3)))
    dinvalid(ZLIA, "metadata-present-2", "UnknownEnumValue",
             encode_durable(ZLIA, dict(ZLIA_REQUEST, metadataPresent=2)))
    dinvalid(ZLIA, "metadata-1025-bytes", "OutOfBounds",
             encode_durable(ZLIA, dict(ZLIA_REQUEST, metadata=encode_metadata(metadata_of_size(1025)).hex())))
    dinvalid(ZLIA, "descriptor-version-zero", "ZeroValue", encode_durable(ZLIA, dict(ZLIA_REQUEST, descriptorVersion=0)))
    dinvalid(ZLIA, "correlation-id-with-space", "InvalidAscii",
             encode_durable(ZLIA, dict(ZLIA_REQUEST, correlationId="inst req")))
    dinvalid(ZLIA, "operation-id-all-zero", "ConstraintViolated",
             encode_durable(ZLIA, dict(ZLIA_REQUEST, operationId=opid(0, 0))))
    dinvalid(ZLIA, "target-mesh-empty", "OutOfBounds", encode_durable(ZLIA, dict(ZLIA_REQUEST, targetMesh="")))
    dinvalid(ZLIA, "spot-id-invalid-utf8", "InvalidUtf8", encode_durable(ZLIA, dict(ZLIA_REQUEST, spotId=b"\xff\xfe")))
    dinvalid(ZLIA, "payload-length-above-1MiB", "OutOfBounds",
             encode_durable(ZLIA, dict(ZLIA_REQUEST, payload=Raw(uint(4, LIMITS["activationEnvelopeBytes"] + 1)))))
    # Total size 1 MiB + 1 byte; every field is within its own bound and the CRC is correct.
    base_size = len(encode_durable(ZLIA, dict(ZLIA_SEND, payload="")))
    n = LIMITS["activationEnvelopeBytes"] + 1 - base_size
    big_payload = bytes((i * 131 + 7) & 0xFF for i in range(n))
    big = encode_durable(ZLIA, dict(ZLIA_SEND, payload=big_payload))
    assert len(big) == LIMITS["activationEnvelopeBytes"] + 1
    dinvalid(ZLIA, "total-size-1MiB-plus-1", "OutOfBounds", big)

    # relocation-envelope-v1 (ZRE1) -----------------------------------------------------------
    dvalid(ZRE1, "actor-with-queue-and-timers", ZRE1_ACTOR)
    dvalid(ZRE1, "spot-empty", ZRE1_SPOT_EMPTY)
    dvalid(ZRE1, "actor-with-bound-session", ZRE1_ACTOR_BOUND)
    dinvalid(ZRE1, "bound-session-present-2", "UnknownEnumValue",
             encode_durable(ZRE1, dict(ZRE1_SPOT_EMPTY, boundSessionPresent=2)))
    dinvalid(ZRE1, "bound-session-present-without-session", "Incomplete",
             encode_durable(ZRE1, ZRE1_ACTOR_BOUND)[:-1])
    dinvalid(ZRE1, "bound-session-id-zero", "ZeroValue",
             encode_durable(ZRE1, dict(ZRE1_ACTOR_BOUND, boundSession=dict(SESSION, sessionId=0))))
    good = encode_durable(ZRE1, ZRE1_ACTOR)
    dinvalid(ZRE1, "bad-magic-zrd1", "BadMagic", bytes.fromhex("5a524431") + good[4:])
    dinvalid(ZRE1, "version-2", "UnsupportedVersion", encode_durable(ZRE1, ZRE1_ACTOR, version=2))
    dinvalid(ZRE1, "magic-only", "Incomplete", good[:4])
    dinvalid(ZRE1, "truncated-last-byte", "Incomplete", good[:-1])
    dinvalid(ZRE1, "trailing-byte-after-last-field", "TrailingBytes", good + b"\x00")
    dinvalid(ZRE1, "relocation-id-all-zero", "ZeroValue", encode_durable(ZRE1, dict(ZRE1_ACTOR, relocationId="00" * 16)))
    dinvalid(ZRE1, "relocation-policy-4", "UnknownEnumValue", encode_durable(ZRE1, dict(ZRE1_ACTOR, relocationPolicy=4)))
    dinvalid(ZRE1, "object-kind-0", "UnknownEnumValue", encode_durable(ZRE1, dict(ZRE1_ACTOR, objectKind=0)))
    dinvalid(ZRE1, "saved-queue-count-u32-max", "CountExceedsRemaining",
             encode_durable(ZRE1, dict(ZRE1_SPOT_EMPTY, savedQueue=Raw(uint(4, 0xFFFFFFFF)))))
    dinvalid(ZRE1, "timers-count-u32-max", "CountExceedsRemaining",
             encode_durable(ZRE1, dict(ZRE1_SPOT_EMPTY, timers=Raw(uint(4, 0xFFFFFFFF)))))
    dinvalid(ZRE1, "saved-work-frames-count-0", "OutOfBounds",
             encode_durable(ZRE1, dict(ZRE1_ACTOR, savedQueue=[{"sequence": 1, "frames": []}])))
    dinvalid(ZRE1, "saved-work-frames-count-4", "OutOfBounds",
             encode_durable(ZRE1, dict(ZRE1_ACTOR, savedQueue=[{"sequence": 1, "frames": ["", "", "", ""]}])))
    dinvalid(ZRE1, "timer-id-zero", "ZeroValue",
             encode_durable(ZRE1, with_(ZRE1_ACTOR, "timers.0.timerId", 0)))
    dinvalid(ZRE1, "timer-kind-3", "UnknownEnumValue",
             encode_durable(ZRE1, with_(ZRE1_ACTOR, "timers.1.kind", 3)))
    dinvalid(ZRE1, "application-state-length-beyond-blob", "Incomplete",
             encode_durable(ZRE1, dict(ZRE1_SPOT_EMPTY, applicationState=Raw(uint(4, 0xFFFFFFF0)))))

    # relocation-data-chunk-v1 (ZRD1) ---------------------------------------------------------
    dvalid(ZRD1, "chunk-0", ZRD1_0)
    dvalid(ZRD1, "chunk-1", ZRD1_1)
    dvalid(ZRD1, "empty-data-max-ordinal", {"chunkOrdinal": 0xFFFFFFFF, "data": ""})
    good = encode_durable(ZRD1, ZRD1_1)
    dinvalid(ZRD1, "bad-magic", "BadMagic", b"ZRD2" + good[4:])
    dinvalid(ZRD1, "version-2", "UnsupportedVersion", encode_durable(ZRD1, ZRD1_1, version=2))
    dinvalid(ZRD1, "magic-only", "Incomplete", good[:4])
    dinvalid(ZRD1, "data-truncated", "Incomplete", good[:-1])
    dinvalid(ZRD1, "data-length-u32-max", "Incomplete",
             encode_durable(ZRD1, {"chunkOrdinal": 0, "data": Raw(uint(4, 0xFFFFFFFF) + b"\x00")}))
    dinvalid(ZRD1, "trailing-byte-after-last-field", "TrailingBytes", good + b"\x00")

    # relocation-manifest-v1 (ZRM1) -----------------------------------------------------------
    dvalid(ZRM1, "two-chunks", ZRM1_VALUE)
    dvalid(ZRM1, "no-chunks", ZRM1_EMPTY)
    content = durable_content(ZRM1, ZRM1_VALUE)
    good = seal(ZRM1, content)
    dinvalid(ZRM1, "bad-magic", "BadMagic", seal(ZRM1, bytes.fromhex("5a525031") + content[4:]))
    dinvalid(ZRM1, "version-2", "UnsupportedVersion", seal(ZRM1, durable_content(ZRM1, ZRM1_VALUE, version=2)))
    dinvalid(ZRM1, "trailer-byte-flipped", "ChecksumMismatch", good[:-4] + bytes([good[-4] ^ 0xFF]) + good[-3:])
    dinvalid(ZRM1, "digest-byte-flipped", "ChecksumMismatch", good[:-6] + bytes([good[-6] ^ 0x10]) + good[-5:])
    dinvalid(ZRM1, "magic-only", "Incomplete", good[:4])
    dinvalid(ZRM1, "digest-truncated-8-bytes-resealed", "Incomplete", seal(ZRM1, content[:-8]))
    dinvalid(ZRM1, "trailing-byte-after-trailer", "TrailingBytes", good + b"\x00")
    dinvalid(ZRM1, "chunks-count-u32-max", "CountExceedsRemaining",
             encode_durable(ZRM1, dict(ZRM1_EMPTY, chunks=Raw(uint(4, 0xFFFFFFFF)))))
    dinvalid(ZRM1, "chunk-reference-empty", "OutOfBounds",
             encode_durable(ZRM1, with_(ZRM1_VALUE, "chunks.0.reference", "")))
    dinvalid(ZRM1, "chunk-reference-1025-bytes", "OutOfBounds",
             encode_durable(ZRM1, with_(ZRM1_VALUE, "chunks.1.reference", "r" * 1025)))
    dinvalid(ZRM1, "object-generation-zero", "ZeroValue", encode_durable(ZRM1, dict(ZRM1_VALUE, objectGeneration=0)))

    # relocation-root-pointer (ZRP1) ----------------------------------------------------------
    dvalid(ZRP1, "zlia-receipt", ZRP1_VALUE)
    long_ref = "relocation-store/서울/" + "가" * 333 + "x"  # 24 + 999 + 1 bytes
    assert len(long_ref.encode("utf-8")) == LIMITS["storeReferenceBytes"]
    dvalid(ZRP1, "korean-reference-1024-bytes-empty-object",
           dict(ZRP1_VALUE, reference=long_ref, sizeBytes=0, sha256=hashlib.sha256(b"").hexdigest()))
    content = durable_content(ZRP1, ZRP1_VALUE)
    good = seal(ZRP1, content)
    dinvalid(ZRP1, "bad-magic", "BadMagic", seal(ZRP1, bytes.fromhex("5a4c4941") + content[4:]))
    dinvalid(ZRP1, "version-2", "UnsupportedVersion", seal(ZRP1, durable_content(ZRP1, ZRP1_VALUE, version=2)))
    dinvalid(ZRP1, "trailer-byte-flipped", "ChecksumMismatch", good[:-2] + bytes([good[-2] ^ 0x04]) + good[-1:])
    dinvalid(ZRP1, "size-byte-flipped", "ChecksumMismatch",
             good[:-4 - 32 - 1] + bytes([good[-4 - 32 - 1] ^ 0x01]) + good[-4 - 32:])
    dinvalid(ZRP1, "magic-only", "Incomplete", good[:4])
    dinvalid(ZRP1, "digest-truncated-8-bytes-resealed", "Incomplete", seal(ZRP1, content[:-8]))
    dinvalid(ZRP1, "trailing-byte-after-trailer", "TrailingBytes", good + b"\x00")
    dinvalid(ZRP1, "reference-empty", "OutOfBounds", encode_durable(ZRP1, dict(ZRP1_VALUE, reference="")))
    dinvalid(ZRP1, "reference-1025-bytes", "OutOfBounds", encode_durable(ZRP1, dict(ZRP1_VALUE, reference="r" * 1025)))
    dinvalid(ZRP1, "reference-invalid-utf8", "InvalidUtf8",
             encode_durable(ZRP1, dict(ZRP1_VALUE, reference=b"relocation-store/\xff")))


# ---------------------------------------------------------------------------------------------
# Malformed records not specific to one command
# ---------------------------------------------------------------------------------------------

def build_records_invalid():
    T = RECORDS_INVALID
    lp = encode_record(rec("livenessProbe", {"probeId": 7, "connectionGeneration": 3}))
    ns = encode_record(rec("nodeSend", {"source": N_ZONE, "target": N_LOBBY}, metadata=META_2, payload=PAY_CHAT))

    def inv(name, error, frames, topology="routeMesh", leg="send"):
        invalid(None, name, error, frames, topology, leg, target=T)

    # BadMagic
    inv("magic-5a4e", "BadMagic", set_header(lp, magic=b"\x5a\x4e"))
    inv("magic-byte-swapped-4d5a", "BadMagic", set_header(lp, magic=b"\x4d\x5a"))
    inv("magic-zero", "BadMagic", set_header(lp, magic=b"\x00\x00"))
    inv("magic-lowercase-zm", "BadMagic", set_header(lp, magic=b"zm"))
    inv("durable-magic-as-record", "BadMagic", [bytes.fromhex("5a4c494101") + lp[0][5:]])
    # UnsupportedVersion (wire major)
    inv("major-0", "UnsupportedVersion", set_header(lp, major=0))
    inv("major-2", "UnsupportedVersion", set_header(lp, major=2))
    inv("major-255", "UnsupportedVersion", set_header(lp, major=255))
    # Incomplete
    inv("frame0-empty", "Incomplete", [b""])
    inv("frame0-1-byte", "Incomplete", [b"\x5a"])
    inv("frame0-magic-only", "Incomplete", [b"\x5a\x4d"])
    inv("frame0-3-bytes", "Incomplete", [b"\x5a\x4d\x01"])
    inv("frame0-4-bytes", "Incomplete", [b"\x5a\x4d\x01\x05"])
    inv("frame0-header-only-body-missing", "Incomplete", [lp[0][:5]])
    inv("truncated-body", "Incomplete", [lp[0][:-3]])
    # ReservedCommand / UnknownCommand
    for cid in (7, 10, 15, 32, 35, 41, 45, 54, 128, 255):
        inv("reserved-command-%d" % cid, "ReservedCommand", set_header(lp, cmd_id=cid))
    inv("reserved-command-32-header-only", "ReservedCommand", [b"\x5a\x4d\x01\x20\x00"])
    inv("unknown-command-0", "UnknownCommand", set_header(lp, cmd_id=0))
    inv("unknown-command-0-header-only", "UnknownCommand", [b"\x5a\x4d\x01\x00\x00"])
    # UndefinedFlags
    for bit in (0x10, 0x20, 0x40, 0x80):
        inv("undefined-flag-0x%02x" % bit, "UndefinedFlags", set_header(lp, flags=bit))
    inv("undefined-flags-0xf0", "UndefinedFlags", set_header(lp, flags=0xF0))
    inv("undefined-flag-0x10-plus-allowed-metadata", "UndefinedFlags", set_header(ns, flags=0x11))
    # FlagNotAllowed
    inv("metadata-flag-on-livenessProbe-with-frame", "FlagNotAllowed",
        encode_record(rec("livenessProbe", {"probeId": 7, "connectionGeneration": 3}, metadata=META_2)))
    inv("extension-flag-on-livenessAck-with-tail", "FlagNotAllowed",
        encode_record(rec("livenessAck", {"probeId": 7, "connectionGeneration": 3},
                          extension={"extensionId": 1, "data": ""})))
    inv("boundSession-flag-on-nodeSend-with-tail", "FlagNotAllowed",
        encode_record(rec("nodeSend", {"source": N_ZONE, "target": N_LOBBY}, payload=PAY_CHAT,
                          boundSession={"session": SESSION})))
    inv("sourceSpotId-flag-on-spotSend-with-tail", "FlagNotAllowed",
        encode_record(rec("spotSend", {"route": R_ROOM, "source": N_ZONE}, payload=PAY_CHAT,
                          sourceSpotId={"spotId": ENTRY_SPOT_ZONE})))
    inv("extension-flag-on-actorSend-with-tail", "FlagNotAllowed",
        encode_record(rec("actorSend", {"route": R_HONG, "source": N_ZONE}, payload=PAY_CHAT,
                          extension={"extensionId": 0x0101, "data": "00ff"})))
    # WrongFrameCount
    inv("metadata-flag-without-frame-1", "WrongFrameCount", [ns[0], ns[2]])
    inv("metadata-flag-only-frame-0", "WrongFrameCount", [ns[0]])
    inv("extra-fourth-frame", "WrongFrameCount", ns + [b""])
    inv("payload-none-command-with-extra-frame", "WrongFrameCount", lp + [encode_payload(PAY_CHAT)])
    # TopologyNotAllowed: only commands 1..6 on ClientServer
    inv("nodeSend-on-clientServer", "TopologyNotAllowed", ns, topology="clientServer")
    inv("channelSend-on-clientServer", "TopologyNotAllowed",
        encode_record(rec("channelSend", {"channelName": "로비", "source": N_CLIENT, "target": N_LOBBY},
                          payload=PAY_CHAT)), topology="clientServer")
    inv("reply-on-clientServer", "TopologyNotAllowed",
        encode_record(rec("reply", {"operationId": opid(1), "replyRouteId": 1, "correlationId": "c1",
                                    "status": "ok", "detail": "", "result": {"kind": "none"}})),
        topology="clientServer", leg="reply")
    inv("messageFollow-on-clientServer", "TopologyNotAllowed",
        encode_record(rec("messageFollow", {"follow": {
            "sourceRoute": R_ROOM, "targetRoute": R_ROOM, "hopCount": 1, "queueCount": 0,
            "queueBytes": 0, "operationId": opid(1), "replyRouteId": 1}})), topology="clientServer")
    inv("relocationPrepare-on-clientServer", "TopologyNotAllowed",
        encode_record(rec("relocationPrepare", {
            "relocationId": RELOC_ID, "targetAttemptGeneration": 1, "coordinatorFence": 1,
            "objectRoute": R_HONG, "source": N_BATTLE, "stage": "base", "payloadTotalLength": 0,
            "payloadChunkCount": 0, "payloadChecksumCrc32c": 0})), topology="clientServer", leg="request")
    # WrongLeg
    inv("livenessProbe-on-request-leg", "WrongLeg", lp, leg="request")
    inv("nodeSend-on-reply-leg", "WrongLeg", ns, leg="reply")


# ---------------------------------------------------------------------------------------------
# Hand-assembled byte strings: pin the generic encoder to the byte rules
# ---------------------------------------------------------------------------------------------

def hand_assembled_checks():
    def h(s):
        return bytes.fromhex(s.replace(" ", ""))

    # livenessProbe probeId=1 connectionGeneration=2
    assert encode_record(rec("livenessProbe", {"probeId": 1, "connectionGeneration": 2})) == [
        h("5a4d 01 05 00  0000000000000001  0000000000000002")]
    # reject staleLifecycle(6), detail "ok" (u16 length)
    assert encode_record(rec("reject", {"reason": "staleLifecycle", "detail": "ok"})) == [
        h("5a4d 01 03 00  06  0002 6f6b")]
    # nodeSend + metadata [a=b] + typed payload envelope
    assert encode_record(rec("nodeSend", {"source": node("x", 1), "target": node("y", 2)},
                             metadata=[["a", "b"]],
                             payload={"packetName": "P", "contentType": "", "payload": "ff"})) == [
        h("5a4d 01 10 01  01 78 0000000000000001  01 79 0000000000000002"),
        h("0001  0001 61  0001 62"),
        h("01 50  00  00000001 ff")]
    # actorSend with both tails: body, 0x02 + SessionRef, 0x04 + SpotId
    a = rec("actorSend", {"route": route("actor", "A", 3, node("n", 4), 5, 6), "source": node("s", 7)},
            payload={"packetName": "", "contentType": "", "payload": ""},
            boundSession={"session": {"ownerNode": node("o", 8), "sessionId": 9, "bindingGeneration": 10}},
            sourceSpotId={"spotId": "S"})
    assert encode_record(a)[0] == h(
        "5a4d 01 18 06"
        " 01 01 41 0000000000000003 01 6e 0000000000000004 0000000000000005 0000000000000006"
        " 01 73 0000000000000007"
        " 02 01 6f 0000000000000008 0000000000000009 000000000000000a"
        " 04 01 53")
    # reply: union tag u8 + u16 body length
    r = rec("reply", {"operationId": {"high": 0, "low": 1}, "replyRouteId": 2, "correlationId": "c",
                      "status": "ok", "detail": "", "result": {"kind": "userSpotClose", "closed": True}})
    assert encode_record(r)[0] == h(
        "5a4d 01 14 00 0000000000000000 0000000000000001 0000000000000002 01 63 00 0000 02 0001 01")
    # instanceSpot send: `when` fields absent; InstanceRoute missing = tag 02
    i = rec("instanceSpot", {"operationKind": "send", "operationId": {"high": 1, "low": 0},
                             "deadlineUnixMs": 3, "source": node("s", 4), "sourceSpotId": "",
                             "route": {"kind": "missing", "targetMesh": "m", "targetNode": node("t", 5),
                                       "spotId": "p", "stableType": "T", "descriptorVersion": 6,
                                       "deadlineUnixMs": 7}},
            payload={"packetName": "", "contentType": "", "payload": ""})
    assert encode_record(i)[0] == h(
        "5a4d 01 27 00 01 0000000000000001 0000000000000000 0000000000000003 01 73 0000000000000004 00"
        " 02 0020 01 6d 01 74 0000000000000005 01 70 01 54 0000000000000006 0000000000000007")
    # messageFollow: const version 01 + u32-length-delimited body
    body = enc_type("MessageFollowBody", {
        "sourceRoute": route("spot", "S", 1, node("n", 2), 3, 4),
        "targetRoute": route("spot", "S", 1, node("m", 5), 3, 6),
        "hopCount": 2, "queueCount": 0, "queueBytes": 0, "operationId": {"high": 0, "low": 9},
        "replyRouteId": 10})
    assert len(body) == 2 * 37 + 1 + 4 + 4 + 16 + 8
    assert encode_record(rec("messageFollow", {"follow": {
        "sourceRoute": route("spot", "S", 1, node("n", 2), 3, 4),
        "targetRoute": route("spot", "S", 1, node("m", 5), 3, 6),
        "hopCount": 2, "queueCount": 0, "queueBytes": 0, "operationId": {"high": 0, "low": 9},
        "replyRouteId": 10}}))[0] == h("5a4d 01 32 00 01 0000006b") + body
    # relocationState: durable chunk = u32 length + ZRD1 bytes
    assert field_bytes({"name": "chunk", "durable": ZRD1, "lengthType": "u32"},
                       {"chunkOrdinal": 1, "data": "616263"}) == h(
        "00000010 5a524431 01 00000001 00000003 616263")
    # ZRP1 with CRC-32C trailer over everything before it
    zrp = encode_durable(ZRP1, {"reference": "r", "sha256": "11" * 32, "sizeBytes": 2,
                                "inventoryDigest": "22" * 32})
    pre = h("5a525031 01 0001 72") + b"\x11" * 32 + h("0000000000000002") + b"\x22" * 32
    assert zrp == pre + crc32c(pre).to_bytes(4, "big")
    # ZLIA send: replyRouteId / correlationId absent, metadata absent (metadataPresent = 00)
    zl = durable_content(ZLIA, {"operationKind": "send", "operationId": {"high": 0, "low": 1},
                                "deadlineUnixMs": 2, "source": node("s", 3), "sourceSpotId": "",
                                "targetMesh": "m", "targetNode": node("t", 4), "spotId": "p",
                                "stableType": "T", "descriptorVersion": 5, "metadataPresent": False,
                                "packetName": "", "contentType": "", "payload": ""})
    assert zl == h("5a4c4941 01 01 0000000000000000 0000000000000001 0000000000000002 01 73 0000000000000003"
                   " 00 01 6d 01 74 0000000000000004 01 70 01 54 0000000000000005 00 00 00 00000000")
    # vectors: update.channelWeights (u16 count), relocationData.frames (u8 count of u32-length frames)
    assert encode_record(rec("update", {"sender": node("x", 1), "descriptorRevision": 2, "state": "serving",
                                        "placementWeight": 3, "placementCapacity": 4, "maintenanceWave": "",
                                        "channelWeights": [{"channelName": "c", "weight": 5}]})) == [
        h("5a4d 01 04 00  01 78 0000000000000001  0000000000000002  02  0003  00000004  00  0001 01 63 0005")]
    assert encode_record(rec("relocationData", {"relocationId": "00" * 15 + "01", "targetAttemptGeneration": 2,
                                                "relayOrdinal": 3, "frames": ["aa", ""]})) == [
        h("5a4d 01 1f 00  00000000000000000000000000000001  0000000000000002  0000000000000003"
          "  02  00000001 aa  00000000")]
    # CRC-32C known vectors (RFC 3720 B.4)
    assert crc32c(b"\x00" * 32) == 0x8A9136AA
    assert crc32c(b"\xff" * 32) == 0x62A8AB43
    assert crc32c(bytes(range(32))) == 0x46DD794E


# ---------------------------------------------------------------------------------------------
# Module fixture sets: metadata.json, envelope.json, multipart.json, stream.json, fanout.json,
# keys.json.  Layouts and check orders come from the module documentation of
# protocol/src/{metadata,envelope,multipart,stream,fanout,keys}.rs (wire §1, §2, §5, glossary
# §11); the bytes are produced here, never by the Rust code.
# ---------------------------------------------------------------------------------------------

MOD_FILES = ("metadata", "envelope", "multipart", "stream", "fanout", "keys")
MOD = {n: {"valid": [], "invalid": []} for n in MOD_FILES}


# --- metadata frame (metadata.rs) -------------------------------------------------------------

MD_ENTRY_MIN_BYTES = 4  # key_len + value_len: the guard metadata.rs applies to entry_count


def mod_decode_metadata(frame):
    """The metadata frame on its own, in metadata.rs order.

    1. size > 1,024 -> MetadataTooLarge (before parsing);
    2. entry_count: Incomplete if cut, CountExceedsRemaining if count x 4 > remaining bytes;
    3. per entry: key_len (Incomplete), key_len 0 -> OutOfBounds (before the key bytes), key
       bytes (Incomplete), UTF-8 (InvalidUtf8), NUL (MetadataNul); then the same for the value
       (no minimum length);
    4. TrailingBytes.
    A repeated key keeps its first position and takes its last value.
    """
    if len(frame) > METADATA_LIMIT:
        raise PErr("MetadataTooLarge", "metadata")
    r = Reader(frame)
    n = r.uint(2, "metadata.entryCount")
    if n * MD_ENTRY_MIN_BYTES > r.remaining():
        raise PErr("CountExceedsRemaining", "metadata.entryCount")
    entries = []
    for _ in range(n):
        kl = r.uint(2, "metadata.key")
        if kl < 1:
            raise PErr("OutOfBounds", "metadata.key")
        key = _utf8(r.take(kl, "metadata.key"), "metadata.key")
        if "\x00" in key:
            raise PErr("MetadataNul", "key")
        vl = r.uint(2, "metadata.value")
        value = _utf8(r.take(vl, "metadata.value"), "metadata.value")
        if "\x00" in value:
            raise PErr("MetadataNul", "value")
        for e in entries:
            if e[0] == key:
                e[1] = value
                break
        else:
            entries.append([key, value])
    r.finish("metadata frame")
    return entries


def md_valid(name, wire_entries, expected=None):
    """wire_entries are encoded as they are (duplicates included); `expected` is the decoded
    snapshot (defaults to wire_entries)."""
    _unique("metadata.json", name)
    frame = encode_metadata(wire_entries)
    assert len(frame) <= METADATA_LIMIT
    expected = [list(e) for e in (wire_entries if expected is None else expected)]
    got = mod_decode_metadata(frame)
    assert got == expected, "metadata.json/%s: %r != %r" % (name, got, expected)
    reencodes = encode_metadata(got) == frame
    has_dup = len({k for k, _ in wire_entries}) != len(wire_entries)
    assert reencodes == (not has_dup), "metadata.json/%s: reencodes %s" % (name, reencodes)
    MOD["metadata"]["valid"].append({"name": name, "hex": frame.hex(), "decoded": got,
                                     "reencodes": reencodes})


def _expect_err(scope, name, error, fn, *args):
    try:
        got = fn(*args)
    except PErr as e:
        assert e.kind == error, "%s/%s: expected %s, reference decoder says %s (%s)" % (
            scope, name, error, e.kind, e.where)
    else:
        raise AssertionError("%s/%s decodes: %s" % (scope, name, canon(got)[:200]))


def md_invalid(name, error, frame):
    _unique("metadata.json", name)
    _expect_err("metadata.json", name, error, mod_decode_metadata, frame)
    MOD["metadata"]["invalid"].append({"name": name, "hex": bytes(frame).hex(), "error": error})


def build_metadata_module():
    h = bytes.fromhex
    md_valid("empty", [])
    md_valid("one-entry", [["x-zlink-locale", "ko-KR"]])
    md_valid("two-entries-traceparent-and-locale", META_2)
    md_valid("korean-keys-and-values", [["사용자", "홍길동"], ["x-request-origin", "모바일/iOS"]])
    md_valid("empty-value", [["x-empty", ""], ["x-flag", "1"]])
    md_valid("keys-are-case-sensitive", [["Trace", "upper"], ["trace", "lower"]])
    md_valid("four-byte-utf8", [["x-emoji", "🎮🏆"], ["🔑", "값"]])
    md_valid("exactly-1024-bytes-two-entries", metadata_of_size(1024))
    md_valid("exactly-1024-bytes-one-entry", [["k", "v" * (1024 - 2 - 4 - 1)]])
    md_valid("duplicate-key-last-value-wins-keeps-first-position",
             [["a", "1"], ["b", "2"], ["a", "3"]], expected=[["a", "3"], ["b", "2"]])
    md_valid("duplicate-key-same-value", [["trace", "t1"], ["trace", "t1"]], expected=[["trace", "t1"]])
    md_valid("duplicate-key-three-times-last-empty",
             [["x", "1"], ["y", "2"], ["x", "3"], ["z", "4"], ["x", ""]],
             expected=[["x", ""], ["y", "2"], ["z", "4"]])
    md_valid("duplicate-korean-key", [["지역", "서울"], ["x-a", "1"], ["지역", "부산"]],
             expected=[["지역", "부산"], ["x-a", "1"]])

    big = encode_metadata(metadata_of_size(1025))
    assert len(big) == 1025
    md_invalid("1025-bytes-well-formed", "MetadataTooLarge", big)
    md_invalid("1025-bytes-of-ff", "MetadataTooLarge", b"\xff" * 1025)
    dup_big = encode_metadata([["k", "v" * 500], ["k", "v" * 513]])
    assert len(dup_big) == 1025
    md_invalid("1025-bytes-duplicate-keys-would-shrink", "MetadataTooLarge", dup_big)
    md_invalid("count-256-one-entry", "CountExceedsRemaining", h("0100 0001 6b 0000".replace(" ", "")))
    md_invalid("count-3-one-entry", "CountExceedsRemaining", h("0003 0001 6b 0001 76".replace(" ", "")))
    md_invalid("count-65535-no-entries", "CountExceedsRemaining", h("ffff"))
    # 3 bytes after the count are fewer than the 4-byte minimum entry: the count guard fires
    # before the entry is read.
    md_invalid("count-1-three-bytes-left", "CountExceedsRemaining", h("000100016b"))
    md_invalid("empty-frame", "Incomplete", b"")
    md_invalid("count-cut-to-one-byte", "Incomplete", h("00"))
    md_invalid("key-longer-than-frame", "Incomplete", h("000100096b0000"))
    md_invalid("value-longer-than-frame", "Incomplete", h("000100016b0005"))
    md_invalid("value-length-cut", "Incomplete", h("000100016b00"))
    md_invalid("second-entry-key-cut", "Incomplete", h("0002 0001 6b 0001 76 0003 61".replace(" ", "")))
    md_invalid("truncated-last-byte", "Incomplete", encode_metadata(META_2)[:-1])
    md_invalid("empty-key", "OutOfBounds", h("000100000000"))
    md_invalid("empty-key-second-entry", "OutOfBounds", h("0002 0001 6b 0000 0000 0001 76".replace(" ", "")))
    md_invalid("key-invalid-utf8-ff", "InvalidUtf8", encode_metadata([[b"\xff", "v"]]))
    md_invalid("key-overlong-utf8", "InvalidUtf8", encode_metadata([[b"\xc0\xaf", "v"]]))
    md_invalid("value-truncated-utf8", "InvalidUtf8", encode_metadata([["x-user-name", "홍길동".encode()[:-1]]]))
    md_invalid("value-utf8-surrogate", "InvalidUtf8", encode_metadata([["k", b"\xed\xa0\x80"]]))
    md_invalid("nul-in-key", "MetadataNul", encode_metadata([["trace\x00id", "1"]]))
    md_invalid("nul-only-key", "MetadataNul", encode_metadata([["\x00", ""]]))
    md_invalid("nul-in-value", "MetadataNul", encode_metadata([["x-zlink-locale", "ko\x00KR"]]))
    md_invalid("nul-in-second-entry-value", "MetadataNul", encode_metadata([["a", "1"], ["b", "\x00"]]))
    md_invalid("trailing-byte-after-empty", "TrailingBytes", h("000007"))
    md_invalid("trailing-byte-after-entries", "TrailingBytes", encode_metadata(META_2) + b"\x00")
    md_invalid("count-1-but-two-entries", "TrailingBytes",
               h("0001") + encode_metadata([["a", "1"], ["b", "2"]])[2:])


# --- typed payload envelope (envelope.rs) -----------------------------------------------------

def env_valid(name, p):
    _unique("envelope.json", name)
    frame = encode_payload(p)
    got = decode_payload(frame)  # same rules as envelope.rs (see decode_payload)
    assert canon(got) == canon(p), "envelope.json/%s" % name
    assert encode_payload(got) == frame
    MOD["envelope"]["valid"].append({"name": name, "hex": frame.hex(), "decoded": got})


def env_invalid(name, error, frame):
    _unique("envelope.json", name)
    _expect_err("envelope.json", name, error, decode_payload, frame)
    MOD["envelope"]["invalid"].append({"name": name, "hex": bytes(frame).hex(), "error": error})


def build_envelope_module():
    h = bytes.fromhex
    env_valid("chat-protobuf", PAY_CHAT)
    env_valid("json-korean-payload", PAY_JSON)
    env_valid("msgpack", PAY_MOVE)
    env_valid("reply-empty-name-content-type-and-payload", PAY_EMPTY)
    env_valid("reply-no-packet-name-with-payload",
              {"packetName": "", "contentType": "application/json", "payload": b'{"ok":true}'.hex()})
    env_valid("multipart-profile", PAY_JOIN_REPLY)
    env_valid("korean-packet-name", {"packetName": "게임.입장요청", "contentType": "application/json",
                                     "payload": '{"방":1}'.encode("utf-8").hex()})
    env_valid("name-and-content-type-255-bytes",
              {"packetName": "Game." + "N" * 250, "contentType": "application/" + "c" * 243,
               "payload": "00"})
    env_valid("binary-payload-all-256-byte-values",
              {"packetName": "Game.Blob", "contentType": "application/octet-stream",
               "payload": bytes(range(256)).hex()})
    assert len(encode_payload({"packetName": "Game." + "N" * 250, "contentType": "application/" + "c" * 243,
                               "payload": ""})) == 1 + 255 + 1 + 255 + 4

    env_invalid("empty", "Incomplete", b"")
    env_invalid("name-longer-than-frame", "Incomplete", h("0361"))
    env_invalid("content-type-length-missing", "Incomplete", h("0548656c6c6f"))
    env_invalid("content-type-longer-than-frame", "Incomplete", h("00106170706c"))
    env_invalid("payload-length-cut", "Incomplete", h("0000000000"))
    env_invalid("payload-shorter-than-length", "Incomplete", h("00000000000201"))
    env_invalid("truncated-last-payload-byte", "Incomplete", encode_payload(PAY_CHAT)[:-1])
    env_invalid("payload-length-at-limit-bytes-missing", "Incomplete", h("0000") + uint(4, PAYLOAD_LIMIT))
    env_invalid("payload-length-limit-plus-1", "OutOfBounds", h("0000") + uint(4, PAYLOAD_LIMIT + 1))
    env_invalid("payload-length-limit-plus-1-with-name", "OutOfBounds",
                h("0450696e67") + h("00") + uint(4, PAYLOAD_LIMIT + 1) + b"\x01\x02")
    env_invalid("payload-length-u32-max", "OutOfBounds", h("0000ffffffff"))
    env_invalid("name-invalid-utf8", "InvalidUtf8", h("01ff0000000000"))
    env_invalid("name-utf8-surrogate", "InvalidUtf8", h("03eda080") + h("0000000000"))
    env_invalid("content-type-truncated-utf8", "InvalidUtf8",
                h("00") + uint(1, 2) + "홍".encode("utf-8")[:2] + h("00000000"))
    env_invalid("trailing-byte-after-payload", "TrailingBytes", encode_payload(PAY_CHAT) + b"\x00")
    env_invalid("trailing-byte-after-empty-envelope", "TrailingBytes", h("00000000000001"))


# --- Framework multipart profile (multipart.rs) -----------------------------------------------

def mod_decode_multipart(payload):
    """multipart.rs order: count (Incomplete), count x 4 > remaining -> CountExceedsRemaining,
    count 0 -> EmptyMultipart, each u32 length + bytes (Incomplete), TrailingBytes."""
    r = Reader(payload)
    n = r.uint(4, "multipart.partCount")
    if n * 4 > r.remaining():
        raise PErr("CountExceedsRemaining", "multipart.partCount")
    if n == 0:
        raise PErr("EmptyMultipart", "multipart.partCount")
    parts = []
    for _ in range(n):
        parts.append(r.take(r.uint(4, "multipart.part"), "multipart.part").hex())
    r.finish("multipart payload")
    return parts


def mp_valid(name, parts):
    _unique("multipart.json", name)
    payload = multipart(parts)
    got = mod_decode_multipart(payload)
    assert got == [p.hex() for p in parts], "multipart.json/%s" % name
    assert multipart([bytes.fromhex(p) for p in got]) == payload
    MOD["multipart"]["valid"].append({"name": name, "hex": payload.hex(), "decoded": got})
    return payload


def mp_invalid(name, error, payload):
    _unique("multipart.json", name)
    _expect_err("multipart.json", name, error, mod_decode_multipart, payload)
    MOD["multipart"]["invalid"].append({"name": name, "hex": bytes(payload).hex(), "error": error})


def build_multipart_module():
    h = bytes.fromhex
    join = mp_valid("join-reply-one-json-part", ['{"seat":3,"welcome":"환영합니다"}'.encode("utf-8")])
    assert join.hex() == PAY_JOIN_REPLY["payload"]
    mp_valid("two-parts-second-empty", [b"ab", b""])
    mp_valid("one-empty-part", [b""])
    mp_valid("three-parts-json-binary-text",
             [b'{"hp":87}', bytes([0x00, 0xff, 0x00, 0x00, 0x00, 0x01]), "검과 방패".encode("utf-8")])
    mp_valid("ten-one-byte-parts", [bytes([i]) for i in range(10)])
    mp_valid("part-that-looks-like-a-multipart", [multipart([b"x"]), b"y"])

    mp_invalid("zero-parts", "EmptyMultipart", h("00000000"))
    mp_invalid("count-2-four-bytes-left", "CountExceedsRemaining", h("0000000200000000"))
    mp_invalid("count-u32-max", "CountExceedsRemaining", h("ffffffff00000000"))
    mp_invalid("count-1-nothing-after", "CountExceedsRemaining", h("00000001"))
    mp_invalid("empty", "Incomplete", b"")
    mp_invalid("count-cut-to-3-bytes", "Incomplete", h("000001"))
    mp_invalid("part-longer-than-payload", "Incomplete", h("00000001000000050102"))
    mp_invalid("second-part-longer-than-payload", "Incomplete", h("000000020000000000000009"))
    mp_invalid("second-part-length-cut", "Incomplete", h("00000002 00000001 41 000000".replace(" ", "")))
    mp_invalid("truncated-last-byte", "Incomplete", multipart([b"one", b"two"])[:-1])
    mp_invalid("trailing-byte-after-last-part", "TrailingBytes", h("000000010000000007"))
    mp_invalid("count-1-but-two-parts", "TrailingBytes", h("00000001") + multipart([b"a", b"b"])[4:])


# --- STREAM packet (stream.rs) ----------------------------------------------------------------

STREAM_MARKER = 0xF2
STREAM_KIND = {"send": 1, "request": 2, "response": 3, "error": 4}
STREAM_KIND_NAME = {v: k for k, v in STREAM_KIND.items()}
STREAM_CODEC = {"raw": 0, "frameworkJson": 1}
STREAM_CODEC_NAME = {v: k for k, v in STREAM_CODEC.items()}
SF_SEQ, SF_META, SF_CORR, SF_FLOW = 0x01, 0x02, 0x04, 0x08
SF_DEFINED = SF_SEQ | SF_META | SF_CORR | SF_FLOW
STREAM_FLOW_ID_LEN = 36
STREAM_CORR_MAX = 64
STREAM_DEFAULT_LIMIT = 65536
# serde field order of StreamPacket; optional keys are omitted when absent.
STREAM_KEYS = ["kind", "codec", "requestSeq", "packetName", "metadata", "correlationId", "flow", "payload"]


def sp(kind, codec="raw", seq=None, name="", metadata=None, corr=None, flow=None, payload=b""):
    """A StreamPacket in its JSON form (serde field order)."""
    out = {"kind": kind, "codec": codec}
    if seq is not None:
        out["requestSeq"] = seq
    out["packetName"] = name
    if metadata is not None:
        out["metadata"] = [list(e) for e in metadata]
    if corr is not None:
        out["correlationId"] = corr
    if flow is not None:
        out["flow"] = {"flowId": flow[0], "flowOrigin": flow[1]}
    out["payload"] = payload.hex() if isinstance(payload, (bytes, bytearray)) else payload
    return out


def stream_header(p):
    flags = ((SF_SEQ if "requestSeq" in p else 0) | (SF_META if "metadata" in p else 0)
             | (SF_CORR if "correlationId" in p else 0) | (SF_FLOW if "flow" in p else 0))
    out = bytes([STREAM_MARKER, STREAM_KIND[p["kind"]], STREAM_CODEC[p["codec"]], flags])
    if "requestSeq" in p:
        out += uint(8, p["requestSeq"])
    name = p["packetName"].encode("utf-8")
    out += uint(1, len(name)) + name
    if "metadata" in p:
        m = encode_metadata(p["metadata"])
        out += uint(2, len(m)) + m
    if "correlationId" in p:
        c = p["correlationId"].encode("ascii")
        out += uint(1, len(c)) + c
    if "flow" in p:
        fid = p["flow"]["flowId"].encode("ascii")
        assert len(fid) == STREAM_FLOW_ID_LEN
        out += fid + bytes([p["flow"]["flowOrigin"]])
    return out


def stream_raw(header, payload=b"", header_len=None, payload_size=None):
    """Prefix (u16 header_len, u32 payload_size; defaults from the actual bytes) + header + payload."""
    hl = len(header) if header_len is None else header_len
    ps = len(payload) if payload_size is None else payload_size
    return uint(2, hl) + uint(4, ps) + bytes(header) + bytes(payload)


def encode_stream(p):
    return stream_raw(stream_header(p), bytes.fromhex(p["payload"]))


def _stream_ascii(b, where):
    for x in b:
        if not 0x21 <= x <= 0x7E:
            raise PErr("InvalidAscii", where)
    return b.decode("ascii")


def parse_stream_header(hdr):
    """stream.rs header order; every field is read inside header_len."""
    r = Reader(hdr)
    if r.uint(1, "StreamPacket.formatMarker") != STREAM_MARKER:
        raise PErr("BadFormatMarker", "StreamPacket.formatMarker")
    kind = r.uint(1, "StreamPacket.kind")
    if kind not in STREAM_KIND_NAME:
        raise PErr("UnknownEnumValue", "StreamPacket.kind")
    codec = r.uint(1, "StreamPacket.codec")
    if codec not in STREAM_CODEC_NAME:
        raise PErr("UnknownEnumValue", "StreamPacket.codec")
    flags = r.uint(1, "StreamPacket.flags")
    if flags & ~SF_DEFINED & 0xFF:
        raise PErr("UndefinedFlags", "StreamPacket.flags")
    carries_seq = kind in (2, 3, 4)
    if bool(flags & SF_SEQ) != carries_seq:
        raise PErr("ConstraintViolated", "request_seq presence vs kind")
    out = {"kind": STREAM_KIND_NAME[kind], "codec": STREAM_CODEC_NAME[codec]}
    if flags & SF_SEQ:
        seq = r.uint(8, "StreamPacket.requestSeq")
        if seq == 0:
            raise PErr("ZeroValue", "StreamPacket.requestSeq")
        out["requestSeq"] = seq
    name = r.take(r.uint(1, "StreamPacket.packetName"), "StreamPacket.packetName")
    if kind in (3, 4) and name:
        raise PErr("ConstraintViolated", "reply packet name")
    out["packetName"] = _utf8(name, "StreamPacket.packetName")
    if flags & SF_META:
        block = r.take(r.uint(2, "StreamPacket.metadata"), "StreamPacket.metadata")
        out["metadata"] = mod_decode_metadata(block)
    if flags & SF_CORR:
        n = r.uint(1, "StreamPacket.correlationId")
        if not 1 <= n <= STREAM_CORR_MAX:
            raise PErr("OutOfBounds", "StreamPacket.correlationId")
        out["correlationId"] = _stream_ascii(r.take(n, "StreamPacket.correlationId"),
                                             "StreamPacket.correlationId")
    if flags & SF_FLOW:
        fid = _stream_ascii(r.take(STREAM_FLOW_ID_LEN, "StreamPacket.flowId"), "StreamPacket.flowId")
        out["flow"] = {"flowId": fid, "flowOrigin": r.uint(1, "StreamPacket.flowOrigin")}
    r.finish("stream header")
    return out


def mod_decode_stream(buf, limit):
    """One-shot decode of a buffer that must hold exactly one packet (StreamPacket::decode)."""
    buf = bytes(buf)
    if len(buf) < 6:
        raise PErr("Incomplete", "STREAM prefix")
    hl = int.from_bytes(buf[0:2], "big")
    ps = int.from_bytes(buf[2:6], "big")
    if limit != 0 and hl + ps > limit:
        raise PErr("MessageTooLarge", "STREAM prefix")
    total = 6 + hl + ps
    if len(buf) < 6 + hl:
        raise PErr("Incomplete", "STREAM header")
    out = parse_stream_header(buf[6:6 + hl])
    if len(buf) < total:
        raise PErr("Incomplete", "STREAM payload")
    if len(buf) > total:
        raise PErr("TrailingBytes", "STREAM packet")
    out["payload"] = buf[6 + hl:total].hex()
    return out


def st_valid(name, p, limit=STREAM_DEFAULT_LIMIT):
    _unique("stream.json", name)
    buf = encode_stream(p)
    got = mod_decode_stream(buf, limit)
    assert canon(got) == canon(p), "stream.json/%s:\n%s\n%s" % (name, canon(got), canon(p))
    assert list(got) == [k for k in STREAM_KEYS if k in got] and list(p) == list(got), name
    assert encode_stream(got) == buf
    MOD["stream"]["valid"].append({"name": name, "hex": buf.hex(), "maxMessageSize": limit, "decoded": got})
    return buf


def st_invalid(name, error, buf, limit=STREAM_DEFAULT_LIMIT):
    _unique("stream.json", name)
    _expect_err("stream.json", name, error, mod_decode_stream, buf, limit)
    MOD["stream"]["invalid"].append({"name": name, "hex": bytes(buf).hex(), "maxMessageSize": limit,
                                     "error": error})


FLOW_A = ("6f1c2a9e-3b4d-4c5e-8f70-91a2b3c4d5e6", 1)
FLOW_B = ("0d9e8f7a-6b5c-4d3e-a2f1-0e9d8c7b6a55", 255)
FLOW_C = ("3e2d1c0b-a987-4654-b321-0fedcba98765", 0)


def build_stream_module():
    h = bytes.fromhex
    j = lambda s: s.encode("utf-8")  # noqa: E731
    move = j('{"x":12,"y":-3,"z":0}')

    # every kind, both codecs, bare headers
    minimal = st_valid("send-minimal-empty-name-empty-payload", sp("send"))
    assert minimal == h("0005 00000000 f2 01 00 00 00".replace(" ", ""))
    st_valid("send-raw-binary", sp("send", "raw", name="Game.Ping", payload=h("00010203fffe")))
    st_valid("send-framework-json", sp("send", "frameworkJson", name="Game.Move", payload=move))
    st_valid("send-korean-packet-name", sp("send", "frameworkJson", name="게임.채팅",
                                            payload=j('{"text":"안녕하세요"}')))
    st_valid("send-packet-name-255-bytes", sp("send", "raw", name="Game." + "P" * 250, payload=b"\x01"))
    st_valid("request-seq-1", sp("request", "frameworkJson", seq=1, name="Game.EnterRoom",
                                 payload=j('{"room":1001}')))
    st_valid("request-seq-u64-max", sp("request", "raw", seq=U64_MAX, name="Game.Ping", payload=b"\x2a"))
    st_valid("request-empty-name-empty-payload", sp("request", "raw", seq=2))
    st_valid("response-empty-payload", sp("response", "frameworkJson", seq=1))
    st_valid("response-with-payload", sp("response", "frameworkJson", seq=1, payload=j('{"ok":true}')))
    st_valid("response-raw-seq-u64-max", sp("response", "raw", seq=U64_MAX, payload=b"\x00"))
    st_valid("error-with-payload", sp("error", "frameworkJson", seq=77,
                                      payload=j('{"code":"RoomFull","message":"방이 가득 찼습니다"}')))
    st_valid("error-raw-empty-payload", sp("error", "raw", seq=3))

    # optional header parts and their combinations (send: no request_seq)
    st_valid("send-metadata", sp("send", "frameworkJson", name="Game.Move", metadata=META_2, payload=move))
    st_valid("send-correlation", sp("send", "frameworkJson", name="Game.Move", corr="c-0001", payload=move))
    st_valid("send-flow", sp("send", "frameworkJson", name="Game.Move", flow=FLOW_A, payload=move))
    st_valid("send-metadata-correlation", sp("send", "raw", name="Game.Chat", metadata=META_KR,
                                             corr="req-7f3a", payload=j("안녕")))
    st_valid("send-metadata-flow", sp("send", "raw", name="Game.Chat", metadata=[["x-a", "1"]],
                                      flow=FLOW_B, payload=b"\x00"))
    st_valid("send-correlation-flow", sp("send", "raw", name="Game.Chat", corr="~!#$%&'()*+,-./:;<=>?@[]^_`{|}",
                                         flow=FLOW_C, payload=b"\x10\x20"))
    st_valid("send-metadata-correlation-flow", sp("send", "frameworkJson", name="Game.Move", metadata=META_2,
                                                  corr="c-0002", flow=FLOW_A, payload=move))
    # request / reply kinds with optional parts
    st_valid("request-all-optional-parts", sp("request", "frameworkJson", seq=7, name="Game.Move",
                                              metadata=[["trace", "t1"]], corr="c-1", flow=FLOW_A,
                                              payload=j("{}")))
    st_valid("request-metadata-only", sp("request", "frameworkJson", seq=8, name="Game.Buy",
                                         metadata=META_KR, payload=j('{"item":"검"}')))
    st_valid("request-empty-metadata-block", sp("request", "raw", seq=9, name="Game.Ping", metadata=[],
                                                payload=b"\x01"))
    st_valid("request-correlation-flow", sp("request", "raw", seq=10, name="Game.Ping", corr="c-3",
                                            flow=FLOW_B, payload=b"\x01"))
    st_valid("request-metadata-1024-bytes", sp("request", "raw", seq=11, name="Game.Upload",
                                               metadata=metadata_of_size(1024), payload=b"\xab"))
    st_valid("response-correlation-flow", sp("response", "frameworkJson", seq=10, corr="c-3", flow=FLOW_B,
                                             payload=j('{"pong":1}')))
    st_valid("response-metadata-correlation", sp("response", "frameworkJson", seq=8, metadata=[["x-cache", "hit"]],
                                                 corr="c-4", payload=j("[]")))
    st_valid("error-metadata", sp("error", "frameworkJson", seq=12, metadata=META_2,
                                  payload=j('{"code":"Denied"}')))
    st_valid("error-all-optional-parts", sp("error", "raw", seq=13, metadata=[["k", ""]], corr="c-5",
                                            flow=FLOW_C, payload=b"\xff"))
    st_valid("correlation-1-byte", sp("send", "raw", name="A", corr="!", payload=b""))
    st_valid("correlation-64-bytes", sp("request", "raw", seq=14, name="A", corr="C" * 64, payload=b""))

    # MaxMessageSize: header + payload, prefix excluded; 0 = unlimited
    exact = sp("send", "raw", name="Game.Ping", payload=b"\x01\x02")  # header 14 + payload 2 = 16
    assert len(encode_stream(exact)) - 6 == 16
    st_valid("message-exactly-at-limit-16", exact, limit=16)
    st_valid("limit-0-unlimited-small", sp("send", "raw", name="A", payload=b"\x00"), limit=0)
    big = sp("send", "raw", payload=bytes(i & 0xFF for i in range(65532)))  # 5 + 65,532 = 65,537
    assert len(encode_stream(big)) - 6 == STREAM_DEFAULT_LIMIT + 1
    st_valid("limit-0-unlimited-65537-byte-message", big, limit=0)

    # ---- malformed ----
    def hdr(kind=1, codec=0, flags=0, rest=b"\x00"):
        return bytes([STREAM_MARKER, kind, codec, flags]) + rest

    seq7 = uint(8, 7)
    ok_send = sp("send", "raw", name="Game.Ping", payload=b"\x01\x02")
    ok_buf = encode_stream(ok_send)

    st_invalid("bad-format-marker-f1", "BadFormatMarker", stream_raw(b"\xf1" + hdr()[1:], b"\x01"))
    st_invalid("bad-format-marker-00", "BadFormatMarker", stream_raw(b"\x00" + hdr()[1:]))
    st_invalid("kind-0", "UnknownEnumValue", stream_raw(hdr(kind=0)))
    st_invalid("kind-5", "UnknownEnumValue", stream_raw(hdr(kind=5)))
    st_invalid("codec-2", "UnknownEnumValue", stream_raw(hdr(codec=2)))
    st_invalid("codec-ff", "UnknownEnumValue", stream_raw(hdr(kind=2, codec=0xFF, flags=SF_SEQ, rest=seq7 + b"\x00")))
    st_invalid("undefined-flag-0x10", "UndefinedFlags", stream_raw(hdr(flags=0x10)))
    st_invalid("undefined-flag-0x80-with-request-seq", "UndefinedFlags",
               stream_raw(hdr(kind=2, flags=0x81, rest=seq7 + b"\x00")))
    st_invalid("request-seq-zero", "ZeroValue", stream_raw(hdr(kind=2, flags=SF_SEQ, rest=uint(8, 0) + b"\x00")))
    st_invalid("response-seq-zero", "ZeroValue", stream_raw(hdr(kind=3, flags=SF_SEQ, rest=uint(8, 0) + b"\x00")))
    st_invalid("response-with-packet-name", "ConstraintViolated",
               stream_raw(hdr(kind=3, codec=1, flags=SF_SEQ, rest=seq7 + b"\x01x"), b"{}"))
    st_invalid("error-with-packet-name", "ConstraintViolated",
               stream_raw(hdr(kind=4, flags=SF_SEQ, rest=seq7 + b"\x04Oops")))
    st_invalid("request-without-request-seq", "ConstraintViolated",
               stream_raw(hdr(kind=2, rest=b"\x09Game.Ping"), b"\x01"))
    st_invalid("response-without-request-seq", "ConstraintViolated", stream_raw(hdr(kind=3)))
    st_invalid("send-with-request-seq", "ConstraintViolated",
               stream_raw(hdr(kind=1, flags=SF_SEQ, rest=uint(8, 5) + b"\x09Game.Ping"), b"\x01"))
    st_invalid("packet-name-invalid-utf8", "InvalidUtf8", stream_raw(hdr(rest=b"\x01\xff")))
    st_invalid("packet-name-truncated-utf8", "InvalidUtf8",
               stream_raw(hdr(rest=b"\x05" + "게임".encode("utf-8")[:5]), b"\x01"))
    st_invalid("correlation-length-65", "OutOfBounds",
               stream_raw(hdr(flags=SF_CORR, rest=b"\x00\x41" + b"C" * 65)))
    st_invalid("correlation-length-0", "OutOfBounds", stream_raw(hdr(flags=SF_CORR, rest=b"\x00\x00")))
    st_invalid("correlation-space", "InvalidAscii", stream_raw(hdr(flags=SF_CORR, rest=b"\x00\x03c 1")))
    st_invalid("correlation-del-0x7f", "InvalidAscii", stream_raw(hdr(flags=SF_CORR, rest=b"\x00\x02c\x7f")))
    st_invalid("correlation-non-ascii", "InvalidAscii",
               stream_raw(hdr(flags=SF_CORR, rest=b"\x00\x02" + "é".encode("utf-8"))))
    st_invalid("flow-id-space", "InvalidAscii",
               stream_raw(hdr(flags=SF_FLOW, rest=b"\x00" + FLOW_A[0].replace("-", " ", 1).encode() + b"\x01")))
    st_invalid("flow-id-nul", "InvalidAscii",
               stream_raw(hdr(flags=SF_FLOW, rest=b"\x00" + b"a" * 35 + b"\x00" + b"\x01")))
    # metadata block errors surface from the header
    st_invalid("metadata-block-1025-bytes", "MetadataTooLarge",
               stream_raw(hdr(flags=SF_META, rest=b"\x00" + uint(2, 1025) + encode_metadata(metadata_of_size(1025)))))
    st_invalid("metadata-nul-in-value", "MetadataNul",
               stream_raw(hdr(flags=SF_META, rest=b"\x00" + lp16(encode_metadata([["k", "a\x00"]])))))
    st_invalid("metadata-count-exceeds-block", "CountExceedsRemaining",
               stream_raw(hdr(flags=SF_META, rest=b"\x00" + lp16(h("0002 0001 6b 0000".replace(" ", ""))))))
    st_invalid("metadata-key-invalid-utf8", "InvalidUtf8",
               stream_raw(hdr(flags=SF_META, rest=b"\x00" + lp16(encode_metadata([[b"\xff", "v"]])))))
    st_invalid("metadata-empty-key", "OutOfBounds", stream_raw(hdr(flags=SF_META, rest=b"\x00" + lp16(h("000100000000")))))
    st_invalid("metadata-trailing-byte-in-block", "TrailingBytes",
               stream_raw(hdr(flags=SF_META, rest=b"\x00" + lp16(encode_metadata([["k", "v"]]) + b"\x00"))))
    # header_len versus the parsed header
    st_invalid("header-len-one-byte-longer-than-header", "TrailingBytes", stream_raw(stream_header(ok_send) + b"\x00", b"\x01\x02"))
    st_invalid("header-len-0", "Incomplete", stream_raw(b"", b"\xf2\x01\x00\x00\x00", payload_size=5))
    st_invalid("header-len-3-fixed-header-cut", "Incomplete", stream_raw(hdr()[:3], b"\x00\x00"))
    st_invalid("header-len-ends-inside-packet-name", "Incomplete",
               stream_raw(hdr(rest=b"\x03a"), b"bc\x01"))
    st_invalid("header-len-ends-inside-request-seq", "Incomplete",
               stream_raw(hdr(kind=2, flags=SF_SEQ, rest=b"\x00\x00\x00"), b"\x00\x00\x00\x00\x07\x00"))
    st_invalid("metadata-len-beyond-header", "Incomplete",
               stream_raw(hdr(flags=SF_META, rest=b"\x00\x00\x09\x00\x00"), b"payload"))
    st_invalid("header-len-ends-inside-flow-id", "Incomplete",
               stream_raw(hdr(flags=SF_FLOW, rest=b"\x00" + FLOW_A[0].encode()[:10]), FLOW_A[0].encode()[10:] + b"\x01"))
    # buffer shorter than the packet (StreamPacket::decode: Incomplete)
    st_invalid("empty-buffer", "Incomplete", b"")
    st_invalid("prefix-cut-to-3-bytes", "Incomplete", ok_buf[:3])
    st_invalid("prefix-only", "Incomplete", ok_buf[:6])
    st_invalid("header-cut-short", "Incomplete", ok_buf[:6 + 4])
    st_invalid("payload-missing-last-byte", "Incomplete", ok_buf[:-1])
    st_invalid("payload-missing-entirely", "Incomplete", ok_buf[:-2])
    # bytes after the packet
    st_invalid("byte-after-packet", "TrailingBytes", ok_buf + b"\x00")
    st_invalid("second-packet-after-packet", "TrailingBytes", ok_buf + minimal)
    # MaxMessageSize: from the prefix, before the header or payload is looked at
    too_big = sp("send", "raw", name="Game.Ping", payload=b"\x01\x02\x03")  # 14 + 3 = 17
    st_invalid("message-17-bytes-over-limit-16", "MessageTooLarge", encode_stream(too_big), limit=16)
    st_invalid("header-alone-over-limit-16", "MessageTooLarge",
               encode_stream(sp("request", "raw", seq=1, name="Game.Ping")), limit=16)
    st_invalid("prefix-only-payload-1000000-default-limit", "MessageTooLarge",
               uint(2, 5) + uint(4, 1_000_000))


def lp16(b):
    return uint(2, len(b)) + b


# --- classic fanout (fanout.rs) ---------------------------------------------------------------

BEACON_TOPIC = bytes.fromhex("015a4c4631")
BEACON_PAYLOAD = bytes.fromhex("5a460101")


def mod_classify_fanout(frames):
    if not frames:
        raise PErr("WrongFrameCount", "classic fanout record")
    if frames[0] != BEACON_TOPIC:
        return {"kind": "application", "topic": frames[0].hex()}
    if len(frames) == 2 and frames[1] == BEACON_PAYLOAD:
        return {"kind": "beacon"}
    raise PErr("MalformedBeacon", "classic fanout record")


def fo_valid(name, frames, kind):
    _unique("fanout.json", name)
    got = mod_classify_fanout(frames)
    assert got["kind"] == kind, name
    MOD["fanout"]["valid"].append({"name": name, "frames": [f.hex() for f in frames], "decoded": got})


def fo_invalid(name, frames, error="MalformedBeacon"):
    _unique("fanout.json", name)
    _expect_err("fanout.json", name, error, mod_classify_fanout, frames)
    MOD["fanout"]["invalid"].append({"name": name, "frames": [f.hex() for f in frames], "error": error})


def build_fanout_module():
    T, P = BEACON_TOPIC, BEACON_PAYLOAD
    assert T == b"\x01ZLF1" and P == b"ZF\x01\x01"
    fo_valid("beacon", [T, P], "beacon")
    fo_valid("application-chat-two-payload-frames", [b"chat", b"hello", b"\x00\x01"], "application")
    fo_valid("application-topic-only", [b"t"], "application")
    fo_valid("application-korean-topic", ["경기.시작".encode("utf-8"), b'{"match":42}'], "application")
    fo_valid("application-topic-extends-reserved-topic", [T + b"x", P], "application")
    fo_valid("application-topic-prefix-of-reserved-topic", [T[:4], P], "application")
    fo_valid("application-empty-topic-with-beacon-payload", [b"", P], "application")
    fo_valid("application-reserved-topic-in-second-frame", [b"match.started", T, P], "application")

    fo_invalid("reserved-topic-only", [T])
    fo_invalid("reserved-topic-three-frames", [T, P, P])
    fo_invalid("reserved-topic-extra-empty-frame", [T, P, b""])
    fo_invalid("wrong-payload-last-byte-02", [T, bytes.fromhex("5a460102")])
    fo_invalid("wrong-payload-version-00", [T, bytes.fromhex("5a460001")])
    fo_invalid("payload-too-short", [T, P[:3]])
    fo_invalid("payload-too-long", [T, P + b"\x00"])
    fo_invalid("empty-payload", [T, b""])
    fo_invalid("application-payload-on-reserved-topic", [T, b'{"match":42}'])


# --- Location Store authority keys (keys.rs) --------------------------------------------------

KEY_UNRESERVED = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
KEY_TAG = {"actor": "a", "spot": "s"}


def key_percent_encode(raw):
    return "".join(chr(b) if b in KEY_UNRESERVED else "%%%02X" % b for b in raw)


def authority_key(kind, ident):
    raw = ident.encode("utf-8")
    assert 1 <= len(raw) <= 255, "ID of %d bytes has no key" % len(raw)
    return "zla1:%s:%d:%s" % (KEY_TAG[kind], len(raw), key_percent_encode(raw))


def parse_authority_key(key):
    """Canonical form only: zla1, a|s, decimal length without leading zeros, unreserved bytes
    literal, everything else %XX with uppercase hex, UTF-8, declared length = byte length."""
    parts = key.split(":", 3)
    assert len(parts) == 4 and parts[0] == "zla1", key
    kind = {"a": "actor", "s": "spot"}[parts[1]]
    ln = parts[2]
    assert ln.isdigit() and ln.isascii() and (ln == "0" or not ln.startswith("0")), key
    enc = parts[3].encode("ascii")
    out = bytearray()
    i = 0
    while i < len(enc):
        b = enc[i]
        if b == 0x25:
            hx = enc[i + 1:i + 3]
            assert len(hx) == 2 and all(c in b"0123456789ABCDEF" for c in hx), key
            v = int(hx, 16)
            assert v not in KEY_UNRESERVED, key
            out.append(v)
            i += 3
        else:
            assert b in KEY_UNRESERVED, key
            out.append(b)
            i += 1
    ident = bytes(out).decode("utf-8")
    assert int(ln) == len(out) and 1 <= len(out) <= 255, key
    return kind, ident


def key_valid(name, kind, ident):
    _unique("keys.json", name)
    key = authority_key(kind, ident)
    assert parse_authority_key(key) == (kind, ident), name
    assert key.isascii()
    MOD["keys"]["valid"].append({"name": name, "objectKind": kind, "id": ident, "key": key})


def build_keys_module():
    key_valid("actor-ascii-unreserved-only", "actor", "Hero_01.alpha~beta-2")
    key_valid("actor-korean-with-colon", "actor", ACTOR_HONG)
    key_valid("actor-numeric", "actor", "8812")
    key_valid("actor-single-byte", "actor", "x")
    key_valid("actor-mixed-case-kept", "actor", "MiXeD-Case")
    key_valid("actor-spaces", "actor", "guild master 7")
    key_valid("actor-percent-sign", "actor", "100%done")
    key_valid("actor-literal-percent-escape-text", "actor", "%41%2F")
    key_valid("actor-tilde", "actor", "~tilde~only~")
    key_valid("actor-slash", "actor", "clan/홍/1")
    key_valid("actor-hash-tag-braces", "actor", "{user}:42")
    key_valid("actor-base64-like", "actor", "dGVzdA+/==")
    key_valid("actor-looks-like-a-key", "actor", "zla1:a:3:abc")
    key_valid("actor-emoji-4-byte-utf8", "actor", "🎮player")
    key_valid("actor-tab-control-byte", "actor", "tab\there")
    key_valid("actor-255-bytes-ascii", "actor", "actor-" + "x" * 249)
    key_valid("actor-255-bytes-all-escaped", "actor", "/" * 255)
    key_valid("spot-ascii", "spot", "Room7")
    key_valid("spot-slash", "spot", SPOT_ROOM)
    key_valid("spot-same-id-as-actor-key-differs", "spot", "8812")
    key_valid("spot-korean", "spot", SPOT_DUNGEON)
    key_valid("spot-korean-short", "spot", "방-1")
    key_valid("spot-latin-two-byte-utf8", "spot", "café au lait")
    key_valid("spot-entry-spot-id", "spot", ENTRY_SPOT_ZONE)
    key_valid("spot-reserved-delimiters", "spot", "a?b#c[d]e@f!g$h&i'j(k)l*m+n,o;p=q")
    key_valid("spot-255-bytes-korean", "spot", "가" * 85)
    key_valid("spot-255-bytes-mixed", "spot", "스팟-" + "k" * 248)
    for item in MOD["keys"]["valid"]:
        if "255-bytes" in item["name"]:
            assert len(item["id"].encode("utf-8")) == 255, item["name"]


def module_hand_assembled_checks():
    def h(s):
        return bytes.fromhex(s.replace(" ", ""))

    # metadata: count, then key_len/key/value_len/value, all big-endian u16 lengths
    assert encode_metadata([["id", "7"], ["z", ""]]) == h("0002 0002 6964 0001 37 0001 7a 0000")
    assert mod_decode_metadata(h("0002 0001 61 0001 31 0001 61 0001 32")) == [["a", "2"]]
    # typed payload envelope: u8 name, u8 content type, u32 payload
    assert encode_payload({"packetName": "P", "contentType": "c", "payload": "ff"}) == h("01 50 01 63 00000001 ff")
    # multipart: u32 count, u32 length + bytes per part
    assert multipart([b"A", b""]) == h("00000002 00000001 41 00000000")
    # STREAM: u16 header_len, u32 payload_size, F2 kind codec flags, [seq], name, [meta], [corr], [flow], payload
    assert encode_stream(sp("send", "raw", name="Hi", payload=b"\xff")) == h(
        "0007 00000001 f2 01 00 00 02 4869 ff")
    full = sp("request", "frameworkJson", seq=1, name="", metadata=[["a", "b"]], corr="c",
              flow=("0" * 36, 9), payload=b"")
    assert encode_stream(full) == h(
        "003e 00000000 f2 02 01 0f 0000000000000001 00 0008 0001 0001 61 0001 62 01 63") + b"0" * 36 + b"\x09"
    assert encode_stream(sp("error", "raw", seq=258, payload=b"\x01")) == h(
        "000d 00000001 f2 04 00 01 0000000000000102 00 01")
    # authority keys: byte length of the raw UTF-8 ID, uppercase escapes, unreserved kept
    assert authority_key("actor", "a b") == "zla1:a:3:a%20b"
    assert authority_key("spot", "é~") == "zla1:s:3:%C3%A9~"
    assert authority_key("actor", "A-z_0.9") == "zla1:a:7:A-z_0.9"
    assert authority_key("spot", "%") == "zla1:s:1:%25"


def build_module_fixtures():
    module_hand_assembled_checks()
    build_metadata_module()
    build_envelope_module()
    build_multipart_module()
    build_stream_module()
    build_fanout_module()
    build_keys_module()
    required = {
        "metadata": {"MetadataTooLarge", "CountExceedsRemaining", "Incomplete", "OutOfBounds", "InvalidUtf8",
                     "MetadataNul", "TrailingBytes"},
        "envelope": {"Incomplete", "InvalidUtf8", "TrailingBytes", "OutOfBounds"},
        "multipart": {"EmptyMultipart", "CountExceedsRemaining", "Incomplete", "TrailingBytes"},
        "stream": {"BadFormatMarker", "UnknownEnumValue", "UndefinedFlags", "ZeroValue", "ConstraintViolated",
                   "InvalidAscii", "OutOfBounds", "Incomplete", "TrailingBytes", "MessageTooLarge",
                   "InvalidUtf8"},
        "fanout": {"MalformedBeacon"},
        "keys": set(),
    }
    for n in MOD_FILES:
        used = {i["error"] for i in MOD[n]["invalid"]}
        assert required[n] <= used, "%s.json lacks %s" % (n, sorted(required[n] - used))
        assert MOD[n]["valid"], n
    assert set(STREAM_KIND) == {i["decoded"]["kind"] for i in MOD["stream"]["valid"]}
    assert {"raw", "frameworkJson"} == {i["decoded"]["codec"] for i in MOD["stream"]["valid"]}
    # every combination of the optional header parts (seq is fixed by the kind)
    combos = {(i["decoded"]["kind"], "metadata" in i["decoded"], "correlationId" in i["decoded"],
               "flow" in i["decoded"]) for i in MOD["stream"]["valid"]}
    for m in (False, True):
        for c in (False, True):
            for f in (False, True):
                assert ("send", m, c, f) in combos, ("send", m, c, f)
    assert any(i["decoded"]["payload"] == "" for i in MOD["stream"]["valid"])


# ---------------------------------------------------------------------------------------------
# Coverage checks and output
# ---------------------------------------------------------------------------------------------

# ProtocolError kinds that only the module fixture sets (STREAM, multipart, fanout) can produce.
OTHER_TASK_KINDS = {"EmptyMultipart", "BadFormatMarker", "MessageTooLarge", "MalformedBeacon"}


def error_rs_kinds():
    path = os.path.normpath(os.path.join(HERE, "..", "src", "error.rs"))
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as f:
        text = f.read()
    start = text.index("ALL_KINDS")
    block = text[start:text.index("];", start)]
    return [line.strip().strip('",') for line in block.splitlines()[1:] if line.strip().startswith('"')]


def coverage_checks():
    used = set()
    for v in FIX.values():
        used.update(i["error"] for i in v["invalid"])
    used.update(i["error"] for i in RECORDS_INVALID)
    for v in DUR.values():
        used.update(i["error"] for i in v["invalid"])
    module_used = set()
    for v in MOD.values():
        module_used.update(i["error"] for i in v["invalid"])
    assert OTHER_TASK_KINDS <= module_used, "module fixture sets lack %s" % sorted(OTHER_TASK_KINDS - module_used)
    kinds = error_rs_kinds()
    if kinds is not None:
        unknown = (used | module_used) - set(kinds)
        assert not unknown, "error names not in ProtocolError::ALL_KINDS: %s" % sorted(unknown)
        missing = set(kinds) - OTHER_TASK_KINDS - used
        assert not missing, "ProtocolError kinds without a record/durable fixture: %s" % sorted(missing)
        missing = set(kinds) - used - module_used
        assert not missing, "ProtocolError kinds without any fixture: %s" % sorted(missing)
    used |= module_used
    for c in SCHEMA["commands"]:
        assert FIX[c["name"]]["valid"], "command %s has no valid fixture" % c["name"]
        assert FIX[c["name"]]["invalid"], "command %s has no invalid fixture" % c["name"]
        legs = {i["leg"] for i in FIX[c["name"]]["valid"]}
        assert legs == set(c["legs"]), "command %s: valid legs %s != %s" % (c["name"], legs, c["legs"])
        if "clientServer" in c["topologies"]:
            assert any(i["topology"] == "clientServer" for i in FIX[c["name"]]["valid"]), c["name"]
    for d in SCHEMA["durableFormats"]:
        assert DUR[d["name"]]["valid"] and DUR[d["name"]]["invalid"], d["name"]
    for t in SCHEMA["types"]:
        if t["kind"] == "union":
            for case in t["cases"]:
                assert ("union", t["name"], case["name"]) in COVERED, "union case %s.%s not covered" % (
                    t["name"], case["name"])

    def walk_when(fields):
        for f in fields:
            if "when" in f:
                for b in (True, False):
                    assert ("when", f["name"], f["when"]["field"], b) in COVERED, \
                        "when branch %s=%s not covered" % (f["name"], b)
    for c in SCHEMA["commands"]:
        walk_when(c["body"])
    for d in SCHEMA["durableFormats"]:
        walk_when(d["fields"])
    for t in SCHEMA["types"]:
        if t["kind"] == "struct":
            walk_when(t["fields"])
    return used


def dump(path, obj):
    text = json.dumps(obj, indent=2, ensure_ascii=False) + "\n"
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.write(text)
    return len(text.encode("utf-8"))


def write_outputs():
    cmd_dir = os.path.join(HERE, "commands")
    dur_dir = os.path.join(HERE, "durable")
    for d in (cmd_dir, dur_dir):
        os.makedirs(d, exist_ok=True)
        for name in os.listdir(d):
            if name.endswith(".json"):
                os.remove(os.path.join(d, name))
    summary = []
    for c in sorted(SCHEMA["commands"], key=lambda c: c["id"]):
        fx = FIX[c["name"]]
        path = os.path.join(cmd_dir, "%02d-%s.json" % (c["id"], c["name"]))
        dump(path, {"command": c["name"], "id": c["id"], "valid": fx["valid"], "invalid": fx["invalid"]})
        summary.append((os.path.relpath(path, HERE), len(fx["valid"]), len(fx["invalid"])))
    path = os.path.join(HERE, "records-invalid.json")
    dump(path, {"invalid": RECORDS_INVALID})
    summary.append((os.path.relpath(path, HERE), 0, len(RECORDS_INVALID)))
    for d in SCHEMA["durableFormats"]:
        fx = DUR[d["name"]]
        path = os.path.join(dur_dir, "%s.json" % d["name"])
        size = dump(path, {"format": d["name"], "valid": fx["valid"], "invalid": fx["invalid"]})
        assert size < 2_200_000, "%s is %d bytes" % (path, size)
        summary.append((os.path.relpath(path, HERE), len(fx["valid"]), len(fx["invalid"])))
    for n in MOD_FILES:
        fx = MOD[n]
        path = os.path.join(HERE, "%s.json" % n)
        doc = {"valid": fx["valid"]} if n == "keys" else {"valid": fx["valid"], "invalid": fx["invalid"]}
        dump(path, doc)
        summary.append((os.path.relpath(path, HERE), len(fx["valid"]), len(fx["invalid"])))
    return summary


def main():
    hand_assembled_checks()
    build_handshake()
    build_application_basic()
    build_actor_commands()
    build_instance_and_creates()
    build_message_follow()
    build_relocation_commands()
    build_durables()
    build_records_invalid()
    build_module_fixtures()
    used = coverage_checks()
    summary = write_outputs()
    tv = sum(s[1] for s in summary)
    ti = sum(s[2] for s in summary)
    for path, nv, ni in summary:
        print("%-58s valid %3d  invalid %3d" % (path, nv, ni))
    print("total: %d files, %d valid, %d invalid; error kinds used: %d (%s)" % (
        len(summary), tv, ti, len(used), ", ".join(sorted(used))))


if __name__ == "__main__":
    main()
