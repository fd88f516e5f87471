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
