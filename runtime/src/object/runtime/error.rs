//! Errors of the object runtime (issue 16 item 3).
//!
//! Inside the runtime a failed store call stays a [`StoreError`] — with its `ambiguous` flag and
//! everything else — as the `#[source]` of an [`ObjectError`], so a protocol step can branch on
//! it ("ambiguous → re-read the record before deciding"). It becomes a [`CallError`] only at the
//! call edge (the public methods of `ObjectRuntime`, a reply to a remote node), by one
//! exhaustive mapping: a new `StoreError` variant does not compile until it is mapped here.

use thiserror::Error;
use zlink_store::StoreError;

use crate::call::error::{CallError, ErrorKind};
use crate::object::registry::RegistryError;

/// An object runtime could not start.
#[derive(Debug, Error)]
pub enum RuntimeError {
    /// A registration was refused.
    #[error(transparent)]
    Registry(#[from] RegistryError),
    /// The MeshNode runs without a Location Store (no owner lease to own objects with).
    #[error("the MeshNode has no owner lease: start it with a Location Store")]
    NoOwnerLease,
    /// Another runtime is attached to the node.
    #[error("{0}")]
    Attach(CallError),
    /// The route-cache settings break a rule of the spec (routing §2.5).
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    /// A registered placeable type is missing from the node's descriptor capabilities, so no
    /// peer would ever place it here (set `MeshNodeConfig::object_capabilities` to
    /// `Registry::capabilities()`).
    #[error("stable type {0:?} is registered but not in the node's object_capabilities")]
    CapabilityMissing(String),
    /// A Logical Multicast subscription cannot be served by this node.
    #[error("{0}")]
    Subscription(String),
    /// The node has an Entry Spot ID but no Entry Spot type is registered.
    #[error("the node has an Entry Spot (entry_spot_prefix) but no Entry Spot type is registered")]
    NoEntrySpotType,
    /// Creating the Entry Spot failed.
    #[error("the Entry Spot could not be created: {0}")]
    EntrySpot(CallError),
}

/// Why an object operation failed inside the runtime (see the module docs).
#[derive(Debug, Error)]
pub enum ObjectError {
    /// The Location or Relocation Store refused or failed `op`.
    #[error("{op}: {source}")]
    Store {
        /// The store operation (`reserve`, `commit_ready`, `read_authority`, …).
        op: &'static str,
        /// The store's answer, kept whole.
        #[source]
        source: StoreError,
    },
    /// A failure already in the caller's terms (validation, fences, deadlines, a remote
    /// terminal result).
    #[error(transparent)]
    Call(#[from] CallError),
}

impl ObjectError {
    /// A mapper for `map_err`: the store's answer to `op`.
    pub fn store(op: &'static str) -> impl FnOnce(StoreError) -> Self {
        move |source| Self::Store { op, source }
    }

    /// A failure in the caller's terms.
    pub fn call(kind: ErrorKind, detail: impl Into<String>) -> Self {
        Self::Call(CallError::new(kind, detail))
    }

    /// The store's answer, when this is one.
    pub fn store_error(&self) -> Option<&StoreError> {
        match self {
            Self::Store { source, .. } => Some(source),
            Self::Call(_) => None,
        }
    }

    /// Whether the store call may have taken effect (a timeout after sending): re-read the
    /// record before retrying or giving up.
    pub fn is_ambiguous(&self) -> bool {
        matches!(
            self.store_error(),
            Some(StoreError::StoreFailure {
                ambiguous: true,
                ..
            })
        )
    }

    /// The caller-facing kind this maps to.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Self::Store { source, .. } => store_kind_of(source),
            Self::Call(c) => c.kind(),
        }
    }
}

/// The caller-facing kind of a store answer: exhaustive, so a new variant is a compile error.
pub(crate) fn store_kind_of(e: &StoreError) -> ErrorKind {
    match e {
        StoreError::AlreadyExists(_) | StoreError::SpotIdConflict(_) => ErrorKind::AlreadyExists,
        StoreError::Stale { .. } | StoreError::Conflict(_) | StoreError::RoutingIdConflict(_) => {
            ErrorKind::Conflict
        }
        StoreError::Missing(_) => ErrorKind::NotFound,
        StoreError::InvalidArgument(_) => ErrorKind::InvalidOperation,
        StoreError::CapacityExhausted(_) => ErrorKind::Rejected,
        StoreError::GenerationExhausted(_) => ErrorKind::GenerationExhausted,
        StoreError::StoreFailure { .. } => ErrorKind::StoreFailure,
    }
}

impl From<ObjectError> for CallError {
    fn from(e: ObjectError) -> Self {
        match e {
            ObjectError::Store { op, source } => {
                CallError::new(store_kind_of(&source), format!("{op}: {source}"))
            }
            ObjectError::Call(c) => c,
        }
    }
}

/// The store's answer to an unnamed operation, in the caller's terms (for call sites not yet
/// carrying an [`ObjectError`]).
pub(crate) fn store_error(e: StoreError) -> CallError {
    CallError::new(store_kind_of(&e), e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ambiguous_store_failure_stays_visible_until_the_call_edge() {
        let e = ObjectError::store("commit_aggregate")(StoreError::StoreFailure {
            message: "timeout".into(),
            ambiguous: true,
        });
        assert!(e.is_ambiguous());
        assert!(
            std::error::Error::source(&e).is_some(),
            "the store error is the source"
        );
        let c = CallError::from(e);
        assert_eq!(c.kind(), ErrorKind::StoreFailure);
        assert!(c.detail().contains("commit_aggregate"), "{}", c.detail());
        let sure = ObjectError::store("reserve")(StoreError::StoreFailure {
            message: "refused".into(),
            ambiguous: false,
        });
        assert!(!sure.is_ambiguous());
        let call = ObjectError::from(CallError::new(ErrorKind::StaleRoute, "x"));
        assert!(!call.is_ambiguous() && call.store_error().is_none());
        assert_eq!(call.kind(), ErrorKind::StaleRoute);
    }

    #[test]
    fn every_store_answer_maps_to_one_caller_kind() {
        let cases = [
            (StoreError::Missing("k".into()), ErrorKind::NotFound),
            (
                StoreError::SpotIdConflict("k".into()),
                ErrorKind::AlreadyExists,
            ),
            (StoreError::Conflict("k".into()), ErrorKind::Conflict),
            (
                StoreError::RoutingIdConflict("k".into()),
                ErrorKind::Conflict,
            ),
            (
                StoreError::CapacityExhausted("n".into()),
                ErrorKind::Rejected,
            ),
            (
                StoreError::GenerationExhausted("c".into()),
                ErrorKind::GenerationExhausted,
            ),
            (
                StoreError::InvalidArgument("a".into()),
                ErrorKind::InvalidOperation,
            ),
            (
                StoreError::stale(zlink_store::StaleReason::Owner, "k"),
                ErrorKind::Conflict,
            ),
        ];
        for (e, kind) in cases {
            assert_eq!(store_error(e.clone()).kind(), kind, "{e}");
            assert_eq!(ObjectError::store("op")(e).kind(), kind);
        }
    }
}
