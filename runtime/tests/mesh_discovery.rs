//! Automatic discovery through the Location Store — the embedded memory provider and a real
//! `redis-server` — plus the admission checks that use the store (stale owner lease) and the
//! Client–Client `NotRequired` rule (glossary §6).
#![allow(clippy::unwrap_used)]

mod common;
#[path = "../../store/tests/support/redis_server.rs"]
mod redis_server;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;

use common::*;
use zlink::mesh::config::RidConfig;
use zlink::mesh::discovery::DiscoveryBackend;
use zlink::mesh::{Handlers, PeerState};
use zlink_protocol::generated::{ObjectRole, RejectReason};
use zlink_store::clock::SystemClock;
use zlink_store::redis::{RedisStore, RedisStoreConfig};
use zlink_store::types::{
    DescriptorKey, DescriptorKind, DescriptorRecord, LeaseGrant, LeaseRead, OwnerToken,
    PublishOutcome,
};
use zlink_store::{MemoryStore, StoreError};

type BoxFut<'a, T> = Pin<Box<dyn Future<Output = Result<T, StoreError>> + Send + 'a>>;

/// One node's view of a shared store that counts the node's descriptor listings: one per
/// discovery round, plus one per admission check of a dialer (wire §4) when it accepts one.
struct PollCounting {
    inner: Arc<dyn DiscoveryBackend>,
    polls: AtomicU64,
}

impl PollCounting {
    fn new(inner: &Arc<dyn DiscoveryBackend>) -> Arc<Self> {
        Arc::new(Self {
            inner: Arc::clone(inner),
            polls: AtomicU64::new(0),
        })
    }

    fn polls(&self) -> u64 {
        self.polls.load(Ordering::SeqCst)
    }

    /// Wait until this node started `n` more listings. With no admission meanwhile they are
    /// discovery polls; the result of one is handed to the node before the next starts, so `n`
    /// more polls mean `n - 1` more rounds were handed over.
    async fn wait_rounds(&self, n: u64) {
        let target = self.polls() + n;
        eventually(&format!("{n} more discovery polls"), || {
            self.polls() >= target
        })
        .await;
    }
}

impl DiscoveryBackend for PollCounting {
    fn claim_lease<'a>(&'a self, owner_id: &'a str, ttl: Duration) -> BoxFut<'a, LeaseGrant> {
        self.inner.claim_lease(owner_id, ttl)
    }
    fn renew_lease<'a>(&'a self, token: &'a OwnerToken, ttl: Duration) -> BoxFut<'a, LeaseGrant> {
        self.inner.renew_lease(token, ttl)
    }
    fn read_lease<'a>(&'a self, owner_id: &'a str) -> BoxFut<'a, LeaseRead> {
        self.inner.read_lease(owner_id)
    }
    fn release_lease<'a>(&'a self, token: &'a OwnerToken) -> BoxFut<'a, bool> {
        self.inner.release_lease(token)
    }
    fn claim_routing_id<'a>(
        &'a self,
        owner: &'a OwnerToken,
        mesh: &'a str,
        rid: &'a str,
    ) -> BoxFut<'a, ()> {
        self.inner.claim_routing_id(owner, mesh, rid)
    }
    fn publish_descriptor<'a>(
        &'a self,
        owner: &'a OwnerToken,
        key: &'a DescriptorKey,
        lifecycle_generation: u64,
        revision: u64,
        content: Bytes,
    ) -> BoxFut<'a, PublishOutcome> {
        self.inner
            .publish_descriptor(owner, key, lifecycle_generation, revision, content)
    }
    fn remove_descriptor<'a>(
        &'a self,
        owner: &'a OwnerToken,
        key: &'a DescriptorKey,
    ) -> BoxFut<'a, bool> {
        self.inner.remove_descriptor(owner, key)
    }
    fn list_descriptors<'a>(
        &'a self,
        kind: DescriptorKind,
        scope: &'a str,
    ) -> BoxFut<'a, Vec<DescriptorRecord>> {
        self.polls.fetch_add(1, Ordering::SeqCst);
        self.inner.list_descriptors(kind, scope)
    }
}

async fn three_nodes_find_each_other(store: Arc<dyn DiscoveryBackend>) {
    let mut nodes = Vec::new();
    for i in 0..3 {
        let mut cfg = config("m", "unused");
        cfg.rid = RidConfig::Automatic {
            prefix: format!("n{i}"),
        };
        nodes.push(start_with_store(cfg, echo_handlers(), Arc::clone(&store)).await);
    }
    for a in &nodes {
        // Automatic RIDs are prefix-uuid-v4.
        assert!(
            zlink_protocol::ids::is_lowercase_uuid_v4(&a.rid()[3..]),
            "{}",
            a.rid()
        );
        for b in &nodes {
            if a.rid() != b.rid() {
                a.wait_ready(b.rid(), WAIT).await.unwrap();
            }
        }
    }
    // Exactly one connection per pair: both ends agree on its generation.
    for a in &nodes {
        for b in &nodes {
            if a.rid() < b.rid() {
                assert_eq!(
                    a.peer(b.rid()).unwrap().connection_generation,
                    b.peer(a.rid()).unwrap().connection_generation
                );
                let r: Echo = a
                    .request(
                        b.rid(),
                        &Echo {
                            text: "x".into(),
                            n: 1,
                        },
                        Duration::from_secs(5),
                    )
                    .await
                    .unwrap();
                assert_eq!(r.n, 2);
            }
        }
    }
    // A node that leaves is removed from the others' peer sets once its lease is released.
    let gone = nodes.pop().unwrap();
    let gone_rid = gone.rid().to_owned();
    gone.shutdown().await;
    for n in &nodes {
        let deadline = tokio::time::Instant::now() + WAIT;
        while n.peer(&gone_rid).is_some() && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(
            n.peer(&gone_rid).is_none(),
            "intent for a departed node was not removed"
        );
    }
    for n in nodes {
        n.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_discover_each_other_through_the_memory_store() {
    let store: Arc<dyn DiscoveryBackend> = Arc::new(MemoryStore::new(SystemClock));
    three_nodes_find_each_other(store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_discover_each_other_through_redis() {
    let server = redis_server::RedisServer::start().await;
    static NS: AtomicU64 = AtomicU64::new(0);
    let store = RedisStore::connect(
        &server.url(),
        RedisStoreConfig {
            namespace: format!("mesh-{}", NS.fetch_add(1, Ordering::Relaxed)),
            response_timeout: Duration::from_secs(2),
            connection_timeout: Duration::from_millis(500),
            reconnect_retries: 1,
        },
    )
    .await
    .unwrap();
    three_nodes_find_each_other(Arc::new(store)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_client_pairs_get_no_connection_and_show_not_required() {
    let store: Arc<dyn DiscoveryBackend> = Arc::new(MemoryStore::new(SystemClock));
    let mut ca = config("m", "client-a");
    ca.object_role = ObjectRole::Client;
    let mut cb = config("m", "client-b");
    cb.object_role = ObjectRole::Client;
    let mut cs = config("m", "server-s");
    cs.object_role = ObjectRole::Server;
    let a_store = PollCounting::new(&store);
    let a = start_with_store(ca, Handlers::new(), Arc::clone(&a_store) as _).await;
    let b = start_with_store(cb, Handlers::new(), Arc::clone(&store)).await;
    let s = start_with_store(cs, echo_handlers(), Arc::clone(&store)).await;
    a.wait_ready("server-s", WAIT).await.unwrap();
    b.wait_ready("server-s", WAIT).await.unwrap();
    let pa = a
        .wait_peer("client-b", WAIT, |p| p.state == PeerState::NotRequired)
        .await
        .unwrap();
    let pb = b
        .wait_peer("client-a", WAIT, |p| p.state == PeerState::NotRequired)
        .await
        .unwrap();
    assert_eq!(
        (pa.epochs, pb.epochs),
        (0, 0),
        "no connection was ever admitted"
    );
    assert!(!pa.state.is_failure());
    // It stays that way over several discovery rounds of client-a, each of which lists
    // client-b again.
    a_store.wait_rounds(4).await;
    let pa = a.peer("client-b").unwrap();
    assert_eq!(pa.state, PeerState::NotRequired);
    assert_eq!(pa.epochs, 0);
    assert_eq!(b.peer("client-a").unwrap().epochs, 0);
    for n in [a, b, s] {
        n.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn manual_client_client_dial_ends_not_required_on_both_sides() {
    let mut cb = config("m", "client-b");
    cb.object_role = ObjectRole::Client;
    let b = start(cb, Handlers::new()).await;
    let mut ca = config("m", "client-a");
    ca.object_role = ObjectRole::Client;
    ca.manual_peers.push(zlink::mesh::ManualPeer {
        endpoint: b.endpoint().to_owned(),
        expected_rid: Some("client-b".into()),
    });
    let a = start(ca, Handlers::new()).await;
    a.wait_peer("client-b", WAIT, |p| p.state == PeerState::NotRequired)
        .await
        .unwrap();
    b.wait_peer("client-a", WAIT, |p| p.state == PeerState::NotRequired)
        .await
        .unwrap();
    a.shutdown().await;
    b.shutdown().await;
}

/// The acceptor checks the dialer's owner lease in the store at admission (wire §4): once the
/// dialer's host lease is taken over by another claim, its re-admission is refused as
/// `StaleOwner`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dialer_whose_owner_lease_went_stale_is_rejected() {
    let mem = Arc::new(MemoryStore::new(SystemClock));
    let store: Arc<dyn DiscoveryBackend> = mem.clone();
    // node-a sorts first, so it dials node-b and node-b checks its lease.
    let a = start_with_store(config("m", "node-a"), Handlers::new(), Arc::clone(&store)).await;
    let b_store = PollCounting::new(&store);
    let b = start_with_store(
        config("m", "node-b"),
        echo_handlers(),
        Arc::clone(&b_store) as _,
    )
    .await;
    a.wait_ready("node-b", WAIT).await.unwrap();
    // node-b discovered node-a itself, not only admitted it: a discovery round of node-b listing
    // node-a was handed over (only a discovered peer is dropped when its descriptor goes, which
    // is what makes node-a dial again). Without this the claim below can win that race and the
    // first connection simply stays up.
    b_store.wait_rounds(2).await;
    // Another process claims node-a's host lease: node-a's token is stale from now on.
    zlink_store::LocationStore::claim_lease(mem.as_ref(), a.owner_id(), Duration::from_secs(5))
        .await
        .unwrap();
    let p = a
        .wait_peer("node-b", WAIT, |p| {
            p.state == PeerState::Rejected(RejectReason::StaleOwner)
        })
        .await
        .unwrap();
    assert_ne!(p.state, PeerState::Ready);
    assert!(b.metrics().rejected.load(Ordering::Relaxed) >= 1);
    a.shutdown().await;
    b.shutdown().await;
}
