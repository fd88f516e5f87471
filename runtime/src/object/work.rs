//! One unit of work on an object's execution queue (glossary §5 "Actor queue claim", "Spot
//! control claim"): the data the node-wide table ([`super::objects`]) queues and the execution
//! shell ([`super::exec`]) runs. It lives apart from both so neither imports the other for it,
//! and so relocation can capture and restore queued work as data.

use tokio::sync::oneshot;
use zlink_protocol::envelope::TypedPayload;
use zlink_protocol::metadata::Metadata;

use super::timers::Tick;
use crate::call::error::CallError;

/// Where a request's single terminal result goes: a local waiter, or straight back over the
/// mesh to the node that sent the request.
pub(crate) enum Reply {
    /// A task on this node waits for it.
    Local(oneshot::Sender<Result<TypedPayload, CallError>>),
    /// The request came from another node: the terminal is sent to it from whichever thread
    /// ends the request, with no task waiting in between.
    Mesh(Box<MeshReply>),
}

/// The mesh reply route of a request of another node (see [`Reply::Mesh`]). Dropped
/// unanswered — the object closed with the request still queued — it answers `Unavailable`,
/// as a local waiter sees its dropped channel.
pub(crate) struct MeshReply {
    mesh: std::sync::Arc<crate::mesh::MeshNode>,
    source: std::sync::Arc<zlink_protocol::generated::NodeFence>,
    header: zlink_protocol::generated::RequestHeader,
    answered: bool,
}

impl Reply {
    /// The reply route of request `header` from node `source`, answered through `mesh`.
    pub(crate) fn mesh(
        mesh: std::sync::Arc<crate::mesh::MeshNode>,
        source: std::sync::Arc<zlink_protocol::generated::NodeFence>,
        header: zlink_protocol::generated::RequestHeader,
    ) -> Self {
        Self::Mesh(Box::new(MeshReply {
            mesh,
            source,
            header,
            answered: false,
        }))
    }

    /// Deliver the terminal result. `Err` gives it back when a local waiter is gone (as
    /// `oneshot::Sender::send`); a mesh reply is always taken.
    #[allow(clippy::result_large_err)]
    pub(crate) fn send(
        self,
        result: Result<TypedPayload, CallError>,
    ) -> Result<(), Result<TypedPayload, CallError>> {
        match self {
            Self::Local(tx) => tx.send(result),
            Self::Mesh(mut m) => {
                m.answered = true;
                m.mesh.reply_to(&m.source, &m.header, result);
                Ok(())
            }
        }
    }
}

impl From<oneshot::Sender<Result<TypedPayload, CallError>>> for Reply {
    fn from(tx: oneshot::Sender<Result<TypedPayload, CallError>>) -> Self {
        Self::Local(tx)
    }
}

impl Drop for MeshReply {
    fn drop(&mut self) {
        if !self.answered {
            self.mesh.reply_to(
                &self.source,
                &self.header,
                Err(CallError::new(
                    crate::call::error::ErrorKind::Unavailable,
                    "object closed",
                )),
            );
        }
    }
}

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
