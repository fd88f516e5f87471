//! # zlink-admin-api
//!
//! The node host's gRPC admin API (`zlink.admin.v1.HostAdmin`), shared by the host that serves
//! it (`zlink-node run`), its command-line client (`zlink-node ctl`) and the operator:
//!
//! - [`proto`] — the messages, the tonic server trait and the tonic client generated at build
//!   time from `proto/zlink/admin/v1/host_admin.proto` (with the vendored protoc, so no system
//!   protoc is needed);
//! - [`state`] — [`HostState`], the host's lifecycle state, and its mapping to the proto enum
//!   and the wire's `RuntimeState`.
//!
//! This crate depends on neither libzmq nor the runtime (`cargo tree -p zlink-admin-api` has no
//! `zmq`; a test in the workspace checks it), so a client builds without the mesh.

/// The generated HostAdmin protobuf types, server and client
/// (`protocol/admin/proto/zlink/admin/v1/host_admin.proto`).
#[allow(
    missing_docs,
    clippy::all,
    clippy::pedantic,
    clippy::unwrap_used,
    unreachable_pub
)]
pub mod proto {
    tonic::include_proto!("zlink.admin.v1");
}

pub mod state;

pub use state::HostState;
