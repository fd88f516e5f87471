//! The Framework multipart application profile (wire §2 "Framework multipart application
//! profile").
//!
//! Service messaging commands that carry several Framework message parts as one application
//! payload wrap them in a [`TypedPayload`] whose packet name is [`PACKET_NAME`] and whose content
//! type is [`CONTENT_TYPE`]. Parts are opaque bytes; the profile carries no per-part name or
//! content type. Operations that define their own application-payload envelope (Actor creation,
//! for instance) do not use this profile.
//!
//! # Byte layout of the envelope payload
//!
//! ```text
//! +------------+  +-------------+----------------+  +-------------+-----+
//! | part count |  | part 0 len  | part 0 bytes   |  | part 1 len  | ... |
//! | u32 (>= 1) |  | u32         | opaque         |  | u32         |     |
//! +------------+  +-------------+----------------+  +-------------+-----+
//!                 \____________ part count times ______________/
//! ```
//!
//! The decoder checks, in order: the count is present (`Incomplete`) and non-zero
//! (`EmptyMultipart`); `count × 4` bytes remain (`CountExceedsRemaining`, before the part list is
//! allocated); each length is within the remaining bytes (`Incomplete`); nothing follows the last
//! part (`TrailingBytes`). Decoding borrows: each part is a slice of the input.

use crate::codec::{LenType, Reader, Writer, check_bounds};
use crate::envelope::{APPLICATION_PAYLOAD_ABSOLUTE_BYTES, TypedPayload};
use crate::error::{ProtocolError, Result};

/// Packet name of the outer envelope.
pub const PACKET_NAME: &str = "ZLinkFrameworkMultipart";

/// Content type of the outer envelope.
pub const CONTENT_TYPE: &str = "application/x-zlink-multipart";

/// Bytes of one length (or count) prefix; also the least bytes one part needs.
const PREFIX_BYTES: usize = 4;

const COUNT_FIELD: &str = "multipart.partCount";
const PART_FIELD: &str = "multipart.part";

/// Encode parts into a multipart payload.
///
/// # Errors
/// [`ProtocolError::EmptyMultipart`] for zero parts; [`ProtocolError::OutOfBounds`] when the
/// payload would exceed [`APPLICATION_PAYLOAD_ABSOLUTE_BYTES`] (which also bounds every part
/// length and the count below `u32::MAX`).
pub fn encode_parts(parts: &[&[u8]]) -> Result<Vec<u8>> {
    if parts.is_empty() {
        return Err(ProtocolError::EmptyMultipart);
    }
    let total = parts.iter().fold(PREFIX_BYTES as u64, |acc, p| {
        acc.saturating_add(PREFIX_BYTES as u64)
            .saturating_add(p.len() as u64)
    });
    check_bounds(
        "multipart payload",
        total,
        0,
        APPLICATION_PAYLOAD_ABSOLUTE_BYTES,
    )?;
    // `total` fits the absolute limit, so it fits in memory the parts already occupy.
    let mut w = Writer::with_capacity(total as usize);
    w.count(
        LenType::U32,
        1,
        u64::from(u32::MAX),
        parts.len(),
        COUNT_FIELD,
    )?;
    for part in parts {
        w.length_delimited(LenType::U32, 0, u64::from(u32::MAX), part, PART_FIELD)?;
    }
    Ok(w.into_vec())
}

/// Decode a multipart payload into borrowed parts. See the module documentation for the order of
/// checks.
///
/// # Errors
/// `Incomplete`, `EmptyMultipart`, `CountExceedsRemaining` or `TrailingBytes`.
pub fn decode_parts(payload: &[u8]) -> Result<Vec<&[u8]>> {
    let mut r = Reader::new(payload);
    let count = r.count(
        LenType::U32,
        0,
        u64::from(u32::MAX),
        PREFIX_BYTES as u64,
        COUNT_FIELD,
    )?;
    if count == 0 {
        return Err(ProtocolError::EmptyMultipart);
    }
    // `count * 4 <= remaining`, so the list is bounded by the input size.
    let mut parts = Vec::with_capacity(count);
    for _ in 0..count {
        parts.push(r.length_delimited(LenType::U32, 0, u64::from(u32::MAX), PART_FIELD)?);
    }
    r.finish("multipart payload")?;
    Ok(parts)
}

impl TypedPayload {
    /// A typed payload of the Framework multipart profile holding `parts`.
    ///
    /// # Errors
    /// The errors of [`encode_parts`].
    pub fn multipart(parts: &[&[u8]]) -> Result<Self> {
        Ok(Self::new(PACKET_NAME, CONTENT_TYPE, encode_parts(parts)?))
    }

    /// Whether this envelope declares the Framework multipart profile.
    pub fn is_multipart(&self) -> bool {
        self.packet_name == PACKET_NAME && self.content_type == CONTENT_TYPE
    }

    /// The parts of a Framework multipart envelope, borrowed from its payload.
    ///
    /// # Errors
    /// [`ProtocolError::ConstraintViolated`] when the packet name or content type is not the
    /// profile's, then the errors of [`decode_parts`].
    pub fn multipart_parts(&self) -> Result<Vec<&[u8]>> {
        if self.packet_name != PACKET_NAME {
            return Err(ProtocolError::ConstraintViolated {
                constraint: "multipart: packet name must be ZLinkFrameworkMultipart",
            });
        }
        if self.content_type != CONTENT_TYPE {
            return Err(ProtocolError::ConstraintViolated {
                constraint: "multipart: content type must be application/x-zlink-multipart",
            });
        }
        decode_parts(&self.payload)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // In tests a panic is the failure report.
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn encodes_count_then_length_prefixed_parts() {
        let bytes = encode_parts(&[b"ab", b""]).unwrap();
        assert_eq!(bytes, [0, 0, 0, 2, 0, 0, 0, 2, b'a', b'b', 0, 0, 0, 0]);
        assert_eq!(decode_parts(&bytes).unwrap(), [&b"ab"[..], &b""[..]]);
    }

    #[test]
    fn zero_parts_is_empty_multipart_both_ways() {
        assert_eq!(
            encode_parts(&[]).unwrap_err(),
            ProtocolError::EmptyMultipart
        );
        assert_eq!(
            decode_parts(&[0, 0, 0, 0]).unwrap_err(),
            ProtocolError::EmptyMultipart
        );
    }

    #[test]
    fn huge_count_is_rejected_before_building_the_list() {
        assert_eq!(
            decode_parts(&[0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0]).unwrap_err(),
            ProtocolError::CountExceedsRemaining {
                field: COUNT_FIELD,
                count: u64::from(u32::MAX),
                needed: u64::from(u32::MAX) * 4,
                remaining: 4
            }
        );
    }

    #[test]
    fn decode_reports_each_malformation() {
        let cases: &[(&[u8], &str)] = &[
            (&[], "Incomplete"),
            (&[0, 0, 1], "Incomplete"),
            (&[0, 0, 0, 2, 0, 0, 0, 0], "CountExceedsRemaining"),
            (&[0, 0, 0, 1, 0, 0, 0, 5, 1, 2], "Incomplete"),
            (&[0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 9], "Incomplete"),
            (&[0, 0, 0, 1, 0, 0, 0, 0, 7], "TrailingBytes"),
        ];
        for (bytes, kind) in cases {
            assert_eq!(
                decode_parts(bytes).map_err(|e| e.kind()),
                Err(*kind),
                "{bytes:?}"
            );
        }
    }

    #[test]
    fn typed_payload_multipart_round_trips_through_the_envelope() {
        let p = TypedPayload::multipart(&[b"one", b"two"]).unwrap();
        assert_eq!(p.packet_name, "ZLinkFrameworkMultipart");
        assert_eq!(p.content_type, "application/x-zlink-multipart");
        assert!(p.is_multipart());
        let decoded = TypedPayload::decode(&p.encode().unwrap()).unwrap();
        assert_eq!(
            decoded.multipart_parts().unwrap(),
            [&b"one"[..], &b"two"[..]]
        );
    }

    #[test]
    fn parts_of_another_profile_are_a_constraint_violation() {
        let mut p = TypedPayload::multipart(&[b"x"]).unwrap();
        p.content_type = "application/json".into();
        assert_eq!(
            p.multipart_parts().unwrap_err().kind(),
            "ConstraintViolated"
        );
        let mut p = TypedPayload::multipart(&[b"x"]).unwrap();
        p.packet_name = "Chat".into();
        assert!(!p.is_multipart());
        assert_eq!(
            p.multipart_parts().unwrap_err().kind(),
            "ConstraintViolated"
        );
    }

    proptest! {
        #[test]
        fn encode_then_decode_round_trips(
            parts in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..64), 1..10),
        ) {
            let slices: Vec<&[u8]> = parts.iter().map(Vec::as_slice).collect();
            let bytes = encode_parts(&slices).unwrap();
            prop_assert_eq!(decode_parts(&bytes).unwrap(), slices);
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            if let Ok(parts) = decode_parts(&bytes) {
                prop_assert_eq!(encode_parts(&parts).unwrap(), bytes);
            }
        }

        #[test]
        fn small_counts_with_garbage_never_panic(
            count in 0u32..6,
            body in proptest::collection::vec(prop_oneof![Just(0u8), Just(1), any::<u8>()], 0..48),
        ) {
            let mut bytes = count.to_be_bytes().to_vec();
            bytes.extend(body);
            let _ = decode_parts(&bytes);
        }
    }
}
