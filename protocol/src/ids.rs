//! Identifier rules: Spot and Actor IDs, stable types, Entry Spot IDs, Routing IDs and their
//! diagnostic prefix, lifecycle generations and correlation IDs.
//!
//! These checks run on values an application or a configuration hands to the runtime, before the
//! runtime touches the Location Store or a factory. A failure is therefore a caller error (kind
//! `InvalidOperation` in the spec's vocabulary, or a startup configuration error), reported as an
//! [`IdError`] — not a [`ProtocolError`](crate::ProtocolError), which is reserved for malformed
//! bytes received from a peer.
//!
//! | value | rule | spec |
//! | --- | --- | --- |
//! | Spot ID, Actor ID, stable type | UTF-8, 1..=255 bytes, compared case-sensitively byte for byte | glossary §1 "Spot ID" |
//! | Entry Spot ID | `<prefix>-entry-<lowercase canonical UUID v4>`, issued by the Framework only | glossary §1 "Entry Spot, User Spot과 Instance Spot" |
//! | Routing ID (RID) | 1..=255 bytes | glossary §9 "Routing ID" |
//! | Routing ID prefix | ASCII `[A-Za-z0-9._-]`, 1..=64 characters | glossary §9 "Routing ID prefix" |
//! | automatic RID | `<prefix>-<lowercase canonical UUID v4>` | glossary §9 "Routing ID", "CSPRNG" |
//! | lifecycle generation | non-zero, at most `i64::MAX` (2^63 − 1), equality-only | glossary §6 "Lifecycle generation" |
//! | correlation ID | 1..=64 bytes of printable ASCII `0x21..=0x7E` | glossary "Reply correlation" |
//!
//! The crate does no I/O, so randomness is a parameter: callers draw 16 bytes from a CSPRNG
//! (glossary §9 "CSPRNG") and pass them to [`entry_spot_id`], [`automatic_rid`] or
//! [`uuid_v4_bytes`]; this module sets the UUID version and variant bits itself.

use thiserror::Error;

/// Largest Spot ID, Actor ID, stable type or Routing ID in UTF-8 bytes.
pub const MAX_ID_BYTES: usize = 255;

/// Largest Routing ID prefix in characters (ASCII, so also bytes).
pub const MAX_RID_PREFIX_LEN: usize = 64;

/// Largest correlation ID in bytes.
pub const MAX_CORRELATION_ID_LEN: usize = 64;

/// Largest lifecycle generation the runtime may issue (`i64::MAX`, glossary §6).
pub const MAX_LIFECYCLE_GENERATION: u64 = i64::MAX as u64;

/// Length of a lowercase canonical UUID string (`8-4-4-4-12` hex digits and hyphens).
pub const UUID_STRING_LEN: usize = 36;

/// The infix between the prefix and the UUID of an Entry Spot ID.
const ENTRY_INFIX: &str = "-entry-";

/// A caller-supplied identifier that breaks an identifier rule.
///
/// Field names (`field`) are static spec names such as `"spotId"`; the errors never echo the
/// rejected value, so they are safe to log.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum IdError {
    /// The identifier is empty.
    #[error("{field} is empty")]
    Empty {
        /// Which identifier.
        field: &'static str,
    },
    /// The identifier is longer than its limit.
    #[error("{field} is {len} bytes, more than {max}")]
    TooLong {
        /// Which identifier.
        field: &'static str,
        /// Its length in bytes.
        len: usize,
        /// The limit in bytes.
        max: usize,
    },
    /// A caller-chosen Spot ID has the Entry Spot form `<prefix>-entry-<uuid-v4>`, which the
    /// Framework reserves for itself (glossary §1).
    #[error("spotId has the reserved Entry Spot ID form <prefix>-entry-<uuid-v4>")]
    ReservedEntrySpotId,
    /// A Routing ID prefix holds a byte outside `[A-Za-z0-9._-]`.
    #[error("ridPrefix contains byte 0x{byte:02x} outside [A-Za-z0-9._-]")]
    InvalidRidPrefixChar {
        /// First offending byte.
        byte: u8,
    },
    /// A correlation ID holds a byte outside printable ASCII `0x21..=0x7E`.
    #[error("correlationId contains byte 0x{byte:02x} outside printable ASCII")]
    InvalidCorrelationIdByte {
        /// First offending byte.
        byte: u8,
    },
    /// A lifecycle generation is zero.
    #[error("lifecycle generation must not be zero")]
    ZeroLifecycleGeneration,
    /// A lifecycle generation uses the top bit of a `u64` (above `i64::MAX`).
    #[error("lifecycle generation {value} exceeds 2^63-1")]
    LifecycleGenerationOutOfRange {
        /// The rejected value.
        value: u64,
    },
    /// A Location Store authority key does not have the `zla1:<a|s>:<len>:<id>` shape.
    #[error("malformed authority key: {reason}")]
    MalformedAuthorityKey {
        /// What is wrong.
        reason: &'static str,
    },
    /// An authority key's `<byte-length>` does not match the decoded ID.
    #[error("authority key declares {declared} bytes but the ID has {actual}")]
    AuthorityKeyLengthMismatch {
        /// Length written in the key.
        declared: usize,
        /// Length of the decoded ID.
        actual: usize,
    },
}

fn check_len(field: &'static str, value: &str, max: usize) -> Result<(), IdError> {
    match value.len() {
        0 => Err(IdError::Empty { field }),
        len if len > max => Err(IdError::TooLong { field, len, max }),
        _ => Ok(()),
    }
}

/// Check the shape of any Spot ID, including Framework-issued Entry Spot IDs: UTF-8 (guaranteed
/// by `&str`), 1..=255 bytes (glossary §1 "Spot ID"). Comparison is case-sensitive and no other
/// character restriction applies.
///
/// Use [`validate_user_spot_id`] for IDs an application chooses.
///
/// # Errors
/// [`IdError::Empty`] or [`IdError::TooLong`].
pub fn validate_spot_id(spot_id: &str) -> Result<(), IdError> {
    check_len("spotId", spot_id, MAX_ID_BYTES)
}

/// Check a Spot ID chosen by an application for a User or Instance Spot: the shape of
/// [`validate_spot_id`], and not of the Entry Spot form, which the Framework reserves (glossary §1:
/// rejected with InvalidOperation before the Store or a factory runs).
///
/// # Errors
/// [`IdError::Empty`], [`IdError::TooLong`] or [`IdError::ReservedEntrySpotId`].
pub fn validate_user_spot_id(spot_id: &str) -> Result<(), IdError> {
    validate_spot_id(spot_id)?;
    if is_entry_spot_id(spot_id) {
        return Err(IdError::ReservedEntrySpotId);
    }
    Ok(())
}

/// Check an Actor ID: UTF-8, 1..=255 bytes, case-sensitive.
///
/// # Errors
/// [`IdError::Empty`] or [`IdError::TooLong`].
pub fn validate_actor_id(actor_id: &str) -> Result<(), IdError> {
    check_len("actorId", actor_id, MAX_ID_BYTES)
}

/// Check an Actor or Spot stable type: UTF-8, 1..=255 bytes, case-sensitive.
///
/// # Errors
/// [`IdError::Empty`] or [`IdError::TooLong`].
pub fn validate_stable_type(stable_type: &str) -> Result<(), IdError> {
    check_len("stableType", stable_type, MAX_ID_BYTES)
}

/// Check a full Routing ID: 1..=255 bytes (glossary §9 "Routing ID").
///
/// # Errors
/// [`IdError::Empty`] or [`IdError::TooLong`].
pub fn validate_rid(rid: &str) -> Result<(), IdError> {
    check_len("rid", rid, MAX_ID_BYTES)
}

/// Check a Routing ID prefix: ASCII `[A-Za-z0-9._-]`, 1..=64 characters (glossary §9).
///
/// # Errors
/// [`IdError::Empty`], [`IdError::TooLong`] or [`IdError::InvalidRidPrefixChar`].
pub fn validate_rid_prefix(prefix: &str) -> Result<(), IdError> {
    check_len("ridPrefix", prefix, MAX_RID_PREFIX_LEN)?;
    match prefix.bytes().find(|&b| !is_rid_prefix_byte(b)) {
        Some(byte) => Err(IdError::InvalidRidPrefixChar { byte }),
        None => Ok(()),
    }
}

fn is_rid_prefix_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-')
}

/// Turn 16 random bytes into a UUID v4: the version nibble becomes `4` and the variant bits
/// `10` (RFC 4122 / RFC 9562); the other 122 bits are the caller's randomness.
pub fn uuid_v4_bytes(mut random: [u8; 16]) -> [u8; 16] {
    random[6] = (random[6] & 0x0F) | 0x40;
    random[8] = (random[8] & 0x3F) | 0x80;
    random
}

/// The lowercase canonical string (`xxxxxxxx-xxxx-4xxx-[89ab]xxx-xxxxxxxxxxxx`) of the UUID v4
/// made from `random` by [`uuid_v4_bytes`].
pub fn uuid_v4_string(random: [u8; 16]) -> String {
    format_uuid(&uuid_v4_bytes(random))
}

/// The lowercase canonical `8-4-4-4-12` string of any 16-byte UUID.
pub fn format_uuid(uuid: &[u8; 16]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(UUID_STRING_LEN);
    for (i, &b) in uuid.iter().enumerate() {
        if matches!(i, 4 | 6 | 8 | 10) {
            s.push('-');
        }
        s.push(char::from(DIGITS[usize::from(b >> 4)]));
        s.push(char::from(DIGITS[usize::from(b & 0x0F)]));
    }
    s
}

/// Whether `s` is a lowercase canonical UUID v4 string: 36 characters, hyphens at 8, 13, 18
/// and 23, lowercase hex elsewhere, version digit `4`, variant digit one of `8 9 a b`.
pub fn is_lowercase_uuid_v4(s: &str) -> bool {
    let b = s.as_bytes();
    if b.len() != UUID_STRING_LEN {
        return false;
    }
    let shape_ok = b.iter().enumerate().all(|(i, &c)| match i {
        8 | 13 | 18 | 23 => c == b'-',
        _ => c.is_ascii_digit() || (b'a'..=b'f').contains(&c),
    });
    shape_ok && b[14] == b'4' && matches!(b[19], b'8' | b'9' | b'a' | b'b')
}

/// Whether `spot_id` has the Entry Spot ID form `<prefix>-entry-<lowercase canonical UUID v4>`
/// with a valid Routing ID prefix (glossary §1). Only the Framework issues such IDs.
///
/// The prefix may itself contain `-entry-`; the UUID is always the last 36 bytes.
pub fn is_entry_spot_id(spot_id: &str) -> bool {
    let Some(split) = spot_id.len().checked_sub(UUID_STRING_LEN) else {
        return false;
    };
    // Everything before the UUID must be ASCII for a match, so a non-boundary split is a miss.
    let (Some(head), Some(uuid)) = (spot_id.get(..split), spot_id.get(split..)) else {
        return false;
    };
    let Some(prefix) = head.strip_suffix(ENTRY_INFIX) else {
        return false;
    };
    is_lowercase_uuid_v4(uuid) && validate_rid_prefix(prefix).is_ok()
}

/// Build a Framework-issued Entry Spot ID `<prefix>-entry-<uuid-v4>` from a Routing ID prefix
/// and 16 CSPRNG bytes (glossary §1). The MeshNode RID and the Entry Spot ID use the same prefix
/// but separate draws.
///
/// # Errors
/// The prefix errors of [`validate_rid_prefix`].
pub fn entry_spot_id(prefix: &str, uuid_random: [u8; 16]) -> Result<String, IdError> {
    validate_rid_prefix(prefix)?;
    Ok(format!(
        "{prefix}{ENTRY_INFIX}{}",
        uuid_v4_string(uuid_random)
    ))
}

/// Build a Framework automatic Routing ID `<prefix>-<uuid-v4>` from a Routing ID prefix and 16
/// CSPRNG bytes (glossary §9). The result is at most 64 + 1 + 36 = 101 bytes.
///
/// # Errors
/// The prefix errors of [`validate_rid_prefix`].
pub fn automatic_rid(prefix: &str, uuid_random: [u8; 16]) -> Result<String, IdError> {
    validate_rid_prefix(prefix)?;
    Ok(format!("{prefix}-{}", uuid_v4_string(uuid_random)))
}

/// Check a lifecycle generation: non-zero and at most `i64::MAX` (the wire's `nonzero-u64`
/// range `1..long.MaxValue`, glossary §6). Receivers compare generations for equality only.
///
/// # Errors
/// [`IdError::ZeroLifecycleGeneration`] or [`IdError::LifecycleGenerationOutOfRange`].
pub fn validate_lifecycle_generation(generation: u64) -> Result<(), IdError> {
    match generation {
        0 => Err(IdError::ZeroLifecycleGeneration),
        value if value > MAX_LIFECYCLE_GENERATION => {
            Err(IdError::LifecycleGenerationOutOfRange { value })
        }
        _ => Ok(()),
    }
}

/// Turn 64 random bits into a lifecycle generation by clearing the top bit (a 63-bit value).
/// Returns `None` when the result is zero, so the caller draws again; with a CSPRNG that happens
/// with probability 2^-63.
pub fn lifecycle_generation_from_random(random: u64) -> Option<u64> {
    match random & MAX_LIFECYCLE_GENERATION {
        0 => None,
        generation => Some(generation),
    }
}

/// Check a correlation ID: 1..=64 bytes of printable ASCII `0x21..=0x7E`.
///
/// # Errors
/// [`IdError::Empty`], [`IdError::TooLong`] or [`IdError::InvalidCorrelationIdByte`].
pub fn validate_correlation_id(correlation_id: &str) -> Result<(), IdError> {
    check_len("correlationId", correlation_id, MAX_CORRELATION_ID_LEN)?;
    match correlation_id.bytes().find(|b| !(0x21..=0x7E).contains(b)) {
        Some(byte) => Err(IdError::InvalidCorrelationIdByte { byte }),
        None => Ok(()),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // In tests a panic is the failure report.
mod tests {
    use super::*;
    use proptest::prelude::*;

    const RANDOM: [u8; 16] = [
        0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd, 0xee,
        0xff,
    ];

    #[test]
    fn spot_actor_and_stable_type_accept_1_to_255_utf8_bytes() {
        for validate in [
            validate_spot_id,
            validate_actor_id,
            validate_stable_type,
            validate_rid,
        ] {
            assert!(validate("a").is_ok());
            assert!(validate(&"x".repeat(255)).is_ok());
            assert!(validate("방-7 Room/Ü").is_ok());
            assert!(matches!(validate(""), Err(IdError::Empty { .. })));
            assert!(matches!(
                validate(&"x".repeat(256)),
                Err(IdError::TooLong {
                    len: 256,
                    max: 255,
                    ..
                })
            ));
        }
    }

    #[test]
    fn id_length_counts_utf8_bytes_not_characters() {
        // 85 Hangul syllables = 255 bytes; 86 = 258 bytes.
        assert!(validate_spot_id(&"방".repeat(85)).is_ok());
        assert_eq!(
            validate_actor_id(&"방".repeat(86)),
            Err(IdError::TooLong {
                field: "actorId",
                len: 258,
                max: 255
            })
        );
    }

    #[test]
    fn uuid_v4_sets_version_and_variant_bits() {
        let uuid = uuid_v4_bytes([0xff; 16]);
        assert_eq!(uuid[6] >> 4, 4);
        assert_eq!(uuid[8] >> 6, 0b10);
        assert_eq!(
            uuid_v4_string(RANDOM),
            "00112233-4455-4677-8899-aabbccddeeff"
        );
        assert_eq!(
            uuid_v4_string([0; 16]),
            "00000000-0000-4000-8000-000000000000"
        );
    }

    #[test]
    fn entry_spot_id_has_the_reserved_form() {
        let id = entry_spot_id("game-node.1", RANDOM).unwrap();
        assert_eq!(id, "game-node.1-entry-00112233-4455-4677-8899-aabbccddeeff");
        assert!(is_entry_spot_id(&id));
        assert!(validate_spot_id(&id).is_ok());
        assert_eq!(
            validate_user_spot_id(&id),
            Err(IdError::ReservedEntrySpotId)
        );
    }

    #[test]
    fn caller_spot_ids_that_merely_resemble_entry_ids_are_allowed() {
        let uuid = "00112233-4455-4677-8899-aabbccddeeff";
        for id in [
            format!("room-entry-{}", uuid.to_uppercase()), // not lowercase
            "room-entry-00112233-4455-1677-8899-aabbccddeeff".to_owned(), // version 1
            "room-entry-00112233-4455-4677-c899-aabbccddeeff".to_owned(), // wrong variant
            format!("-entry-{uuid}"),                      // empty prefix
            format!("ro om-entry-{uuid}"),                 // prefix outside the RID alphabet
            format!("room-entree-{uuid}"),
            format!("room-entry-{uuid}x"),
            "room-7".to_owned(),
        ] {
            assert!(!is_entry_spot_id(&id), "{id}");
            assert!(validate_user_spot_id(&id).is_ok(), "{id}");
        }
    }

    #[test]
    fn entry_detection_handles_prefix_containing_the_infix_and_multibyte_text() {
        let id = format!("a-entry-b-entry-{}", uuid_v4_string(RANDOM));
        assert!(is_entry_spot_id(&id));
        // A split inside a multi-byte character must not panic.
        assert!(!is_entry_spot_id(&"방".repeat(20)));
        assert!(!is_entry_spot_id("short"));
    }

    #[test]
    fn rid_prefix_alphabet_and_length() {
        assert!(validate_rid_prefix("Node_1.a-b").is_ok());
        assert!(validate_rid_prefix(&"p".repeat(64)).is_ok());
        assert!(matches!(
            validate_rid_prefix(&"p".repeat(65)),
            Err(IdError::TooLong { max: 64, .. })
        ));
        assert!(matches!(
            validate_rid_prefix(""),
            Err(IdError::Empty { .. })
        ));
        assert_eq!(
            validate_rid_prefix("node/1"),
            Err(IdError::InvalidRidPrefixChar { byte: b'/' })
        );
        assert_eq!(
            validate_rid_prefix("nodé"),
            Err(IdError::InvalidRidPrefixChar { byte: 0xc3 })
        );
    }

    #[test]
    fn automatic_rid_is_prefix_dash_uuid() {
        assert_eq!(
            automatic_rid("gw", RANDOM).unwrap(),
            "gw-00112233-4455-4677-8899-aabbccddeeff"
        );
        assert!(automatic_rid("bad prefix", RANDOM).is_err());
        let longest = automatic_rid(&"p".repeat(64), RANDOM).unwrap();
        assert_eq!(longest.len(), 101);
        assert!(validate_rid(&longest).is_ok());
    }

    #[test]
    fn lifecycle_generation_range_is_1_to_i64_max() {
        assert_eq!(
            validate_lifecycle_generation(0),
            Err(IdError::ZeroLifecycleGeneration)
        );
        assert!(validate_lifecycle_generation(1).is_ok());
        assert!(validate_lifecycle_generation(i64::MAX as u64).is_ok());
        assert_eq!(
            validate_lifecycle_generation(1 << 63),
            Err(IdError::LifecycleGenerationOutOfRange { value: 1 << 63 })
        );
    }

    #[test]
    fn lifecycle_generation_from_random_masks_the_top_bit_and_redraws_on_zero() {
        assert_eq!(lifecycle_generation_from_random(0), None);
        assert_eq!(lifecycle_generation_from_random(1 << 63), None);
        assert_eq!(
            lifecycle_generation_from_random(u64::MAX),
            Some(i64::MAX as u64)
        );
        assert_eq!(lifecycle_generation_from_random((1 << 63) | 7), Some(7));
    }

    #[test]
    fn correlation_id_is_1_to_64_printable_ascii() {
        assert!(validate_correlation_id("req-1").is_ok());
        assert!(validate_correlation_id(&"~".repeat(64)).is_ok());
        assert!(matches!(
            validate_correlation_id(""),
            Err(IdError::Empty { .. })
        ));
        assert!(matches!(
            validate_correlation_id(&"a".repeat(65)),
            Err(IdError::TooLong { .. })
        ));
        assert_eq!(
            validate_correlation_id("a b"),
            Err(IdError::InvalidCorrelationIdByte { byte: b' ' })
        );
        assert_eq!(
            validate_correlation_id("a\u{7f}"),
            Err(IdError::InvalidCorrelationIdByte { byte: 0x7f })
        );
    }

    proptest! {
        #[test]
        fn generated_entry_spot_ids_are_always_recognised(
            prefix in "[A-Za-z0-9._-]{1,64}",
            random in any::<[u8; 16]>(),
        ) {
            let id = entry_spot_id(&prefix, random).unwrap();
            prop_assert!(is_entry_spot_id(&id));
            prop_assert!(validate_spot_id(&id).is_ok());
            prop_assert_eq!(validate_user_spot_id(&id), Err(IdError::ReservedEntrySpotId));
        }

        #[test]
        fn generated_uuids_are_lowercase_canonical_v4(random in any::<[u8; 16]>()) {
            prop_assert!(is_lowercase_uuid_v4(&uuid_v4_string(random)));
        }

        #[test]
        fn generated_lifecycle_generations_are_valid(random in any::<u64>()) {
            if let Some(generation) = lifecycle_generation_from_random(random) {
                prop_assert!(validate_lifecycle_generation(generation).is_ok());
            }
        }

        #[test]
        fn arbitrary_strings_never_panic(s in any::<String>()) {
            let _ = is_entry_spot_id(&s);
            let _ = validate_user_spot_id(&s);
            let _ = validate_rid_prefix(&s);
            let _ = validate_correlation_id(&s);
        }
    }
}
