//! The metadata frame: an immutable key-value snapshot carried beside the application payload
//! (glossary "Metadata snapshot", wire §2 "Frame 구성" frame 1 and "Decode 검증과 크기 상한";
//! also the metadata block of the STREAM packet, glossary §11 "Stream packet").
//!
//! # Byte layout
//!
//! The spec fixes the limits (UTF-8 keys and values, no NUL, at most 1,024 bytes counting the
//! encoded keys, values and structural overhead, last value wins) but not the layout; zlink uses:
//!
//! ```text
//! +-------------+  +-----------+-------------+-------------+---------------+
//! | entry_count |  | key_len   | key         | value_len   | value         |  ...
//! | u16         |  | u16 (>=1) | UTF-8, !NUL | u16         | UTF-8, !NUL   |
//! +-------------+  +-----------+-------------+-------------+---------------+
//!                  \_________________ entry_count times _________________/
//! ```
//!
//! Integers are big-endian. The whole frame, prefixes included, is at most
//! [`METADATA_FRAME_LIMIT`] (1,024) bytes. Keys are unique in an encoded snapshot and appear in
//! the order in which they were first set.
//!
//! # Decode checks, in order
//!
//! 1. frame longer than 1,024 bytes → [`ProtocolError::MetadataTooLarge`], before parsing;
//! 2. `entry_count` larger than the remaining bytes allow at 4 bytes per entry →
//!    [`ProtocolError::CountExceedsRemaining`], before allocating;
//! 3. per entry, in field order: a length or body cut short → [`ProtocolError::Incomplete`];
//!    an empty key → [`ProtocolError::OutOfBounds`]; bad UTF-8 → [`ProtocolError::InvalidUtf8`];
//!    NUL → [`ProtocolError::MetadataNul`];
//! 4. bytes after the last entry → [`ProtocolError::TrailingBytes`].
//!
//! A frame that repeats a key is accepted: the last value wins and the key keeps its first
//! position, as with [`Metadata::new`].

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer, ser::SerializeSeq};

use crate::codec::{LenType, Reader, Writer};
use crate::error::{ProtocolError, Result};

/// Largest encoded metadata frame, prefixes included (glossary "Metadata snapshot").
pub const METADATA_FRAME_LIMIT: usize = 1024;

/// Bytes of the `entry_count` prefix.
const COUNT_BYTES: usize = 2;
/// Bytes of the two length prefixes of one entry.
const ENTRY_PREFIX_BYTES: usize = 4;

const KEY_FIELD: &str = "metadata.key";
const VALUE_FIELD: &str = "metadata.value";

/// An immutable metadata snapshot: ordered, unique keys with their values.
///
/// Construction ([`Metadata::new`], [`Metadata::decode`], deserialization) validates every rule,
/// so a value of this type always encodes within [`METADATA_FRAME_LIMIT`]. Two snapshots are
/// equal when they hold the same entries in the same order (the order is the wire order).
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct Metadata {
    entries: Vec<(String, String)>,
}

impl fmt::Debug for Metadata {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

fn check_key(key: &str) -> Result<()> {
    if key.is_empty() {
        return Err(ProtocolError::OutOfBounds {
            field: KEY_FIELD,
            value: 0,
            min: 1,
            max: u64::from(u16::MAX),
        });
    }
    if key.contains('\0') {
        return Err(ProtocolError::MetadataNul { field: "key" });
    }
    Ok(())
}

fn check_value(value: &str) -> Result<()> {
    if value.contains('\0') {
        return Err(ProtocolError::MetadataNul { field: "value" });
    }
    Ok(())
}

fn too_large(size: usize) -> ProtocolError {
    ProtocolError::MetadataTooLarge {
        size: size as u64,
        limit: METADATA_FRAME_LIMIT as u64,
    }
}

impl Metadata {
    /// Build a snapshot from key-value pairs. A repeated key keeps its first position and takes
    /// its last value.
    ///
    /// # Errors
    /// - [`ProtocolError::OutOfBounds`] for an empty key;
    /// - [`ProtocolError::MetadataNul`] for NUL in a key or value;
    /// - [`ProtocolError::MetadataTooLarge`] when the encoded frame would exceed 1,024 bytes.
    ///   Construction stops as soon as the distinct keys alone exceed the limit, so for very
    ///   large inputs `size` is a lower bound of the encoded size.
    pub fn new(entries: impl IntoIterator<Item = (String, String)>) -> Result<Self> {
        let mut out: Vec<(String, String)> = Vec::new();
        // Distinct keys never disappear, so their bytes are a lower bound of the final size;
        // exceeding the limit with them alone ends construction early and bounds `out`.
        let mut key_floor = COUNT_BYTES;
        for (key, value) in entries {
            check_key(&key)?;
            check_value(&value)?;
            if let Some(slot) = out.iter_mut().find(|(k, _)| *k == key) {
                slot.1 = value;
                continue;
            }
            key_floor = key_floor.saturating_add(ENTRY_PREFIX_BYTES + key.len());
            if key_floor > METADATA_FRAME_LIMIT {
                return Err(too_large(key_floor));
            }
            out.push((key, value));
        }
        let metadata = Self { entries: out };
        let size = metadata.encoded_len();
        if size > METADATA_FRAME_LIMIT {
            return Err(too_large(size));
        }
        Ok(metadata)
    }

    /// The empty snapshot.
    pub const fn empty() -> Self {
        Self {
            entries: Vec::new(),
        }
    }

    /// The value of `key`, if set (keys compare byte for byte).
    pub fn find(&self, key: &str) -> Option<&str> {
        self.entries
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// The entries in wire order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (&str, &str)> + '_ {
        self.entries.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the snapshot has no entries.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Size of the encoded frame in bytes (at most [`METADATA_FRAME_LIMIT`]).
    pub fn encoded_len(&self) -> usize {
        self.entries.iter().fold(COUNT_BYTES, |acc, (k, v)| {
            acc.saturating_add(ENTRY_PREFIX_BYTES + k.len() + v.len())
        })
    }

    /// Encode the frame. Infallible: construction already enforced every bound.
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::with_capacity(self.encoded_len());
        self.encode_into(&mut w);
        w.into_vec()
    }

    /// Append the encoded frame to `w` (for embedding, e.g. in a STREAM header).
    pub fn encode_into(&self, w: &mut Writer) {
        // Every length fits in u16: the whole frame is at most 1,024 bytes.
        w.u16(self.entries.len() as u16);
        for (k, v) in &self.entries {
            w.u16(k.len() as u16);
            w.put_slice(k.as_bytes());
            w.u16(v.len() as u16);
            w.put_slice(v.as_bytes());
        }
    }

    /// Decode a metadata frame. See the module documentation for the order of checks.
    ///
    /// # Errors
    /// `MetadataTooLarge`, `CountExceedsRemaining`, `Incomplete`, `OutOfBounds`, `InvalidUtf8`,
    /// `MetadataNul` or `TrailingBytes`.
    pub fn decode(frame: &[u8]) -> Result<Self> {
        if frame.len() > METADATA_FRAME_LIMIT {
            return Err(too_large(frame.len()));
        }
        let mut r = Reader::new(frame);
        let count = r.count(
            LenType::U16,
            0,
            u64::from(u16::MAX),
            ENTRY_PREFIX_BYTES as u64,
            "metadata.entryCount",
        )?;
        // `count` fits in the (at most 1,024-byte) frame, so this allocation is bounded.
        let mut entries: Vec<(String, String)> = Vec::with_capacity(count);
        for _ in 0..count {
            let key = r.length_delimited(LenType::U16, 1, u64::from(u16::MAX), KEY_FIELD)?;
            let key = decode_text(key, KEY_FIELD, "key")?;
            let value = r.length_delimited(LenType::U16, 0, u64::from(u16::MAX), VALUE_FIELD)?;
            let value = decode_text(value, VALUE_FIELD, "value")?;
            match entries.iter_mut().find(|(k, _)| *k == key) {
                Some(slot) => slot.1 = value.to_owned(),
                None => entries.push((key.to_owned(), value.to_owned())),
            }
        }
        r.finish("metadata frame")?;
        Ok(Self { entries })
    }
}

fn decode_text<'a>(
    bytes: &'a [u8],
    field: &'static str,
    nul_field: &'static str,
) -> Result<&'a str> {
    let text = std::str::from_utf8(bytes).map_err(|_| ProtocolError::InvalidUtf8 { field })?;
    if text.contains('\0') {
        return Err(ProtocolError::MetadataNul { field: nul_field });
    }
    Ok(text)
}

impl<'a> IntoIterator for &'a Metadata {
    type Item = (&'a str, &'a str);
    type IntoIter = std::iter::Map<
        std::slice::Iter<'a, (String, String)>,
        fn(&'a (String, String)) -> (&'a str, &'a str),
    >;

    fn into_iter(self) -> Self::IntoIter {
        fn pair(entry: &(String, String)) -> (&str, &str) {
            (entry.0.as_str(), entry.1.as_str())
        }
        self.entries.iter().map(pair)
    }
}

/// JSON form: an array of `[key, value]` pairs in wire order.
impl Serialize for Metadata {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(self.entries.len()))?;
        for (k, v) in &self.entries {
            seq.serialize_element(&(k, v))?;
        }
        seq.end()
    }
}

/// Accepts an array of `[key, value]` pairs and validates it with [`Metadata::new`].
impl<'de> Deserialize<'de> for Metadata {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let pairs = Vec::<(String, String)>::deserialize(d)?;
        Self::new(pairs).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // In tests a panic is the failure report.
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn md(pairs: &[(&str, &str)]) -> Result<Metadata> {
        Metadata::new(
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
        )
    }

    #[test]
    fn encodes_count_then_length_prefixed_pairs() {
        let m = md(&[("k", "v1"), ("x", "")]).unwrap();
        assert_eq!(
            m.encode(),
            [0, 2, 0, 1, b'k', 0, 2, b'v', b'1', 0, 1, b'x', 0, 0]
        );
        assert_eq!(m.encoded_len(), 14);
        assert_eq!(Metadata::empty().encode(), [0, 0]);
    }

    #[test]
    fn last_value_wins_and_keeps_first_position() {
        let m = md(&[("a", "1"), ("b", "2"), ("a", "3")]).unwrap();
        assert_eq!(m.iter().collect::<Vec<_>>(), [("a", "3"), ("b", "2")]);
        assert_eq!(m.find("a"), Some("3"));
        assert_eq!(m.find("A"), None);
        assert_eq!(m.len(), 2);
        assert!(!m.is_empty());
    }

    #[test]
    fn construction_rejects_nul_empty_key_and_oversize() {
        assert_eq!(
            md(&[("a\0", "v")]).unwrap_err(),
            ProtocolError::MetadataNul { field: "key" }
        );
        assert_eq!(
            md(&[("a", "v\0")]).unwrap_err(),
            ProtocolError::MetadataNul { field: "value" }
        );
        assert_eq!(md(&[("", "v")]).unwrap_err().kind(), "OutOfBounds");
        // 2 + 4 + 1 + 1017 = 1024 fits; one more byte does not.
        assert!(md(&[("k", &"v".repeat(1017))]).is_ok());
        assert_eq!(
            md(&[("k", &"v".repeat(1018))]).unwrap_err(),
            ProtocolError::MetadataTooLarge {
                size: 1025,
                limit: 1024
            }
        );
    }

    #[test]
    fn a_later_short_value_can_bring_a_large_snapshot_back_under_the_limit() {
        let big = "v".repeat(2000);
        let m = md(&[("k", &big), ("k", "small")]).unwrap();
        assert_eq!(m.find("k"), Some("small"));
    }

    #[test]
    fn many_distinct_keys_stop_construction_early() {
        let err =
            Metadata::new((0..100_000).map(|i| (format!("key{i}"), String::new()))).unwrap_err();
        assert_eq!(err.kind(), "MetadataTooLarge");
    }

    #[test]
    fn decode_rejects_frames_over_the_limit_before_parsing() {
        let frame = vec![0xff; 1025];
        assert_eq!(
            Metadata::decode(&frame).unwrap_err(),
            ProtocolError::MetadataTooLarge {
                size: 1025,
                limit: 1024
            }
        );
    }

    #[test]
    fn decode_checks_the_count_before_allocating() {
        assert_eq!(
            Metadata::decode(&[0x01, 0x00, 0, 1, b'k', 0, 0]).unwrap_err(),
            ProtocolError::CountExceedsRemaining {
                field: "metadata.entryCount",
                count: 256,
                needed: 1024,
                remaining: 5
            }
        );
    }

    #[test]
    fn decode_reports_each_malformation() {
        let cases: &[(&[u8], &str)] = &[
            (&[], "Incomplete"),
            (&[0], "Incomplete"),
            (&[0, 1, 0, 9, b'k', 0, 0], "Incomplete"),
            (&[0, 1, 0, 1, b'k', 0, 5], "Incomplete"),
            (&[0, 1, 0, 0, 0, 0, 0, 0], "OutOfBounds"),
            (&[0, 1, 0, 1, 0xff, 0, 0], "InvalidUtf8"),
            (&[0, 1, 0, 1, b'k', 0, 1, 0xc3], "InvalidUtf8"),
            (&[0, 1, 0, 1, 0, 0, 0], "MetadataNul"),
            (&[0, 1, 0, 1, b'k', 0, 1, 0], "MetadataNul"),
            (&[0, 0, 7], "TrailingBytes"),
            (&[0, 1, 0, 1, b'k', 0, 0, 9], "TrailingBytes"),
        ];
        for (bytes, kind) in cases {
            assert_eq!(
                Metadata::decode(bytes).map_err(|e| e.kind()),
                Err(*kind),
                "{bytes:?}"
            );
        }
        assert_eq!(
            Metadata::decode(&[0, 1, 0, 1, b'k', 0, 1, 0]).unwrap_err(),
            ProtocolError::MetadataNul { field: "value" }
        );
    }

    #[test]
    fn decode_accepts_duplicate_keys_last_wins() {
        let frame = [0, 2, 0, 1, b'k', 0, 1, b'1', 0, 1, b'k', 0, 1, b'2'];
        let m = Metadata::decode(&frame).unwrap();
        assert_eq!(m.iter().collect::<Vec<_>>(), [("k", "2")]);
    }

    #[test]
    fn serde_is_an_array_of_pairs_and_validates() {
        let m = md(&[("trace", "abc"), ("방", "값")]).unwrap();
        let json = serde_json::to_string(&m).unwrap();
        assert_eq!(json, r#"[["trace","abc"],["방","값"]]"#);
        assert_eq!(serde_json::from_str::<Metadata>(&json).unwrap(), m);
        assert!(serde_json::from_str::<Metadata>(r#"[["a\u0000","b"]]"#).is_err());
        assert!(serde_json::from_str::<Metadata>(r#"[["","b"]]"#).is_err());
        let dup: Metadata = serde_json::from_str(r#"[["a","1"],["a","2"]]"#).unwrap();
        assert_eq!(dup.find("a"), Some("2"));
    }

    fn entries() -> impl Strategy<Value = Vec<(String, String)>> {
        proptest::collection::vec(("[a-z가-힣]{1,8}", "[^\u{0}]{0,16}"), 0..12)
    }

    proptest! {
        #[test]
        fn encode_then_decode_round_trips(pairs in entries()) {
            if let Ok(m) = Metadata::new(pairs) {
                let bytes = m.encode();
                prop_assert_eq!(bytes.len(), m.encoded_len());
                prop_assert!(bytes.len() <= METADATA_FRAME_LIMIT);
                prop_assert_eq!(Metadata::decode(&bytes).unwrap(), m);
            }
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..1100)) {
            if let Ok(m) = Metadata::decode(&bytes) {
                prop_assert!(m.encoded_len() <= bytes.len());
            }
        }

        #[test]
        fn structured_garbage_never_panics(
            count in 0u16..8,
            body in proptest::collection::vec(prop_oneof![Just(0u8), Just(1), Just(b'k'), any::<u8>()], 0..64),
        ) {
            let mut bytes = count.to_be_bytes().to_vec();
            bytes.extend(body);
            let _ = Metadata::decode(&bytes);
        }
    }
}
