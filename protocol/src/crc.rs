//! CRC-32C (wire §9 "CRC-32C 규약과 capability").
//!
//! Every checksum of the relocation transfer profile (`payloadChecksumCrc32c`,
//! `boundaryChecksumCrc32c`) and of the remaining Relocation Store paths (chunk and manifest
//! checksums) uses the same parameters: Castagnoli polynomial `0x1EDC6F41`, initial value
//! `0xFFFFFFFF`, reflected input and output, final XOR `0xFFFFFFFF`, so that
//! `check("123456789") == 0xE3069283`. The `crc32c` crate implements exactly that
//! (with hardware acceleration where the CPU has it).

/// CRC-32C of `bytes` in one call.
pub fn crc32c(bytes: &[u8]) -> u32 {
    ::crc32c::crc32c(bytes)
}

/// An incremental CRC-32C: feeding the bytes in any number of pieces gives the same value as
/// [`crc32c()`] over their concatenation. Used when a payload is checksummed chunk by chunk.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Crc32c {
    /// The finished CRC of the bytes seen so far (the crate's append form continues from it).
    crc: u32,
}

impl Crc32c {
    /// A hasher that has seen no bytes (its value is `0`, the CRC-32C of the empty input).
    pub const fn new() -> Self {
        Self { crc: 0 }
    }

    /// Feed more bytes.
    pub fn update(&mut self, bytes: &[u8]) {
        self.crc = ::crc32c::crc32c_append(self.crc, bytes);
    }

    /// The CRC-32C of every byte fed so far. The hasher can keep being updated afterwards.
    pub const fn finish(&self) -> u32 {
        self.crc
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // In tests a panic is the failure report.
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn check_value_matches_the_spec() {
        assert_eq!(crc32c(b"123456789"), 0xE306_9283);
    }

    #[test]
    fn empty_input_is_zero() {
        assert_eq!(crc32c(b""), 0);
        assert_eq!(Crc32c::new().finish(), 0);
    }

    #[test]
    fn incremental_check_value() {
        let mut h = Crc32c::new();
        h.update(b"1234");
        h.update(b"");
        h.update(b"56789");
        assert_eq!(h.finish(), 0xE306_9283);
    }

    proptest! {
        #[test]
        fn incremental_equals_one_shot_for_any_split(
            bytes in proptest::collection::vec(any::<u8>(), 0..2048),
            cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..8),
        ) {
            let mut points: Vec<usize> = cuts.iter().map(|c| c.index(bytes.len() + 1)).collect();
            points.sort_unstable();
            let mut h = Crc32c::new();
            let mut start = 0;
            for p in points {
                h.update(&bytes[start..p]);
                start = p;
            }
            h.update(&bytes[start..]);
            prop_assert_eq!(h.finish(), crc32c(&bytes));
        }
    }
}
