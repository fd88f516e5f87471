//! ClientServer admission (wire §4 "Admission 절차", "ClientServer 방향"), as pure functions.
//!
//! ```text
//!  client (DEALER)                                   server (ROUTER)
//!  ── hello{clientServer, channelName, descriptor,
//!          maxMessageBytes = client limit, nonce n_c,
//!          proof = HMAC(secret, "zlink-cs-hello-v1" ‖ topology ‖ channelName ‖
//!                  maxMessageBytes ‖ n_c ‖ identity(client) ‖ role/weight/state ‖
//!                  target server RID ‖ target lifecycle)} ──►
//!                                   check: topology, capability, channel name, proof,
//!                                          nonce not seen before in this server lifecycle
//!  ◄── admit{descriptor(server), connectionGeneration, maxMessageBytes = min(client, server),
//!            nonce n_s, proof = HMAC(secret, "zlink-cs-admit-v1" ‖ topology ‖ n_c ‖ n_s ‖
//!                  identity(server) ‖ role/weight/state/revision ‖ gen ‖
//!                  maxMessageBytes ‖ receiveChunkLimitBytes)}
//!      or reject{reason, detail}                      (the reply leg of the hello only)
//!  check: proof, channel, expected identity (RID + lifecycle + security identity from the
//!         descriptor, when known), 0 < maxMessageBytes ≤ own limit
//! ```
//!
//! The proofs use [`MeshSecret`] with ClientServer's own labels, so a RouteMesh proof never
//! verifies as a ClientServer one, and they cover every field of the record that matters:
//! topology, channel name, `maxMessageBytes` (a tampered limit fails the proof), the role,
//! weight and state of the channel membership. ClientServer has no acceptor greeting before
//! `hello` (wire §4: the hello is the connection's first record), so the hello cannot answer a
//! server challenge. Instead it binds the *target*: a client that knows the server from its
//! descriptor (automatic discovery) proves the server's RID and lifecycle generation, and a
//! server verifies with its own, so a hello captured on the way to server A is refused by
//! server B of the same channel, and by A's next lifecycle. The server also refuses a client
//! nonce it already admitted in its lifecycle ([`NonceGuard`]), so a captured hello cannot be
//! replayed against the same server run. **Known gap**: a client dialing a manual endpoint
//! does not know the server's identity before admission; its hello binds an empty target
//! (`""`, 0), which every server of the channel accepts once per lifecycle, so such a hello
//! captured on the wire can be replayed once against another server of the channel (the
//! replayer still cannot read replies' authenticity away: admit binds the client's nonce, and
//! without the secret it cannot produce a new hello). The admit proof binds the client's fresh
//! nonce, so a client never accepts a replayed admit.
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

use crate::mesh::auth::{MeshSecret, identity_bytes};

const HELLO_LABEL: &[u8] = b"zlink-cs-hello-v1";
const ADMIT_LABEL: &[u8] = b"zlink-cs-admit-v1";

/// The channel membership fields a proof binds (name, role, weight), then the state and
/// revision of the descriptor.
fn membership_bytes(d: &NodeDescriptor) -> Vec<u8> {
    let mut out = Vec::with_capacity(64);
    for m in &d.channels {
        out.extend_from_slice(&(m.channel_name.len() as u32).to_be_bytes());
        out.extend_from_slice(m.channel_name.as_bytes());
        out.push(m.role.to_wire());
        out.extend_from_slice(&m.weight.to_be_bytes());
    }
    out.push(d.state.to_wire());
    out.extend_from_slice(&d.descriptor_revision.to_be_bytes());
    out
}

fn hello_proof(
    secret: &MeshSecret,
    h: &Hello,
    target_rid: &str,
    target_lifecycle: u64,
) -> [u8; 32] {
    secret.proof_over(&hello_parts(h, target_rid, target_lifecycle).each())
}

/// Owned parts of a proof message (borrowed as slices for the HMAC).
struct Parts(Vec<Vec<u8>>);

impl Parts {
    fn each(&self) -> Vec<&[u8]> {
        self.0.iter().map(Vec::as_slice).collect()
    }
}

fn hello_parts(h: &Hello, target_rid: &str, target_lifecycle: u64) -> Parts {
    Parts(vec![
        HELLO_LABEL.to_vec(),
        vec![h.topology.to_wire()],
        h.channel_name.as_bytes().to_vec(),
        h.max_message_bytes.to_be_bytes().to_vec(),
        h.nonce.to_vec(),
        identity_bytes(&h.descriptor, &h.capability),
        membership_bytes(&h.descriptor),
        target_rid.as_bytes().to_vec(),
        target_lifecycle.to_be_bytes().to_vec(),
    ])
}

fn admit_parts(a: &Admit, client_nonce: &[u8; 32]) -> Parts {
    Parts(vec![
        ADMIT_LABEL.to_vec(),
        vec![Topology::ClientServer.to_wire()],
        client_nonce.to_vec(),
        a.nonce.to_vec(),
        identity_bytes(&a.descriptor, REQUIRED_CAPABILITY),
        membership_bytes(&a.descriptor),
        a.connection_generation.to_be_bytes().to_vec(),
        a.max_message_bytes.to_be_bytes().to_vec(),
        a.receive_chunk_limit_bytes.to_be_bytes().to_vec(),
    ])
}

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
            rid: me.rid.clone().into(),
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

/// The client's `hello` record, bound to `target` (the server's RID and lifecycle generation
/// from its descriptor) when the client knows it, else to no particular server (manual
/// endpoint; see the module doc's known gap).
pub fn hello(
    secret: &MeshSecret,
    me: &SideIdentity,
    max_message_bytes: u64,
    nonce: [u8; 32],
    target: Option<&NodeFence>,
) -> Record {
    let d = descriptor(me, ChannelRole::Client, 1, RuntimeState::Serving, 0);
    let mut h = Hello {
        capability: REQUIRED_CAPABILITY.to_owned(),
        topology: Topology::ClientServer,
        channel_name: me.channel_name.clone(),
        descriptor: d,
        max_message_bytes,
        nonce,
        proof: [0; 32],
    };
    h.proof = match target {
        Some(t) => hello_proof(secret, &h, &t.rid, t.lifecycle_generation),
        None => hello_proof(secret, &h, "", 0),
    };
    Record::new(CommandBody::Hello(h))
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
    me: &NodeFence,
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
    let for_me = hello_parts(hello, &me.rid, me.lifecycle_generation);
    let for_any = hello_parts(hello, "", 0);
    if !secret.verify_over(&for_me.each(), &hello.proof)
        && !secret.verify_over(&for_any.each(), &hello.proof)
    {
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
    let mut a = Admit {
        descriptor: server,
        connection_generation,
        receive_chunk_limit_bytes: 0,
        max_message_bytes: limit,
        nonce: server_nonce,
        proof: [0; 32],
    };
    a.proof = secret.proof_over(&admit_parts(&a, client_nonce).each());
    Record::new(CommandBody::Admit(a))
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
    /// The server's security identity.
    pub security_identity: String,
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
    expected: &[ExpectedServer],
) -> Result<AdmittedServer, Refusal> {
    if !secret.verify_over(&admit_parts(admit, client_nonce).each(), &admit.proof) {
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
    // Any live descriptor behind the endpoint may answer (a restarted server's old
    // descriptor stays until its lease lapses); none known (manual endpoint) accepts any.
    if !expected.is_empty()
        && !expected.iter().any(|e| {
            e.rid == d.node.rid
                && e.lifecycle_generation == d.node.lifecycle_generation
                && e.security_identity == d.security_identity
        })
    {
        let want: Vec<String> = expected
            .iter()
            .map(|e| format!("{}/{}", e.rid, e.lifecycle_generation))
            .collect();
        return Err(refuse(
            RejectReason::DescriptorMismatch,
            format!(
                "expected server {} but {}/{} answered",
                want.join(" or "),
                d.node.rid,
                d.node.lifecycle_generation
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
        security_identity: d.security_identity.clone(),
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

    fn fence(me: &SideIdentity) -> NodeFence {
        NodeFence {
            rid: me.rid.clone().into(),
            lifecycle_generation: me.lifecycle_generation,
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
        let h = hello(&s, &client(), 32 << 20, [1; 32], None);
        assert_eq!(
            check_hello(hello_body(&h), &s, "lobby", 16 << 20, &fence(&server())),
            Ok(16 << 20)
        );
        assert_eq!(
            check_hello(hello_body(&h), &s, "lobby", 64 << 20, &fence(&server())),
            Ok(32 << 20)
        );
    }

    #[test]
    fn wrong_secret_and_wrong_channel_are_refused_with_their_reason() {
        let h = hello(
            &secret(b"0123456789abcdef0"),
            &client(),
            1 << 20,
            [1; 32],
            None,
        );
        let other = secret(b"another-secret-0123");
        assert_eq!(
            check_hello(hello_body(&h), &other, "lobby", 1 << 20, &fence(&server()))
                .unwrap_err()
                .reason,
            RejectReason::AuthenticationFailed
        );
        let s = secret(b"0123456789abcdef0");
        assert_eq!(
            check_hello(hello_body(&h), &s, "chat", 1 << 20, &fence(&server()))
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
        let ok = check_admit(admit_body(&a), &s, &[1; 32], "lobby", 1 << 20, &[]).unwrap();
        assert_eq!(ok.weight, 40);
        assert_eq!(ok.revision, 3);
        assert_eq!(ok.server.lifecycle_generation, 9);
        // A replayed admit (another hello's nonce) does not verify.
        assert_eq!(
            check_admit(admit_body(&a), &s, &[3; 32], "lobby", 1 << 20, &[])
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
            check_admit(
                admit_body(&a),
                &s,
                &[1; 32],
                "lobby",
                1 << 20,
                std::slice::from_ref(&stale)
            )
            .unwrap_err()
            .reason,
            RejectReason::DescriptorMismatch
        );
        // An admitted limit above our own is refused.
        assert_eq!(
            check_admit(admit_body(&a), &s, &[1; 32], "lobby", 1 << 19, &[])
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

    /// Review item 6: a hello bound to server A (RID + lifecycle from its descriptor) is
    /// refused by server B of the same channel and by A's next lifecycle; an unbound hello
    /// (manual endpoint) is accepted by any server of the channel (the documented gap).
    #[test]
    fn a_hello_bound_to_one_server_is_refused_by_another() {
        let s = secret(b"0123456789abcdef0");
        let a = fence(&server());
        let b = NodeFence {
            rid: "cs-2".into(),
            lifecycle_generation: 9,
        };
        let a_next = NodeFence {
            lifecycle_generation: 10,
            ..a.clone()
        };
        let h = hello(&s, &client(), 1 << 20, [1; 32], Some(&a));
        assert_eq!(
            check_hello(hello_body(&h), &s, "lobby", 1 << 20, &a),
            Ok(1 << 20)
        );
        for other in [&b, &a_next] {
            assert_eq!(
                check_hello(hello_body(&h), &s, "lobby", 1 << 20, other)
                    .unwrap_err()
                    .reason,
                RejectReason::AuthenticationFailed
            );
        }
        let unbound = hello(&s, &client(), 1 << 20, [2; 32], None);
        assert!(check_hello(hello_body(&unbound), &s, "lobby", 1 << 20, &b).is_ok());
    }

    /// Review item 7: the hello proof covers `maxMessageBytes` and the membership fields.
    #[test]
    fn tampering_a_hello_field_breaks_its_proof() {
        let s = secret(b"0123456789abcdef0");
        let h = hello(&s, &client(), 1 << 20, [1; 32], None);
        let mut t = hello_body(&h).clone();
        t.max_message_bytes = 64 << 20;
        assert_eq!(
            check_hello(&t, &s, "lobby", 64 << 20, &fence(&server()))
                .unwrap_err()
                .reason,
            RejectReason::AuthenticationFailed
        );
        let mut t = hello_body(&h).clone();
        t.descriptor.channels[0].weight = 7;
        assert_eq!(
            check_hello(&t, &s, "lobby", 1 << 20, &fence(&server()))
                .unwrap_err()
                .reason,
            RejectReason::AuthenticationFailed
        );
    }

    /// Review item 7: a valid admit whose `maxMessageBytes` (or weight, or state) was changed
    /// on the way is refused by the client.
    #[test]
    fn tampering_an_admit_field_is_refused_by_the_client() {
        let s = secret(b"0123456789abcdef0");
        let d = descriptor(
            &server(),
            ChannelRole::Server,
            1,
            RuntimeState::Serving,
            100,
        );
        let a = admit(&s, d, &[1; 32], [2; 32], 7, 1 << 20);
        assert!(check_admit(admit_body(&a), &s, &[1; 32], "lobby", 1 << 20, &[]).is_ok());
        let mut t = admit_body(&a).clone();
        t.max_message_bytes = 1 << 19;
        let err = check_admit(&t, &s, &[1; 32], "lobby", 1 << 20, &[]).unwrap_err();
        assert_eq!(err.reason, RejectReason::AuthenticationFailed);
        let mut t = admit_body(&a).clone();
        t.descriptor.channels[0].weight = 10_000;
        assert!(check_admit(&t, &s, &[1; 32], "lobby", 1 << 20, &[]).is_err());
        let mut t = admit_body(&a).clone();
        t.descriptor.state = RuntimeState::Draining;
        assert!(check_admit(&t, &s, &[1; 32], "lobby", 1 << 20, &[]).is_err());
    }
}
