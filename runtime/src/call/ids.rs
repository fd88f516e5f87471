//! Allocators for the identifiers a request carries (wire §11, glossary §3 "Reply correlation").
//!
//! | identifier | allocator | values | after the last value |
//! | --- | --- | --- | --- |
//! | `OperationId` (two u64 words, not both zero) | [`OperationIdAllocator`] | 1..=2^128−1 | `GenerationExhausted` |
//! | `ReplyRouteId` (non-zero u64) | [`ReplyRouteIdAllocator`] | 1..=2^64−1 | `GenerationExhausted` |
//! | correlation ID (1..=64 bytes printable ASCII) | [`CorrelationIdAllocator`] | `<prefix><counter as lowercase hex>` | `GenerationExhausted` |
//!
//! # Guarantees
//!
//! Each allocator is a plain counter starting at 1, so within one allocator a value is never
//! zero, never repeats and never wraps: after the last value every call fails with
//! [`ErrorKind::GenerationExhausted`], which wire §11 makes a terminal runtime error.
//!
//! # Assumptions
//!
//! The spec asks for uniqueness *within the source owner lifecycle*. The runtime creates one set
//! of allocators per owner lifecycle and drops it with the lifecycle; receivers tell lifecycles
//! apart by the source's lifecycle generation, not by these values. The counters are not secret
//! and not meant to be unguessable.

use zlink_protocol::generated::OperationId;

use super::error::{CallError, ErrorKind, Result};

/// Largest correlation ID prefix in bytes: the prefix plus up to 32 hex digits of a `u128`
/// counter stays within the 64-byte correlation ID limit.
pub const MAX_CORRELATION_PREFIX_LEN: usize = 32;

/// Advance a counter held as `Option<u128>` (`None` = exhausted) and return the value issued.
fn take_u128(next: &mut Option<u128>, what: &str) -> Result<u128> {
    match *next {
        Some(value) => {
            *next = value.checked_add(1);
            Ok(value)
        }
        None => Err(CallError::new(
            ErrorKind::GenerationExhausted,
            format!("{what} space exhausted; values never wrap (wire §11)"),
        )),
    }
}

/// Issues the non-zero 128-bit `OperationId` of each request (wire §11).
///
/// The value is a counter from 1: `high` holds its upper 64 bits and `low` its lower 64 bits,
/// so the two words are never both zero.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OperationIdAllocator {
    /// Next value to issue; `None` once `u128::MAX` has been issued.
    next: Option<u128>,
}

impl OperationIdAllocator {
    /// A fresh allocator for one owner lifecycle; its first ID is `{ high: 0, low: 1 }`.
    pub const fn new() -> Self {
        Self { next: Some(1) }
    }

    /// An allocator whose next ID is `first` (0 is raised to 1), to test exhaustion.
    #[cfg(test)]
    pub(crate) const fn starting_at(first: u128) -> Self {
        Self {
            next: Some(if first == 0 { 1 } else { first }),
        }
    }

    /// Issue the next operation ID.
    ///
    /// # Errors
    /// [`ErrorKind::GenerationExhausted`] once all 2^128−1 values have been issued.
    pub fn allocate(&mut self) -> Result<OperationId> {
        let value = take_u128(&mut self.next, "operation ID")?;
        Ok(OperationId {
            high: (value >> 64) as u64,
            low: value as u64,
        })
    }
}

impl Default for OperationIdAllocator {
    fn default() -> Self {
        Self::new()
    }
}

/// Issues the non-zero 64-bit `ReplyRouteId` of each request (wire §11).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplyRouteIdAllocator {
    /// Next value to issue; `None` once `u64::MAX` has been issued.
    next: Option<u64>,
}

impl ReplyRouteIdAllocator {
    /// A fresh allocator for one owner lifecycle; its first ID is 1.
    pub const fn new() -> Self {
        Self { next: Some(1) }
    }

    /// An allocator whose next ID is `first` (0 is raised to 1), to test exhaustion.
    #[cfg(test)]
    pub(crate) const fn starting_at(first: u64) -> Self {
        Self {
            next: Some(if first == 0 { 1 } else { first }),
        }
    }

    /// Issue the next reply route ID.
    ///
    /// # Errors
    /// [`ErrorKind::GenerationExhausted`] once all 2^64−1 values have been issued.
    pub fn allocate(&mut self) -> Result<u64> {
        match self.next {
            Some(value) => {
                self.next = value.checked_add(1);
                Ok(value)
            }
            None => Err(CallError::new(
                ErrorKind::GenerationExhausted,
                "reply route ID space exhausted; values never wrap (wire §11)",
            )),
        }
    }
}

impl Default for ReplyRouteIdAllocator {
    fn default() -> Self {
        Self::new()
    }
}

/// Issues correlation IDs `<prefix><counter as lowercase hex>` (glossary §3).
///
/// The counter starts at 1 and has no leading zeros, so two different counter values give two
/// different strings under the same prefix: the IDs are unique within the allocator and hence
/// among the lifecycle's concurrently pending requests. The prefix only helps a human reading
/// logs (for example, the node or lifecycle it came from); uniqueness does not depend on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CorrelationIdAllocator {
    /// Printable ASCII, at most [`MAX_CORRELATION_PREFIX_LEN`] bytes.
    prefix: String,
    /// Next counter value; `None` once `u128::MAX` has been issued.
    next: Option<u128>,
}

impl CorrelationIdAllocator {
    /// An allocator whose IDs start with `prefix`. The prefix may be empty.
    ///
    /// # Errors
    /// [`ErrorKind::Configuration`] when `prefix` is longer than
    /// [`MAX_CORRELATION_PREFIX_LEN`] bytes or holds a byte outside printable ASCII
    /// `0x21..=0x7E` (the correlation ID alphabet).
    pub fn new(prefix: &str) -> Result<Self> {
        if prefix.len() > MAX_CORRELATION_PREFIX_LEN {
            return Err(CallError::new(
                ErrorKind::Configuration,
                format!(
                    "correlation ID prefix is {} bytes, more than {MAX_CORRELATION_PREFIX_LEN}",
                    prefix.len()
                ),
            ));
        }
        if let Some(byte) = prefix.bytes().find(|b| !(0x21..=0x7E).contains(b)) {
            return Err(CallError::new(
                ErrorKind::Configuration,
                format!("correlation ID prefix contains byte 0x{byte:02x} outside printable ASCII"),
            ));
        }
        Ok(Self {
            prefix: prefix.to_owned(),
            next: Some(1),
        })
    }

    /// This allocator with its next counter value set to `first` (0 is raised to 1), to test
    /// exhaustion and the longest IDs.
    #[cfg(test)]
    pub(crate) fn starting_at(mut self, first: u128) -> Self {
        self.next = Some(if first == 0 { 1 } else { first });
        self
    }

    /// The prefix every ID starts with.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// Issue the next correlation ID: 1..=64 bytes of printable ASCII.
    ///
    /// # Errors
    /// [`ErrorKind::GenerationExhausted`] once all 2^128−1 counter values have been issued.
    pub fn allocate(&mut self) -> Result<String> {
        let value = take_u128(&mut self.next, "correlation ID")?;
        Ok(format!("{}{value:x}", self.prefix))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::collections::HashSet;

    use zlink_protocol::ids::validate_correlation_id;

    use super::*;

    #[test]
    fn operation_ids_start_at_one_and_are_never_zero() {
        let mut ids = OperationIdAllocator::new();
        let first = ids.allocate().unwrap();
        assert_eq!(first, OperationId { high: 0, low: 1 });
        let mut seen = HashSet::new();
        seen.insert((first.high, first.low));
        for _ in 0..10_000 {
            let id = ids.allocate().unwrap();
            assert!(id.high != 0 || id.low != 0);
            assert!(seen.insert((id.high, id.low)), "repeated {id:?}");
        }
    }

    #[test]
    fn operation_id_carries_into_the_high_word() {
        let mut ids = OperationIdAllocator::starting_at(u128::from(u64::MAX));
        assert_eq!(
            ids.allocate().unwrap(),
            OperationId {
                high: 0,
                low: u64::MAX
            }
        );
        assert_eq!(ids.allocate().unwrap(), OperationId { high: 1, low: 0 });
    }

    #[test]
    fn operation_ids_never_wrap_after_the_last_value() {
        let mut ids = OperationIdAllocator::starting_at(u128::MAX);
        assert_eq!(
            ids.allocate().unwrap(),
            OperationId {
                high: u64::MAX,
                low: u64::MAX
            }
        );
        for _ in 0..3 {
            let error = ids.allocate().unwrap_err();
            assert_eq!(error.kind(), ErrorKind::GenerationExhausted);
        }
    }

    #[test]
    fn reply_route_ids_start_at_one_and_never_repeat() {
        let mut ids = ReplyRouteIdAllocator::default();
        let issued: Vec<u64> = (0..1_000).map(|_| ids.allocate().unwrap()).collect();
        assert_eq!(issued.first(), Some(&1));
        assert_eq!(issued.iter().collect::<HashSet<_>>().len(), issued.len());
    }

    #[test]
    fn reply_route_ids_never_wrap_after_the_last_value() {
        let mut ids = ReplyRouteIdAllocator::starting_at(u64::MAX - 1);
        assert_eq!(ids.allocate().unwrap(), u64::MAX - 1);
        assert_eq!(ids.allocate().unwrap(), u64::MAX);
        assert_eq!(
            ids.allocate().unwrap_err().kind(),
            ErrorKind::GenerationExhausted
        );
        assert_eq!(
            ids.allocate().unwrap_err().kind(),
            ErrorKind::GenerationExhausted
        );
    }

    #[test]
    fn correlation_ids_are_valid_and_unique() {
        let mut ids = CorrelationIdAllocator::new("n1.c-").unwrap();
        assert_eq!(ids.allocate().unwrap(), "n1.c-1");
        let mut seen = HashSet::new();
        for _ in 0..10_000 {
            let id = ids.allocate().unwrap();
            validate_correlation_id(&id).unwrap();
            assert!(seen.insert(id));
        }
    }

    #[test]
    fn longest_correlation_id_fits_the_64_byte_limit() {
        let prefix = "~".repeat(MAX_CORRELATION_PREFIX_LEN);
        let mut ids = CorrelationIdAllocator::new(&prefix)
            .unwrap()
            .starting_at(u128::MAX);
        let last = ids.allocate().unwrap();
        assert_eq!(last.len(), 64);
        validate_correlation_id(&last).unwrap();
        assert_eq!(
            ids.allocate().unwrap_err().kind(),
            ErrorKind::GenerationExhausted
        );
    }

    #[test]
    fn empty_prefix_still_gives_valid_ids() {
        let mut ids = CorrelationIdAllocator::new("").unwrap();
        let id = ids.allocate().unwrap();
        assert_eq!(id, "1");
        validate_correlation_id(&id).unwrap();
    }

    #[test]
    fn correlation_prefix_outside_printable_ascii_is_a_configuration_error() {
        for bad in ["has space", "tab\t", "del\u{7f}", "é"] {
            let error = CorrelationIdAllocator::new(bad).unwrap_err();
            assert_eq!(error.kind(), ErrorKind::Configuration, "{bad:?}");
        }
    }

    #[test]
    fn correlation_prefix_over_32_bytes_is_a_configuration_error() {
        let error = CorrelationIdAllocator::new(&"a".repeat(33)).unwrap_err();
        assert_eq!(error.kind(), ErrorKind::Configuration);
        assert!(CorrelationIdAllocator::new(&"a".repeat(32)).is_ok());
    }
}
