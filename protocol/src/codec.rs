//! Primitive readers and writers used by the generated codec (and by the hand-written framing
//! modules). All integers of two or more bytes are big-endian (wire §2).
//!
//! [`Reader`] never panics and never allocates before it has checked that the bytes a length or
//! count announces are actually present.

use bytes::Bytes;

use crate::error::{ProtocolError, Result};
use crate::shared_str::SharedStr;

/// Width of a length or count prefix declared by the schema (`lengthType` / `countType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LenType {
    /// One byte.
    U8,
    /// Two bytes, big-endian.
    U16,
    /// Four bytes, big-endian.
    U32,
}

impl LenType {
    /// Encoded size of the prefix in bytes.
    pub const fn size(self) -> usize {
        match self {
            Self::U8 => 1,
            Self::U16 => 2,
            Self::U32 => 4,
        }
    }

    /// Largest value the prefix can carry.
    pub const fn max_value(self) -> u64 {
        match self {
            Self::U8 => u8::MAX as u64,
            Self::U16 => u16::MAX as u64,
            Self::U32 => u32::MAX as u64,
        }
    }
}

/// A bounds-checked cursor over one frame (or one length-delimited block of a frame).
///
/// A reader made with [`Reader::shared`] knows the [`Bytes`] that owns its buffer, and
/// [`Reader::bytes`] then returns zero-copy slices of it (a 64 KiB relocation chunk is not
/// copied); a reader made with [`Reader::new`] copies.
#[derive(Debug, Clone)]
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    owner: Option<&'a Bytes>,
}

impl<'a> Reader<'a> {
    /// A reader over `buf`, positioned at its start. Byte fields are copied out.
    pub fn new(buf: &'a [u8]) -> Self {
        Self {
            buf,
            pos: 0,
            owner: None,
        }
    }

    /// A reader over a shared buffer: byte fields become zero-copy slices of `owner`.
    pub fn shared(owner: &'a Bytes) -> Self {
        Self {
            buf: owner.as_ref(),
            pos: 0,
            owner: Some(owner),
        }
    }

    /// A reader over `block`, a sub-slice of this reader's buffer, that keeps the owner.
    pub fn sub(&self, block: &'a [u8]) -> Reader<'a> {
        Reader {
            buf: block,
            pos: 0,
            owner: self.owner,
        }
    }

    /// Bytes not yet consumed.
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// The unconsumed bytes, without consuming them.
    pub fn rest(&self) -> &'a [u8] {
        &self.buf[self.pos..]
    }

    /// Bytes consumed so far.
    pub fn position(&self) -> usize {
        self.pos
    }

    /// Next byte without consuming it.
    pub fn peek_u8(&self) -> Option<u8> {
        self.buf.get(self.pos).copied()
    }

    /// Consume exactly `n` bytes.
    ///
    /// # Errors
    /// [`ProtocolError::Incomplete`] when fewer than `n` bytes remain.
    pub fn take(&mut self, n: usize, field: &'static str) -> Result<&'a [u8]> {
        let remaining = self.remaining();
        if n > remaining {
            return Err(ProtocolError::Incomplete {
                field,
                needed: n as u64,
                remaining: remaining as u64,
            });
        }
        let out = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(out)
    }

    /// Consume everything that is left.
    pub fn take_rest(&mut self) -> &'a [u8] {
        let out = &self.buf[self.pos..];
        self.pos = self.buf.len();
        out
    }

    fn array<const N: usize>(&mut self, field: &'static str) -> Result<[u8; N]> {
        let bytes = self.take(N, field)?;
        let mut out = [0u8; N];
        out.copy_from_slice(bytes);
        Ok(out)
    }

    /// Read a `u8`.
    pub fn u8(&mut self, field: &'static str) -> Result<u8> {
        Ok(self.array::<1>(field)?[0])
    }

    /// Read a big-endian `u16`.
    pub fn u16(&mut self, field: &'static str) -> Result<u16> {
        Ok(u16::from_be_bytes(self.array(field)?))
    }

    /// Read a big-endian `u32`.
    pub fn u32(&mut self, field: &'static str) -> Result<u32> {
        Ok(u32::from_be_bytes(self.array(field)?))
    }

    /// Read a big-endian `u64`.
    pub fn u64(&mut self, field: &'static str) -> Result<u64> {
        Ok(u64::from_be_bytes(self.array(field)?))
    }

    /// Read a fixed-size byte array.
    pub fn fixed<const N: usize>(&mut self, field: &'static str) -> Result<[u8; N]> {
        self.array(field)
    }

    /// Read a length or count prefix of the given width.
    pub fn len_prefix(&mut self, ty: LenType, field: &'static str) -> Result<u64> {
        Ok(match ty {
            LenType::U8 => u64::from(self.u8(field)?),
            LenType::U16 => u64::from(self.u16(field)?),
            LenType::U32 => u64::from(self.u32(field)?),
        })
    }

    /// Read a bool encoded as one byte, `0` or `1`.
    ///
    /// # Errors
    /// [`ProtocolError::UnknownEnumValue`] for any other byte.
    pub fn bool(&mut self, field: &'static str) -> Result<bool> {
        match self.u8(field)? {
            0 => Ok(false),
            1 => Ok(true),
            other => Err(ProtocolError::UnknownEnumValue {
                field,
                value: u64::from(other),
            }),
        }
    }

    /// Read a length prefix, check it against `min..=max` and the remaining bytes, and return the
    /// bytes it covers — all before any allocation.
    pub fn length_delimited(
        &mut self,
        ty: LenType,
        min: u64,
        max: u64,
        field: &'static str,
    ) -> Result<&'a [u8]> {
        let len = self.len_prefix(ty, field)?;
        check_bounds(field, len, min, max)?;
        let len = usize::try_from(len).map_err(|_| ProtocolError::Incomplete {
            field,
            needed: len,
            remaining: self.remaining() as u64,
        })?;
        self.take(len, field)
    }

    /// Read a length-prefixed UTF-8 string with byte-length bounds.
    pub fn string(
        &mut self,
        ty: LenType,
        min: u64,
        max: u64,
        field: &'static str,
    ) -> Result<String> {
        let bytes = self.length_delimited(ty, min, max, field)?;
        let s = std::str::from_utf8(bytes).map_err(|_| ProtocolError::InvalidUtf8 { field })?;
        Ok(s.to_owned())
    }

    /// Read a length-prefixed UTF-8 string with byte-length bounds as a [`SharedStr`]: a
    /// zero-copy slice of the owner when the reader is [`Reader::shared`], else a copy.
    pub fn shared_str(
        &mut self,
        ty: LenType,
        min: u64,
        max: u64,
        field: &'static str,
    ) -> Result<SharedStr> {
        let bytes = self.length_delimited(ty, min, max, field)?;
        // Checked on the shared slice itself, once.
        SharedStr::from_utf8(self.share(bytes)).map_err(|_| ProtocolError::InvalidUtf8 { field })
    }

    /// Read a length-prefixed UTF-8 string with byte-length bounds through this thread's table
    /// of recent texts ([`SharedStr::interned`]): for fields with few distinct values (node
    /// identities), no allocation once a text was seen, and never a slice of the frame.
    pub fn interned_str(
        &mut self,
        ty: LenType,
        min: u64,
        max: u64,
        field: &'static str,
    ) -> Result<SharedStr> {
        let bytes = self.length_delimited(ty, min, max, field)?;
        SharedStr::interned(bytes).map_err(|()| ProtocolError::InvalidUtf8 { field })
    }

    /// Read a length-prefixed printable-ASCII string (`0x21..=0x7E`).
    pub fn ascii(
        &mut self,
        ty: LenType,
        min: u64,
        max: u64,
        field: &'static str,
    ) -> Result<String> {
        let bytes = self.length_delimited(ty, min, max, field)?;
        check_ascii(field, bytes)?;
        // Printable ASCII is valid UTF-8: borrowed as it is, then one exact-size copy (a
        // `char` at a time cost a push and a growth check per byte, on every request decode).
        Ok(String::from_utf8_lossy(bytes).into_owned())
    }

    /// Read length-prefixed opaque bytes (zero-copy when the reader is [`Reader::shared`]).
    pub fn bytes(&mut self, ty: LenType, min: u64, max: u64, field: &'static str) -> Result<Bytes> {
        let slice = self.length_delimited(ty, min, max, field)?;
        Ok(self.share(slice))
    }

    /// Turn a sub-slice of this reader's buffer into [`Bytes`]: a zero-copy slice of the owner
    /// when there is one, else a copy.
    pub fn share(&self, slice: &'a [u8]) -> Bytes {
        match self.owner {
            Some(owner) if !slice.is_empty() => owner.slice_ref(slice),
            _ => Bytes::copy_from_slice(slice),
        }
    }

    /// Read a vector count, check it against `min..=max` and check that `count` items of at least
    /// `min_item_bytes` each fit in the remaining bytes. Returns the count, safe to use as a
    /// `Vec::with_capacity` argument.
    pub fn count(
        &mut self,
        ty: LenType,
        min: u64,
        max: u64,
        min_item_bytes: u64,
        field: &'static str,
    ) -> Result<usize> {
        let count = self.len_prefix(ty, field)?;
        check_bounds(field, count, min, max)?;
        let needed = count.saturating_mul(min_item_bytes.max(1));
        let remaining = self.remaining() as u64;
        if needed > remaining {
            return Err(ProtocolError::CountExceedsRemaining {
                field,
                count,
                needed,
                remaining,
            });
        }
        // `count <= remaining <= usize::MAX` here.
        Ok(count as usize)
    }

    /// Fail with [`ProtocolError::TrailingBytes`] unless every byte was consumed.
    pub fn finish(&self, context: &'static str) -> Result<()> {
        match self.remaining() {
            0 => Ok(()),
            n => Err(ProtocolError::TrailingBytes {
                context,
                count: n as u64,
            }),
        }
    }
}

/// Check `min <= value <= max`.
pub fn check_bounds(field: &'static str, value: u64, min: u64, max: u64) -> Result<()> {
    if value < min || value > max {
        return Err(ProtocolError::OutOfBounds {
            field,
            value,
            min,
            max,
        });
    }
    Ok(())
}

/// Check that a non-zero integer is non-zero and at most `max`.
pub fn check_nonzero(field: &'static str, value: u64, max: u64) -> Result<()> {
    if value == 0 {
        return Err(ProtocolError::ZeroValue { field });
    }
    check_bounds(field, value, 1, max)
}

/// Check that every byte is printable ASCII (`0x21..=0x7E`).
pub fn check_ascii(field: &'static str, bytes: &[u8]) -> Result<()> {
    match bytes.iter().find(|b| !(0x21..=0x7E).contains(*b)) {
        Some(&byte) => Err(ProtocolError::InvalidAscii { field, byte }),
        None => Ok(()),
    }
}

/// An append-only big-endian writer.
#[derive(Debug, Default, Clone)]
pub struct Writer {
    buf: Vec<u8>,
}

impl Writer {
    /// An empty writer.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty writer with reserved capacity.
    pub fn with_capacity(n: usize) -> Self {
        Self {
            buf: Vec::with_capacity(n),
        }
    }

    /// A writer that appends to an existing buffer (for buffer reuse).
    pub fn from_vec(buf: Vec<u8>) -> Self {
        Self { buf }
    }

    /// The bytes written.
    pub fn into_vec(self) -> Vec<u8> {
        self.buf
    }

    /// Bytes written so far.
    pub fn len(&self) -> usize {
        self.buf.len()
    }

    /// Whether nothing was written.
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// The bytes written so far.
    pub fn as_slice(&self) -> &[u8] {
        &self.buf
    }

    /// Append raw bytes.
    pub fn put_slice(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// Append a `u8`.
    pub fn u8(&mut self, v: u8) {
        self.buf.push(v);
    }

    /// Append a big-endian `u16`.
    pub fn u16(&mut self, v: u16) {
        self.buf.extend_from_slice(&v.to_be_bytes());
    }

    /// Append a big-endian `u32`.
    pub fn u32(&mut self, v: u32) {
        self.buf.extend_from_slice(&v.to_be_bytes());
    }

    /// Append a big-endian `u64`.
    pub fn u64(&mut self, v: u64) {
        self.buf.extend_from_slice(&v.to_be_bytes());
    }

    /// Append a bool as `0`/`1`.
    pub fn bool(&mut self, v: bool) {
        self.buf.push(u8::from(v));
    }

    /// Append a length or count prefix. The caller has checked `v` against the declared bounds,
    /// which never exceed the prefix's range.
    pub fn len_prefix(&mut self, ty: LenType, v: u64, field: &'static str) -> Result<()> {
        check_bounds(field, v, 0, ty.max_value())?;
        match ty {
            LenType::U8 => self.u8(v as u8),
            LenType::U16 => self.u16(v as u16),
            LenType::U32 => self.u32(v as u32),
        }
        Ok(())
    }

    /// Append length-prefixed bytes after checking the length bounds.
    pub fn length_delimited(
        &mut self,
        ty: LenType,
        min: u64,
        max: u64,
        bytes: &[u8],
        field: &'static str,
    ) -> Result<()> {
        let len = bytes.len() as u64;
        check_bounds(field, len, min, max)?;
        self.len_prefix(ty, len, field)?;
        self.put_slice(bytes);
        Ok(())
    }

    /// Append a length-prefixed ASCII string after checking it.
    pub fn ascii(
        &mut self,
        ty: LenType,
        min: u64,
        max: u64,
        s: &str,
        field: &'static str,
    ) -> Result<()> {
        check_ascii(field, s.as_bytes())?;
        self.length_delimited(ty, min, max, s.as_bytes(), field)
    }

    /// Append a vector count after checking its bounds.
    pub fn count(
        &mut self,
        ty: LenType,
        min: u64,
        max: u64,
        n: usize,
        field: &'static str,
    ) -> Result<()> {
        check_bounds(field, n as u64, min, max)?;
        self.len_prefix(ty, n as u64, field)
    }

    /// Reserve room for a length prefix; returns the position to patch with
    /// [`Writer::patch_len`].
    pub fn begin_len(&mut self, ty: LenType) -> usize {
        let at = self.buf.len();
        self.buf.extend(std::iter::repeat_n(0u8, ty.size()));
        at
    }

    /// Patch a prefix reserved by [`Writer::begin_len`] with the number of bytes written since,
    /// checking it against `min..=max`.
    pub fn patch_len(
        &mut self,
        at: usize,
        ty: LenType,
        min: u64,
        max: u64,
        field: &'static str,
    ) -> Result<()> {
        let len = (self.buf.len() - at - ty.size()) as u64;
        check_bounds(field, len, min, max.min(ty.max_value()))?;
        match ty {
            LenType::U8 => self.buf[at] = len as u8,
            LenType::U16 => self.buf[at..at + 2].copy_from_slice(&(len as u16).to_be_bytes()),
            LenType::U32 => self.buf[at..at + 4].copy_from_slice(&(len as u32).to_be_bytes()),
        }
        Ok(())
    }
}

/// Serde adapters that render byte fields as lowercase hex strings in JSON
/// (golden fixtures and the `zlink-wire` inspector).
pub mod hex {
    use serde::{Deserialize, Deserializer, Serializer, de::Error as _};

    /// Encode bytes as lowercase hex.
    pub fn encode(bytes: &[u8]) -> String {
        const DIGITS: &[u8; 16] = b"0123456789abcdef";
        let mut s = String::with_capacity(bytes.len() * 2);
        for &b in bytes {
            s.push(char::from(DIGITS[usize::from(b >> 4)]));
            s.push(char::from(DIGITS[usize::from(b & 0x0f)]));
        }
        s
    }

    /// Decode hex (either case; ASCII whitespace ignored).
    ///
    /// # Errors
    /// A message naming the problem for odd length or a non-hex character.
    pub fn decode(s: &str) -> Result<Vec<u8>, String> {
        let digits: Vec<u8> = s.bytes().filter(|b| !b.is_ascii_whitespace()).collect();
        if !digits.len().is_multiple_of(2) {
            return Err(format!("odd number of hex digits ({})", digits.len()));
        }
        let nibble = |c: u8| -> Result<u8, String> {
            match c {
                b'0'..=b'9' => Ok(c - b'0'),
                b'a'..=b'f' => Ok(c - b'a' + 10),
                b'A'..=b'F' => Ok(c - b'A' + 10),
                _ => Err(format!("invalid hex character {:?}", char::from(c))),
            }
        };
        digits
            .chunks_exact(2)
            .map(|pair| Ok(nibble(pair[0])? << 4 | nibble(pair[1])?))
            .collect()
    }

    /// `#[serde(with = "crate::codec::hex")]` for `Vec<u8>`.
    pub fn serialize<S: Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&encode(bytes))
    }

    /// See [`serialize`]; produces `Vec<u8>` or `Bytes`.
    pub fn deserialize<'de, D: Deserializer<'de>, T: From<Vec<u8>>>(d: D) -> Result<T, D::Error> {
        let s = String::deserialize(d)?;
        decode(&s).map(T::from).map_err(D::Error::custom)
    }

    /// `#[serde(with = "crate::codec::hex::array")]` for `[u8; N]`.
    pub mod array {
        use serde::{Deserialize, Deserializer, Serializer, de::Error as _};

        /// Serialize a fixed array as hex.
        pub fn serialize<S: Serializer, const N: usize>(
            bytes: &[u8; N],
            s: S,
        ) -> Result<S::Ok, S::Error> {
            s.serialize_str(&super::encode(bytes))
        }

        /// Deserialize a fixed array from hex of exactly `N` bytes.
        pub fn deserialize<'de, D: Deserializer<'de>, const N: usize>(
            d: D,
        ) -> Result<[u8; N], D::Error> {
            let s = String::deserialize(d)?;
            let v = super::decode(&s).map_err(D::Error::custom)?;
            <[u8; N]>::try_from(v.as_slice())
                .map_err(|_| D::Error::custom(format!("expected {N} bytes, got {}", v.len())))
        }
    }

    /// `#[serde(with = "crate::codec::hex::option")]` for `Option<Vec<u8>>` / `Option<Bytes>`.
    pub mod option {
        use serde::{Deserialize, Deserializer, Serializer, de::Error as _};

        /// Serialize as hex or null.
        pub fn serialize<S: Serializer, T: AsRef<[u8]>>(
            bytes: &Option<T>,
            s: S,
        ) -> Result<S::Ok, S::Error> {
            match bytes {
                Some(b) => s.serialize_some(&super::encode(b.as_ref())),
                None => s.serialize_none(),
            }
        }

        /// Deserialize from hex or null.
        pub fn deserialize<'de, D: Deserializer<'de>, T: From<Vec<u8>>>(
            d: D,
        ) -> Result<Option<T>, D::Error> {
            match Option::<String>::deserialize(d)? {
                Some(s) => super::decode(&s)
                    .map(|v| Some(T::from(v)))
                    .map_err(D::Error::custom),
                None => Ok(None),
            }
        }
    }

    /// `#[serde(with = "crate::codec::hex::vec_of")]` for `Vec<Vec<u8>>` / `Vec<Bytes>`.
    pub mod vec_of {
        use serde::{Deserialize, Deserializer, Serializer, de::Error as _, ser::SerializeSeq};

        /// Serialize each element as hex.
        pub fn serialize<S: Serializer, T: AsRef<[u8]>>(
            items: &[T],
            s: S,
        ) -> Result<S::Ok, S::Error> {
            let mut seq = s.serialize_seq(Some(items.len()))?;
            for item in items {
                seq.serialize_element(&super::encode(item.as_ref()))?;
            }
            seq.end()
        }

        /// Deserialize a list of hex strings.
        pub fn deserialize<'de, D: Deserializer<'de>, T: From<Vec<u8>>>(
            d: D,
        ) -> Result<Vec<T>, D::Error> {
            let v = Vec::<String>::deserialize(d)?;
            v.iter()
                .map(|s| super::decode(s).map(T::from).map_err(D::Error::custom))
                .collect()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn count_larger_than_remaining_is_rejected_before_allocation() {
        let mut r = Reader::new(&[0xff, 0xff, 0xff, 0xff, 1, 2]);
        let err = r.count(LenType::U32, 0, u64::MAX, 1, "v").unwrap_err();
        assert_eq!(err.kind(), "CountExceedsRemaining");
    }

    #[test]
    fn length_beyond_remaining_is_incomplete() {
        let mut r = Reader::new(&[5, b'a', b'b']);
        let err = r.string(LenType::U8, 0, 255, "s").unwrap_err();
        assert_eq!(err.kind(), "Incomplete");
    }

    #[test]
    fn hex_round_trips() {
        let bytes = [0u8, 1, 0xab, 0xff];
        assert_eq!(hex::decode(&hex::encode(&bytes)).unwrap(), bytes);
        assert!(hex::decode("abc").is_err());
        assert!(hex::decode("zz").is_err());
    }

    #[test]
    fn patch_len_checks_bounds() {
        let mut w = Writer::new();
        let at = w.begin_len(LenType::U8);
        w.put_slice(&[1, 2, 3]);
        w.patch_len(at, LenType::U8, 0, 255, "x").unwrap();
        assert_eq!(w.as_slice(), &[3, 1, 2, 3]);
        let at = w.begin_len(LenType::U8);
        w.put_slice(&[9; 4]);
        assert_eq!(
            w.patch_len(at, LenType::U8, 0, 3, "x").unwrap_err().kind(),
            "OutOfBounds"
        );
    }
}
