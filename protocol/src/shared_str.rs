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
            // SAFETY: a `Shared` is made only from bytes checked to be UTF-8 (`from_utf8`,
            // `interned`) or from a `str`/`String` (`copy_from`, `From<String>`), and `Bytes` is
            // immutable. Not re-checked here: `as_str` runs on every deref, hash and comparison
            // by text, and a check is ~5 instructions a byte.
            #[allow(unsafe_code)]
            Repr::Shared(b) => unsafe { std::str::from_utf8_unchecked(b) },
        }
    }

    /// [`SharedStr::interned`] of a text already known to be UTF-8: for node identities held
    /// as `String` elsewhere, put into a fence.
    pub fn intern(text: &str) -> Self {
        Self::interned(text.as_bytes()).unwrap_or_else(|()| Self::copy_from(text))
    }

    /// The text of `bytes` from this thread's table of recently seen texts (see [`Interner`]),
    /// or a copy that the table then keeps. For values with few distinct texts decoded over and
    /// over — node identities on every record — this costs a hash and a comparison instead of
    /// an allocation, and every copy shares one buffer; unlike [`SharedStr::from_utf8`] of a
    /// slice of a received frame, it never keeps the frame alive.
    ///
    /// # Errors
    /// `Err(())` when the bytes are not UTF-8.
    #[allow(clippy::result_unit_err)]
    pub fn interned(bytes: &[u8]) -> Result<Self, ()> {
        // While the thread's locals are torn down the table is gone: a plain copy then.
        INTERNER
            .try_with(|table| table.borrow_mut().get(bytes))
            .unwrap_or_else(|_| {
                let text = std::str::from_utf8(bytes).map_err(|_| ())?;
                Ok(Self::copy_from(text))
            })
    }
}

/// A bounded table of texts for [`SharedStr::interned`], one per thread (no lock). Holds at
/// most [`Interner::CAP`] texts of at most [`Interner::MAX_LEN`] bytes; when full it starts
/// over, so a stream of ever-new texts costs a copy each, as without it, and never grows the
/// table. Longer texts are copied, not kept.
struct Interner {
    /// Seeded per table: the texts come from peers and clients, who must not be able to choose
    /// colliding ones.
    texts: std::collections::HashMap<Key, (), foldhash::fast::RandomState>,
}

impl Interner {
    const CAP: usize = 1024;
    const MAX_LEN: usize = 255;

    fn get(&mut self, bytes: &[u8]) -> Result<SharedStr, ()> {
        if let Some((Key(s), ())) = self.texts.get_key_value(bytes) {
            return Ok(s.clone());
        }
        let text = std::str::from_utf8(bytes).map_err(|_| ())?;
        let s = SharedStr::copy_from(text);
        if bytes.len() <= Self::MAX_LEN {
            if self.texts.len() >= Self::CAP {
                self.texts.clear();
            }
            self.texts.insert(Key(s.clone()), ());
        }
        Ok(s)
    }
}

thread_local! {
    static INTERNER: std::cell::RefCell<Interner> = std::cell::RefCell::new(Interner {
        texts: std::collections::HashMap::default(),
    });
}

/// A table key: a [`SharedStr`] found by its bytes (hashed and compared as `[u8]`, unlike
/// `SharedStr` itself, which hashes as `str`).
struct Key(SharedStr);

impl PartialEq for Key {
    fn eq(&self, other: &Self) -> bool {
        self.0.as_bytes() == other.0.as_bytes()
    }
}

impl Eq for Key {}

impl Hash for Key {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.0.as_bytes().hash(state);
    }
}

impl Borrow<[u8]> for Key {
    fn borrow(&self) -> &[u8] {
        self.0.as_bytes()
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

impl PartialEq<SharedStr> for String {
    fn eq(&self, other: &SharedStr) -> bool {
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
    fn an_interned_text_is_one_buffer_that_does_not_borrow_the_input() {
        let frame = Bytes::from(b"xxnode-a-1yy".to_vec());
        let first = SharedStr::interned(&frame[2..10]).unwrap();
        let again = SharedStr::interned(b"node-a-1").unwrap();
        assert_eq!(first, "node-a-1");
        assert_eq!(again, "node-a-1");
        // The second lookup found the first text: same buffer, no copy.
        assert_eq!(first.as_bytes().as_ptr(), again.as_bytes().as_ptr());
        // Never a slice of what it was read from (that would keep a whole frame alive).
        let frame_bytes = frame.as_ptr_range();
        assert!(!frame_bytes.contains(&first.as_bytes().as_ptr()));
        assert_eq!(
            SharedStr::intern("node-a-1").as_bytes().as_ptr(),
            first.as_bytes().as_ptr()
        );
        // Another text is another buffer.
        let other = SharedStr::interned(b"node-b-1").unwrap();
        assert_eq!(other, "node-b-1");
        assert_ne!(other.as_bytes().as_ptr(), first.as_bytes().as_ptr());
    }

    #[test]
    fn a_decoded_node_fence_shares_its_rid_with_the_last_one_and_not_with_the_frame() {
        use crate::codec::{Reader, Writer};
        use crate::generated::NodeFence;
        let fence = NodeFence {
            rid: SharedStr::from_static("node-decoded-1"),
            lifecycle_generation: 7,
        };
        let mut w = Writer::new();
        fence.encode_to(&mut w).unwrap();
        let frame = Bytes::from(w.into_vec());
        let a = NodeFence::decode_from(&mut Reader::shared(&frame)).unwrap();
        let b = NodeFence::decode_from(&mut Reader::shared(&frame)).unwrap();
        assert_eq!(a, fence);
        assert_eq!(a.rid.as_bytes().as_ptr(), b.rid.as_bytes().as_ptr());
        assert!(!frame.as_ptr_range().contains(&a.rid.as_bytes().as_ptr()));
    }

    #[test]
    fn interning_refuses_non_utf8_and_stays_bounded() {
        assert!(SharedStr::interned(&[0x66, 0xff, 0x6f]).is_err());
        // Far more distinct texts than the table holds: each still decodes to itself, and the
        // table never holds more than its cap.
        for i in 0..(3 * Interner::CAP) {
            let text = format!("node-{i}");
            assert_eq!(SharedStr::interned(text.as_bytes()).unwrap(), text.as_str());
            INTERNER.with(|t| assert!(t.borrow().texts.len() <= Interner::CAP));
        }
        // Texts longer than the table keeps are copied each time, not kept.
        let long = "n".repeat(Interner::MAX_LEN + 1);
        let a = SharedStr::interned(long.as_bytes()).unwrap();
        let b = SharedStr::interned(long.as_bytes()).unwrap();
        assert_eq!(a, b);
        assert_ne!(a.as_bytes().as_ptr(), b.as_bytes().as_ptr());
    }

    #[test]
    fn serde_round_trips_as_a_string() {
        let s = SharedStr::from_static("application/json");
        let json = serde_json::to_string(&s).unwrap();
        assert_eq!(json, "\"application/json\"");
        assert_eq!(serde_json::from_str::<SharedStr>(&json).unwrap(), s);
    }
}
