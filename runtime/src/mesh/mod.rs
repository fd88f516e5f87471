//! The RouteMesh layer: MeshNodes that discover, admit and watch each other and carry
//! node-direct traffic with exactly-once request completion (wire §2–§5; glossary §3, §6, §7,
//! §9).
//!
//! - [`config`] — [`MeshNodeConfig`](config::MeshNodeConfig) and its validation.
//! - [`auth`] — the mesh secret and the admission challenge–response.
//! - [`liveness`] — the pure liveness state machine (wire §5).
//! - [`lease`] — the pure owner-lease keeper: renewal, retry backoff, fencing, loss.
//! - [`discovery`] — descriptor storage, the desired peer set, the store backend trait.
//! - [`handler`] — typed message handlers and the JSON / raw codecs.
//! - [`connection`] — one admitted connection epoch: FIFO, credit, in-flight accounting.
//! - [`peer`] — peer states and snapshots.
//! - [`node`] — [`MeshNode`](node::MeshNode): start, node direct, updates, shutdown.
//! - [`object_command`] — [`ObjectCommand`] and [`ObjectSink::take`]: the one typed path from
//!   the reactor to the object runtime.
//! - `reactor`, `dispatch` — the node's internal tasks.
//!
//! ## Every command has an arm
//!
//! The reactor matches the generated [`CommandBody`](zlink_protocol::generated::CommandBody)
//! exhaustively, one named arm per command and no wildcard (`clippy::wildcard_enum_match_arm`
//! is denied on it, and `scripts/test` runs clippy with warnings denied). Flow charge and sender
//! identity come from the generated `CommandSpec` (`flow_charged`, `source`), not from lists in
//! the reactor. So adding a command to the schema is what makes the reactor handle it: until it
//! has an arm, the node does not compile. The same shape on the real generated type, with every
//! command named, compiles:
//!
//! ```
//! use zlink_protocol::generated::CommandBody;
//!
//! fn arm(body: &CommandBody) -> &'static str {
//!     match body {
//!         CommandBody::Hello(_) => "Hello",
//!         CommandBody::Admit(_) => "Admit",
//!         CommandBody::Reject(_) => "Reject",
//!         CommandBody::Update(_) => "Update",
//!         CommandBody::LivenessProbe(_) => "LivenessProbe",
//!         CommandBody::LivenessAck(_) => "LivenessAck",
//!         CommandBody::NodeSend(_) => "NodeSend",
//!         CommandBody::NodeRequest(_) => "NodeRequest",
//!         CommandBody::ChannelSend(_) => "ChannelSend",
//!         CommandBody::ChannelRequest(_) => "ChannelRequest",
//!         CommandBody::Reply(_) => "Reply",
//!         CommandBody::SpotSend(_) => "SpotSend",
//!         CommandBody::SpotRequest(_) => "SpotRequest",
//!         CommandBody::LogicalMulticast(_) => "LogicalMulticast",
//!         CommandBody::ActorSend(_) => "ActorSend",
//!         CommandBody::ActorRequest(_) => "ActorRequest",
//!         CommandBody::ActorLookup(_) => "ActorLookup",
//!         CommandBody::ActorDestroy(_) => "ActorDestroy",
//!         CommandBody::ActorJoin(_) => "ActorJoin",
//!         CommandBody::ActorLeft(_) => "ActorLeft",
//!         CommandBody::RelocationReady(_) => "RelocationReady",
//!         CommandBody::RelocationData(_) => "RelocationData",
//!         CommandBody::ReplyRelay(_) => "ReplyRelay",
//!         CommandBody::RelocationCutover(_) => "RelocationCutover",
//!         CommandBody::BoundSessionSend(_) => "BoundSessionSend",
//!         CommandBody::ActorJoined(_) => "ActorJoined",
//!         CommandBody::BoundSessionBind(_) => "BoundSessionBind",
//!         CommandBody::InstanceSpot(_) => "InstanceSpot",
//!         CommandBody::RelocationPrepare(_) => "RelocationPrepare",
//!         CommandBody::SessionRelocationSeal(_) => "SessionRelocationSeal",
//!         CommandBody::SessionRelocationSealed(_) => "SessionRelocationSealed",
//!         CommandBody::SessionRelocationRoute(_) => "SessionRelocationRoute",
//!         CommandBody::ReplyRelayAck(_) => "ReplyRelayAck",
//!         CommandBody::UserSpotCreate(_) => "UserSpotCreate",
//!         CommandBody::UserSpotClose(_) => "UserSpotClose",
//!         CommandBody::ActorCreate(_) => "ActorCreate",
//!         CommandBody::MessageFollow(_) => "MessageFollow",
//!         CommandBody::BoundSessionReplaced(_) => "BoundSessionReplaced",
//!         CommandBody::RelocationState(_) => "RelocationState",
//!         CommandBody::RelocationFailed(_) => "RelocationFailed",
//!     }
//! }
//! # let _ = arm;
//! ```
//!
//! and the same match missing one command — what the reactor is the moment a command is added to
//! the schema and regenerated, before anyone handles it — does not:
//!
//! ```compile_fail,E0004
//! use zlink_protocol::generated::CommandBody;
//!
//! fn arm(body: &CommandBody) -> &'static str {
//!     match body {
//!         CommandBody::Hello(_) => "Hello",
//!         CommandBody::Admit(_) => "Admit",
//!         CommandBody::Reject(_) => "Reject",
//!         CommandBody::Update(_) => "Update",
//!         CommandBody::LivenessProbe(_) => "LivenessProbe",
//!         CommandBody::LivenessAck(_) => "LivenessAck",
//!         CommandBody::NodeSend(_) => "NodeSend",
//!         CommandBody::NodeRequest(_) => "NodeRequest",
//!         CommandBody::ChannelSend(_) => "ChannelSend",
//!         CommandBody::ChannelRequest(_) => "ChannelRequest",
//!         CommandBody::Reply(_) => "Reply",
//!         CommandBody::SpotSend(_) => "SpotSend",
//!         CommandBody::SpotRequest(_) => "SpotRequest",
//!         CommandBody::LogicalMulticast(_) => "LogicalMulticast",
//!         CommandBody::ActorSend(_) => "ActorSend",
//!         CommandBody::ActorRequest(_) => "ActorRequest",
//!         CommandBody::ActorLookup(_) => "ActorLookup",
//!         CommandBody::ActorDestroy(_) => "ActorDestroy",
//!         CommandBody::ActorJoin(_) => "ActorJoin",
//!         CommandBody::ActorLeft(_) => "ActorLeft",
//!         CommandBody::RelocationReady(_) => "RelocationReady",
//!         CommandBody::RelocationData(_) => "RelocationData",
//!         CommandBody::ReplyRelay(_) => "ReplyRelay",
//!         CommandBody::RelocationCutover(_) => "RelocationCutover",
//!         CommandBody::BoundSessionSend(_) => "BoundSessionSend",
//!         CommandBody::ActorJoined(_) => "ActorJoined",
//!         CommandBody::BoundSessionBind(_) => "BoundSessionBind",
//!         CommandBody::InstanceSpot(_) => "InstanceSpot",
//!         CommandBody::RelocationPrepare(_) => "RelocationPrepare",
//!         CommandBody::SessionRelocationSeal(_) => "SessionRelocationSeal",
//!         CommandBody::SessionRelocationSealed(_) => "SessionRelocationSealed",
//!         CommandBody::SessionRelocationRoute(_) => "SessionRelocationRoute",
//!         CommandBody::ReplyRelayAck(_) => "ReplyRelayAck",
//!         CommandBody::UserSpotCreate(_) => "UserSpotCreate",
//!         CommandBody::UserSpotClose(_) => "UserSpotClose",
//!         CommandBody::ActorCreate(_) => "ActorCreate",
//!         CommandBody::MessageFollow(_) => "MessageFollow",
//!         CommandBody::BoundSessionReplaced(_) => "BoundSessionReplaced",
//!         CommandBody::RelocationState(_) => "RelocationState",
//!     }
//! }
//! # let _ = arm;
//! ```

pub mod auth;
pub mod config;
pub mod connection;
pub mod discovery;
mod dispatch;
pub mod handler;
pub mod lease;
pub mod liveness;
pub mod node;
pub mod object_command;
pub mod peer;
mod reactor;
mod state;

pub use config::{ManualPeer, MeshNodeConfig, RidConfig};
pub use handler::{Handlers, JsonMessage, MessageContext};
pub use node::{MeshError, MeshNode};
pub use object_command::{ObjectCommand, ObjectPayload, ObjectSink, SESSION_FRAMEWORK_PREFIX};
pub use peer::{PeerSnapshot, PeerState};
