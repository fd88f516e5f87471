//! Session relocation against a real gateway, driven by a scripted coordinator (issue 19 item 6,
//! acceptance 5; wire §9 "Session seal과 source relay", §10 "Session route"; routing §3.3).
//!
//! The gateway is a real MeshNode with its object runtime and a StreamNode; a real Stream
//! Connector client talks to it. The "Actor owners" are two scripted MeshNodes: real nodes of
//! the mesh whose object sink is this file's [`Script`] instead of an object runtime. A script
//! accepts binds (38 → tag 6), records every relay it receives (24/25 with the bound-session
//! tail), answers requests, and sends 42 and 44 by hand — the steps a relocation coordinator
//! and its target take (routing §3.3 steps 1 and 7), without a relocation.
#![allow(clippy::unwrap_used)] // In tests a panic is the failure report.

mod common;
#[path = "common/sessions.rs"]
mod session_rig;

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use common::cluster::Cluster;
use common::eventually;
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;
use zlink::call::error::{CallError, ErrorKind};
use zlink::mesh::discovery::DiscoveryBackend;
use zlink::mesh::{Handlers, JsonMessage, MeshNode, ObjectCommand, ObjectSink};
use zlink::object::ActorRef;
use zlink::object::registry::{FactoryInput, Registry};
use zlink::object::runtime::{BindingTombstone, BindingTombstoneAck, Disconnected, ObjectRuntime};
use zlink::session::{SessionHandlers, StreamNode};
use zlink_connector::{Connector, ConnectorEvent};
use zlink_protocol::envelope::TypedPayload;
use zlink_protocol::generated::{
    CommandBody, NodeFence, ObjectKind, ReplyResult, ReplyResultBoundSessionBind, RouteFence,
    SealOutcome, SessionRef, SessionRelocationRoute, SessionRelocationSeal,
    SessionRelocationSealed, SessionRouteAction,
};
use zlink_store::MemoryStore;

const WAIT: Duration = Duration::from_secs(10);
const SEAL_TIMEOUT: Duration = Duration::from_millis(400);

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Say {
    actor: String,
    n: u64,
}
impl JsonMessage for Say {
    const PACKET_NAME: &'static str = "t.Say";
}

/// A request relayed to `actor`; the script answers with its `n`.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Ask {
    actor: String,
    n: u64,
}
impl JsonMessage for Ask {
    const PACKET_NAME: &'static str = "t.Ask";
}

/// As [`Ask`], but the session's handler does not wait for the answer.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct AskNoWait {
    actor: String,
    n: u64,
}
impl JsonMessage for AskNoWait {
    const PACKET_NAME: &'static str = "t.AskNoWait";
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Bind {
    slot: String,
}
impl JsonMessage for Bind {
    const PACKET_NAME: &'static str = "t.Bind";
}

/// As [`Bind`], without waiting for the bind's terminal.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct BindInBackground {
    slot: String,
}
impl JsonMessage for BindInBackground {
    const PACKET_NAME: &'static str = "t.BindInBackground";
}

/// One relay a script received.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Arrival {
    actor: String,
    n: u64,
    request: bool,
    session: SessionRef,
}

/// A scripted Actor owner (see the module docs).
#[derive(Default)]
struct Script {
    mesh: OnceLock<Weak<MeshNode>>,
    binds: Mutex<Vec<SessionRef>>,
    arrivals: Mutex<Vec<Arrival>>,
    /// `zlink.session.Disconnected` notices: (Actor, reason).
    notices: Mutex<Vec<(String, String)>>,
    sealed: Mutex<Option<mpsc::UnboundedSender<SessionRelocationSealed>>>,
    /// Binds are recorded but answered only by [`Script::answer_held_binds`].
    hold_binds: Mutex<bool>,
    held_binds: Mutex<
        Vec<(
            Arc<NodeFence>,
            zlink_protocol::generated::RequestHeader,
            SessionRef,
        )>,
    >,
    /// Rebind tombstones this script received: (sender, tombstone).
    tombstones: Mutex<Vec<(NodeFence, BindingTombstone)>>,
    /// How this script answers a tombstone.
    tombstone_answer: Mutex<TombstoneAnswer>,
    /// A tombstone held by [`TombstoneAnswer::Hold`], answered by [`Script::ack_held_tombstone`].
    held_tombstone: Mutex<Option<(Arc<NodeFence>, zlink_protocol::generated::RequestHeader)>>,
    /// A request numbered [`PARKED`] is answered only by [`Script::answer_parked`].
    parked: Mutex<
        Option<(
            Arc<NodeFence>,
            zlink_protocol::generated::RequestHeader,
            TypedPayload,
        )>,
    >,
}

/// How a script answers a rebind tombstone.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
enum TombstoneAnswer {
    /// Acknowledge at once.
    #[default]
    Ack,
    /// Keep it until [`Script::ack_held_tombstone`].
    Hold,
    /// Answer with an error.
    Refuse,
}

/// The request number a script parks.
const PARKED: u64 = 777;

fn n_of(p: &TypedPayload) -> u64 {
    let v: serde_json::Value = serde_json::from_slice(&p.payload).unwrap();
    v["n"].as_u64().unwrap()
}

impl ObjectSink for Script {
    fn take(&self, source: Arc<NodeFence>, command: ObjectCommand) {
        let Some(mesh) = self.mesh.get().and_then(Weak::upgrade) else {
            return;
        };
        match command {
            ObjectCommand::BoundSessionBind(b) => {
                self.binds.lock().unwrap().push(b.session.clone());
                if *self.hold_binds.lock().unwrap() {
                    self.held_binds
                        .lock()
                        .unwrap()
                        .push((source, b.request, b.session));
                    return;
                }
                let tag = ReplyResult::BoundSessionBind(ReplyResultBoundSessionBind {
                    binding_generation: b.session.binding_generation,
                });
                mesh.reply_create(&source, &b.request, Ok(tag));
            }
            ObjectCommand::ActorSend(b, p)
                if &*p.payload.packet_name == Disconnected::PACKET_NAME =>
            {
                let d: Disconnected = serde_json::from_slice(&p.payload.payload).unwrap();
                self.notices
                    .lock()
                    .unwrap()
                    .push((b.route.object_id, d.reason));
            }
            ObjectCommand::ActorSend(b, p) => {
                self.arrivals.lock().unwrap().push(Arrival {
                    actor: b.route.object_id,
                    n: n_of(&p.payload),
                    request: false,
                    session: p.bound_session.unwrap(),
                });
            }
            ObjectCommand::ActorRequest(b, p) => {
                let n = n_of(&p.payload);
                self.arrivals.lock().unwrap().push(Arrival {
                    actor: b.route.object_id,
                    n,
                    request: true,
                    session: p.bound_session.unwrap(),
                });
                if n == PARKED {
                    *self.parked.lock().unwrap() = Some((source, b.request, p.payload));
                } else {
                    mesh.reply_to(&source, &b.request, Ok(p.payload));
                }
            }
            ObjectCommand::SessionRelocationSealed(s) => {
                if let Some(tx) = &*self.sealed.lock().unwrap() {
                    let _ = tx.send(s);
                }
            }
            ObjectCommand::FrameworkRequest(r, p) => {
                assert_eq!(&*p.payload.packet_name, BindingTombstone::PACKET_NAME);
                let t: BindingTombstone = serde_json::from_slice(&p.payload.payload).unwrap();
                self.tombstones.lock().unwrap().push(((*source).clone(), t));
                match *self.tombstone_answer.lock().unwrap() {
                    TombstoneAnswer::Ack => mesh.reply_to(&source, &r.request, Ok(tombstone_ack())),
                    TombstoneAnswer::Hold => {
                        *self.held_tombstone.lock().unwrap() = Some((source, r.request));
                    }
                    TombstoneAnswer::Refuse => mesh.reply_to(
                        &source,
                        &r.request,
                        Err(CallError::new(ErrorKind::Unavailable, "the script refuses")),
                    ),
                }
            }
            other => panic!("the script got {}", other.name()),
        }
    }
}

fn tombstone_ack() -> TypedPayload {
    zlink_protocol::json::encode_json(&BindingTombstoneAck { removed: true }).unwrap()
}

impl Script {
    fn answer_held_binds(&self) {
        let mesh = self.mesh.get().and_then(Weak::upgrade).unwrap();
        for (source, request, session) in self.held_binds.lock().unwrap().drain(..) {
            let tag = ReplyResult::BoundSessionBind(ReplyResultBoundSessionBind {
                binding_generation: session.binding_generation,
            });
            mesh.reply_create(&source, &request, Ok(tag));
        }
    }

    fn ack_held_tombstone(&self) {
        let (source, request) = self.held_tombstone.lock().unwrap().take().unwrap();
        let mesh = self.mesh.get().and_then(Weak::upgrade).unwrap();
        mesh.reply_to(&source, &request, Ok(tombstone_ack()));
    }

    fn answer_parked(&self) {
        let (source, request, payload) = self.parked.lock().unwrap().take().unwrap();
        let mesh = self.mesh.get().and_then(Weak::upgrade).unwrap();
        mesh.reply_to(&source, &request, Ok(payload));
    }

    fn arrivals_of(&self, actor: &str) -> Vec<(u64, bool)> {
        self.arrivals
            .lock()
            .unwrap()
            .iter()
            .filter(|a| a.actor == actor)
            .map(|a| (a.n, a.request))
            .collect()
    }
}

type Refs = Arc<Mutex<HashMap<String, ActorRef>>>;

fn session_handlers(refs: Refs) -> SessionHandlers {
    let mut h = SessionHandlers::new();
    let bg_refs = Arc::clone(&refs);
    h.on_request(Bind::PACKET_NAME, move |ctx, packet, reply| {
        let refs = Arc::clone(&refs);
        async move {
            let b: Bind = serde_json::from_slice(&packet.payload).unwrap();
            let r = refs.lock().unwrap()[&b.slot].clone();
            match ctx.bind(&r).await {
                Ok(route) => reply.json(&route.binding_generation),
                Err(e) => reply.call_error(&e),
            }
        }
    })
    .unwrap();
    // Starts a bind and answers at once: the bind goes on beside the session's next packets.
    h.on_request(BindInBackground::PACKET_NAME, move |ctx, packet, reply| {
        let refs = Arc::clone(&bg_refs);
        async move {
            let b: BindInBackground = serde_json::from_slice(&packet.payload).unwrap();
            let r = refs.lock().unwrap()[&b.slot].clone();
            tokio::spawn(async move {
                let _ = ctx.bind(&r).await;
            });
            reply.json(&0u64);
        }
    })
    .unwrap();
    h.on_send(Say::PACKET_NAME, |ctx, packet| async move {
        let s: Say = serde_json::from_slice(&packet.payload).unwrap();
        ctx.relay(&s.actor, &packet).await.unwrap();
    })
    .unwrap();
    // Relays a request without holding the session's handler: the relay is submitted (held,
    // if sealed) by one poll here, in order, and awaited on a task of its own.
    h.on_request(AskNoWait::PACKET_NAME, |ctx, packet, reply| async move {
        let a: AskNoWait = serde_json::from_slice(&packet.payload).unwrap();
        let mut answer = Box::pin(async move { ctx.relay_request(&a.actor, &packet, WAIT).await });
        if let Some(r) = futures::FutureExt::now_or_never(answer.as_mut()) {
            return reply.answer(r);
        }
        tokio::spawn(async move { reply.answer(answer.await) });
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

/// The gateway (a one-node cluster: runtime + StreamNode) and two scripts (plain MeshNodes on
/// the same store whose object sink is a [`Script`]).
struct Rig {
    cluster: Cluster,
    script_nodes: [Arc<MeshNode>; 2],
    gateway: ObjectRuntime<MemoryStore>,
    stream: StreamNode,
    scripts: [Arc<Script>; 2],
    refs: Refs,
    sealed: mpsc::UnboundedReceiver<SessionRelocationSealed>,
}

impl Rig {
    async fn start() -> Self {
        let cluster = Cluster::builder(1)
            .registry(|_| {
                let mut r = Registry::new();
                r.actor(
                    "unused",
                    |_: FactoryInput| async { Ok(()) },
                    zlink::object::exec::ObjectHandlers::new,
                )
                .register();
                r
            })
            .start()
            .await;
        let gateway = cluster.rts[0].clone();
        gateway.set_session_seal_timeout(SEAL_TIMEOUT);
        let (tx, sealed) = mpsc::unbounded_channel();
        let scripts = [Arc::new(Script::default()), Arc::new(Script::default())];
        let mut script_nodes = Vec::new();
        for (i, s) in scripts.iter().enumerate() {
            let store = Arc::clone(cluster.store()) as Arc<dyn DiscoveryBackend>;
            let cfg = common::config("m", &format!("script-{i}"));
            let node = Arc::new(
                MeshNode::start(cfg, Handlers::new(), Some(store))
                    .await
                    .unwrap(),
            );
            s.mesh.set(Arc::downgrade(&node)).ok();
            *s.sealed.lock().unwrap() = Some(tx.clone());
            node.set_object_sink(Arc::clone(s) as Arc<dyn ObjectSink>)
                .unwrap();
            node.wait_ready(cluster.nodes[0].rid(), WAIT).await.unwrap();
            cluster.nodes[0].wait_ready(node.rid(), WAIT).await.unwrap();
            script_nodes.push(node);
        }
        let script_nodes: [Arc<MeshNode>; 2] = script_nodes.try_into().ok().unwrap();
        let refs: Refs = Arc::default();
        let stream = session_rig::routed_stream_node(
            session_handlers(Arc::clone(&refs)),
            gateway.session_router(),
        )
        .await;
        Self {
            cluster,
            script_nodes,
            gateway,
            stream,
            scripts,
            refs,
            sealed,
        }
    }

    /// The route of a scripted Actor `id` on script `s` (a script checks no fence but its
    /// node's; the owner and lease generations only have to be well-formed).
    fn route(&self, s: usize, id: &str) -> RouteFence {
        RouteFence {
            object_kind: ObjectKind::Actor,
            object_id: id.into(),
            object_generation: 1,
            target_node: self.script_nodes[s].fence(),
            authority_owner_generation: 1 + s as u64,
            owner_lease_generation: 1,
        }
    }

    async fn client(&self) -> Connector {
        session_rig::client(&self.stream).await
    }

    /// Bind `c` to scripted Actor `id` on script 0; the SessionRef the script recorded.
    async fn bind(&self, c: &Connector, id: &str) -> SessionRef {
        self.bind_on(0, c, id).await
    }

    /// Bind `c` to scripted Actor `id` on script `s`; the SessionRef the script recorded.
    async fn bind_on(&self, s: usize, c: &Connector, id: &str) -> SessionRef {
        let r = ActorRef::new(
            self.route(s, id),
            self.script_nodes[s].descriptor().mesh_name,
        )
        .unwrap();
        self.refs.lock().unwrap().insert(id.into(), r);
        let g: u64 = c
            .request(&Bind { slot: id.into() })
            .timeout(WAIT)
            .await
            .unwrap()
            .json()
            .unwrap();
        let binds = self.scripts[s].binds.lock().unwrap();
        let s = binds.last().unwrap().clone();
        assert_eq!(s.binding_generation, g);
        s
    }

    /// Script `from` sends 42 for (`session`, `actor`) and returns the 43 outcome.
    async fn seal(
        &mut self,
        from: usize,
        r: [u8; 16],
        session: &SessionRef,
        actor: &str,
    ) -> SealOutcome {
        let body = CommandBody::SessionRelocationSeal(SessionRelocationSeal {
            relocation_id: r,
            session: session.clone(),
            actor_id: actor.into(),
            object_generation: 1,
        });
        self.script_nodes[from]
            .session_control(&self.cluster.nodes[0].fence(), body)
            .unwrap();
        let answer = tokio::time::timeout(WAIT, self.sealed.recv())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            (
                answer.relocation_id,
                answer.session_id,
                answer.binding_generation
            ),
            (r, session.session_id, session.binding_generation)
        );
        answer.outcome
    }

    /// Script `from` sends 44 (`route` to script `to`'s route when `to` is `Some`, else abort).
    fn route_update(
        &self,
        from: usize,
        r: [u8; 16],
        session: &SessionRef,
        actor: &str,
        to: Option<usize>,
    ) {
        let body = CommandBody::SessionRelocationRoute(SessionRelocationRoute {
            relocation_id: r,
            session: session.clone(),
            actor_id: actor.into(),
            object_generation: 1,
            action: if to.is_some() {
                SessionRouteAction::Route
            } else {
                SessionRouteAction::Abort
            },
            target_route: to.map(|t| self.route(t, actor)),
        });
        self.script_nodes[from]
            .session_control(&self.cluster.nodes[0].fence(), body)
            .unwrap();
    }

    fn stat(
        &self,
        f: impl Fn(&zlink::object::runtime::SessionStats) -> &std::sync::atomic::AtomicU64,
    ) -> u64 {
        f(self.gateway.session_stats()).load(Ordering::Relaxed)
    }

    async fn shutdown(self) {
        self.stream.shutdown().await;
        for n in &self.script_nodes {
            n.shutdown().await;
        }
        self.cluster.shutdown().await;
    }
}

async fn say(c: &Connector, actor: &str, n: u64) {
    c.send(&Say {
        actor: actor.into(),
        n,
    })
    .await
    .unwrap();
}

async fn ask(c: &Connector, actor: &str, n: u64) -> u64 {
    let r = c
        .request(&Ask {
            actor: actor.into(),
            n,
        })
        .timeout(WAIT)
        .await
        .unwrap();
    r.json::<Ask>().unwrap().n
}

const R1: [u8; 16] = [1; 16];
const R2: [u8; 16] = [2; 16];
const R3: [u8; 16] = [3; 16];

/// Acceptance 5: sealed relays are held in order while another Actor of the session keeps
/// flowing; 44 `route` sends them to the target in order and the route stays there; a second
/// seal and 44 `abort` send them to the source.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_relays_reach_the_target_in_order_and_an_abort_sends_them_to_the_source() {
    let mut rig = Rig::start().await;
    let c = rig.client().await;
    let x = rig.bind(&c, "player:x").await;
    rig.bind(&c, "player:y").await;
    assert_eq!(rig.seal(0, R1, &x, "player:x").await, SealOutcome::Sealed);
    assert_eq!(
        rig.seal(0, R1, &x, "player:x").await,
        SealOutcome::Sealed,
        "idempotent per relocation"
    );
    for n in 1..=10 {
        say(&c, "player:x", n).await;
        say(&c, "player:y", n).await;
    }
    // The other binding keeps flowing while X is sealed: a request to Y comes back.
    assert_eq!(ask(&c, "player:y", 11).await, 11);
    assert_eq!(
        rig.scripts[0].arrivals_of("player:x"),
        vec![],
        "held at the gateway"
    );
    let y: Vec<(u64, bool)> = (1..=10).map(|n| (n, false)).chain([(11, true)]).collect();
    assert_eq!(rig.scripts[0].arrivals_of("player:y"), y);
    // A request to X waits in the seal too, behind the sends.
    let asked = {
        let c2 = &c;
        async move { ask(c2, "player:x", 11).await }
    };
    let (answer, ()) = tokio::join!(asked, async {
        eventually("the request held", || rig.stat(|s| &s.relays_held) == 11).await;
        rig.route_update(1, R1, &x, "player:x", Some(1));
    });
    assert_eq!(answer, 11);
    let held: Vec<(u64, bool)> = (1..=10).map(|n| (n, false)).chain([(11, true)]).collect();
    assert_eq!(
        rig.scripts[1].arrivals_of("player:x"),
        held,
        "in order, at the target"
    );
    assert_eq!(rig.scripts[0].arrivals_of("player:x"), vec![]);
    // The route is the target's now.
    say(&c, "player:x", 12).await;
    assert_eq!(ask(&c, "player:x", 13).await, 13);
    assert_eq!(
        rig.scripts[1].arrivals_of("player:x")[11..],
        [(12, false), (13, true)]
    );
    // A second relocation from the new owner, aborted: held relays go to the source (script 1).
    assert_eq!(rig.seal(1, R2, &x, "player:x").await, SealOutcome::Sealed);
    for n in 14..=20 {
        say(&c, "player:x", n).await;
    }
    eventually("seven held", || rig.stat(|s| &s.relays_held) == 18).await;
    rig.route_update(1, R2, &x, "player:x", None);
    assert_eq!(ask(&c, "player:x", 21).await, 21);
    let tail: Vec<(u64, bool)> = (14..=20).map(|n| (n, false)).chain([(21, true)]).collect();
    assert_eq!(rig.scripts[1].arrivals_of("player:x")[13..], tail[..]);
    // Late and duplicate 44s change nothing and are counted.
    let ignored = rig.stat(|s| &s.routes_ignored);
    rig.route_update(1, R1, &x, "player:x", Some(0));
    rig.route_update(1, R2, &x, "player:x", Some(0));
    eventually("two ignored", || {
        rig.stat(|s| &s.routes_ignored) == ignored + 2
    })
    .await;
    assert_eq!(ask(&c, "player:x", 22).await, 22);
    assert_eq!(
        rig.scripts[1].arrivals_of("player:x").last(),
        Some(&(22, true))
    );
    assert_eq!(rig.scripts[0].arrivals_of("player:x"), vec![]);
    c.close().await;
    rig.shutdown().await;
}

/// Acceptance 5: a seal with no 44 closes exactly that session at the timeout (its other
/// binding and another session are untouched); a late 44 afterwards is only counted; a 42
/// for an unknown session or another binding generation is answered so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_seal_without_a_route_update_closes_exactly_that_session_at_the_timeout() {
    let mut rig = Rig::start().await;
    let a = rig.client().await;
    let (events_tx, mut events) = mpsc::unbounded_channel();
    a.on_event(move |e: &ConnectorEvent| {
        let _ = events_tx.send(format!("{e:?}"));
    });
    let ax = rig.bind(&a, "player:x").await;
    let b = rig.client().await;
    let bz = rig.bind(&b, "player:z").await;
    // Wrong identity first: another binding generation, an unknown session.
    let mut stale = ax.clone();
    stale.binding_generation += 100;
    assert_eq!(
        rig.seal(0, R1, &stale, "player:x").await,
        SealOutcome::NotCurrent
    );
    let mut unknown = ax.clone();
    unknown.session_id += 100;
    assert_eq!(
        rig.seal(0, R1, &unknown, "player:x").await,
        SealOutcome::SessionClosed
    );
    assert_eq!(rig.seal(0, R3, &ax, "player:x").await, SealOutcome::Sealed);
    say(&a, "player:x", 1).await;
    let timeouts = rig.stat(|s| &s.seal_timeouts);
    eventually("the seal timed out", || {
        rig.stat(|s| &s.seal_timeouts) == timeouts + 1
    })
    .await;
    // Session A closed; its held relay was never sent.
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let e = tokio::time::timeout_at(deadline, events.recv())
            .await
            .unwrap()
            .unwrap();
        if e.starts_with("Disconnected") {
            break;
        }
    }
    assert_eq!(rig.scripts[0].arrivals_of("player:x"), vec![]);
    let notice = ("player:x".to_owned(), "SealTimeout".to_owned());
    eventually("the disconnect notice", || {
        rig.scripts[0].notices.lock().unwrap().contains(&notice)
    })
    .await;
    // A late 44 only counts.
    let ignored = rig.stat(|s| &s.routes_ignored);
    rig.route_update(1, R3, &ax, "player:x", Some(1));
    eventually("the late 44 counted", || {
        rig.stat(|s| &s.routes_ignored) == ignored + 1
    })
    .await;
    assert_eq!(rig.scripts[1].arrivals_of("player:x"), vec![]);
    // Session B and its binding are untouched.
    assert_eq!(ask(&b, "player:z", 5).await, 5);
    assert_eq!(rig.scripts[0].arrivals_of("player:z"), vec![(5, true)]);
    assert_eq!(
        bz.session_id,
        rig.scripts[0]
            .arrivals
            .lock()
            .unwrap()
            .last()
            .unwrap()
            .session
            .session_id
    );
    b.close().await;
    a.close().await;
    rig.shutdown().await;
}

/// Wire §3.2 / issue 19 item 4: a `boundSessionReplaced` (51) is applied only when it comes
/// from the Actor owner its fence names and names the session's current binding; anything else
/// is counted and changes nothing. Applied, the session closes `Replaced`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replace_notice_is_applied_only_from_the_fenced_owner_for_the_current_binding() {
    use zlink_protocol::generated::BoundSessionReplaced;
    let rig = Rig::start().await;
    let c = rig.client().await;
    let (events_tx, mut events) = mpsc::unbounded_channel();
    c.on_event(move |e: &ConnectorEvent| {
        let _ = events_tx.send(format!("{e:?}"));
    });
    let x = rig.bind(&c, "player:x").await;
    let notice = |fence_from: usize, session: &SessionRef| {
        CommandBody::BoundSessionReplaced(BoundSessionReplaced {
            actor_fence: rig.route(fence_from, "player:x"),
            previous_session: session.clone(),
        })
    };
    let gateway = rig.cluster.nodes[0].fence();
    let mut older = x.clone();
    older.binding_generation += 1000;
    let cases = [
        // Script 1 sends a fence naming script 0 as the owner: not the fenced owner.
        (1, notice(0, &x)),
        // The fenced owner, but another binding generation than the current one.
        (0, notice(0, &older)),
    ];
    for (from, body) in cases {
        rig.script_nodes[from]
            .session_control(&gateway, body)
            .unwrap();
    }
    eventually("two ignored notices", || {
        rig.stat(|s| &s.replaced_ignored) == 2
    })
    .await;
    assert_eq!(ask(&c, "player:x", 1).await, 1, "the binding is untouched");
    rig.script_nodes[0]
        .session_control(&gateway, notice(0, &x))
        .unwrap();
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let e = tokio::time::timeout_at(deadline, events.recv())
            .await
            .unwrap()
            .unwrap();
        if e.starts_with("Disconnected") {
            break;
        }
    }
    assert_eq!(rig.stat(|s| &s.replaced_applied), 1);
    c.close().await;
    rig.shutdown().await;
}

/// Wire §10 with the release in flight: a new seal installed while an earlier seal's held
/// relays are still going out (the release waits on a request's reply) takes the unsent ones
/// back ahead of what it holds, so nothing is sent after its 43 and the order is kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_seal_installed_during_a_release_takes_back_what_was_not_sent_yet() {
    let mut rig = Rig::start().await;
    let c = rig.client().await;
    let x = rig.bind(&c, "player:x").await;
    assert_eq!(rig.seal(0, R1, &x, "player:x").await, SealOutcome::Sealed);
    say(&c, "player:x", 1).await;
    // The parked request is held, then released, and its reply waits: the release stalls.
    let parked = c
        .request(&AskNoWait {
            actor: "player:x".into(),
            n: PARKED,
        })
        .timeout(WAIT);
    let parked = async { parked.await.unwrap().json::<AskNoWait>().unwrap().n };
    tokio::pin!(parked);
    assert!(futures::FutureExt::now_or_never(parked.as_mut()).is_none());
    eventually("the request held", || rig.stat(|s| &s.relays_held) == 2).await;
    say(&c, "player:x", 2).await;
    say(&c, "player:x", 3).await;
    eventually("four held", || rig.stat(|s| &s.relays_held) == 4).await;
    rig.route_update(0, R1, &x, "player:x", None);
    eventually("the parked request arrived", || {
        rig.scripts[0].arrivals_of("player:x") == [(1, false), (PARKED, true)]
    })
    .await;
    // A second relocation seals now: 2 and 3 have not gone out.
    assert_eq!(rig.seal(0, R2, &x, "player:x").await, SealOutcome::Sealed);
    say(&c, "player:x", 4).await;
    eventually("held again", || rig.stat(|s| &s.relays_held) == 5).await;
    rig.scripts[0].answer_parked();
    assert_eq!(parked.await, PARKED);
    // The second relocation moves X to script 1: what the new seal took back goes there.
    rig.route_update(1, R2, &x, "player:x", Some(1));
    assert_eq!(ask(&c, "player:x", 5).await, 5);
    assert_eq!(
        rig.scripts[1].arrivals_of("player:x"),
        [(2, false), (3, false), (4, false), (5, true)]
    );
    assert_eq!(
        rig.scripts[0].arrivals_of("player:x"),
        [(1, false), (PARKED, true)],
        "nothing reached the old owner after its second 43"
    );
    c.close().await;
    rig.shutdown().await;
}

/// Issue 19 item 4, the rebind tombstone (**ours**): a session that binds an Actor again on
/// another owner tells the previous owner (exactly its lifecycle) to forget the retired
/// binding identity, and the bind's terminal waits for that answer; a rebind on the same owner
/// and incarnation sends none; a previous owner that refuses is counted and the rebind still
/// holds; a previous owner that is gone counts as acknowledged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rebind_to_another_owner_tells_the_previous_owner_before_the_terminal() {
    let rig = Rig::start().await;
    let c = rig.client().await;
    rig.bind(&c, "player:t").await;
    let same = rig.bind(&c, "player:t").await;
    assert!(
        rig.scripts[0].tombstones.lock().unwrap().is_empty(),
        "a rebind on the same owner and incarnation retires nothing there"
    );
    // Rebind on script 1 while script 0 holds its answer.
    *rig.scripts[0].tombstone_answer.lock().unwrap() = TombstoneAnswer::Hold;
    let acked_at: Arc<Mutex<Option<std::time::Instant>>> = Arc::default();
    let (bound, ()) = tokio::join!(
        async {
            let s = rig.bind_on(1, &c, "player:t").await;
            (s, std::time::Instant::now())
        },
        async {
            eventually("the tombstone at the previous owner", || {
                !rig.scripts[0].tombstones.lock().unwrap().is_empty()
            })
            .await;
            // Held a while, so a terminal that did not wait would come first.
            tokio::time::sleep(Duration::from_millis(300)).await;
            *acked_at.lock().unwrap() = Some(std::time::Instant::now());
            rig.scripts[0].ack_held_tombstone();
        }
    );
    let (moved, bound_at) = bound;
    let acked_at = acked_at.lock().unwrap().unwrap();
    assert!(
        bound_at >= acked_at,
        "the rebind's terminal came {:?} before the tombstone's answer",
        acked_at.duration_since(bound_at)
    );
    let (sender, t) = rig.scripts[0].tombstones.lock().unwrap()[0].clone();
    assert_eq!(
        sender,
        rig.cluster.nodes[0].fence(),
        "sent by the session owner"
    );
    assert_eq!(
        t,
        BindingTombstone {
            actor_id: "player:t".into(),
            object_generation: 1,
            session_id: same.session_id,
            binding_generation: same.binding_generation,
        },
        "exactly the retired identity"
    );
    assert!(moved.binding_generation > same.binding_generation);
    // The new route is in use.
    say(&c, "player:t", 1).await;
    assert_eq!(ask(&c, "player:t", 2).await, 2);
    assert_eq!(
        rig.scripts[1].arrivals_of("player:t"),
        [(1, false), (2, true)]
    );
    assert_eq!(
        (
            rig.stat(|s| &s.tombstones_sent),
            rig.stat(|s| &s.tombstones_acked)
        ),
        (1, 1)
    );
    // A previous owner that refuses: counted, and the rebind holds.
    *rig.scripts[1].tombstone_answer.lock().unwrap() = TombstoneAnswer::Refuse;
    rig.bind_on(0, &c, "player:t").await;
    assert_eq!(rig.scripts[1].tombstones.lock().unwrap().len(), 1);
    assert_eq!(rig.stat(|s| &s.tombstones_unacked), 1);
    assert_eq!(ask(&c, "player:t", 3).await, 3);
    assert_eq!(rig.scripts[0].arrivals_of("player:t"), [(3, true)]);
    // A previous owner that is gone: nothing is sent, and that counts as acknowledged.
    rig.bind_on(1, &c, "player:u").await;
    rig.script_nodes[1].shutdown().await;
    let gone = rig.script_nodes[1].fence();
    eventually("script 1 no longer admitted", || {
        !rig.cluster.nodes[0].is_admitted(&gone)
    })
    .await;
    rig.bind_on(0, &c, "player:u").await;
    assert_eq!(rig.stat(|s| &s.tombstones_owner_gone), 1);
    assert_eq!(rig.stat(|s| &s.tombstones_sent), 3);
    assert_eq!(ask(&c, "player:u", 4).await, 4);
    c.close().await;
    rig.shutdown().await;
}

/// Issue 19 item 4 (**ours**): a bind that a later bind of the same Actor overtook is
/// refused `Conflict` at the session owner, and its owner — which recorded that identity — gets
/// a tombstone for it, so no Actor stays bound to a route its session never uses.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_overtaken_bind_is_retired_at_its_owner() {
    let rig = Rig::start().await;
    let c = rig.client().await;
    // The first bind, to script 0, waits there for its answer.
    *rig.scripts[0].hold_binds.lock().unwrap() = true;
    let r = ActorRef::new(
        rig.route(0, "player:o"),
        rig.script_nodes[0].descriptor().mesh_name,
    )
    .unwrap();
    rig.refs.lock().unwrap().insert("player:o".into(), r);
    let _: u64 = c
        .request(&BindInBackground {
            slot: "player:o".into(),
        })
        .timeout(WAIT)
        .await
        .unwrap()
        .json()
        .unwrap();
    eventually("the first bind at script 0", || {
        !rig.scripts[0].held_binds.lock().unwrap().is_empty()
    })
    .await;
    let first = rig.scripts[0].binds.lock().unwrap()[0].clone();
    // A later bind of the same Actor, to script 1, completes first.
    let later = rig.bind_on(1, &c, "player:o").await;
    assert!(later.binding_generation > first.binding_generation);
    rig.scripts[0].answer_held_binds();
    eventually("the overtaken identity retired at script 0", || {
        !rig.scripts[0].tombstones.lock().unwrap().is_empty()
    })
    .await;
    let (sender, t) = rig.scripts[0].tombstones.lock().unwrap()[0].clone();
    assert_eq!(sender, rig.cluster.nodes[0].fence());
    assert_eq!(
        (t.actor_id.as_str(), t.session_id, t.binding_generation),
        ("player:o", first.session_id, first.binding_generation)
    );
    assert!(rig.scripts[1].tombstones.lock().unwrap().is_empty());
    // The later binding is the one in use.
    assert_eq!(ask(&c, "player:o", 1).await, 1);
    assert_eq!(rig.scripts[1].arrivals_of("player:o"), [(1, true)]);
    assert_eq!(rig.scripts[0].arrivals_of("player:o"), vec![]);
    c.close().await;
    rig.shutdown().await;
}

/// Issue 19 item 4 (**ours**): a bind whose owner answers after the bind timed out ends
/// `DeadlineExceeded`, and that owner — which may take the 38 late — gets a tombstone behind
/// it for the identity, so it does not keep an Actor bound to a route the session never uses.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bind_that_timed_out_is_retired_at_its_owner() {
    let rig = Rig::start().await;
    rig.gateway.set_bind_timeout(Duration::from_millis(300));
    let c = rig.client().await;
    *rig.scripts[0].hold_binds.lock().unwrap() = true;
    let r = ActorRef::new(
        rig.route(0, "player:late"),
        rig.script_nodes[0].descriptor().mesh_name,
    )
    .unwrap();
    rig.refs.lock().unwrap().insert("player:late".into(), r);
    let e = c
        .request(&Bind {
            slot: "player:late".into(),
        })
        .timeout(WAIT)
        .await
        .unwrap_err();
    assert!(format!("{e:?}").contains("DeadlineExceeded"), "{e:?}");
    let held = rig.scripts[0].binds.lock().unwrap()[0].clone();
    eventually("the timed-out identity retired at script 0", || {
        !rig.scripts[0].tombstones.lock().unwrap().is_empty()
    })
    .await;
    let (_, t) = rig.scripts[0].tombstones.lock().unwrap()[0].clone();
    assert_eq!(
        (t.actor_id.as_str(), t.session_id, t.binding_generation),
        ("player:late", held.session_id, held.binding_generation)
    );
    // The late answer changes nothing at the session: it has no route for the Actor.
    rig.scripts[0].answer_held_binds();
    let e = c
        .request(&Ask {
            actor: "player:late".into(),
            n: 1,
        })
        .timeout(WAIT)
        .await
        .unwrap_err();
    assert!(
        format!("{e:?}").contains("InvalidOperation"),
        "not bound: {e:?}"
    );
    c.close().await;
    rig.shutdown().await;
}
