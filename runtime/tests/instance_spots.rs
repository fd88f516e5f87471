//! Instance Spot cold activation across real MeshNodes on the memory Location Store (issue
//! "Instance Spot cold activation"; wire §8; glossary §2 "Instance intent", "Cold activation",
//! "Activation barrier", "Durable activation inbox", "Replay cursor", "Activation recovery
//! pointer"):
//!
//! - without Instance intent a Missing Spot is `NotFound` and nothing is stored;
//! - with it, a target chosen from descriptors activates the Spot and runs the first message
//!   first; the recovery pointer is gone once the first operation is done;
//! - concurrent first calls from several nodes make one activation and get one reply each;
//! - a kind-2 route that disagrees with the target or the call is refused before any
//!   reservation;
//! - an activation whose task ends after the inbox commit is finished by the background scan,
//!   with the first message handled once and one reply.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use common::cluster::Cluster;
use serde::{Deserialize, Serialize};
use zlink::call::error::{CallError, ErrorKind};
use zlink::mesh::JsonMessage;
use zlink::object::ObjectCalls;
use zlink::object::exec::ObjectHandlers;
use zlink::object::registry::{FactoryInput, Registry};
use zlink::object::runtime::ActivationFault;
use zlink_store::types::{AuthorityRead, AuthorityState, ObjectKind};

const T: Duration = Duration::from_secs(10);

#[derive(Debug, Serialize, Deserialize)]
struct Inc {
    by: u64,
}
impl JsonMessage for Inc {
    const PACKET_NAME: &'static str = "counter.Inc";
}

#[derive(Debug, PartialEq, Serialize, Deserialize)]
struct Count {
    n: u64,
}
impl JsonMessage for Count {
    const PACKET_NAME: &'static str = "counter.Count";
}

#[derive(Debug, Default)]
struct Counter {
    n: u64,
}

fn counter_handlers(handled: &Arc<AtomicU64>) -> ObjectHandlers<Counter> {
    let mut h: ObjectHandlers<Counter> = ObjectHandlers::new();
    let seen = Arc::clone(handled);
    h.on_request(move |ctx, i: Inc| {
        let seen = Arc::clone(&seen);
        async move {
            seen.fetch_add(1, Ordering::SeqCst);
            let mut c = ctx.state();
            c.n += i.by;
            Ok::<_, CallError>(Count { n: c.n })
        }
    });
    let seen = Arc::clone(handled);
    h.on_send(move |ctx, i: Inc| {
        let seen = Arc::clone(&seen);
        async move {
            seen.fetch_add(1, Ordering::SeqCst);
            ctx.state().n += i.by;
            Ok(())
        }
    });
    h
}

/// What a hosting node registers: Instance Spot types `counter` (its factory counted in
/// `factory_runs`, slow enough to widen the race between first calls) and `flaky` (its
/// factory fails while `fail_flaky` is above zero, counting it down); both count their
/// handler runs in `handled`.
fn registry(
    factory_runs: &Arc<AtomicU64>,
    handled: &Arc<AtomicU64>,
    fail_flaky: &Arc<AtomicU64>,
) -> Registry {
    let mut reg = Registry::new();
    let runs = Arc::clone(factory_runs);
    let h = Arc::clone(handled);
    reg.instance_spot(
        "counter",
        move |_: FactoryInput| {
            runs.fetch_add(1, Ordering::SeqCst);
            async {
                tokio::time::sleep(Duration::from_millis(20)).await;
                Ok(Counter::default())
            }
        },
        move || counter_handlers(&h),
    )
    .register();
    let fail = Arc::clone(fail_flaky);
    let h = Arc::clone(handled);
    reg.instance_spot(
        "flaky",
        move |_: FactoryInput| {
            let failing = fail
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok();
            async move {
                if failing {
                    Err(CallError::new(ErrorKind::HandlerFailed, "flaky factory"))
                } else {
                    Ok(Counter::default())
                }
            }
        },
        move || counter_handlers(&h),
    )
    .register();
    reg
}

/// `hosts` nodes hosting [`registry`] (no Entry Spots), then `clients` that host nothing and
/// only call; the background activation scan runs every 50 ms.
struct Counters {
    cluster: Cluster,
    /// Factory runs of the counter type, across nodes.
    factory_runs: Arc<AtomicU64>,
    /// Counter handler runs, across nodes.
    handled: Arc<AtomicU64>,
    /// Factory runs of the `flaky` type that are still to fail.
    fail_flaky: Arc<AtomicU64>,
}

impl std::ops::Deref for Counters {
    type Target = Cluster;
    fn deref(&self) -> &Cluster {
        &self.cluster
    }
}

impl Counters {
    async fn start(hosts: usize, clients: usize) -> Self {
        let factory_runs = Arc::new(AtomicU64::new(0));
        let handled = Arc::new(AtomicU64::new(0));
        let fail_flaky = Arc::new(AtomicU64::new(0));
        let (r, h, f) = (
            Arc::clone(&factory_runs),
            Arc::clone(&handled),
            Arc::clone(&fail_flaky),
        );
        let cluster = Cluster::builder(hosts + clients)
            .registry(move |_| registry(&r, &h, &f))
            .clients(clients)
            .start()
            .await;
        for rt in &cluster.rts {
            rt.set_activation_scan_interval(Duration::from_millis(50));
        }
        Self {
            cluster,
            factory_runs,
            handled,
            fail_flaky,
        }
    }

    async fn read(&self, id: &str) -> AuthorityRead {
        self.authority(ObjectKind::Spot, id).await
    }

    /// Once every runtime's first operations are done (the caller is answered as soon as the
    /// completion is durable; the cursor and pointer follow), the authority is Ready and its
    /// framework payload carries no recovery pointer.
    async fn assert_ready_without_pointer(&self, id: &str) {
        let t0 = tokio::time::Instant::now();
        while self.rts.iter().any(|r| r.unfinished_activations() > 0) {
            assert!(t0.elapsed() < T, "an activation never finished");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let AuthorityRead::Found(a) = self.read(id).await else {
            panic!("{id} is Missing");
        };
        assert_eq!(a.state, AuthorityState::Ready);
        let fw: serde_json::Value = serde_json::from_slice(&a.payload).unwrap();
        assert!(
            fw.get("recovery").is_none(),
            "the recovery pointer of {id} is still there: {fw}"
        );
    }

    fn activations(&self) -> u64 {
        self.rts
            .iter()
            .map(|r| r.stats().activations.load(Ordering::Relaxed))
            .sum()
    }

    async fn shutdown(self) {
        self.cluster.shutdown().await;
    }
}

/// Issue §1 / acceptance: without Instance intent a Missing Spot is `NotFound` and no record is
/// written; with it, the Spot is activated, its first message runs first, and once the first
/// operation is done the authority is Ready without a recovery pointer. Later calls with or
/// without intent reach the same Spot; a one-way call with intent works too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instance_intent_activates_a_missing_spot_and_nothing_else_does() {
    let c = Counters::start(1, 1).await;
    let (host, client) = (&c.rts[0], &c.rts[1]);
    let err = client
        .request_to_spot::<Inc, Count>("ctr-1", &Inc { by: 1 }, T)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound, "{err}");
    assert!(matches!(
        c.read("ctr-1").await,
        AuthorityRead::Missing { .. }
    ));

    let n: Count = client
        .request_to_instance_spot("counter", "ctr-1", &Inc { by: 5 }, T)
        .await
        .unwrap();
    assert_eq!(n, Count { n: 5 }, "the first message ran first, once");
    c.assert_ready_without_pointer("ctr-1").await;
    assert_eq!(c.factory_runs.load(Ordering::SeqCst), 1);

    // Ready now: intent or not, the same Spot answers; no second activation.
    let n: Count = client
        .request_to_instance_spot("counter", "ctr-1", &Inc { by: 1 }, T)
        .await
        .unwrap();
    assert_eq!(n.n, 6);
    let n: Count = host
        .request_to_spot("ctr-1", &Inc { by: 1 }, T)
        .await
        .unwrap();
    assert_eq!(n.n, 7);
    assert_eq!(c.factory_runs.load(Ordering::SeqCst), 1);

    // One-way with intent activates another Spot; the message is its first.
    client
        .send_to_instance_spot("counter", "ctr-2", &Inc { by: 3 })
        .await
        .unwrap();
    let deadline = tokio::time::Instant::now() + T;
    loop {
        if let Ok(n) = client
            .request_to_spot::<Inc, Count>("ctr-2", &Inc { by: 0 }, T)
            .await
        {
            assert_eq!(n.n, 3);
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "ctr-2 never became Ready"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    c.assert_ready_without_pointer("ctr-2").await;
    assert_eq!(c.activations(), 2);
    c.shutdown().await;
}

/// Acceptance: 32 concurrent Instance-intent requests to one Missing ID from 3 nodes → one
/// activation (one factory run), 32 replies; every increment was applied exactly once (the
/// replies are exactly 1..=32).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thirty_two_concurrent_first_calls_from_three_nodes_make_one_activation() {
    let c = Counters::start(3, 0).await;
    let mut calls = Vec::new();
    for i in 0..32 {
        let rt = &c.rts[i % 3];
        calls.push(rt.request_to_instance_spot::<Inc, Count>("counter", "hot", &Inc { by: 1 }, T));
    }
    let mut seen: Vec<u64> = futures::future::join_all(calls)
        .await
        .into_iter()
        .map(|r| r.unwrap().n)
        .collect();
    seen.sort_unstable();
    assert_eq!(seen, (1..=32).collect::<Vec<_>>());
    assert_eq!(c.factory_runs.load(Ordering::SeqCst), 1, "one activation");
    assert_eq!(c.activations(), 1);
    assert_eq!(c.handled.load(Ordering::SeqCst), 32);
    c.assert_ready_without_pointer("hot").await;

    c.shutdown().await;
}

/// Acceptance / wire §8 "Command 39 route kind": a kind-2 route that names another node
/// lifecycle or a descriptor version the target never published (`ProtocolError`), or a type the
/// target cannot activate (`Rejected`), is refused before any reservation: the ID stays
/// Missing. (The route's deadline must equal the operation's; `MeshNode::instance_spot` always
/// writes them equal, so that branch is checked by the receiver but not reachable from here.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kind2_route_that_disagrees_is_refused_before_any_reservation() {
    use zlink_protocol::generated::{InstanceRoute, InstanceRouteMissing};
    let c = Counters::start(1, 1).await;
    let host = c.nodes[0].descriptor();
    let deadline = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
        + 5_000;
    let route = |lifecycle: u64, descriptor_version: u64, stable_type: &str| {
        InstanceRoute::Missing(InstanceRouteMissing {
            target_mesh: host.mesh_name.clone(),
            target_node: zlink_protocol::generated::NodeFence {
                rid: host.node.rid.clone(),
                lifecycle_generation: lifecycle,
            },
            spot_id: "k2".into(),
            stable_type: stable_type.into(),
            descriptor_version,
            deadline_unix_ms: deadline,
        })
    };
    let payload = || zlink::mesh::handler::encode_json(&Inc { by: 1 }).unwrap();
    let client = &c.nodes[1];
    let (lc, rev) = (host.node.lifecycle_generation, host.descriptor_revision);
    // Another lifecycle of the target.
    let err = client
        .instance_spot(
            &host.node,
            route(lc + 1, rev, "counter"),
            payload(),
            None,
            Some(T),
        )
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ProtocolError, "{err}");
    // A descriptor version the target never published.
    let err = client
        .instance_spot(
            &host.node,
            route(lc, rev + 100, "counter"),
            payload(),
            None,
            Some(T),
        )
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ProtocolError, "{err}");
    // A type the target does not activate.
    let err = client
        .instance_spot(&host.node, route(lc, rev, "nope"), payload(), None, Some(T))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Rejected, "{err}");
    assert!(matches!(c.read("k2").await, AuthorityRead::Missing { .. }));
    assert_eq!(
        c.rts[0]
            .stats()
            .activation_route_mismatches
            .load(Ordering::Relaxed),
        2
    );
    assert_eq!(c.activations(), 0);
    assert_eq!(c.factory_runs.load(Ordering::SeqCst), 0);
    c.shutdown().await;
}

/// Acceptance (recovery inside one node lifecycle, wire §8 "Target host의 scan과 recovery"):
/// the activation task ends right after the Ready commit — the inbox first record is durable,
/// the first handler has not run. The background scan takes the free local barrier and
/// finishes it: the first message is handled exactly once, the caller gets exactly one reply,
/// and the recovery pointer is gone afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_background_scan_finishes_an_activation_whose_task_died_after_the_inbox_commit() {
    let c = Counters::start(1, 1).await;
    let (host, client) = (&c.rts[0], &c.rts[1]);
    host.set_activation_fault(Some(ActivationFault::AbortTask));
    let n: Count = client
        .request_to_instance_spot("counter", "rec-1", &Inc { by: 7 }, T)
        .await
        .unwrap();
    assert_eq!(n, Count { n: 7 });
    assert!(
        host.stats().activation_recoveries.load(Ordering::Relaxed) >= 1,
        "the scan finished it"
    );
    assert_eq!(c.handled.load(Ordering::SeqCst), 1, "handled exactly once");
    c.assert_ready_without_pointer("rec-1").await;
    // The scan never runs it again: passes of it now find nothing to resume, and the first
    // message stays handled once. Then the Spot goes on normally.
    let recoveries = host.stats().activation_recoveries.load(Ordering::Relaxed);
    for _ in 0..3 {
        assert_eq!(
            host.recover_activations().await,
            0,
            "a scan resumed it again"
        );
    }
    assert_eq!(
        host.stats().activation_recoveries.load(Ordering::Relaxed),
        recoveries
    );
    assert_eq!(c.handled.load(Ordering::SeqCst), 1);
    host.set_activation_fault(None);
    let n: Count = client
        .request_to_spot("rec-1", &Inc { by: 1 }, T)
        .await
        .unwrap();
    assert_eq!(n.n, 8);

    // The same from a caller on the target node itself (its reply is in-process).
    host.set_activation_fault(Some(ActivationFault::AbortTask));
    let n: Count = host
        .request_to_instance_spot("counter", "rec-2", &Inc { by: 2 }, T)
        .await
        .unwrap();
    assert_eq!(n.n, 2);
    c.assert_ready_without_pointer("rec-2").await;
    assert_eq!(c.handled.load(Ordering::SeqCst), 3);
    c.shutdown().await;
}

/// Wire §8 "Cold activation recovery 실패 처리": a factory that fails ends the first request
/// once (`HandlerFailed`), records nothing (the reservation is given back under its fence, the
/// root is deleted), and the ID is Missing, so the next call activates it. A one-way first
/// message whose activation fails is a counted drop event.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_activation_ends_the_call_once_and_leaves_the_id_missing() {
    let c = Counters::start(1, 1).await;
    let (host, client) = (&c.rts[0], &c.rts[1]);
    c.fail_flaky.store(1, Ordering::SeqCst);
    let err = client
        .request_to_instance_spot::<Inc, Count>("flaky", "f-1", &Inc { by: 1 }, T)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::HandlerFailed, "{err}");
    assert!(matches!(c.read("f-1").await, AuthorityRead::Missing { .. }));
    assert_eq!(host.unfinished_activations(), 0);
    assert_eq!(c.handled.load(Ordering::SeqCst), 0, "nothing ran");
    let n: Count = client
        .request_to_instance_spot("flaky", "f-1", &Inc { by: 2 }, T)
        .await
        .unwrap();
    assert_eq!(
        n.n, 2,
        "activated afresh; the failed first message never ran"
    );
    c.assert_ready_without_pointer("f-1").await;

    c.fail_flaky.store(1, Ordering::SeqCst);
    client
        .send_to_instance_spot("flaky", "f-2", &Inc { by: 1 })
        .await
        .unwrap();
    let t0 = tokio::time::Instant::now();
    while host.stats().activation_drops.load(Ordering::Relaxed) == 0 {
        assert!(
            t0.elapsed() < T,
            "the failed one-way activation was not counted"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(matches!(c.read("f-2").await, AuthorityRead::Missing { .. }));
    c.shutdown().await;
}

/// A node's discovery view of the memory store that hides some nodes' descriptors: a node
/// that has not seen a new host yet (its discovery has not polled since that host started).
/// Everything else goes to the store unchanged.
struct Hiding {
    store: Arc<zlink_store::MemoryStore>,
    hidden: std::sync::Mutex<std::collections::HashSet<String>>,
}

type Fut<'a, T> = std::pin::Pin<
    Box<dyn std::future::Future<Output = Result<T, zlink_store::StoreError>> + Send + 'a>,
>;

impl zlink::mesh::discovery::DiscoveryBackend for Hiding {
    fn claim_lease<'a>(
        &'a self,
        owner_id: &'a str,
        ttl: Duration,
    ) -> Fut<'a, zlink_store::types::LeaseGrant> {
        self.store.claim_lease(owner_id, ttl)
    }
    fn renew_lease<'a>(
        &'a self,
        token: &'a zlink_store::types::OwnerToken,
        ttl: Duration,
    ) -> Fut<'a, zlink_store::types::LeaseGrant> {
        self.store.renew_lease(token, ttl)
    }
    fn read_lease<'a>(&'a self, owner_id: &'a str) -> Fut<'a, zlink_store::types::LeaseRead> {
        self.store.read_lease(owner_id)
    }
    fn release_lease<'a>(&'a self, token: &'a zlink_store::types::OwnerToken) -> Fut<'a, bool> {
        self.store.release_lease(token)
    }
    fn claim_routing_id<'a>(
        &'a self,
        owner: &'a zlink_store::types::OwnerToken,
        mesh: &'a str,
        rid: &'a str,
    ) -> Fut<'a, ()> {
        self.store.claim_routing_id(owner, mesh, rid)
    }
    fn publish_descriptor<'a>(
        &'a self,
        owner: &'a zlink_store::types::OwnerToken,
        key: &'a zlink_store::types::DescriptorKey,
        lifecycle_generation: u64,
        revision: u64,
        content: bytes::Bytes,
    ) -> Fut<'a, zlink_store::types::PublishOutcome> {
        self.store
            .publish_descriptor(owner, key, lifecycle_generation, revision, content)
    }
    fn remove_descriptor<'a>(
        &'a self,
        owner: &'a zlink_store::types::OwnerToken,
        key: &'a zlink_store::types::DescriptorKey,
    ) -> Fut<'a, bool> {
        self.store.remove_descriptor(owner, key)
    }
    fn list_descriptors<'a>(
        &'a self,
        kind: zlink_store::types::DescriptorKind,
        scope: &'a str,
    ) -> Fut<'a, Vec<zlink_store::types::DescriptorRecord>> {
        Box::pin(async move {
            let all = self.store.list_descriptors(kind, scope).await?;
            let hidden = self.hidden.lock().unwrap().clone();
            Ok(all
                .into_iter()
                .filter(|d| !hidden.contains(&d.key.rid))
                .collect())
        })
    }
}

/// A first call that lost its activation race is delivered to the winner even when this node
/// has no connection to the winner's node yet (a host that had just started and that this
/// node's discovery has not seen): it waits for that connection, bounded by its deadline. Before
/// this, a one-way first call failed `Unavailable` ("no route to node") and was dropped — the
/// one message the 3-process soak lost (docs/reliability.md).
///
/// Node A discovers through [`Hiding`], which hides node C; A's RID sorts below C's, so A is
/// the side that dials C and has no connection to it. Counter `x1` is activated on C. Node B
/// then sends A a one-way kind-2 first call for `x1` (its view: `x1` is missing): A finds `x1`
/// Ready on C and waits; once C is shown to A's discovery, A connects and delivers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_call_waits_for_the_winners_node_it_has_not_discovered_yet() {
    use zlink::mesh::{Handlers, MeshNode};
    use zlink::object::runtime::ObjectRuntime;
    use zlink_protocol::generated::{InstanceRoute, InstanceRouteMissing};
    let store = Arc::new(zlink_store::MemoryStore::new(
        zlink_store::clock::SystemClock,
    ));
    let hiding = Arc::new(Hiding {
        store: Arc::clone(&store),
        hidden: std::sync::Mutex::new(["node-c".to_owned()].into_iter().collect()),
    });
    let counters = || {
        registry(
            &Arc::new(AtomicU64::new(0)),
            &Arc::new(AtomicU64::new(0)),
            &Arc::new(AtomicU64::new(0)),
        )
    };
    // Only C takes activations.
    let cfg = |rid: &str, weight: u16| {
        let mut cfg = common::config("m", rid);
        cfg.object_capabilities = counters().capabilities();
        cfg.placement_weight = weight;
        cfg
    };
    let a = Arc::new(
        MeshNode::start(
            cfg("node-a", 0),
            Handlers::new(),
            Some(Arc::clone(&hiding) as Arc<dyn zlink::mesh::discovery::DiscoveryBackend>),
        )
        .await
        .unwrap(),
    );
    let a_rt = ObjectRuntime::start(
        Arc::clone(&a),
        Arc::clone(&store),
        counters(),
        common::cluster::test_cache(),
    )
    .await
    .unwrap();
    let (b, b_rt) = common::cluster::start_object_node(
        cfg("node-b", 0),
        Handlers::new(),
        Arc::clone(&store),
        counters(),
    )
    .await;
    let (c, c_rt) = common::cluster::start_object_node(
        cfg("node-c", 100),
        Handlers::new(),
        Arc::clone(&store),
        counters(),
    )
    .await;
    a.wait_ready("node-b", T).await.unwrap();
    c.wait_ready("node-b", T).await.unwrap();
    let n: Count = c_rt
        .request_to_instance_spot("counter", "x1", &Inc { by: 1 }, T)
        .await
        .unwrap();
    assert_eq!(n, Count { n: 1 });
    assert!(a.connection("node-c").is_none(), "A has not discovered C");
    // B's one-way first call to A, as if `x1` were still missing.
    let host = a.descriptor();
    let deadline = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
        + 10_000;
    b.instance_spot(
        &host.node,
        InstanceRoute::Missing(InstanceRouteMissing {
            target_mesh: host.mesh_name.clone(),
            target_node: host.node.clone(),
            spot_id: "x1".into(),
            stable_type: "counter".into(),
            descriptor_version: host.descriptor_revision,
            deadline_unix_ms: deadline,
        }),
        zlink::mesh::handler::encode_json(&Inc { by: 10 }).unwrap(),
        None,
        None,
    )
    .await
    .unwrap();
    common::eventually("A waits for a connection to C", || {
        a_rt.stats().activation_owner_waits.load(Ordering::Relaxed) >= 1
    })
    .await;
    assert!(a.connection("node-c").is_none());
    assert_eq!(a_rt.stats().activation_drops.load(Ordering::Relaxed), 0);
    // A's discovery sees C now: A dials it and delivers the first call.
    hiding.hidden.lock().unwrap().clear();
    let t0 = std::time::Instant::now();
    loop {
        let n: Count = c_rt
            .request_to_instance_spot("counter", "x1", &Inc { by: 0 }, T)
            .await
            .unwrap();
        if n.n == 11 {
            break;
        }
        assert_eq!(n.n, 1, "the first call arrives once");
        assert!(t0.elapsed() < T, "the first call never arrived");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(a_rt.stats().activation_drops.load(Ordering::Relaxed), 0);
    assert_eq!(a_rt.stats().activation_forwards.load(Ordering::Relaxed), 1);
    for rt in [a_rt, b_rt, c_rt] {
        rt.shutdown().await;
    }
    for n in [a, b, c] {
        n.shutdown().await;
    }
}
