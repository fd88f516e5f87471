//! The typed payload envelope frame (wire §2 "Typed payload envelope").
//!
//! A typed payload keeps the packet name, the content type and the serializer's payload bytes
//! together, so that application code never assembles raw frames. It is the last frame of a
//! service record when the command allows an application payload.
//!
//! # Byte layout
//!
//! ```text
//! +----------+--------------------+---------+--------------------+-------------+---------+
//! | name_len | packet name        | ct_len  | content type       | payload_len | payload |
//! | u8       | UTF-8, 0..=255     | u8      | UTF-8, 0..=255     | u32 (BE)    | opaque  |
//! +----------+--------------------+---------+--------------------+-------------+---------+
//! ```
//!
//! A packet name of length 0 means "none" (replies carry none). No bytes may follow the payload.
//!
//! # Payload limit
//!
//! `payload_len` is at most [`APPLICATION_PAYLOAD_ABSOLUTE_BYTES`] = 4,294,966,774, the schema's
//! `applicationPayloadAbsoluteBytes` (wire §2 "Decode 검증과 크기 상한"). That is
//! `u32::MAX` (4,294,967,295) − 521, where 521 = the 5-byte frame-0 head prefix + the largest
//! name (1 + 255) + the largest content type (1 + 255) + the 4-byte payload length: the largest
//! payload whose complete envelope, head included, still has a size representable in a `u32`.
//! A larger `payload_len` is [`ProtocolError::OutOfBounds`], reported before the payload is read.

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::codec::{LenType, Reader, Writer, check_bounds};
use crate::error::{ProtocolError, Result};
use crate::shared_str::SharedStr;

/// The schema's absolute application payload limit in bytes: `u32::MAX − 521`
/// (see the module documentation).
pub const APPLICATION_PAYLOAD_ABSOLUTE_BYTES: u64 = 4_294_966_774;

/// Largest packet name or content type in UTF-8 bytes.
pub const MAX_NAME_BYTES: usize = 255;

const NAME_FIELD: &str = "TypedPayload.packetName";
const CONTENT_TYPE_FIELD: &str = "TypedPayload.contentType";
const PAYLOAD_FIELD: &str = "TypedPayload.payload";

/// Bytes of the envelope around the payload for empty name and content type.
const FIXED_OVERHEAD: usize = 1 + 1 + 4;

/// A typed application payload: packet name, content type and opaque serializer bytes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TypedPayload {
    /// Packet name, 0..=255 UTF-8 bytes; empty means none (e.g. replies). A [`SharedStr`]: a
    /// constant on the sending side, a slice of the received frame on the receiving side.
    pub packet_name: SharedStr,
    /// Content type, 0..=255 UTF-8 bytes (e.g. the framework-json-v1 profile's type, or the
    /// multipart profile's `application/x-zlink-multipart`).
    pub content_type: SharedStr,
    /// Opaque payload bytes, at most [`APPLICATION_PAYLOAD_ABSOLUTE_BYTES`].
    /// `Bytes` so a decoded payload can share the received frame instead of copying it.
    #[serde(with = "crate::codec::hex")]
    pub payload: Bytes,
}

impl TypedPayload {
    /// A typed payload from its three parts (not validated until encoded).
    pub fn new(
        packet_name: impl Into<SharedStr>,
        content_type: impl Into<SharedStr>,
        payload: impl Into<Bytes>,
    ) -> Self {
        Self {
            packet_name: packet_name.into(),
            content_type: content_type.into(),
            payload: payload.into(),
        }
    }

    /// Size of the encoded envelope in bytes.
    pub fn encoded_len(&self) -> usize {
        FIXED_OVERHEAD
            .saturating_add(self.packet_name.len())
            .saturating_add(self.content_type.len())
            .saturating_add(self.payload.len())
    }

    /// Check every bound the encoder needs, without writing.
    ///
    /// # Errors
    /// [`ProtocolError::OutOfBounds`] for a name or content type over 255 bytes or a payload over
    /// [`APPLICATION_PAYLOAD_ABSOLUTE_BYTES`].
    pub fn validate(&self) -> Result<()> {
        check_bounds(
            NAME_FIELD,
            self.packet_name.len() as u64,
            0,
            MAX_NAME_BYTES as u64,
        )?;
        check_bounds(
            CONTENT_TYPE_FIELD,
            self.content_type.len() as u64,
            0,
            MAX_NAME_BYTES as u64,
        )?;
        check_bounds(
            PAYLOAD_FIELD,
            self.payload.len() as u64,
            0,
            APPLICATION_PAYLOAD_ABSOLUTE_BYTES,
        )
    }

    /// Encode the envelope.
    ///
    /// # Errors
    /// See [`TypedPayload::validate`].
    pub fn encode(&self) -> Result<Vec<u8>> {
        self.validate()?;
        let mut w = Writer::with_capacity(self.encoded_len());
        self.encode_into(&mut w)?;
        Ok(w.into_vec())
    }

    /// Append the encoded envelope to `w`. Validates first, so on error nothing is written.
    ///
    /// # Errors
    /// See [`TypedPayload::validate`].
    pub fn encode_into(&self, w: &mut Writer) -> Result<()> {
        self.validate()?;
        let max = MAX_NAME_BYTES as u64;
        w.length_delimited(LenType::U8, 0, max, self.packet_name.as_bytes(), NAME_FIELD)?;
        w.length_delimited(
            LenType::U8,
            0,
            max,
            self.content_type.as_bytes(),
            CONTENT_TYPE_FIELD,
        )?;
        w.length_delimited(
            LenType::U32,
            0,
            APPLICATION_PAYLOAD_ABSOLUTE_BYTES,
            &self.payload,
            PAYLOAD_FIELD,
        )
    }

    /// Decode an envelope that fills `frame` exactly.
    ///
    /// # Errors
    /// [`ProtocolError::Incomplete`] when a length or its bytes are cut short,
    /// [`ProtocolError::InvalidUtf8`] for a name or content type,
    /// [`ProtocolError::OutOfBounds`] for `payload_len` above the absolute limit (before reading
    /// the payload), [`ProtocolError::TrailingBytes`] after the payload.
    pub fn decode(frame: &[u8]) -> Result<Self> {
        Self::decode_reader(Reader::new(frame))
    }

    /// Decode an envelope held in shared bytes; the payload is a zero-copy slice of `frame`.
    ///
    /// # Errors
    /// As [`TypedPayload::decode`].
    pub fn decode_shared(frame: &Bytes) -> Result<Self> {
        Self::decode_reader(Reader::shared(frame))
    }

    /// Decode an envelope that fills `part`, a sub-slice of the shared buffer `owner`; the
    /// payload and names are zero-copy slices of `owner`. A `part` that is not inside `owner`
    /// is decoded by copying instead (never a panic).
    ///
    /// # Errors
    /// As [`TypedPayload::decode`].
    pub fn decode_shared_part(owner: &Bytes, part: &[u8]) -> Result<Self> {
        let (start, end) = (
            owner.as_ptr() as usize,
            owner.as_ptr() as usize + owner.len(),
        );
        let p = part.as_ptr() as usize;
        if p >= start && p + part.len() <= end {
            Self::decode_reader(Reader::shared(owner).sub(part))
        } else {
            Self::decode(part)
        }
    }

    /// Decode from a reader positioned at the start of the envelope frame (shared or not).
    pub(crate) fn decode_reader(mut r: Reader<'_>) -> Result<Self> {
        let max = MAX_NAME_BYTES as u64;
        let packet_name = r.shared_str(LenType::U8, 0, max, NAME_FIELD)?;
        let content_type = r.shared_str(LenType::U8, 0, max, CONTENT_TYPE_FIELD)?;
        let payload = r.bytes(
            LenType::U32,
            0,
            APPLICATION_PAYLOAD_ABSOLUTE_BYTES,
            PAYLOAD_FIELD,
        )?;
        r.finish("typed payload envelope")?;
        Ok(Self {
            packet_name,
            content_type,
            payload,
        })
    }
}

/// Decode errors are protocol errors; this alias keeps call sites short.
impl TryFrom<&[u8]> for TypedPayload {
    type Error = ProtocolError;

    fn try_from(frame: &[u8]) -> Result<Self> {
        Self::decode(frame)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // In tests a panic is the failure report.
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn absolute_limit_is_u32_max_minus_the_largest_envelope_overhead() {
        let head = 5u64;
        let overhead = head + (1 + 255) + (1 + 255) + 4;
        assert_eq!(overhead, 521);
        assert_eq!(
            APPLICATION_PAYLOAD_ABSOLUTE_BYTES,
            u64::from(u32::MAX) - overhead
        );
    }

    #[test]
    fn encodes_name_content_type_and_payload() {
        let p = TypedPayload::new("Hi", "t", vec![0xAA, 0xBB]);
        assert_eq!(
            p.encode().unwrap(),
            [2, b'H', b'i', 1, b't', 0, 0, 0, 2, 0xAA, 0xBB]
        );
        assert_eq!(p.encoded_len(), 11);
    }

    #[test]
    fn reply_envelope_has_no_packet_name() {
        let p = TypedPayload::new("", "", vec![]);
        assert_eq!(p.encode().unwrap(), [0, 0, 0, 0, 0, 0]);
        assert_eq!(TypedPayload::decode(&[0, 0, 0, 0, 0, 0]).unwrap(), p);
    }

    #[test]
    fn names_over_255_bytes_do_not_encode() {
        let long = "n".repeat(256);
        assert_eq!(
            TypedPayload::new(long.clone(), "", vec![])
                .encode()
                .unwrap_err()
                .kind(),
            "OutOfBounds"
        );
        assert_eq!(
            TypedPayload::new("", long, vec![])
                .encode()
                .unwrap_err()
                .kind(),
            "OutOfBounds"
        );
        let mut w = Writer::new();
        assert!(
            TypedPayload::new("", "c".repeat(256), vec![])
                .encode_into(&mut w)
                .is_err()
        );
        assert!(w.is_empty(), "nothing is written on error");
    }

    #[test]
    fn payload_length_above_the_absolute_limit_is_out_of_bounds_before_reading() {
        let mut frame = vec![0, 0];
        frame.extend_from_slice(&(APPLICATION_PAYLOAD_ABSOLUTE_BYTES as u32 + 1).to_be_bytes());
        assert_eq!(
            TypedPayload::decode(&frame).unwrap_err(),
            ProtocolError::OutOfBounds {
                field: PAYLOAD_FIELD,
                value: APPLICATION_PAYLOAD_ABSOLUTE_BYTES + 1,
                min: 0,
                max: APPLICATION_PAYLOAD_ABSOLUTE_BYTES
            }
        );
        let mut at_limit = vec![0, 0];
        at_limit.extend_from_slice(&(APPLICATION_PAYLOAD_ABSOLUTE_BYTES as u32).to_be_bytes());
        assert_eq!(
            TypedPayload::decode(&at_limit).unwrap_err().kind(),
            "Incomplete"
        );
    }

    #[test]
    fn decode_reports_each_malformation() {
        let cases: &[(&[u8], &str)] = &[
            (&[], "Incomplete"),
            (&[3, b'a'], "Incomplete"),
            (&[0], "Incomplete"),
            (&[0, 0, 0, 0, 0], "Incomplete"),
            (&[0, 0, 0, 0, 0, 2, 1], "Incomplete"),
            (&[1, 0xff, 0, 0, 0, 0, 0], "InvalidUtf8"),
            (&[0, 1, 0xc3, 0, 0, 0, 0], "InvalidUtf8"),
            (&[0, 0, 0, 0, 0, 0, 1], "TrailingBytes"),
        ];
        for (bytes, kind) in cases {
            assert_eq!(
                TypedPayload::decode(bytes).map_err(|e| e.kind()),
                Err(*kind),
                "{bytes:?}"
            );
        }
    }

    #[test]
    fn serde_uses_camel_case_and_hex_payload() {
        let p = TypedPayload::new("Chat", "application/json", vec![0x7b, 0x7d]);
        let json = serde_json::to_value(&p).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "packetName": "Chat",
                "contentType": "application/json",
                "payload": "7b7d"
            })
        );
        assert_eq!(serde_json::from_value::<TypedPayload>(json).unwrap(), p);
    }

    fn typed_payload() -> impl Strategy<Value = TypedPayload> {
        (
            "\\PC{0,40}",
            "[a-z/+.-]{0,40}",
            proptest::collection::vec(any::<u8>(), 0..256),
        )
            .prop_map(|(n, c, p)| TypedPayload::new(n, c, p))
    }

    proptest! {
        #[test]
        fn encode_then_decode_round_trips(p in typed_payload()) {
            prop_assume!(p.packet_name.len() <= 255);
            let bytes = p.encode().unwrap();
            prop_assert_eq!(bytes.len(), p.encoded_len());
            prop_assert_eq!(TypedPayload::decode(&bytes).unwrap(), p);
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            if let Ok(p) = TypedPayload::decode(&bytes) {
                prop_assert_eq!(p.encode().unwrap(), bytes);
            }
        }
    }
}
