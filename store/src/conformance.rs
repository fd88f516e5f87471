//! One conformance suite for every provider.
//!
//! Each case is an `async fn(&H)` over a [`Harness`], which gives the store plus the few
//! controls a test needs that the store API deliberately lacks (moving store time, setting a
//! counter, taking the store down). `store/tests/memory_conformance.rs` and
//! `store/tests/redis_conformance.rs` run every case through [`conformance_cases!`] against the
//! memory provider and a real `redis-server`.
//!
//! Time: the memory harness turns a manual clock; the Redis harness really waits, so cases use
//! short TTLs (a few hundred milliseconds) and [`Harness::advance`] past them.

use std::collections::BTreeSet;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use crate::error::{StaleReason, StoreError};
use crate::location::{LocationStore, RelocationStore};
use crate::memory::counters;
use crate::types::{
    AggregateOp, AuthorityKey, AuthorityRead, AuthorityState, CapacityLimits, DescriptorKey,
    DescriptorKind, LeaseRead, NodeRef, ObjectKind, OwnerToken, PublishOutcome, Reservation,
    ReserveRequest, TargetFence, TransferOwner,
};

/// What a conformance case needs besides the store.
pub trait Harness: Send + Sync + 'static {
    /// The provider under test.
    type Store: LocationStore + RelocationStore + Clone;

    /// The store.
    fn store(&self) -> &Self::Store;

    /// Let at least `d` of store time pass.
    fn advance(&self, d: Duration) -> impl Future<Output = ()> + Send;

    /// Set a store-global counter (one of [`counters::ALL`]) to `value`.
    fn set_counter(&self, name: &'static str, value: u64) -> impl Future<Output = ()> + Send;

    /// Make the store unavailable (memory: outage hook; Redis: stop the server).
    fn begin_outage(&self) -> impl Future<Output = ()> + Send;

    /// Bring the store back (memory: end the hook; Redis: restart the server from its AOF).
    fn end_outage(&self) -> impl Future<Output = ()> + Send;

    /// A prefix unique to this case, so cases sharing one store do not collide.
    fn unique(&self, what: &str) -> String;
}

/// A lease TTL long enough never to lapse during a case.
pub const LONG: Duration = Duration::from_secs(60);
/// A lease TTL a case lets lapse.
pub const SHORT: Duration = Duration::from_millis(300);

fn expect_err<T: std::fmt::Debug>(
    r: crate::error::Result<T>,
    kind: &str,
    what: &str,
) -> StoreError {
    match r {
        Ok(v) => panic!("{what}: expected {kind}, got Ok({v:?})"),
        Err(e) => {
            assert_eq!(e.kind(), kind, "{what}: expected {kind}, got {e}");
            e
        }
    }
}

fn expect_stale<T: std::fmt::Debug>(r: crate::error::Result<T>, reason: StaleReason, what: &str) {
    match expect_err(r, "Stale", what) {
        StoreError::Stale { reason: got, .. } => assert_eq!(got, reason, "{what}"),
        other => panic!("{what}: {other}"),
    }
}

/// A node with a live lease and a published MeshNode descriptor.
pub struct TestNode {
    /// Its lease token.
    pub token: OwnerToken,
    /// Its node identity.
    pub node: NodeRef,
}

impl TestNode {
    /// The target fence of this node.
    pub fn target(&self) -> TargetFence {
        TargetFence {
            node: self.node.clone(),
            owner: self.token.clone(),
        }
    }
}

/// Claim a lease and publish a descriptor for a node called `name`.
pub async fn node<H: Harness>(h: &H, name: &str) -> TestNode {
    let s = h.store();
    let owner = h.unique(name);
    let grant = s.claim_lease(&owner, LONG).await.expect("claim");
    let node = NodeRef {
        mesh: h.unique("mesh"),
        rid: format!("{owner}-rid"),
        lifecycle_generation: 7,
    };
    let key = DescriptorKey {
        kind: DescriptorKind::MeshNode,
        scope: node.mesh.clone(),
        rid: node.rid.clone(),
    };
    s.publish_descriptor(
        &grant.token,
        &key,
        7,
        1,
        Bytes::from_static(b"{\"node\":1}"),
    )
    .await
    .expect("publish");
    TestNode {
        token: grant.token,
        node,
    }
}

fn request(h: &impl Harness, key: &AuthorityKey, id: &str, target: &TestNode) -> ReserveRequest {
    ReserveRequest {
        key: key.clone(),
        reservation_id: h.unique(id),
        object_kind: ObjectKind::Spot,
        stable_type: "Room".into(),
        target: target.target(),
        capacity_delta: 1,
        content: None,
        payload: Bytes::from_static(b"initial"),
    }
}

fn spot_key(h: &impl Harness, id: &str) -> AuthorityKey {
    AuthorityKey::new(ObjectKind::Spot, &h.unique(id)).expect("valid id")
}

async fn ready<H: Harness>(
    h: &H,
    key: &AuthorityKey,
    target: &TestNode,
) -> crate::types::AuthoritySnapshot {
    let s = h.store();
    let res = s
        .reserve(&request(h, key, "r", target))
        .await
        .expect("reserve");
    s.commit_ready(&res, Bytes::from_static(b"ready"))
        .await
        .expect("commit")
}

async fn read<H: Harness>(h: &H, key: &AuthorityKey) -> Option<crate::types::AuthoritySnapshot> {
    match h.store().read_authority(key).await.expect("read") {
        AuthorityRead::Found(s) => Some(*s),
        AuthorityRead::Missing { .. } => None,
    }
}

/// `read_route` returns the authority record and its owner's live lease in one read: nothing
/// for a missing record; the lease while it lives; the record without a lease once the lease
/// expired by store time (authority itself never expires, routing §2.2).
pub async fn read_route_returns_the_record_with_its_live_owner_lease<H: Harness>(h: &H) {
    let s = h.store();
    let missing = s.read_route(&spot_key(h, "nothing")).await.expect("read");
    assert!(matches!(missing.authority, AuthorityRead::Missing { .. }));
    assert_eq!(missing.owner_lease, None);
    read_route_of_an_owner(h, &h.unique("short-host")).await;
}

/// `read_route` finds the live lease of an owner whose ID needs JSON escapes (a quote, a
/// backslash, a slash): the Redis script reads the owner ID out of the record's canonical JSON
/// without decoding all of it, and must fall back to a full decode for such an ID.
pub async fn read_route_finds_the_lease_of_an_owner_whose_id_needs_escapes<H: Harness>(h: &H) {
    read_route_of_an_owner(h, &h.unique(r#"odd "host" \ a/b"#)).await;
}

/// A Ready record owned by `owner` (with a short lease): the route read returns the record with
/// that owner's live lease, and no lease once it expired.
async fn read_route_of_an_owner<H: Harness>(h: &H, owner: &str) {
    let s = h.store();
    let grant = s.claim_lease(owner, SHORT).await.expect("claim");
    let node = NodeRef {
        mesh: h.unique("mesh"),
        rid: h.unique("routed-rid"),
        lifecycle_generation: 7,
    };
    let dkey = DescriptorKey {
        kind: DescriptorKind::MeshNode,
        scope: node.mesh.clone(),
        rid: node.rid.clone(),
    };
    s.publish_descriptor(&grant.token, &dkey, 7, 1, Bytes::from_static(b"{}"))
        .await
        .expect("publish");
    let target = TestNode {
        token: grant.token.clone(),
        node,
    };
    let key = spot_key(h, "routed");
    let committed = ready(h, &key, &target).await;
    let r = s.read_route(&key).await.expect("read");
    match &r.authority {
        AuthorityRead::Found(a) => {
            assert_eq!(a.state, AuthorityState::Ready);
            assert_eq!(a.store_version, committed.store_version);
            assert_eq!(a.owner, grant.token);
        }
        AuthorityRead::Missing { .. } => panic!("record missing"),
    }
    let lease = r.owner_lease.expect("live lease");
    assert_eq!(lease.token, grant.token);
    assert_eq!(lease.lease_expires_at, grant.lease_expires_at);

    h.advance(SHORT + Duration::from_millis(50)).await;
    let r = s.read_route(&key).await.expect("read after expiry");
    assert!(matches!(r.authority, AuthorityRead::Found(_)));
    assert_eq!(r.owner_lease, None, "an expired lease is not returned");
}

/// Every claim issues a new lease generation, even for the same owner id; the older token is
/// stale from then on.
pub async fn claim_issues_a_new_lease_generation_every_time<H: Harness>(h: &H) {
    let s = h.store();
    let owner = h.unique("host");
    let a = s.claim_lease(&owner, LONG).await.expect("claim a");
    let b = s.claim_lease(&owner, LONG).await.expect("claim b");
    assert_ne!(a.token.lease_generation, b.token.lease_generation);
    assert!(b.token.lease_generation > a.token.lease_generation);
    expect_stale(
        s.renew_lease(&a.token, LONG).await,
        StaleReason::LeaseNotLive,
        "renew old token",
    );
    s.renew_lease(&b.token, LONG)
        .await
        .expect("renew current token");
    expect_err(
        s.claim_lease("", LONG).await,
        "InvalidArgument",
        "empty owner id",
    );
    expect_err(
        s.claim_lease(&owner, Duration::ZERO).await,
        "InvalidArgument",
        "zero ttl",
    );
    match s.read_lease(&owner).await.expect("read") {
        LeaseRead::Found {
            token,
            lease_expires_at,
            store_now,
        } => {
            assert_eq!(token, b.token);
            assert!(lease_expires_at > store_now);
        }
        LeaseRead::Missing { .. } => panic!("lease should be live"),
    }
}

/// A lease lapses by store time: reads as Missing and cannot be renewed.
pub async fn lease_expires_by_store_time<H: Harness>(h: &H) {
    let s = h.store();
    let owner = h.unique("host");
    let grant = s.claim_lease(&owner, SHORT).await.expect("claim");
    assert_eq!(
        grant.lease_expires_at.millis() - grant.store_now.millis(),
        300
    );
    h.advance(SHORT + Duration::from_millis(50)).await;
    assert!(matches!(
        s.read_lease(&owner).await.expect("read"),
        LeaseRead::Missing { .. }
    ));
    expect_stale(
        s.renew_lease(&grant.token, LONG).await,
        StaleReason::LeaseNotLive,
        "renew expired",
    );
}

/// A renewal moves the expiry and the fencing deadline (lease deadline minus the margin).
pub async fn renewal_moves_the_fencing_deadline<H: Harness>(h: &H) {
    let s = h.store();
    let grant = s.claim_lease(&h.unique("host"), LONG).await.expect("claim");
    let margin = Duration::from_secs(5);
    assert_eq!(
        grant.fencing_deadline(margin).millis(),
        grant.lease_expires_at.millis() - 5_000
    );
    assert_eq!(grant.fencing_delay(margin), Duration::from_secs(55));
    h.advance(Duration::from_millis(20)).await;
    let renewed = s.renew_lease(&grant.token, LONG).await.expect("renew");
    assert!(renewed.lease_expires_at > grant.lease_expires_at);
    assert!(renewed.fencing_deadline(margin) > grant.fencing_deadline(margin));
}

/// Releasing a lease removes its descriptors and RID claims; releasing a stale token does nothing.
pub async fn release_takes_descriptors_and_claims_with_it<H: Harness>(h: &H) {
    let s = h.store();
    let n = node(h, "host").await;
    s.claim_routing_id(&n.token, &n.node.mesh, "rid-a")
        .await
        .expect("claim rid");
    assert_eq!(
        s.list_descriptors(DescriptorKind::MeshNode, &n.node.mesh)
            .await
            .expect("list")
            .len(),
        1
    );
    assert!(s.release_lease(&n.token).await.expect("release"));
    assert!(!s.release_lease(&n.token).await.expect("second release"));
    assert!(
        s.list_descriptors(DescriptorKind::MeshNode, &n.node.mesh)
            .await
            .expect("list")
            .is_empty()
    );
    let other = s
        .claim_lease(&h.unique("other"), LONG)
        .await
        .expect("claim");
    s.claim_routing_id(&other.token, &n.node.mesh, "rid-a")
        .await
        .expect("rid free again");
}

/// Term leases: a new holder gets a higher term; the same holder renews the same term; a live
/// lease held by another is refused.
pub async fn term_lease_terms_increase_with_each_holder<H: Harness>(h: &H) {
    let s = h.store();
    let a = s.claim_lease(&h.unique("a"), LONG).await.expect("a").token;
    let b = s.claim_lease(&h.unique("b"), LONG).await.expect("b").token;
    let name = h.unique("slot-17");
    let t1 = s
        .acquire_term_lease(&name, &a, 3, SHORT)
        .await
        .expect("a acquires");
    assert_eq!(t1.term, 1);
    let t1b = s
        .acquire_term_lease(&name, &a, 4, SHORT)
        .await
        .expect("a renews");
    assert_eq!((t1b.term, t1b.config_epoch), (1, 4));
    expect_stale(
        s.acquire_term_lease(&name, &b, 4, SHORT).await,
        StaleReason::LeaseNotLive,
        "b while a holds",
    );
    h.advance(SHORT + Duration::from_millis(50)).await;
    assert!(s.read_term_lease(&name).await.expect("read").is_none());
    let t2 = s
        .acquire_term_lease(&name, &b, 4, LONG)
        .await
        .expect("b after expiry");
    assert_eq!(t2.term, 2);
    assert!(
        !s.release_term_lease(&name, &a, 1)
            .await
            .expect("stale release")
    );
    assert!(s.release_term_lease(&name, &b, 2).await.expect("release"));
    let t3 = s
        .acquire_term_lease(&name, &a, 5, LONG)
        .await
        .expect("a again");
    assert_eq!(t3.term, 3);
}

/// DescriptorRevision ordering (wire §4): same revision + same bytes is idempotent; same
/// revision + other bytes or a lower revision is a conflict; a new lifecycle replaces.
pub async fn descriptor_revisions_are_ordered<H: Harness>(h: &H) {
    let s = h.store();
    let grant = s.claim_lease(&h.unique("host"), LONG).await.expect("claim");
    let key = DescriptorKey {
        kind: DescriptorKind::ClientServerServer,
        scope: h.unique("chat"),
        rid: "srv-1".into(),
    };
    let t = &grant.token;
    let v = |b: &'static [u8]| Bytes::from_static(b);
    assert_eq!(
        s.publish_descriptor(t, &key, 1, 5, v(b"five"))
            .await
            .expect("p5"),
        PublishOutcome::Published
    );
    assert_eq!(
        s.publish_descriptor(t, &key, 1, 5, v(b"five"))
            .await
            .expect("p5 again"),
        PublishOutcome::Unchanged
    );
    expect_err(
        s.publish_descriptor(t, &key, 1, 5, v(b"other")).await,
        "Conflict",
        "same revision other bytes",
    );
    expect_err(
        s.publish_descriptor(t, &key, 1, 4, v(b"four")).await,
        "Conflict",
        "lower revision",
    );
    assert_eq!(
        s.publish_descriptor(t, &key, 1, 6, v(b"six"))
            .await
            .expect("p6"),
        PublishOutcome::Published
    );
    assert_eq!(
        s.publish_descriptor(t, &key, 2, 1, v(b"new life"))
            .await
            .expect("new lifecycle"),
        PublishOutcome::Published
    );
    let list = s
        .list_descriptors(DescriptorKind::ClientServerServer, &key.scope)
        .await
        .expect("list");
    assert_eq!(list.len(), 1);
    assert_eq!(
        (
            list[0].lifecycle_generation,
            list[0].revision,
            list[0].content.clone()
        ),
        (2, 1, v(b"new life"))
    );
    expect_err(
        s.publish_descriptor(t, &key, 2, 0, v(b"x")).await,
        "InvalidArgument",
        "revision 0",
    );
}

/// Descriptors disappear when their lease expires by store time.
pub async fn descriptors_disappear_with_an_expired_lease<H: Harness>(h: &H) {
    let s = h.store();
    let grant = s
        .claim_lease(&h.unique("host"), SHORT)
        .await
        .expect("claim");
    let key = DescriptorKey {
        kind: DescriptorKind::FanoutPublisher,
        scope: h.unique("ticker"),
        rid: "pub-1".into(),
    };
    s.publish_descriptor(&grant.token, &key, 1, 1, Bytes::from_static(b"d"))
        .await
        .expect("publish");
    assert_eq!(
        s.list_descriptors(DescriptorKind::FanoutPublisher, &key.scope)
            .await
            .expect("list")
            .len(),
        1
    );
    h.advance(SHORT + Duration::from_millis(50)).await;
    assert!(
        s.list_descriptors(DescriptorKind::FanoutPublisher, &key.scope)
            .await
            .expect("list")
            .is_empty()
    );
    expect_stale(
        s.publish_descriptor(&grant.token, &key, 1, 2, Bytes::from_static(b"d"))
            .await,
        StaleReason::LeaseNotLive,
        "publish on expired lease",
    );
}

/// An RID held by another live lease is a `RoutingIdConflict`; after that lease expires it is free.
pub async fn routing_id_claims_conflict_until_the_holder_expires<H: Harness>(h: &H) {
    let s = h.store();
    let mesh = h.unique("mesh");
    let a = s.claim_lease(&h.unique("a"), SHORT).await.expect("a").token;
    let b = s.claim_lease(&h.unique("b"), LONG).await.expect("b").token;
    s.claim_routing_id(&a, &mesh, "zone-1")
        .await
        .expect("a claims");
    s.claim_routing_id(&a, &mesh, "zone-1")
        .await
        .expect("a re-claims");
    expect_err(
        s.claim_routing_id(&b, &mesh, "zone-1").await,
        "RoutingIdConflict",
        "b claims",
    );
    h.advance(SHORT + Duration::from_millis(50)).await;
    s.claim_routing_id(&b, &mesh, "zone-1")
        .await
        .expect("b after a expired");
}

/// Reserve → commit: generations issued, Creating → Ready, Pending → Active, capacity charged.
pub async fn reserve_then_commit_makes_a_ready_authority<H: Harness>(h: &H) {
    let s = h.store();
    let n = node(h, "target").await;
    let key = spot_key(h, "room-1");
    let res = s
        .reserve(&request(h, &key, "r1", &n))
        .await
        .expect("reserve");
    let creating = read(h, &key).await.expect("creating record");
    assert_eq!(creating.state, AuthorityState::Creating);
    assert_eq!(
        creating.allocation.state,
        crate::types::AllocationState::Pending
    );
    assert_eq!(creating.object_generation, res.object_generation);
    assert_eq!(
        creating
            .pending_creation
            .as_ref()
            .map(|p| p.reservation_version),
        Some(res.reservation_version)
    );
    assert_eq!(s.capacity_use(&n.node).await.expect("use").spots, 1);
    let snap = s
        .commit_ready(&res, Bytes::from_static(b"members"))
        .await
        .expect("commit");
    assert_eq!(snap.state, AuthorityState::Ready);
    assert_eq!(snap.allocation.state, crate::types::AllocationState::Active);
    assert!(snap.pending_creation.is_none());
    assert!(snap.store_version > res.store_version);
    assert_eq!(snap.object_generation, res.object_generation);
    assert_eq!(
        snap.authority_owner_generation,
        res.authority_owner_generation
    );
    assert_eq!(snap.owner, n.token);
    assert_eq!(snap.payload, Bytes::from_static(b"members"));
    assert_eq!(strip(read(h, &key).await.expect("ready")), strip(snap));
    expect_stale(
        s.commit_ready(&res, Bytes::new()).await,
        StaleReason::Reservation,
        "second commit",
    );
}

/// A snapshot without its `store_now`, for comparing records read at different times.
fn strip(mut s: crate::types::AuthoritySnapshot) -> crate::types::AuthoritySnapshot {
    s.store_now = crate::types::StoreTime(0);
    s
}

/// Same reservation ID + same request returns the earlier reservation; a different request
/// with that ID is a `Conflict`.
pub async fn reservation_replay_is_idempotent<H: Harness>(h: &H) {
    let s = h.store();
    let n = node(h, "target").await;
    let key = spot_key(h, "room-2");
    let req = request(h, &key, "replay", &n);
    let first = s.reserve(&req).await.expect("reserve");
    let again = s.reserve(&req).await.expect("replay");
    assert_eq!(first, again);
    let mut other = req.clone();
    other.stable_type = "Lobby".into();
    expect_err(s.reserve(&other).await, "Conflict", "same id other request");
    assert_eq!(
        s.capacity_use(&n.node).await.expect("use").spots,
        1,
        "replay charges once"
    );
}

/// An existing record of the same kind and type is `AlreadyExists` (with the winner's
/// snapshot); of another type, `SpotIdConflict`.
pub async fn reserve_on_an_existing_object_reports_it<H: Harness>(h: &H) {
    let s = h.store();
    let n = node(h, "target").await;
    let key = spot_key(h, "room-3");
    let snap = ready(h, &key, &n).await;
    match expect_err(
        s.reserve(&request(h, &key, "late", &n)).await,
        "AlreadyExists",
        "same type",
    ) {
        StoreError::AlreadyExists(existing) => {
            assert_eq!(existing.object_generation, snap.object_generation)
        }
        other => panic!("{other}"),
    }
    let mut other = request(h, &key, "other-type", &n);
    other.stable_type = "Lobby".into();
    expect_err(s.reserve(&other).await, "SpotIdConflict", "other type");
}

/// Reserve checks the target's live lease and its descriptor lifecycle.
pub async fn reserve_requires_a_live_target_with_a_matching_descriptor<H: Harness>(h: &H) {
    let s = h.store();
    let n = node(h, "target").await;
    let key = spot_key(h, "room-4");
    let mut req = request(h, &key, "bad-life", &n);
    req.target.node.lifecycle_generation = 8;
    expect_stale(
        s.reserve(&req).await,
        StaleReason::Descriptor,
        "wrong lifecycle",
    );
    let mut req = request(h, &key, "bad-lease", &n);
    req.target.owner.lease_generation += 1_000_000;
    expect_stale(
        s.reserve(&req).await,
        StaleReason::LeaseNotLive,
        "wrong lease",
    );
    let mut req = request(h, &key, "no-type", &n);
    req.stable_type = String::new();
    expect_err(
        s.reserve(&req).await,
        "InvalidArgument",
        "empty stable type",
    );
    assert!(read(h, &key).await.is_none(), "nothing written");
}

/// Capacity limits (0 = unlimited) are enforced at reserve, and abort returns the capacity.
pub async fn capacity_limits_are_enforced_and_returned<H: Harness>(h: &H) {
    let s = h.store();
    let n = node(h, "target").await;
    s.set_capacity_limits(
        &n.token,
        &n.node,
        CapacityLimits {
            actors: 0,
            spots: 1,
        },
    )
    .await
    .expect("limits");
    let k1 = spot_key(h, "cap-1");
    let k2 = spot_key(h, "cap-2");
    let r1 = s
        .reserve(&request(h, &k1, "c1", &n))
        .await
        .expect("first fits");
    expect_err(
        s.reserve(&request(h, &k2, "c2", &n)).await,
        "CapacityExhausted",
        "second",
    );
    s.abort(&r1).await.expect("abort");
    assert!(read(h, &k1).await.is_none());
    assert_eq!(s.capacity_use(&n.node).await.expect("use").spots, 0);
    s.reserve(&request(h, &k2, "c3", &n))
        .await
        .expect("fits after abort");
}

/// 64 concurrent reserves of one key: exactly one wins, every loser sees the winner.
pub async fn concurrent_reserve_storm_has_exactly_one_winner<H: Harness>(h: &Arc<H>) {
    let n = node(h.as_ref(), "target").await;
    let key = spot_key(h.as_ref(), "contended");
    let mut tasks = Vec::new();
    for i in 0..64 {
        let h = Arc::clone(h);
        let req = request(h.as_ref(), &key, &format!("storm-{i}"), &n);
        tasks.push(tokio::spawn(async move { h.store().reserve(&req).await }));
    }
    let mut winners = Vec::new();
    let mut seen = BTreeSet::new();
    for t in tasks {
        match t.await.expect("task") {
            Ok(res) => winners.push(res),
            Err(StoreError::AlreadyExists(snap)) => {
                seen.insert(snap.object_generation);
            }
            Err(e) => panic!("unexpected {e}"),
        }
    }
    assert_eq!(winners.len(), 1, "exactly one winner");
    let winner = &winners[0];
    assert!(
        seen.iter().all(|g| *g == winner.object_generation),
        "losers see the winner: {seen:?}"
    );
    assert_eq!(seen.len(), 1);
}

/// Every conditional operation rejects a stale fence and changes nothing.
pub async fn stale_fences_are_rejected_by_every_conditional_operation<H: Harness>(h: &H) {
    let s = h.store();
    let n = node(h, "owner").await;
    let m = node(h, "other").await;
    let key = spot_key(h, "fenced");
    let snap = ready(h, &key, &n).await;
    let good = snap.fence();
    let before = read(h, &key).await.expect("record");

    let mut f = good.clone();
    f.store_version += 1;
    expect_stale(
        s.preserve(&f, Bytes::new()).await,
        StaleReason::StoreVersion,
        "preserve store version",
    );
    let mut f = good.clone();
    f.object_generation += 1;
    expect_stale(
        s.set_state(&f, AuthorityState::Ready, AuthorityState::Closing)
            .await,
        StaleReason::ObjectGeneration,
        "set_state object gen",
    );
    let mut f = good.clone();
    f.authority_owner_generation += 1;
    expect_stale(
        s.transfer_owner(&TransferOwner {
            source: f,
            target: m.target(),
            payload: None,
        })
        .await,
        StaleReason::OwnerGeneration,
        "transfer owner gen",
    );
    let mut f = good.clone();
    f.owner.lease_generation += 1;
    expect_stale(
        s.delete_fenced(&f).await,
        StaleReason::Owner,
        "delete owner",
    );
    let mut f = good.clone();
    f.store_version += 1;
    expect_stale(
        s.commit_aggregate(&[AggregateOp::Check(f)]).await,
        StaleReason::StoreVersion,
        "aggregate",
    );
    expect_stale(
        s.set_state(&good, AuthorityState::Relocating, AuthorityState::Ready)
            .await,
        StaleReason::State,
        "wrong from-state",
    );
    let fake = Reservation {
        key: key.clone(),
        reservation_id: "nope".into(),
        store_version: good.store_version,
        object_generation: good.object_generation,
        authority_owner_generation: good.authority_owner_generation,
        reservation_version: 1,
        target: n.target(),
    };
    expect_stale(
        s.commit_ready(&fake, Bytes::new()).await,
        StaleReason::Reservation,
        "commit on ready record",
    );
    expect_stale(
        s.abort(&fake).await,
        StaleReason::Reservation,
        "abort on ready record",
    );
    assert_eq!(
        strip(read(h, &key).await.expect("record")),
        strip(before),
        "unchanged"
    );
}

/// Relocation CAS: ObjectGeneration kept, new AuthorityOwnerGeneration, owner and capacity move,
/// the source fence becomes stale; the target must hold a live lease and publish its MeshNode
/// descriptor under it and its lifecycle.
pub async fn transfer_owner_switches_owner_and_keeps_the_incarnation<H: Harness>(h: &H) {
    let s = h.store();
    let src = node(h, "source").await;
    let dst = node(h, "target").await;
    let key = spot_key(h, "moving");
    let snap = ready(h, &key, &src).await;
    let marked = s
        .set_state(
            &snap.fence(),
            AuthorityState::Ready,
            AuthorityState::Relocating,
        )
        .await
        .expect("mark");
    let moved = s
        .transfer_owner(&TransferOwner {
            source: marked.fence(),
            target: dst.target(),
            payload: Some(Bytes::from_static(b"new-members")),
        })
        .await
        .expect("transfer");
    assert_eq!(moved.state, AuthorityState::Ready);
    assert_eq!(moved.object_generation, snap.object_generation);
    assert!(moved.authority_owner_generation > snap.authority_owner_generation);
    assert_eq!(moved.owner, dst.token);
    assert_eq!(moved.owner_node, dst.node);
    assert_eq!(moved.payload, Bytes::from_static(b"new-members"));
    assert_eq!(s.capacity_use(&src.node).await.expect("src").spots, 0);
    assert_eq!(s.capacity_use(&dst.node).await.expect("dst").spots, 1);
    expect_stale(
        s.preserve(&marked.fence(), Bytes::new()).await,
        StaleReason::StoreVersion,
        "old fence",
    );
    // A transfer to a target that publishes no MeshNode descriptor under its lease and
    // lifecycle is refused (issue 17 item 5), and changes nothing.
    let bare = s
        .claim_lease(&h.unique("bare"), LONG)
        .await
        .expect("bare")
        .token;
    let mut t = dst.target();
    t.owner = bare;
    expect_stale(
        s.transfer_owner(&TransferOwner {
            source: moved.fence(),
            target: t,
            payload: None,
        })
        .await,
        StaleReason::Descriptor,
        "no descriptor",
    );
    let mut t = dst.target();
    t.node.lifecycle_generation += 1;
    expect_stale(
        s.commit_aggregate(&[crate::types::AggregateOp::Transfer(TransferOwner {
            source: moved.fence(),
            target: t,
            payload: None,
        })])
        .await,
        StaleReason::Descriptor,
        "another lifecycle",
    );
    assert_eq!(
        strip(read(h, &key).await.expect("still there")),
        strip(moved.clone()),
        "a refused transfer changes nothing"
    );
    // A transfer to a target whose lease is not live is refused.
    let dead = s
        .claim_lease(&h.unique("dead"), SHORT)
        .await
        .expect("dead")
        .token;
    h.advance(SHORT + Duration::from_millis(50)).await;
    let mut t = dst.target();
    t.owner = dead;
    expect_stale(
        s.transfer_owner(&TransferOwner {
            source: moved.fence(),
            target: t,
            payload: None,
        })
        .await,
        StaleReason::LeaseNotLive,
        "dead target",
    );
}

/// The aggregate bound: [`MAX_AGGREGATE_OPS`](crate::types::MAX_AGGREGATE_OPS) members (at
/// least 1,024) transfer in one commit, all of them; one more is refused before the store is
/// touched.
pub async fn aggregate_commit_takes_its_bound_and_refuses_one_more<H: Harness>(h: &H) {
    let max = crate::types::MAX_AGGREGATE_OPS;
    assert!(max >= 1024, "the aggregate bound is {max}, below 1,024");
    let s = h.store();
    let src = node(h, "source").await;
    let dst = node(h, "target").await;
    let mut members = Vec::with_capacity(max);
    for i in 0..max {
        members.push(ready(h, &spot_key(h, &format!("member-{i}")), &src).await);
    }
    let ops: Vec<AggregateOp> = members
        .iter()
        .map(|m| {
            AggregateOp::Transfer(TransferOwner {
                source: m.fence(),
                target: dst.target(),
                payload: None,
            })
        })
        .collect();
    let t = std::time::Instant::now();
    let out = s
        .commit_aggregate(&ops)
        .await
        .expect("aggregate of the bound");
    eprintln!("aggregate commit of {max} transfers: {:?}", t.elapsed());
    assert_eq!(out.len(), max);
    assert!(
        out.iter().all(|o| o.owner == dst.token),
        "not every member moved"
    );
    for m in members.iter().step_by(97) {
        let now = read(h, &m.key).await.expect("member");
        assert_eq!(now.owner, dst.token, "{:?}", m.key);
    }
    // One more: refused as an argument, and nothing changed.
    let mut over: Vec<AggregateOp> = out.iter().map(|o| AggregateOp::Check(o.fence())).collect();
    let mut extra = out[0].fence();
    extra.key = spot_key(h, "one-too-many");
    over.push(AggregateOp::Check(extra));
    expect_err(
        s.commit_aggregate(&over).await,
        "InvalidArgument",
        "over the bound",
    );
    let again = read(h, &members[0].key).await.expect("member");
    assert_eq!(strip(again), strip(out[0].clone()));
}

/// A bounded aggregate commit whose last condition fails changes no record.
pub async fn aggregate_commit_is_all_or_nothing<H: Harness>(h: &H) {
    let s = h.store();
    let src = node(h, "source").await;
    let dst = node(h, "target").await;
    let actor = AuthorityKey::new(ObjectKind::Actor, &h.unique("player")).expect("key");
    let spot_a = spot_key(h, "zone-a");
    let spot_b = spot_key(h, "zone-b");
    let mut areq = request(h, &actor, "actor", &src);
    areq.object_kind = ObjectKind::Actor;
    areq.stable_type = "Player".into();
    let ares = s.reserve(&areq).await.expect("reserve actor");
    let a = s
        .commit_ready(&ares, Bytes::from_static(b"in zone-a"))
        .await
        .expect("actor");
    let za = ready(h, &spot_a, &src).await;
    let zb = ready(h, &spot_b, &dst).await;
    let before: Vec<_> = [&actor, &spot_a, &spot_b]
        .iter()
        .map(|k| k.as_str().to_owned())
        .collect();
    let mut stale_b = zb.fence();
    stale_b.store_version += 1;
    let ops = vec![
        AggregateOp::Transfer(TransferOwner {
            source: a.fence(),
            target: dst.target(),
            payload: Some(Bytes::from_static(b"in zone-b")),
        }),
        AggregateOp::Preserve {
            fence: za.fence(),
            payload: Bytes::from_static(b"without player"),
        },
        AggregateOp::Preserve {
            fence: stale_b,
            payload: Bytes::from_static(b"with player"),
        },
    ];
    expect_stale(
        s.commit_aggregate(&ops).await,
        StaleReason::StoreVersion,
        "aggregate with a stale member",
    );
    assert_eq!(
        strip(read(h, &actor).await.expect("actor")),
        strip(a.clone()),
        "{before:?}"
    );
    assert_eq!(strip(read(h, &spot_a).await.expect("a")), strip(za.clone()));
    assert_eq!(strip(read(h, &spot_b).await.expect("b")), strip(zb.clone()));
    let ops = vec![
        AggregateOp::Transfer(TransferOwner {
            source: a.fence(),
            target: dst.target(),
            payload: Some(Bytes::from_static(b"in zone-b")),
        }),
        AggregateOp::Preserve {
            fence: za.fence(),
            payload: Bytes::from_static(b"without player"),
        },
        AggregateOp::Preserve {
            fence: zb.fence(),
            payload: Bytes::from_static(b"with player"),
        },
    ];
    let out = s.commit_aggregate(&ops).await.expect("aggregate");
    assert_eq!(out.len(), 3);
    assert_eq!(out[0].owner, dst.token);
    assert_eq!(out[1].payload, Bytes::from_static(b"without player"));
    assert_eq!(out[2].payload, Bytes::from_static(b"with player"));
    let dup = vec![
        AggregateOp::Check(out[1].fence()),
        AggregateOp::Check(out[1].fence()),
    ];
    expect_err(
        s.commit_aggregate(&dup).await,
        "InvalidArgument",
        "duplicate keys",
    );
    expect_err(s.commit_aggregate(&[]).await, "InvalidArgument", "empty");
}

/// Authority never expires by TTL; delete needs the full fence, not a live lease.
pub async fn authority_survives_time_and_is_deleted_only_by_its_fence<H: Harness>(h: &H) {
    let s = h.store();
    let n = node(h, "owner").await;
    let key = spot_key(h, "durable");
    let snap = ready(h, &key, &n).await;
    s.release_lease(&n.token).await.expect("owner goes away");
    h.advance(SHORT + Duration::from_millis(50)).await;
    let still = read(h, &key)
        .await
        .expect("authority survives its owner's lease");
    assert_eq!(still.store_version, snap.store_version);
    s.delete_fenced(&snap.fence()).await.expect("fenced delete");
    assert!(read(h, &key).await.is_none());
    assert_eq!(s.capacity_use(&n.node).await.expect("use").spots, 0);
    expect_err(
        s.delete_fenced(&snap.fence()).await,
        "Missing",
        "second delete",
    );
}

/// Counters never wrap: at `i64::MAX` operations fail with `GenerationExhausted` and write nothing.
pub async fn generation_counters_never_wrap<H: Harness>(h: &H) {
    let s = h.store();
    let n = node(h, "target").await;
    h.set_counter(counters::OBJECT_GENERATION, i64::MAX as u64)
        .await;
    let key = spot_key(h, "exhausted");
    expect_err(
        s.reserve(&request(h, &key, "x", &n)).await,
        "GenerationExhausted",
        "reserve",
    );
    assert!(read(h, &key).await.is_none(), "nothing written");
    assert_eq!(
        s.capacity_use(&n.node).await.expect("use").spots,
        0,
        "nothing charged"
    );
    h.set_counter(counters::LEASE_GENERATION, i64::MAX as u64)
        .await;
    expect_err(
        s.claim_lease(&h.unique("host"), LONG).await,
        "GenerationExhausted",
        "claim",
    );
}

/// StoreVersion and generations strictly increase across operations.
pub async fn generations_are_monotonic<H: Harness>(h: &H) {
    let s = h.store();
    let a = node(h, "a").await;
    let b = node(h, "b").await;
    let mut last_version = 0;
    let mut last_owner_gen = 0;
    let mut last_object_gen = 0;
    for i in 0..5 {
        let key = spot_key(h, &format!("mono-{i}"));
        let snap = ready(h, &key, &a).await;
        assert!(snap.store_version > last_version);
        assert!(snap.object_generation > last_object_gen);
        assert!(snap.authority_owner_generation > last_owner_gen);
        let moved = s
            .transfer_owner(&TransferOwner {
                source: snap.fence(),
                target: b.target(),
                payload: None,
            })
            .await
            .expect("transfer");
        assert!(moved.store_version > snap.store_version);
        assert!(moved.authority_owner_generation > snap.authority_owner_generation);
        last_version = moved.store_version;
        last_owner_gen = moved.authority_owner_generation;
        last_object_gen = snap.object_generation;
    }
}

/// Relocation Store: immutable put, read, renew, delete, expiry by store time.
pub async fn relocation_payloads_are_immutable_and_expire<H: Harness>(h: &H) {
    let s = h.store();
    let r = h.unique("zlia/1");
    let bytes = Bytes::from_static(b"ZLIA activation envelope");
    let exp = s.put(&r, bytes.clone(), SHORT).await.expect("put");
    expect_err(
        s.put("", bytes.clone(), SHORT).await,
        "InvalidArgument",
        "empty reference",
    );
    // Same bytes again: idempotent; retention becomes the later of the two expiries.
    let again = s.put(&r, bytes.clone(), SHORT).await.expect("same put");
    assert!(again >= exp);
    expect_err(
        s.put(&r, Bytes::from_static(b"other"), SHORT).await,
        "Conflict",
        "other bytes",
    );
    let got = s.read(&r).await.expect("read").expect("present");
    assert_eq!(got.bytes, bytes);
    assert!(got.expires_at > got.store_now);
    s.renew(&r, LONG).await.expect("renew");
    h.advance(SHORT + Duration::from_millis(50)).await;
    assert!(s.read(&r).await.expect("read").is_some(), "renewed");
    assert!(s.delete(&r).await.expect("delete"));
    assert!(s.read(&r).await.expect("read").is_none());
    expect_err(s.renew(&r, LONG).await, "Missing", "renew deleted");
    let r2 = h.unique("zlia/2");
    s.put(&r2, bytes, SHORT).await.expect("put 2");
    h.advance(SHORT + Duration::from_millis(50)).await;
    assert!(
        s.read(&r2).await.expect("read").is_none(),
        "expired by store time"
    );
}

/// During an outage every operation is a `StoreFailure`; afterwards the recovery epoch moves,
/// every acknowledged write is still there and counters continue upwards.
pub async fn outage_is_a_store_failure_then_recovery_is_signalled<H: Harness>(h: &H) {
    let s = h.store();
    let n = node(h, "owner").await;
    let key = spot_key(h, "survivor");
    let snap = ready(h, &key, &n).await;
    let mut recovery = s.recovery();
    let epoch = *recovery.borrow_and_update();
    h.begin_outage().await;
    let err = s.read_authority(&key).await.expect_err("outage");
    assert!(err.is_store_failure(), "{err}");
    let err = s
        .claim_lease(&h.unique("x"), LONG)
        .await
        .expect_err("outage");
    assert!(err.is_store_failure(), "{err}");
    h.end_outage().await;
    // The provider notices the store is back on its next successful request (or by itself).
    let mut back = None;
    for _ in 0..100 {
        if let Ok(r) = s.read_authority(&key).await {
            back = Some(r);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let back = match back.expect("store back") {
        AuthorityRead::Found(s) => *s,
        AuthorityRead::Missing { .. } => panic!("acknowledged write lost"),
    };
    assert_eq!(back.store_version, snap.store_version);
    tokio::time::timeout(Duration::from_secs(5), recovery.wait_for(|e| *e > epoch))
        .await
        .expect("recovery signalled in time")
        .expect("recovery channel open");
    let n2 = node(h, "after").await;
    let snap2 = ready(h, &spot_key(h, "after"), &n2).await;
    assert!(
        snap2.store_version > snap.store_version,
        "counters continue upwards"
    );
    assert!(snap2.object_generation > snap.object_generation);
}

/// Expand to one `#[tokio::test]` per conformance case. `$make` is an async expression that
/// builds a fresh `Arc<impl Harness>`.
#[macro_export]
macro_rules! conformance_cases {
    ($make:expr) => {
        $crate::conformance_cases!(@cases $make;
            claim_issues_a_new_lease_generation_every_time,
            read_route_returns_the_record_with_its_live_owner_lease,
            read_route_finds_the_lease_of_an_owner_whose_id_needs_escapes,
            lease_expires_by_store_time,
            renewal_moves_the_fencing_deadline,
            release_takes_descriptors_and_claims_with_it,
            term_lease_terms_increase_with_each_holder,
            descriptor_revisions_are_ordered,
            descriptors_disappear_with_an_expired_lease,
            routing_id_claims_conflict_until_the_holder_expires,
            reserve_then_commit_makes_a_ready_authority,
            reservation_replay_is_idempotent,
            reserve_on_an_existing_object_reports_it,
            reserve_requires_a_live_target_with_a_matching_descriptor,
            capacity_limits_are_enforced_and_returned,
            stale_fences_are_rejected_by_every_conditional_operation,
            transfer_owner_switches_owner_and_keeps_the_incarnation,
            aggregate_commit_is_all_or_nothing,
            aggregate_commit_takes_its_bound_and_refuses_one_more,
            authority_survives_time_and_is_deleted_only_by_its_fence,
            generation_counters_never_wrap,
            generations_are_monotonic,
            relocation_payloads_are_immutable_and_expire,
            outage_is_a_store_failure_then_recovery_is_signalled,
        );
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn concurrent_reserve_storm_has_exactly_one_winner() {
            let h = $make.await;
            $crate::conformance::concurrent_reserve_storm_has_exactly_one_winner(&h).await;
        }
    };
    (@cases $make:expr; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                let h = $make.await;
                $crate::conformance::$case(h.as_ref()).await;
            }
        )*
    };
}
