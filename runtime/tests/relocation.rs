//! Live relocation across real MeshNodes on the memory Location Store (issue 17; wire §9–§11;
//! glossary §5 "Relocation"):
//!
//! - Instance Spots move with their state, their not-yet-run queue (one-way messages and
//!   requests, in order) and their timers; calls made during the move are held, relayed and
//!   answered; nothing is lost or applied twice, and the authority names the target;
//! - arrivals on the old route after the handover are followed to the target (Message Follow);
//! - a target that cannot restore answers `restoreFailed` (53) and the source puts everything
//!   back in order;
//! - `DisableRelocation` stays, and no eligible target stays `NoTarget`.
#![allow(clippy::unwrap_used)]

mod common;
#[path = "../../e2e/src/fault_proxy.rs"]
mod fault_proxy;
#[path = "../../store/tests/support/redis_server.rs"]
mod redis_server;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::WAIT;
use common::cluster::{Cluster, ClusterBuilder};
use serde::{Deserialize, Serialize};
use zlink::call::error::{CallError, ErrorKind};
use zlink::mesh::JsonMessage;
use zlink::object::ObjectCalls;
use zlink::object::exec::ObjectHandlers;
use zlink::object::registry::{FactoryInput, JsonState, Registry, Relocation, StateAdapter};
use zlink::object::runtime::{ObjectStore, RelocatePlan, UnitReport};
use zlink::relocation::host::{StayReason, UnitOutcome};
use zlink_store::redis::{RedisStore, RedisStoreConfig};
use zlink_store::types::{AuthorityRead, ObjectKind};

const T: Duration = Duration::from_secs(10);

#[derive(Debug, Serialize, Deserialize)]
struct Add {
    seq: u64,
}
impl JsonMessage for Add {
    const PACKET_NAME: &'static str = "tally.Add";
}

/// A turn that takes `ms` (so work queues behind it).
#[derive(Debug, Serialize, Deserialize)]
struct Slow {
    ms: u64,
}
impl JsonMessage for Slow {
    const PACKET_NAME: &'static str = "tally.Slow";
}

/// A request that takes `ms`, then applies `seq` and answers the state.
#[derive(Debug, Serialize, Deserialize)]
struct SlowAdd {
    ms: u64,
    seq: u64,
}
impl JsonMessage for SlowAdd {
    const PACKET_NAME: &'static str = "tally.SlowAdd";
}

/// A turn that holds its object until the test releases the [`Hold`] named `key` (a gate of
/// one test's own: tests of this binary run at once).
#[derive(Debug, Serialize, Deserialize)]
struct HoldTurn {
    key: String,
}
impl JsonMessage for HoldTurn {
    const PACKET_NAME: &'static str = "tally.HoldTurn";
}

/// One test's gate: whether a [`HoldTurn`] entered it, and its release.
struct Hold {
    entered: AtomicBool,
    release: tokio::sync::Semaphore,
}

impl Default for Hold {
    fn default() -> Self {
        Self {
            entered: AtomicBool::new(false),
            release: tokio::sync::Semaphore::new(0),
        }
    }
}

static HOLDS: std::sync::LazyLock<std::sync::Mutex<std::collections::HashMap<String, Arc<Hold>>>> =
    std::sync::LazyLock::new(Default::default);

fn hold(key: &str) -> Arc<Hold> {
    Arc::clone(HOLDS.lock().unwrap().entry(key.to_owned()).or_default())
}

/// Append `0..n` to the state at once (a large state for the chunk and budget tests).
#[derive(Debug, Serialize, Deserialize)]
struct Fill {
    n: u64,
}
impl JsonMessage for Fill {
    const PACKET_NAME: &'static str = "tally.Fill";
}

#[derive(Debug, Serialize, Deserialize)]
struct Tick {}
impl JsonMessage for Tick {
    const PACKET_NAME: &'static str = "tally.Tick";
}

#[derive(Debug, Serialize, Deserialize)]
struct Read {}
impl JsonMessage for Read {
    const PACKET_NAME: &'static str = "tally.Read";
}

/// The state: every applied sequence number in order (so loss, duplication and reordering
/// all show), and the timer ticks.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
struct Tally {
    seqs: Vec<u64>,
    ticks: u64,
    armed: bool,
}
impl JsonMessage for Tally {
    const PACKET_NAME: &'static str = "tally.Tally";
}

fn handlers() -> ObjectHandlers<Tally> {
    let mut h: ObjectHandlers<Tally> = ObjectHandlers::new();
    h.on_send(|ctx, a: Add| async move {
        let arm = {
            let mut s = ctx.state();
            s.seqs.push(a.seq);
            !std::mem::replace(&mut s.armed, true)
        };
        if arm {
            ctx.timer_every(1, Duration::from_millis(40), &Tick {})?;
        }
        Ok(())
    });
    h.on_request(|ctx, a: Add| async move {
        let mut s = ctx.state();
        s.seqs.push(a.seq);
        Ok::<_, CallError>(s.clone())
    });
    h.on_send(|_ctx, t: HoldTurn| async move {
        let h = hold(&t.key);
        h.entered.store(true, Ordering::SeqCst);
        h.release.acquire().await.unwrap().forget();
        Ok(())
    });
    h.on_request(|ctx, a: SlowAdd| async move {
        tokio::time::sleep(Duration::from_millis(a.ms)).await;
        let mut s = ctx.state();
        s.seqs.push(a.seq);
        Ok::<_, CallError>(s.clone())
    });
    h.on_send(|_ctx, s: Slow| async move {
        tokio::time::sleep(Duration::from_millis(s.ms)).await;
        Ok(())
    });
    h.on_send(|ctx, _t: Tick| async move {
        ctx.state().ticks += 1;
        Ok(())
    });
    h.on_request(|ctx, _r: Read| async move { Ok::<_, CallError>(ctx.state().clone()) });
    h.on_send(|ctx, f: Fill| async move {
        ctx.state().seqs.extend(0..f.n);
        Ok(())
    });
    h
}

/// An adapter whose restores fail while `refuse` is set (the target's side of a refused move).
struct Picky {
    refuse: Arc<AtomicBool>,
}
impl StateAdapter<Tally> for Picky {
    fn capture(&self, state: &Tally) -> Result<bytes::Bytes, CallError> {
        <JsonState as StateAdapter<Tally>>::capture(&JsonState, state)
    }
    fn restore(&self, bytes: &[u8]) -> Result<Tally, CallError> {
        if self.refuse.load(Ordering::SeqCst) {
            return Err(CallError::new(
                ErrorKind::InvalidOperation,
                "this version refuses the state",
            ));
        }
        <JsonState as StateAdapter<Tally>>::restore(&JsonState, bytes)
    }
}

fn registry(policy: Relocation<Tally>) -> Registry {
    let mut reg = Registry::new();
    reg.instance_spot(
        "tally",
        |_: FactoryInput| async { Ok(Tally::default()) },
        handlers,
    )
    .relocation(policy)
    .register();
    reg
}

/// Three hosting nodes; every Instance Spot activates on node 0 (the others weigh 0 until
/// `open_targets`).
async fn cluster(policy: impl Fn(usize) -> Relocation<Tally> + 'static) -> Cluster {
    cluster_on(Cluster::builder(3), policy).await
}

/// [`cluster`] on the store of `builder`.
async fn cluster_on<S: ObjectStore>(
    builder: ClusterBuilder<S>,
    policy: impl Fn(usize) -> Relocation<Tally> + 'static,
) -> Cluster<S> {
    builder
        .registry(move |i| registry(policy(i)))
        .placement_weights(&[100, 0, 0])
        .start()
        .await
}

/// Issue 17 "In-process (real sockets, both stores)": a builder of three nodes whose Location
/// Store is a real `redis-server` started for the test (kept alive by the returned guard; all
/// nodes share one client, as they share the memory store in the other cases).
async fn on_redis() -> (redis_server::RedisServer, ClusterBuilder<RedisStore>) {
    let server = redis_server::RedisServer::start().await;
    let store = RedisStore::connect(
        &server.url(),
        RedisStoreConfig {
            namespace: format!("reloc-{}", std::process::id()),
            response_timeout: Duration::from_secs(2),
            connection_timeout: Duration::from_millis(500),
            reconnect_retries: 1,
        },
    )
    .await
    .unwrap();
    (server, Cluster::builder(3).store(Arc::new(store)))
}

/// Give nodes 1 and 2 weight and wait until node 0 sees it.
async fn open_targets<S: ObjectStore>(c: &Cluster<S>) {
    for n in &c.nodes[1..] {
        n.set_placement_weight(100).unwrap();
    }
    let t0 = std::time::Instant::now();
    while !c.nodes[1..].iter().all(|n| {
        c.nodes[0]
            .peer(n.rid())
            .and_then(|p| p.descriptor)
            .is_some_and(|d| d.placement_weight == 100)
    }) {
        assert!(t0.elapsed() < WAIT, "descriptors did not propagate");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn owner_of<S: ObjectStore>(c: &Cluster<S>, id: &str) -> String {
    match c.authority(ObjectKind::Spot, id).await {
        AuthorityRead::Found(a) => a.owner_node.rid,
        AuthorityRead::Missing { .. } => "missing".into(),
    }
}

fn outcomes(r: &[UnitReport]) -> Vec<(String, UnitOutcome)> {
    r.iter()
        .map(|u| (u.id.clone(), u.outcome.clone()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instance_spots_move_with_state_queue_timers_and_calls_in_flight() {
    let c = cluster(|_| Relocation::PreserveWith(Arc::new(JsonState))).await;
    instance_spots_move(c, "memory").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instance_spots_move_with_state_queue_timers_and_calls_in_flight_on_redis() {
    let (_server, builder) = on_redis().await;
    let c = cluster_on(builder, |_| Relocation::PreserveWith(Arc::new(JsonState))).await;
    instance_spots_move(c, "redis").await;
}

/// Issue 17 "In-process: Instance Spot": eight tallies move from node 0 with their state,
/// queued work and timers, and with the calls made during the move; `tag` keeps the held turns
/// of a case apart from the other store's.
async fn instance_spots_move<S: ObjectStore>(c: Cluster<S>, tag: &str) {
    let caller = &c.rts[2];
    let ids: Vec<String> = (0..8).map(|i| format!("t-{i}")).collect();
    // Activate every tally on node 0 with seq 0 and arm its timer.
    for id in &ids {
        let s: Tally = caller
            .request_to_instance_spot("tally", id, &Add { seq: 0 }, T)
            .await
            .unwrap();
        assert_eq!(s.seqs, vec![0]);
        assert_eq!(owner_of(&c, id).await, "node-0");
    }
    open_targets(&c).await;
    // Queue work behind a gated turn, so the capture finds it not yet run: each tally holds
    // the running gated turn and five sends (queued_work is the marker).
    let rt0 = &c.rts[0];
    for id in &ids {
        caller
            .send_to_instance_spot(
                "tally",
                id,
                &HoldTurn {
                    key: format!("{tag}-{id}"),
                },
            )
            .await
            .unwrap();
        for seq in 1..=5 {
            caller
                .send_to_instance_spot("tally", id, &Add { seq })
                .await
                .unwrap();
        }
    }
    let t0 = std::time::Instant::now();
    while rt0.queued_work() < ids.len() * 6 {
        assert!(
            t0.elapsed() < WAIT,
            "work did not queue: {}",
            rt0.queued_work()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let plan = RelocatePlan::default();
    let relocate = rt0.relocate(&plan);
    // Calls while the move runs: one-way sends and requests, each answered once.
    let during = async {
        // The moves wait for the gated turns: these calls arrive while they are sealed.
        tokio::time::sleep(Duration::from_millis(50)).await;
        let mut sends = Vec::new();
        for id in &ids {
            sends.push(
                caller
                    .send_to_instance_spot("tally", id, &Add { seq: 6 })
                    .await,
            );
        }
        for id in &ids {
            hold(&format!("{tag}-{id}")).release.add_permits(1);
        }
        let mut replies = Vec::new();
        for id in &ids {
            let r: Result<Tally, _> = caller
                .request_to_instance_spot("tally", id, &Add { seq: 7 }, T)
                .await;
            replies.push(r);
        }
        (sends, replies)
    };
    let (reports, (sends, replies)) = tokio::join!(relocate, during);
    assert!(sends.iter().all(Result::is_ok), "{sends:?}");
    for r in &reports {
        assert_eq!(
            r.outcome,
            UnitOutcome::HandedOver,
            "{:?}",
            outcomes(&reports)
        );
    }
    assert_eq!(reports.len(), ids.len());
    for r in replies {
        let t = r.unwrap();
        assert_eq!(
            t.seqs,
            vec![0, 1, 2, 3, 4, 5, 6, 7],
            "a request's reply shows everything before it, once"
        );
    }
    for id in &ids {
        let owner = owner_of(&c, id).await;
        assert!(
            owner == "node-1" || owner == "node-2",
            "{id} is owned by {owner}"
        );
        // The old route still works: Message Follow takes it to the new owner (a request, so
        // its reply orders it before the read, which may already go the new way).
        let _: Tally = caller
            .request_to_instance_spot("tally", id, &Add { seq: 8 }, T)
            .await
            .unwrap();
        let s: Tally = caller
            .request_to_instance_spot("tally", id, &Read {}, T)
            .await
            .unwrap();
        assert_eq!(
            s.seqs,
            vec![0, 1, 2, 3, 4, 5, 6, 7, 8],
            "{id}: nothing lost, duplicated or reordered"
        );
    }
    // The timers moved too: they keep ticking on the target.
    let before: Vec<u64> = {
        let mut v = Vec::new();
        for id in &ids {
            let s: Tally = caller
                .request_to_instance_spot("tally", id, &Read {}, T)
                .await
                .unwrap();
            v.push(s.ticks);
        }
        v
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    for (id, b) in ids.iter().zip(before) {
        let s: Tally = caller
            .request_to_instance_spot("tally", id, &Read {}, T)
            .await
            .unwrap();
        assert!(
            s.ticks > b,
            "{id}: the timer did not tick after the move ({} → {})",
            b,
            s.ticks
        );
    }
    assert_eq!(
        rt0.live_count(),
        0,
        "objects handed over are not live here, though their follow routes stay"
    );
    for id in &ids {
        let here = rt0.locate(ObjectKind::Spot, id).await.unwrap().here;
        assert_eq!(
            here, "moving",
            "{id}: the source keeps its follow route until its window ends"
        );
    }
    let arrived: u64 = c.rts[1..]
        .iter()
        .map(|r| r.relocation_stats().arrived.load(Ordering::Relaxed))
        .sum();
    assert_eq!(arrived, ids.len() as u64);
    let stats = rt0.relocation_stats();
    assert_eq!(stats.handed_over.load(Ordering::Relaxed), ids.len() as u64);
    // Each unit learned of its commit from a read of its row; none needed the target's
    // liveness (only a read after the window that finds the row unchanged does: issue 17, a
    // descriptor listing on every peek made bulk moves slower).
    assert!(stats.authority_reads.load(Ordering::Relaxed) >= ids.len() as u64);
    assert_eq!(stats.target_liveness_checks.load(Ordering::Relaxed), 0);
    assert_eq!(
        stats.saved_work.load(Ordering::Relaxed),
        ids.len() as u64 * 5,
        "the five queued sends of each tally travelled in its envelope"
    );
    // The sends during the seals were relayed; each later request took the old route
    // (followed) unless a notice at its tally's handover had dropped the caller's route first
    // (docs/architecture.md, "notify": the caller is a recent recipient once one of its calls
    // was followed).
    assert!(
        stats.relayed.load(Ordering::Relaxed) >= ids.len() as u64,
        "the sends made during the seals were relayed"
    );
    assert!(
        stats.relayed.load(Ordering::Relaxed)
            + stats.followed.load(Ordering::Relaxed)
            + stats.follow_notices_at_handover.load(Ordering::Relaxed)
            >= 2 * ids.len() as u64,
        "the calls made during the moves were relayed, followed, or sent on after a handover notice"
    );
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_restore_puts_everything_back_in_order() {
    let refuse = Arc::new(AtomicBool::new(true));
    let r2 = Arc::clone(&refuse);
    let c = cluster(move |i| {
        if i == 0 {
            Relocation::PreserveWith(Arc::new(JsonState))
        } else {
            Relocation::PreserveWith(Arc::new(Picky {
                refuse: Arc::clone(&r2),
            }))
        }
    })
    .await;
    let caller = &c.rts[2];
    let _: Tally = caller
        .request_to_instance_spot("tally", "p-1", &Add { seq: 0 }, T)
        .await
        .unwrap();
    open_targets(&c).await;
    caller
        .send_to_instance_spot("tally", "p-1", &Slow { ms: 200 })
        .await
        .unwrap();
    for seq in 1..=3 {
        caller
            .send_to_instance_spot("tally", "p-1", &Add { seq })
            .await
            .unwrap();
    }
    let plan = RelocatePlan::default();
    let relocate = c.rts[0].relocate(&plan);
    let during = async {
        tokio::time::sleep(Duration::from_millis(50)).await;
        caller
            .send_to_instance_spot("tally", "p-1", &Add { seq: 4 })
            .await
            .unwrap();
        caller
            .request_to_instance_spot::<Add, Tally>("tally", "p-1", &Add { seq: 5 }, T)
            .await
    };
    let (reports, reply) = tokio::join!(relocate, during);
    assert_eq!(
        outcomes(&reports),
        vec![("p-1".into(), UnitOutcome::Failed("restoreFailed".into()))]
    );
    assert_eq!(reply.unwrap().seqs, vec![0, 1, 2, 3, 4, 5]);
    assert_eq!(owner_of(&c, "p-1").await, "node-0");
    let s: Tally = caller
        .request_to_instance_spot("tally", "p-1", &Read {}, T)
        .await
        .unwrap();
    assert_eq!(s.seqs, vec![0, 1, 2, 3, 4, 5]);
    assert_eq!(
        c.rts[0].relocation_stats().restored.load(Ordering::Relaxed),
        1
    );
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disabled_stays_serving_and_no_target_stays() {
    let c = cluster(|_| Relocation::Disable).await;
    let c2 = cluster(|_| Relocation::PreserveWith(Arc::new(JsonState))).await;
    disabled_and_no_target(c, c2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disabled_stays_serving_and_no_target_stays_on_redis() {
    let (_server, builder) = on_redis().await;
    let c = cluster_on(builder, |_| Relocation::Disable).await;
    let (_server2, builder) = on_redis().await;
    let c2 = cluster_on(builder, |_| Relocation::PreserveWith(Arc::new(JsonState))).await;
    disabled_and_no_target(c, c2).await;
}

/// Issue 17 "DisableRelocation still serving" and `Stayed{NoTarget}`: `c` hosts a type that
/// disables relocation, `c2` a movable one with no other node open.
async fn disabled_and_no_target<S: ObjectStore>(c: Cluster<S>, c2: Cluster<S>) {
    let caller = &c.rts[2];
    let _: Tally = caller
        .request_to_instance_spot("tally", "d-1", &Add { seq: 0 }, T)
        .await
        .unwrap();
    // Nobody else has weight yet: even a movable type would have no target.
    let reports = c.rts[0].relocate(&RelocatePlan::default()).await;
    assert_eq!(
        outcomes(&reports),
        vec![("d-1".into(), UnitOutcome::Stayed(StayReason::Disabled))]
    );
    open_targets(&c).await;
    let reports = c.rts[0].relocate(&RelocatePlan::default()).await;
    assert_eq!(
        outcomes(&reports),
        vec![("d-1".into(), UnitOutcome::Stayed(StayReason::Disabled))]
    );
    let s: Tally = caller
        .request_to_instance_spot("tally", "d-1", &Read {}, T)
        .await
        .unwrap();
    assert_eq!(s.seqs, vec![0]);
    c.shutdown().await;

    let c = c2;
    let _: Tally = c.rts[2]
        .request_to_instance_spot("tally", "n-1", &Add { seq: 0 }, T)
        .await
        .unwrap();
    let reports = c.rts[0].relocate(&RelocatePlan::default()).await;
    assert_eq!(
        outcomes(&reports),
        vec![("n-1".into(), UnitOutcome::Stayed(StayReason::NoTarget))]
    );
    c.shutdown().await;
}

/// Membership notifications one node's Entry Spot saw: (joined, actor).
type Notes = Arc<std::sync::Mutex<Vec<(bool, String)>>>;

/// An Actor registry: the `tally` handlers as an Actor type, and an Entry Spot type whose
/// member notifications are recorded per node.
fn actor_registry(joined: Notes) -> Registry {
    let mut reg = Registry::new();
    reg.actor(
        "walker",
        |_: FactoryInput| async { Ok(Tally::default()) },
        handlers,
    )
    .relocation(Relocation::PreserveWith(Arc::new(JsonState)))
    .register();
    reg.entry_spot(
        "entry",
        |_: FactoryInput| async { Ok(Tally::default()) },
        move || record_members(ObjectHandlers::new(), &joined),
    )
    .register();
    reg
}

/// `h` recording the Spot's membership notifications in `notes`.
fn record_members(mut h: ObjectHandlers<Tally>, notes: &Notes) -> ObjectHandlers<Tally> {
    let j = Arc::clone(notes);
    h.on_member_joined(move |_ctx, actor| {
        j.lock().unwrap().push((true, actor));
        async { Ok(()) }
    });
    let l = Arc::clone(notes);
    h.on_member_left(move |_ctx, actor| {
        l.lock().unwrap().push((false, actor));
        async { Ok(()) }
    });
    h
}

/// Three nodes with Entry Spots hosting `registry(i)`; everything is placed on node 0 (the
/// others weigh 0 until [`open_targets`]).
async fn entry_cluster(registry: impl Fn(usize) -> Registry + 'static) -> Cluster {
    entry_cluster_on(Cluster::builder(3), registry).await
}

/// [`entry_cluster`] on the store of `builder`.
async fn entry_cluster_on<S: ObjectStore>(
    builder: ClusterBuilder<S>,
    registry: impl Fn(usize) -> Registry + 'static,
) -> Cluster<S> {
    builder
        .registry(registry)
        .entry_spots()
        .placement_weights(&[100, 0, 0])
        .start()
        .await
}

/// Issue 17 "In-process: Entry-Spot Actor": Actors created on node 0 (a member of its Entry
/// Spot) move with their state; the commit moves the membership atomically to the target's
/// Entry Spot (the authority payload names it), the target's Entry Spot sees them join and the
/// source's sees them leave; calls keep working.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn entry_spot_actors_move_with_their_membership() {
    let notes: Vec<Notes> = (0..3).map(|_| Arc::default()).collect();
    let n2 = notes.clone();
    let c = entry_cluster(move |i| actor_registry(Arc::clone(&n2[i]))).await;
    entry_spot_actors_move(c, &notes).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn entry_spot_actors_move_with_their_membership_on_redis() {
    let notes: Vec<Notes> = (0..3).map(|_| Arc::default()).collect();
    let n2 = notes.clone();
    let (_server, builder) = on_redis().await;
    let c = entry_cluster_on(builder, move |i| actor_registry(Arc::clone(&n2[i]))).await;
    entry_spot_actors_move(c, &notes).await;
}

async fn entry_spot_actors_move<S: ObjectStore>(c: Cluster<S>, notes: &[Notes]) {
    let ids: Vec<String> = (0..4).map(|i| format!("w-{i}")).collect();
    for id in &ids {
        c.rts[0].create_actor("walker", id, None).await.unwrap();
        c.rts[2].send_to_actor(id, &Add { seq: 0 }).await.unwrap();
        let t: Tally = c.rts[2]
            .request_to_actor(id, &Add { seq: 1 }, T)
            .await
            .unwrap();
        assert_eq!(t.seqs, vec![0, 1]);
    }
    open_targets(&c).await;
    let reports = c.rts[0].relocate(&RelocatePlan::default()).await;
    assert_eq!(reports.len(), ids.len(), "{:?}", outcomes(&reports));
    for r in &reports {
        assert_eq!(
            r.outcome,
            UnitOutcome::HandedOver,
            "{:?}",
            outcomes(&reports)
        );
    }
    for id in &ids {
        let AuthorityRead::Found(a) = c.authority(ObjectKind::Actor, id).await else {
            panic!("{id} is missing");
        };
        let owner = c
            .nodes
            .iter()
            .position(|n| n.rid() == a.owner_node.rid)
            .unwrap();
        assert!(owner == 1 || owner == 2, "{id} on node {owner}");
        let entry = c.rts[owner].entry_spot_id();
        assert_eq!(
            zlink::object::runtime::membership_of(&a.payload).as_deref(),
            Some(entry.as_str()),
            "{id}: the membership moved with the owner"
        );
        let t: Tally = c.rts[2]
            .request_to_actor(id, &Add { seq: 2 }, T)
            .await
            .unwrap();
        assert_eq!(
            t.seqs,
            vec![0, 1, 2],
            "{id}: state moved, nothing lost or repeated"
        );
    }
    // Membership notifications: left on the source's Entry Spot, joined on the targets'.
    let t0 = std::time::Instant::now();
    loop {
        let left = notes[0].lock().unwrap().iter().filter(|(j, _)| !*j).count();
        let joined: usize = notes[1..]
            .iter()
            .map(|n| n.lock().unwrap().iter().filter(|(j, _)| *j).count())
            .sum();
        if left == ids.len() && joined == ids.len() {
            break;
        }
        assert!(t0.elapsed() < WAIT, "left {left}, joined {joined}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    c.shutdown().await;
}

/// One tally `id` activated on node 0 (seq 0 applied), targets open.
async fn one_tally(id: &str) -> Cluster {
    let c = cluster(|_| Relocation::PreserveWith(Arc::new(JsonState))).await;
    let _: Tally = c.rts[2]
        .request_to_instance_spot("tally", id, &Add { seq: 0 }, T)
        .await
        .unwrap();
    assert_eq!(owner_of(&c, id).await, "node-0");
    open_targets(&c).await;
    c
}

fn spot_key(id: &str) -> zlink_store::types::AuthorityKey {
    zlink_store::types::AuthorityKey::new(ObjectKind::Spot, id).unwrap()
}

/// Fault matrix "CAS conflict → stale": a write to the authority between the target's Ready and
/// its commit makes the commit refuse; the target re-reads, finds another writer, gives the move
/// up and says so (a 53 after Ready, ours); the source re-reads the unchanged owner and puts
/// everything back in order: the unit ends `Failed(stale)` and serves on the source.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conflicting_write_before_the_commit_is_stale_and_the_source_restores() {
    use zlink_store::LocationStore;
    let c = one_tally("cf-1").await;
    let stall = c.store().stall_aggregates_touching(spot_key("cf-1"));
    let plan = RelocatePlan::default();
    let relocate = c.rts[0].relocate(&plan);
    let conflict = async {
        let mut stall = stall;
        stall.parked(1).await;
        // Another writer changes the row (a Preserve CAS by its owner: new StoreVersion).
        let AuthorityRead::Found(a) = c.authority(ObjectKind::Spot, "cf-1").await else {
            panic!("missing")
        };
        c.store()
            .preserve(&a.fence(), a.payload.clone())
            .await
            .unwrap();
        c.rts[2]
            .send_to_instance_spot("tally", "cf-1", &Add { seq: 1 })
            .await
            .unwrap();
        stall.release();
    };
    let (reports, ()) = tokio::join!(relocate, conflict);
    assert_eq!(
        outcomes(&reports),
        vec![("cf-1".into(), UnitOutcome::Failed("stale".into()))]
    );
    assert_eq!(owner_of(&c, "cf-1").await, "node-0");
    let s: Tally = c.rts[2]
        .request_to_instance_spot("tally", "cf-1", &Add { seq: 2 }, T)
        .await
        .unwrap();
    assert_eq!(
        s.seqs,
        vec![0, 1, 2],
        "nothing lost or repeated across the refused move"
    );
    let abandoned: u64 = c.rts[1..]
        .iter()
        .map(|r| r.relocation_stats().abandoned.load(Ordering::Relaxed))
        .sum();
    assert_eq!(abandoned, 1);
    assert_eq!(
        c.rts[0].relocation_stats().restored.load(Ordering::Relaxed),
        1
    );
    c.shutdown().await;
}

/// Fault matrix "Redis outage shorter than the restore timeout → commit": the target's commit
/// does not answer for longer than the cutover window; the source keeps its copies and keeps
/// reading; when the store answers again the commit lands and the unit is handed over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_outage_shorter_than_the_restore_timeout_still_commits() {
    let c = one_tally("so-1").await;
    let stall = c.store().stall_aggregates_touching(spot_key("so-1"));
    let plan = RelocatePlan::default();
    let relocate = c.rts[0].relocate(&plan);
    let outage = async {
        let mut stall = stall;
        stall.parked(1).await;
        c.rts[2]
            .send_to_instance_spot("tally", "so-1", &Add { seq: 1 })
            .await
            .unwrap();
        // The outage outlasts the source's cutover window (1 s) but not the restore timeout.
        tokio::time::sleep(Duration::from_millis(1_500)).await;
        stall.release();
    };
    let (reports, ()) = tokio::join!(relocate, outage);
    assert_eq!(
        outcomes(&reports),
        vec![("so-1".into(), UnitOutcome::HandedOver)]
    );
    let owner = owner_of(&c, "so-1").await;
    assert!(owner == "node-1" || owner == "node-2", "{owner}");
    let s: Tally = c.rts[2]
        .request_to_instance_spot("tally", "so-1", &Add { seq: 2 }, T)
        .await
        .unwrap();
    assert_eq!(s.seqs, vec![0, 1, 2]);
    c.shutdown().await;
}

/// A peek at the unit's row while its cutover window runs asks only whether the target
/// committed. With the target's commit held in the store, the source peeks several times and
/// finds the row unchanged each time, yet never lists descriptors for the target's liveness:
/// the source machine ignores it in that state, and asking on every peek made bulk moves slower
/// (issue 17). Released, the commit lands and the next peek finds it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn peeks_inside_the_cutover_window_do_not_check_the_targets_liveness() {
    let c = one_tally("pk-1").await;
    let stall = c.store().stall_aggregates_touching(spot_key("pk-1"));
    let plan = RelocatePlan::default();
    let relocate = c.rts[0].relocate(&plan);
    let reads = || {
        c.rts[0]
            .relocation_stats()
            .authority_reads
            .load(Ordering::Relaxed)
    };
    let hold = async {
        let mut stall = stall;
        stall.parked(1).await;
        // Peeks come 1, 3, 7 ms after the cutover: well inside its 1 s window.
        let t0 = std::time::Instant::now();
        while reads() < 3 && t0.elapsed() < WAIT {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        stall.release();
    };
    let (reports, ()) = tokio::join!(relocate, hold);
    assert_eq!(
        outcomes(&reports),
        vec![("pk-1".into(), UnitOutcome::HandedOver)]
    );
    let stats = c.rts[0].relocation_stats();
    assert!(
        stats.authority_reads.load(Ordering::Relaxed) >= 4,
        "three peeks found the row unchanged, a later one found the commit"
    );
    assert_eq!(stats.target_liveness_checks.load(Ordering::Relaxed), 0);
    c.shutdown().await;
}

/// Fault matrix "Redis outage longer than the restore timeout → location_update_failed": the
/// target gives up at its restore deadline and removes everything it prepared; it cannot promise
/// that an unanswered commit never lands, so it declares nothing, and the source reports the
/// unit `Unresolved` at the relocation deadline while it keeps resolving. Once the target's
/// lease is gone (it stops), the source proves no commit can happen and puts the unit back:
/// state and the calls held meanwhile are all there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_outage_longer_than_the_restore_timeout_gives_up_and_the_source_recovers() {
    let c = one_tally("lo-1").await;
    for rt in &c.rts {
        rt.set_relocation_settings(zlink::object::runtime::RelocationSettings {
            restore_timeout: Duration::from_millis(800),
            ..rt.relocation_settings()
        });
    }
    let stall = c.store().stall_aggregates_touching(spot_key("lo-1"));
    let plan = RelocatePlan {
        deadline: Duration::from_millis(2_500),
        target_rids: vec!["node-1".into()],
        ..RelocatePlan::default()
    };
    let relocate = c.rts[0].relocate(&plan);
    let outage = async {
        let mut stall = stall;
        stall.parked(1).await;
        c.rts[2]
            .send_to_instance_spot("tally", "lo-1", &Add { seq: 1 })
            .await
            .unwrap();
        let t0 = std::time::Instant::now();
        while c.rts[1]
            .relocation_stats()
            .abandoned
            .load(Ordering::Relaxed)
            == 0
        {
            assert!(t0.elapsed() < WAIT, "the target never gave up");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        stall
    };
    let (reports, stall) = tokio::join!(relocate, outage);
    assert_eq!(
        outcomes(&reports),
        vec![("lo-1".into(), UnitOutcome::Unresolved)]
    );
    assert_eq!(
        c.rts[1].live_generation(ObjectKind::Spot, "lo-1"),
        None,
        "the target removed it"
    );
    stall.release();
    assert_eq!(owner_of(&c, "lo-1").await, "node-0", "no commit landed");
    // The target stops: its lease is released, and the source restores.
    c.rts[1].shutdown().await;
    c.nodes[1].shutdown().await;
    let t0 = std::time::Instant::now();
    while c.rts[0].relocation_stats().restored.load(Ordering::Relaxed) == 0 {
        assert!(t0.elapsed() < WAIT, "the source never restored");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let s: Tally = c.rts[2]
        .request_to_instance_spot("tally", "lo-1", &Add { seq: 2 }, T)
        .await
        .unwrap();
    assert_eq!(s.seqs, vec![0, 1, 2]);
    c.shutdown().await;
}

/// Fault matrix "target killed before Ready → Restored{TargetGone}": the only allowed target
/// stops processing (frozen, like a SIGSTOP) before it answers and its owner lease ends (as a
/// killed process's does); the source finds the row unchanged and the target gone, and
/// restores everything in order. A target that is only stalled keeps its lease: the source
/// cannot prove it will never commit, so it would keep resolving instead (not restoring).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_target_gone_before_ready_leaves_the_unit_restored() {
    let c = one_tally("tg-1").await;
    c.rts[0].set_relocation_settings(zlink::object::runtime::RelocationSettings {
        restore_timeout: Duration::from_millis(500),
        ..c.rts[0].relocation_settings()
    });
    c.nodes[1].set_frozen(true);
    let plan = plan_to("node-1");
    let relocate = c.rts[0].relocate(&plan);
    let kill = async {
        use zlink_store::LocationStore;
        until_moves_started(&c.rts[0], 1).await;
        c.rts[2]
            .send_to_instance_spot("tally", "tg-1", &Add { seq: 1 })
            .await
            .unwrap();
        let token = c.nodes[1].owner_token().unwrap();
        assert!(c.store().release_lease(&token).await.unwrap());
    };
    let (reports, ()) = tokio::join!(relocate, kill);
    assert_eq!(
        outcomes(&reports),
        vec![("tg-1".into(), UnitOutcome::RestoredTargetGone)]
    );
    // Restoring needed proof that the target's lease is gone: the reads after the window ask.
    assert!(
        c.rts[0]
            .relocation_stats()
            .target_liveness_checks
            .load(Ordering::Relaxed)
            >= 1
    );
    assert_eq!(owner_of(&c, "tg-1").await, "node-0");
    let s: Tally = c.rts[2]
        .request_to_instance_spot("tally", "tg-1", &Add { seq: 2 }, T)
        .await
        .unwrap();
    assert_eq!(s.seqs, vec![0, 1, 2]);
    c.nodes[1].set_frozen(false);
    c.shutdown().await;
}

/// Fault matrix "a 3-hop chain fixed by one notification": the tally moves 0 → 1 → 0 → 1
/// within the follow window while a caller keeps the route it cached before the first move.
/// Its first call takes the old route to node 0, which follows it (through the object's return
/// and its next departure) to node 1 and tells the caller its route is stale (`messageFollow`);
/// the caller drops that route and its next calls go straight to node 1. Requests, so each
/// reply orders the next call; nothing is lost or applied twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_three_hop_chain_is_fixed_by_one_notification() {
    let c = one_tally("ch-1").await;
    // Cache the route of before the moves (the activation itself caches nothing).
    let _: Tally = c.rts[2]
        .request_to_instance_spot("tally", "ch-1", &Read {}, T)
        .await
        .unwrap();
    let hops = [(0, "node-1"), (1, "node-0"), (0, "node-1")];
    for (i, (from, to)) in hops.iter().enumerate() {
        let plan = plan_to(*to);
        let reports = c.rts[*from].relocate(&plan).await;
        assert_eq!(
            outcomes(&reports),
            vec![("ch-1".into(), UnitOutcome::HandedOver)],
            "hop {i}"
        );
        assert_eq!(owner_of(&c, "ch-1").await, *to, "hop {i}");
    }
    let misses_before = c.rts[2].resolver().cache().stats().misses;
    for seq in 1..=4 {
        let s: Tally = c.rts[2]
            .request_to_instance_spot("tally", "ch-1", &Add { seq }, T)
            .await
            .unwrap();
        assert_eq!(s.seqs, (0..=seq).collect::<Vec<_>>());
    }
    assert!(
        c.rts[0].relocation_stats().followed.load(Ordering::Relaxed) >= 1,
        "the first call took the old route"
    );
    assert_eq!(
        c.rts[0]
            .relocation_stats()
            .follow_notices_sent
            .load(Ordering::Relaxed),
        1,
        "one notice for the stale route"
    );
    assert_eq!(
        c.rts[2]
            .relocation_stats()
            .follow_notices_applied
            .load(Ordering::Relaxed),
        1
    );
    // Issue 17 item 8: the notice says how far behind the route was (three moves: each raised
    // the owner generation by one) and what had arrived on it (this first call).
    let stats = c.rts[2].relocation_stats();
    assert_eq!(stats.follow_notice_hops.load(Ordering::Relaxed), 3);
    assert_eq!(stats.follow_notice_queued.load(Ordering::Relaxed), 1);
    assert_eq!(
        c.rts[2].resolver().cache().stats().misses,
        misses_before + 1,
        "after the notice the caller resolved once and then hit the new route"
    );
    c.shutdown().await;
}

/// Ours (docs/architecture.md, "Message Follow"): a peer that was sent a `messageFollow`
/// lately is told of the next handover at once, not at its first followed record. Node 2 cached
/// the routes of two tallies on node 0; the first moves and node 2's call to it is followed
/// (and node 2 notified); when the second moves, node 0 notifies node 2 at the handover, so its
/// call to the second goes straight to node 1 — nothing followed, nothing lost or doubled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_notified_lately_hears_of_the_next_handover_before_it_calls() {
    let c = cluster(|_| Relocation::PreserveWith(Arc::new(JsonState))).await;
    for id in ["hn-1", "hn-2"] {
        let _: Tally = c.rts[2]
            .request_to_instance_spot("tally", id, &Add { seq: 0 }, T)
            .await
            .unwrap();
        assert_eq!(owner_of(&c, id).await, "node-0");
        // Cache the route (the activation itself caches nothing).
        let _: Tally = c.rts[2]
            .request_to_instance_spot("tally", id, &Read {}, T)
            .await
            .unwrap();
    }
    open_targets(&c).await;
    async fn move_one(c: &Cluster, id: &str) {
        let unit: Vec<_> = c.rts[0]
            .relocation_units()
            .into_iter()
            .filter(|u| u.id == id)
            .collect();
        assert_eq!(unit.len(), 1, "{id} is a unit of node 0");
        let reports = c.rts[0]
            .relocate_units(&unit, &plan_to("node-1"), |_, _| {})
            .await;
        assert_eq!(
            outcomes(&reports),
            vec![(id.into(), UnitOutcome::HandedOver)]
        );
    }
    let source = c.rts[0].relocation_stats();
    let caller = c.rts[2].relocation_stats();
    move_one(&c, "hn-1").await;
    assert_eq!(source.follow_notices_at_handover.load(Ordering::Relaxed), 0);
    let s: Tally = c.rts[2]
        .request_to_instance_spot("tally", "hn-1", &Add { seq: 1 }, T)
        .await
        .unwrap();
    assert_eq!(s.seqs, vec![0, 1]);
    assert_eq!(
        source.followed.load(Ordering::Relaxed),
        1,
        "the old route was used once"
    );
    assert_eq!(source.follow_notices_sent.load(Ordering::Relaxed), 1);

    move_one(&c, "hn-2").await;
    assert_eq!(
        source.follow_notices_at_handover.load(Ordering::Relaxed),
        1,
        "node 2 was notified at the handover of hn-2"
    );
    assert_eq!(source.follow_notices_sent.load(Ordering::Relaxed), 2);
    let t0 = std::time::Instant::now();
    while caller.follow_notices_applied.load(Ordering::Relaxed) < 2 {
        assert!(
            t0.elapsed() < WAIT,
            "the handover notice never reached node 2"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let s: Tally = c.rts[2]
        .request_to_instance_spot("tally", "hn-2", &Add { seq: 1 }, T)
        .await
        .unwrap();
    assert_eq!(s.seqs, vec![0, 1]);
    assert_eq!(
        source.followed.load(Ordering::Relaxed),
        1,
        "the call to hn-2 went straight to node 1"
    );
    assert_eq!(owner_of(&c, "hn-2").await, "node-1");
    // No second notice for the same stale route when a record does come by (suppressed).
    assert_eq!(source.follow_notices_sent.load(Ordering::Relaxed), 2);
    c.shutdown().await;
}

/// Issue 17 item 7 (wire §3.1): a record the old owner follows after the handover goes as it
/// came — the sender's operation ID, reply route and source NodeFence — and the new owner
/// answers the sender itself. Node 2 calls the tally on its cached route to node 0 after it
/// moved to node `to`: node 0 forwards the request as sent and registers nothing of its own,
/// the new owner answers node 2 directly (no `replyRelay` back through node 0) — over the mesh,
/// or, when node 2 is the new owner itself, straight into its own pending entry — and node 2
/// takes that reply. Exactly once, in order with what came before.
async fn followed_request_answered_by_the_new_owner(id: &str, to: usize) {
    let c = one_tally(id).await;
    // Cache the route (the activation itself caches nothing).
    let _: Tally = c.rts[2]
        .request_to_instance_spot("tally", id, &Read {}, T)
        .await
        .unwrap();
    let reports = c.rts[0].relocate(&plan_to(format!("node-{to}"))).await;
    assert_eq!(
        outcomes(&reports),
        vec![(id.into(), UnitOutcome::HandedOver)]
    );
    let replies = |i: usize| c.nodes[i].metrics().replies_sent.load(Ordering::Relaxed);
    let (old_replies, new_replies) = (replies(0), replies(to));
    let s: Tally = c.rts[2]
        .request_to_instance_spot("tally", id, &Add { seq: 1 }, T)
        .await
        .unwrap();
    assert_eq!(s.seqs, vec![0, 1], "applied once, after what came before");
    assert_eq!(
        terminal_stat(&c, 0, |s| &s.followed),
        1,
        "it took the old route"
    );
    assert_eq!(
        terminal_stat(&c, 0, |s| &s.followed_as_sent),
        1,
        "node 0 forwarded it with node 2's identity"
    );
    assert_eq!(terminal_stat(&c, to, |s| &s.followed_answered), 1);
    assert_eq!(
        terminal_stat(&c, to, |s| &s.reply_relays_sent),
        0,
        "no terminal went back through node 0"
    );
    assert_eq!(
        replies(to),
        new_replies + 1,
        "the new owner answered node 2"
    );
    assert_eq!(replies(0), old_replies, "node 0 answered nothing");
    assert_eq!(
        c.nodes[0].pending_requests(),
        0,
        "node 0 registered no request of its own for it"
    );
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_followed_request_keeps_its_identity_and_the_new_owner_answers_its_sender() {
    followed_request_answered_by_the_new_owner("as-1", 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_followed_request_whose_sender_became_the_owner_is_answered_there() {
    followed_request_answered_by_the_new_owner("as-2", 2).await;
}

/// Issue 17 item 7 (wire §3.1), one-way: a send node 2 makes on its cached route to node 0
/// after the tally moved to node 1 is forwarded as it came — under node 2's identity, not node
/// 0's — and delivered once by the new owner, after what came before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_followed_send_keeps_its_sender_and_is_delivered_once() {
    let id = "as-3";
    let c = one_tally(id).await;
    let _: Tally = c.rts[2]
        .request_to_instance_spot("tally", id, &Read {}, T)
        .await
        .unwrap();
    let reports = c.rts[0].relocate(&plan_to("node-1")).await;
    assert_eq!(
        outcomes(&reports),
        vec![(id.into(), UnitOutcome::HandedOver)]
    );
    c.rts[2]
        .send_to_instance_spot("tally", id, &Add { seq: 1 })
        .await
        .unwrap();
    let t0 = std::time::Instant::now();
    while terminal_stat(&c, 1, |s| &s.followed_delivered) == 0 {
        assert!(
            t0.elapsed() < WAIT,
            "node 1 never delivered a followed send of node 2"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    assert_eq!(
        terminal_stat(&c, 0, |s| &s.followed),
        1,
        "it took the old route"
    );
    assert_eq!(
        terminal_stat(&c, 0, |s| &s.followed_as_sent),
        1,
        "node 0 forwarded it with node 2's identity"
    );
    assert_eq!(terminal_stat(&c, 1, |s| &s.followed_delivered), 1);
    let s: Tally = c.rts[2]
        .request_to_instance_spot("tally", id, &Add { seq: 2 }, T)
        .await
        .unwrap();
    assert_eq!(s.seqs, vec![0, 1, 2], "delivered once, in order");
    c.shutdown().await;
}

/// Issue 17 item 7, the failure path: when the old owner cannot relay a request it follows (its
/// connection to the new owner is cut), it answers the sender `Unavailable` at once — not a
/// silent drop that leaves the caller waiting for its deadline — and the request is not applied
/// anywhere; once the path is back, the next call lands after what came before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_the_old_owner_cannot_follow_is_answered_unavailable() {
    let id = "as-4";
    let (c, proxy) = proxied_tally(id, |_| Relocation::PreserveWith(Arc::new(JsonState))).await;
    let _: Tally = c.rts[2]
        .request_to_instance_spot("tally", id, &Read {}, T)
        .await
        .unwrap();
    let reports = c.rts[0].relocate(&plan_to("node-1")).await;
    assert_eq!(
        outcomes(&reports),
        vec![(id.into(), UnitOutcome::HandedOver)]
    );
    // Every path to node 1 crosses the proxy (it advertises the proxy's port). Wait until
    // node 0 saw its connection to node 1 end: a record handed to a connection that is still
    // closing is lost with its epoch instead (docs/architecture.md "A lost epoch").
    proxy.set(fault_proxy::Mode::Cut);
    let t0 = std::time::Instant::now();
    while c.nodes[0]
        .peer("node-1")
        .and_then(|p| p.connection_generation)
        .is_some()
    {
        assert!(t0.elapsed() < WAIT, "node 0 never saw the cut");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let t0 = std::time::Instant::now();
    let r: Result<Tally, _> = c.rts[2]
        .request_to_instance_spot("tally", id, &Add { seq: 1 }, T)
        .await;
    let e = r.expect_err("nothing can reach node 1");
    assert_eq!(e.kind(), ErrorKind::Unavailable, "{e:?}");
    assert!(
        t0.elapsed() < T / 2,
        "answered at once, not at the deadline: {:?}",
        t0.elapsed()
    );
    assert_eq!(
        terminal_stat(&c, 0, |s| &s.follow_drops),
        1,
        "node 0 could not relay it"
    );
    proxy.set(fault_proxy::Mode::Pass);
    let t0 = std::time::Instant::now();
    let s: Tally = loop {
        match c.rts[2]
            .request_to_instance_spot("tally", id, &Add { seq: 2 }, T)
            .await
        {
            Ok(s) => break s,
            Err(e) => {
                assert_eq!(e.kind(), ErrorKind::Unavailable, "{e:?}");
                assert!(t0.elapsed() < WAIT, "node 1 never came back: {e:?}");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    };
    assert_eq!(
        s.seqs,
        vec![0, 2],
        "the refused request ran nowhere; the next one after what came before"
    );
    c.shutdown().await;
}

/// Fault matrix "source killed after Ready → fallback CAS" (and "cutover lost beyond the
/// window"): the source stops processing right after its Prepare left (frozen, like a stalled
/// or dying process), so the target's Ready is never answered with a cutover; the target
/// commits by its fallback `RelocationCutoverWaitTimeout` after Ready and opens the unit with
/// its state as of the capture; the source, reading the authority, finds the handover.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_that_stops_after_its_prepare_is_taken_over_by_the_fallback_commit() {
    let c = one_tally("fb-1").await;
    for rt in &c.rts {
        rt.set_relocation_settings(zlink::object::runtime::RelocationSettings {
            cutover_wait: Duration::from_millis(300),
            restore_timeout: Duration::from_millis(500),
            ..rt.relocation_settings()
        });
    }
    c.nodes[0].set_frozen(true);
    let plan = plan_to("node-1");
    let reports = c.rts[0].relocate(&plan).await;
    assert_eq!(
        outcomes(&reports),
        vec![("fb-1".into(), UnitOutcome::HandedOver)]
    );
    assert_eq!(owner_of(&c, "fb-1").await, "node-1");
    assert_eq!(
        c.rts[1]
            .relocation_stats()
            .cutover_timeouts
            .load(Ordering::Relaxed),
        1,
        "committed by the fallback"
    );
    let s: Tally = c.rts[2]
        .request_to_instance_spot("tally", "fb-1", &Add { seq: 1 }, T)
        .await
        .unwrap();
    assert_eq!(s.seqs, vec![0, 1], "the state of the capture, nothing lost");
    c.nodes[0].set_frozen(false);
    c.shutdown().await;
}

/// Fault matrix "target killed after the CAS → Unavailable; nothing runs twice": once the
/// target committed, the source never takes the object back, even when the target dies — its
/// copy is dropped. A call then finds the owner gone (an Instance Spot activates anew, as cold
/// activation does for a dead owner); the old copy never serves again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_target_killed_after_the_commit_is_never_undone_by_the_source() {
    use zlink_store::LocationStore;
    let c = one_tally("tk-1").await;
    let plan = plan_to("node-1");
    let reports = c.rts[0].relocate(&plan).await;
    assert_eq!(
        outcomes(&reports),
        vec![("tk-1".into(), UnitOutcome::HandedOver)]
    );
    // The target dies: its objects go with it and its lease ends.
    let token = c.nodes[1].owner_token().unwrap();
    c.nodes[1].set_frozen(true);
    assert!(c.store().release_lease(&token).await.unwrap());
    let s: Tally = c.rts[2]
        .request_to_instance_spot("tally", "tk-1", &Add { seq: 9 }, T)
        .await
        .unwrap();
    assert_eq!(
        s.seqs,
        vec![9],
        "a fresh activation: the source's copy was not revived"
    );
    assert_eq!(
        c.rts[0].relocation_stats().restored.load(Ordering::Relaxed),
        0
    );
    assert_ne!(owner_of(&c, "tk-1").await, "node-1");
    c.nodes[1].set_frozen(false);
    c.shutdown().await;
}

/// Fault matrix "chunk checksum / length / ordinal / duplicate → 53, restore": a source whose
/// transfer is corrupt (fault injection: a wrong declared CRC-32C, one declared byte too many, a
/// missing first chunk, a repeated first chunk) is refused by the target with the matching
/// `relocationFailed` reason before Ready, and puts everything back: the unit serves on the
/// source with its state and the calls held meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_transfer_is_refused_with_its_reason_and_the_source_restores() {
    use zlink::object::runtime::TransferFault as F;
    let c = one_tally("cx-1").await;
    let cases = [
        (F::WrongChecksum, "checksumMismatch"),
        (F::WrongLength, "lengthMismatch"),
        (F::SkipFirstChunk, "chunkOrdinal"),
        (F::DuplicateFirstChunk, "chunkOrdinal"),
    ];
    let mut seq = 1;
    for (fault, reason) in cases {
        c.rts[0].set_relocation_settings(zlink::object::runtime::RelocationSettings {
            chunk_limit: 64,
            fault: Some(fault),
            ..zlink::object::runtime::RelocationSettings::default()
        });
        let plan = RelocatePlan::default();
        let relocate = c.rts[0].relocate(&plan);
        let during = async {
            c.rts[2]
                .send_to_instance_spot("tally", "cx-1", &Add { seq })
                .await
                .unwrap();
        };
        let (reports, ()) = tokio::join!(relocate, during);
        assert_eq!(
            outcomes(&reports),
            vec![("cx-1".into(), UnitOutcome::Failed(reason.into()))],
            "{fault:?}"
        );
        assert_eq!(owner_of(&c, "cx-1").await, "node-0", "{fault:?}");
        seq += 1;
        let s: Tally = c.rts[2]
            .request_to_instance_spot("tally", "cx-1", &Add { seq }, T)
            .await
            .unwrap();
        assert_eq!(
            s.seqs,
            (0..=seq).collect::<Vec<_>>(),
            "{fault:?}: nothing lost or repeated"
        );
        seq += 1;
    }
    let refused: u64 = c.rts[1..]
        .iter()
        .map(|r| r.relocation_stats().refused.load(Ordering::Relaxed))
        .sum();
    assert_eq!(refused, 4);
    c.shutdown().await;
}

/// Fault matrix "an expired route": a caller whose cached route outlived the old owner's
/// follow window (here the window is shortened below the cache's lifetime on purpose) gets a
/// refusal — never a silent loss — its cache entry goes with it, and its next call resolves the
/// new owner and succeeds. A one-way message on the expired route is a counted drop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_follow_route_is_refused_and_the_next_call_finds_the_new_owner() {
    let c = one_tally("ex-1").await;
    let _: Tally = c.rts[2]
        .request_to_instance_spot("tally", "ex-1", &Read {}, T)
        .await
        .unwrap();
    c.rts[0].set_relocation_settings(zlink::object::runtime::RelocationSettings {
        message_follow: Duration::from_millis(200),
        cutover_wait: Duration::from_millis(100),
        ..c.rts[0].relocation_settings()
    });
    let reports = c.rts[0].relocate(&RelocatePlan::default()).await;
    assert_eq!(
        outcomes(&reports),
        vec![("ex-1".into(), UnitOutcome::HandedOver)]
    );
    // The follow window (200 ms + 100 ms) ends; node 0 forgets the route.
    let t0 = std::time::Instant::now();
    while c.rts[0].live_generation(ObjectKind::Spot, "ex-1").is_some() {
        assert!(t0.elapsed() < WAIT, "the follow route never ended");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let drops_before = c.rts[0].stats().dropped_sends.load(Ordering::Relaxed);
    c.rts[2]
        .send_to_instance_spot("tally", "ex-1", &Add { seq: 1 })
        .await
        .unwrap();
    let t0 = std::time::Instant::now();
    while c.rts[0].stats().dropped_sends.load(Ordering::Relaxed) == drops_before {
        assert!(
            t0.elapsed() < WAIT,
            "the send on the expired route was not counted"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let e = c.rts[2]
        .request_to_instance_spot::<Add, Tally>("tally", "ex-1", &Add { seq: 2 }, T)
        .await;
    // The send above already dropped the cached route (a refused send cannot tell the sender,
    // but the request that follows either finds the route gone or is refused once).
    match e {
        Ok(s) => assert_eq!(
            s.seqs,
            vec![0, 2],
            "the dropped send is the only loss, and counted"
        ),
        Err(e) => {
            assert!(
                matches!(e.kind(), ErrorKind::StaleRoute | ErrorKind::Unavailable),
                "{e}"
            );
            let s: Tally = c.rts[2]
                .request_to_instance_spot("tally", "ex-1", &Add { seq: 2 }, T)
                .await
                .unwrap();
            assert_eq!(s.seqs, vec![0, 2]);
        }
    }
    c.shutdown().await;
}

/// Instances of [`Freed`] that lived on node 0 and were dropped there.
static FREED_ON_NODE_0: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// A state that knows the node it lives on and counts its drops on node 0.
#[derive(Debug, Serialize, Deserialize)]
struct Freed {
    #[serde(skip)]
    node: usize,
}
impl Drop for Freed {
    fn drop(&mut self) {
        if self.node == 0 {
            FREED_ON_NODE_0.fetch_add(1, Ordering::SeqCst);
        }
    }
}

/// Which node answered.
#[derive(Debug, Serialize, Deserialize)]
struct Where {
    node: usize,
}
impl JsonMessage for Where {
    const PACKET_NAME: &'static str = "freed.Where";
}

/// [`Freed`] as JSON, restored as living on node `node`.
struct FreedState {
    node: usize,
}
impl StateAdapter<Freed> for FreedState {
    fn capture(&self, state: &Freed) -> Result<bytes::Bytes, CallError> {
        <JsonState as StateAdapter<Freed>>::capture(&JsonState, state)
    }
    fn restore(&self, bytes: &[u8]) -> Result<Freed, CallError> {
        let mut f: Freed = <JsonState as StateAdapter<Freed>>::restore(&JsonState, bytes)?;
        f.node = self.node;
        Ok(f)
    }
}

/// The source lets go of a handed-over instance at once: its state (and queue and executor)
/// is dropped when the move ends, not when its follow window (30 s by default) does — a node
/// drained of many objects gives their memory back then. The follow route itself stays for
/// the window.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_source_frees_a_handed_over_instance_before_its_follow_window_ends() {
    let c = Cluster::builder(3)
        .registry(|i| {
            let mut reg = Registry::new();
            reg.instance_spot(
                "freed",
                move |_: FactoryInput| async move { Ok(Freed { node: i }) },
                || {
                    let mut h: ObjectHandlers<Freed> = ObjectHandlers::new();
                    h.on_request(|ctx, _r: Read| async move {
                        Ok::<_, CallError>(Where {
                            node: ctx.state().node,
                        })
                    });
                    h
                },
            )
            .relocation(Relocation::PreserveWith(Arc::new(FreedState { node: i })))
            .register();
            reg
        })
        .placement_weights(&[100, 0, 0])
        .start()
        .await;
    let w: Where = c.rts[2]
        .request_to_instance_spot("freed", "fr-1", &Read {}, T)
        .await
        .unwrap();
    assert_eq!(w.node, 0);
    open_targets(&c).await;
    assert!(
        c.rts[0].relocation_settings().message_follow >= Duration::from_secs(30),
        "the window outlasts this test's wait"
    );
    assert_eq!(FREED_ON_NODE_0.load(Ordering::SeqCst), 0);
    let reports = c.rts[0].relocate(&RelocatePlan::default()).await;
    assert_eq!(
        outcomes(&reports),
        vec![("fr-1".into(), UnitOutcome::HandedOver)]
    );
    let t0 = std::time::Instant::now();
    while FREED_ON_NODE_0.load(Ordering::SeqCst) == 0 {
        assert!(
            t0.elapsed() < WAIT,
            "the handed-over instance is still held on the source"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(FREED_ON_NODE_0.load(Ordering::SeqCst), 1);
    // The follow route is still there, and the object serves on its new node.
    assert!(
        c.rts[0].live_generation(ObjectKind::Spot, "fr-1").is_some(),
        "the follow window ended early"
    );
    let w: Where = c.rts[2]
        .request_to_instance_spot("freed", "fr-1", &Read {}, T)
        .await
        .unwrap();
    assert_ne!(w.node, 0);
    c.shutdown().await;
}

/// A turn that does not reach a handler boundary by the relocation deadline leaves the unit
/// where it is (`Stayed(Deadline)`): the capture gives up, the object is not left paused, and the
/// calls held meanwhile are served in order once the turn ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_that_outlasts_the_deadline_leaves_the_unit_serving_where_it_is() {
    let c = one_tally("dl-1").await;
    c.rts[2]
        .send_to_instance_spot("tally", "dl-1", &Slow { ms: 1_500 })
        .await
        .unwrap();
    // The slow turn is running (the marker: the queue holds it).
    let t0 = std::time::Instant::now();
    while c.rts[0].queued_work() == 0 {
        assert!(t0.elapsed() < WAIT, "the slow turn never started");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let plan = RelocatePlan {
        deadline: Duration::from_millis(300),
        ..RelocatePlan::default()
    };
    let relocate = c.rts[0].relocate(&plan);
    let during = async {
        tokio::time::sleep(Duration::from_millis(50)).await;
        c.rts[2]
            .send_to_instance_spot("tally", "dl-1", &Add { seq: 1 })
            .await
            .unwrap();
    };
    let (reports, ()) = tokio::join!(relocate, during);
    assert_eq!(
        outcomes(&reports),
        vec![("dl-1".into(), UnitOutcome::Stayed(StayReason::Deadline))]
    );
    assert_eq!(owner_of(&c, "dl-1").await, "node-0");
    let s: Tally = c.rts[2]
        .request_to_instance_spot("tally", "dl-1", &Add { seq: 2 }, T)
        .await
        .unwrap();
    assert_eq!(s.seqs, vec![0, 1, 2], "served where it is, in order");
    c.shutdown().await;
}

/// A turn of a User Spot that waits for its case's [`RoomGates`] (its members' turns wait
/// behind it when the Spot shares its gate with them).
#[derive(Debug, Serialize, Deserialize)]
struct RoomGated {}
impl JsonMessage for RoomGated {
    const PACKET_NAME: &'static str = "tally.RoomGated";
}

/// The gates of one User Spot case (each store's case its own: the cases run at once).
struct RoomGates {
    /// Released by the case.
    gate: tokio::sync::Semaphore,
    /// One permit per [`RoomGated`] turn that started (a marker for the case).
    entered: tokio::sync::Semaphore,
}

impl RoomGates {
    const fn new() -> Self {
        Self {
            gate: tokio::sync::Semaphore::const_new(0),
            entered: tokio::sync::Semaphore::const_new(0),
        }
    }
}

static ROOM_ON_MEMORY: RoomGates = RoomGates::new();
static ROOM_ON_REDIS: RoomGates = RoomGates::new();

/// Actor `player`, SpotWide User Spot `room` and PerActor User Spot `lobby` (the `tally`
/// handlers, state kept by JSON), an Entry Spot; member notifications of the User Spots are
/// recorded in `notes`; a [`RoomGated`] turn waits for `gates`.
fn room_registry(notes: Notes, gates: &'static RoomGates) -> Registry {
    use zlink::object::registry::SpotExecution;
    let spot_handlers = move || {
        let mut h = handlers();
        h.on_send(move |_ctx, _g: RoomGated| async move {
            gates.entered.add_permits(1);
            gates.gate.acquire().await.unwrap().forget();
            Ok(())
        });
        record_members(h, &notes)
    };
    let mut reg = Registry::new();
    reg.actor(
        "player",
        |_: FactoryInput| async { Ok(Tally::default()) },
        handlers,
    )
    .relocation(Relocation::PreserveWith(Arc::new(JsonState)))
    .register();
    let wide = spot_handlers.clone();
    reg.user_spot(
        "room",
        |_: FactoryInput| async { Ok(Tally::default()) },
        wide,
    )
    .relocation(Relocation::PreserveWith(Arc::new(JsonState)))
    .register();
    reg.user_spot(
        "lobby",
        |_: FactoryInput| async { Ok(Tally::default()) },
        spot_handlers,
    )
    .execution(SpotExecution::PerActor)
    .relocation(Relocation::PreserveWith(Arc::new(JsonState)))
    .register();
    reg.entry_spot(
        "entry",
        |_: FactoryInput| async { Ok(Tally::default()) },
        ObjectHandlers::<Tally>::new,
    )
    .register();
    reg
}

/// Issue 17 "In-process: 50-member SpotWide room, PerActor Actor and Spot" (glossary §5
/// "Relocation unit": a `SpotWide` User Spot and all its member Actors; wire §10 "SpotWide
/// aggregate"): a room with 50 members and a PerActor lobby with 5 move, each as one unit to
/// one target in one aggregate commit, with the state, queued work and timers of every object
/// and the calls made during the move; every member keeps its membership (no leave or join is
/// announced), the room's members share its gate on the target again, the lobby's do not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn user_spots_move_with_all_their_members_in_one_commit() {
    let notes: Vec<Notes> = (0..3).map(|_| Arc::default()).collect();
    let n2 = notes.clone();
    let c = entry_cluster(move |i| room_registry(Arc::clone(&n2[i]), &ROOM_ON_MEMORY)).await;
    user_spots_move(c, &notes, &ROOM_ON_MEMORY).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn user_spots_move_with_all_their_members_in_one_commit_on_redis() {
    let notes: Vec<Notes> = (0..3).map(|_| Arc::default()).collect();
    let n2 = notes.clone();
    let (_server, builder) = on_redis().await;
    let c = entry_cluster_on(builder, move |i| {
        room_registry(Arc::clone(&n2[i]), &ROOM_ON_REDIS)
    })
    .await;
    user_spots_move(c, &notes, &ROOM_ON_REDIS).await;
}

async fn user_spots_move<S: ObjectStore>(c: Cluster<S>, notes: &[Notes], gates: &RoomGates) {
    let rooms = [("room", "room-1", 50usize), ("lobby", "lobby-1", 5)];
    let mut members: Vec<(String, Vec<String>)> = Vec::new();
    for (ty, spot, n) in rooms {
        c.rts[0].create_user_spot(ty, spot, None).await.unwrap();
        let ids: Vec<String> = (0..n).map(|i| format!("{spot}-p{i:02}")).collect();
        for id in &ids {
            c.rts[0]
                .create_actor_in("player", id, spot, None)
                .await
                .unwrap();
        }
        members.push((spot.to_owned(), ids));
    }
    // Seq 0 (one-way; arms each object's timer) and 1 (a request) everywhere.
    for (spot, ids) in &members {
        c.rts[2].send_to_spot(spot, &Add { seq: 0 }).await.unwrap();
        let t: Tally = c.rts[2]
            .request_to_spot(spot, &Add { seq: 1 }, T)
            .await
            .unwrap();
        assert_eq!(t.seqs, vec![0, 1]);
        for id in ids {
            c.rts[2].send_to_actor(id, &Add { seq: 0 }).await.unwrap();
            let t: Tally = c.rts[2]
                .request_to_actor(id, &Add { seq: 1 }, T)
                .await
                .unwrap();
            assert_eq!(t.seqs, vec![0, 1]);
        }
    }
    let joins_before: Vec<usize> = notes.iter().map(|n| n.lock().unwrap().len()).collect();
    assert_eq!(
        joins_before[0], 55,
        "every member joined its Spot on node 0 once"
    );
    open_targets(&c).await;
    let units = c.rts[0].relocation_units();
    assert_eq!(units.len(), 2, "one unit per User Spot, members inside");
    for u in &units {
        let (_, ids) = members.iter().find(|(s, _)| *s == u.id).unwrap();
        assert_eq!(u.member_ids().collect::<Vec<_>>(), *ids);
        assert_eq!(u.participants(), ids.len() + 1);
    }
    // Queued work: the room's turn holds the gate its members share, so one-way seqs 2 and 3 to
    // the room and to every member wait when the seal comes (a member's seq 2 as its next turn,
    // waiting for the gate; seq 3 in its queue).
    c.rts[2]
        .send_to_spot("room-1", &RoomGated {})
        .await
        .unwrap();
    tokio::time::timeout(WAIT, gates.entered.acquire())
        .await
        .expect("the room's gated turn started")
        .unwrap()
        .forget();
    for seq in [2, 3] {
        for (spot, ids) in &members {
            c.rts[2].send_to_spot(spot, &Add { seq }).await.unwrap();
            for id in ids {
                c.rts[2].send_to_actor(id, &Add { seq }).await.unwrap();
            }
        }
    }
    // Until the room's turn and seqs and its 50 members' wait on node 0.
    let t0 = std::time::Instant::now();
    while c.rts[0].queued_work() < 103 {
        assert!(
            t0.elapsed() < WAIT,
            "seq 2 did not queue: {}",
            c.rts[0].queued_work()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let plan = RelocatePlan::default();
    let relocate = c.rts[0].relocate(&plan);
    let during = async {
        // Let the seal find the queued work, then free the room's turn.
        tokio::time::sleep(Duration::from_millis(50)).await;
        gates.gate.add_permits(1);
        // Seq 4 during the move: held, relayed or followed.
        for (spot, ids) in &members {
            let t: Tally = c.rts[2]
                .request_to_spot(spot, &Add { seq: 4 }, T)
                .await
                .unwrap();
            assert_eq!(t.seqs, vec![0, 1, 2, 3, 4], "{spot}");
            for id in ids {
                c.rts[2].send_to_actor(id, &Add { seq: 4 }).await.unwrap();
            }
        }
    };
    let (reports, ()) = tokio::join!(relocate, during);
    assert_eq!(reports.len(), 2);
    for r in &reports {
        assert_eq!(
            r.outcome,
            UnitOutcome::HandedOver,
            "{:?}",
            outcomes(&reports)
        );
        let (_, ids) = members.iter().find(|(s, _)| *s == r.id).unwrap();
        assert_eq!(r.members, *ids);
    }
    for (spot, ids) in &members {
        let AuthorityRead::Found(s) = c.authority(ObjectKind::Spot, spot).await else {
            panic!("{spot} is missing");
        };
        assert_ne!(s.owner_node.rid, c.nodes[0].rid(), "{spot} moved");
        for id in ids {
            let AuthorityRead::Found(a) = c.authority(ObjectKind::Actor, id).await else {
                panic!("{id} is missing");
            };
            assert_eq!(a.owner_node.rid, s.owner_node.rid, "{id} went with {spot}");
            assert_eq!(
                zlink::object::runtime::membership_of(&a.payload).as_deref(),
                Some(spot.as_str()),
                "{id} is still a member of {spot}"
            );
            // Seq 4 was one-way from node 2: sent after the handover on a stale route it is
            // followed from node 0 and may still be on its way, and nothing orders node 1's
            // seq 5 after it (wire §3.1 orders no senders across a follow). Wait for it — a
            // lost seq 4 fails here — then check seq 5 lands once, after everything.
            let t0 = std::time::Instant::now();
            loop {
                let t: Tally = c.rts[1].request_to_actor(id, &Read {}, T).await.unwrap();
                if t.seqs.contains(&4) {
                    break;
                }
                assert!(
                    t0.elapsed() < WAIT,
                    "{id}: seq 4 never arrived: {:?}",
                    t.seqs
                );
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            let t: Tally = c.rts[1]
                .request_to_actor(id, &Add { seq: 5 }, T)
                .await
                .unwrap();
            assert_eq!(
                t.seqs,
                vec![0, 1, 2, 3, 4, 5],
                "{id}: state, queued and relayed work moved, nothing lost or repeated"
            );
        }
        let owner = c
            .nodes
            .iter()
            .position(|n| n.rid() == s.owner_node.rid)
            .unwrap();
        assert_eq!(
            c.rts[owner].members_of(spot).map(|m| m.len()),
            Some(ids.len()),
            "{spot}'s members are its members on the target"
        );
    }
    // The room's seqs 2 and 3 and its members' seq 3 waited behind the room's turn: they
    // moved as saved work in the envelopes (the lobby's members may have run theirs already).
    let saved = c.rts[0]
        .relocation_stats()
        .saved_work
        .load(Ordering::Relaxed);
    assert!(saved >= 52, "saved work moved: {saved}");
    let moved: u64 = c.rts[1..]
        .iter()
        .map(|r| r.relocation_stats().arrived.load(Ordering::Relaxed))
        .sum();
    assert_eq!(moved, 57, "every object arrived once");
    // Timers moved: the room's and a member's ticks go on on the target.
    let ticks = |t: &Tally| t.ticks;
    let first: Tally = c.rts[2]
        .request_to_spot("room-1", &Read {}, T)
        .await
        .unwrap();
    let member0: Tally = c.rts[2]
        .request_to_actor("room-1-p00", &Read {}, T)
        .await
        .unwrap();
    let t0 = std::time::Instant::now();
    loop {
        let now: Tally = c.rts[2]
            .request_to_spot("room-1", &Read {}, T)
            .await
            .unwrap();
        let m: Tally = c.rts[2]
            .request_to_actor("room-1-p00", &Read {}, T)
            .await
            .unwrap();
        if ticks(&now) > ticks(&first) && ticks(&m) > ticks(&member0) {
            break;
        }
        assert!(t0.elapsed() < WAIT, "timers did not run on the target");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // No membership change was announced: the members moved with their Spots.
    let after: Vec<usize> = notes.iter().map(|n| n.lock().unwrap().len()).collect();
    assert_eq!(after, joins_before, "no join or leave during the move");
    // The room's members share its gate on the target (a member's turn waits for the room's);
    // the lobby's do not.
    c.rts[2]
        .send_to_spot("room-1", &RoomGated {})
        .await
        .unwrap();
    tokio::time::timeout(WAIT, gates.entered.acquire())
        .await
        .expect("the room's gated turn started")
        .unwrap()
        .forget();
    let blocked = c.rts[2]
        .request_to_actor::<_, Tally>("room-1-p01", &Read {}, Duration::from_millis(300))
        .await;
    assert!(
        blocked.is_err(),
        "a SpotWide member ran beside its Spot's turn"
    );
    gates.gate.add_permits(1);
    c.rts[2]
        .send_to_spot("lobby-1", &RoomGated {})
        .await
        .unwrap();
    tokio::time::timeout(WAIT, gates.entered.acquire())
        .await
        .expect("the lobby's gated turn started")
        .unwrap()
        .forget();
    let free: Tally = c.rts[2]
        .request_to_actor("lobby-1-p01", &Read {}, T)
        .await
        .unwrap();
    assert_eq!(
        free.seqs,
        vec![0, 1, 2, 3, 4, 5],
        "a PerActor member runs on its own"
    );
    gates.gate.add_permits(1);
    c.shutdown().await;
}

/// Issue 17 item 2 "TooManyParticipants": a User Spot with more members than one aggregate
/// commit may move (1,024 objects in all) stays where it is, serving, with nothing sealed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spot_with_more_members_than_one_commit_moves_stays() {
    let c = Cluster::builder(2)
        .registry(|_| room_registry(Arc::default(), &ROOM_ON_MEMORY))
        .entry_spots()
        .placement_weights(&[100, 0])
        .start()
        .await;
    c.rts[0]
        .create_user_spot("lobby", "big-1", None)
        .await
        .unwrap();
    let n = zlink_store::types::MAX_AGGREGATE_OPS;
    let ids: Vec<String> = (0..n).map(|i| format!("big-1-p{i:04}")).collect();
    for chunk in ids.chunks(64) {
        futures::future::try_join_all(
            chunk
                .iter()
                .map(|id| c.rts[0].create_actor_in("player", id, "big-1", None)),
        )
        .await
        .unwrap();
    }
    open_targets(&c).await;
    let reports = c.rts[0].relocate(&RelocatePlan::default()).await;
    assert_eq!(
        outcomes(&reports),
        vec![(
            "big-1".to_owned(),
            UnitOutcome::Stayed(StayReason::TooManyParticipants)
        )]
    );
    assert_eq!(reports[0].members.len(), n, "1 + {n} objects > {n}");
    assert_eq!(owner_of(&c, "big-1").await, c.nodes[0].rid());
    let t: Tally = c.rts[1]
        .request_to_actor(&ids[n - 1], &Add { seq: 7 }, T)
        .await
        .unwrap();
    assert_eq!(t.seqs, vec![7], "still serving where it is");
    c.shutdown().await;
}

/// An `ApplicationSignaled` turn: record `mark` in the state, then mark the end of this turn as
/// the relocation boundary.
#[derive(Debug, Serialize, Deserialize)]
struct Mark {
    mark: u64,
}
impl JsonMessage for Mark {
    const PACKET_NAME: &'static str = "tally.Mark";
}

/// Calls `relocation_ready().defer()` and answers with the state (or the error).
#[derive(Debug, Serialize, Deserialize)]
struct TryDefer {}
impl JsonMessage for TryDefer {
    const PACKET_NAME: &'static str = "tally.TryDefer";
}

/// The `tally` handlers plus [`Mark`] and [`TryDefer`]; `completed` receives the state each
/// `on_relocation_ready_completed` saw.
fn signal_handlers(completed: &Arc<std::sync::Mutex<Vec<Vec<u64>>>>) -> ObjectHandlers<Tally> {
    let mut h = handlers();
    h.on_send(|ctx, m: Mark| async move {
        ctx.state().seqs.push(m.mark);
        ctx.relocation_ready().defer()
    });
    h.on_request(|ctx, _t: TryDefer| async move {
        ctx.relocation_ready().defer()?;
        Ok::<_, CallError>(ctx.state().clone())
    });
    let c = Arc::clone(completed);
    h.on_relocation_ready_completed(move |ctx| {
        c.lock().unwrap().push(ctx.state().seqs.clone());
        async { Ok(()) }
    });
    h
}

/// `stage`: an ApplicationSignaled SpotWide User Spot; `room`: FrameworkManaged; `lobby`:
/// PerActor (ApplicationSignaled registered, which does not apply there); Actor `player`;
/// Instance Spot `tally`; all with [`signal_handlers`].
fn signal_registry(completed: Arc<std::sync::Mutex<Vec<Vec<u64>>>>) -> Registry {
    use zlink::object::registry::{RelocationCoordination, SpotExecution};
    let json = || Relocation::PreserveWith(Arc::new(JsonState));
    let mut reg = Registry::new();
    let f = |_: FactoryInput| async { Ok(Tally::default()) };
    let c = Arc::clone(&completed);
    reg.user_spot("stage", f, move || signal_handlers(&c))
        .coordination(RelocationCoordination::ApplicationSignaled)
        .relocation(json())
        .register();
    let c = Arc::clone(&completed);
    reg.user_spot("room", f, move || signal_handlers(&c))
        .relocation(json())
        .register();
    let c = Arc::clone(&completed);
    reg.user_spot("lobby", f, move || signal_handlers(&c))
        .execution(SpotExecution::PerActor)
        .coordination(RelocationCoordination::ApplicationSignaled)
        .relocation(json())
        .register();
    let c = Arc::clone(&completed);
    reg.actor("player", f, move || signal_handlers(&c))
        .relocation(json())
        .register();
    let c = Arc::clone(&completed);
    reg.instance_spot("tally", f, move || signal_handlers(&c))
        .relocation(json())
        .register();
    reg.entry_spot("entry", f, ObjectHandlers::<Tally>::new)
        .register();
    reg
}

/// Issue 17 item 3 "ApplicationSignaled" (glossary §1 "Spot relocation coordination mode"):
/// `defer()` outside an ApplicationSignaled SpotWide Spot fails with `InvalidOperation` and
/// changes nothing; with nothing prepared it is a no-op; a move that never sees a `defer()`
/// boundary stays `NotSignaled`, serving; a move seals exactly at the end of a deferring turn
/// (the state the target's `on_relocation_ready_completed` sees — its first turn there — ends
/// with a mark), and what came after that turn runs on the target, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn application_signaled_spots_move_only_at_a_deferred_boundary() {
    let completed: Arc<std::sync::Mutex<Vec<Vec<u64>>>> = Arc::default();
    let c2 = Arc::clone(&completed);
    let c = entry_cluster(move |_| signal_registry(Arc::clone(&c2))).await;
    application_signaled_move(c, &completed).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn application_signaled_spots_move_only_at_a_deferred_boundary_on_redis() {
    let completed: Arc<std::sync::Mutex<Vec<Vec<u64>>>> = Arc::default();
    let c2 = Arc::clone(&completed);
    let (_server, builder) = on_redis().await;
    let c = entry_cluster_on(builder, move |_| signal_registry(Arc::clone(&c2))).await;
    application_signaled_move(c, &completed).await;
}

async fn application_signaled_move<S: ObjectStore>(
    c: Cluster<S>,
    completed: &std::sync::Mutex<Vec<Vec<u64>>>,
) {
    c.rts[0]
        .create_user_spot("stage", "st-1", None)
        .await
        .unwrap();
    c.rts[0]
        .create_user_spot("room", "rm-1", None)
        .await
        .unwrap();
    c.rts[0]
        .create_user_spot("lobby", "lb-1", None)
        .await
        .unwrap();
    c.rts[0]
        .create_actor_in("player", "st-1-p0", "st-1", None)
        .await
        .unwrap();
    c.rts[0].create_actor("player", "pl-1", None).await.unwrap();
    c.rts[2]
        .send_to_instance_spot("tally", "ty-1", &Add { seq: 0 })
        .await
        .unwrap();
    // Misuse: InvalidOperation, and the state is what it was.
    let misuse = [
        ("room", "rm-1"),
        ("lobby", "lb-1"),
        ("player", "pl-1"),
        ("player", "st-1-p0"),
        ("tally", "ty-1"),
    ];
    for (ty, id) in misuse {
        let r: Result<Tally, CallError> = match ty {
            "player" => c.rts[2].request_to_actor(id, &TryDefer {}, T).await,
            "tally" => {
                c.rts[2]
                    .request_to_instance_spot("tally", id, &TryDefer {}, T)
                    .await
            }
            _ => c.rts[2].request_to_spot(id, &TryDefer {}, T).await,
        };
        let e = r.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidOperation, "{ty} {id}: {e}");
    }
    // Nothing prepared: a no-op.
    let s: Tally = c.rts[2]
        .request_to_spot("st-1", &TryDefer {}, T)
        .await
        .unwrap();
    assert!(s.seqs.is_empty());
    open_targets(&c).await;
    // A move that never sees a boundary stays, serving.
    let only_stage = |rts: &zlink::object::runtime::ObjectRuntime<_>| {
        rts.relocation_units()
            .into_iter()
            .filter(|u| u.id == "st-1")
            .collect::<Vec<_>>()
    };
    let short = RelocatePlan {
        deadline: Duration::from_millis(400),
        ..RelocatePlan::default()
    };
    let units = only_stage(&c.rts[0]);
    let reports = c.rts[0].relocate_units(&units, &short, |_, _| {}).await;
    assert_eq!(
        outcomes(&reports),
        vec![(
            "st-1".to_owned(),
            UnitOutcome::Stayed(StayReason::NotSignaled)
        )]
    );
    c.rts[2]
        .send_to_spot("st-1", &Add { seq: 1 })
        .await
        .unwrap();
    let s: Tally = c.rts[2].request_to_spot("st-1", &Read {}, T).await.unwrap();
    assert_eq!(s.seqs, vec![1], "still serving where it is");
    // Now with marks: Add(i) then Mark(1000 + i), until the move is done.
    let plan = RelocatePlan::default();
    let relocate = c.rts[0].relocate_units(&units, &plan, |_, _| {});
    let done = AtomicBool::new(false);
    let sent = std::sync::Mutex::new(Vec::new());
    let during = async {
        let mut i = 2;
        while !done.load(Ordering::SeqCst) && i < 500 {
            c.rts[2]
                .send_to_spot("st-1", &Add { seq: i })
                .await
                .unwrap();
            c.rts[2]
                .send_to_spot("st-1", &Mark { mark: 1000 + i })
                .await
                .unwrap();
            sent.lock().unwrap().extend([i, 1000 + i]);
            i += 1;
            tokio::time::sleep(Duration::from_millis(15)).await;
        }
    };
    let relocate = async {
        let r = relocate.await;
        done.store(true, Ordering::SeqCst);
        r
    };
    let (reports, ()) = tokio::join!(relocate, during);
    assert_eq!(
        outcomes(&reports),
        vec![("st-1".to_owned(), UnitOutcome::HandedOver)]
    );
    assert_eq!(reports[0].members, vec!["st-1-p0".to_owned()]);
    let s: Tally = c.rts[2].request_to_spot("st-1", &Read {}, T).await.unwrap();
    let mut expect = vec![1];
    expect.extend(sent.lock().unwrap().iter().copied());
    assert_eq!(s.seqs, expect, "nothing lost, repeated or reordered");
    let seen = completed.lock().unwrap().clone();
    assert_eq!(seen.len(), 1, "one callback, on the target: {seen:?}");
    let at = &seen[0];
    assert!(
        at.last().is_some_and(|m| *m >= 1000),
        "the move sealed right after a deferring turn: {at:?}"
    );
    assert_eq!(
        at[..],
        s.seqs[..at.len()],
        "the callback ran first on the target"
    );
    c.shutdown().await;
}

/// A JSON state adapter whose restores take 300 ms (a target slow to answer a Prepare). It
/// waits as a well-behaved slow adapter does, under `block_in_place` (see `StateAdapter`): a
/// bare 300 ms sleep would also hold every task queued on its worker, the ones this test times
/// among them, and so make the test measure tokio's scheduling instead of the budget.
struct SlowRestore;
impl StateAdapter<Tally> for SlowRestore {
    fn capture(&self, state: &Tally) -> Result<bytes::Bytes, CallError> {
        <JsonState as StateAdapter<Tally>>::capture(&JsonState, state)
    }
    fn restore(&self, bytes: &[u8]) -> Result<Tally, CallError> {
        tokio::task::block_in_place(|| std::thread::sleep(Duration::from_millis(300)));
        <JsonState as StateAdapter<Tally>>::restore(&JsonState, bytes)
    }
}

/// Issue 17 items 3 and 4 (wire §9 "Relocation state chunk", glossary §5 "In-flight payload
/// budget"): a chunk is never larger than the target admits (256 KiB, though the source would
/// send 1 MiB); with an in-flight budget smaller than one unit, a unit whose target still has a
/// unit's payload in flight waits — serving, unsealed — until the target answered that unit's
/// Prepares, so two units are never in flight to it at once; one whose deadline passes first
/// stays `Deadline`, never sealed; every state arrives whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chunks_respect_the_target_limit_and_budgets_pace_the_units() {
    use zlink::object::runtime::RelocationSettings;
    // Node 1, the only target, restores slowly.
    let c = cluster(|i| {
        if i == 1 {
            Relocation::PreserveWith(Arc::new(SlowRestore))
        } else {
            Relocation::PreserveWith(Arc::new(JsonState))
        }
    })
    .await;
    // Three spots of about 350 KB of state each (50,000 numbers as JSON).
    let n = 50_000;
    let ids: Vec<String> = (0..4).map(|i| format!("big-{i}")).collect();
    for id in &ids {
        c.rts[2]
            .send_to_instance_spot("tally", id, &Fill { n })
            .await
            .unwrap();
        // The one-way first message activates the spot; wait until it ran.
        let t0 = std::time::Instant::now();
        loop {
            let s: Tally = c.rts[2]
                .request_to_instance_spot("tally", id, &Read {}, T)
                .await
                .unwrap();
            if s.seqs.len() as u64 == n {
                break;
            }
            assert!(t0.elapsed() < WAIT, "{id} was not filled");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    c.nodes[1].set_placement_weight(100).unwrap();
    let t0 = std::time::Instant::now();
    while c.nodes[0]
        .peer(c.nodes[1].rid())
        .and_then(|p| p.descriptor)
        .is_none_or(|d| d.placement_weight != 100)
    {
        assert!(t0.elapsed() < WAIT, "descriptors did not propagate");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let units = c.rts[0].relocation_units();
    assert_eq!(units.len(), 4);
    let unit = |id: &str| {
        units
            .iter()
            .filter(|u| u.id == id)
            .cloned()
            .collect::<Vec<_>>()
    };
    // The chunk limit: the source would send 1 MiB chunks.
    c.rts[0].set_relocation_settings(RelocationSettings {
        chunk_limit: 1024 * 1024,
        ..RelocationSettings::default()
    });
    let plan = RelocatePlan::default();
    let r = c.rts[0]
        .relocate_units(&unit("big-0"), &plan, |_, _| {})
        .await;
    assert_eq!(
        outcomes(&r),
        vec![("big-0".to_owned(), UnitOutcome::HandedOver)]
    );
    let largest = c.rts[1]
        .relocation_stats()
        .largest_chunk_received
        .load(Ordering::Relaxed);
    assert_eq!(
        largest,
        256 * 1024,
        "chunks are cut to the target's admitted limit"
    );
    // The budget: below one unit's payload.
    let budget = 100_000;
    c.rts[0].set_relocation_settings(RelocationSettings {
        in_flight_budget: budget,
        ..RelocationSettings::default()
    });
    let stats = c.rts[0].relocation_stats();
    let high_before = stats.in_flight_high_water.load(Ordering::Relaxed);
    let (b, cc) = (unit("big-1"), unit("big-2"));
    let first = c.rts[0].relocate_units(&b, &plan, |_, _| {});
    let second = async {
        // Once big-1's payload is in flight (its target takes 300 ms to answer) …
        until_moves_started(&c.rts[0], 2).await;
        // … big-2 waits for room, unsealed: it still answers here meanwhile.
        let moving = c.rts[0].relocate_units(&cc, &plan, |_, _| {});
        let serving = async {
            tokio::time::sleep(Duration::from_millis(50)).await;
            let s: Tally = c.rts[0]
                .request_to_instance_spot("tally", "big-2", &Read {}, T)
                .await
                .unwrap();
            assert_eq!(
                c.rts[0]
                    .locate(ObjectKind::Spot, "big-2")
                    .await
                    .unwrap()
                    .here,
                "live"
            );
            s
        };
        // … and one whose deadline passes first stays, never sealed.
        let short = RelocatePlan {
            deadline: Duration::from_millis(50),
            ..plan.clone()
        };
        let d = unit("big-3");
        let late = c.rts[0].relocate_units(&d, &short, |_, _| {});
        let (r, s, l) = tokio::join!(moving, serving, late);
        assert_eq!(s.seqs.len() as u64, n);
        assert_eq!(
            outcomes(&l),
            vec![(
                "big-3".to_owned(),
                UnitOutcome::Stayed(StayReason::Deadline)
            )],
            "no room by its deadline"
        );
        assert_eq!(
            c.rts[0]
                .locate(ObjectKind::Spot, "big-3")
                .await
                .unwrap()
                .here,
            "live"
        );
        r
    };
    let (r1, r2) = tokio::join!(first, second);
    assert_eq!(
        outcomes(&r1),
        vec![("big-1".to_owned(), UnitOutcome::HandedOver)]
    );
    assert_eq!(
        outcomes(&r2),
        vec![("big-2".to_owned(), UnitOutcome::HandedOver)]
    );
    assert_eq!(
        stats.budget_waits.load(Ordering::Relaxed),
        1,
        "big-2 waited for room"
    );
    let high = stats.in_flight_high_water.load(Ordering::Relaxed);
    assert_eq!(
        high, high_before,
        "never two units' payloads in flight at once: {high}"
    );
    assert!(
        c.rts[1]
            .relocation_stats()
            .largest_chunk_received
            .load(Ordering::Relaxed)
            <= 256 * 1024
    );
    for id in &ids {
        let s: Tally = c.rts[2]
            .request_to_instance_spot("tally", id, &Read {}, T)
            .await
            .unwrap();
        assert_eq!(s.seqs, (0..n).collect::<Vec<_>>(), "{id} arrived whole");
    }
    c.shutdown().await;
}

/// Issue 17 item 7 "FollowChainFull" (routing §2.5: a follow chain is at most 8 hops): every
/// commit logs the move in the authority payload; an object moved 8 times within the follow
/// window stays where it is on the 9th try (`Stayed(FollowChainFull)`), serving, with nothing
/// lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ninth_move_within_the_follow_window_stays_follow_chain_full() {
    let c = one_tally("fc-1").await;
    short_cutover(&c);
    let mut at = 0;
    for hop in 0..8 {
        let to = 1 - at;
        let plan = plan_to(c.nodes[to].rid());
        let r = c.rts[at].relocate(&plan).await;
        assert_eq!(
            outcomes(&r),
            vec![("fc-1".to_owned(), UnitOutcome::HandedOver)],
            "hop {hop}"
        );
        at = to;
    }
    let AuthorityRead::Found(a) = c.authority(ObjectKind::Spot, "fc-1").await else {
        panic!("missing");
    };
    assert_eq!(zlink::object::runtime::recent_moves(&a.payload).len(), 8);
    let plan = plan_to(c.nodes[1 - at].rid());
    let r = c.rts[at].relocate(&plan).await;
    assert_eq!(
        outcomes(&r),
        vec![(
            "fc-1".to_owned(),
            UnitOutcome::Stayed(StayReason::FollowChainFull)
        )]
    );
    assert_eq!(owner_of(&c, "fc-1").await, c.nodes[at].rid());
    let s: Tally = c.rts[2]
        .request_to_instance_spot("tally", "fc-1", &Add { seq: 1 }, T)
        .await
        .unwrap();
    assert_eq!(s.seqs, vec![0, 1], "state intact, still serving");
    c.shutdown().await;
}

/// Fault matrix "notifications dropped → caches converge; a sender that never refreshes stays
/// strictly ordered" (routing §2.5, wire §3.1): the old owner's `messageFollow` notices are
/// lost, so a caller keeps its stale route; its one-way burst on that route is followed to the
/// new owner and applied complete and in order; once its cached route ages out it resolves the
/// new owner by itself and its calls stop taking the detour.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_follow_notices_keep_order_and_caches_converge() {
    use zlink::object::runtime::{RelocationSettings, TransferFault};
    let c = one_tally("nd-1").await;
    short_cutover(&c);
    c.rts[0].set_relocation_settings(RelocationSettings {
        cutover_wait: Duration::from_millis(50),
        fault: Some(TransferFault::DropFollowNotices),
        ..RelocationSettings::default()
    });
    // The caller caches node 0's route.
    let _: Tally = c.rts[2]
        .request_to_instance_spot("tally", "nd-1", &Read {}, T)
        .await
        .unwrap();
    let plan = plan_to(c.nodes[1].rid());
    let r = c.rts[0].relocate(&plan).await;
    assert_eq!(
        outcomes(&r),
        vec![("nd-1".to_owned(), UnitOutcome::HandedOver)]
    );
    // A one-way burst on the stale route.
    let burst = 200;
    for seq in 1..=burst {
        c.rts[2]
            .send_to_instance_spot("tally", "nd-1", &Add { seq })
            .await
            .unwrap();
    }
    let t0 = std::time::Instant::now();
    let s = loop {
        let s: Tally = c.rts[1]
            .request_to_instance_spot("tally", "nd-1", &Read {}, T)
            .await
            .unwrap();
        if s.seqs.len() as u64 > burst {
            break s;
        }
        assert!(
            t0.elapsed() < WAIT,
            "the burst did not arrive: {}",
            s.seqs.len()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    assert_eq!(
        s.seqs,
        (0..=burst).collect::<Vec<_>>(),
        "complete and in order"
    );
    let followed = c.rts[0].relocation_stats().followed.load(Ordering::Relaxed);
    assert_eq!(
        followed, burst,
        "the whole burst took the detour (never refreshed)"
    );
    assert_eq!(
        c.rts[2]
            .relocation_stats()
            .follow_notices_applied
            .load(Ordering::Relaxed),
        0,
        "no notice reached the caller"
    );
    // Converge: the stale route ages out and the caller finds the new owner itself.
    let mut seq = burst;
    let t0 = std::time::Instant::now();
    loop {
        seq += 1;
        let before = c.rts[0].relocation_stats().followed.load(Ordering::Relaxed);
        let s: Tally = c.rts[2]
            .request_to_instance_spot("tally", "nd-1", &Add { seq }, T)
            .await
            .unwrap();
        assert_eq!(s.seqs, (0..=seq).collect::<Vec<_>>());
        if c.rts[0].relocation_stats().followed.load(Ordering::Relaxed) == before {
            break;
        }
        assert!(t0.elapsed() < WAIT, "the caller's cache never converged");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    c.shutdown().await;
}

/// A cluster whose node 0 reaches node 1 only through a fault proxy (the lower RID dials;
/// node 1 advertises the proxy's port), with tally `id` on node 0 (seq 0 applied) and targets
/// open.
async fn proxied_tally(
    id: &str,
    policy: impl Fn(usize) -> Relocation<Tally> + 'static,
) -> (Cluster, fault_proxy::FaultProxy) {
    let real = fault_proxy::port_below_the_ephemeral_range();
    let proxy = fault_proxy::FaultProxy::start(0, ([127, 0, 0, 1], real).into()).unwrap();
    let front = proxy.addr().port();
    let c = Cluster::builder(3)
        .registry(move |i| registry(policy(i)))
        .placement_weights(&[100, 0, 0])
        .configure(move |i, cfg| {
            if i == 1 {
                cfg.port = real;
                cfg.advertise_port = Some(front);
            }
        })
        .start()
        .await;
    let _: Tally = c.rts[2]
        .request_to_instance_spot("tally", id, &Add { seq: 0 }, T)
        .await
        .unwrap();
    open_targets(&c).await;
    assert!(
        proxy.forwarded() > 0,
        "node 0 reaches node 1 through the proxy"
    );
    (c, proxy)
}

/// Move `id` from node 0 to node 1 while `fault` runs; then check the handover, that the
/// source saw a new epoch, and that seqs 0..=3 (1..=3 sent during the move) and 4 are there
/// once each, in order.
async fn move_through_a_fault(c: &Cluster, id: &str, fault: impl std::future::Future<Output = ()>) {
    let plan = plan_to(c.nodes[1].rid());
    let relocate = c.rts[0].relocate(&plan);
    let during = async {
        until_moves_started(&c.rts[0], 1).await;
        // Held meanwhile (node 2 reaches node 0 directly), relayed after Ready.
        for seq in 1..=3 {
            c.rts[2]
                .send_to_instance_spot("tally", id, &Add { seq })
                .await
                .unwrap();
        }
    };
    let (reports, (), ()) = tokio::join!(relocate, during, fault);
    assert_eq!(
        outcomes(&reports),
        vec![(id.to_owned(), UnitOutcome::HandedOver)]
    );
    assert!(
        c.rts[0]
            .relocation_stats()
            .epochs_lost
            .load(Ordering::Relaxed)
            >= 1,
        "the source saw the new epoch and sent again"
    );
    assert_eq!(owner_of(c, id).await, c.nodes[1].rid());
    let s: Tally = c.rts[2]
        .request_to_instance_spot("tally", id, &Add { seq: 4 }, T)
        .await
        .unwrap();
    assert_eq!(s.seqs, vec![0, 1, 2, 3, 4], "nothing lost or repeated");
}

/// Stall the proxy's traffic for `stall`, then cut every connection, then let it pass again.
async fn stall_then_cut(proxy: &fault_proxy::FaultProxy, stall: Duration) {
    proxy.set(fault_proxy::Mode::Stall);
    tokio::time::sleep(stall).await;
    proxy.set(fault_proxy::Mode::Cut);
    tokio::time::sleep(Duration::from_millis(100)).await;
    proxy.set(fault_proxy::Mode::Pass);
}

/// Fault matrix "an epoch lost before Ready → resend the Prepares and chunks under the same
/// identity" (wire §9): the proxy stalls from before the move and then cuts, so the Prepare
/// and its chunks are lost with that epoch; on the new epoch the source sends them again (same
/// RelocationId), the target restores and commits, and the unit arrives with its state and the
/// messages sent meanwhile, once each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transfer_lost_with_its_epoch_is_sent_again_on_the_next() {
    let (c, proxy) = proxied_tally("ep-1", |_| Relocation::PreserveWith(Arc::new(JsonState))).await;
    proxy.set(fault_proxy::Mode::Stall);
    move_through_a_fault(
        &c,
        "ep-1",
        stall_then_cut(&proxy, Duration::from_millis(150)),
    )
    .await;
    c.shutdown().await;
}

/// Fault matrix "an epoch lost around Ready": the target takes 300 ms to restore; the proxy
/// stalls once the payload reached it, for 450 ms, and then cuts, so the target's Ready is lost
/// with that epoch; on the new epoch the source sends the Prepare and chunks again and the
/// target, Ready already, answers the resent Prepare with Ready again (its commit then comes
/// from the cutover, not its fallback); the unit arrives once, nothing lost or applied twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ready_lost_with_its_epoch_is_answered_again() {
    let (c, proxy) = proxied_tally("ep-2", |i| {
        if i == 1 {
            Relocation::PreserveWith(Arc::new(SlowRestore))
        } else {
            Relocation::PreserveWith(Arc::new(JsonState))
        }
    })
    .await;
    // The target waits long for a cutover, so its commit tells whether a Ready reached the
    // source on the new epoch (a cutover came) or not (its fallback fired).
    c.rts[1].set_relocation_settings(zlink::object::runtime::RelocationSettings {
        cutover_wait: Duration::from_secs(5),
        ..zlink::object::runtime::RelocationSettings::default()
    });
    let fault = async {
        // Once the target holds the payload (it restores for 300 ms, then answers Ready) …
        let t0 = std::time::Instant::now();
        while c.rts[1]
            .relocation_stats()
            .largest_chunk_received
            .load(Ordering::Relaxed)
            == 0
        {
            assert!(t0.elapsed() < WAIT, "the transfer did not arrive");
            tokio::task::yield_now().await;
        }
        // … its Ready goes into the stall and is lost with the cut.
        stall_then_cut(&proxy, Duration::from_millis(450)).await;
    };
    move_through_a_fault(&c, "ep-2", fault).await;
    assert_eq!(
        c.rts[1]
            .relocation_stats()
            .cutover_timeouts
            .load(Ordering::Relaxed),
        0,
        "the source got a Ready on the new epoch and sent its cutover"
    );
    c.shutdown().await;
}

/// Wait until runtime `rt` has sent the transfers of `n` moves.
async fn until_moves_started<S: zlink::object::runtime::ObjectStore>(
    rt: &zlink::object::runtime::ObjectRuntime<S>,
    n: u64,
) {
    let t0 = std::time::Instant::now();
    while rt.relocation_stats().moves_started.load(Ordering::Relaxed) < n {
        assert!(t0.elapsed() < WAIT, "{n} transfer(s) did not start");
        tokio::task::yield_now().await;
    }
}

/// A plan that moves units only to node `rid`.
fn plan_to(rid: impl Into<String>) -> RelocatePlan {
    RelocatePlan {
        target_rids: vec![rid.into()],
        ..RelocatePlan::default()
    }
}

/// Every node of `c` waits 50 ms for a cutover (the tests that move often).
fn short_cutover(c: &Cluster) {
    for rt in &c.rts {
        rt.set_relocation_settings(zlink::object::runtime::RelocationSettings {
            cutover_wait: Duration::from_millis(50),
            ..zlink::object::runtime::RelocationSettings::default()
        });
    }
}

/// Issue 17 items 2 and 5, capacity: a target whose limits its descriptor does not project (so
/// the source picks it) refuses a unit that does not fit at Prepare (`restoreFailed`) and the
/// source keeps serving it; a target that projects its limits is never picked when full
/// (`Stayed(NoTarget)`, no Prepare sent); the store refuses a creation beyond the limit; with
/// room again the unit moves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_target_is_skipped_or_refuses_the_prepare_and_the_unit_keeps_serving() {
    use zlink_store::types::CapacityLimits;
    let full = |actors| CapacityLimits { actors, spots: 0 };
    // Node 1 projects nothing; node 2 projects one Actor.
    let c = Cluster::builder(3)
        .registry(|_| actor_registry(Arc::default()))
        .entry_spots()
        .placement_weights(&[100, 0, 0])
        .configure(move |i, cfg| {
            if i == 2 {
                zlink::relocation::capacity::with_limits(&mut cfg.object_capabilities, full(1));
            }
        })
        .start()
        .await;
    c.rts[0]
        .create_actor("walker", "cap-0", None)
        .await
        .unwrap();
    let _: Tally = c.rts[1]
        .request_to_actor("cap-0", &Add { seq: 0 }, T)
        .await
        .unwrap();
    for i in [1, 2] {
        let rt = &c.rts[i];
        rt.create_actor_in("walker", &format!("fill-{i}"), &rt.entry_spot_id(), None)
            .await
            .unwrap();
        let used = rt.capacity_use().await.unwrap();
        assert_eq!(
            (used.actors, used.spots),
            (1, 0),
            "node {i}: its one Actor counts, its Entry Spot does not"
        );
        rt.set_capacity_limits(full(1)).await.unwrap();
    }
    // The store refuses a creation beyond the limit.
    let e = c.rts[1]
        .create_actor_in("walker", "one-more", &c.rts[1].entry_spot_id(), None)
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Rejected, "{e}");
    open_targets(&c).await;
    // Node 1 looks free to the source: its Prepare refuses.
    let reports = c.rts[0].relocate(&plan_to("node-1")).await;
    assert_eq!(
        outcomes(&reports),
        vec![("cap-0".into(), UnitOutcome::Failed("restoreFailed".into()))]
    );
    let refusals = |i: usize| {
        c.rts[i]
            .relocation_stats()
            .capacity_refusals
            .load(Ordering::Relaxed)
    };
    assert_eq!(refusals(1), 1);
    let t: Tally = c.rts[1]
        .request_to_actor("cap-0", &Add { seq: 1 }, T)
        .await
        .unwrap();
    assert_eq!(t.seqs, vec![0, 1], "restored and serving on node 0");
    let AuthorityRead::Found(a) = c.authority(ObjectKind::Actor, "cap-0").await else {
        panic!("cap-0 is missing");
    };
    assert_eq!(a.owner_node.rid, "node-0");
    // Node 2 projects its limit: never picked while full, nothing sent to it.
    let started = c.rts[0]
        .relocation_stats()
        .moves_started
        .load(Ordering::Relaxed);
    let reports = c.rts[0].relocate(&plan_to("node-2")).await;
    assert_eq!(
        outcomes(&reports),
        vec![("cap-0".into(), UnitOutcome::Stayed(StayReason::NoTarget))]
    );
    assert_eq!(
        c.rts[0]
            .relocation_stats()
            .moves_started
            .load(Ordering::Relaxed),
        started,
        "no transfer started"
    );
    assert_eq!(refusals(2), 0);
    // Room on node 1 again: the unit moves there.
    c.rts[1].set_capacity_limits(full(2)).await.unwrap();
    let reports = c.rts[0].relocate(&plan_to("node-1")).await;
    assert_eq!(
        outcomes(&reports),
        vec![("cap-0".into(), UnitOutcome::HandedOver)]
    );
    assert_eq!(c.rts[1].capacity_use().await.unwrap().actors, 2);
    let t: Tally = c.rts[2]
        .request_to_actor("cap-0", &Add { seq: 2 }, T)
        .await
        .unwrap();
    assert_eq!(t.seqs, vec![0, 1, 2]);
    c.shutdown().await;
}

/// One tally `id` on node 0 whose turn is held (a [`HoldTurn`] of its own), with the requests
/// `asks` (from node 2) queued behind it, then moved to node 1 while they wait: they travel as
/// saved work. Returns the unit's outcome and the callers' tasks.
async fn move_with_carried_requests<S: ObjectStore>(
    c: &Cluster<S>,
    id: &str,
    asks: Vec<SlowAdd>,
    timeout: Duration,
) -> (
    UnitOutcome,
    Vec<tokio::task::JoinHandle<Result<Tally, CallError>>>,
) {
    let _: Tally = c.rts[2]
        .request_to_instance_spot("tally", id, &Add { seq: 0 }, T)
        .await
        .unwrap();
    open_targets(c).await;
    let gate = hold(id);
    c.rts[2]
        .send_to_instance_spot("tally", id, &HoldTurn { key: id.to_owned() })
        .await
        .unwrap();
    let t0 = std::time::Instant::now();
    while !gate.entered.load(Ordering::SeqCst) {
        assert!(t0.elapsed() < WAIT, "the held turn did not start");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    // One at a time, each queued before the next is sent: they queue in this order.
    let mut calls = Vec::new();
    for (i, a) in asks.into_iter().enumerate() {
        let caller = c.rts[2].clone();
        let id = id.to_owned();
        calls.push(tokio::spawn(async move {
            caller
                .request_to_instance_spot::<SlowAdd, Tally>("tally", &id, &a, timeout)
                .await
        }));
        let t0 = std::time::Instant::now();
        while c.rts[0].queued_work() < i + 1 {
            assert!(t0.elapsed() < WAIT, "the requests did not queue");
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
    let plan = plan_to("node-1");
    let (reports, ()) = tokio::join!(c.rts[0].relocate(&plan), async {
        tokio::time::sleep(Duration::from_millis(50)).await;
        gate.release.add_permits(1);
    });
    (reports[0].outcome.clone(), calls)
}

fn terminal_stat<S: ObjectStore>(
    c: &Cluster<S>,
    i: usize,
    f: fn(&zlink::object::runtime::RelocationStats) -> &std::sync::atomic::AtomicU64,
) -> u64 {
    f(c.rts[i].relocation_stats()).load(Ordering::Relaxed)
}

/// Requests node 0 carried into its moves: saved in envelopes, or held and relayed.
fn carried_requests(c: &Cluster) -> u64 {
    terminal_stat(c, 0, |s| &s.saved_work) + terminal_stat(c, 0, |s| &s.relayed)
}

async fn linked_roots<S: ObjectStore>(
    c: &Cluster<S>,
    id: &str,
) -> Vec<(
    String,
    u64,
    u64,
    zlink_protocol::generated::RelocationRootPointer,
)> {
    match c.authority(ObjectKind::Spot, id).await {
        AuthorityRead::Found(a) => zlink::object::runtime::linked_terminal_roots(&a.payload),
        AuthorityRead::Missing { .. } => panic!("{id} is missing"),
    }
}

/// Issue 17 item 9 (wire §11): requests carried into a unit have their terminals relayed (33)
/// and recorded in a durable root — written, verified and linked with the counts by a
/// Preserve CAS — and once every one is acknowledged (46) the root is released: `Completed`,
/// nothing left linked in the authority row.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn carried_requests_complete_through_a_durable_root_that_is_released_at_the_end() {
    let c = cluster(|_| Relocation::PreserveWith(Arc::new(JsonState))).await;
    carried_requests_complete(c, "k-1").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn carried_requests_complete_through_a_durable_root_that_is_released_at_the_end_on_redis() {
    let (_server, builder) = on_redis().await;
    let c = cluster_on(builder, |_| Relocation::PreserveWith(Arc::new(JsonState))).await;
    carried_requests_complete(c, "k-1r").await;
}

/// Tally `id` (its name also names its held turn, so each case's is its own).
async fn carried_requests_complete<S: ObjectStore>(c: Cluster<S>, id: &str) {
    // The slow ones keep the unit open after the first carried one is answered and
    // acknowledged: a root is linked, then released once the rest are (the first may still
    // run at the source before the capture).
    let asks = vec![
        SlowAdd { ms: 0, seq: 1 },
        SlowAdd { ms: 300, seq: 2 },
        SlowAdd { ms: 300, seq: 3 },
    ];
    let (outcome, calls) = move_with_carried_requests(&c, id, asks, T).await;
    assert_eq!(outcome, UnitOutcome::HandedOver);
    for (i, call) in calls.into_iter().enumerate() {
        let t = call.await.unwrap().unwrap();
        assert!(t.seqs.contains(&(i as u64 + 1)), "{t:?}");
    }
    common::eventually("the unit's terminals completed", || {
        terminal_stat(&c, 1, |s| &s.terminals_completed) == 1
    })
    .await;
    assert!(
        terminal_stat(&c, 1, |s| &s.terminal_roots_published) >= 2,
        "a root with the first terminal, then the release"
    );
    assert_eq!(terminal_stat(&c, 1, |s| &s.terminals_force_stopped), 0);
    assert!(
        linked_roots(&c, id).await.is_empty(),
        "the root is released"
    );
    let s: Tally = c.rts[2]
        .request_to_instance_spot("tally", id, &Read {}, T)
        .await
        .unwrap();
    // Pipelined requests may reorder across a move (wire §10): each ran once.
    let mut ran = s.seqs.clone();
    ran.sort_unstable();
    assert_eq!(ran, vec![0, 1, 2, 3], "each carried request ran once");
    c.shutdown().await;
}

/// Issue 17 item 9: carried terminals that are never acknowledged (every 33 lost, by
/// failpoint) end the unit `ForceStopped` at its last deadline, and the root — each terminal
/// with its reply — stays linked and readable for the retention, with TerminalCompletionCount
/// = PendingRelayCount = the requests carried.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unacknowledged_terminals_are_force_stopped_and_their_root_stays() {
    let c = cluster(|_| Relocation::PreserveWith(Arc::new(JsonState))).await;
    for (i, rt) in c.rts.iter().enumerate() {
        rt.set_relocation_settings(zlink::object::runtime::RelocationSettings {
            cutover_wait: Duration::from_millis(50),
            carried_request_deadline: Duration::from_millis(1_500),
            terminal_retention: Duration::from_secs(3),
            fault: (i == 1).then_some(zlink::object::runtime::TransferFault::DropReplyRelays),
            ..zlink::object::runtime::RelocationSettings::default()
        });
    }
    let asks = vec![SlowAdd { ms: 0, seq: 1 }, SlowAdd { ms: 300, seq: 2 }];
    let (outcome, calls) =
        move_with_carried_requests(&c, "f-1", asks, Duration::from_millis(1_500)).await;
    assert_eq!(outcome, UnitOutcome::HandedOver);
    for call in calls {
        // A carried one ends at its deadline (its terminal never came back).
        let _ = call.await.unwrap();
    }
    common::eventually("force stopped at the deadline", || {
        terminal_stat(&c, 1, |s| &s.terminals_force_stopped) == 1
    })
    .await;
    let carried = terminal_stat(&c, 1, |s| &s.carried_accepted);
    assert!((1..=2).contains(&carried), "{carried}");
    assert_eq!(terminal_stat(&c, 1, |s| &s.terminals_completed), 0);
    assert_eq!(
        terminal_stat(&c, 1, |s| &s.reply_relays_sent),
        0,
        "every 33 lost"
    );
    let roots = linked_roots(&c, "f-1").await;
    assert_eq!(roots.len(), 1, "{roots:?}");
    let (_, count, pending, pointer) = &roots[0];
    assert_eq!(
        (*count, *pending),
        (carried, carried),
        "every carried terminal recorded, none acknowledged"
    );
    let stored = zlink_store::RelocationStore::read(&**c.store(), &pointer.reference)
        .await
        .unwrap()
        .expect("the root stays for the retention");
    let manifest = zlink_protocol::generated::RelocationManifestV1::decode(&stored.bytes).unwrap();
    assert_eq!(manifest.object_id, "f-1");
    assert_eq!(manifest.inventory_digest, pointer.inventory_digest);
    for chunk in &manifest.chunks {
        assert!(
            zlink_store::RelocationStore::read(&**c.store(), &chunk.reference)
                .await
                .unwrap()
                .is_some(),
            "chunk {} is kept",
            chunk.reference
        );
    }
    // Each request ran once.
    let s: Tally = c.rts[1]
        .request_to_instance_spot("tally", "f-1", &Read {}, T)
        .await
        .unwrap();
    let mut ran = s.seqs.clone();
    ran.sort_unstable();
    assert_eq!(ran, vec![0, 1, 2]);
    // At the end of its retention (3 s here) the root is unlinked, then deleted.
    common::eventually("the kept root released after its retention", || {
        terminal_stat(&c, 1, |s| &s.terminal_roots_expired) == 1
    })
    .await;
    assert!(linked_roots(&c, "f-1").await.is_empty());
    assert!(
        zlink_store::RelocationStore::read(&**c.store(), &pointer.reference)
            .await
            .unwrap()
            .is_none(),
        "the root is deleted"
    );
    c.shutdown().await;
}

/// Issue 17 item 9: a published root that is found missing when the next version replaces it
/// ends the unit `RelocationDataLost` — counted, the committed owner kept (no rollback); the
/// terminal that publish would have recorded still reaches its requester.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_published_root_found_missing_is_relocation_data_lost_without_rollback() {
    let c = cluster(|_| Relocation::PreserveWith(Arc::new(JsonState))).await;
    let asks = vec![
        SlowAdd { ms: 0, seq: 1 },
        SlowAdd { ms: 0, seq: 2 },
        SlowAdd { ms: 1_500, seq: 3 },
    ];
    let (outcome, mut calls) =
        move_with_carried_requests(&c, "d-1", asks, Duration::from_millis(4_000)).await;
    assert_eq!(outcome, UnitOutcome::HandedOver);
    // Carried: saved in the envelope or held and relayed; the first may still have run at the
    // source before the capture paused the object.
    let carried = carried_requests(&c);
    assert!((2..=3).contains(&carried), "{carried}");
    // The fast ones: published, relayed, acknowledged; the root records their acks.
    calls.remove(0).await.unwrap().unwrap();
    calls.remove(0).await.unwrap().unwrap();
    let t0 = std::time::Instant::now();
    let pointer = loop {
        let roots = linked_roots(&c, "d-1").await;
        if let [(_, count, 0, p)] = roots.as_slice()
            && *count == carried - 1
        {
            break p.clone();
        }
        assert!(t0.elapsed() < WAIT, "the acks were not recorded: {roots:?}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    // Lose the published root while the slow request runs.
    assert!(
        zlink_store::RelocationStore::delete(&**c.store(), &pointer.reference)
            .await
            .unwrap()
    );
    common::eventually("RelocationDataLost", || {
        terminal_stat(&c, 1, |s| &s.terminals_data_lost) == 1
    })
    .await;
    // Its terminal is relayed all the same: the root is bookkeeping, not the reply's path.
    let slow = calls.remove(0).await.unwrap();
    assert!(slow.is_ok(), "{slow:?}");
    assert_eq!(owner_of(&c, "d-1").await, "node-1", "no rollback");
    c.shutdown().await;
}

/// Issue 17 item 9, found by `scripts/bench-relocation`: callers keep requesting 120 Actors
/// while their node relocates them all; every request is answered (carried ones through the
/// targets' terminal ledgers — a request accepted while a ledger was being released once lost
/// its answer), none fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_flowing_through_a_whole_node_move_are_all_answered() {
    let c = entry_cluster(|_| actor_registry(Arc::default())).await;
    let ids: Vec<String> = (0..120).map(|i| format!("busy-{i}")).collect();
    for id in &ids {
        c.rts[0].create_actor("walker", id, None).await.unwrap();
    }
    open_targets(&c).await;
    let stop = Arc::new(AtomicBool::new(false));
    let mut callers = Vec::new();
    for k in 0..16 {
        let (rt, ids, stop) = (c.rts[2].clone(), ids.clone(), Arc::clone(&stop));
        callers.push(tokio::spawn(async move {
            let (mut ok, mut failed) = (0u64, Vec::new());
            let mut i = k;
            while !stop.load(Ordering::Relaxed) {
                let id = &ids[i % ids.len()];
                match rt.request_to_actor::<Read, Tally>(id, &Read {}, T).await {
                    Ok(_) => ok += 1,
                    Err(e) => failed.push(format!("{id}: {e}")),
                }
                i += 16;
            }
            (ok, failed)
        }));
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let reports = c.rts[0].relocate(&RelocatePlan::default()).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, Ordering::Relaxed);
    let mut answered = 0;
    for caller in callers {
        let (ok, failed) = caller.await.unwrap();
        assert!(failed.is_empty(), "{failed:?}");
        answered += ok;
    }
    assert!(answered > 0);
    assert!(
        reports.iter().all(|r| r.outcome == UnitOutcome::HandedOver),
        "{:?}",
        outcomes(&reports)
    );
    let carried: u64 = (1..3)
        .map(|i| terminal_stat(&c, i, |s| &s.carried_accepted))
        .sum();
    eprintln!("{answered} answered, {carried} of them carried through a move");
    c.shutdown().await;
}
