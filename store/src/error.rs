//! Store errors: semantic results (a fence did not match, a record exists…) are distinct from
//! [`StoreError::StoreFailure`] (the store could not be asked or did not answer).

use thiserror::Error;

use crate::types::AuthoritySnapshot;

/// Result alias for store operations.
pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// Why a fenced operation was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StaleReason {
    /// The record's StoreVersion differs from the fence.
    StoreVersion,
    /// ObjectGeneration differs.
    ObjectGeneration,
    /// AuthorityOwnerGeneration differs.
    OwnerGeneration,
    /// The owner token (id or lease generation) differs.
    Owner,
    /// The reservation fence differs or the reservation is gone.
    Reservation,
    /// The record is not in a state this operation accepts.
    State,
    /// A lease named by the operation is not live (released, replaced or expired by store time).
    LeaseNotLive,
    /// The target descriptor is missing or has another lifecycle generation.
    Descriptor,
}

/// Errors of Location Store and Relocation Store operations.
///
/// Not `#[non_exhaustive]`: this is a workspace crate, and its callers match it exhaustively so
/// that a new variant is a compile error wherever it is not handled.
#[derive(Debug, Clone, Error)]
pub enum StoreError {
    /// A fence did not match the current record; nothing changed.
    #[error("stale fence ({reason:?}): {detail}")]
    Stale {
        /// Which part of the fence failed.
        reason: StaleReason,
        /// Key or name involved.
        detail: String,
    },
    /// The operation needs a record that does not exist.
    #[error("missing: {0}")]
    Missing(String),
    /// `reserve` found an existing record of the same kind and stable type.
    #[error("already exists: {}", .0.key.as_str())]
    AlreadyExists(Box<AuthoritySnapshot>),
    /// The Spot ID is taken by another object kind or stable type.
    #[error("spot id conflict: {0}")]
    SpotIdConflict(String),
    /// The same reservation ID was used with a different request, or a descriptor revision was
    /// reused with different bytes or regressed.
    #[error("conflict: {0}")]
    Conflict(String),
    /// The routing ID is claimed by another live owner.
    #[error("routing id conflict: {0}")]
    RoutingIdConflict(String),
    /// The target node's capacity limit is reached.
    #[error("capacity exhausted on {0}")]
    CapacityExhausted(String),
    /// A store counter reached `i64::MAX`; counters never wrap.
    #[error("generation counter {0} exhausted")]
    GenerationExhausted(String),
    /// The arguments are invalid (empty IDs, too many aggregate members, duplicate keys…).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// The store could not be reached or failed. When `ambiguous` is true the request may have
    /// been applied (e.g. a timeout after sending): re-read before retrying.
    #[error("store failure (ambiguous: {ambiguous}): {message}")]
    StoreFailure {
        /// Human-readable cause.
        message: String,
        /// The request may have taken effect.
        ambiguous: bool,
    },
}

impl StoreError {
    /// A stale-fence error.
    pub fn stale(reason: StaleReason, detail: impl Into<String>) -> Self {
        Self::Stale {
            reason,
            detail: detail.into(),
        }
    }

    /// Whether this is a store failure (as opposed to a semantic answer).
    pub fn is_store_failure(&self) -> bool {
        matches!(self, Self::StoreFailure { .. })
    }

    /// Stable kind name for logs, metrics and tests.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Stale { .. } => "Stale",
            Self::Missing(_) => "Missing",
            Self::AlreadyExists(_) => "AlreadyExists",
            Self::SpotIdConflict(_) => "SpotIdConflict",
            Self::Conflict(_) => "Conflict",
            Self::RoutingIdConflict(_) => "RoutingIdConflict",
            Self::CapacityExhausted(_) => "CapacityExhausted",
            Self::GenerationExhausted(_) => "GenerationExhausted",
            Self::InvalidArgument(_) => "InvalidArgument",
            Self::StoreFailure { .. } => "StoreFailure",
        }
    }
}
