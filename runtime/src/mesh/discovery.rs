//! Automatic discovery (glossary §6 "Automatic discovery", "MeshNode descriptor",
//! "Connection intent").
//!
//! The node publishes its MeshNode descriptor to the Location Store under its host owner
//! lease, renews the lease, and polls the live descriptors of its MeshName. [`desired_peers`]
//! turns one poll into the desired peer set — a pure function — and the node reconciles that
//! set into connection intents (one per peer; removing an intent is terminal).
//!
//! Only one side of a pair dials: the node whose RID sorts lower. Both sides hold an intent
//! (the other one expects and admits the dialer), so one physical connection carries the pair
//! and its FIFO order (see `docs/architecture.md`).

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use bytes::Bytes;
use zlink_protocol::generated::{ChannelRole, NodeDescriptor, ObjectRole};
use zlink_store::types::{
    DescriptorKey, DescriptorKind, DescriptorRecord, LeaseGrant, LeaseRead, OwnerToken,
    PublishOutcome,
};
use zlink_store::{LocationStore, StoreError};

type BoxFut<'a, T> = Pin<Box<dyn Future<Output = Result<T, StoreError>> + Send + 'a>>;

/// The part of the Location Store that discovery and admission use — MeshNode discovery and
/// classic fanout publisher descriptors alike — object-safe so the node and fanout are not
/// generic over the provider. Every [`LocationStore`] is one.
pub trait DiscoveryBackend: Send + Sync + 'static {
    /// See [`LocationStore::claim_lease`].
    fn claim_lease<'a>(&'a self, owner_id: &'a str, ttl: Duration) -> BoxFut<'a, LeaseGrant>;
    /// See [`LocationStore::renew_lease`].
    fn renew_lease<'a>(&'a self, token: &'a OwnerToken, ttl: Duration) -> BoxFut<'a, LeaseGrant>;
    /// See [`LocationStore::read_lease`].
    fn read_lease<'a>(&'a self, owner_id: &'a str) -> BoxFut<'a, LeaseRead>;
    /// See [`LocationStore::release_lease`].
    fn release_lease<'a>(&'a self, token: &'a OwnerToken) -> BoxFut<'a, bool>;
    /// See [`LocationStore::claim_routing_id`].
    fn claim_routing_id<'a>(
        &'a self,
        owner: &'a OwnerToken,
        mesh: &'a str,
        rid: &'a str,
    ) -> BoxFut<'a, ()>;
    /// See [`LocationStore::publish_descriptor`].
    fn publish_descriptor<'a>(
        &'a self,
        owner: &'a OwnerToken,
        key: &'a DescriptorKey,
        lifecycle_generation: u64,
        revision: u64,
        content: Bytes,
    ) -> BoxFut<'a, PublishOutcome>;
    /// See [`LocationStore::remove_descriptor`].
    fn remove_descriptor<'a>(
        &'a self,
        owner: &'a OwnerToken,
        key: &'a DescriptorKey,
    ) -> BoxFut<'a, bool>;
    /// See [`LocationStore::list_descriptors`]: every live descriptor of `kind` in `scope`
    /// (a MeshName, a ChannelName), ordered by RID.
    fn list_descriptors<'a>(
        &'a self,
        kind: DescriptorKind,
        scope: &'a str,
    ) -> BoxFut<'a, Vec<DescriptorRecord>>;
    /// The MeshNode descriptors of `mesh` ([`DiscoveryBackend::list_descriptors`] of
    /// `DescriptorKind::MeshNode`).
    fn list_mesh_nodes<'a>(&'a self, mesh: &'a str) -> BoxFut<'a, Vec<DescriptorRecord>> {
        self.list_descriptors(DescriptorKind::MeshNode, mesh)
    }
}

impl<S: LocationStore> DiscoveryBackend for S {
    fn claim_lease<'a>(&'a self, owner_id: &'a str, ttl: Duration) -> BoxFut<'a, LeaseGrant> {
        Box::pin(LocationStore::claim_lease(self, owner_id, ttl))
    }
    fn renew_lease<'a>(&'a self, token: &'a OwnerToken, ttl: Duration) -> BoxFut<'a, LeaseGrant> {
        Box::pin(LocationStore::renew_lease(self, token, ttl))
    }
    fn read_lease<'a>(&'a self, owner_id: &'a str) -> BoxFut<'a, LeaseRead> {
        Box::pin(LocationStore::read_lease(self, owner_id))
    }
    fn release_lease<'a>(&'a self, token: &'a OwnerToken) -> BoxFut<'a, bool> {
        Box::pin(LocationStore::release_lease(self, token))
    }
    fn claim_routing_id<'a>(
        &'a self,
        owner: &'a OwnerToken,
        mesh: &'a str,
        rid: &'a str,
    ) -> BoxFut<'a, ()> {
        Box::pin(LocationStore::claim_routing_id(self, owner, mesh, rid))
    }
    fn publish_descriptor<'a>(
        &'a self,
        owner: &'a OwnerToken,
        key: &'a DescriptorKey,
        lifecycle_generation: u64,
        revision: u64,
        content: Bytes,
    ) -> BoxFut<'a, PublishOutcome> {
        Box::pin(LocationStore::publish_descriptor(
            self,
            owner,
            key,
            lifecycle_generation,
            revision,
            content,
        ))
    }
    fn remove_descriptor<'a>(
        &'a self,
        owner: &'a OwnerToken,
        key: &'a DescriptorKey,
    ) -> BoxFut<'a, bool> {
        Box::pin(LocationStore::remove_descriptor(self, owner, key))
    }
    fn list_descriptors<'a>(
        &'a self,
        kind: DescriptorKind,
        scope: &'a str,
    ) -> BoxFut<'a, Vec<DescriptorRecord>> {
        Box::pin(LocationStore::list_descriptors(self, kind, scope))
    }
}

/// The store key of a node's descriptor.
pub fn descriptor_key(mesh: &str, rid: &str) -> DescriptorKey {
    DescriptorKey {
        kind: DescriptorKind::MeshNode,
        scope: mesh.to_owned(),
        rid: rid.to_owned(),
    }
}

/// Descriptor content as stored (JSON of the wire `NodeDescriptor`; deterministic, so the
/// store's same-revision-same-bytes idempotence holds).
pub fn encode_descriptor(d: &NodeDescriptor) -> Bytes {
    // Serializing a plain struct of strings and integers cannot fail.
    Bytes::from(serde_json::to_vec(d).unwrap_or_default())
}

/// Decode stored descriptor content; `None` for content another writer garbled.
pub fn decode_descriptor(content: &[u8]) -> Option<NodeDescriptor> {
    serde_json::from_slice(content).ok()
}

/// Whether two nodes need no connection: both Object Clients and neither holds a RouteMesh
/// Channel Server membership (glossary §6 "Full mesh", "Peer admission").
pub fn connection_not_required(a: &NodeDescriptor, b: &NodeDescriptor) -> bool {
    let server = |d: &NodeDescriptor| d.channels.iter().any(|c| c.role == ChannelRole::Server);
    a.object_role == ObjectRole::Client
        && b.object_role == ObjectRole::Client
        && !server(a)
        && !server(b)
}

/// One desired peer from a discovery poll.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DesiredPeer {
    /// The full descriptor expectation.
    pub descriptor: NodeDescriptor,
    /// The lease that published it.
    pub owner: OwnerToken,
    /// What to do.
    pub disposition: Disposition,
}

/// Whether and how to connect to a discovered peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Disposition {
    /// This node dials (its RID sorts lower).
    Dial,
    /// The peer dials; admit it when it comes.
    Await,
    /// No connection (Client–Client without server membership): shown as `NotRequired`.
    NotRequired,
}

/// The desired peer set for `me` given the live descriptors of its mesh (pure).
pub fn desired_peers(me: &NodeDescriptor, records: &[DescriptorRecord]) -> Vec<DesiredPeer> {
    let mut out = Vec::new();
    for r in records {
        let Some(d) = decode_descriptor(&r.content) else {
            continue;
        };
        if d.node.rid == me.node.rid || d.mesh_name != me.mesh_name || d.node.rid != r.key.rid {
            continue;
        }
        // One address, one listener: a descriptor at this node's own address is a predecessor
        // that ran here (a restart on the same port) and whose lease has not lapsed yet.
        if d.endpoint == me.endpoint {
            continue;
        }
        if d.node.lifecycle_generation != r.lifecycle_generation {
            continue;
        }
        let disposition = if connection_not_required(me, &d) {
            Disposition::NotRequired
        } else if me.node.rid < d.node.rid {
            Disposition::Dial
        } else {
            Disposition::Await
        };
        out.push(DesiredPeer {
            descriptor: d,
            owner: r.owner.clone(),
            disposition,
        });
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use zlink_protocol::generated::{ChannelMembership, NodeFence, RuntimeState};
    use zlink_store::types::StoreTime;

    fn d(rid: &str, role: ObjectRole) -> NodeDescriptor {
        NodeDescriptor {
            mesh_name: "m".into(),
            node: NodeFence {
                rid: zlink_protocol::shared_str::SharedStr::copy_from(rid),
                lifecycle_generation: 3,
            },
            descriptor_revision: 1,
            endpoint: format!("tcp://{rid}.test:7000"),
            security_identity: "s".into(),
            object_role: role,
            state: RuntimeState::Serving,
            application_version: 0,
            maintenance_wave: String::new(),
            placement_weight: 100,
            entry_spot_id: String::new(),
            channels: vec![],
            object_capabilities: vec![],
        }
    }

    fn rec(d: &NodeDescriptor) -> DescriptorRecord {
        DescriptorRecord {
            key: descriptor_key(&d.mesh_name, &d.node.rid),
            owner: OwnerToken {
                owner_id: format!("host-{}", d.node.rid),
                lease_generation: 1,
            },
            lifecycle_generation: d.node.lifecycle_generation,
            revision: 1,
            content: encode_descriptor(d),
            updated_at: StoreTime(0),
        }
    }

    #[test]
    fn lower_rid_dials_higher_rid_awaits_and_self_is_skipped() {
        let me = d("b", ObjectRole::Server);
        let recs = [
            rec(&d("a", ObjectRole::Server)),
            rec(&me),
            rec(&d("c", ObjectRole::Server)),
        ];
        let got: Vec<_> = desired_peers(&me, &recs)
            .into_iter()
            .map(|p| (p.descriptor.node.rid, p.disposition))
            .collect();
        assert_eq!(
            got,
            vec![
                ("a".into(), Disposition::Await),
                ("c".into(), Disposition::Dial)
            ]
        );
    }

    #[test]
    fn client_client_pairs_are_not_required_unless_one_serves_a_channel() {
        let me = d("a", ObjectRole::Client);
        let other = d("b", ObjectRole::Client);
        assert_eq!(
            desired_peers(&me, &[rec(&other)])[0].disposition,
            Disposition::NotRequired
        );
        let mut serving = other.clone();
        serving.channels.push(ChannelMembership {
            channel_name: "chat".into(),
            role: ChannelRole::Server,
            weight: 0,
        });
        assert_eq!(
            desired_peers(&me, &[rec(&serving)])[0].disposition,
            Disposition::Dial
        );
        assert_eq!(
            desired_peers(&me, &[rec(&d("b", ObjectRole::Server))])[0].disposition,
            Disposition::Dial
        );
    }

    #[test]
    fn garbled_or_mismatched_records_are_ignored() {
        let me = d("a", ObjectRole::Server);
        let mut bad = rec(&d("b", ObjectRole::Server));
        bad.content = Bytes::from_static(b"not json");
        let mut wrong_key = rec(&d("c", ObjectRole::Server));
        wrong_key.key.rid = "z".into();
        let mut wrong_gen = rec(&d("e", ObjectRole::Server));
        wrong_gen.lifecycle_generation = 99;
        assert!(desired_peers(&me, &[bad, wrong_key, wrong_gen]).is_empty());
    }

    #[test]
    fn a_predecessor_at_this_nodes_own_address_is_not_a_peer() {
        let me = d("b", ObjectRole::Server);
        let mut old = d("a", ObjectRole::Server);
        old.endpoint.clone_from(&me.endpoint);
        assert!(desired_peers(&me, &[rec(&old)]).is_empty());
    }
}
