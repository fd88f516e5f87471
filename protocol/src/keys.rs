//! Location Store authority keys (wire §1 "Location Store authority key 형식").
//!
//! | object | key |
//! | --- | --- |
//! | Actor | `zla1:a:<byte-length>:<encoded-ActorId>` |
//! | Spot | `zla1:s:<byte-length>:<encoded-SpotRid>` |
//!
//! `<byte-length>` is the decimal length of the raw UTF-8 ID in bytes, without leading zeros.
//! The encoding is RFC 3986 percent-encoding that keeps only the unreserved bytes
//! `A-Z a-z 0-9 - . _ ~` and writes every other byte (including every byte of a multi-byte UTF-8
//! character) as `%XX` with **uppercase** hex. The MeshName is not part of the key; it lives in
//! the authority payload.
//!
//! Every ID therefore has exactly one key, and [`parse_authority_key`] accepts only that
//! canonical spelling (no lowercase hex, no literal reserved bytes, no leading zeros), so a key
//! read back from the store maps to one ID. Because `{` and `}` are always percent-encoded, an ID
//! can never smuggle a Redis Cluster hash tag into its key.

use crate::ids::{IdError, validate_actor_id, validate_spot_id};

/// Version tag that starts every authority key.
pub const AUTHORITY_KEY_VERSION: &str = "zla1";

/// Which kind of object an authority key names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ObjectKindKey {
    /// An Actor (`a`).
    Actor,
    /// A Spot (`s`).
    Spot,
}

impl ObjectKindKey {
    /// The one-letter tag in the key.
    pub const fn tag(self) -> char {
        match self {
            Self::Actor => 'a',
            Self::Spot => 's',
        }
    }
}

/// Whether `b` is an RFC 3986 unreserved byte, kept literally by the key encoding.
fn is_unreserved(b: u8) -> bool {
    UNRESERVED[usize::from(b)]
}

/// [`is_unreserved`] for every byte: one load per byte where keys are built and read (every
/// ID-addressed call, every unit of a move).
const UNRESERVED: [bool; 256] = {
    let mut t = [false; 256];
    let mut b = 0;
    while b < 256 {
        // `b` < 256: the cast cannot truncate.
        let c = b as u8;
        t[b] = c.is_ascii_alphanumeric() || matches!(c, b'-' | b'.' | b'_' | b'~');
        b += 1;
    }
    t
};

/// Percent-encode `id` as the key encoding does: unreserved bytes literally, every other byte as
/// `%XX` with uppercase hex.
pub fn percent_encode(id: &str) -> String {
    let mut out = String::with_capacity(encoded_len(id));
    push_percent_encoded(&mut out, id);
    out
}

/// The length of `id` once percent-encoded.
fn encoded_len(id: &str) -> usize {
    id.bytes()
        .map(|b| if is_unreserved(b) { 1 } else { 3 })
        .sum()
}

/// Appends the percent-encoding of `id` to `out` (see [`percent_encode`]).
///
/// Runs of unreserved bytes are copied at once: this runs on every ID-addressed call and
/// admission, where IDs are mostly unreserved already.
fn push_percent_encoded(out: &mut String, id: &str) {
    const DIGITS: &[u8; 16] = b"0123456789ABCDEF";
    let mut rest = id;
    loop {
        let run = rest
            .bytes()
            .position(|b| !is_unreserved(b))
            .unwrap_or(rest.len());
        // Unreserved bytes are ASCII, so `run` is a character boundary.
        let (literal, tail) = rest.split_at(run);
        out.push_str(literal);
        let mut chars = tail.chars();
        let Some(c) = chars.next() else {
            return;
        };
        // A reserved byte starts a character: every byte of it is escaped.
        let mut utf8 = [0u8; 4];
        for &b in c.encode_utf8(&mut utf8).as_bytes() {
            out.push('%');
            out.push(char::from(DIGITS[usize::from(b >> 4)]));
            out.push(char::from(DIGITS[usize::from(b & 0x0F)]));
        }
        rest = chars.as_str();
    }
}

/// Appends `n` in decimal (the key's byte-length field) without going through `fmt`.
fn push_decimal(out: &mut String, mut n: usize) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    loop {
        at -= 1;
        // `n % 10` < 10: the cast cannot truncate.
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    for &d in &digits[at..] {
        out.push(char::from(d));
    }
}

/// Decode the canonical percent-encoding produced by [`percent_encode`]: literal unreserved bytes
/// and `%XX` with uppercase hex only. The result must be UTF-8.
///
/// # Errors
/// [`IdError::MalformedAuthorityKey`] for any other spelling or non-UTF-8 bytes.
pub fn percent_decode(encoded: &str) -> Result<String, IdError> {
    let bytes = encoded.as_bytes();
    // The decoded form is never longer than the encoded one.
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        if b == b'%' {
            let hi = bytes.get(i + 1).copied().and_then(upper_hex_value);
            let lo = bytes.get(i + 2).copied().and_then(upper_hex_value);
            let (Some(hi), Some(lo)) = (hi, lo) else {
                return Err(IdError::MalformedAuthorityKey {
                    reason: "percent escape is not %XX with uppercase hex",
                });
            };
            let decoded = hi << 4 | lo;
            if is_unreserved(decoded) {
                return Err(IdError::MalformedAuthorityKey {
                    reason: "unreserved byte is percent-encoded",
                });
            }
            out.push(decoded);
            i += 3;
        } else if is_unreserved(b) {
            out.push(b);
            i += 1;
        } else {
            return Err(IdError::MalformedAuthorityKey {
                reason: "reserved byte is not percent-encoded",
            });
        }
    }
    String::from_utf8(out).map_err(|_| IdError::MalformedAuthorityKey {
        reason: "decoded ID is not UTF-8",
    })
}

fn upper_hex_value(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

/// The authority key of an object of `kind` with ID `id`, after checking the ID shape.
///
/// # Errors
/// The errors of [`validate_actor_id`] or [`validate_spot_id`].
pub fn authority_key(kind: ObjectKindKey, id: &str) -> Result<String, IdError> {
    let mut key = String::new();
    push_authority_key(kind, id, &mut key)?;
    Ok(key)
}

/// [`authority_key`], appended to `key` (a buffer the caller reuses, so a lookup by key text
/// allocates nothing); `key` is unchanged on an error.
///
/// # Errors
/// The errors of [`validate_actor_id`] or [`validate_spot_id`].
pub fn push_authority_key(kind: ObjectKindKey, id: &str, key: &mut String) -> Result<(), IdError> {
    match kind {
        ObjectKindKey::Actor => validate_actor_id(id)?,
        ObjectKindKey::Spot => validate_spot_id(id)?,
    }
    // At most one allocation, of the exact size: this runs on every ID-addressed call and
    // admission (runtime/tests/allocations.rs counts them). Most IDs need no escape: one scan
    // finds that, and the ID is then copied at once.
    let len = id.len();
    let len_digits = len.checked_ilog10().unwrap_or(0) as usize + 1;
    let first_reserved = id.bytes().position(|b| !is_unreserved(b));
    let encoded = match first_reserved {
        None => len,
        Some(at) => at + encoded_len(&id[at..]),
    };
    key.reserve(AUTHORITY_KEY_VERSION.len() + 3 + kind.tag().len_utf8() + len_digits + encoded);
    key.push_str(AUTHORITY_KEY_VERSION);
    key.push(':');
    key.push(kind.tag());
    key.push(':');
    push_decimal(key, len);
    key.push(':');
    match first_reserved {
        None => key.push_str(id),
        Some(at) => {
            // Bytes before the first reserved one are unreserved ASCII: a char boundary.
            key.push_str(&id[..at]);
            push_percent_encoded(key, &id[at..]);
        }
    }
    Ok(())
}

/// `zla1:a:<byte-length>:<encoded-ActorId>`.
///
/// # Errors
/// The errors of [`validate_actor_id`].
pub fn actor_authority_key(actor_id: &str) -> Result<String, IdError> {
    authority_key(ObjectKindKey::Actor, actor_id)
}

/// `zla1:s:<byte-length>:<encoded-SpotRid>`. Any Spot ID has a key, including Framework-issued
/// Entry Spot IDs.
///
/// # Errors
/// The errors of [`validate_spot_id`].
pub fn spot_authority_key(spot_rid: &str) -> Result<String, IdError> {
    authority_key(ObjectKindKey::Spot, spot_rid)
}

/// Parse a canonical authority key back into the object kind and the raw ID, checking that the
/// declared byte length matches the decoded ID.
///
/// # Errors
/// [`IdError::MalformedAuthorityKey`] for a key that is not in canonical form,
/// [`IdError::AuthorityKeyLengthMismatch`] when `<byte-length>` disagrees with the ID, and the
/// ID-shape errors of [`authority_key`].
pub fn parse_authority_key(key: &str) -> Result<(ObjectKindKey, String), IdError> {
    let malformed = |reason| IdError::MalformedAuthorityKey { reason };
    let mut fields = key.splitn(4, ':');
    if fields.next() != Some(AUTHORITY_KEY_VERSION) {
        return Err(malformed("key does not start with zla1:"));
    }
    let kind = match fields.next() {
        Some("a") => ObjectKindKey::Actor,
        Some("s") => ObjectKindKey::Spot,
        _ => return Err(malformed("object kind is not a or s")),
    };
    let (Some(len_text), Some(encoded)) = (fields.next(), fields.next()) else {
        return Err(malformed("missing byte-length or ID field"));
    };
    let declared = parse_decimal_len(len_text)?;
    let id = percent_decode(encoded)?;
    if declared != id.len() {
        return Err(IdError::AuthorityKeyLengthMismatch {
            declared,
            actual: id.len(),
        });
    }
    match kind {
        ObjectKindKey::Actor => validate_actor_id(&id)?,
        ObjectKindKey::Spot => validate_spot_id(&id)?,
    }
    Ok((kind, id))
}

/// Canonical decimal: digits only, no sign, no leading zero (except the value `0` itself).
fn parse_decimal_len(text: &str) -> Result<usize, IdError> {
    let malformed = |reason| IdError::MalformedAuthorityKey { reason };
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(malformed("byte-length is not a decimal number"));
    }
    if text.len() > 1 && text.starts_with('0') {
        return Err(malformed("byte-length has a leading zero"));
    }
    text.parse::<usize>()
        .map_err(|_| malformed("byte-length does not fit in usize"))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // In tests a panic is the failure report.
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_unreserved_table_is_rfc_3986_unreserved() {
        for b in 0..=u8::MAX {
            assert_eq!(
                is_unreserved(b),
                b.is_ascii_alphanumeric() || b"-._~".contains(&b),
                "byte {b:#04x}"
            );
        }
    }

    #[test]
    fn ascii_ids_keep_unreserved_bytes() {
        assert_eq!(
            actor_authority_key("player-42_a.b~c").unwrap(),
            "zla1:a:15:player-42_a.b~c"
        );
        assert_eq!(spot_authority_key("Room7").unwrap(), "zla1:s:5:Room7");
    }

    #[test]
    fn spaces_percent_signs_and_reserved_bytes_are_uppercase_escapes() {
        assert_eq!(
            actor_authority_key("a b%c/d:e{f}").unwrap(),
            "zla1:a:12:a%20b%25c%2Fd%3Ae%7Bf%7D"
        );
    }

    #[test]
    fn korean_ids_count_utf8_bytes_and_escape_each_byte() {
        // "방" is U+BC29 = EB B0 A9 in UTF-8.
        assert_eq!(spot_authority_key("방-1").unwrap(), "zla1:s:5:%EB%B0%A9-1");
        assert_eq!(
            parse_authority_key("zla1:s:5:%EB%B0%A9-1").unwrap(),
            (ObjectKindKey::Spot, "방-1".to_owned())
        );
    }

    #[test]
    fn the_length_field_is_plain_decimal() {
        for n in [0, 1, 9, 10, 99, 100, 255, 1000, usize::MAX] {
            let mut s = String::new();
            push_decimal(&mut s, n);
            assert_eq!(s, n.to_string());
        }
    }

    #[test]
    fn runs_of_unreserved_bytes_between_escapes_are_kept_in_order() {
        assert_eq!(percent_encode("ab c방d%"), "ab%20c%EB%B0%A9d%25");
        assert_eq!(percent_encode("  "), "%20%20");
        assert_eq!(percent_encode(""), "");
    }

    #[test]
    fn invalid_ids_have_no_key() {
        assert!(matches!(
            actor_authority_key(""),
            Err(IdError::Empty { .. })
        ));
        assert!(matches!(
            spot_authority_key(&"x".repeat(256)),
            Err(IdError::TooLong { .. })
        ));
    }

    #[test]
    fn entry_spot_ids_have_keys() {
        let id = crate::ids::entry_spot_id("gw", [7; 16]).unwrap();
        let key = spot_authority_key(&id).unwrap();
        assert_eq!(parse_authority_key(&key).unwrap().1, id);
    }

    #[test]
    fn parse_checks_the_declared_length() {
        assert_eq!(
            parse_authority_key("zla1:a:3:ab"),
            Err(IdError::AuthorityKeyLengthMismatch {
                declared: 3,
                actual: 2
            })
        );
        // The length counts raw bytes, not encoded characters.
        assert!(matches!(
            parse_authority_key("zla1:a:3:a%20"),
            Err(IdError::AuthorityKeyLengthMismatch {
                declared: 3,
                actual: 2
            })
        ));
    }

    #[test]
    fn parse_rejects_non_canonical_spellings() {
        for key in [
            "zla2:a:1:a",
            "zla1:x:1:a",
            "zla1:a:1",
            "zla1:a::a",
            "zla1:a:01:a",
            "zla1:a:+1:a",
            "zla1:a:99999999999999999999999:a",
            "zla1:a:2:a%2f", // lowercase hex
            "zla1:a:2:a%2",  // truncated escape
            "zla1:a:3:a b",  // literal space
            "zla1:a:2:a:",   // literal colon
            "zla1:a:1:%41",  // unreserved byte escaped
            "zla1:a:1:%FF",  // not UTF-8
        ] {
            assert!(
                matches!(
                    parse_authority_key(key),
                    Err(IdError::MalformedAuthorityKey { .. })
                ),
                "{key}: {:?}",
                parse_authority_key(key)
            );
        }
        assert!(matches!(
            parse_authority_key("zla1:a:0:"),
            Err(IdError::Empty { .. })
        ));
    }

    proptest! {
        #[test]
        fn keys_round_trip(id in "\\PC{1,80}", actor in any::<bool>()) {
            prop_assume!(id.len() <= 255);
            let kind = if actor { ObjectKindKey::Actor } else { ObjectKindKey::Spot };
            let key = authority_key(kind, &id).unwrap();
            prop_assert!(key.is_ascii());
            prop_assert_eq!(parse_authority_key(&key).unwrap(), (kind, id));
        }

        #[test]
        fn encoded_ids_use_only_unreserved_bytes_and_uppercase_escapes(id in any::<String>()) {
            let encoded = percent_encode(&id);
            prop_assert!(encoded.bytes().all(|b| is_unreserved(b) || b == b'%'));
            let b = encoded.as_bytes();
            for (i, _) in encoded.match_indices('%') {
                prop_assert!(b[i + 1..i + 3].iter().all(|c| upper_hex_value(*c).is_some()));
            }
            prop_assert_eq!(percent_decode(&encoded).unwrap(), id);
        }

        #[test]
        fn arbitrary_keys_never_panic(key in any::<String>()) {
            let _ = parse_authority_key(&key);
        }

        #[test]
        fn arbitrary_key_like_strings_never_panic(rest in "[a-zA-Z0-9%:~ ._-]{0,40}") {
            let _ = parse_authority_key(&format!("zla1:a:{rest}"));
        }
    }
}
