//! The one typed path from the mesh to the object runtime: every admitted object command
//! travels as an [`ObjectCommand`] to [`ObjectSink::take`].
//!
//! The reactor admits a record first (connection generation, sequence, flow charge, and the
//! sender identity the schema's `source` rule names — all from the generated
//! [`CommandSpec`](zlink_protocol::generated::CommandSpec)), then hands the decoded body itself
//! to the sink: no per-command delivery struct is copied out of it. Target admission (does this
//! node own the object under the route's fences?) is the receiver's.
//!
//! Adding an object command is: the schema entry (generated body, `flowCharged`, `source`), a
//! variant here, and its arm in the reactor's exhaustive match and in the runtime's
//! [`ObjectSink::take`]; each of those matches is exhaustive, so a forgotten one does not
//! compile.

use std::sync::Arc;

use zlink_protocol::envelope::TypedPayload;
use zlink_protocol::generated::{
    ActorCreate, ActorDestroy, ActorJoin, ActorRequest, ActorSend, BoundSessionBind,
    BoundSessionReplaced, BoundSessionSend, InstanceSpot, LogicalMulticast, MessageFollow,
    NodeFence, NodeRequest, RelocationCutover, RelocationData, RelocationFailed, RelocationPrepare,
    RelocationReady, RelocationState, ReplyRelayAck, RequestHeader, RouteFence,
    SessionRelocationRoute, SessionRelocationSeal, SessionRelocationSealed, SpotRequest, SpotSend,
    UserSpotClose, UserSpotCreate,
};
use zlink_protocol::metadata::Metadata;

/// The application part of an object record: its metadata snapshot and payload.
#[derive(Debug, Clone, Default)]
pub struct ObjectPayload {
    /// Metadata snapshot (wire §2 metadata frame), if the record carried one.
    pub metadata: Option<Metadata>,
    /// The application payload (empty when the record carried none).
    pub payload: TypedPayload,
    /// The bound-session tail (flag 0x02) of a session relay (24/25 only).
    pub bound_session: Option<zlink_protocol::generated::SessionRef>,
}

/// An object command this node admitted from a peer (wire §7–§9), with its decoded body.
#[derive(Debug)]
pub enum ObjectCommand {
    /// `spotSend` (21): a one-way message to a Spot.
    SpotSend(SpotSend, ObjectPayload),
    /// `spotRequest` (22): a request to a Spot.
    SpotRequest(SpotRequest, ObjectPayload),
    /// `logicalMulticast` (23): a publish to this node's local subscriptions.
    LogicalMulticast(LogicalMulticast, ObjectPayload),
    /// `actorSend` (24): a one-way message to an Actor.
    ActorSend(ActorSend, ObjectPayload),
    /// `actorRequest` (25): a request to an Actor.
    ActorRequest(ActorRequest, ObjectPayload),
    /// `actorDestroy` (27): destroy the named Actor incarnation.
    ActorDestroy(ActorDestroy),
    /// `actorJoin` (28): an Actor join proposal (wire §9); the sender is the connection's peer.
    ActorJoin(ActorJoin),
    /// `instanceSpot` (39): an Instance Spot send or request, kind 1 or kind 2 (wire §8).
    InstanceSpot(InstanceSpot, ObjectPayload),
    /// `userSpotCreate` (47): run the factory of a User Spot the source reserved here.
    UserSpotCreate(UserSpotCreate),
    /// `userSpotClose` (48): close the named User Spot incarnation.
    UserSpotClose(UserSpotClose),
    /// `actorCreate` (49): run the factory of an Actor the source reserved here.
    ActorCreate(ActorCreate),
    /// `relocationPrepare` (40, request leg): a source asks this node to take one object
    /// (wire §9 "Relocation manifest와 direct chunk transfer").
    RelocationPrepare(RelocationPrepare),
    /// `relocationState` (52): one payload chunk of a prepared transfer.
    RelocationState(RelocationState),
    /// `relocationReady` (30, reply leg): the target restored the object and waits for cutover.
    RelocationReady(RelocationReady),
    /// `relocationFailed` (53, reply leg): the target refused or failed the transfer.
    RelocationFailed(RelocationFailed),
    /// `relocationData` (31): one held or followed record, with its original frames.
    RelocationData(RelocationData),
    /// `relocationCutover` (34): the boundary after the relayed prefix.
    RelocationCutover(RelocationCutover),
    /// `replyRelayAck` (46, reply leg): the requester accepted a relayed terminal.
    ReplyRelayAck(ReplyRelayAck),
    /// `messageFollow` (50): an old owner followed a record of this node's to the object's new
    /// owner; this node's cached route is stale (wire §3.1).
    MessageFollow(MessageFollow),
    /// `boundSessionBind` (38, request leg): a session owner binds one of its sessions to an
    /// Actor this node owns (routing §3.1); the sender is the session's owner node.
    BoundSessionBind(BoundSessionBind),
    /// `boundSessionSend` (36): an Actor's push to a session of this node.
    BoundSessionSend(BoundSessionSend, ObjectPayload),
    /// `sessionRelocationSeal` (42, request leg): a relocation coordinator seals a binding of
    /// a session of this node (wire §10 "Session route").
    SessionRelocationSeal(SessionRelocationSeal),
    /// `sessionRelocationSealed` (43, reply leg): a session owner's answer to this node's 42.
    SessionRelocationSealed(SessionRelocationSealed),
    /// `sessionRelocationRoute` (44): route switch (from the target) or abort (from the source)
    /// of a sealed binding of a session of this node.
    SessionRelocationRoute(SessionRelocationRoute),
    /// `boundSessionReplaced` (51): the Actor owner replaced a binding of a session of this
    /// node with another session's (wire §3.2).
    BoundSessionReplaced(BoundSessionReplaced),
    /// A node-direct request (17, answered by 20) whose packet name is in the framework's
    /// reserved [`SESSION_FRAMEWORK_PREFIX`] space (**ours**; wire v1 has no command for it),
    /// e.g. `zlink.session.BindingTombstone`: it goes to the object runtime, never to an
    /// application handler.
    FrameworkRequest(NodeRequest, ObjectPayload),
}

/// Packet names of node-direct requests that the object runtime answers itself (session
/// binding housekeeping between nodes). Application node-direct handlers cannot use them.
pub const SESSION_FRAMEWORK_PREFIX: &str = "zlink.session.";

impl ObjectCommand {
    /// The route fence of a Spot / Actor message (21, 22, 24, 25): the reactor checks it names
    /// this node's lifecycle before the sink sees it. `None` for the other commands, whose
    /// bodies carry their own fences.
    pub fn message_route(&self) -> Option<&RouteFence> {
        match self {
            Self::SpotSend(b, _) => Some(&b.route),
            Self::SpotRequest(b, _) => Some(&b.route),
            Self::ActorSend(b, _) => Some(&b.route),
            Self::ActorRequest(b, _) => Some(&b.route),
            Self::LogicalMulticast(..)
            | Self::ActorDestroy(_)
            | Self::ActorJoin(_)
            | Self::InstanceSpot(..)
            | Self::UserSpotCreate(_)
            | Self::UserSpotClose(_)
            | Self::ActorCreate(_)
            | Self::RelocationPrepare(_)
            | Self::RelocationState(_)
            | Self::RelocationReady(_)
            | Self::RelocationFailed(_)
            | Self::RelocationData(_)
            | Self::RelocationCutover(_)
            | Self::ReplyRelayAck(_)
            | Self::MessageFollow(_)
            | Self::BoundSessionBind(_)
            | Self::BoundSessionSend(..)
            | Self::SessionRelocationSeal(_)
            | Self::SessionRelocationSealed(_)
            | Self::SessionRelocationRoute(_)
            | Self::BoundSessionReplaced(_)
            | Self::FrameworkRequest(..) => None,
        }
    }

    /// The terminal identity of a request (the one a refusal is answered on); `None` for a
    /// one-way command. For `instanceSpot` it is built from the body's operation identity,
    /// reply route and correlation (present exactly for the request leg).
    pub fn request(&self) -> Option<RequestHeader> {
        match self {
            Self::SpotRequest(b, _) => Some(b.request.clone()),
            Self::ActorRequest(b, _) => Some(b.request.clone()),
            Self::ActorDestroy(b) => Some(b.request.clone()),
            Self::ActorJoin(b) => Some(b.request.clone()),
            Self::UserSpotCreate(b) => Some(b.request.clone()),
            Self::UserSpotClose(b) => Some(b.request.clone()),
            Self::ActorCreate(b) => Some(b.request.clone()),
            Self::BoundSessionBind(b) => Some(b.request.clone()),
            Self::FrameworkRequest(b, _) => Some(b.request.clone()),
            Self::InstanceSpot(i, _) => instance_request(i),
            Self::SpotSend(..)
            | Self::ActorSend(..)
            | Self::LogicalMulticast(..)
            | Self::RelocationPrepare(_)
            | Self::RelocationState(_)
            | Self::RelocationReady(_)
            | Self::RelocationFailed(_)
            | Self::RelocationData(_)
            | Self::RelocationCutover(_)
            | Self::ReplyRelayAck(_)
            | Self::MessageFollow(_)
            | Self::BoundSessionSend(..)
            | Self::SessionRelocationSeal(_)
            | Self::SessionRelocationSealed(_)
            | Self::SessionRelocationRoute(_)
            | Self::BoundSessionReplaced(_) => None,
        }
    }

    /// Stable command name (logs, metrics).
    pub fn name(&self) -> &'static str {
        match self {
            Self::SpotSend(..) => "spotSend",
            Self::SpotRequest(..) => "spotRequest",
            Self::LogicalMulticast(..) => "logicalMulticast",
            Self::ActorSend(..) => "actorSend",
            Self::ActorRequest(..) => "actorRequest",
            Self::ActorDestroy(_) => "actorDestroy",
            Self::ActorJoin(_) => "actorJoin",
            Self::InstanceSpot(..) => "instanceSpot",
            Self::UserSpotCreate(_) => "userSpotCreate",
            Self::UserSpotClose(_) => "userSpotClose",
            Self::ActorCreate(_) => "actorCreate",
            Self::RelocationPrepare(_) => "relocationPrepare",
            Self::RelocationState(_) => "relocationState",
            Self::RelocationReady(_) => "relocationReady",
            Self::RelocationFailed(_) => "relocationFailed",
            Self::RelocationData(_) => "relocationData",
            Self::RelocationCutover(_) => "relocationCutover",
            Self::ReplyRelayAck(_) => "replyRelayAck",
            Self::MessageFollow(_) => "messageFollow",
            Self::BoundSessionBind(_) => "boundSessionBind",
            Self::BoundSessionSend(..) => "boundSessionSend",
            Self::SessionRelocationSeal(_) => "sessionRelocationSeal",
            Self::SessionRelocationSealed(_) => "sessionRelocationSealed",
            Self::SessionRelocationRoute(_) => "sessionRelocationRoute",
            Self::BoundSessionReplaced(_) => "boundSessionReplaced",
            Self::FrameworkRequest(..) => "frameworkRequest",
        }
    }
}

/// The terminal identity of an `instanceSpot` (39) request, built from the body's operation
/// identity, reply route and correlation (present exactly for the request leg); `None` for a
/// send.
pub fn instance_request(i: &InstanceSpot) -> Option<RequestHeader> {
    match (i.reply_route_id, &i.correlation_id) {
        (Some(reply_route_id), Some(correlation_id)) => Some(RequestHeader {
            operation_id: i.operation_id.clone(),
            reply_route_id,
            correlation_id: correlation_id.clone(),
            deadline_unix_ms: i.deadline_unix_ms,
        }),
        (Some(_) | None, _) => None,
    }
}

/// The receiver of admitted object commands: the object runtime of this node.
pub trait ObjectSink: Send + Sync + 'static {
    /// Take one admitted command from `source` (the connection's admitted peer, which the
    /// command's own source field — if it has one — was checked against). Must not block: the
    /// reactor calls it. A request is answered with
    /// [`MeshNode::reply_to`](super::MeshNode::reply_to) or
    /// [`MeshNode::reply_create`](super::MeshNode::reply_create), exactly once.
    fn take(&self, source: Arc<NodeFence>, command: ObjectCommand);
}

#[cfg(test)]
mod tests {
    use super::*;
    use zlink_protocol::generated::{
        InstanceRoute, InstanceRouteReady, ObjectKind, OperationId, OperationKind,
    };

    fn fence(rid: &str) -> NodeFence {
        NodeFence {
            rid: zlink_protocol::shared_str::SharedStr::copy_from(rid),
            lifecycle_generation: 7,
        }
    }

    fn request() -> RequestHeader {
        RequestHeader {
            operation_id: OperationId { high: 1, low: 2 },
            reply_route_id: 3,
            correlation_id: "c-1".into(),
            deadline_unix_ms: 99,
        }
    }

    fn route() -> RouteFence {
        RouteFence {
            object_kind: ObjectKind::Spot,
            object_id: "room-1".into(),
            object_generation: 1,
            target_node: fence("b"),
            authority_owner_generation: 1,
            owner_lease_generation: 1,
        }
    }

    #[test]
    fn only_spot_and_actor_messages_expose_a_route_for_the_reactor_to_check() {
        let send = ObjectCommand::SpotSend(
            SpotSend {
                route: route(),
                source: fence("a"),
            },
            ObjectPayload::default(),
        );
        assert_eq!(
            send.message_route().map(|r| r.object_id.as_str()),
            Some("room-1")
        );
        assert!(send.request().is_none(), "a send has no one to answer");
        let join = ObjectCommand::ActorJoin(ActorJoin {
            request: request(),
            actor_route: route(),
            entry: false,
            target_spot_route: route(),
        });
        assert!(join.message_route().is_none());
        assert_eq!(join.request(), Some(request()));
    }

    #[test]
    fn an_instance_spot_request_is_answered_on_its_operation_identity_and_a_send_on_none() {
        let mut i = InstanceSpot {
            operation_kind: OperationKind::Request,
            operation_id: request().operation_id,
            reply_route_id: Some(3),
            correlation_id: Some("c-1".into()),
            deadline_unix_ms: 99,
            source: fence("a"),
            source_spot_id: String::new(),
            route: InstanceRoute::Ready(InstanceRouteReady {
                route: route(),
                store_version: 1,
            }),
        };
        let cmd = ObjectCommand::InstanceSpot(i.clone(), ObjectPayload::default());
        assert_eq!(cmd.request(), Some(request()));
        i.operation_kind = OperationKind::Send;
        i.reply_route_id = None;
        i.correlation_id = None;
        let cmd = ObjectCommand::InstanceSpot(i, ObjectPayload::default());
        assert_eq!(cmd.request(), None);
    }
}
