//! [`SharedStr`]: an immutable UTF-8 string that never allocates to clone or to decode.
//!
//! Hot-path text fields — the packet name and content type of every typed payload — are
//! either compile-time constants on the sending side or short slices of a received frame on
//! the receiving side. `SharedStr` holds exactly those two shapes: a `&'static str`, or a
//! slice of shared [`Bytes`] checked to be UTF-8 once, when it is made. Cloning it copies a
//! pointer or bumps a reference count; decoding it from a shared frame copies nothing. Like
//! any `Bytes` slice, a decoded one keeps the buffer it came from alive: code that keeps a name
//! long after the message should keep `SharedStr::copy_from(name)` instead.

use std::borrow::Borrow;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::ops::Deref;

use bytes::Bytes;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// An immutable UTF-8 string: a static string or a slice of shared bytes (see the
/// [module documentation](self)). Compares, hashes and prints as its text.
#[derive(Clone)]
pub struct SharedStr(Repr);

#[derive(Clone)]
enum Repr {
    Static(&'static str),
    /// Valid UTF-8, checked at construction.
    Shared(Bytes),
}

impl SharedStr {
    /// The empty string.
    pub const EMPTY: Self = Self(Repr::Static(""));

    /// A static string (no allocation, ever).
    pub const fn from_static(s: &'static str) -> Self {
        Self(Repr::Static(s))
    }

    /// Shared bytes that hold UTF-8 text, without copying them.
    ///
    /// # Errors
    /// The bytes back when they are not UTF-8.
    pub fn from_utf8(bytes: Bytes) -> Result<Self, Bytes> {
        if std::str::from_utf8(&bytes).is_ok() {
            Ok(Self(Repr::Shared(bytes)))
        } else {
            Err(bytes)
        }
    }

    /// A copy of `s`.
    pub fn copy_from(s: &str) -> Self {
        Self(Repr::Shared(Bytes::copy_from_slice(s.as_bytes())))
    }

    /// The text's bytes (no UTF-8 check: cheaper than [`SharedStr::as_str`] for lookups and
    /// comparisons).
    pub fn as_bytes(&self) -> &[u8] {
        match &self.0 {
            Repr::Static(s) => s.as_bytes(),
            Repr::Shared(b) => b,
        }
    }

    /// The text.
    pub fn as_str(&self) -> &str {
        match &self.0 {
            Repr::Static(s) => s,
            // Checked at construction; the fallback is unreachable and keeps this panic-free.
            Repr::Shared(b) => std::str::from_utf8(b).unwrap_or_default(),
        }
    }
}

impl Default for SharedStr {
    fn default() -> Self {
        Self::EMPTY
    }
}

impl Deref for SharedStr {
    type Target = str;

    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl AsRef<str> for SharedStr {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl Borrow<str> for SharedStr {
    fn borrow(&self) -> &str {
        self.as_str()
    }
}

impl From<&'static str> for SharedStr {
    fn from(s: &'static str) -> Self {
        Self::from_static(s)
    }
}

impl From<String> for SharedStr {
    /// Takes the string's buffer over (no copy).
    fn from(s: String) -> Self {
        Self(Repr::Shared(Bytes::from(s)))
    }
}

impl From<&String> for SharedStr {
    fn from(s: &String) -> Self {
        Self::copy_from(s)
    }
}

impl From<SharedStr> for String {
    fn from(s: SharedStr) -> Self {
        s.as_str().to_owned()
    }
}

impl PartialEq for SharedStr {
    fn eq(&self, other: &Self) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl Eq for SharedStr {}

impl PartialEq<str> for SharedStr {
    fn eq(&self, other: &str) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl PartialEq<&str> for SharedStr {
    fn eq(&self, other: &&str) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl PartialEq<String> for SharedStr {
    fn eq(&self, other: &String) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl PartialEq<SharedStr> for str {
    fn eq(&self, other: &SharedStr) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl PartialEq<SharedStr> for &str {
    fn eq(&self, other: &SharedStr) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl PartialOrd for SharedStr {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for SharedStr {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        // UTF-8 orders as its bytes do.
        self.as_bytes().cmp(other.as_bytes())
    }
}

impl Hash for SharedStr {
    fn hash<H: Hasher>(&self, state: &mut H) {
        // As `str` hashes, so that `Borrow<str>` lookups agree.
        self.as_str().hash(state);
    }
}

impl fmt::Debug for SharedStr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl fmt::Display for SharedStr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for SharedStr {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for SharedStr {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        String::deserialize(deserializer).map(Self::from)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // In tests a panic is the failure report.
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn every_shape_is_its_text() {
        let frame = Bytes::from_static(b"xxChat.Sayyy");
        let shared = SharedStr::from_utf8(frame.slice(2..10)).unwrap();
        let all = [
            SharedStr::from_static("Chat.Say"),
            shared,
            SharedStr::from(String::from("Chat.Say")),
            SharedStr::copy_from("Chat.Say"),
        ];
        for s in &all {
            assert_eq!(s.as_str(), "Chat.Say");
            assert_eq!(s, &all[0]);
            assert_eq!(*s, "Chat.Say");
            assert_eq!(format!("{s}"), "Chat.Say");
            assert_eq!(format!("{s:?}"), "\"Chat.Say\"");
            assert_eq!(s.len(), 8);
            assert_eq!(s.as_bytes(), b"Chat.Say");
        }
        let mut map = HashMap::new();
        map.insert(all[1].clone(), 1);
        assert_eq!(map.get("Chat.Say"), Some(&1));
        assert_eq!(SharedStr::default(), "");
    }

    #[test]
    fn bytes_that_are_not_utf8_are_refused() {
        let bad = Bytes::from_static(&[0x66, 0xff, 0x6f]);
        assert_eq!(SharedStr::from_utf8(bad.clone()).unwrap_err(), bad);
    }

    #[test]
    fn serde_round_trips_as_a_string() {
        let s = SharedStr::from_static("application/json");
        let json = serde_json::to_string(&s).unwrap();
        assert_eq!(json, "\"application/json\"");
        assert_eq!(serde_json::from_str::<SharedStr>(&json).unwrap(), s);
    }
}
