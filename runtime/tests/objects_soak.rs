//! Single activation under seeded random operations on a real `redis-server` (issue "Spots and
//! Actors", acceptance: ≥ 10,000 steps). Three in-process MeshNodes, each with its own Redis
//! client and object runtime, share one Redis namespace. Each step is one of: get-or-create
//! of a User Spot, create of an Actor, close / destroy, a call by ID, pausing a node's lease
//! renewals (its lease then lapses and its objects get cleaned up and re-created elsewhere),
//! and a node's death and restart (new lifecycle).
//!
//! After **every** step: at most one *admitting* live instance per ID across all nodes (live
//! on a node whose fencing deadline has not passed). The store is checked for the IDs the step
//! touched, and for all IDs every 100 steps: an admitting instance must be the store's Ready
//! record for that ID, on that node, with that ObjectGeneration.
//!
//! Seeded (`ZLINK_TEST_SEED`, default fixed; `common::rng`) so a failure replays;
//! `ZLINK_SOAK_STEPS` (10,000) and a 6-minute bound keep it finite.
#![allow(clippy::unwrap_used)]

mod common;
#[path = "../../store/tests/support/redis_server.rs"]
mod redis_server;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::cluster::start_object_node;
use common::config;
use common::rng::TestRng;
use serde::{Deserialize, Serialize};
use zlink::call::error::CallError;
use zlink::mesh::{Handlers, JsonMessage, MeshNode};
use zlink::object::ObjectCalls;
use zlink::object::exec::ObjectHandlers;
use zlink::object::registry::{FactoryInput, Registry};
use zlink::object::runtime::ObjectRuntime;
use zlink_store::LocationStore;
use zlink_store::redis::{RedisStore, RedisStoreConfig};
use zlink_store::types::{AuthorityKey, AuthorityRead, AuthorityState, ObjectKind};

const NODES: usize = 3;
const SPOTS: [&str; 4] = ["s-0", "s-1", "s-2", "s-3"];
const ACTORS: [&str; 4] = ["a-0", "a-1", "a-2", "a-3"];
const T: Duration = Duration::from_secs(5);

#[derive(Debug, Serialize, Deserialize)]
struct Ping;
impl JsonMessage for Ping {
    const PACKET_NAME: &'static str = "soak.Ping";
}

fn registry() -> Registry {
    let mut r = Registry::new();
    let h = || {
        let mut h: ObjectHandlers<u64> = ObjectHandlers::new();
        h.on_request(|ctx, _: Ping| async move {
            *ctx.state() += 1;
            Ok::<_, CallError>(Ping)
        });
        h
    };
    r.user_spot("hall", |_: FactoryInput| async { Ok(0u64) }, h)
        .register();
    r.actor("player", |_: FactoryInput| async { Ok(0u64) }, h)
        .register();
    r.entry_spot("entry", |_: FactoryInput| async { Ok(0u64) }, h)
        .register();
    r
}

struct Node {
    mesh: Arc<MeshNode>,
    rt: ObjectRuntime<RedisStore>,
    store: Arc<RedisStore>,
}

async fn store(url: &str, ns: &str) -> Arc<RedisStore> {
    Arc::new(
        RedisStore::connect(
            url,
            RedisStoreConfig {
                namespace: ns.into(),
                response_timeout: Duration::from_secs(2),
                connection_timeout: Duration::from_millis(500),
                reconnect_retries: 1,
            },
        )
        .await
        .unwrap(),
    )
}

/// Node `i` with a Redis client of its own (each node's store connection fails on its own).
async fn start_node(i: usize, url: &str, ns: &str) -> Node {
    let store = store(url, ns).await;
    let reg = registry();
    let mut cfg = config("soak", &format!("node-{i}"));
    cfg.object_capabilities = reg.capabilities();
    cfg.entry_spot_prefix = Some(format!("n{i}"));
    let (mesh, rt) = start_object_node(cfg, Handlers::new(), Arc::clone(&store), reg).await;
    Node { mesh, rt, store }
}

/// Wait until the nodes whose lease is alive see each other (a node whose lease lapsed is gone
/// from discovery and is never connected again).
async fn wait_mesh(nodes: &[Node]) {
    for a in nodes.iter().filter(|n| n.rt.admitting()) {
        for b in nodes.iter().filter(|n| n.rt.admitting()) {
            if a.mesh.rid() != b.mesh.rid() {
                let _ = a
                    .mesh
                    .wait_ready(b.mesh.rid(), Duration::from_secs(5))
                    .await;
            }
        }
    }
}

fn kind_of(id: &str) -> ObjectKind {
    if id.starts_with("s-") {
        ObjectKind::Spot
    } else {
        ObjectKind::Actor
    }
}

/// At most one admitting live instance of `id`; with `check_store`, it is the store's Ready
/// record on that node with that generation.
async fn check(nodes: &[Node], id: &str, check_store: bool, step: usize, seed: u64) {
    let kind = kind_of(id);
    let admitting: Vec<(usize, u64)> = nodes
        .iter()
        .enumerate()
        .filter(|(_, n)| n.rt.admitting())
        .filter_map(|(i, n)| n.rt.live_generation(kind, id).map(|g| (i, g)))
        .collect();
    assert!(
        admitting.len() <= 1,
        "step {step} (seed {seed:#x}): {id} admitting on {admitting:?}"
    );
    if !check_store {
        return;
    }
    if let Some(&(i, g)) = admitting.first() {
        let key = AuthorityKey::new(kind, id).unwrap();
        match nodes[i].store.read_authority(&key).await {
            Ok(AuthorityRead::Found(a)) => {
                // Admission may have closed between the two reads (the lease lapsed): the
                // store may then already hold another incarnation. Re-check before failing.
                let ok = a.state == AuthorityState::Ready
                    && a.owner_node.rid == nodes[i].mesh.rid()
                    && a.object_generation == g;
                assert!(
                    ok || !nodes[i].rt.admitting(),
                    "step {step} (seed {seed:#x}): {id} admitting on node-{i} gen {g}, store has {:?} on {} gen {}",
                    a.state,
                    a.owner_node.rid,
                    a.object_generation
                );
            }
            Ok(AuthorityRead::Missing { .. }) => assert!(
                !nodes[i].rt.admitting(),
                "step {step} (seed {seed:#x}): {id} admitting on node-{i} but Missing in the store"
            ),
            Err(_) => {}
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_activation_holds_over_seeded_random_steps_on_redis() {
    let steps: usize = std::env::var("ZLINK_SOAK_STEPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    let mut rng = TestRng::from_env(0x5eed_0b1e_c7a1_1ce5);
    let seed = rng.seed();
    let bound = Instant::now() + Duration::from_secs(360);
    let server = redis_server::RedisServer::start().await;
    let ns = format!("soak-{}", std::process::id());
    let mut nodes = Vec::new();
    for i in 0..NODES {
        nodes.push(start_node(i, &server.url(), &ns).await);
    }
    wait_mesh(&nodes).await;
    let ids: Vec<&str> = SPOTS.iter().chain(ACTORS.iter()).copied().collect();
    let (mut restarts, mut pauses, mut created) = (0, 0, 0);
    // Time per kind of step (create, remove, call, pause, restart) and in the checks.
    let mut spent = [Duration::ZERO; 6];
    for step in 0..steps {
        assert!(
            Instant::now() < bound,
            "soak over its time bound at step {step}"
        );
        let n = rng.index(NODES);
        let id = ids[rng.index(ids.len())];
        let dice = rng.below(1000);
        let rt = &nodes[n].rt;
        let t0 = Instant::now();
        let cat = match dice {
            0..=349 => 0,
            350..=549 => 1,
            550..=989 => 2,
            990..=994 => 3,
            _ => 4,
        };
        match dice {
            0..=349 if kind_of(id) == ObjectKind::Spot => {
                if rt
                    .get_or_create_user_spot("hall", id, None, T)
                    .await
                    .is_ok_and(|(_, how)| how == zlink::object::runtime::Creation::Created)
                {
                    created += 1;
                }
            }
            0..=349 => {
                if rt.create_actor("player", id, None).await.is_ok() {
                    created += 1;
                }
            }
            350..=549 => {
                let _ = if kind_of(id) == ObjectKind::Spot {
                    rt.close_user_spot(id).await
                } else {
                    rt.destroy_actor(id).await
                };
            }
            550..=989 => {
                let _ = if kind_of(id) == ObjectKind::Spot {
                    rt.request_to_spot::<Ping, Ping>(id, &Ping, T).await
                } else {
                    rt.request_to_actor::<Ping, Ping>(id, &Ping, T).await
                };
            }
            990..=994 => {
                // This node's store connection "breaks": no more renewals. It fences itself,
                // its lease lapses (2 s), and its objects become reclaimable elsewhere.
                nodes[n].mesh.set_lease_renewal_paused(true);
                pauses += 1;
            }
            _ => {
                // Node death and restart: a new lifecycle of the same RID.
                let old = nodes.remove(n);
                old.rt.shutdown().await;
                old.mesh.shutdown().await;
                nodes.insert(n, start_node(n, &server.url(), &ns).await);
                wait_mesh(&nodes).await;
                restarts += 1;
            }
        }
        spent[cat] += t0.elapsed();
        let t1 = Instant::now();
        for other in &ids {
            check(&nodes, other, *other == id || step % 100 == 0, step, seed).await;
        }
        spent[5] += t1.elapsed();
    }
    eprintln!(
        "soak: {steps} steps, {created} creations, {pauses} lease pauses, {restarts} restarts; \
         time in create / remove / call / pause / restart / checks: {spent:?}"
    );
    assert!(created > 10, "the soak created almost nothing ({created})");
    for n in nodes {
        n.rt.shutdown().await;
        n.mesh.shutdown().await;
    }
}
