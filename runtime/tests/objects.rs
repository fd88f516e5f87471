//! ID-addressed Actors and Spots across real MeshNodes (issue "Spots and Actors" §4–§7; routing
//! `000_…` §2): creation through the Location Store (memory provider, shared by the nodes),
//! calls by global ID only, local and remote target admission, no resubmission on a stale
//! route, and get-or-create running one factory.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use common::cluster::{Cluster, ClusterBuilder};
use serde::{Deserialize, Serialize};
use zlink::call::error::{CallError, ErrorKind};
use zlink::mesh::JsonMessage;
use zlink::object::ObjectCalls;
use zlink::object::exec::ObjectHandlers;
use zlink::object::registry::{FactoryInput, Registry};
use zlink::object::runtime::{Creation, ObjectRuntime};
use zlink_store::MemoryStore;
use zlink_store::clock::SystemClock;

#[derive(Debug, Default)]
struct Player {
    coins: u64,
    log: Vec<u64>,
}

#[derive(Debug, Serialize, Deserialize)]
struct Earn {
    coins: u64,
}
impl JsonMessage for Earn {
    const PACKET_NAME: &'static str = "player.Earn";
}

#[derive(Debug, PartialEq, Serialize, Deserialize)]
struct Balance {
    coins: u64,
    log: Vec<u64>,
}
impl JsonMessage for Balance {
    const PACKET_NAME: &'static str = "player.Balance";
}

#[derive(Debug, Serialize, Deserialize)]
struct Look;
impl JsonMessage for Look {
    const PACKET_NAME: &'static str = "player.Look";
}

/// Asks for the metadata value `trace` the handler saw.
#[derive(Debug, Serialize, Deserialize)]
struct Trace;
impl JsonMessage for Trace {
    const PACKET_NAME: &'static str = "player.Trace";
}

#[derive(Debug, PartialEq, Serialize, Deserialize)]
struct Traced {
    trace: Option<String>,
}
impl JsonMessage for Traced {
    const PACKET_NAME: &'static str = "player.Traced";
}

fn player_handlers() -> ObjectHandlers<Player> {
    let mut h: ObjectHandlers<Player> = ObjectHandlers::new();
    h.on_request(|ctx, _: Trace| async move {
        Ok::<_, CallError>(Traced {
            trace: ctx.metadata().find("trace").map(str::to_owned),
        })
    });
    h.on_send(|ctx, e: Earn| async move {
        let mut p = ctx.state();
        p.coins += e.coins;
        p.log.push(e.coins);
        Ok(())
    });
    h.on_request(|ctx, e: Earn| async move {
        let mut p = ctx.state();
        p.coins += e.coins;
        p.log.push(e.coins);
        Ok::<_, CallError>(Balance {
            coins: p.coins,
            log: vec![],
        })
    });
    h.on_request(|ctx, _: Look| async move {
        let p = ctx.state();
        Ok::<_, CallError>(Balance {
            coins: p.coins,
            log: p.log.clone(),
        })
    });
    h
}

/// Asks a hall Spot to pay `coins` to player `to` (the Spot calls the Actor by ID).
#[derive(Debug, Serialize, Deserialize)]
struct Pay {
    to: String,
    coins: u64,
    yield_turn: bool,
}
impl JsonMessage for Pay {
    const PACKET_NAME: &'static str = "hall.Pay";
}

fn hall_handlers() -> ObjectHandlers<Player> {
    let mut h: ObjectHandlers<Player> = ObjectHandlers::new();
    h.on_request(|ctx, p: Pay| async move {
        let earn = Earn { coins: p.coins };
        let call = ctx.request_to_actor::<Earn, Balance>(&p.to, &earn, T);
        // Async keeps the Spot's turn; Yield gives it back while the Actor answers. Either way
        // the reply resumes this handler (its own reply route), then the state is updated.
        let bal = if p.yield_turn {
            ctx.yield_on(call).await??
        } else {
            call.await?
        };
        ctx.state().log.push(bal.coins);
        Ok::<_, CallError>(bal)
    });
    h.on_request(|ctx, _: Look| async move {
        let p = ctx.state();
        Ok::<_, CallError>(Balance {
            coins: p.coins,
            log: p.log.clone(),
        })
    });
    h
}

/// What every node of these tests hosts. The `room` factory counts its runs in
/// `room_factory_runs` (across nodes); the `flaky` factory cuts `store` off before it fails.
fn registry(store: &Arc<MemoryStore>, room_factory_runs: &Arc<AtomicU64>) -> Registry {
    let mut reg = Registry::new();
    reg.actor(
        "player",
        |_: FactoryInput| async { Ok(Player::default()) },
        player_handlers,
    )
    .register();
    let runs = Arc::clone(room_factory_runs);
    reg.user_spot(
        "room",
        move |_: FactoryInput| {
            runs.fetch_add(1, Ordering::SeqCst);
            async {
                // A slow factory widens the window for duplicate activations.
                tokio::time::sleep(Duration::from_millis(20)).await;
                Ok(Player::default())
            }
        },
        player_handlers,
    )
    .register();
    reg.user_spot(
        "hall",
        |_: FactoryInput| async { Ok(Player::default()) },
        hall_handlers,
    )
    .register();
    // A factory that fails while cutting the store off, so the abort of its reservation cannot
    // land (an ambiguous failure).
    let cut = Arc::clone(store);
    reg.actor(
        "flaky",
        move |_: FactoryInput| {
            let cut = Arc::clone(&cut);
            async move {
                cut.begin_outage();
                Err::<Player, _>(CallError::new(ErrorKind::HandlerFailed, "flaky"))
            }
        },
        player_handlers,
    )
    .register();
    reg.actor(
        "broken",
        |_: FactoryInput| async {
            Err::<Player, _>(CallError::new(ErrorKind::HandlerFailed, "no"))
        },
        player_handlers,
    )
    .register();
    reg.entry_spot(
        "entry",
        |_: FactoryInput| async { Ok(Player::default()) },
        player_handlers,
    )
    .register();
    reg
}

/// Nodes `node-0`… that all host [`registry`], with Entry Spots, on one memory store.
struct Objects {
    cluster: Cluster,
    /// Runs of the `room` factory, across nodes.
    factory_runs: Arc<AtomicU64>,
}

impl Objects {
    async fn start(n: usize) -> Self {
        Self::start_with(n, |b| b).await
    }

    /// [`Objects::start`] with `more` applied to the cluster builder (weights, roles, …).
    async fn start_with(n: usize, more: impl FnOnce(ClusterBuilder) -> ClusterBuilder) -> Self {
        let store = Arc::new(MemoryStore::new(SystemClock));
        let factory_runs = Arc::new(AtomicU64::new(0));
        let (cut, runs) = (Arc::clone(&store), Arc::clone(&factory_runs));
        let builder = Cluster::builder(n)
            .store(store)
            .registry(move |_| registry(&cut, &runs))
            .entry_spots();
        Self {
            cluster: more(builder).start().await,
            factory_runs,
        }
    }

    async fn shutdown(self) {
        self.cluster.shutdown().await;
    }
}

impl std::ops::Deref for Objects {
    type Target = Cluster;
    fn deref(&self) -> &Cluster {
        &self.cluster
    }
}

const T: Duration = Duration::from_secs(5);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_actor_is_reached_by_id_alone_locally_and_from_another_node_in_send_order() {
    let c = Objects::start(2).await;
    let (a, b) = (&c.rts[0], &c.rts[1]);
    let r = a.create_actor("player", "p-1", None).await.unwrap();
    assert_eq!(r.id, "p-1");
    // Local call on the owner, then remote calls from node-1: only the ID is named.
    let bal: Balance = a
        .request_to_actor("p-1", &Earn { coins: 1 }, T)
        .await
        .unwrap();
    assert_eq!(bal.coins, 1);
    for n in 0..200 {
        b.send_to_actor("p-1", &Earn { coins: 1000 + n })
            .await
            .unwrap();
    }
    // A send is lazy like any future: one dropped before its first poll sends nothing (the
    // synchronous send path runs at the first poll, not when the future is built).
    let unpolled = b.call_payload(
        zlink_store::types::ObjectKind::Actor,
        "p-1",
        zlink::mesh::handler::encode_json(&Earn { coins: 9 }).unwrap(),
        None,
    );
    drop(unpolled);
    let seen: Balance = b.request_to_actor("p-1", &Look, T).await.unwrap();
    let expected: Vec<u64> = std::iter::once(1).chain(1000..1200).collect();
    assert_eq!(
        seen.log, expected,
        "sends from one sender run in send order"
    );
    // node-1 resolved once and used its cache for the other 200 calls.
    assert_eq!(b.resolver().stats().store_reads.load(Ordering::Relaxed), 1);
    assert_eq!(b.stats().remote_calls.load(Ordering::Relaxed), 201);
    assert_eq!(a.stats().local_calls.load(Ordering::Relaxed), 1);
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_ids_are_not_found_and_nothing_is_created_implicitly() {
    let c = Objects::start(2).await;
    let (a, b) = (&c.rts[0], &c.rts[1]);
    for rt in [a, b] {
        let err = rt
            .request_to_actor::<Look, Balance>("nobody", &Look, T)
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::NotFound);
        assert_eq!(
            rt.send_to_spot("nowhere", &Earn { coins: 1 })
                .await
                .unwrap_err()
                .kind(),
            ErrorKind::NotFound
        );
    }
    assert_eq!(
        a.live_count() + b.live_count(),
        2,
        "only the two Entry Spots"
    );
    // Creating twice is AlreadyExists, from any node.
    a.create_actor("player", "p-2", None).await.unwrap();
    for rt in [a, b] {
        assert_eq!(
            rt.create_actor("player", "p-2", None)
                .await
                .unwrap_err()
                .kind(),
            ErrorKind::AlreadyExists
        );
    }
    // A failing factory leaves the ID Missing (the reservation was aborted).
    let err = a.create_actor("broken", "p-3", None).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::HandlerFailed);
    assert_eq!(
        b.request_to_actor::<Look, Balance>("p-3", &Look, T)
            .await
            .unwrap_err()
            .kind(),
        ErrorKind::NotFound
    );
    a.create_actor("player", "p-3", None).await.unwrap();
    // Unknown and mismatched stable types are refused before the store is touched.
    assert_eq!(
        a.create_actor("nope", "p-4", None)
            .await
            .unwrap_err()
            .kind(),
        ErrorKind::InvalidOperation
    );
    assert_eq!(
        a.create_actor("room", "p-4", None)
            .await
            .unwrap_err()
            .kind(),
        ErrorKind::InvalidOperation
    );
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_cached_route_ends_the_call_once_and_the_next_call_resolves_again() {
    let c = Objects::start(2).await;
    let (a, b) = (&c.rts[0], &c.rts[1]);
    a.create_actor("player", "p-5", None).await.unwrap();
    let _: Balance = b.request_to_actor("p-5", &Look, T).await.unwrap();
    a.destroy_actor("p-5").await.unwrap();
    // node-1 still caches the route: the owner refuses it, the call ends StaleRoute (it is not
    // resubmitted anywhere), and the entry is gone.
    let err = b
        .request_to_actor::<Look, Balance>("p-5", &Look, T)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::StaleRoute);
    assert_eq!(a.stats().stale_routes.load(Ordering::Relaxed), 1);
    let err = b
        .request_to_actor::<Look, Balance>("p-5", &Look, T)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound, "resolved again: Missing");
    // Re-created under the same ID on node-1: reachable from node-0 by ID.
    b.create_actor("player", "p-5", None).await.unwrap();
    let bal: Balance = a
        .request_to_actor("p-5", &Earn { coins: 7 }, T)
        .await
        .unwrap();
    assert_eq!(bal.coins, 7);
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_get_or_create_from_three_nodes_runs_one_factory() {
    let c = Objects::start(3).await;
    let c = Arc::new(c);
    let mut tasks = Vec::new();
    for i in 0..64 {
        let c = Arc::clone(&c);
        tasks.push(tokio::spawn(async move {
            c.rts[i % 3]
                .get_or_create_user_spot("room", "lobby", None, Duration::from_secs(10))
                .await
        }));
    }
    let mut created = 0;
    let mut generations = std::collections::BTreeSet::new();
    for t in tasks {
        let (r, how) = t.await.unwrap().unwrap();
        generations.insert(r.object_generation);
        if how == Creation::Created {
            created += 1;
        }
    }
    assert_eq!(created, 1, "exactly one caller created it");
    assert_eq!(
        generations.len(),
        1,
        "every caller sees the same incarnation"
    );
    assert_eq!(c.factory_runs.load(Ordering::SeqCst), 1, "one factory run");
    let live: usize = c.rts.iter().map(|r| r.live_count()).sum();
    assert_eq!(
        live,
        1 + 3,
        "one live instance across the nodes (plus 3 Entry Spots)"
    );
    // Every node reaches it by ID.
    for (i, rt) in c.rts.iter().enumerate() {
        let bal: Balance = rt
            .request_to_spot("lobby", &Earn { coins: 1 }, T)
            .await
            .unwrap();
        assert_eq!(bal.coins, i as u64 + 1);
    }
    for n in &c.nodes {
        n.shutdown().await;
    }
}

/// Glossary §8 "Fencing deadline": with the store unreachable, renewals fail; at the last
/// confirmed lease deadline minus the margin (lease 2 s, margin 200 ms in these tests) the owner
/// stops admitting work — before the lease could expire and another node take over. A route
/// obtained earlier (here: built from the authority record, as a binding route would be) is
/// refused with `Unavailable`; the owner's own cached route expired with the admission window.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_whose_lease_renewals_fail_stops_admitting_at_its_fencing_deadline() {
    use zlink_protocol::generated::{NodeFence, ObjectKind, RouteFence};
    use zlink_store::LocationStore;
    use zlink_store::types::{AuthorityKey, AuthorityRead, ObjectKind as StoreKind};
    let c = Objects::start(2).await;
    let (owner, rt) = (&c.nodes[0], &c.rts[0]);
    rt.create_actor("player", "p-9", None).await.unwrap();
    let key = AuthorityKey::new(StoreKind::Actor, "p-9").unwrap();
    let AuthorityRead::Found(a) = c.store().read_authority(&key).await.unwrap() else {
        panic!("missing")
    };
    let route = RouteFence {
        object_kind: ObjectKind::Actor,
        object_id: "p-9".into(),
        object_generation: a.object_generation,
        target_node: NodeFence {
            rid: a.owner_node.rid.clone().into(),
            lifecycle_generation: a.owner_node.lifecycle_generation,
        },
        authority_owner_generation: a.authority_owner_generation,
        owner_lease_generation: a.owner.lease_generation,
    };
    let look = || zlink::mesh::handler::encode_json(&Look).unwrap();
    let caller = &c.nodes[1];
    caller
        .object_request(route.clone(), look(), None, T)
        .await
        .unwrap();
    assert!(owner.admission_open());
    let outage = tokio::time::Instant::now();
    c.store().begin_outage();
    let deadline = outage + Duration::from_secs(5);
    while owner.admission_open() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "admission never closed"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let closed_after = outage.elapsed();
    // The deadline is the last confirmed renewal's lease expiry (2 s TTL) minus the 200 ms
    // margin, and renewals run every 300 ms: it falls 1.5–1.8 s after the outage began (the
    // bounds leave room for a loaded machine's scheduling).
    assert!(
        closed_after >= Duration::from_millis(1_200) && closed_after < Duration::from_millis(2_600),
        "{closed_after:?}"
    );
    let err = caller
        .object_request(route.clone(), look(), None, T)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    assert!(err.detail().contains("fencing deadline"), "{err}");
    // The owner's own cached route did not outlive the admission window either: the call goes
    // to the store (in outage) instead of being served from the cache.
    let err = rt
        .request_to_actor::<Look, Balance>("p-9", &Look, T)
        .await
        .unwrap_err();
    assert!(
        matches!(err.kind(), ErrorKind::StoreFailure | ErrorKind::Unavailable),
        "{err}"
    );
    c.store().end_outage();
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spot_handler_calls_an_actor_on_another_node_with_async_and_with_yield() {
    let c = Objects::start(2).await;
    let (a, b) = (&c.rts[0], &c.rts[1]);
    b.create_actor("player", "p-10", None).await.unwrap();
    a.create_user_spot("hall", "hall-1", None).await.unwrap();
    for (i, yield_turn) in [false, true, false].into_iter().enumerate() {
        let bal: Balance = b
            .request_to_spot(
                "hall-1",
                &Pay {
                    to: "p-10".into(),
                    coins: 5,
                    yield_turn,
                },
                T,
            )
            .await
            .unwrap();
        assert_eq!(bal.coins, 5 * (i as u64 + 1));
    }
    let player: Balance = a.request_to_actor("p-10", &Look, T).await.unwrap();
    assert_eq!(player.log, vec![5, 5, 5]);
    // The hall's state saw each reply in its own turn.
    let hall: Balance = a.request_to_spot("hall-1", &Look, T).await.unwrap();
    assert_eq!(hall.log, vec![5, 10, 15]);
    c.shutdown().await;
}

/// Routing §2.6: ObjectGeneration is not a target-match condition for messages. The same owner
/// destroys and re-creates an ID; a sender still caching the old incarnation's route reaches the
/// new incarnation (no StaleRoute).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_route_to_a_re_created_incarnation_under_the_same_owner_is_delivered() {
    // Placement weight 0 on node-1: every Actor is placed on node-0, the same owner.
    let c = Objects::start_with(2, |b| b.placement_weights(&[100, 0])).await;
    let (a, b) = (&c.rts[0], &c.rts[1]);
    let first = a.create_actor("player", "p-11", None).await.unwrap();
    let _: Balance = b
        .request_to_actor("p-11", &Earn { coins: 1 }, T)
        .await
        .unwrap();
    a.destroy_actor("p-11").await.unwrap();
    let second = a.create_actor("player", "p-11", None).await.unwrap();
    assert_ne!(first.object_generation, second.object_generation);
    let reads = b.resolver().stats().store_reads.load(Ordering::Relaxed);
    let bal: Balance = b
        .request_to_actor("p-11", &Earn { coins: 2 }, T)
        .await
        .unwrap();
    assert_eq!(bal.coins, 2, "the new incarnation answered");
    assert_eq!(
        b.resolver().stats().store_reads.load(Ordering::Relaxed),
        reads,
        "served on the cached route of the old incarnation"
    );
    c.shutdown().await;
}

/// Placement (glossary §6 "Weight"): an Object Client places User Spots on the Object Servers
/// that announced the stable type, by smooth weighted round-robin over placement weights
/// (100 / 50); the target creates it with remote create (command 47) into the reserved slot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn user_spots_are_placed_on_servers_by_weight_with_remote_create() {
    use zlink_protocol::generated::ObjectRole;
    // node-0 is an Object Client: it places, it hosts nothing (no Entry Spot either).
    let c = Objects::start_with(3, |b| {
        b.placement_weights(&[100, 100, 50]).configure(|i, cfg| {
            if i == 0 {
                cfg.object_role = ObjectRole::Client;
                cfg.entry_spot_prefix = None;
            }
        })
    })
    .await;
    let client = &c.rts[0];
    for n in 0..6 {
        client
            .create_user_spot("hall", &format!("hall-{n}"), None)
            .await
            .unwrap();
    }
    assert_eq!(client.live_count(), 0, "an Object Client hosts nothing");
    // Each server also hosts its Entry Spot.
    assert_eq!(c.rts[1].live_count(), 1 + 4);
    assert_eq!(c.rts[2].live_count(), 1 + 2);
    assert_eq!(client.stats().created_remotely.load(Ordering::Relaxed), 6);
    // Every placed Spot is reachable by ID from anywhere.
    for n in 0..6 {
        for rt in &c.rts {
            let _: Balance = rt
                .request_to_spot(&format!("hall-{n}"), &Look, T)
                .await
                .unwrap();
        }
    }
    // A second create of a placed ID is AlreadyExists; the client cannot host an Actor.
    assert_eq!(
        client
            .create_user_spot("hall", "hall-0", None)
            .await
            .unwrap_err()
            .kind(),
        ErrorKind::AlreadyExists
    );
    // Actors are placed the same way (remote Actor create, command 49) and join their node's
    // Entry Spot.
    for n in 0..3 {
        client
            .create_actor("player", &format!("pa-{n}"), None)
            .await
            .unwrap();
    }
    assert_eq!(c.rts[1].live_count(), 1 + 4 + 2);
    assert_eq!(c.rts[2].live_count(), 1 + 2 + 1);
    c.shutdown().await;
}

/// Glossary §1: every Object Server node lifecycle has one Entry Spot, created before the node
/// turns Serving and announced in its descriptor; an Actor is a member of exactly one Entry or
/// User Spot, recorded in its authority atomically with its Ready commit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn entry_spots_exist_per_node_and_actors_record_their_membership() {
    use zlink_protocol::generated::RuntimeState;
    use zlink_store::types::{AuthorityRead, ObjectKind as StoreKind};
    let c = Objects::start(2).await;
    let membership_of = |id: &'static str| {
        let c = &c;
        async move {
            let AuthorityRead::Found(a) = c.authority(StoreKind::Actor, id).await else {
                panic!("missing")
            };
            let v: serde_json::Value = serde_json::from_slice(&a.payload).unwrap();
            (
                v["membership"].as_str().unwrap().to_owned(),
                a.owner_node.rid,
            )
        }
    };
    let entries: Vec<String> = c.rts.iter().map(ObjectRuntime::entry_spot_id).collect();
    for (i, (node, entry)) in c.nodes.iter().zip(&entries).enumerate() {
        assert!(entry.starts_with(&format!("node{i}-entry-")), "{entry}");
        assert_eq!(node.descriptor().state, RuntimeState::Serving);
        // Reachable by ID from every node.
        for rt in &c.rts {
            let _: Balance = rt.request_to_spot(entry, &Look, T).await.unwrap();
        }
    }
    // Equal placement weights: node-0 then node-1.
    for id in ["m-0", "m-1"] {
        c.rts[0].create_actor("player", id, None).await.unwrap();
    }
    assert_eq!(
        membership_of("m-0").await,
        (entries[0].clone(), "node-0".into())
    );
    assert_eq!(
        membership_of("m-1").await,
        (entries[1].clone(), "node-1".into())
    );
    // Created into a User Spot: placed on the Spot's node, member of that Spot.
    c.rts[0]
        .create_user_spot("hall", "hall-x", None)
        .await
        .unwrap();
    c.rts[1]
        .create_actor_in("player", "m-2", "hall-x", None)
        .await
        .unwrap();
    let (spot, owner) = membership_of("m-2").await;
    assert_eq!(spot, "hall-x");
    let hall_owner = {
        let AuthorityRead::Found(a) = c.authority(StoreKind::Spot, "hall-x").await else {
            panic!("missing")
        };
        a.owner_node.rid
    };
    assert_eq!(owner, hall_owner);
    assert_eq!(
        c.rts[0]
            .create_actor_in("player", "m-3", "no-such-hall", None)
            .await
            .unwrap_err()
            .kind(),
        ErrorKind::NotFound
    );
    c.shutdown().await;
}

/// Routing §2.2: the same handler, metadata and completion contract for a local and a remote
/// owner — the metadata snapshot reaches the handler on both paths.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metadata_reaches_the_handler_on_the_local_and_the_remote_path() {
    use zlink::mesh::handler::{decode_json, encode_json};
    use zlink_protocol::metadata::Metadata;
    use zlink_store::types::ObjectKind as StoreKind;
    let c = Objects::start(2).await;
    c.rts[0].create_actor("player", "p-13", None).await.unwrap();
    for (i, rt) in c.rts.iter().enumerate() {
        let md = Metadata::new([("trace".to_owned(), format!("t-{i}"))]).unwrap();
        let reply = rt
            .call(
                StoreKind::Actor,
                "p-13",
                encode_json(&Trace).unwrap(),
                Some(md),
                Some(T),
            )
            .await
            .unwrap()
            .unwrap();
        let got: Traced = decode_json(&reply).unwrap();
        assert_eq!(got.trace.as_deref(), Some(format!("t-{i}").as_str()));
        // Without metadata the snapshot is empty.
        let plain: Traced = rt.request_to_actor("p-13", &Trace, T).await.unwrap();
        assert_eq!(plain.trace, None);
    }
    c.shutdown().await;
}

/// Issue "Spots and Actors" §8: when an owner's lease is gone, its objects answer `Unavailable`
/// (no automatic reactivation), and a fenced cleanup — run by the next creation of the ID —
/// removes the record under its fence, so the ID can be created again elsewhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_of_a_gone_owner_are_unavailable_until_a_fenced_cleanup_frees_the_id() {
    let c = Objects::start(2).await;
    // Equal weights: node-0 gets the first placement of each runtime's selector.
    c.rts[1]
        .create_user_spot("hall", "hall-d", None)
        .await
        .unwrap();
    c.rts[1].create_actor("player", "p-d", None).await.unwrap();
    assert_eq!(c.rts[0].live_count(), 1 + 2, "both placed on node-0");
    let old_generation = c.rts[0]
        .live_generation(zlink_store::types::ObjectKind::Spot, "hall-d")
        .unwrap();
    // node-0 goes away; its lease is released (as at a graceful exit or after expiry).
    c.rts[0].shutdown().await;
    c.nodes[0].shutdown().await;
    let b = &c.rts[1];
    let err = b
        .request_to_spot::<Look, Balance>("hall-d", &Look, T)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    // get-or-create cleans the record up and creates a new incarnation on node-1.
    let (r, how) = b
        .get_or_create_user_spot("hall", "hall-d", None, T)
        .await
        .unwrap();
    assert_eq!(how, Creation::Created);
    let _: Balance = b.request_to_spot("hall-d", &Look, T).await.unwrap();
    // A plain create of the Actor's ID does the same.
    b.create_actor("player", "p-d", None).await.unwrap();
    let bal: Balance = b
        .request_to_actor("p-d", &Earn { coins: 3 }, T)
        .await
        .unwrap();
    assert_eq!(bal.coins, 3, "a fresh incarnation answered");
    assert_ne!(
        r.object_generation, old_generation,
        "a new incarnation, not the dead owner's"
    );
    assert_eq!(b.stats().fenced_cleanups.load(Ordering::Relaxed), 2);
    c.nodes[1].shutdown().await;
}

/// Wire §8.1 command 48: a User Spot is closed from any node; its owner checks the incarnation,
/// owner generation and StoreVersion the caller read, deletes it under its fence and answers
/// `closed`. The ID is Missing afterwards everywhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_spot_is_closed_from_another_node_with_remote_close() {
    let c = Objects::start(2).await;
    let (owner, other) = (&c.rts[0], &c.rts[1]);
    // Equal weights: node-1's first placement goes to node-0.
    other
        .create_user_spot("hall", "hall-c", None)
        .await
        .unwrap();
    assert!(
        owner
            .live_generation(zlink_store::types::ObjectKind::Spot, "hall-c")
            .is_some()
    );
    let _: Balance = other.request_to_spot("hall-c", &Look, T).await.unwrap();
    other.close_user_spot("hall-c").await.unwrap();
    assert!(
        owner
            .live_generation(zlink_store::types::ObjectKind::Spot, "hall-c")
            .is_none()
    );
    for rt in &c.rts {
        assert_eq!(
            rt.request_to_spot::<Look, Balance>("hall-c", &Look, T)
                .await
                .unwrap_err()
                .kind(),
            ErrorKind::NotFound
        );
    }
    assert_eq!(
        other.close_user_spot("hall-c").await.unwrap_err().kind(),
        ErrorKind::NotFound
    );
    c.shutdown().await;
}

/// Command 27: an Actor is destroyed from any node; its owner checks the incarnation, owner
/// generation and lease the caller read (§2.6: destroy names its incarnation), deletes it under
/// its fence, and the ID is Missing everywhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_actor_is_destroyed_from_another_node_with_remote_destroy() {
    use zlink_store::types::ObjectKind as StoreKind;
    let c = Objects::start(2).await;
    let (owner, other) = (&c.rts[0], &c.rts[1]);
    // Equal weights: node-1's first Actor placement goes to node-0.
    other.create_actor("player", "p-x", None).await.unwrap();
    assert!(owner.live_generation(StoreKind::Actor, "p-x").is_some());
    let _: Balance = other.request_to_actor("p-x", &Look, T).await.unwrap();
    other.destroy_actor("p-x").await.unwrap();
    assert!(owner.live_generation(StoreKind::Actor, "p-x").is_none());
    for rt in &c.rts {
        assert_eq!(
            rt.request_to_actor::<Look, Balance>("p-x", &Look, T)
                .await
                .unwrap_err()
                .kind(),
            ErrorKind::NotFound
        );
    }
    c.shutdown().await;
}

/// Wire §7 "Factory 실패 처리": a factory fails while the store is unreachable, so its
/// reservation cannot be aborted and the outcome is unknown. The node keeps the ID *failed*;
/// the next creation of it first retries the abort (the store is back) and only then proceeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_creation_whose_abort_was_lost_is_cleared_before_the_id_is_created_again() {
    use zlink_store::LocationStore;
    use zlink_store::types::{
        AuthorityKey, AuthorityRead, AuthorityState, ObjectKind as StoreKind,
    };
    let c = Objects::start(1).await;
    let rt = &c.rts[0];
    let err = rt.create_actor("flaky", "f-1", None).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::HandlerFailed);
    // While the store is still out, the ID stays failed here: no new creation starts.
    let err = rt.create_actor("player", "f-1", None).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    assert!(err.detail().contains("earlier creation"), "{err}");
    c.store().end_outage();
    let key = AuthorityKey::new(StoreKind::Actor, "f-1").unwrap();
    let AuthorityRead::Found(a) = c.store().read_authority(&key).await.unwrap() else {
        panic!("the reservation should still be there")
    };
    assert_eq!(a.state, AuthorityState::Creating, "the abort was lost");
    // The next creation retries the abort, then creates.
    rt.create_actor("player", "f-1", None).await.unwrap();
    let bal: Balance = rt
        .request_to_actor("f-1", &Earn { coins: 2 }, T)
        .await
        .unwrap();
    assert_eq!(bal.coins, 2);
    c.shutdown().await;
}
