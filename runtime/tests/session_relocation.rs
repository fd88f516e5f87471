//! Bound Actors moving under live STREAM sessions (issue 19 item 7, acceptance 6; routing
//! `000_…` §3.3; wire §9 "Session seal과 source relay", §10 "Session route"):
//!
//! - an Actor bound to a live Stream Connector session moves 50 times between three real
//!   MeshNodes — sometimes onto the session's own node — while the client sends, requests and
//!   gets pushes: nothing is lost, duplicated or reordered, the client sees no disconnect, and
//!   the session keeps its SessionId and its connection;
//! - a target that loses its `sessionRelocationRoute` (44, failpoint) closes exactly that
//!   session at its owner's seal timeout; another session of the same owner carries on;
//! - a session owner whose seal answer (43) is lost fails the unit before relay-ready: the
//!   Actor stays, the seal is aborted (44 `abort`), and what the session sent meanwhile — held
//!   by the seal — arrives once, in order.
#![allow(clippy::unwrap_used)] // In tests a panic is the failure report.

mod common;
#[path = "common/sessions.rs"]
mod session_rig;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::cluster::Cluster;
use common::eventually;
use serde::{Deserialize, Serialize};
use zlink::call::error::CallError;
use zlink::mesh::JsonMessage;
use zlink::object::ObjectCalls;
use zlink::object::exec::ObjectHandlers;
use zlink::object::registry::{FactoryInput, JsonState, Registry, Relocation};
use zlink::object::runtime::{
    Disconnected, ObjectRuntime, RelocatePlan, RelocationSettings, TransferFault, Unbound,
};
use zlink::relocation::host::{StayReason, UnitOutcome};
use zlink::session::{SessionHandlers, StreamNode};
use zlink_connector::{Connector, ConnectorEvent};
use zlink_store::MemoryStore;

const WAIT: Duration = Duration::from_secs(10);

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Say {
    actor: String,
    n: u64,
}
impl JsonMessage for Say {
    const PACKET_NAME: &'static str = "t.Say";
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Ask {
    actor: String,
}
impl JsonMessage for Ask {
    const PACKET_NAME: &'static str = "t.Ask";
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Answer {
    /// Sends the Actor had taken before this request.
    seen: u64,
    /// The session id and binding generation the Actor is bound to.
    session: Option<(u64, u64)>,
}
impl JsonMessage for Answer {
    const PACKET_NAME: &'static str = "t.Answer";
}

/// Pushed by the Actor for every `Say`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Echo {
    n: u64,
}
impl JsonMessage for Echo {
    const PACKET_NAME: &'static str = "t.Echo";
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Bind {
    actor: String,
}
impl JsonMessage for Bind {
    const PACKET_NAME: &'static str = "t.Bind";
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Unbind {
    actor: String,
}
impl JsonMessage for Unbind {
    const PACKET_NAME: &'static str = "t.Unbind";
}

/// Answered by the session itself: who it is and which connection it has.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Who {}
impl JsonMessage for Who {
    const PACKET_NAME: &'static str = "t.Who";
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Me {
    session_id: u64,
    peer_port: u16,
}
impl JsonMessage for Me {
    const PACKET_NAME: &'static str = "t.Me";
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Look;
impl JsonMessage for Look {
    const PACKET_NAME: &'static str = "t.Look";
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
struct Seen {
    says: Vec<u64>,
    disconnects: Vec<String>,
}
impl JsonMessage for Seen {
    const PACKET_NAME: &'static str = "t.Seen";
}

fn player() -> ObjectHandlers<Seen> {
    let mut h: ObjectHandlers<Seen> = ObjectHandlers::new();
    h.on_send(|ctx, s: Say| async move {
        ctx.state().says.push(s.n);
        ctx.push(&Echo { n: s.n }).await?;
        Ok(())
    });
    h.on_request(|ctx, _: Ask| async move {
        let seen = ctx.state().says.len() as u64;
        Ok::<_, CallError>(Answer {
            seen,
            session: ctx.session().map(|s| (s.session_id, s.binding_generation)),
        })
    });
    h.on_send(|ctx, d: Disconnected| async move {
        ctx.state().disconnects.push(d.reason);
        Ok(())
    });
    h.on_send(|ctx, _: Unbound| async move {
        ctx.state().disconnects.push("Unbound".into());
        Ok(())
    });
    h.on_request(|ctx, _: Look| async move { Ok::<_, CallError>(ctx.state().clone()) });
    h
}

fn registry() -> Registry {
    let mut reg = Registry::new();
    reg.actor(
        "player",
        |_: FactoryInput| async { Ok(Seen::default()) },
        player,
    )
    .relocation(Relocation::PreserveWith(Arc::new(JsonState)))
    .register();
    // A SpotWide room: it moves with all its member Actors as one unit.
    reg.user_spot(
        "room",
        |_: FactoryInput| async { Ok(Seen::default()) },
        ObjectHandlers::new,
    )
    .relocation(Relocation::PreserveWith(Arc::new(JsonState)))
    .register();
    reg.entry_spot(
        "entry",
        |_: FactoryInput| async { Ok(Seen::default()) },
        ObjectHandlers::new,
    )
    .register();
    reg
}

fn session_handlers(rt: ObjectRuntime<MemoryStore>) -> SessionHandlers {
    let mut h = SessionHandlers::new();
    h.on_request(Bind::PACKET_NAME, move |ctx, packet, reply| {
        let rt = rt.clone();
        async move {
            let b: Bind = serde_json::from_slice(&packet.payload).unwrap();
            let bound = match rt.actor_ref(&b.actor).await {
                Ok(r) => ctx.bind(&r).await,
                Err(e) => Err(e),
            };
            match bound {
                Ok(route) => reply.json(&route.binding_generation),
                Err(e) => reply.call_error(&e),
            }
        }
    })
    .unwrap();
    h.on_send(Say::PACKET_NAME, |ctx, packet| async move {
        let s: Say = serde_json::from_slice(&packet.payload).unwrap();
        let _ = ctx.relay(&s.actor, &packet).await;
    })
    .unwrap();
    h.on_request(Ask::PACKET_NAME, |ctx, packet, reply| async move {
        let a: Ask = serde_json::from_slice(&packet.payload).unwrap();
        let answer = ctx.relay_request(&a.actor, &packet, WAIT).await;
        reply.answer(answer);
    })
    .unwrap();
    h.on_request(Unbind::PACKET_NAME, |ctx, packet, reply| async move {
        let u: Unbind = serde_json::from_slice(&packet.payload).unwrap();
        match ctx.unbind(&u.actor).await {
            Ok(()) => reply.json(&true),
            Err(e) => reply.call_error(&e),
        }
    })
    .unwrap();
    h.on_request(Who::PACKET_NAME, |ctx, _packet, reply| async move {
        reply.json(&Me {
            session_id: ctx.id().get(),
            peer_port: ctx.peer_addr().port(),
        });
    })
    .unwrap();
    h
}

/// `nodes` MeshNodes with Entry Spots hosting [`registry`] on one memory store; `weights`, when
/// given, are their placement weights.
async fn sessions_cluster(nodes: usize, weights: &[u16]) -> Cluster {
    let mut b = Cluster::builder(nodes)
        .registry(|_| registry())
        .entry_spots();
    if !weights.is_empty() {
        b = b.placement_weights(weights);
    }
    b.start().await
}

/// What Actor `id` saw, read through `rt` once it got a session notice (`Disconnected` or
/// `Unbound`; within [`WAIT`]).
async fn until_noticed(rt: &ObjectRuntime<MemoryStore>, id: &str) -> Seen {
    let t0 = std::time::Instant::now();
    loop {
        let seen: Seen = rt
            .request_to_actor::<Look, Seen>(id, &Look, WAIT)
            .await
            .unwrap();
        if !seen.disconnects.is_empty() {
            return seen;
        }
        assert!(t0.elapsed() < WAIT, "no session notice reached {id}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Every node moves often: a 50 ms cutover wait and a 300 ms Message Follow window (eight
/// moves within 350 ms would fill the follow chain; the tests space their moves).
fn quick_moves(c: &Cluster, fault: impl Fn(usize) -> Option<TransferFault>) {
    for (i, rt) in c.rts.iter().enumerate() {
        rt.set_relocation_settings(RelocationSettings {
            cutover_wait: Duration::from_millis(50),
            message_follow: Duration::from_millis(300),
            fault: fault(i),
            ..RelocationSettings::default()
        });
    }
}

/// A StreamNode routed through node `s`'s runtime.
async fn stream_on(c: &Cluster, s: usize) -> StreamNode {
    session_rig::routed_stream_node(
        session_handlers(c.rts[s].clone()),
        c.rts[s].session_router(),
    )
    .await
}

/// Player `id`, placed on node `node` (a member of its Entry Spot).
async fn player_on(c: &Cluster, node: usize, id: &str) {
    let rt = &c.rts[node];
    rt.create_actor_in("player", id, &rt.entry_spot_id(), None)
        .await
        .unwrap();
}

/// A connected client whose `Echo` pushes and connection events are recorded.
async fn recorded_client(
    stream: &StreamNode,
) -> (Connector, Arc<Mutex<Vec<u64>>>, Arc<Mutex<Vec<String>>>) {
    let c = session_rig::client(stream).await;
    let echoes: Arc<Mutex<Vec<u64>>> = Arc::default();
    let events: Arc<Mutex<Vec<String>>> = Arc::default();
    let e = Arc::clone(&echoes);
    c.on_send(move |m: Echo| e.lock().unwrap().push(m.n));
    let ev = Arc::clone(&events);
    // Every event but the first `Connected` (which may be dispatched after this registration).
    c.on_event(move |x: &ConnectorEvent| {
        if !matches!(x, ConnectorEvent::Connected { .. }) {
            ev.lock().unwrap().push(format!("{x:?}"));
        }
    });
    (c, echoes, events)
}

async fn bind(c: &Connector, actor: &str) -> u64 {
    c.request(&Bind {
        actor: actor.into(),
    })
    .timeout(WAIT)
    .await
    .unwrap()
    .json::<u64>()
    .unwrap()
}

async fn ask(c: &Connector, actor: &str) -> Answer {
    c.request(&Ask {
        actor: actor.into(),
    })
    .timeout(WAIT)
    .await
    .unwrap()
    .json::<Answer>()
    .unwrap()
}

async fn who(c: &Connector) -> Me {
    c.request(&Who {})
        .timeout(WAIT)
        .await
        .unwrap()
        .json::<Me>()
        .unwrap()
}

/// Move Actor `id` from node `from` to node `to`; the outcome.
async fn move_actor(c: &Cluster, id: &str, from: usize, to: usize) -> UnitOutcome {
    let units: Vec<_> = c.rts[from]
        .relocation_units()
        .into_iter()
        .filter(|u| u.id == id)
        .collect();
    assert_eq!(units.len(), 1, "{id} is live on node {from}");
    let plan = RelocatePlan {
        target_rids: vec![c.nodes[to].rid().to_owned()],
        ..RelocatePlan::default()
    };
    let reports = c.rts[from].relocate_units(&units, &plan, |_, _| {}).await;
    reports[0].outcome.clone()
}

fn sum(c: &Cluster, f: impl Fn(&zlink::object::runtime::SessionStats) -> &AtomicU64) -> u64 {
    c.rts
        .iter()
        .map(|rt| f(rt.session_stats()).load(Ordering::Relaxed))
        .sum()
}

/// Issue 19 acceptance 6: an Actor bound to a live Connector session moves 50 times — node 1
/// → 2 → 0 (the session's own node) → 1 … — while the client keeps sending (each send is
/// pushed back) and asking. Every request sees exactly the sends before it; the Actor took
/// every send once, in order; every push came back once, in order; the client saw no
/// disconnect and the session kept its id and connection; every move carried the binding and
/// switched the route (44), none timed out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bound_actor_moves_50_times_under_sends_requests_and_pushes() {
    const MOVES: usize = 50;
    let c = sessions_cluster(3, &[]).await;
    quick_moves(&c, |_| None);
    let stream = stream_on(&c, 0).await;
    let id = "player:mover";
    player_on(&c, 1, id).await;
    let (client, echoes, events) = recorded_client(&stream).await;
    let generation = bind(&client, id).await;
    let first = who(&client).await;
    let stop = Arc::new(AtomicBool::new(false));
    let client = Arc::new(client);
    // The load: sends (each pushed back) with a request after every 25, until told to stop.
    let load = {
        let (client, stop) = (Arc::clone(&client), Arc::clone(&stop));
        tokio::spawn(async move {
            let mut sent = 0u64;
            let mut asks = 0u64;
            while !stop.load(Ordering::Relaxed) {
                for _ in 0..25 {
                    client
                        .send(&Say {
                            actor: id.into(),
                            n: sent,
                        })
                        .await
                        .unwrap();
                    sent += 1;
                }
                let a = ask(&client, id).await;
                assert_eq!(a.seen, sent, "a request sees every send before it, once");
                assert_eq!(a.session.map(|s| s.1), Some(generation), "still bound");
                asks += 1;
            }
            (sent, asks)
        })
    };
    let mut at = 1usize;
    let mut moved = 0;
    let mut chain_full = 0;
    while moved < MOVES {
        let to = (at + 1) % 3;
        match move_actor(&c, id, at, to).await {
            UnitOutcome::HandedOver => {
                moved += 1;
                at = to;
            }
            // Moved too often within the follow window: wait for it to pass a little.
            UnitOutcome::Stayed(StayReason::FollowChainFull) => {
                chain_full += 1;
                assert!(chain_full < 100, "the follow chain never cleared");
            }
            other => panic!("move {moved} from node {at}: {other:?}"),
        }
        tokio::time::sleep(Duration::from_millis(45)).await;
    }
    stop.store(true, Ordering::Relaxed);
    let (sent, asks) = load.await.unwrap();
    assert!(
        asks >= MOVES as u64,
        "requests ran across the moves ({asks})"
    );
    let seen: Seen = c.rts[2]
        .request_to_actor::<Look, Seen>(id, &Look, WAIT)
        .await
        .unwrap();
    assert_eq!(
        seen.says,
        (0..sent).collect::<Vec<_>>(),
        "every send once, in order"
    );
    assert!(seen.disconnects.is_empty(), "{:?}", seen.disconnects);
    eventually("every push", || echoes.lock().unwrap().len() as u64 >= sent).await;
    assert_eq!(
        *echoes.lock().unwrap(),
        (0..sent).collect::<Vec<_>>(),
        "every push once, in order"
    );
    assert_eq!(who(&client).await, first, "the same session and connection");
    assert_eq!(client.stats().sessions, 1, "never reconnected");
    assert!(
        events.lock().unwrap().is_empty(),
        "no connection events: {:?}",
        events.lock().unwrap()
    );
    assert_eq!(
        sum(&c, |s| &s.legs_sealed),
        MOVES as u64,
        "every move sealed the session"
    );
    let owner = c.rts[0].session_stats();
    assert_eq!(owner.routes_applied.load(Ordering::Relaxed), MOVES as u64);
    assert_eq!(owner.seal_timeouts.load(Ordering::Relaxed), 0);
    assert_eq!(sum(&c, |s| &s.routes_sent), MOVES as u64);
    assert_eq!(sum(&c, |s| &s.aborts_sent), 0);
    assert_eq!(owner.push_drops.load(Ordering::Relaxed), 0);
    stream.shutdown().await;
    c.shutdown().await;
}

/// Issue 19 acceptance 6, failpoint: the target drops its 44. The session whose Actor moved
/// closes at its owner's seal timeout (`SealTimeout`; its Actor, now on the target, gets the
/// disconnect notice through Message Follow); another session on the same owner, bound to an
/// Actor that did not move, carries on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_route_update_closes_only_that_session_at_the_seal_timeout() {
    let c = sessions_cluster(3, &[]).await;
    // Node 2 is the target that loses its route updates; the follow window outlasts the seal.
    for (i, rt) in c.rts.iter().enumerate() {
        rt.set_relocation_settings(RelocationSettings {
            cutover_wait: Duration::from_millis(50),
            message_follow: Duration::from_secs(5),
            fault: (i == 2).then_some(TransferFault::DropSessionRoutes),
            ..RelocationSettings::default()
        });
    }
    c.rts[0].set_session_seal_timeout(Duration::from_millis(400));
    let stream = stream_on(&c, 0).await;
    player_on(&c, 1, "player:moved").await;
    player_on(&c, 1, "player:stays").await;
    let (a, _, a_events) = recorded_client(&stream).await;
    let (b, b_echoes, b_events) = recorded_client(&stream).await;
    bind(&a, "player:moved").await;
    bind(&b, "player:stays").await;
    assert_eq!(
        move_actor(&c, "player:moved", 1, 2).await,
        UnitOutcome::HandedOver
    );
    // Sealed at the session owner, never routed: held, then the session closes.
    a.send(&Say {
        actor: "player:moved".into(),
        n: 0,
    })
    .await
    .unwrap();
    eventually("the session with the moved Actor closes", || {
        a_events
            .lock()
            .unwrap()
            .iter()
            .any(|e| e.starts_with("Disconnected"))
    })
    .await;
    let owner = c.rts[0].session_stats();
    assert_eq!(owner.seal_timeouts.load(Ordering::Relaxed), 1);
    assert_eq!(owner.routes_applied.load(Ordering::Relaxed), 0);
    // The other session is untouched.
    for n in 0..20 {
        b.send(&Say {
            actor: "player:stays".into(),
            n,
        })
        .await
        .unwrap();
    }
    assert_eq!(ask(&b, "player:stays").await.seen, 20);
    eventually("b's pushes", || b_echoes.lock().unwrap().len() == 20).await;
    assert!(
        b_events.lock().unwrap().is_empty(),
        "{:?}",
        b_events.lock().unwrap()
    );
    // The moved Actor lives on at the target and learned that its session closed; the send
    // held in the closed seal was never delivered.
    let seen = until_noticed(&c.rts[2], "player:moved").await;
    assert_eq!(seen.disconnects, vec!["SealTimeout".to_owned()]);
    // The notice came without its bound-session tail (followed from the old owner), and it
    // still ended the binding that moved with the Actor.
    let a: Answer = c.rts[2]
        .request_to_actor::<Ask, Answer>(
            "player:moved",
            &Ask {
                actor: "player:moved".into(),
            },
            WAIT,
        )
        .await
        .unwrap();
    assert_eq!(a.session, None, "the moved binding ended with its session");
    assert!(seen.says.is_empty(), "{:?}", seen.says);
    stream.shutdown().await;
    c.shutdown().await;
}

/// Issue 19 item 7, "no 43 by its deadline → explicit failure before relay-ready": the session
/// owner (node 1) installs the seal but its 43 is lost (failpoint `DropSealAnswers`). The sends
/// the session makes meanwhile are held there. The source's wait (300 ms) ends without an
/// answer: the unit fails `SessionSealTimeout`, the Actor stays on node 0, and the 44 `abort`
/// releases the held sends to the source route — they arrive once, in order, with their pushes;
/// the session stays open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unanswered_seal_fails_the_move_and_the_abort_releases_what_it_held() {
    let c = sessions_cluster(3, &[]).await;
    for (i, rt) in c.rts.iter().enumerate() {
        rt.set_relocation_settings(RelocationSettings {
            cutover_wait: Duration::from_millis(50),
            session_seal_wait: Duration::from_millis(300),
            fault: (i == 1).then_some(TransferFault::DropSealAnswers),
            ..RelocationSettings::default()
        });
    }
    let stream = stream_on(&c, 1).await;
    let id = "player:stuck";
    player_on(&c, 0, id).await;
    let (client, echoes, events) = recorded_client(&stream).await;
    bind(&client, id).await;
    for n in 0..5 {
        client
            .send(&Say {
                actor: id.into(),
                n,
            })
            .await
            .unwrap();
    }
    assert_eq!(ask(&client, id).await.seen, 5);
    let owner = c.rts[1].session_stats();
    let moving = move_actor(&c, id, 0, 2);
    let meanwhile = async {
        // Sealed at the session owner from here (its 43 is lost): these are held.
        eventually("the seal is installed", || {
            owner.seals.load(Ordering::Relaxed) == 1
        })
        .await;
        for n in 5..10 {
            client
                .send(&Say {
                    actor: id.into(),
                    n,
                })
                .await
                .unwrap();
        }
        eventually("the sends are held", || {
            owner.relays_held.load(Ordering::Relaxed) == 5
        })
        .await;
    };
    let (outcome, ()) = tokio::join!(moving, meanwhile);
    match outcome {
        UnitOutcome::Failed(why) => assert!(why.starts_with("SessionSealTimeout"), "{why}"),
        other => panic!("{other:?}"),
    }
    let source = c.rts[0].session_stats();
    assert_eq!(source.leg_timeouts.load(Ordering::Relaxed), 1);
    assert_eq!(source.aborts_sent.load(Ordering::Relaxed), 1);
    eventually("the seal is aborted", || {
        owner.aborts_applied.load(Ordering::Relaxed) == 1
    })
    .await;
    assert_eq!(
        ask(&client, id).await.seen,
        10,
        "the Actor stayed and took all ten"
    );
    let seen: Seen = c.rts[0]
        .request_to_actor::<Look, Seen>(id, &Look, WAIT)
        .await
        .unwrap();
    assert_eq!(seen.says, (0..10).collect::<Vec<_>>());
    eventually("the pushes", || echoes.lock().unwrap().len() == 10).await;
    assert_eq!(*echoes.lock().unwrap(), (0..10).collect::<Vec<_>>());
    assert!(
        events.lock().unwrap().is_empty(),
        "{:?}",
        events.lock().unwrap()
    );
    assert_eq!(owner.seal_timeouts.load(Ordering::Relaxed), 0);
    stream.shutdown().await;
    c.shutdown().await;
}

/// A unit with two legs whose sessions live on two gateway nodes: two members of one room are
/// bound to the first session of node 0 and of node 1 — both (session 1, binding 1), since
/// session ids and binding generations are per session owner. The room moves as one unit;
/// each 43 is matched to its own session owner, both routes switch, and both sessions keep
/// relaying to their players.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_room_moves_with_members_bound_to_sessions_on_two_nodes() {
    // The room is placed on node 2, the one node without a gateway: both legs are remote.
    let c = sessions_cluster(3, &[0, 0, 100]).await;
    quick_moves(&c, |_| None);
    let (s0, s1) = (stream_on(&c, 0).await, stream_on(&c, 1).await);
    c.rts[2]
        .create_user_spot("room", "room:r", None)
        .await
        .unwrap();
    for p in ["player:r0", "player:r1"] {
        c.rts[2]
            .create_actor_in("player", p, "room:r", None)
            .await
            .unwrap();
    }
    let (a, _, a_events) = recorded_client(&s0).await;
    let (b, _, b_events) = recorded_client(&s1).await;
    bind(&a, "player:r0").await;
    bind(&b, "player:r1").await;
    let (sa, sb) = (ask(&a, "player:r0").await, ask(&b, "player:r1").await);
    assert_eq!(
        sa.session, sb.session,
        "the same (session, binding) on two owners"
    );
    let owner = match c
        .authority(zlink_store::types::ObjectKind::Spot, "room:r")
        .await
    {
        zlink_store::types::AuthorityRead::Found(x) => x.owner_node.rid,
        other => panic!("{other:?}"),
    };
    assert_eq!(owner, c.nodes[2].rid());
    // Node 0 may take units now.
    c.nodes[0].set_placement_weight(100).unwrap();
    c.nodes[2]
        .wait_peer(c.nodes[0].rid(), WAIT, |p| {
            p.descriptor
                .as_ref()
                .is_some_and(|d| d.placement_weight == 100)
        })
        .await
        .unwrap();
    assert_eq!(
        move_actor(&c, "room:r", 2, 0).await,
        UnitOutcome::HandedOver
    );
    assert_eq!(sum(&c, |s| &s.legs_sealed), 2);
    for n in 0..10 {
        for (client, p) in [(&a, "player:r0"), (&b, "player:r1")] {
            client.send(&Say { actor: p.into(), n }).await.unwrap();
        }
    }
    assert_eq!(ask(&a, "player:r0").await.seen, 10);
    assert_eq!(ask(&b, "player:r1").await.seen, 10);
    for s in [c.rts[0].session_stats(), c.rts[1].session_stats()] {
        assert_eq!(s.routes_applied.load(Ordering::Relaxed), 1);
        assert_eq!(s.seal_timeouts.load(Ordering::Relaxed), 0);
    }
    assert!(a_events.lock().unwrap().is_empty());
    assert!(b_events.lock().unwrap().is_empty());
    s0.shutdown().await;
    s1.shutdown().await;
    c.shutdown().await;
}

/// Issue 19 item 5 "Disconnect/unbind": `SessionCtx::unbind` drops the session's route at once
/// and the Actor gets one `zlink.session.Unbound` notice (after every send before it), which
/// ends its binding: the session's later requests to it are refused `InvalidOperation`, and the
/// Actor's own view of its binding is empty.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unbind_notifies_the_actor_once_and_ends_both_sides_of_the_binding() {
    let c = sessions_cluster(2, &[]).await;
    let stream = stream_on(&c, 0).await;
    let id = "player:unbound";
    player_on(&c, 1, id).await;
    let (client, _, events) = recorded_client(&stream).await;
    bind(&client, id).await;
    for n in 0..3 {
        client
            .send(&Say {
                actor: id.into(),
                n,
            })
            .await
            .unwrap();
    }
    let unbound = client
        .request(&Unbind { actor: id.into() })
        .timeout(WAIT)
        .await
        .unwrap();
    assert!(unbound.json::<bool>().unwrap());
    // The route is gone at once.
    let err = client
        .request(&Ask { actor: id.into() })
        .timeout(WAIT)
        .await
        .unwrap_err();
    assert!(format!("{err:?}").contains("InvalidOperation"), "{err:?}");
    // A second unbind is refused the same way.
    let again = client
        .request(&Unbind { actor: id.into() })
        .timeout(WAIT)
        .await
        .unwrap_err();
    assert!(
        format!("{again:?}").contains("InvalidOperation"),
        "{again:?}"
    );
    let seen = until_noticed(&c.rts[0], id).await;
    assert_eq!(
        seen.says,
        vec![0, 1, 2],
        "the sends before the unbind, then the notice"
    );
    assert_eq!(seen.disconnects, vec!["Unbound".to_owned()]);
    let a: Answer = c.rts[0]
        .request_to_actor::<Ask, Answer>(id, &Ask { actor: id.into() }, WAIT)
        .await
        .unwrap();
    assert_eq!(a.session, None, "the Actor is unbound");
    assert_eq!(
        c.rts[0]
            .session_stats()
            .unbind_notices
            .load(Ordering::Relaxed),
        1
    );
    assert!(events.lock().unwrap().is_empty(), "the session stays open");
    stream.shutdown().await;
    c.shutdown().await;
}
