//! ClientServer admission (wire §4 "Admission 절차", "ClientServer 방향"), as pure functions.
//!
//! ```text
//!  client (DEALER)                                   server (ROUTER)
//!  ── hello{clientServer, channelName, descriptor,
//!          maxMessageBytes = client limit, nonce n_c,
//!          proof = HMAC(secret, hello ‖ 0³² ‖ n_c ‖ identity(client))} ──►
//!                                   check: topology, capability, channel name, proof,
//!                                          nonce not seen before in this server lifecycle
//!  ◄── admit{descriptor(server), connectionGeneration, maxMessageBytes = min(client, server),
//!            nonce n_s, proof = HMAC(secret, admit ‖ n_c ‖ n_s ‖ identity(server) ‖ gen)}
//!      or reject{reason, detail}                      (the reply leg of the hello only)
//!  check: proof, channel, expected identity (RID + lifecycle + security identity from the
//!         descriptor, when known), 0 < maxMessageBytes ≤ own limit
//! ```
//!
//! The proofs reuse [`MeshSecret`] (the mesh's challenge–response). ClientServer has no
//! acceptor greeting before `hello` (wire §4: the hello is the connection's first record), so
//! the hello proof's acceptor nonce is 32 zero bytes; instead the server refuses a client nonce
//! it has already admitted in its lifecycle ([`NonceGuard`]), so a captured hello cannot be
//! replayed against the same server run. The admit proof binds the client's fresh nonce, so a
//! client never accepts a replayed admit.
//!
//! Both descriptors travel in the schema's `NodeDescriptor` shape: `meshName` carries the
//! ChannelName, `node` the RID and lifecycle generation, `channels` one membership for the
//! channel (role client or server, with the server's weight), `state` the runtime state.

use std::collections::{HashSet, VecDeque};

use zlink_protocol::generated::{
    Admit, ChannelMembership, ChannelRole, CommandBody, Hello, NodeDescriptor, NodeFence,
    ObjectRole, REQUIRED_CAPABILITY, RejectReason, RuntimeState, Topology,
};
use zlink_protocol::record::Record;

use crate::mesh::auth::MeshSecret;

/// The hello proof's acceptor nonce (no greeting precedes the hello on ClientServer).
pub const NO_ACCEPTOR_NONCE: [u8; 32] = [0; 32];

/// One side's identity as it goes into a descriptor.
#[derive(Debug, Clone)]
pub struct SideIdentity {
    /// ChannelName.
    pub channel_name: String,
    /// RID.
    pub rid: String,
    /// Lifecycle generation.
    pub lifecycle_generation: u64,
    /// Endpoint (server: advertised; client: the endpoint it dialed).
    pub endpoint: String,
    /// Security identity.
    pub security_identity: String,
}

/// A descriptor in the `NodeDescriptor` shape for one side.
pub fn descriptor(
    me: &SideIdentity,
    role: ChannelRole,
    revision: u64,
    state: RuntimeState,
    weight: u16,
) -> NodeDescriptor {
    NodeDescriptor {
        mesh_name: me.channel_name.clone(),
        node: NodeFence {
            rid: me.rid.clone(),
            lifecycle_generation: me.lifecycle_generation,
        },
        descriptor_revision: revision.max(1),
        endpoint: me.endpoint.clone(),
        security_identity: me.security_identity.clone(),
        object_role: ObjectRole::None,
        state,
        application_version: 0,
        maintenance_wave: String::new(),
        placement_weight: 0,
        entry_spot_id: String::new(),
        channels: vec![ChannelMembership {
            channel_name: me.channel_name.clone(),
            role,
            weight,
        }],
        object_capabilities: vec![],
    }
}

/// The client's `hello` record.
pub fn hello(
    secret: &MeshSecret,
    me: &SideIdentity,
    max_message_bytes: u64,
    nonce: [u8; 32],
) -> Record {
    let d = descriptor(me, ChannelRole::Client, 1, RuntimeState::Serving, 0);
    let proof = secret.hello_proof(&NO_ACCEPTOR_NONCE, &nonce, &d, REQUIRED_CAPABILITY);
    Record::new(CommandBody::Hello(Hello {
        capability: REQUIRED_CAPABILITY.to_owned(),
        topology: Topology::ClientServer,
        channel_name: me.channel_name.clone(),
        descriptor: d,
        max_message_bytes,
        nonce,
        proof,
    }))
}

/// A refused hello: the reason and detail of the `reject`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// Reject reason.
    pub reason: RejectReason,
    /// Human-readable detail.
    pub detail: String,
}

fn refuse(reason: RejectReason, detail: impl Into<String>) -> Refusal {
    Refusal {
        reason,
        detail: detail.into(),
    }
}

/// Remembers client nonces admitted in one server lifecycle (bounded; the oldest are
/// forgotten first).
#[derive(Debug)]
pub struct NonceGuard {
    seen: HashSet<[u8; 32]>,
    order: VecDeque<[u8; 32]>,
    capacity: usize,
}

impl NonceGuard {
    /// Remember at most `capacity` nonces.
    pub fn new(capacity: usize) -> Self {
        Self {
            seen: HashSet::new(),
            order: VecDeque::new(),
            capacity: capacity.max(1),
        }
    }

    /// Record `nonce`; `false` when it was seen before.
    pub fn first_use(&mut self, nonce: [u8; 32]) -> bool {
        if !self.seen.insert(nonce) {
            return false;
        }
        self.order.push_back(nonce);
        if self.order.len() > self.capacity
            && let Some(old) = self.order.pop_front()
        {
            self.seen.remove(&old);
        }
        true
    }
}

/// The server's check of a `hello`. Returns the admitted complete-message limit
/// `min(client, server)`.
///
/// # Errors
/// The [`Refusal`] to send back.
pub fn check_hello(
    hello: &Hello,
    secret: &MeshSecret,
    channel_name: &str,
    server_limit: u64,
) -> Result<u64, Refusal> {
    if hello.topology != Topology::ClientServer {
        return Err(refuse(
            RejectReason::TopologyMismatch,
            "this endpoint is a ClientServer server",
        ));
    }
    if hello.capability != REQUIRED_CAPABILITY {
        return Err(refuse(
            RejectReason::CapabilityMissing,
            format!("capability {REQUIRED_CAPABILITY} required"),
        ));
    }
    if hello.channel_name != channel_name || hello.descriptor.mesh_name != channel_name {
        return Err(refuse(
            RejectReason::MeshMismatch,
            format!("this server serves channel {channel_name:?}"),
        ));
    }
    let is_client = hello
        .descriptor
        .channels
        .iter()
        .any(|m| m.channel_name == channel_name && m.role == ChannelRole::Client);
    if !is_client {
        return Err(refuse(
            RejectReason::RoleMismatch,
            "hello must come from a channel client",
        ));
    }
    if !secret.verify_hello(
        &NO_ACCEPTOR_NONCE,
        &hello.nonce,
        &hello.descriptor,
        &hello.capability,
        &hello.proof,
    ) {
        return Err(refuse(
            RejectReason::AuthenticationFailed,
            "hello proof does not verify",
        ));
    }
    if hello.max_message_bytes == 0 {
        return Err(refuse(
            RejectReason::DescriptorMismatch,
            "maxMessageBytes must be the normalized (positive) limit",
        ));
    }
    Ok(hello.max_message_bytes.min(server_limit))
}

/// The server's `admit` record.
pub fn admit(
    secret: &MeshSecret,
    server: NodeDescriptor,
    client_nonce: &[u8; 32],
    server_nonce: [u8; 32],
    connection_generation: u64,
    limit: u64,
) -> Record {
    let proof = secret.admit_proof(
        client_nonce,
        &server_nonce,
        &server,
        REQUIRED_CAPABILITY,
        connection_generation,
    );
    Record::new(CommandBody::Admit(Admit {
        descriptor: server,
        connection_generation,
        receive_chunk_limit_bytes: 0,
        max_message_bytes: limit,
        nonce: server_nonce,
        proof,
    }))
}

/// What the client expects of the server behind an endpoint (from its descriptor).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExpectedServer {
    /// Server RID.
    pub rid: String,
    /// Lifecycle generation.
    pub lifecycle_generation: u64,
    /// Security identity.
    pub security_identity: String,
}

/// An admitted server as the client sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdmittedServer {
    /// Server identity.
    pub server: NodeFence,
    /// Connection generation liveness is stamped with.
    pub connection_generation: u64,
    /// Admitted complete-message limit.
    pub limit: u64,
    /// Weight in the channel.
    pub weight: u16,
    /// Runtime state.
    pub state: RuntimeState,
    /// Descriptor revision.
    pub revision: u64,
}

/// The client's check of an `admit`.
///
/// # Errors
/// The refusal, described as a reject reason and detail (the client reports it as the
/// server's not-ready reason).
pub fn check_admit(
    admit: &Admit,
    secret: &MeshSecret,
    client_nonce: &[u8; 32],
    channel_name: &str,
    own_limit: u64,
    expected: Option<&ExpectedServer>,
) -> Result<AdmittedServer, Refusal> {
    if !secret.verify_admit(
        client_nonce,
        &admit.nonce,
        &admit.descriptor,
        REQUIRED_CAPABILITY,
        admit.connection_generation,
        &admit.proof,
    ) {
        return Err(refuse(
            RejectReason::AuthenticationFailed,
            "admit proof does not verify",
        ));
    }
    let d = &admit.descriptor;
    if d.mesh_name != channel_name {
        return Err(refuse(
            RejectReason::MeshMismatch,
            format!("server admitted channel {:?}", d.mesh_name),
        ));
    }
    let Some(membership) = d
        .channels
        .iter()
        .find(|m| m.channel_name == channel_name && m.role == ChannelRole::Server)
    else {
        return Err(refuse(
            RejectReason::RoleMismatch,
            "admit descriptor has no server membership for the channel",
        ));
    };
    if let Some(e) = expected
        && (e.rid != d.node.rid
            || e.lifecycle_generation != d.node.lifecycle_generation
            || e.security_identity != d.security_identity)
    {
        return Err(refuse(
            RejectReason::DescriptorMismatch,
            format!(
                "expected server {}/{} but {}/{} answered",
                e.rid, e.lifecycle_generation, d.node.rid, d.node.lifecycle_generation
            ),
        ));
    }
    if admit.max_message_bytes == 0 || admit.max_message_bytes > own_limit {
        return Err(refuse(
            RejectReason::DescriptorMismatch,
            format!(
                "admitted maxMessageBytes {} is not in 1..={own_limit}",
                admit.max_message_bytes
            ),
        ));
    }
    Ok(AdmittedServer {
        server: d.node.clone(),
        connection_generation: admit.connection_generation,
        limit: admit.max_message_bytes,
        weight: membership.weight,
        state: d.state,
        revision: d.descriptor_revision,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn secret(s: &[u8]) -> MeshSecret {
        MeshSecret::from_bytes(s).unwrap()
    }

    fn client() -> SideIdentity {
        SideIdentity {
            channel_name: "lobby".into(),
            rid: "csc-1".into(),
            lifecycle_generation: 5,
            endpoint: "tcp://127.0.0.1:1".into(),
            security_identity: "zlink".into(),
        }
    }

    fn server() -> SideIdentity {
        SideIdentity {
            rid: "cs-1".into(),
            lifecycle_generation: 9,
            ..client()
        }
    }

    fn hello_body(r: &Record) -> &Hello {
        match &r.body {
            CommandBody::Hello(h) => h,
            other => panic!("{other:?}"),
        }
    }

    fn admit_body(r: &Record) -> &Admit {
        match &r.body {
            CommandBody::Admit(a) => a,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn admitted_limit_is_the_minimum_of_both_sides() {
        let s = secret(b"0123456789abcdef0");
        let h = hello(&s, &client(), 32 << 20, [1; 32]);
        assert_eq!(
            check_hello(hello_body(&h), &s, "lobby", 16 << 20),
            Ok(16 << 20)
        );
        assert_eq!(
            check_hello(hello_body(&h), &s, "lobby", 64 << 20),
            Ok(32 << 20)
        );
    }

    #[test]
    fn wrong_secret_and_wrong_channel_are_refused_with_their_reason() {
        let h = hello(&secret(b"0123456789abcdef0"), &client(), 1 << 20, [1; 32]);
        let other = secret(b"another-secret-0123");
        assert_eq!(
            check_hello(hello_body(&h), &other, "lobby", 1 << 20)
                .unwrap_err()
                .reason,
            RejectReason::AuthenticationFailed
        );
        let s = secret(b"0123456789abcdef0");
        assert_eq!(
            check_hello(hello_body(&h), &s, "chat", 1 << 20)
                .unwrap_err()
                .reason,
            RejectReason::MeshMismatch
        );
    }

    #[test]
    fn admit_is_checked_against_the_client_nonce_and_the_expected_identity() {
        let s = secret(b"0123456789abcdef0");
        let d = descriptor(&server(), ChannelRole::Server, 3, RuntimeState::Serving, 40);
        let a = admit(&s, d, &[1; 32], [2; 32], 77, 1 << 20);
        let ok = check_admit(admit_body(&a), &s, &[1; 32], "lobby", 1 << 20, None).unwrap();
        assert_eq!(ok.weight, 40);
        assert_eq!(ok.revision, 3);
        assert_eq!(ok.server.lifecycle_generation, 9);
        // A replayed admit (another hello's nonce) does not verify.
        assert_eq!(
            check_admit(admit_body(&a), &s, &[3; 32], "lobby", 1 << 20, None)
                .unwrap_err()
                .reason,
            RejectReason::AuthenticationFailed
        );
        // The descriptor promised another lifecycle of that RID.
        let stale = ExpectedServer {
            rid: "cs-1".into(),
            lifecycle_generation: 8,
            security_identity: "zlink".into(),
        };
        assert_eq!(
            check_admit(admit_body(&a), &s, &[1; 32], "lobby", 1 << 20, Some(&stale))
                .unwrap_err()
                .reason,
            RejectReason::DescriptorMismatch
        );
        // An admitted limit above our own is refused.
        assert_eq!(
            check_admit(admit_body(&a), &s, &[1; 32], "lobby", 1 << 19, None)
                .unwrap_err()
                .reason,
            RejectReason::DescriptorMismatch
        );
    }

    #[test]
    fn nonce_guard_refuses_a_replayed_nonce_and_stays_bounded() {
        let mut g = NonceGuard::new(2);
        assert!(g.first_use([1; 32]));
        assert!(!g.first_use([1; 32]));
        assert!(g.first_use([2; 32]));
        assert!(g.first_use([3; 32]));
        assert_eq!(g.seen.len(), 2);
    }
}
