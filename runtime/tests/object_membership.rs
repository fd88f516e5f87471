//! Spot membership and execution gates across real MeshNodes on the memory Location Store
//! (issue "Spots and Actors" §2 and §9; glossary §3 "Execution gate", "Async와 Yield", §5
//! "Actor queue claim", "Spot control claim"; wire §9 "Actor join 요청 envelope"):
//!
//! - a SpotWide User Spot and its member Actors never run turns at the same time, while the
//!   members of a PerActor Spot run side by side;
//! - a member Actor's `Yield` gives back the Spot's gate but keeps its own queue claim;
//! - join and leave commit the membership atomically with the Actor's authority, switch the
//!   Actor's gate, notify both Spots, and travel as `actorJoin` (28) from a non-owner node;
//! - a Spot with members is not closed; a stale join fence is refused.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::cluster::Cluster;
use common::eventually;
use serde::{Deserialize, Serialize};
use tokio::sync::Semaphore;
use zlink::call::error::{CallError, ErrorKind};
use zlink::mesh::JsonMessage;
use zlink::object::ObjectCalls;
use zlink::object::exec::ObjectHandlers;
use zlink::object::registry::{FactoryInput, Registry, SpotExecution};
use zlink::object::runtime::{ObjectRuntime, membership_of};
use zlink_store::types::{AuthorityKey, AuthorityRead, ObjectKind};
use zlink_store::{LocationStore, MemoryStore};

const T: Duration = Duration::from_secs(5);

/// Counts the turns of one execution scope that run at the same time, and the most seen; and
/// the gate the test holds `Hold` turns and `YieldUntilReleased` yields on.
#[derive(Debug)]
struct Probe {
    running: AtomicI64,
    max: AtomicI64,
    /// Membership callbacks seen by Spots: "+actor@spot" / "-actor@spot".
    events: Mutex<Vec<String>>,
    /// `Hold` turns and `YieldUntilReleased` yields that have begun (the test waits for it).
    reached: AtomicU64,
    /// Each `Hold` turn or yield takes one permit to end; the test adds them.
    release: Semaphore,
}

impl Default for Probe {
    fn default() -> Self {
        Self {
            running: AtomicI64::new(0),
            max: AtomicI64::new(0),
            events: Mutex::default(),
            reached: AtomicU64::new(0),
            release: Semaphore::new(0),
        }
    }
}

impl Probe {
    async fn turn(&self, hold: Duration) {
        self.begin();
        tokio::time::sleep(hold).await;
        self.end();
    }

    /// A probed turn that lasts until the test releases it.
    async fn held_turn(&self) {
        self.begin();
        self.reached.fetch_add(1, Ordering::SeqCst);
        self.release.acquire().await.unwrap().forget();
        self.end();
    }

    fn begin(&self) {
        let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.max.fetch_max(now, Ordering::SeqCst);
    }

    fn end(&self) {
        self.running.fetch_sub(1, Ordering::SeqCst);
    }

    /// Wait until `n` holds or yields in all have begun.
    async fn reached(&self, n: u64) {
        eventually(&format!("{n} held turns or yields"), || {
            self.reached.load(Ordering::SeqCst) >= n
        })
        .await;
    }
}

#[derive(Debug, Serialize, Deserialize)]
struct Work {
    hold_ms: u64,
}
impl JsonMessage for Work {
    const PACKET_NAME: &'static str = "t.Work";
}

#[derive(Debug, Serialize, Deserialize)]
struct Done {
    id: String,
}
impl JsonMessage for Done {
    const PACKET_NAME: &'static str = "t.Done";
}

/// A probed turn that lasts until the test releases it (one permit of `Probe::release`).
#[derive(Debug, Serialize, Deserialize)]
struct Hold;
impl JsonMessage for Hold {
    const PACKET_NAME: &'static str = "t.Hold";
}

/// A member Actor yields (Yield) until the test releases it, then holds a probed turn for
/// `after_ms` and logs `tag`.
#[derive(Debug, Serialize, Deserialize)]
struct YieldUntilReleased {
    after_ms: u64,
    tag: String,
}
impl JsonMessage for YieldUntilReleased {
    const PACKET_NAME: &'static str = "t.YieldUntilReleased";
}

/// Log `tag` (a plain turn).
#[derive(Debug, Serialize, Deserialize)]
struct Mark {
    tag: String,
}
impl JsonMessage for Mark {
    const PACKET_NAME: &'static str = "t.Mark";
}

/// A Spot makes an `Async` request to Actor `to`.
#[derive(Debug, Serialize, Deserialize)]
struct Relay {
    to: String,
}
impl JsonMessage for Relay {
    const PACKET_NAME: &'static str = "t.Relay";
}

#[derive(Debug, Default)]
struct St {
    id: String,
}

/// The order in which turns finished, across objects.
type Log = Arc<Mutex<Vec<String>>>;

fn handlers(probe: &Arc<Probe>, log: &Log) -> ObjectHandlers<St> {
    let mut h: ObjectHandlers<St> = ObjectHandlers::new();
    let p = Arc::clone(probe);
    h.on_request(move |ctx, w: Work| {
        let p = Arc::clone(&p);
        async move {
            p.turn(Duration::from_millis(w.hold_ms)).await;
            Ok::<_, CallError>(Done {
                id: ctx.state().id.clone(),
            })
        }
    });
    let p = Arc::clone(probe);
    h.on_request(move |ctx, _: Hold| {
        let p = Arc::clone(&p);
        async move {
            p.held_turn().await;
            Ok::<_, CallError>(Done {
                id: ctx.state().id.clone(),
            })
        }
    });
    let l = Arc::clone(log);
    let p = Arc::clone(probe);
    h.on_request(move |ctx, y: YieldUntilReleased| {
        let (l, p) = (Arc::clone(&l), Arc::clone(&p));
        async move {
            let yielded = {
                let p = Arc::clone(&p);
                async move {
                    p.reached.fetch_add(1, Ordering::SeqCst);
                    p.release.acquire().await.unwrap().forget();
                }
            };
            ctx.yield_on(yielded).await?;
            // The continuation holds the gate again: probed like any turn of the group.
            p.turn(Duration::from_millis(y.after_ms)).await;
            l.lock().unwrap().push(y.tag);
            Ok::<_, CallError>(Done {
                id: ctx.state().id.clone(),
            })
        }
    });
    let l = Arc::clone(log);
    h.on_request(move |ctx, m: Mark| {
        let l = Arc::clone(&l);
        async move {
            l.lock().unwrap().push(m.tag);
            Ok::<_, CallError>(Done {
                id: ctx.state().id.clone(),
            })
        }
    });
    h.on_request(|ctx, r: Relay| async move {
        ctx.request_to_actor::<Mark, Done>(
            &r.to,
            &Mark {
                tag: "relay".into(),
            },
            T,
        )
        .await
    });
    let p = Arc::clone(probe);
    h.on_member_joined(move |ctx, actor| {
        let p = Arc::clone(&p);
        async move {
            let spot = ctx.state().id.clone();
            p.events.lock().unwrap().push(format!("+{actor}@{spot}"));
            Ok(())
        }
    });
    let p = Arc::clone(probe);
    h.on_member_left(move |ctx, actor| {
        let p = Arc::clone(&p);
        async move {
            let spot = ctx.state().id.clone();
            p.events.lock().unwrap().push(format!("-{actor}@{spot}"));
            Ok(())
        }
    });
    h
}

/// What a hosting node registers: Actor `a`, SpotWide User Spot `wide`, PerActor User Spot
/// `per` and Entry Spot `entry`, all with [`handlers`]. The state's `id` is the object ID,
/// plus `:<tag>` of an initial `Mark` payload.
fn registry(probe: &Arc<Probe>, log: &Log) -> Registry {
    let mut reg = Registry::new();
    let factory = |input: FactoryInput| async move {
        let id = match &input.init {
            Some(p) => {
                let m: Mark = zlink::mesh::handler::decode_json(p)?;
                format!("{}:{}", input.id, m.tag)
            }
            None => input.id,
        };
        Ok(St { id })
    };
    let (p, l) = (Arc::clone(probe), Arc::clone(log));
    reg.actor("a", factory, move || handlers(&p, &l)).register();
    let (p, l) = (Arc::clone(probe), Arc::clone(log));
    reg.user_spot("wide", factory, move || handlers(&p, &l))
        .register();
    let (p, l) = (Arc::clone(probe), Arc::clone(log));
    reg.user_spot("per", factory, move || handlers(&p, &l))
        .execution(SpotExecution::PerActor)
        .register();
    let (p, l) = (Arc::clone(probe), Arc::clone(log));
    reg.entry_spot("entry", factory, move || handlers(&p, &l))
        .register();
    reg
}

/// `hosts` nodes hosting [`registry`] (with Entry Spots), then `clients` that only call; one
/// probe and one log across them.
struct Gates {
    cluster: Cluster,
    probe: Arc<Probe>,
    log: Log,
}

impl Gates {
    async fn start(hosts: usize, clients: usize) -> Self {
        let probe = Arc::new(Probe::default());
        let log: Log = Arc::default();
        let (p, l) = (Arc::clone(&probe), Arc::clone(&log));
        let cluster = Cluster::builder(hosts + clients)
            .registry(move |_| registry(&p, &l))
            .entry_spots()
            .clients(clients)
            .start()
            .await;
        Self {
            cluster,
            probe,
            log,
        }
    }

    async fn membership_in_store(&self, actor: &str) -> Option<String> {
        match self.authority(ObjectKind::Actor, actor).await {
            AuthorityRead::Found(a) => membership_of(&a.payload),
            AuthorityRead::Missing { .. } => None,
        }
    }

    fn events(&self) -> Vec<String> {
        self.probe.events.lock().unwrap().clone()
    }

    async fn shutdown(self) {
        self.cluster.shutdown().await;
    }
}

impl std::ops::Deref for Gates {
    type Target = Cluster;
    fn deref(&self) -> &Cluster {
        &self.cluster
    }
}

/// Fire `per_target` concurrent `Work` requests at every target and wait for all of them.
async fn hammer(rt: &ObjectRuntime<MemoryStore>, targets: &[(ObjectKind, &str)], per: usize) {
    let mut calls = Vec::new();
    for _ in 0..per {
        for (kind, id) in targets {
            let w = Work { hold_ms: 3 };
            calls.push(async move {
                let d: Done = match kind {
                    ObjectKind::Actor => rt.request_to_actor(id, &w, T).await.unwrap(),
                    ObjectKind::Spot => rt.request_to_spot(id, &w, T).await.unwrap(),
                };
                assert_eq!(&d.id, id);
            });
        }
    }
    futures::future::join_all(calls).await;
}

/// Glossary §3 "Execution gate": a SpotWide User Spot, its member Actors and their turns share
/// one gate (never two turns at once across the group), while PerActor members each have their
/// own (they run side by side). Handler turns of one object never overlap in either mode.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spotwide_members_share_the_spot_gate_and_peractor_members_run_side_by_side() {
    let c = Gates::start(1, 0).await;
    let rt = &c.rts[0];
    rt.create_user_spot("wide", "w-1", None).await.unwrap();
    rt.create_actor_in("a", "w-a1", "w-1", None).await.unwrap();
    rt.create_actor_in("a", "w-a2", "w-1", None).await.unwrap();
    hammer(
        rt,
        &[
            (ObjectKind::Spot, "w-1"),
            (ObjectKind::Actor, "w-a1"),
            (ObjectKind::Actor, "w-a2"),
        ],
        12,
    )
    .await;
    assert_eq!(
        c.probe.max.load(Ordering::SeqCst),
        1,
        "a SpotWide Spot and its members ran turns at the same time"
    );

    c.probe.max.store(0, Ordering::SeqCst);
    rt.create_user_spot("per", "p-1", None).await.unwrap();
    rt.create_actor_in("a", "p-a1", "p-1", None).await.unwrap();
    rt.create_actor_in("a", "p-a2", "p-1", None).await.unwrap();
    // One request per object at a time: per-object turns are serial, so any overlap comes
    // from two objects of the group running side by side.
    hammer(
        rt,
        &[(ObjectKind::Actor, "p-a1"), (ObjectKind::Actor, "p-a2")],
        1,
    )
    .await;
    // Both members hold a turn open until released. With a gate each, both turns are running
    // at once; a shared gate would keep the second waiting and `reached` would stop at 1.
    let both_running = async {
        c.probe.reached(2).await;
        assert_eq!(c.probe.running.load(Ordering::SeqCst), 2);
        c.probe.release.add_permits(2);
    };
    let (x, y, ()) = tokio::join!(
        rt.request_to_actor::<Hold, Done>("p-a1", &Hold, T),
        rt.request_to_actor::<Hold, Done>("p-a2", &Hold, T),
        both_running,
    );
    x.unwrap();
    y.unwrap();
    assert_eq!(
        c.probe.max.load(Ordering::SeqCst),
        2,
        "PerActor members have their own gates and run side by side"
    );
    c.shutdown().await;
}

/// Glossary §5 "Actor queue claim": a member Actor of a SpotWide Spot that `Yield`s gives back
/// only the Spot's gate — the Spot runs meanwhile — and keeps its own queue claim, so its next
/// message waits for the yielded job. An Actor of an Entry Spot may not Yield.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_actor_yield_returns_the_spot_gate_and_keeps_its_queue_claim() {
    let c = Gates::start(1, 0).await;
    let rt = &c.rts[0];
    rt.create_user_spot("wide", "w-1", None).await.unwrap();
    rt.create_actor_in("a", "w-a1", "w-1", None).await.unwrap();
    let first = YieldUntilReleased {
        after_ms: 60,
        tag: "actor-yielded-job".into(),
    };
    let (next, during) = (
        Mark {
            tag: "actor-next-job".into(),
        },
        Mark {
            tag: "spot-during-yield".into(),
        },
    );
    let slow = rt.request_to_actor::<YieldUntilReleased, Done>("w-a1", &first, T);
    let meanwhile = async {
        c.probe.reached(1).await;
        // The member's first job is in its Yield. Its next message is accepted and queued
        // behind the yielded job (the queue claim): the yielded job plus one waiting item.
        let to_actor = rt.request_to_actor::<Mark, Done>("w-a1", &next, T);
        let then = async {
            eventually(
                "the member's next job queued behind its yielded job",
                || rt.queued_work() == 2,
            )
            .await;
            // The Spot's gate was given back: the Spot runs a turn now, while the member
            // still yields (without the gate this request would wait for a release that only
            // comes after it, and end DeadlineExceeded).
            let s = rt.request_to_spot::<Mark, Done>("w-1", &during, T).await;
            assert_eq!(
                *c.log.lock().unwrap(),
                vec!["spot-during-yield"],
                "only the Spot ran while the member yielded"
            );
            // Spot turns queued and running when the continuation resumes: the continuation
            // takes the gate again, so it never runs beside them.
            let crowd = hammer(rt, &[(ObjectKind::Spot, "w-1")], 30);
            let resume = async {
                eventually("a Spot turn of the crowd running", || {
                    c.probe.running.load(Ordering::SeqCst) >= 1
                })
                .await;
                c.probe.release.add_permits(1);
            };
            tokio::join!(crowd, resume);
            s
        };
        tokio::join!(to_actor, then)
    };
    let (a, (b, s)) = tokio::join!(slow, meanwhile);
    a.unwrap();
    b.unwrap();
    s.unwrap();
    assert_eq!(
        c.probe.max.load(Ordering::SeqCst),
        1,
        "the member's continuation ran without the Spot's gate"
    );
    assert_eq!(
        *c.log.lock().unwrap(),
        vec!["spot-during-yield", "actor-yielded-job", "actor-next-job"],
        "the Spot ran while the member yielded; the member's next job waited for the first"
    );

    // An Actor of an Entry Spot has no shared gate to give back: Yield is InvalidOperation.
    rt.create_actor("a", "e-a1", None).await.unwrap();
    // (A permit ready, so a Yield that were wrongly allowed would end instead of hanging.)
    c.probe.release.add_permits(1);
    let err = rt
        .request_to_actor::<YieldUntilReleased, Done>(
            "e-a1",
            &YieldUntilReleased {
                after_ms: 0,
                tag: "never".into(),
            },
            T,
        )
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidOperation, "{err}");
    c.shutdown().await;
}

/// Issue §9, wire §9: a join from a node that is not the owner travels as `actorJoin` (28);
/// the owner commits the membership with the Actor's authority (the store row names the new
/// Spot), notifies the old and new Spot in their queues, and the Actor then shares the new
/// Spot's gate. A Spot with members is not closed; a leave moves the Actor back to its Entry
/// Spot, after which the close succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn join_and_leave_commit_membership_with_the_actor_and_guard_the_spot_close() {
    let c = Gates::start(1, 1).await;
    let (owner, client) = (&c.rts[0], &c.rts[1]);
    let entry = owner.entry_spot_id();
    // (The client hosts nothing and registers no types: it creates nothing, it only calls.)
    owner.create_actor("a", "j-a1", None).await.unwrap();
    owner
        .create_user_spot("wide", "j-room", None)
        .await
        .unwrap();
    assert_eq!(owner.membership("j-a1").as_deref(), Some(entry.as_str()));
    assert_eq!(
        c.membership_in_store("j-a1").await.as_deref(),
        Some(entry.as_str())
    );

    client.join_actor("j-a1", "j-room").await.unwrap();
    assert_eq!(
        c.membership_in_store("j-a1").await.as_deref(),
        Some("j-room"),
        "the membership is committed in the Actor's authority"
    );
    assert_eq!(owner.membership("j-a1").as_deref(), Some("j-room"));
    assert_eq!(owner.members_of("j-room").unwrap(), vec!["j-a1".to_owned()]);
    assert_eq!(owner.stats().membership_changes.load(Ordering::Relaxed), 1);
    // Joining the Spot it is in already changes nothing.
    client.join_actor("j-a1", "j-room").await.unwrap();
    assert_eq!(owner.stats().membership_changes.load(Ordering::Relaxed), 1);

    // The callbacks ran as Spot turns (a request queued behind them sees them done).
    let _: Done = client
        .request_to_spot("j-room", &Mark { tag: "x".into() }, T)
        .await
        .unwrap();
    let _: Done = client
        .request_to_spot(&entry, &Mark { tag: "y".into() }, T)
        .await
        .unwrap();
    let ev = c.events();
    assert!(ev.contains(&format!("-j-a1@{entry}")), "{ev:?}");
    assert!(ev.contains(&"+j-a1@j-room".to_owned()), "{ev:?}");

    // Now the Actor shares the room's gate.
    c.probe.max.store(0, Ordering::SeqCst);
    hammer(
        client,
        &[(ObjectKind::Spot, "j-room"), (ObjectKind::Actor, "j-a1")],
        10,
    )
    .await;
    assert_eq!(c.probe.max.load(Ordering::SeqCst), 1);

    // The room has a member: it is not closed.
    let err = client.close_user_spot("j-room").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Conflict, "{err}");
    let err = owner.close_user_spot("j-room").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Conflict, "{err}");

    client.leave_actor("j-a1").await.unwrap();
    assert_eq!(
        c.membership_in_store("j-a1").await.as_deref(),
        Some(entry.as_str())
    );
    assert_eq!(owner.members_of("j-room").unwrap(), Vec::<String>::new());
    // The leave callback is a queued Spot turn: let it run before the close.
    let _: Done = client
        .request_to_spot("j-room", &Mark { tag: "w".into() }, T)
        .await
        .unwrap();
    client.close_user_spot("j-room").await.unwrap();
    let _: Done = client
        .request_to_spot(&entry, &Mark { tag: "z".into() }, T)
        .await
        .unwrap();
    let ev = c.events();
    assert!(ev.contains(&"-j-a1@j-room".to_owned()), "{ev:?}");
    assert!(ev.contains(&format!("+j-a1@{entry}")), "{ev:?}");

    // Destroying a member notifies its Spot and frees it for close.
    owner
        .create_user_spot("wide", "j-room2", None)
        .await
        .unwrap();
    owner
        .create_actor_in("a", "j-a2", "j-room2", None)
        .await
        .unwrap();
    client.destroy_actor("j-a2").await.unwrap();
    assert_eq!(owner.members_of("j-room2").unwrap(), Vec::<String>::new());
    owner.close_user_spot("j-room2").await.unwrap();
    c.shutdown().await;
}

/// Wire §9 admission table: the owner reads the Actor's row and refuses a proposal whose fence
/// no longer matches (`StaleRoute`), or whose entry flag contradicts the Spot; a join of an
/// Actor and a Spot on different nodes is relocation and is refused before any change. No
/// refused join changes the store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_or_crossing_joins_are_refused_without_a_change() {
    let c = Gates::start(2, 0).await;
    let (r0, r1) = (&c.rts[0], &c.rts[1]);
    // Equal placement weights alternate: two Spots land on different nodes.
    r0.create_user_spot("wide", "x-1", None).await.unwrap();
    r0.create_user_spot("wide", "x-2", None).await.unwrap();
    let on0 = |id: &str| r0.live_generation(ObjectKind::Spot, id).is_some();
    let (here, there) = if on0("x-1") {
        ("x-1", "x-2")
    } else {
        ("x-2", "x-1")
    };
    assert!(on0(here) && !on0(there), "placement alternates");
    r0.create_actor_in("a", "x-a", here, None).await.unwrap();
    let err = r1.join_actor("x-a", there).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidOperation, "{err}");
    assert_eq!(
        c.membership_in_store("x-a").await.as_deref(),
        Some(here),
        "a refused join changes nothing"
    );

    // A proposal with a stale Actor fence, sent raw as command 28 from node-1.
    let key = AuthorityKey::new(ObjectKind::Actor, "x-a").unwrap();
    let AuthorityRead::Found(a) = c.store().read_authority(&key).await.unwrap() else {
        panic!("x-a exists");
    };
    let route =
        |kind, id: &str, gen_: u64, aog: u64, lease: u64| zlink_protocol::generated::RouteFence {
            object_kind: kind,
            object_id: id.to_owned(),
            object_generation: gen_,
            target_node: c.nodes[0].fence(),
            authority_owner_generation: aog,
            owner_lease_generation: lease,
        };
    let spot_key = AuthorityKey::new(ObjectKind::Spot, r0.entry_spot_id().as_str()).unwrap();
    let AuthorityRead::Found(s) = c.store().read_authority(&spot_key).await.unwrap() else {
        panic!("entry spot exists");
    };
    let spot_route = route(
        zlink_protocol::generated::ObjectKind::Spot,
        &r0.entry_spot_id(),
        s.object_generation,
        s.authority_owner_generation,
        s.owner.lease_generation,
    );
    let stale = route(
        zlink_protocol::generated::ObjectKind::Actor,
        "x-a",
        a.object_generation + 1,
        a.authority_owner_generation,
        a.owner.lease_generation,
    );
    let err = c.nodes[1]
        .actor_join(&stale, true, &spot_route, T)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::StaleRoute, "{err}");
    let good = route(
        zlink_protocol::generated::ObjectKind::Actor,
        "x-a",
        a.object_generation,
        a.authority_owner_generation,
        a.owner.lease_generation,
    );
    // The entry flag must match the Spot.
    let err = c.nodes[1]
        .actor_join(&good, false, &spot_route, T)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidOperation, "{err}");
    assert_eq!(c.membership_in_store("x-a").await.as_deref(), Some(here));
    // The same raw proposal with the right fences is accepted.
    c.nodes[1]
        .actor_join(&good, true, &spot_route, T)
        .await
        .unwrap();
    assert_eq!(c.membership_in_store("x-a").await, Some(r0.entry_spot_id()));
    c.shutdown().await;
}

/// Wire §7 / §8.1: an initial payload is stored as the creation's content (Relocation Store,
/// reference + SHA-256 in the creation record) and read by a remote target's factory; command
/// 47 / 49 itself carries no payload. Placement by weight is kept for creations with a payload.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_initial_payload_reaches_a_factory_on_a_remote_target() {
    let c = Gates::start(2, 0).await;
    let r0 = &c.rts[0];
    for i in 0..4 {
        let id = format!("init-{i}");
        let init = zlink::mesh::handler::encode_json(&Mark {
            tag: format!("hello-{i}"),
        })
        .unwrap();
        r0.create_actor("a", &id, Some(init)).await.unwrap();
        let d: Done = r0
            .request_to_actor(&id, &Mark { tag: "q".into() }, T)
            .await
            .unwrap();
        assert_eq!(d.id, format!("{id}:hello-{i}"));
    }
    assert_eq!(
        r0.stats().created_remotely.load(Ordering::Relaxed),
        2,
        "equal weights alternate: half of the creations ran on the other node"
    );
    c.shutdown().await;
}

/// Review finding: a join while the Actor is in the middle of a turn waits for that turn to end
/// (a control claim on the Actor's own queue), so the running turn never overlaps the new
/// Spot's turns; an `Async` request from a SpotWide Spot to its own member is refused at once
/// (it would wait for the gate its caller holds) instead of hanging until its deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_join_waits_for_the_actors_running_turn_and_same_gate_async_is_refused() {
    let c = Gates::start(1, 0).await;
    let rt = &c.rts[0];
    rt.create_user_spot("wide", "g-1", None).await.unwrap();
    rt.create_actor("a", "g-a", None).await.unwrap();
    let entry = rt.entry_spot_id();
    // A turn of the Actor (still in its Entry Spot, no gate) held open, then the join.
    let held = rt.request_to_actor::<Hold, Done>("g-a", &Hold, T);
    let join = async {
        c.probe.reached(1).await;
        let join = rt.join_actor("g-a", "g-1");
        let waiting = async {
            // The join is a control claim queued behind the running turn (the turn plus one
            // waiting item), and nothing changed yet: not in the store, not on the node.
            eventually("the join queued behind the running turn", || {
                rt.queued_work() == 2
            })
            .await;
            assert_eq!(c.membership_in_store("g-a").await, Some(entry.clone()));
            assert_eq!(rt.membership("g-a"), Some(entry.clone()));
            c.probe.release.add_permits(1);
        };
        let (joined, ()) = tokio::join!(join, waiting);
        joined.unwrap();
        assert_eq!(rt.membership("g-a").as_deref(), Some("g-1"));
        // From here the Actor and the Spot share one gate; crowd the Spot.
        hammer(rt, &[(ObjectKind::Spot, "g-1")], 8).await;
    };
    let (d, ()) = tokio::join!(held, join);
    d.unwrap();
    assert_eq!(
        c.probe.max.load(Ordering::SeqCst),
        1,
        "the Actor's running turn overlapped the Spot after the join"
    );
    let err = rt
        .request_to_spot::<Relay, Done>("g-1", &Relay { to: "g-a".into() }, T)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidOperation, "{err}");
    c.shutdown().await;
}
