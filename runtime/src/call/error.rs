//! The closed set of call error kinds and the error a request completes with.
//!
//! [`ErrorKind`] is the runtime's vocabulary for a failed request (glossary §3: a request
//! completes with exactly one terminal result). Most kinds have a wire value in
//! [`TerminalStatus`]; the two that do not ([`ErrorKind::GenerationExhausted`] and
//! [`ErrorKind::Configuration`]) are local failures that never cross the wire as themselves and
//! are reported to a remote requester as [`TerminalStatus::InvalidOperation`].
//!
//! Map to `tonic::Status` or HTTP only at the edge; inside the runtime a failure stays a
//! [`CallError`].

use std::fmt;

use thiserror::Error;
use zlink_protocol::generated::TerminalStatus;

/// Result alias for the call layer.
pub type Result<T, E = CallError> = std::result::Result<T, E>;

/// Why a request failed: a closed set, matched exhaustively by callers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ErrorKind {
    /// The target Spot or Actor does not exist: the resolver found no authority for it.
    NotFound,
    /// Authority exists but its owner cannot be used now, or the peer the request went to died
    /// (its lifecycle ended) before a reply arrived.
    Unavailable,
    /// The absolute end-to-end deadline fixed at submit passed before a reply arrived.
    DeadlineExceeded,
    /// The requester cancelled the request before a terminal result was confirmed.
    Cancelled,
    /// The local runtime (or the remote handler's runtime) is shutting down; pending requests
    /// complete with this and no new request is admitted.
    ShuttingDown,
    /// The caller asked for something the contract forbids: a malformed ID, a duplicate
    /// operation or correlation ID, an operation in the wrong state.
    InvalidOperation,
    /// A create-style operation found the object already present.
    AlreadyExists,
    /// A conditional write or fenced operation lost to a concurrent one.
    Conflict,
    /// A peer sent bytes that break the wire contract.
    ProtocolError,
    /// The Location Store could not be read or written, so the outcome could not be decided.
    StoreFailure,
    /// A per-lifecycle counter (operation ID, reply route ID, correlation ID, a generation)
    /// reached its maximum; wrapping or reusing a value is a terminal runtime error (wire §11).
    /// No wire value: sent to a remote requester as `InvalidOperation`.
    GenerationExhausted,
    /// A setting or construction argument is invalid, found before any request is sent.
    /// No wire value: sent to a remote requester as `InvalidOperation`.
    Configuration,
    /// The receiver refused the request by policy (admission, authorization, role).
    Rejected,
    /// The application handler ran and failed, or its payload could not be decoded.
    HandlerFailed,
    /// A send path or queue was full. The spec keeps this an internal waiting state of
    /// one-way calls, not a public terminal result; it surfaces only where a bounded local
    /// admission refuses work outright.
    Backpressured,
    /// The route used carried a fence (owner or lifecycle generation) the receiver no longer
    /// holds; the caller's route cache entry is stale.
    StaleRoute,
}

impl ErrorKind {
    /// Every kind, in declaration order.
    pub const ALL: [Self; 16] = [
        Self::NotFound,
        Self::Unavailable,
        Self::DeadlineExceeded,
        Self::Cancelled,
        Self::ShuttingDown,
        Self::InvalidOperation,
        Self::AlreadyExists,
        Self::Conflict,
        Self::ProtocolError,
        Self::StoreFailure,
        Self::GenerationExhausted,
        Self::Configuration,
        Self::Rejected,
        Self::HandlerFailed,
        Self::Backpressured,
        Self::StaleRoute,
    ];

    /// Stable `snake_case` name, for metric labels and structured logs. Never changes once
    /// released: dashboards key on it.
    pub const fn name(self) -> &'static str {
        match self {
            Self::NotFound => "not_found",
            Self::Unavailable => "unavailable",
            Self::DeadlineExceeded => "deadline_exceeded",
            Self::Cancelled => "cancelled",
            Self::ShuttingDown => "shutting_down",
            Self::InvalidOperation => "invalid_operation",
            Self::AlreadyExists => "already_exists",
            Self::Conflict => "conflict",
            Self::ProtocolError => "protocol_error",
            Self::StoreFailure => "store_failure",
            Self::GenerationExhausted => "generation_exhausted",
            Self::Configuration => "configuration",
            Self::Rejected => "rejected",
            Self::HandlerFailed => "handler_failed",
            Self::Backpressured => "backpressured",
            Self::StaleRoute => "stale_route",
        }
    }

    /// The spec's name of the kind (`DeadlineExceeded`), used by [`Display`](fmt::Display).
    pub const fn spec_name(self) -> &'static str {
        match self {
            Self::NotFound => "NotFound",
            Self::Unavailable => "Unavailable",
            Self::DeadlineExceeded => "DeadlineExceeded",
            Self::Cancelled => "Cancelled",
            Self::ShuttingDown => "ShuttingDown",
            Self::InvalidOperation => "InvalidOperation",
            Self::AlreadyExists => "AlreadyExists",
            Self::Conflict => "Conflict",
            Self::ProtocolError => "ProtocolError",
            Self::StoreFailure => "StoreFailure",
            Self::GenerationExhausted => "GenerationExhausted",
            Self::Configuration => "Configuration",
            Self::Rejected => "Rejected",
            Self::HandlerFailed => "HandlerFailed",
            Self::Backpressured => "Backpressured",
            Self::StaleRoute => "StaleRoute",
        }
    }

    /// The wire status a reply carries for this kind.
    ///
    /// [`GenerationExhausted`](Self::GenerationExhausted) and
    /// [`Configuration`](Self::Configuration) have no wire value: both are local failures the
    /// remote requester could not act on differently, so they go out as
    /// [`TerminalStatus::InvalidOperation`] (the detail text keeps the real cause). Every other
    /// kind maps to the status of the same name, so `from_status(to_status(k)) == Some(k)` for
    /// those.
    pub const fn to_status(self) -> TerminalStatus {
        match self {
            Self::NotFound => TerminalStatus::NotFound,
            Self::Unavailable => TerminalStatus::Unavailable,
            Self::DeadlineExceeded => TerminalStatus::DeadlineExceeded,
            Self::Cancelled => TerminalStatus::Cancelled,
            Self::ShuttingDown => TerminalStatus::ShuttingDown,
            Self::InvalidOperation | Self::GenerationExhausted | Self::Configuration => {
                TerminalStatus::InvalidOperation
            }
            Self::AlreadyExists => TerminalStatus::AlreadyExists,
            Self::Conflict => TerminalStatus::Conflict,
            Self::ProtocolError => TerminalStatus::ProtocolError,
            Self::StoreFailure => TerminalStatus::StoreFailure,
            Self::Rejected => TerminalStatus::Rejected,
            Self::HandlerFailed => TerminalStatus::HandlerFailed,
            Self::Backpressured => TerminalStatus::Backpressured,
            Self::StaleRoute => TerminalStatus::StaleRoute,
        }
    }

    /// The kind a received wire status stands for; `None` for [`TerminalStatus::Ok`], which
    /// is a success, not an error.
    pub const fn from_status(status: TerminalStatus) -> Option<Self> {
        match status {
            TerminalStatus::Ok => None,
            TerminalStatus::NotFound => Some(Self::NotFound),
            TerminalStatus::Unavailable => Some(Self::Unavailable),
            TerminalStatus::DeadlineExceeded => Some(Self::DeadlineExceeded),
            TerminalStatus::Cancelled => Some(Self::Cancelled),
            TerminalStatus::ShuttingDown => Some(Self::ShuttingDown),
            TerminalStatus::InvalidOperation => Some(Self::InvalidOperation),
            TerminalStatus::AlreadyExists => Some(Self::AlreadyExists),
            TerminalStatus::Conflict => Some(Self::Conflict),
            TerminalStatus::ProtocolError => Some(Self::ProtocolError),
            TerminalStatus::StoreFailure => Some(Self::StoreFailure),
            TerminalStatus::Rejected => Some(Self::Rejected),
            TerminalStatus::StaleRoute => Some(Self::StaleRoute),
            TerminalStatus::HandlerFailed => Some(Self::HandlerFailed),
            TerminalStatus::Backpressured => Some(Self::Backpressured),
        }
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.spec_name())
    }
}

/// A failed request: its [`ErrorKind`] and a human-readable detail.
///
/// The detail is free text for logs and for the reply's `detail` field; callers branch on
/// [`kind`](Self::kind) only.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{kind}: {detail}")]
pub struct CallError {
    kind: ErrorKind,
    detail: String,
}

impl CallError {
    /// An error of `kind` with `detail`.
    pub fn new(kind: ErrorKind, detail: impl Into<String>) -> Self {
        Self {
            kind,
            detail: detail.into(),
        }
    }

    /// The error received in a reply with `status` and `detail`; `None` for
    /// [`TerminalStatus::Ok`].
    pub fn from_status(status: TerminalStatus, detail: impl Into<String>) -> Option<Self> {
        ErrorKind::from_status(status).map(|kind| Self::new(kind, detail))
    }

    /// Why the request failed.
    pub const fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The human-readable detail.
    pub fn detail(&self) -> &str {
        &self.detail
    }

    /// The wire status to send for this error (see [`ErrorKind::to_status`]).
    pub const fn status(&self) -> TerminalStatus {
        self.kind.to_status()
    }

    /// Split into kind and detail.
    pub fn into_parts(self) -> (ErrorKind, String) {
        (self.kind, self.detail)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::collections::HashSet;

    use super::*;

    #[test]
    fn every_kind_with_a_wire_value_round_trips_through_its_status() {
        for kind in ErrorKind::ALL {
            let back = ErrorKind::from_status(kind.to_status());
            match kind {
                ErrorKind::GenerationExhausted | ErrorKind::Configuration => {
                    assert_eq!(back, Some(ErrorKind::InvalidOperation), "{kind}");
                }
                ErrorKind::NotFound
                | ErrorKind::Unavailable
                | ErrorKind::DeadlineExceeded
                | ErrorKind::Cancelled
                | ErrorKind::ShuttingDown
                | ErrorKind::InvalidOperation
                | ErrorKind::AlreadyExists
                | ErrorKind::Conflict
                | ErrorKind::ProtocolError
                | ErrorKind::StoreFailure
                | ErrorKind::Rejected
                | ErrorKind::HandlerFailed
                | ErrorKind::Backpressured
                | ErrorKind::StaleRoute => assert_eq!(back, Some(kind)),
            }
        }
    }

    #[test]
    fn every_error_status_round_trips_through_its_kind() {
        for status in TerminalStatus::ALL {
            match ErrorKind::from_status(status) {
                None => assert_eq!(status, TerminalStatus::Ok),
                Some(kind) => assert_eq!(kind.to_status(), status),
            }
        }
    }

    #[test]
    fn every_error_status_is_reached_by_some_kind() {
        let reached: HashSet<TerminalStatus> =
            ErrorKind::ALL.iter().map(|k| k.to_status()).collect();
        for status in TerminalStatus::ALL {
            assert_eq!(
                reached.contains(&status),
                status != TerminalStatus::Ok,
                "{status:?}"
            );
        }
    }

    #[test]
    fn ok_status_is_not_an_error() {
        assert_eq!(ErrorKind::from_status(TerminalStatus::Ok), None);
        assert_eq!(CallError::from_status(TerminalStatus::Ok, "fine"), None);
    }

    #[test]
    fn all_lists_every_kind_once_in_declaration_order() {
        let names: HashSet<&str> = ErrorKind::ALL.iter().map(|k| k.name()).collect();
        assert_eq!(names.len(), ErrorKind::ALL.len());
        let spec: HashSet<&str> = ErrorKind::ALL.iter().map(|k| k.spec_name()).collect();
        assert_eq!(spec.len(), ErrorKind::ALL.len());
        for (index, kind) in ErrorKind::ALL.iter().enumerate() {
            assert_eq!(*kind as usize, index);
        }
    }

    #[test]
    fn metric_names_are_lowercase_snake_case() {
        for kind in ErrorKind::ALL {
            assert!(
                kind.name()
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b == b'_'),
                "{}",
                kind.name()
            );
        }
    }

    #[test]
    fn display_is_kind_then_detail() {
        let error = CallError::new(ErrorKind::DeadlineExceeded, "no reply after 500 ms");
        assert_eq!(error.to_string(), "DeadlineExceeded: no reply after 500 ms");
        assert_eq!(error.kind(), ErrorKind::DeadlineExceeded);
        assert_eq!(error.detail(), "no reply after 500 ms");
        assert_eq!(error.status(), TerminalStatus::DeadlineExceeded);
    }

    #[test]
    fn received_error_keeps_its_detail() {
        let error = CallError::from_status(TerminalStatus::HandlerFailed, "boom").unwrap();
        assert_eq!(
            error.into_parts(),
            (ErrorKind::HandlerFailed, "boom".to_owned())
        );
    }
}
