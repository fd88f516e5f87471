//! One unit of work on an object's execution queue (glossary §5 "Actor queue claim", "Spot
//! control claim"): the data the node-wide table ([`super::objects`]) queues and the execution
//! shell ([`super::exec`]) runs. It lives apart from both so neither imports the other for it,
//! and so relocation can capture and restore queued work as data.

use tokio::sync::oneshot;
use zlink_protocol::envelope::TypedPayload;
use zlink_protocol::metadata::Metadata;

use super::timers::Tick;
use crate::call::error::CallError;

/// Where a request's single terminal result goes.
pub(crate) type Reply = oneshot::Sender<Result<TypedPayload, CallError>>;

/// One unit of queue work.
pub(crate) enum Work {
    Send(TypedPayload, Option<Metadata>),
    Request(TypedPayload, Option<Metadata>, Reply),
    Tick(Tick),
    /// A one-way message whose handler completion is reported (the first message of a cold
    /// activation: its completion is recorded durably).
    SendNotify(TypedPayload, Option<Metadata>, Reply),
    /// A Spot control claim (glossary §5): Actor `actor` joined (`true`) or left this Spot.
    Member {
        joined: bool,
        actor: String,
    },
    /// A control claim on this object's own queue: once it runs, the object is at a handler
    /// boundary and holds its queue claim; `at_boundary` says so, and the claim is kept until
    /// `release` resolves (or its sender drops). Takes no gate.
    Hold {
        at_boundary: oneshot::Sender<()>,
        release: oneshot::Receiver<()>,
    },
    /// A lifecycle claim on the target of a move: the `on_relocation_ready_completed` callback
    /// of an `ApplicationSignaled` SpotWide User Spot, its first turn there.
    RelocationReadyCompleted,
}

impl Work {
    pub(crate) fn metadata(&self) -> Option<&Metadata> {
        match self {
            Self::Send(_, m) | Self::Request(_, m, _) | Self::SendNotify(_, m, _) => m.as_ref(),
            Self::Tick(_)
            | Self::Member { .. }
            | Self::Hold { .. }
            | Self::RelocationReadyCompleted => None,
        }
    }
}
