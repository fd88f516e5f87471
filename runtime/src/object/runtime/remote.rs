//! What a remote node asked of this runtime, in the runtime's own terms: built from the
//! mesh's admitted [`ObjectCommand`](crate::mesh::ObjectCommand) in one exhaustive match
//! ([`SinkRef::take`](super::SinkRef)), then served by the concern it belongs to (calls,
//! creation, membership, activation, multicast).

use std::sync::Arc;

use zlink_protocol::envelope::TypedPayload;
use zlink_protocol::generated::{NodeFence, RequestHeader, ReservationFence, RouteFence};
use zlink_protocol::metadata::Metadata;

/// An object command (Spot / Actor send or request, wire 21/22/24/25) the reactor admitted:
/// the record came from the admitted peer `source` on the current epoch, named this node's
/// lifecycle as target, and its flow charge is settled. Target admission (does this node own
/// the object under the route's fences?) is the receiver's.
#[derive(Debug)]
pub(crate) struct RemoteMessage {
    /// The sending node.
    pub(crate) source: Arc<NodeFence>,
    /// The route the sender resolved.
    pub(crate) route: RouteFence,
    /// The request header (`None` for a one-way send).
    pub(crate) request: Option<RequestHeader>,
    /// Metadata snapshot.
    pub(crate) metadata: Option<Metadata>,
    /// The application payload.
    pub(crate) payload: TypedPayload,
    /// The bound-session tail of a session relay (24/25 with flag 0x02).
    pub(crate) session: Option<zlink_protocol::generated::SessionRef>,
}

/// An admitted remote create — User Spot (command 47, wire §8.1) or Actor (command 49): the
/// source reserved the slot for this node; this node runs the factory and commits, then
/// answers once.
#[derive(Debug)]
pub(crate) struct RemoteCreate {
    /// Spot (47) or Actor (49).
    pub(crate) kind: zlink_protocol::generated::ObjectKind,
    /// The object ID.
    pub(crate) id: String,
    /// Its stable type.
    pub(crate) stable_type: String,
    /// Actors: the Entry or User Spot it is a member of.
    pub(crate) membership: Option<String>,
    /// The provider-issued reservation fence the source holds.
    pub(crate) reservation: ReservationFence,
}

/// An admitted remote User Spot close (command 48, wire §8.1): it names the exact incarnation
/// (SpotRef), this node's lifecycle, the AuthorityOwnerGeneration and StoreVersion it read.
#[derive(Debug)]
pub(crate) struct RemoteClose {
    /// The Spot incarnation.
    pub(crate) spot: zlink_protocol::generated::SpotRef,
    /// The node lifecycle the close is addressed to.
    pub(crate) target_node: NodeFence,
    /// Owner generation read by the source.
    pub(crate) authority_owner_generation: u64,
    /// StoreVersion read by the source.
    pub(crate) store_version: u64,
}

/// An admitted remote Actor destroy (command 27): the route names the exact incarnation
/// (ObjectGeneration), owner generation and lease the caller read.
#[derive(Debug)]
pub(crate) struct RemoteDestroy {
    /// The Actor incarnation and its owner fences.
    pub(crate) route: RouteFence,
}

/// An admitted Actor join proposal (command 28, wire §9 "Actor join 요청 envelope"): the
/// Actor's route fence, whether the target is an Entry Spot, and the target Spot's route fence.
/// The receiver reads the Actor's authority row and accepts only if it matches the fence.
#[derive(Debug)]
pub(crate) struct JoinProposal {
    /// Terminal identity of the join request.
    pub(crate) request: RequestHeader,
    /// The Actor incarnation and its owner fences.
    pub(crate) actor_route: RouteFence,
    /// The target is an Entry Spot (a leave back to the node's Entry Spot).
    pub(crate) entry: bool,
    /// The target Spot incarnation and its owner fences.
    pub(crate) spot_route: RouteFence,
}

/// An admitted Instance Spot operation (command 39, wire §8): a send or request with its own
/// operation identity and a route of kind 1 (an existing Ready authority) or kind 2 (Missing
/// cold activation, no authority fences).
#[derive(Debug)]
pub(crate) struct InstanceCall {
    /// The sending node (the body's `source`, checked against the connection's peer).
    pub(crate) source: Arc<NodeFence>,
    /// Terminal identity of a request (`None` for a send).
    pub(crate) request: Option<RequestHeader>,
    /// The operation ID (sends have one too).
    pub(crate) operation_id: zlink_protocol::generated::OperationId,
    /// End-to-end deadline of the operation.
    pub(crate) deadline_unix_ms: u64,
    /// The Spot the call was made from, if any (empty: none).
    pub(crate) source_spot_id: String,
    /// Kind 1 or kind 2.
    pub(crate) route: zlink_protocol::generated::InstanceRoute,
    /// Metadata snapshot.
    pub(crate) metadata: Option<Metadata>,
    /// The application payload.
    pub(crate) payload: TypedPayload,
}

/// An admitted Logical Multicast publish (command 23): this node delivers it to its own local
/// Spot subscriptions matching (channel, topic, packet name).
#[derive(Debug)]
pub(crate) struct MulticastIn {
    /// ChannelName.
    pub(crate) channel: String,
    /// Topic.
    pub(crate) topic: String,
    /// Metadata snapshot.
    pub(crate) metadata: Option<Metadata>,
    /// The application payload.
    pub(crate) payload: TypedPayload,
}
