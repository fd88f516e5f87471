//! The RouteMesh layer: MeshNodes that discover, admit and watch each other and carry
//! node-direct traffic with exactly-once request completion (wire §2–§5; glossary §3, §6, §7,
//! §9).
//!
//! - [`config`] — [`MeshNodeConfig`](config::MeshNodeConfig) and its validation.
//! - [`auth`] — the mesh secret and the admission challenge–response.
//! - [`liveness`] — the pure liveness state machine (wire §5).
//! - [`discovery`] — descriptor storage, the desired peer set, the store backend trait.
//! - [`handler`] — typed message handlers and the JSON / raw codecs.
//! - [`connection`] — one admitted connection epoch: FIFO, credit, in-flight accounting.
//! - [`peer`] — peer states and snapshots.
//! - [`node`] — [`MeshNode`](node::MeshNode): start, node direct, updates, shutdown.
//! - `reactor`, `dispatch` — the node's internal tasks.

pub mod auth;
pub mod config;
pub mod connection;
pub mod discovery;
mod dispatch;
pub mod handler;
pub mod liveness;
pub mod node;
pub mod peer;
mod reactor;

pub use config::{ManualPeer, MeshNodeConfig, RidConfig};
pub use handler::{Handlers, JsonMessage, MessageContext};
pub use node::{
    CloseDelivery, CreateDelivery, DestroyDelivery, InstanceDelivery, JoinDelivery, MeshError,
    MeshNode, MulticastDelivery, ObjectDelivery, ObjectSink,
};
pub use peer::{PeerSnapshot, PeerState};
