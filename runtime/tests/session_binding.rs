//! STREAM sessions bound to Actors across real MeshNodes, with a real Stream Connector client
//! on loopback TCP (issue 19 items 3–5; routing `000_…` §3.1–§3.2):
//!
//! - a bind takes only an ActorRef and stores its route; relays (24/25 with the bound-session
//!   tail) and pushes (36) use it, in session order, local and remote;
//! - stale, earlier-incarnation and gone ActorRefs are refused with their closed kinds and the
//!   route in use stays;
//! - a rebind of the same session keeps the new binding; a relay under a replaced binding is
//!   refused and its route dropped, never resent;
//! - a closed session sends each bound Actor one `zlink.session.Disconnected`, after which the
//!   Actor is unbound; a push to a gone session owner is `Unavailable` and unbinds;
//! - a rebind tombstone removes exactly the identity it names, and only its sender's.
#![allow(clippy::unwrap_used)] // In tests a panic is the failure report.

mod common;
#[path = "common/sessions.rs"]
mod session_rig;

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::cluster::Cluster;
use serde::{Deserialize, Serialize};
use zlink::call::error::CallError;
use zlink::mesh::JsonMessage;
use zlink::object::ActorRef;
use zlink::object::ObjectCalls;
use zlink::object::exec::ObjectHandlers;
use zlink::object::registry::{FactoryInput, Registry};
use zlink::object::runtime::{
    BindingTombstone, BindingTombstoneAck, Disconnected, ObjectRuntime, RelocatePlan,
};
use zlink::session::{SessionHandlers, StreamNode};
use zlink_connector::{Connector, ConnectorEvent, RequestError};
use zlink_store::MemoryStore;

const WAIT: Duration = Duration::from_secs(10);

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Say {
    actor: String,
    n: u64,
    /// The Actor pushes `Echo { n }` back to its session.
    echo: bool,
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

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Echo {
    n: u64,
}
impl JsonMessage for Echo {
    const PACKET_NAME: &'static str = "t.Echo";
}

/// Bind to the ActorRef the test kept under `slot` (or, with `fresh`, to the Actor's current
/// one, read from the store).
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Bind {
    slot: String,
    fresh: bool,
}
impl JsonMessage for Bind {
    const PACKET_NAME: &'static str = "t.Bind";
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Bound {
    binding_generation: u64,
}
impl JsonMessage for Bound {
    const PACKET_NAME: &'static str = "t.Bound";
}

/// What a player Actor saw (read by ID, not through a session).
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Look;
impl JsonMessage for Look {
    const PACKET_NAME: &'static str = "t.Look";
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
struct Seen {
    says: Vec<u64>,
    disconnects: Vec<String>,
    session: Option<(u64, u64)>,
}
impl JsonMessage for Seen {
    const PACKET_NAME: &'static str = "t.Seen";
}

/// Ask the Actor to push one `Echo { n }`; answers with the push's result kind.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct PushNow {
    n: u64,
}
impl JsonMessage for PushNow {
    const PACKET_NAME: &'static str = "t.PushNow";
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Pushed {
    error: Option<String>,
}
impl JsonMessage for Pushed {
    const PACKET_NAME: &'static str = "t.Pushed";
}

fn session_of(s: Option<zlink_protocol::generated::SessionRef>) -> Option<(u64, u64)> {
    s.map(|s| (s.session_id, s.binding_generation))
}

fn player() -> ObjectHandlers<Seen> {
    let mut h: ObjectHandlers<Seen> = ObjectHandlers::new();
    h.on_send(|ctx, s: Say| async move {
        ctx.state().says.push(s.n);
        if s.echo {
            ctx.push(&Echo { n: s.n }).await?;
        }
        Ok(())
    });
    h.on_request(|ctx, _: Ask| async move {
        let seen = ctx.state().says.len() as u64;
        Ok::<_, CallError>(Answer {
            seen,
            session: session_of(ctx.session()),
        })
    });
    h.on_send(|ctx, d: Disconnected| async move {
        ctx.state().disconnects.push(d.reason);
        Ok(())
    });
    h.on_request(|ctx, _: Look| async move {
        let mut seen = ctx.state().clone();
        seen.session = session_of(ctx.session());
        Ok::<_, CallError>(seen)
    });
    h.on_request(|ctx, p: PushNow| async move {
        let error = ctx
            .push(&Echo { n: p.n })
            .await
            .err()
            .map(|e| format!("{:?}", e.kind()));
        Ok::<_, CallError>(Pushed { error })
    });
    h
}

fn registry() -> Registry {
    let mut reg = Registry::new();
    reg.actor(
        "player",
        |_: FactoryInput| async { Ok(Seen::default()) },
        player,
    )
    .register();
    reg.entry_spot(
        "entry",
        |_: FactoryInput| async { Ok(Seen::default()) },
        ObjectHandlers::new,
    )
    .register();
    reg
}

type Refs = Arc<Mutex<HashMap<String, ActorRef>>>;
/// `on_binding_replaced` calls: (session id, Actor ID, when).
type Replaced = Arc<Mutex<Vec<(u64, String, Instant)>>>;
/// `on_binding_lost` calls: (session id, Actor ID, kind).
type Lost = Arc<Mutex<Vec<(u64, String, String)>>>;

/// Two object nodes on one memory store, a StreamNode on node 0 bound to node 0's runtime.
struct Rig {
    cluster: Cluster,
    stream: StreamNode,
    refs: Refs,
    replaced: Replaced,
    lost: Lost,
}

fn session_handlers(
    rt: ObjectRuntime<MemoryStore>,
    refs: Refs,
    replaced: Replaced,
    lost: Lost,
) -> SessionHandlers {
    let mut h = SessionHandlers::new();
    h.on_binding_replaced(move |ctx, actor| {
        replaced
            .lock()
            .unwrap()
            .push((ctx.id().get(), actor, Instant::now()));
        async {}
    });
    h.on_binding_lost(move |ctx, actor, kind| {
        lost.lock()
            .unwrap()
            .push((ctx.id().get(), actor, format!("{kind:?}")));
        async {}
    });
    h.on_request(Bind::PACKET_NAME, move |ctx, packet, reply| {
        let rt = rt.clone();
        let refs = Arc::clone(&refs);
        async move {
            let b: Bind = serde_json::from_slice(&packet.payload).unwrap();
            let r = if b.fresh {
                rt.actor_ref(&b.slot).await
            } else {
                Ok(refs.lock().unwrap()[&b.slot].clone())
            };
            let bound = match r {
                Ok(r) => ctx.bind(&r).await,
                Err(e) => Err(e),
            };
            match bound {
                Ok(route) => reply.json(&Bound {
                    binding_generation: route.binding_generation,
                }),
                Err(e) => reply.call_error(&e),
            }
        }
    })
    .unwrap();
    h.on_send(Say::PACKET_NAME, |ctx, packet| async move {
        let s: Say = serde_json::from_slice(&packet.payload).unwrap();
        // A refused relay is counted by the runtime; the client learns from its requests.
        let _ = ctx.relay(&s.actor, &packet).await;
    })
    .unwrap();
    h.on_request(Ask::PACKET_NAME, |ctx, packet, reply| async move {
        let a: Ask = serde_json::from_slice(&packet.payload).unwrap();
        let answer = ctx.relay_request(&a.actor, &packet, WAIT).await;
        reply.answer(answer);
    })
    .unwrap();
    h
}

impl Rig {
    async fn start() -> Self {
        let cluster = Cluster::builder(2)
            .registry(|_| registry())
            .entry_spots()
            .start()
            .await;
        let refs: Refs = Arc::default();
        let replaced: Replaced = Arc::default();
        let lost: Lost = Arc::default();
        let stream = session_rig::routed_stream_node(
            session_handlers(
                cluster.rts[0].clone(),
                Arc::clone(&refs),
                Arc::clone(&replaced),
                Arc::clone(&lost),
            ),
            cluster.rts[0].session_router(),
        )
        .await;
        Self {
            cluster,
            stream,
            refs,
            replaced,
            lost,
        }
    }

    async fn client(&self) -> Connector {
        session_rig::client(&self.stream).await
    }

    /// Create player `id` on node `node` and keep its ActorRef under `id`.
    async fn player(&self, node: usize, id: &str) -> ActorRef {
        // Placed on `node`: a member of that node's Entry Spot.
        let rt = &self.cluster.rts[node];
        let made = rt
            .create_actor_in("player", id, &rt.entry_spot_id(), None)
            .await
            .unwrap();
        let r = made.actor_ref().expect("an Actor");
        self.refs.lock().unwrap().insert(id.to_owned(), r.clone());
        r
    }

    async fn look(&self, id: &str) -> Seen {
        self.cluster.rts[0]
            .request_to_actor::<Look, Seen>(id, &Look, WAIT)
            .await
            .unwrap()
    }

    async fn shutdown(self) {
        self.stream.shutdown().await;
        self.cluster.shutdown().await;
    }
}

async fn bind(c: &Connector, slot: &str, fresh: bool) -> Result<Bound, RequestError> {
    c.request(&Bind {
        slot: slot.into(),
        fresh,
    })
    .timeout(WAIT)
    .await
    .map(|r| r.json::<Bound>().unwrap())
}

fn error_kind(e: &RequestError) -> String {
    match e {
        RequestError::Remote(p) => format!("{:?}", p.kind),
        other => format!("{other:?}"),
    }
}

async fn ask(c: &Connector, actor: &str) -> Result<Answer, RequestError> {
    c.request(&Ask {
        actor: actor.into(),
    })
    .timeout(WAIT)
    .await
    .map(|r| r.json::<Answer>().unwrap())
}

/// Issue 19 items 4–5 (acceptance 3 in one process): sends and requests relayed on the stored
/// route arrive once and in session order, interleaved; pushes come back in order; both for
/// an Actor on another node and on the session's own node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bound_session_relays_in_session_order_and_gets_the_actors_pushes() {
    let rig = Rig::start().await;
    for (node, id) in [(1, "player:far"), (0, "player:near")] {
        rig.player(node, id).await;
        let c = rig.client().await;
        let (echo_tx, mut echoes) = tokio::sync::mpsc::unbounded_channel();
        c.on_send(move |e: Echo| {
            let _ = echo_tx.send(e.n);
        });
        let bound = bind(&c, id, false).await.unwrap();
        assert!(bound.binding_generation >= 1);
        let mut sent = 0u64;
        for round in 0..50u64 {
            for k in 0..40u64 {
                let n = round * 40 + k;
                c.send(&Say {
                    actor: id.into(),
                    n,
                    echo: n % 10 == 0,
                })
                .await
                .unwrap();
                sent += 1;
            }
            let a = ask(&c, id).await.unwrap();
            assert_eq!(
                a.seen, sent,
                "{id}: a request sees every send before it, once"
            );
            assert!(
                a.session
                    .is_some_and(|(_, g)| g == bound.binding_generation)
            );
        }
        let seen = rig.look(id).await;
        assert_eq!(
            seen.says,
            (0..2_000).collect::<Vec<_>>(),
            "{id}: in order, once"
        );
        let mut got = Vec::new();
        while got.len() < 200 {
            let n = tokio::time::timeout(WAIT, echoes.recv())
                .await
                .unwrap()
                .unwrap();
            got.push(n);
        }
        assert_eq!(
            got,
            (0..2_000).step_by(10).collect::<Vec<_>>(),
            "{id}: pushes in order"
        );
        c.close().await;
    }
    let stats = rig.cluster.rts[0].session_stats();
    assert_eq!(stats.pushes.load(Ordering::Relaxed), 400);
    assert_eq!(stats.push_drops.load(Ordering::Relaxed), 0);
    rig.shutdown().await;
}

/// Issue 19 item 4 (acceptance 4, refusals): an ActorRef of an earlier incarnation →
/// `InvalidOperation`; of a destroyed Actor → `NotFound`; of an Actor that moved to another
/// node → `StaleRoute`. Each leaves the route in use as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binds_with_stale_earlier_or_gone_refs_get_their_closed_kinds_and_keep_the_route() {
    let rig = Rig::start().await;
    let c = rig.client().await;
    // Earlier incarnation: re-created under the same ID on the same owner.
    let old = rig.player(1, "player:re").await;
    rig.cluster.rts[1].destroy_actor("player:re").await.unwrap();
    let new = rig.player(1, "player:re").await;
    assert!(new.object_generation() > old.object_generation());
    bind(&c, "player:re", false).await.unwrap();
    rig.refs.lock().unwrap().insert("old".into(), old);
    let e = bind(&c, "old", false).await.unwrap_err();
    assert_eq!(error_kind(&e), "InvalidOperation", "{e:?}");
    // The route in use is still the new incarnation's: a relay reaches it.
    let a = ask(&c, "player:re").await.unwrap();
    assert!(a.session.is_some());
    // Destroyed.
    rig.player(1, "player:gone").await;
    rig.cluster.rts[1]
        .destroy_actor("player:gone")
        .await
        .unwrap();
    let e = bind(&c, "player:gone", false).await.unwrap_err();
    assert_eq!(error_kind(&e), "NotFound", "{e:?}");
    // Moved: node 1 relocates everything it holds to node 0.
    rig.player(1, "player:moved").await;
    let reports = rig.cluster.rts[1].relocate(&RelocatePlan::default()).await;
    assert!(!reports.is_empty());
    let e = bind(&c, "player:moved", false).await.unwrap_err();
    assert_eq!(error_kind(&e), "StaleRoute", "{e:?}");
    // A fresh ActorRef (read from the store) names the new owner and binds.
    bind(&c, "player:moved", true).await.unwrap();
    assert!(ask(&c, "player:moved").await.is_ok());
    c.close().await;
    rig.shutdown().await;
}

/// Issue 19 item 4 (acceptance 4, replace and rebind): a same-session rebind keeps the new
/// binding and replaces nothing; a second session's bind replaces the first's: the first gets
/// `on_binding_replaced` and closes 100 ms after it, its late relay reaches no handler, and the
/// second session's relays reach the Actor.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rebind_keeps_the_new_binding_and_a_replaced_session_closes_after_its_callback() {
    let rig = Rig::start().await;
    rig.player(1, "player:ann").await;
    let first = rig.client().await;
    let (closed_tx, mut closed) = tokio::sync::mpsc::unbounded_channel();
    first.on_event(move |e: &ConnectorEvent| {
        if matches!(e, ConnectorEvent::Disconnected(_)) {
            let _ = closed_tx.send(Instant::now());
        }
    });
    let g1 = bind(&first, "player:ann", false)
        .await
        .unwrap()
        .binding_generation;
    let g2 = bind(&first, "player:ann", false)
        .await
        .unwrap()
        .binding_generation;
    assert!(g2 > g1);
    let a = ask(&first, "player:ann").await.unwrap();
    assert_eq!(
        a.session.map(|(_, g)| g),
        Some(g2),
        "the same-owner rebind holds"
    );
    let stats = rig.cluster.rts[0].session_stats();
    assert_eq!(
        stats.replaced_applied.load(Ordering::Relaxed),
        0,
        "a rebind replaces nothing"
    );
    let second = rig.client().await;
    let g3 = bind(&second, "player:ann", false)
        .await
        .unwrap()
        .binding_generation;
    common::eventually("the replaced callback", || {
        !rig.replaced.lock().unwrap().is_empty()
    })
    .await;
    let (_, actor, called_at) = rig.replaced.lock().unwrap()[0].clone();
    assert_eq!(actor, "player:ann");
    // A late relay of the replaced session: refused (at its owner or at the Actor's), never
    // handled.
    let _ = first
        .send(&Say {
            actor: "player:ann".into(),
            n: 999,
            echo: false,
        })
        .await;
    let closed_at = tokio::time::timeout(WAIT, closed.recv())
        .await
        .unwrap()
        .unwrap();
    assert!(
        closed_at.duration_since(called_at) >= Duration::from_millis(100),
        "closed {:?} after the callback",
        closed_at.duration_since(called_at)
    );
    let a = ask(&second, "player:ann").await.unwrap();
    assert_eq!(a.session.map(|(_, g)| g), Some(g3));
    let seen = rig.look("player:ann").await;
    assert!(
        !seen.says.contains(&999),
        "the replaced session's late relay reached a handler"
    );
    assert_eq!(stats.replaced_applied.load(Ordering::Relaxed), 1);
    assert_eq!(rig.replaced.lock().unwrap().len(), 1);
    first.close().await;
    second.close().await;
    rig.shutdown().await;
}

/// Issue 19 item 5: a relay the Actor owner refuses — the Actor was re-created, so the bound
/// incarnation is gone → `InvalidOperation` — is not resent: the route is dropped,
/// `on_binding_lost` fires, and the next relay fails at the session owner without being sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_relay_drops_the_route_fires_on_binding_lost_and_is_never_resent() {
    let rig = Rig::start().await;
    rig.player(1, "player:bo").await;
    let c = rig.client().await;
    bind(&c, "player:bo", false).await.unwrap();
    rig.cluster.rts[1].destroy_actor("player:bo").await.unwrap();
    rig.player(1, "player:bo").await;
    let e = ask(&c, "player:bo").await.unwrap_err();
    assert_eq!(error_kind(&e), "InvalidOperation", "{e:?}");
    common::eventually("on_binding_lost", || !rig.lost.lock().unwrap().is_empty()).await;
    let (_, actor, kind) = rig.lost.lock().unwrap()[0].clone();
    assert_eq!(
        (actor.as_str(), kind.as_str()),
        ("player:bo", "InvalidOperation")
    );
    let stats = rig.cluster.rts[0].session_stats();
    let relays = stats.relays.load(Ordering::Relaxed);
    let e = ask(&c, "player:bo").await.unwrap_err();
    assert_eq!(error_kind(&e), "InvalidOperation", "{e:?}");
    assert_eq!(
        stats.relays.load(Ordering::Relaxed),
        relays,
        "not sent again"
    );
    assert_eq!(rig.look("player:bo").await.says, Vec::<u64>::new());
    c.close().await;
    rig.shutdown().await;
}

/// Issue 19 item 5: a session that closes sends each bound Actor (one remote, one local) one
/// `zlink.session.Disconnected` with the reason; after it the Actor is unbound, so a push is
/// `InvalidOperation`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_session_notifies_each_bound_actor_once_and_unbinds_it() {
    let rig = Rig::start().await;
    rig.player(1, "player:far").await;
    rig.player(0, "player:near").await;
    let c = rig.client().await;
    bind(&c, "player:far", false).await.unwrap();
    bind(&c, "player:near", false).await.unwrap();
    c.close().await;
    for id in ["player:far", "player:near"] {
        let mut seen = rig.look(id).await;
        let deadline = tokio::time::Instant::now() + WAIT;
        while seen.disconnects.is_empty() && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
            seen = rig.look(id).await;
        }
        assert_eq!(seen.disconnects, ["ClientClosed"], "{id}");
        assert_eq!(seen.session, None, "{id} is unbound");
        let pushed: Pushed = rig.cluster.rts[0]
            .request_to_actor(id, &PushNow { n: 1 }, WAIT)
            .await
            .unwrap();
        assert_eq!(pushed.error.as_deref(), Some("InvalidOperation"), "{id}");
    }
    rig.shutdown().await;
}

/// Issue 19 "Bad input and faults": a push to a session owner that is gone ends `Unavailable`
/// and drops the Actor's binding.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_push_to_a_gone_session_owner_is_unavailable_and_unbinds() {
    let rig = Rig::start().await;
    rig.player(1, "player:far").await;
    let c = rig.client().await;
    bind(&c, "player:far", false).await.unwrap();
    // The wait is registered (first poll) before the push is asked for.
    let (echo, pushed) = tokio::join!(
        c.wait::<Echo>(WAIT),
        rig.cluster.rts[1].request_to_actor::<PushNow, Pushed>(
            "player:far",
            &PushNow { n: 1 },
            WAIT
        )
    );
    assert_eq!(pushed.unwrap().error, None);
    assert_eq!(echo.unwrap(), Echo { n: 1 });
    // The session owner's mesh node leaves; its STREAM session is still open.
    rig.cluster.nodes[0].shutdown().await;
    let mut pushed = Pushed { error: None };
    let deadline = tokio::time::Instant::now() + WAIT;
    while pushed.error.is_none() && tokio::time::Instant::now() < deadline {
        pushed = rig.cluster.rts[1]
            .request_to_actor("player:far", &PushNow { n: 2 }, WAIT)
            .await
            .unwrap();
    }
    assert_eq!(pushed.error.as_deref(), Some("Unavailable"));
    assert_eq!(rig.cluster.rts[1].bound_session("player:far"), None);
    c.close().await;
    rig.shutdown().await;
}

/// Issue 19 "Bad input and faults": a Location Store outage does not touch relays and pushes on
/// a stored binding route (none reads the store), while a call that must read the store — an
/// ActorRef lookup for a new bind — fails (`StoreFailure`, which a client sees as `Unavailable`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relays_and_pushes_keep_flowing_through_a_store_outage() {
    let rig = Rig::start().await;
    rig.player(1, "player:far").await;
    rig.player(1, "player:other").await;
    let c = rig.client().await;
    let (echo_tx, mut echoes) = tokio::sync::mpsc::unbounded_channel();
    c.on_send(move |e: Echo| {
        let _ = echo_tx.send(e.n);
    });
    bind(&c, "player:far", false).await.unwrap();
    rig.cluster.store().begin_outage();
    for n in 0..200u64 {
        c.send(&Say {
            actor: "player:far".into(),
            n,
            echo: n % 20 == 0,
        })
        .await
        .unwrap();
    }
    let a = ask(&c, "player:far").await.unwrap();
    assert_eq!(a.seen, 200, "every relay arrived during the outage");
    for want in (0..200).step_by(20) {
        let n = tokio::time::timeout(WAIT, echoes.recv())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(n, want);
    }
    // A fresh ActorRef needs the store: refused while it is out, with a typed error.
    let e = bind(&c, "player:other", true).await.unwrap_err();
    assert_eq!(error_kind(&e), "Unavailable", "{e:?}");
    rig.cluster.store().end_outage();
    bind(&c, "player:other", true).await.unwrap();
    c.close().await;
    rig.shutdown().await;
}

/// Send tombstone `t` node-direct from `from` to node lifecycle `owner`.
async fn tombstone(
    from: &zlink::mesh::MeshNode,
    owner: &zlink_protocol::generated::NodeFence,
    t: BindingTombstone,
) -> Result<zlink_protocol::envelope::TypedPayload, CallError> {
    let payload = zlink_protocol::json::encode_json(&t).unwrap();
    from.request_to_lifecycle(owner, payload, WAIT).await
}

/// Issue 19 item 4, the rebind tombstone (**ours**), at the previous Actor owner: it removes
/// the Actor's binding only when the tombstone names exactly that identity — its sender as the
/// session owner, the session, the binding generation and the incarnation — and answers every
/// well-formed one; a malformed one or an unknown framework name is refused typed and changes
/// nothing. The session owner here is a plain MeshNode speaking the wire.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tombstone_removes_only_the_exact_identity_it_names_and_only_its_senders() {
    let rig = Rig::start().await;
    let r = rig.player(1, "player:t").await;
    let store =
        Arc::clone(rig.cluster.store()) as Arc<dyn zlink::mesh::discovery::DiscoveryBackend>;
    let gateway = zlink::mesh::MeshNode::start(
        common::config("m", "gateway-x"),
        zlink::mesh::Handlers::new(),
        Some(store),
    )
    .await
    .unwrap();
    let owner = rig.cluster.nodes[1].fence();
    gateway.wait_ready(&owner.rid, WAIT).await.unwrap();
    let session = zlink_protocol::generated::SessionRef {
        owner_node: gateway.fence(),
        session_id: 5,
        binding_generation: 1,
    };
    gateway
        .session_bind(&session, r.route(), WAIT)
        .await
        .unwrap();
    let bound = |rt: &ObjectRuntime<MemoryStore>| rt.bound_session("player:t");
    assert_eq!(bound(&rig.cluster.rts[1]), Some(session.clone()));
    let exact = BindingTombstone {
        actor_id: "player:t".into(),
        object_generation: r.object_generation(),
        session_id: 5,
        binding_generation: 1,
    };
    let ask = |from, t| tombstone(from, &owner, t);
    let removed = |answer: Result<zlink_protocol::envelope::TypedPayload, CallError>| {
        zlink::mesh::handler::decode_json::<BindingTombstoneAck>(&answer.unwrap())
            .unwrap()
            .removed
    };
    // Another binding generation, another incarnation, another session: nothing removed.
    for (case, t) in [
        (
            "binding generation",
            BindingTombstone {
                binding_generation: 2,
                ..exact.clone()
            },
        ),
        (
            "incarnation",
            BindingTombstone {
                object_generation: exact.object_generation + 1,
                ..exact.clone()
            },
        ),
        (
            "session",
            BindingTombstone {
                session_id: 6,
                ..exact.clone()
            },
        ),
    ] {
        assert!(!removed(ask(&gateway, t).await), "{case}");
        assert_eq!(bound(&rig.cluster.rts[1]), Some(session.clone()), "{case}");
    }
    // The exact identity, sent by another node: it names that node's session, not this one.
    assert!(!removed(ask(&rig.cluster.nodes[0], exact.clone()).await));
    assert_eq!(bound(&rig.cluster.rts[1]), Some(session.clone()));
    // Malformed and unknown framework requests: refused typed, nothing changed.
    let bad = zlink_protocol::envelope::TypedPayload::new(
        BindingTombstone::PACKET_NAME,
        "application/json",
        bytes::Bytes::from_static(b"{not json"),
    );
    let e = gateway
        .request_to_lifecycle(&owner, bad, WAIT)
        .await
        .unwrap_err();
    assert_eq!(
        e.kind(),
        zlink::call::error::ErrorKind::InvalidOperation,
        "{e}"
    );
    let unknown = zlink_protocol::json::encode_json(&exact).map(|mut p| {
        p.packet_name = "zlink.session.Nope".into();
        p
    });
    let e = gateway
        .request_to_lifecycle(&owner, unknown.unwrap(), WAIT)
        .await
        .unwrap_err();
    assert_eq!(e.kind(), zlink::call::error::ErrorKind::NotFound, "{e}");
    assert_eq!(bound(&rig.cluster.rts[1]), Some(session.clone()));
    // The exact identity from its session owner: removed; the Actor is unbound.
    assert!(removed(ask(&gateway, exact.clone()).await));
    assert_eq!(bound(&rig.cluster.rts[1]), None);
    let pushed: Pushed = rig.cluster.rts[1]
        .request_to_actor("player:t", &PushNow { n: 1 }, WAIT)
        .await
        .unwrap();
    assert_eq!(pushed.error.as_deref(), Some("InvalidOperation"));
    // A repeat is answered and changes nothing.
    assert!(!removed(ask(&gateway, exact).await));
    let stats = rig.cluster.rts[1].session_stats();
    let count = |c: &std::sync::atomic::AtomicU64| c.load(Ordering::Relaxed);
    assert_eq!(
        (
            count(&stats.tombstones_applied),
            count(&stats.tombstones_ignored),
            count(&stats.tombstones_refused)
        ),
        (1, 5, 1)
    );
    gateway.shutdown().await;
    rig.shutdown().await;
}
