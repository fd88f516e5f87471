//! Argument checks that need no store state, shared by every provider so both refuse the same
//! inputs with the same `InvalidArgument` before touching the store.

use std::time::Duration;

use crate::error::{Result, StoreError};
use crate::types::{AggregateOp, AuthorityKey, AuthorityState, MAX_AGGREGATE_OPS};

/// A bounded aggregate commit has 1..=[`MAX_AGGREGATE_OPS`] members on distinct keys.
pub(crate) fn aggregate(ops: &[AggregateOp]) -> Result<()> {
    if ops.is_empty() || ops.len() > MAX_AGGREGATE_OPS {
        return Err(StoreError::InvalidArgument(format!(
            "aggregate commit needs 1..={MAX_AGGREGATE_OPS} members, got {}",
            ops.len()
        )));
    }
    let mut keys: Vec<&AuthorityKey> = ops.iter().map(AggregateOp::key).collect();
    keys.sort();
    if keys.windows(2).any(|w| w[0] == w[1]) {
        return Err(StoreError::InvalidArgument(
            "aggregate members must name distinct keys".into(),
        ));
    }
    Ok(())
}

/// Leases and retentions must be positive.
pub(crate) fn ttl(ttl: Duration) -> Result<()> {
    if ttl.is_zero() {
        return Err(StoreError::InvalidArgument("ttl must be positive".into()));
    }
    Ok(())
}

/// The lifecycle transitions `set_state` may make: Ready → Closing, Ready → Relocating,
/// Relocating → Ready.
pub(crate) fn transition(from: AuthorityState, to: AuthorityState) -> Result<()> {
    let allowed = matches!(
        (from, to),
        (AuthorityState::Ready, AuthorityState::Closing)
            | (AuthorityState::Ready, AuthorityState::Relocating)
            | (AuthorityState::Relocating, AuthorityState::Ready)
    );
    if allowed {
        Ok(())
    } else {
        Err(StoreError::InvalidArgument(format!(
            "transition {from:?} -> {to:?} is not allowed"
        )))
    }
}

/// A named thing (owner id, relocation reference) must not be empty.
pub(crate) fn non_empty(value: &str, what: &str) -> Result<()> {
    if value.is_empty() {
        return Err(StoreError::InvalidArgument(format!("empty {what}")));
    }
    Ok(())
}

/// Descriptor revisions and lifecycle generations start at 1.
pub(crate) fn descriptor(lifecycle_generation: u64, revision: u64) -> Result<()> {
    if revision == 0 || lifecycle_generation == 0 {
        return Err(StoreError::InvalidArgument(
            "revision and lifecycle generation must be non-zero".into(),
        ));
    }
    Ok(())
}

/// A reservation needs a reservation ID and a stable type.
pub(crate) fn reservation(reservation_id: &str, stable_type: &str) -> Result<()> {
    if reservation_id.is_empty() || stable_type.is_empty() {
        return Err(StoreError::InvalidArgument(
            "empty reservation id or stable type".into(),
        ));
    }
    Ok(())
}
