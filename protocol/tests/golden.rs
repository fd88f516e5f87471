//! Golden fixtures (wire §12): every fixture in `protocol/golden/` is decoded; valid ones must
//! produce exactly the expected value and re-encode byte-for-byte, malformed ones must fail with
//! exactly the named `ProtocolError` variant. Coverage tests make sure every command, every
//! durable format and every `ProtocolError` variant has fixtures.
//!
//! The fixtures were written from the schema by `protocol/golden/build_fixtures.py`, an
//! independent encoder, never by running this codec.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde_json::Value;
use zlink_protocol::ProtocolError;
use zlink_protocol::codec::hex;
use zlink_protocol::envelope::TypedPayload;
use zlink_protocol::fanout::{FanoutRecord, classify};
use zlink_protocol::generated::DurableValue;
use zlink_protocol::keys::{
    ObjectKindKey, actor_authority_key, parse_authority_key, spot_authority_key,
};
use zlink_protocol::metadata::Metadata;
use zlink_protocol::record::{CommandId, Leg, Record, Topology, WireContext};
use zlink_protocol::stream::{MaxMessageSize, StreamDecoder, StreamPacket};

fn golden_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("golden")
}

fn load(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn json_files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    v.sort();
    v
}

fn items<'a>(doc: &'a Value, key: &str) -> &'a [Value] {
    doc.get(key)
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[])
}

fn name_of(item: &Value) -> &str {
    item.get("name")
        .and_then(Value::as_str)
        .unwrap_or("<unnamed>")
}

fn bytes(item: &Value, key: &str) -> Vec<u8> {
    let s = item
        .get(key)
        .and_then(Value::as_str)
        .unwrap_or_else(|| panic!("{}: missing {key}", name_of(item)));
    hex::decode(s).unwrap_or_else(|e| panic!("{}: {e}", name_of(item)))
}

fn frames(item: &Value) -> Vec<Vec<u8>> {
    item.get("frames")
        .and_then(Value::as_array)
        .unwrap_or_else(|| panic!("{}: missing frames", name_of(item)))
        .iter()
        .map(|f| {
            hex::decode(f.as_str().unwrap_or(""))
                .unwrap_or_else(|e| panic!("{}: {e}", name_of(item)))
        })
        .collect()
}

fn ctx(item: &Value) -> WireContext {
    let topology: Topology = serde_json::from_value(item["topology"].clone())
        .unwrap_or_else(|e| panic!("{}: topology: {e}", name_of(item)));
    let leg: Leg = serde_json::from_value(item["leg"].clone())
        .unwrap_or_else(|e| panic!("{}: leg: {e}", name_of(item)));
    WireContext { topology, leg }
}

fn expected_error(item: &Value) -> &str {
    item.get("error")
        .and_then(Value::as_str)
        .unwrap_or_else(|| panic!("{}: missing error", name_of(item)))
}

/// Collects failures so one run reports every broken fixture.
#[derive(Default)]
struct Report {
    failures: Vec<String>,
    checked: usize,
}

impl Report {
    fn check(&mut self, ok: bool, msg: impl FnOnce() -> String) {
        self.checked += 1;
        if !ok {
            self.failures.push(msg());
        }
    }

    fn finish(self, what: &str) {
        assert!(self.checked > 0, "{what}: no fixtures checked");
        assert!(
            self.failures.is_empty(),
            "{what}: {} of {} checks failed:\n{}",
            self.failures.len(),
            self.checked,
            self.failures.join("\n")
        );
    }
}

fn check_record_valid(rep: &mut Report, file: &str, item: &Value) {
    let frames = frames(item);
    let ctx = ctx(item);
    let name = format!("{file}: {}", name_of(item));
    let expected: Record = match serde_json::from_value(item["decoded"].clone()) {
        Ok(r) => r,
        Err(e) => {
            rep.check(false, || {
                format!("{name}: expected value does not parse: {e}")
            });
            return;
        }
    };
    match Record::decode(&frames, ctx) {
        Ok(decoded) => {
            rep.check(decoded == expected, || {
                format!("{name}: decoded {decoded:?}\n  expected {expected:?}")
            });
            let json = serde_json::to_value(&decoded).unwrap_or(Value::Null);
            rep.check(json == item["decoded"], || {
                format!(
                    "{name}: JSON form differs:\n  got      {json}\n  expected {}",
                    item["decoded"]
                )
            });
        }
        Err(e) => rep.check(false, || {
            format!("{name}: decode failed: {e} ({})", e.kind())
        }),
    }
    match expected.encode(ctx) {
        Ok(re) => rep.check(re == frames, || {
            let got: Vec<String> = re.iter().map(|f| hex::encode(f)).collect();
            let want: Vec<String> = frames.iter().map(|f| hex::encode(f)).collect();
            format!("{name}: re-encode differs:\n  got      {got:?}\n  expected {want:?}")
        }),
        Err(e) => rep.check(false, || format!("{name}: encode failed: {e}")),
    }
}

fn check_record_invalid(rep: &mut Report, file: &str, item: &Value, seen: &mut BTreeSet<String>) {
    let want = expected_error(item);
    seen.insert(want.to_owned());
    let name = format!("{file}: {}", name_of(item));
    match Record::decode(&frames(item), ctx(item)) {
        Ok(r) => rep.check(false, || format!("{name}: expected {want}, decoded {r:?}")),
        Err(e) => rep.check(e.kind() == want, || {
            format!("{name}: expected {want}, got {} ({e})", e.kind())
        }),
    }
}

fn error_kinds_in(doc: &Value, seen: &mut BTreeSet<String>) {
    for item in items(doc, "invalid") {
        seen.insert(expected_error(item).to_owned());
    }
}

#[test]
fn every_command_fixture_decodes_and_reencodes() {
    let mut rep = Report::default();
    let mut seen = BTreeSet::new();
    for path in json_files(&golden_dir().join("commands")) {
        let doc = load(&path);
        let file = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("?")
            .to_owned();
        for item in items(&doc, "valid") {
            check_record_valid(&mut rep, &file, item);
        }
        for item in items(&doc, "invalid") {
            check_record_invalid(&mut rep, &file, item, &mut seen);
        }
    }
    rep.finish("command fixtures");
}

#[test]
fn malformed_record_fixtures_fail_with_the_named_error() {
    let mut rep = Report::default();
    let mut seen = BTreeSet::new();
    let doc = load(&golden_dir().join("records-invalid.json"));
    for item in items(&doc, "invalid") {
        check_record_invalid(&mut rep, "records-invalid.json", item, &mut seen);
    }
    rep.finish("records-invalid.json");
}

#[test]
fn every_defined_command_has_a_valid_fixture_and_reserved_ids_have_none() {
    let mut covered = BTreeSet::new();
    for path in json_files(&golden_dir().join("commands")) {
        let doc = load(&path);
        if !items(&doc, "valid").is_empty()
            && let Some(name) = doc.get("command").and_then(Value::as_str)
        {
            covered.insert(name.to_owned());
        }
    }
    let missing: Vec<&str> = CommandId::ALL
        .iter()
        .map(|c| c.name())
        .filter(|n| !covered.contains(*n))
        .collect();
    assert!(
        missing.is_empty(),
        "commands without a valid fixture: {missing:?}"
    );
    assert_eq!(CommandId::ALL.len(), 40);
    for id in 0..=255u8 {
        if CommandId::from_wire(id).is_err() {
            assert!(
                !covered
                    .iter()
                    .any(|n| CommandId::from_name(n).map(CommandId::id) == Some(id)),
                "fixture for undefined id {id}"
            );
        }
    }
}

#[test]
fn every_durable_format_fixture_decodes_and_reencodes() {
    let mut rep = Report::default();
    let mut covered = BTreeSet::new();
    for path in json_files(&golden_dir().join("durable")) {
        let doc = load(&path);
        let format = doc["format"].as_str().unwrap_or("?").to_owned();
        for item in items(&doc, "valid") {
            let name = format!("{format}: {}", name_of(item));
            let raw = bytes(item, "hex");
            let wrapped = serde_json::json!({ "format": format, "value": item["decoded"] });
            let expected: DurableValue = match serde_json::from_value(wrapped) {
                Ok(v) => v,
                Err(e) => {
                    rep.check(false, || {
                        format!("{name}: expected value does not parse: {e}")
                    });
                    continue;
                }
            };
            covered.insert(format.clone());
            match DurableValue::decode_named(&format, &raw) {
                Some(Ok(v)) => rep.check(v == expected, || format!("{name}: decoded {v:?}")),
                Some(Err(e)) => rep.check(false, || format!("{name}: decode failed: {e}")),
                None => rep.check(false, || format!("{name}: unknown format")),
            }
            match DurableValue::decode_any(&raw) {
                Ok(v) => rep.check(v == expected, || format!("{name}: decode_any differs")),
                Err(e) => rep.check(false, || format!("{name}: decode_any failed: {e}")),
            }
            match expected.encode() {
                Ok(re) => rep.check(re == raw, || {
                    format!("{name}: re-encode differs: {}", hex::encode(&re))
                }),
                Err(e) => rep.check(false, || format!("{name}: encode failed: {e}")),
            }
        }
        for item in items(&doc, "invalid") {
            let want = expected_error(item);
            let name = format!("{format}: {}", name_of(item));
            match DurableValue::decode_named(&format, &bytes(item, "hex")) {
                Some(Ok(v)) => {
                    rep.check(false, || format!("{name}: expected {want}, decoded {v:?}"))
                }
                Some(Err(e)) => rep.check(e.kind() == want, || {
                    format!("{name}: expected {want}, got {} ({e})", e.kind())
                }),
                None => rep.check(false, || format!("{name}: unknown format")),
            }
        }
    }
    rep.finish("durable fixtures");
    let missing: Vec<&str> = DurableValue::FORMAT_NAMES
        .iter()
        .copied()
        .filter(|n| !covered.contains(*n))
        .collect();
    assert!(
        missing.is_empty(),
        "durable formats without a valid fixture: {missing:?}"
    );
}

#[test]
fn metadata_fixtures() {
    let doc = load(&golden_dir().join("metadata.json"));
    let mut rep = Report::default();
    for item in items(&doc, "valid") {
        let raw = bytes(item, "hex");
        let expected: Metadata = serde_json::from_value(item["decoded"].clone())
            .unwrap_or_else(|e| panic!("{}: {e}", name_of(item)));
        match Metadata::decode(&raw) {
            Ok(m) => rep.check(m == expected, || {
                format!("{}: decoded {m:?}", name_of(item))
            }),
            Err(e) => rep.check(false, || format!("{}: {e}", name_of(item))),
        }
        if item
            .get("reencodes")
            .and_then(Value::as_bool)
            .unwrap_or(true)
        {
            rep.check(expected.encode() == raw, || {
                format!("{}: re-encode differs", name_of(item))
            });
        }
    }
    for item in items(&doc, "invalid") {
        let want = expected_error(item);
        match Metadata::decode(&bytes(item, "hex")) {
            Ok(m) => rep.check(false, || {
                format!("{}: expected {want}, got {m:?}", name_of(item))
            }),
            Err(e) => rep.check(e.kind() == want, || {
                format!("{}: expected {want}, got {}", name_of(item), e.kind())
            }),
        }
    }
    rep.finish("metadata.json");
}

#[test]
fn typed_payload_envelope_fixtures() {
    let doc = load(&golden_dir().join("envelope.json"));
    let mut rep = Report::default();
    for item in items(&doc, "valid") {
        let raw = bytes(item, "hex");
        let expected: TypedPayload = serde_json::from_value(item["decoded"].clone())
            .unwrap_or_else(|e| panic!("{}: {e}", name_of(item)));
        match TypedPayload::decode(&raw) {
            Ok(p) => rep.check(p == expected, || {
                format!("{}: decoded {p:?}", name_of(item))
            }),
            Err(e) => rep.check(false, || format!("{}: {e}", name_of(item))),
        }
        rep.check(expected.encode().ok() == Some(raw), || {
            format!("{}: re-encode differs", name_of(item))
        });
    }
    for item in items(&doc, "invalid") {
        let want = expected_error(item);
        match TypedPayload::decode(&bytes(item, "hex")) {
            Ok(p) => rep.check(false, || {
                format!("{}: expected {want}, got {p:?}", name_of(item))
            }),
            Err(e) => rep.check(e.kind() == want, || {
                format!("{}: expected {want}, got {}", name_of(item), e.kind())
            }),
        }
    }
    rep.finish("envelope.json");
}

#[test]
fn multipart_fixtures() {
    let doc = load(&golden_dir().join("multipart.json"));
    let mut rep = Report::default();
    for item in items(&doc, "valid") {
        let raw = bytes(item, "hex");
        let parts: Vec<Vec<u8>> = item["decoded"]
            .as_array()
            .unwrap_or_else(|| panic!("{}: decoded must be a list of hex parts", name_of(item)))
            .iter()
            .map(|p| hex::decode(p.as_str().unwrap_or("")).unwrap_or_default())
            .collect();
        match zlink_protocol::multipart::decode_parts(&raw) {
            Ok(got) => rep.check(
                got.iter().map(|p| p.to_vec()).collect::<Vec<_>>() == parts,
                || format!("{}: decoded {got:?}", name_of(item)),
            ),
            Err(e) => rep.check(false, || format!("{}: {e}", name_of(item))),
        }
        let refs: Vec<&[u8]> = parts.iter().map(Vec::as_slice).collect();
        rep.check(
            zlink_protocol::multipart::encode_parts(&refs).ok() == Some(raw),
            || format!("{}: re-encode differs", name_of(item)),
        );
    }
    for item in items(&doc, "invalid") {
        let want = expected_error(item);
        match zlink_protocol::multipart::decode_parts(&bytes(item, "hex")) {
            Ok(p) => rep.check(false, || {
                format!("{}: expected {want}, got {p:?}", name_of(item))
            }),
            Err(e) => rep.check(e.kind() == want, || {
                format!("{}: expected {want}, got {}", name_of(item), e.kind())
            }),
        }
    }
    rep.finish("multipart.json");
}

#[test]
fn stream_packet_fixtures() {
    let doc = load(&golden_dir().join("stream.json"));
    let mut rep = Report::default();
    let limit = |item: &Value| {
        let n = item
            .get("maxMessageSize")
            .and_then(Value::as_i64)
            .unwrap_or(65_536);
        MaxMessageSize::new(n).unwrap_or_else(|e| panic!("{}: {e}", name_of(item)))
    };
    for item in items(&doc, "valid") {
        let raw = bytes(item, "hex");
        let expected: StreamPacket = serde_json::from_value(item["decoded"].clone())
            .unwrap_or_else(|e| panic!("{}: {e}", name_of(item)));
        match StreamPacket::decode(&raw, limit(item)) {
            Ok(p) => {
                rep.check(p == expected, || {
                    format!("{}: decoded {p:?}", name_of(item))
                });
                let json = serde_json::to_value(&p).unwrap_or(Value::Null);
                rep.check(json == item["decoded"], || {
                    format!("{}: JSON form differs: {json}", name_of(item))
                });
            }
            Err(e) => rep.check(false, || format!("{}: {e}", name_of(item))),
        }
        rep.check(expected.encode().ok() == Some(raw.clone()), || {
            format!("{}: re-encode differs", name_of(item))
        });
        // The incremental decoder must produce the same packet when fed byte by byte.
        let mut dec = StreamDecoder::new(limit(item));
        let mut got = None;
        for b in &raw {
            dec.extend(std::slice::from_ref(b));
            if let Ok(Some(p)) = dec.next_packet() {
                got = Some(p);
            }
        }
        rep.check(got.as_ref() == Some(&expected), || {
            format!("{}: incremental decode gave {got:?}", name_of(item))
        });
    }
    for item in items(&doc, "invalid") {
        let want = expected_error(item);
        match StreamPacket::decode(&bytes(item, "hex"), limit(item)) {
            Ok(p) => rep.check(false, || {
                format!("{}: expected {want}, got {p:?}", name_of(item))
            }),
            Err(e) => rep.check(e.kind() == want, || {
                format!("{}: expected {want}, got {}", name_of(item), e.kind())
            }),
        }
    }
    rep.finish("stream.json");
}

#[test]
fn fanout_fixtures() {
    let doc = load(&golden_dir().join("fanout.json"));
    let mut rep = Report::default();
    for item in items(&doc, "valid") {
        let frames = frames(item);
        let refs: Vec<&[u8]> = frames.iter().map(Vec::as_slice).collect();
        let kind = item["decoded"]["kind"].as_str().unwrap_or("");
        match (classify(&refs), kind) {
            (Ok(FanoutRecord::Beacon), "beacon") => rep.check(true, String::new),
            (Ok(FanoutRecord::Application { topic, .. }), "application") => {
                let want = item["decoded"]["topic"].as_str().unwrap_or("");
                rep.check(hex::encode(topic) == want, || {
                    format!("{}: topic {}", name_of(item), hex::encode(topic))
                });
            }
            (other, _) => rep.check(false, || format!("{}: got {other:?}", name_of(item))),
        }
    }
    for item in items(&doc, "invalid") {
        let want = expected_error(item);
        let frames = frames(item);
        let refs: Vec<&[u8]> = frames.iter().map(Vec::as_slice).collect();
        match classify(&refs) {
            Ok(r) => rep.check(false, || {
                format!("{}: expected {want}, got {r:?}", name_of(item))
            }),
            Err(e) => rep.check(e.kind() == want, || {
                format!("{}: expected {want}, got {}", name_of(item), e.kind())
            }),
        }
    }
    rep.finish("fanout.json");
}

#[test]
fn authority_key_fixtures() {
    let doc = load(&golden_dir().join("keys.json"));
    let mut rep = Report::default();
    for item in items(&doc, "valid") {
        let id = item["id"].as_str().unwrap_or("");
        let want = item["key"].as_str().unwrap_or("");
        let (kind, got) = match item["objectKind"].as_str() {
            Some("actor") => (ObjectKindKey::Actor, actor_authority_key(id)),
            _ => (ObjectKindKey::Spot, spot_authority_key(id)),
        };
        rep.check(got.as_deref().ok() == Some(want), || {
            format!("{}: got {got:?}", name_of(item))
        });
        let parsed = parse_authority_key(want);
        rep.check(
            matches!(&parsed, Ok((k, back)) if *k == kind && back == id),
            || format!("{}: parse gave {parsed:?}", name_of(item)),
        );
    }
    rep.finish("keys.json");
}

#[test]
fn every_protocol_error_variant_has_a_malformed_fixture() {
    let mut seen = BTreeSet::new();
    let dir = golden_dir();
    for path in json_files(&dir.join("commands"))
        .into_iter()
        .chain(json_files(&dir.join("durable")))
        .chain(json_files(&dir))
        // The ClientServer channel envelope has its own error enum (`ChannelEnvelopeError`),
        // checked against its fixtures in `src/channel_envelope.rs`.
        .filter(|p| p.file_name().and_then(|n| n.to_str()) != Some("channel-envelope.json"))
    {
        error_kinds_in(&load(&path), &mut seen);
    }
    let missing: Vec<&str> = ProtocolError::ALL_KINDS
        .iter()
        .copied()
        .filter(|k| !seen.contains(*k))
        .collect();
    assert!(
        missing.is_empty(),
        "ProtocolError variants without a fixture: {missing:?}"
    );
    let unknown: Vec<&String> = seen
        .iter()
        .filter(|k| !ProtocolError::ALL_KINDS.contains(&k.as_str()))
        .collect();
    assert!(
        unknown.is_empty(),
        "fixtures name unknown error variants: {unknown:?}"
    );
}
