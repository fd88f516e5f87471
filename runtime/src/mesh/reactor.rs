//! The node reactor: the single task that owns connection state transitions — greeting and
//! admission (wire §4), liveness (wire §5), sequence and generation fences, credit, terminal
//! replies, discovery reconciliation and descriptor updates. It never awaits application work.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::{mpsc, oneshot};
use zlink_protocol::envelope::TypedPayload;
use zlink_protocol::generated::{
    Admit, ChannelRole, CommandBody, Hello, LivenessAck, LivenessProbe, NodeDescriptor, NodeFence,
    Reject, RejectReason, SourceRule, Topology, Update,
};
use zlink_protocol::record::{Leg as WireLeg, Record, WireContext};
use zlink_store::types::LeaseRead;

use super::auth::random_bytes;
use super::config::{CAPABILITY, ManualPeer};
use super::connection::{Connection, Leg};
use super::discovery::{DesiredPeer, Disposition, connection_not_required, desired_peers};
use super::dispatch::DispatchItem;
use super::liveness::{Liveness, LivenessAction};
use super::node::{Inner, new_connection_generation};
use super::object_command::{ObjectCommand, ObjectPayload};
use super::peer::{HelloState, Intent, IntentKind, PeerEntry, PeerState};
use crate::call::error::CallError;
use crate::call::pending::{Delivered, PeerRef, ReplyFields};
use crate::transport::header::{Header, Stamp, for_each_message_parts};
use crate::transport::pump::{Inbound, MonitorKind, PumpEvent};

/// Receive chunk limit announced in `admit` (glossary §5 RelocationPayloadChunkLimit).
const RECEIVE_CHUNK_LIMIT: u32 = 256 * 1024;
/// Greeting nonces remembered at once (bounded: a flood of probes cannot grow memory).
const MAX_GREETED: usize = 4096;

/// Commands to the reactor.
pub(crate) enum Cmd {
    AddManual(ManualPeer),
    RemoveIntent(String),
    Discovered(Vec<DesiredPeer>),
    AdmissionChecked {
        zmq_id: Bytes,
        attempt: u64,
        hello: Box<Hello>,
        acceptor_nonce: [u8; 32],
        verdict: Result<(), (RejectReason, String)>,
    },
    Broadcast(Update),
    ReHello(String),
    Shutdown(oneshot::Sender<()>),
}

struct Reactor {
    inner: Arc<Inner>,
    /// Acceptor challenge nonces per routing identity, oldest first.
    greeted: HashMap<Bytes, [u8; 32]>,
    greeted_order: VecDeque<Bytes>,
    /// Endpoint-only manual intents not yet matched to a RID.
    endpoint_intents: Vec<String>,
    /// Hellos whose store check is running.
    /// Hellos whose store check is running: the attempt number of the newest per identity
    /// (an older check's result is discarded).
    checking: HashMap<Bytes, u64>,
    next_attempt: u64,
    /// The connection of the last record received (see [`Reactor::current_conn`]).
    last_conn: Option<Arc<Connection>>,
}

fn inc(counter: &std::sync::atomic::AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

fn rid_of(zmq_id: &Bytes) -> Option<String> {
    std::str::from_utf8(zmq_id).ok().map(str::to_owned)
}

fn leg_of(h: &Header) -> Option<(Stamp, WireLeg, Leg)> {
    match h {
        Header::Send(s) => Some((*s, WireLeg::Send, Leg::Send)),
        Header::Request(s) => Some((*s, WireLeg::Request, Leg::Request)),
        Header::Reply(s) => Some((*s, WireLeg::Reply, Leg::Reply)),
        Header::Credit { .. }
        | Header::Greeting { .. }
        | Header::Reset { .. }
        | Header::Batch { .. } => None,
    }
}

fn encode(record: &Record, leg: WireLeg) -> Option<Vec<Vec<u8>>> {
    record.encode(WireContext::route_mesh(leg)).ok()
}

pub(crate) async fn run(
    inner: Arc<Inner>,
    mut pump_rx: Inbound,
    mut cmd_rx: mpsc::UnboundedReceiver<Cmd>,
    _ctx: zmq::Context,
) {
    let t = &inner.config.timings;
    let tick_ms = (t.probe_interval.min(t.liveness_deadline).as_millis() as u64 / 10).clamp(1, 500);
    let mut ticker = tokio::time::interval(Duration::from_millis(tick_ms));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut r = Reactor {
        inner,
        greeted: HashMap::new(),
        greeted_order: VecDeque::new(),
        endpoint_intents: Vec::new(),
        checking: HashMap::new(),
        next_attempt: 0,
        last_conn: None,
    };
    loop {
        while r.inner.faults.frozen.load(Ordering::Acquire) {
            let changed = r.inner.faults.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if !r.inner.faults.frozen.load(Ordering::Acquire) {
                break;
            }
            changed.await;
        }
        // A freeze takes effect at once: its notification ends the wait below too.
        let fault_changed = r.inner.faults.changed.notified();
        tokio::select! {
            () = fault_changed => {}
            batch = pump_rx.recv() => match batch {
                Some(events) => for ev in events { r.on_event(ev); },
                None => break,
            },
            cmd = cmd_rx.recv() => match cmd {
                Some(Cmd::Shutdown(done)) => { r.shutdown(); let _ = done.send(()); break; }
                Some(cmd) => r.on_cmd(cmd),
                None => break,
            },
            _ = ticker.tick() => r.on_tick(),
        }
    }
}

impl Reactor {
    fn now(&self) -> u64 {
        self.inner.now_ms()
    }

    // ---- commands --------------------------------------------------------------------

    fn on_cmd(&mut self, cmd: Cmd) {
        match cmd {
            Cmd::AddManual(p) => self.add_manual(p),
            Cmd::RemoveIntent(rid) => self.remove_intent(&rid),
            Cmd::Discovered(list) => self.reconcile(list),
            Cmd::AdmissionChecked {
                zmq_id,
                attempt,
                hello,
                acceptor_nonce,
                verdict,
            } => {
                if self.checking.get(&zmq_id) != Some(&attempt) {
                    // A newer hello (a newer physical connection) superseded this one.
                    return;
                }
                self.checking.remove(&zmq_id);
                match verdict {
                    Ok(()) => self.admit(&zmq_id, &hello, acceptor_nonce),
                    Err((reason, detail)) => self.reject(&zmq_id, reason, detail),
                }
            }
            Cmd::Broadcast(update) => self.broadcast(&update),
            Cmd::ReHello(rid) => self.rehello(&rid),
            Cmd::Shutdown(_) => {}
        }
    }

    fn add_manual(&mut self, p: ManualPeer) {
        match p.expected_rid {
            Some(rid) => {
                let mut peers = self.inner.peers();
                let e = peers
                    .entry(rid.clone())
                    .or_insert_with(|| PeerEntry::new(rid.clone(), None));
                let has_full = e.intent.as_ref().is_some_and(|i| i.expected.is_some());
                if !has_full {
                    e.intent = Some(Intent {
                        kind: IntentKind::Dial {
                            endpoint: p.endpoint,
                        },
                        expected: None,
                        manual: true,
                    });
                }
                drop(peers);
                self.dial_due();
            }
            None => {
                if !self.endpoint_intents.contains(&p.endpoint) {
                    self.inner.pump.connect(p.endpoint.clone());
                    self.endpoint_intents.push(p.endpoint);
                }
            }
        }
    }

    fn remove_intent(&mut self, rid: &str) {
        let removed = self.inner.peers().remove(rid);
        if let Some(mut e) = removed {
            self.drop_connection(&mut e, true, "intent removed");
            // Only an entry that holds the connect tears it down: after a restart on the same
            // address under a new RID, the old entry handed the endpoint over (`reconcile`).
            if e.dialing
                && let Some(ep) = e.dial_endpoint()
            {
                self.disconnect_endpoint(ep.to_owned(), "intent removed");
            }
            if let Some(d) = &e.descriptor {
                self.fail_pending(&d.node);
            }
        }
        self.inner.notify_peers_changed();
    }

    fn reconcile(&mut self, list: Vec<DesiredPeer>) {
        let wanted: HashMap<String, DesiredPeer> = list
            .into_iter()
            .map(|p| (p.descriptor.node.rid.to_string(), p))
            .collect();
        // Discovered intents whose descriptor is gone are removed (terminal).
        let gone: Vec<String> = self
            .inner
            .peers()
            .values()
            .filter(|e| {
                e.intent.as_ref().is_some_and(|i| !i.manual) && !wanted.contains_key(&e.rid)
            })
            .map(|e| e.rid.clone())
            .collect();
        for rid in gone {
            self.remove_intent(&rid);
        }
        let mut restarted = Vec::new();
        let now = self.now();
        let close_grace = (self.inner.config.timings.probe_interval.as_millis() as u64).max(200);
        {
            let mut peers = self.inner.peers();
            for (rid, p) in wanted {
                let fresh = !peers.contains_key(&rid);
                if fresh && p.disposition == Disposition::Dial {
                    // A new RID at an address another entry dials: a process restarted there
                    // (a container restart with a fixed port) — one address, one listener. The
                    // old entry stops dialing (its descriptor lapses with its lease) and its
                    // connect is torn down: libzmq keys connections by endpoint, and a pipe it
                    // re-established to the new process may have carried that process's
                    // greeting before this node knew the RID. The new entry dials afresh once
                    // the close is observed.
                    let ep = p.descriptor.endpoint.as_str();
                    let mut took_over = false;
                    for o in peers.values_mut() {
                        if o.dial_endpoint() == Some(ep) {
                            if o.conn.is_some() {
                                o.lost_at.get_or_insert(now);
                            }
                            if let Some(c) = o.conn.take() {
                                c.close();
                            }
                            o.state = PeerState::NotConnected;
                            o.hello = None;
                            o.liveness = None;
                            took_over |= o.dialing;
                            o.dialing = false;
                            o.redial_at = Some(u64::MAX);
                            tracing::info!(old = %o.rid, new = %rid, endpoint = ep, "a new RID took over the endpoint (a restart on the same address): the old one is not dialed again");
                        }
                    }
                    if took_over {
                        self.disconnect_endpoint(ep.to_owned(), "a new RID took over");
                        let mut e = PeerEntry::new(rid.clone(), None);
                        e.awaiting_close_until = Some(now + close_grace);
                        peers.insert(rid.clone(), e);
                    }
                }
                let e = peers
                    .entry(rid.clone())
                    .or_insert_with(|| PeerEntry::new(rid.clone(), None));
                // A new lifecycle of the same RID replaces the old expectation and connection.
                if let Some(old) = e.intent.as_ref().and_then(|i| i.expected.as_ref())
                    && old.node.lifecycle_generation != p.descriptor.node.lifecycle_generation
                {
                    restarted.push(old.node.clone());
                    if let Some(c) = e.conn.take() {
                        c.close();
                    }
                    e.liveness = None;
                    e.hello = None;
                    e.state = PeerState::Connecting;
                    // A restarted peer may listen elsewhere: drop the old dial, re-dial the
                    // new endpoint once the old close is observed (or its grace passed).
                    if let Some(ep) = e.dial_endpoint().map(str::to_owned)
                        && ep != p.descriptor.endpoint
                        && e.dialing
                    {
                        self.disconnect_endpoint(ep, "restarted elsewhere");
                        e.dialing = false;
                        e.awaiting_close_until = Some(now + close_grace);
                    }
                }
                let kind = match p.disposition {
                    Disposition::Dial => IntentKind::Dial {
                        endpoint: p.descriptor.endpoint.clone(),
                    },
                    Disposition::Await | Disposition::NotRequired => IntentKind::Await,
                };
                e.intent = Some(Intent {
                    kind,
                    expected: Some(p.descriptor.clone()),
                    manual: false,
                });
                if p.disposition == Disposition::NotRequired {
                    e.state = PeerState::NotRequired;
                    e.descriptor = Some(p.descriptor);
                }
            }
        }
        for fence in restarted {
            self.fail_pending(&fence);
        }
        self.dial_due();
        self.inner.notify_peers_changed();
    }

    fn broadcast(&mut self, update: &Update) {
        let Some(frames) = encode(
            &Record::new(CommandBody::Update(update.clone())),
            WireLeg::Send,
        ) else {
            return;
        };
        let conns: Vec<_> = self
            .inner
            .peers()
            .values()
            .filter(|e| e.state == PeerState::Ready)
            .filter_map(|e| e.conn.clone())
            .collect();
        for c in conns {
            c.send_control(Leg::Send, frames.clone());
        }
    }

    fn shutdown(&mut self) {
        let mut peers = self.inner.peers();
        for e in peers.values_mut() {
            if let Some(c) = e.conn.take() {
                let frame = Header::Reset {
                    generation: c.generation(),
                }
                .encode();
                let _ = self
                    .inner
                    .pump
                    .send_control(c.zmq_id().clone(), vec![frame]);
                c.close();
            }
            e.liveness = None;
            e.state = PeerState::NotConnected;
        }
        drop(peers);
        self.inner.notify_peers_changed();
    }

    // ---- dialing ---------------------------------------------------------------------

    /// Dial every dial intent that has no connection and may dial now.
    fn dial_due(&mut self) {
        let now = self.now();
        let mut peers = self.inner.peers();
        for e in peers.values_mut() {
            if e.dialing || e.conn.is_some() || e.state == PeerState::NotRequired {
                continue;
            }
            let Some(ep) = e.dial_endpoint().map(str::to_owned) else {
                continue;
            };
            if e.awaiting_close_until.is_some_and(|t| now < t)
                || e.redial_at.is_some_and(|t| now < t)
            {
                continue;
            }
            e.awaiting_close_until = None;
            e.redial_at = None;
            e.dialing = true;
            if !matches!(e.state, PeerState::Rejected(_)) {
                e.state = PeerState::Connecting;
            }
            self.inner.pump.connect(ep);
        }
    }

    /// End the current epoch of `e`. With a dial intent the physical connection is dropped and
    /// not re-dialed before its close is observed (wire §4 "Physical connection replacement").
    fn drop_connection(&self, e: &mut PeerEntry, tell_peer: bool, why: &str) {
        if let Some(c) = e.conn.take() {
            e.lost_at.get_or_insert(self.now());
            tracing::debug!(peer = %e.rid, generation = c.generation(), why, "connection epoch ended");
            if tell_peer {
                let frame = Header::Reset {
                    generation: c.generation(),
                }
                .encode();
                let _ = self
                    .inner
                    .pump
                    .send_control(c.zmq_id().clone(), vec![frame]);
            }
            c.close();
        }
        e.liveness = None;
        e.hello = None;
        if e.state != PeerState::NotRequired {
            e.state = PeerState::NotConnected;
        }
    }

    /// Drop the ZeroMQ connection to `ep` (every pipe to it).
    fn disconnect_endpoint(&self, ep: String, why: &str) {
        tracing::debug!(endpoint = %ep, why, "disconnecting endpoint");
        self.inner.pump.disconnect(ep);
    }

    fn redial(&self, e: &mut PeerEntry, delay_ms: Option<u64>) {
        let now = self.now();
        if let Some(ep) = e.dial_endpoint().map(str::to_owned) {
            if e.dialing {
                self.disconnect_endpoint(ep, "redial");
                e.dialing = false;
                // Bounded grace in case libzmq reports no event for a never-connected pipe.
                let grace = (self.inner.config.timings.probe_interval.as_millis() as u64).max(200);
                e.awaiting_close_until = Some(now + grace);
            }
            if let Some(d) = delay_ms {
                e.redial_at = Some(now + d);
            }
        }
    }

    fn fail_pending(&self, fence: &NodeFence) {
        let done = self
            .inner
            .pending()
            .peer_lost(&PeerRef::new(fence.rid.clone(), fence.lifecycle_generation));
        for c in done {
            let _ = c.waker.send(c.outcome);
        }
    }

    // ---- pump events -----------------------------------------------------------------

    fn on_event(&mut self, ev: PumpEvent) {
        match ev {
            PumpEvent::Message { from, frames } => self.on_message(&from, &frames),
            PumpEvent::Batch { from, frame, .. } => {
                let mut frames: Vec<Bytes> = Vec::with_capacity(4);
                for_each_message_parts(&frame, |parts| {
                    if self.try_fast_send(&from, &frame, parts) {
                        return;
                    }
                    frames.clear();
                    frames.extend(parts.iter().map(|p| frame.slice_ref(p)));
                    self.on_message(&from, &frames);
                });
            }
            PumpEvent::Unroutable { to } => {
                // The peer's pipe is gone (bind side of a dropped connection).
                if let Some(rid) = rid_of(&to) {
                    let mut peers = self.inner.peers();
                    if let Some(e) = peers.get_mut(&rid)
                        && e.conn.is_some()
                    {
                        self.drop_connection(e, false, "unroutable");
                    }
                    drop(peers);
                    self.inner.notify_peers_changed();
                }
            }
            PumpEvent::Monitor { kind, endpoint } => self.on_monitor(kind, &endpoint),
        }
    }

    fn on_monitor(&mut self, kind: MonitorKind, endpoint: &str) {
        tracing::debug!(?kind, endpoint, "socket monitor event");
        match kind {
            MonitorKind::Disconnected | MonitorKind::Closed => {
                let mut peers = self.inner.peers();
                for e in peers.values_mut() {
                    if e.dial_endpoint() != Some(endpoint) {
                        continue;
                    }
                    e.awaiting_close_until = None;
                    if kind == MonitorKind::Disconnected && e.conn.is_some() {
                        // The physical connection is gone: this epoch may have lost records.
                        self.drop_connection(e, false, "disconnected");
                    }
                    // A handshake on the pipe that closed cannot complete any more: without
                    // this, the greeting of the next pipe (libzmq reconnects by itself, for
                    // example after a cut connection) would be refused as unexpected and
                    // the peer would stay not connected for good.
                    if e.conn.is_none() {
                        e.hello = None;
                    }
                }
                drop(peers);
                self.inner.notify_peers_changed();
                self.dial_due();
            }
            MonitorKind::HandshakeSucceeded
            | MonitorKind::ConnectRetried
            | MonitorKind::Accepted
            | MonitorKind::HandshakeFailed => {}
        }
    }

    fn greet(&mut self, zmq_id: &Bytes) {
        let Ok(nonce) = random_bytes::<32>() else {
            return;
        };
        if self.greeted.len() >= MAX_GREETED
            && let Some(old) = self.greeted_order.pop_front()
        {
            self.greeted.remove(&old);
        }
        if self.greeted.insert(zmq_id.clone(), nonce).is_none() {
            self.greeted_order.push_back(zmq_id.clone());
        }
        let frame = Header::Greeting {
            nonce,
            rid: self.inner.rid.to_string(),
            endpoint: self.inner.endpoint.clone(),
        }
        .encode();
        let _ = self.inner.pump.send_control(zmq_id.clone(), vec![frame]);
    }

    fn on_message(&mut self, from: &Bytes, frames: &[Bytes]) {
        // PROBE_ROUTER: an empty message announces a new pipe from this identity.
        if frames.len() == 1 && frames[0].is_empty() {
            if let Some(rid) = rid_of(from) {
                let mut peers = self.inner.peers();
                if let Some(e) = peers.get_mut(&rid) {
                    if e.conn.is_some() {
                        self.drop_connection(e, false, "pipe replaced");
                    }
                    // A handshake of the replaced pipe cannot complete any more.
                    e.hello = None;
                    // Dialer: the acceptor's greeting should follow on this pipe; if it does
                    // not (see `reprobe_if_silent`), the pipe is announced again.
                    if e.dialing && e.dial_endpoint().is_some() {
                        e.awaiting_greeting = Some((from.clone(), self.now()));
                    }
                }
                drop(peers);
                self.inner.notify_peers_changed();
            }
            self.greet(from);
            return;
        }
        let Some(first) = frames.first() else {
            return;
        };
        let header = match Header::decode(first) {
            Ok(h) => h,
            Err(e) => {
                self.inner.metrics.protocol_error(e.label());
                return;
            }
        };
        match header {
            Header::Greeting {
                nonce,
                rid,
                endpoint,
            } => self.on_greeting(from, nonce, rid, endpoint),
            Header::Credit { generation, limit } => {
                if let Some(c) = self.conn_of(from, generation) {
                    c.on_credit(limit);
                }
            }
            Header::Reset { generation } => {
                let Some(rid) = rid_of(from) else { return };
                let mut peers = self.inner.peers();
                if let Some(e) = peers.get_mut(&rid)
                    && e.conn
                        .as_ref()
                        .is_some_and(|c| c.generation() == generation)
                {
                    self.drop_connection(e, false, "peer reset");
                    self.redial(e, None);
                }
                drop(peers);
                self.inner.notify_peers_changed();
            }
            Header::Batch { .. } => {
                // The pump splits well-formed batches; one that reaches here did not add up
                // (or was nested).
                self.inner.metrics.protocol_error("header_invalid_batch");
            }
            Header::Send(_) | Header::Request(_) | Header::Reply(_) => {
                if let Some((stamp, wire_leg, leg)) = leg_of(&header) {
                    self.on_record(from, stamp, wire_leg, leg, &frames[1..]);
                }
            }
        }
    }

    fn conn_of(&self, zmq_id: &Bytes, generation: u64) -> Option<Arc<Connection>> {
        let rid = rid_of(zmq_id)?;
        let peers = self.inner.peers();
        peers
            .get(&rid)?
            .conn
            .as_ref()
            .filter(|c| c.generation() == generation)
            .cloned()
    }

    fn on_greeting(
        &mut self,
        from: &Bytes,
        acceptor_nonce: [u8; 32],
        rid: String,
        endpoint: String,
    ) {
        if rid_of(from).as_deref() != Some(rid.as_str()) {
            self.inner.metrics.protocol_error("greeting_rid_mismatch");
            return;
        }
        let mut peers = self.inner.peers();
        // Match an endpoint-only manual intent; it never overrides a full expectation.
        if let Some(pos) = self.endpoint_intents.iter().position(|ep| *ep == endpoint) {
            let ep = self.endpoint_intents.remove(pos);
            let e = peers
                .entry(rid.clone())
                .or_insert_with(|| PeerEntry::new(rid.clone(), None));
            if e.intent.as_ref().is_none_or(|i| i.expected.is_none()) {
                e.intent = Some(Intent {
                    kind: IntentKind::Dial { endpoint: ep },
                    expected: None,
                    manual: true,
                });
            }
            e.dialing = true;
        }
        let Some(e) = peers.get_mut(&rid) else {
            return;
        };
        if e.dial_endpoint().is_none() || !e.dialing || e.state == PeerState::NotRequired {
            // We are the accepting side of this pair; the greeting answers our own probe.
            return;
        }
        if e.conn.is_some() || e.hello.is_some() {
            tracing::debug!(peer = %rid, conn = e.conn.is_some(), hello = e.hello.is_some(), "unexpected greeting");
            // Sign a hello only for a connection that needs one: a greeting on a live or
            // handshaking connection is not from a new pipe of ours (a new pipe is announced
            // by the peer's probe first, which ends the old epoch).
            self.inner.metrics.protocol_error("unexpected_greeting");
            return;
        }
        let Ok(dialer_nonce) = random_bytes::<32>() else {
            return;
        };
        e.awaiting_greeting = None;
        let me = self.inner.descriptor();
        let hello_revision = me.descriptor_revision;
        let proof = self
            .inner
            .secret
            .hello_proof(&acceptor_nonce, &dialer_nonce, &me, CAPABILITY);
        let hello = Hello {
            capability: CAPABILITY.into(),
            topology: Topology::RouteMesh,
            channel_name: String::new(),
            descriptor: me,
            max_message_bytes: 0,
            nonce: dialer_nonce,
            proof,
        };
        let Some(mut frames) = encode(&Record::new(CommandBody::Hello(hello)), WireLeg::Request)
        else {
            return;
        };
        frames.insert(0, Header::Request(Stamp::UNADMITTED).encode());
        e.hello = Some(HelloState {
            dialer_nonce,
            acceptor_nonce,
            revision: hello_revision,
        });
        e.state = PeerState::Admitting;
        drop(peers);
        let _ = self.inner.pump.send_control(from.clone(), frames);
        self.inner.notify_peers_changed();
    }

    /// The current connection of the peer behind routing identity `from`, if a record stamped
    /// with `generation` belongs to it; counts `unadmitted` / `stale_generation` otherwise.
    ///
    /// The last connection looked up is kept: consecutive records (a batch) come from one
    /// peer, and a connection that is still open with the stamped generation is that peer's
    /// current one (every replaced or dropped connection is closed first), so they skip the
    /// peer table and its lock.
    fn current_conn(&mut self, from: &Bytes, generation: u64) -> Option<Arc<Connection>> {
        if let Some(c) = &self.last_conn
            && c.generation() == generation
            && !c.is_closed()
            && c.zmq_id() == from
        {
            return Some(Arc::clone(c));
        }
        let Ok(rid) = std::str::from_utf8(from) else {
            inc(&self.inner.metrics.unadmitted);
            return None;
        };
        let peers = self.inner.peers();
        let Some(e) = peers.get(rid) else {
            inc(&self.inner.metrics.unadmitted);
            return None;
        };
        let Some(conn) = e.conn.clone() else {
            inc(&self.inner.metrics.stale_generation);
            return None;
        };
        drop(peers);
        if conn.generation() != generation {
            inc(&self.inner.metrics.stale_generation);
            return None;
        }
        self.last_conn = Some(Arc::clone(&conn));
        Some(conn)
    }

    /// The sequence and credit fences of a record on `conn` (its generation already checked).
    /// A gap or a charge over the granted limit ends the epoch; returns whether the record
    /// passed.
    fn sequence_and_credit(&mut self, conn: &Arc<Connection>, stamp: Stamp) -> bool {
        if !conn.take_recv_seq(stamp.seq) {
            inc(&self.inner.metrics.sequence_gaps);
            self.inner.metrics.protocol_error("sequence_gap");
            self.break_epoch(conn, "sequence gap");
            return false;
        }
        if stamp.charge > 0 && !conn.on_received(stamp.charge) {
            self.inner.metrics.protocol_error("credit_exceeded");
            self.break_epoch(conn, "credit exceeded");
            return false;
        }
        true
    }

    /// End `conn`'s epoch after a fence violation: tell the peer, re-dial.
    fn break_epoch(&mut self, conn: &Arc<Connection>, why: &str) {
        let mut peers = self.inner.peers();
        if let Some(e) = peers.get_mut(conn.peer().rid.as_str())
            && e.conn.as_ref().is_some_and(|c| Arc::ptr_eq(c, conn))
        {
            self.drop_connection(e, true, why);
            self.redial(e, None);
        }
        drop(peers);
        self.inner.notify_peers_changed();
    }

    /// The tail of a validated-head `NodeSend` (fences passed): check the charge against the
    /// record's `bytes`, then hand the payload to the dispatcher.
    fn submit_send(
        &mut self,
        conn: Arc<Connection>,
        stamp: Stamp,
        bytes: usize,
        payload: Result<TypedPayload, zlink_protocol::error::ProtocolError>,
    ) {
        let payload = match payload {
            Ok(p) => p,
            Err(e) => {
                self.inner.metrics.protocol_error(e.kind());
                self.consumed(&conn, stamp.charge);
                return;
            }
        };
        if stamp.charge != conn.expected_charge(bytes) {
            self.inner.metrics.protocol_error("charge_mismatch");
            self.consumed(&conn, stamp.charge);
            return;
        }
        self.inner.dispatcher.submit(
            &self.inner,
            DispatchItem {
                conn,
                charge: stamp.charge,
                request: None,
                channel: None,
                metadata: None,
                payload,
            },
        );
    }

    /// A batched message handled without turning its frames into `Bytes`: a `NodeSend` on the
    /// last connection (open, same generation) whose frame 0 is the epoch's validated head.
    /// Anything else returns false before any side effect, for the general path.
    fn try_fast_send(&mut self, from: &Bytes, owner: &Bytes, parts: &[&[u8]]) -> bool {
        let [header, frame0, payload_frame] = parts else {
            return false;
        };
        let Ok(Header::Send(stamp)) = Header::decode(header) else {
            return false;
        };
        let Some(conn) = self.last_conn.as_ref().filter(|c| {
            stamp.generation != 0
                && c.generation() == stamp.generation
                && !c.is_closed()
                && c.zmq_id() == from
                && c.is_validated_send_head(frame0)
        }) else {
            return false;
        };
        let conn = Arc::clone(conn);
        if !self.sequence_and_credit(&conn, stamp) {
            return true;
        }
        let payload = TypedPayload::decode_shared_part(owner, payload_frame);
        self.submit_send(conn, stamp, frame0.len() + payload_frame.len(), payload);
        true
    }

    /// A record stamped with generation 0: only the handshake (hello, admit, reject on their
    /// legs) travels before admission; anything else is counted `unadmitted` and dropped.
    fn on_unadmitted_record(
        &mut self,
        from: &Bytes,
        wire_leg: WireLeg,
        leg: Leg,
        frames: &[Bytes],
    ) {
        let record = match Record::decode_shared(frames, WireContext::route_mesh(wire_leg)) {
            Ok(r) => r,
            Err(e) => {
                self.inner.metrics.protocol_error(e.kind());
                return;
            }
        };
        match record.body {
            CommandBody::Hello(h) if leg == Leg::Request => self.on_hello(from, h),
            CommandBody::Admit(a) if leg == Leg::Reply => self.on_admit(from, a),
            CommandBody::Reject(r) if leg == Leg::Reply => self.on_reject(from, r),
            _ => {
                inc(&self.inner.metrics.unadmitted);
            }
        }
    }

    /// Every command has its own arm below (no wildcard: `clippy::wildcard_enum_match_arm` is
    /// denied), so a command added to the schema — a new `CommandBody` variant — does not
    /// compile until the reactor handles it.
    #[deny(clippy::wildcard_enum_match_arm)]
    fn on_record(
        &mut self,
        from: &Bytes,
        stamp: Stamp,
        wire_leg: WireLeg,
        leg: Leg,
        frames: &[Bytes],
    ) {
        if stamp.generation == 0 {
            self.on_unadmitted_record(from, wire_leg, leg, frames);
            return;
        }
        // Fences: generation, then sequence, then credit.
        let Some(conn) = self.current_conn(from, stamp.generation) else {
            return;
        };
        if !self.sequence_and_credit(&conn, stamp) {
            return;
        }
        // Fast path for the hot case: a tail-less `NodeSend` whose frame 0 is byte-identical
        // to one this epoch already validated (same body, so the same source, target and leg
        // checks pass); only the payload frame is decoded.
        if wire_leg == WireLeg::Send
            && let [frame0, payload_frame] = frames
            && conn.is_validated_send_head(frame0)
        {
            let payload = TypedPayload::decode_shared(payload_frame);
            self.submit_send(conn, stamp, frame0.len() + payload_frame.len(), payload);
            return;
        }
        let record = match Record::decode_shared(frames, WireContext::route_mesh(wire_leg)) {
            Ok(r) => r,
            Err(e) => {
                // Malformed: counted, never reaches a handler; the connection stays usable.
                self.inner.metrics.protocol_error(e.kind());
                self.consumed(&conn, stamp.charge);
                return;
            }
        };
        // Flow control and sender identity come from the schema (generated `CommandSpec`):
        // a charged record carries exactly the charge its size implies, and claims to come
        // from the admitted peer itself.
        let spec = record.body.spec();
        if spec.flow_charged {
            let bytes: usize = frames.iter().map(Bytes::len).sum();
            let source = match spec.source {
                SourceRule::Body => record.body.source(),
                SourceRule::Connection => Some(conn.peer()),
                SourceRule::None => None,
            };
            if stamp.charge != conn.expected_charge(bytes) {
                self.inner.metrics.protocol_error("charge_mismatch");
                self.consumed(&conn, stamp.charge);
                return;
            }
            if source != Some(conn.peer()) {
                self.inner.metrics.protocol_error("source_mismatch");
                self.consumed(&conn, stamp.charge);
                return;
            }
        } else if stamp.charge > 0 {
            self.consumed(&conn, stamp.charge);
        }
        match record.body {
            CommandBody::LivenessProbe(p) => {
                if p.connection_generation == conn.generation()
                    && !self.inner.faults.drop_liveness_acks.load(Ordering::Acquire)
                {
                    let ack = Record::new(CommandBody::LivenessAck(LivenessAck {
                        probe_id: p.probe_id,
                        connection_generation: p.connection_generation,
                    }));
                    if let Some(f) = encode(&ack, WireLeg::Send) {
                        conn.send_control(Leg::Send, f);
                    }
                }
            }
            CommandBody::LivenessAck(a) => {
                let now = self.now();
                let mut peers = self.inner.peers();
                if let Some(l) = peers
                    .get_mut(conn.peer().rid.as_str())
                    .and_then(|e| e.liveness.as_mut())
                {
                    let _ = l.on_ack(a.probe_id, a.connection_generation, now);
                }
            }
            CommandBody::Update(u) => {
                let rid = conn.peer().rid.clone();
                self.on_update(&rid, &conn, u);
            }
            CommandBody::Hello(h) if leg == Leg::Request => self.on_rehello(&conn, h),
            CommandBody::Admit(a) if leg == Leg::Reply => {
                if a.connection_generation != conn.generation() {
                    self.inner
                        .metrics
                        .protocol_error("admit_generation_mismatch");
                }
            }
            CommandBody::NodeSend(ref s) => {
                if s.target.rid != self.inner.rid
                    || s.target.lifecycle_generation != self.inner.lifecycle
                {
                    self.inner.metrics.protocol_error("stale_target");
                    self.consumed(&conn, stamp.charge);
                    return;
                }
                if record.flags() == 0
                    && let [frame0, _payload] = frames
                {
                    conn.remember_send_head(frame0);
                }
                self.inner.dispatcher.submit(
                    &self.inner,
                    DispatchItem {
                        conn,
                        charge: stamp.charge,
                        request: None,
                        channel: None,
                        metadata: record.metadata,
                        payload: record.payload.unwrap_or_default(),
                    },
                );
            }
            CommandBody::NodeRequest(r) => {
                if r.target.rid != self.inner.rid
                    || r.target.lifecycle_generation != self.inner.lifecycle
                {
                    self.consumed(&conn, stamp.charge);
                    super::dispatch::send_reply(
                        &self.inner,
                        &r.source,
                        &r.request,
                        Err(CallError::new(
                            crate::call::error::ErrorKind::StaleRoute,
                            "request addressed to another lifecycle of this RID",
                        )),
                    );
                    return;
                }
                let payload = record.payload.unwrap_or_default();
                if payload
                    .packet_name
                    .starts_with(super::object_command::SESSION_FRAMEWORK_PREFIX)
                {
                    // The framework's own node-direct requests (session housekeeping): the
                    // object runtime answers them, never an application handler.
                    let p = ObjectPayload {
                        metadata: record.metadata,
                        payload,
                        bound_session: None,
                    };
                    self.take_object(conn, stamp.charge, ObjectCommand::FrameworkRequest(r, p));
                    return;
                }
                self.inner.dispatcher.submit(
                    &self.inner,
                    DispatchItem {
                        conn,
                        charge: stamp.charge,
                        request: Some(r.request),
                        channel: None,
                        metadata: record.metadata,
                        payload,
                    },
                );
            }
            CommandBody::ChannelSend(s) => {
                if s.target.rid != self.inner.rid
                    || s.target.lifecycle_generation != self.inner.lifecycle
                {
                    self.inner.metrics.protocol_error("stale_target");
                    self.consumed(&conn, stamp.charge);
                    return;
                }
                if !self.serves_channel(&s.channel_name) {
                    // A peer selected us for a Channel we never announced a Server membership
                    // of: a wire-contract break, counted and never dispatched.
                    self.inner.metrics.protocol_error("not_channel_server");
                    self.consumed(&conn, stamp.charge);
                    return;
                }
                self.inner.dispatcher.submit(
                    &self.inner,
                    DispatchItem {
                        conn,
                        charge: stamp.charge,
                        request: None,
                        channel: Some(s.channel_name),
                        metadata: record.metadata,
                        payload: record.payload.unwrap_or_default(),
                    },
                );
            }
            CommandBody::ChannelRequest(r) => {
                let refusal = if r.target.rid != self.inner.rid
                    || r.target.lifecycle_generation != self.inner.lifecycle
                {
                    Some(CallError::new(
                        crate::call::error::ErrorKind::StaleRoute,
                        "request addressed to another lifecycle of this RID",
                    ))
                } else if !self.serves_channel(&r.channel_name) {
                    self.inner.metrics.protocol_error("not_channel_server");
                    Some(CallError::new(
                        crate::call::error::ErrorKind::NotFound,
                        format!(
                            "node {} is not a Server of channel {:?}",
                            self.inner.rid, r.channel_name
                        ),
                    ))
                } else {
                    None
                };
                if let Some(err) = refusal {
                    self.consumed(&conn, stamp.charge);
                    super::dispatch::send_reply(&self.inner, &r.source, &r.request, Err(err));
                    return;
                }
                self.inner.dispatcher.submit(
                    &self.inner,
                    DispatchItem {
                        conn,
                        charge: stamp.charge,
                        request: Some(r.request),
                        channel: Some(r.channel_name),
                        metadata: record.metadata,
                        payload: record.payload.unwrap_or_default(),
                    },
                );
            }
            CommandBody::SpotSend(b) => {
                self.take_object(
                    conn,
                    stamp.charge,
                    ObjectCommand::SpotSend(b, app(record.metadata, record.payload)),
                );
            }
            CommandBody::SpotRequest(b) => {
                self.take_object(
                    conn,
                    stamp.charge,
                    ObjectCommand::SpotRequest(b, app(record.metadata, record.payload)),
                );
            }
            CommandBody::ActorSend(b) => {
                let mut p = app(record.metadata, record.payload);
                p.bound_session = record.bound_session.map(|t| t.session);
                self.take_object(conn, stamp.charge, ObjectCommand::ActorSend(b, p));
            }
            CommandBody::ActorRequest(b) => {
                let mut p = app(record.metadata, record.payload);
                p.bound_session = record.bound_session.map(|t| t.session);
                self.take_object(conn, stamp.charge, ObjectCommand::ActorRequest(b, p));
            }
            CommandBody::BoundSessionBind(b) => {
                // Routing §3.1: the session owner binds its own sessions.
                if b.session.owner_node != *conn.peer() {
                    self.inner.metrics.protocol_error("source_mismatch");
                    self.consumed(&conn, stamp.charge);
                    return;
                }
                self.take_object(conn, stamp.charge, ObjectCommand::BoundSessionBind(b));
            }
            CommandBody::BoundSessionSend(b) => {
                self.take_object(
                    conn,
                    stamp.charge,
                    ObjectCommand::BoundSessionSend(b, app(record.metadata, record.payload)),
                );
            }
            CommandBody::LogicalMulticast(b) => {
                self.take_object(
                    conn,
                    stamp.charge,
                    ObjectCommand::LogicalMulticast(b, app(record.metadata, record.payload)),
                );
            }
            CommandBody::InstanceSpot(b) => {
                self.take_object(
                    conn,
                    stamp.charge,
                    ObjectCommand::InstanceSpot(b, app(record.metadata, record.payload)),
                );
            }
            CommandBody::UserSpotCreate(b) => {
                self.take_object(conn, stamp.charge, ObjectCommand::UserSpotCreate(b));
            }
            CommandBody::UserSpotClose(b) => {
                self.take_object(conn, stamp.charge, ObjectCommand::UserSpotClose(b));
            }
            CommandBody::ActorCreate(b) => {
                self.take_object(conn, stamp.charge, ObjectCommand::ActorCreate(b));
            }
            CommandBody::ActorDestroy(b) => {
                self.take_object(conn, stamp.charge, ObjectCommand::ActorDestroy(b));
            }
            CommandBody::ActorJoin(b) => {
                self.take_object(conn, stamp.charge, ObjectCommand::ActorJoin(b));
            }
            CommandBody::Reply(reply) => {
                let outcome = match CallError::from_status(reply.status, reply.detail.clone()) {
                    None => Ok(record.payload.unwrap_or_default()),
                    Some(err) => Err(err),
                };
                let fields = ReplyFields {
                    operation_id: reply.operation_id,
                    reply_route_id: reply.reply_route_id,
                    correlation_id: reply.correlation_id,
                    outcome,
                };
                let from_peer =
                    PeerRef::new(conn.peer().rid.clone(), conn.peer().lifecycle_generation);
                let delivered = self.inner.pending().on_reply(fields, &from_peer);
                match delivered {
                    Delivered::Completed(c) => {
                        let _ = c.waker.send(c.outcome);
                    }
                    Delivered::Dropped { .. } => {}
                }
            }
            // A handshake record on an admitted connection, on a leg it does not travel on.
            CommandBody::Hello(_) | CommandBody::Admit(_) | CommandBody::Reject(_) => {
                inc(&self.inner.metrics.unserved_commands);
            }
            // Commands of later capabilities (relocation, sessions, lookups) are not served by
            // this node version: counted, never dispatched. Each is named, so a command added to
            // the schema does not compile until it is handled here.
            CommandBody::RelocationPrepare(b) => {
                if b.source != *conn.peer() {
                    // The body names another sender than the connection's peer.
                    self.inner.metrics.protocol_error("source_mismatch");
                    self.consumed(&conn, stamp.charge);
                    return;
                }
                self.take_object(conn, stamp.charge, ObjectCommand::RelocationPrepare(b));
            }
            CommandBody::RelocationState(b) => {
                self.take_object(conn, stamp.charge, ObjectCommand::RelocationState(b));
            }
            CommandBody::RelocationReady(b) => {
                self.take_object(conn, stamp.charge, ObjectCommand::RelocationReady(b));
            }
            CommandBody::RelocationFailed(b) => {
                self.take_object(conn, stamp.charge, ObjectCommand::RelocationFailed(b));
            }
            CommandBody::RelocationData(b) => {
                self.take_object(conn, stamp.charge, ObjectCommand::RelocationData(b));
            }
            CommandBody::RelocationCutover(b) => {
                self.take_object(conn, stamp.charge, ObjectCommand::RelocationCutover(b));
            }
            CommandBody::ReplyRelayAck(b) => {
                self.take_object(conn, stamp.charge, ObjectCommand::ReplyRelayAck(b));
            }
            CommandBody::MessageFollow(m) => {
                // Wire §3.1: the notice comes from the old owner its source route names.
                if m.follow.source_route.target_node != *conn.peer()
                    || m.follow.source_route.object_kind != m.follow.target_route.object_kind
                    || m.follow.source_route.object_id != m.follow.target_route.object_id
                {
                    self.inner.metrics.protocol_error("message_follow_mismatch");
                    self.consumed(&conn, stamp.charge);
                    return;
                }
                self.take_object(conn, stamp.charge, ObjectCommand::MessageFollow(m));
            }
            CommandBody::ReplyRelay(r) => {
                self.consumed(&conn, stamp.charge);
                self.on_reply_relay(&conn, r, record.payload);
            }
            CommandBody::SessionRelocationSeal(b) => {
                self.take_object(conn, stamp.charge, ObjectCommand::SessionRelocationSeal(b));
            }
            CommandBody::SessionRelocationSealed(b) => {
                self.take_object(
                    conn,
                    stamp.charge,
                    ObjectCommand::SessionRelocationSealed(b),
                );
            }
            CommandBody::SessionRelocationRoute(b) => {
                self.take_object(conn, stamp.charge, ObjectCommand::SessionRelocationRoute(b));
            }
            CommandBody::BoundSessionReplaced(b) => {
                self.take_object(conn, stamp.charge, ObjectCommand::BoundSessionReplaced(b));
            }
            CommandBody::ActorLookup(_)
            | CommandBody::ActorLeft(_)
            | CommandBody::ActorJoined(_) => {
                inc(&self.inner.metrics.unserved_commands);
            }
        }
    }

    /// A relayed terminal (`replyRelay`, 33; wire §11): the owner of a request this node carried
    /// into a relocation answers it from wherever the object lives now. It completes the
    /// pending request it names, whichever peer it comes from, and is acknowledged (46) when it
    /// names this node's current lease — also when the request was already terminal, so the
    /// relaying node stops resending. A 33 naming another lease is dropped, counted.
    fn on_reply_relay(
        &mut self,
        conn: &Arc<Connection>,
        r: zlink_protocol::generated::ReplyRelay,
        payload: Option<TypedPayload>,
    ) {
        let my_lease = self
            .inner
            .lease
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .as_ref()
            .map(|t| t.lease_generation);
        if r.source_lease.owner_node != self.inner.fence()
            || Some(r.source_lease.owner_lease_generation) != my_lease
        {
            inc(&self.inner.metrics.reply_relays_dropped);
            return;
        }
        let outcome = match CallError::from_status(r.status, r.detail.clone()) {
            None => Ok(payload.unwrap_or_default()),
            Some(err) => Err(err),
        };
        let fields = ReplyFields {
            operation_id: r.operation_id.clone(),
            reply_route_id: r.reply_route_id,
            correlation_id: r.correlation_id.clone(),
            outcome,
        };
        let from_peer = PeerRef::new(conn.peer().rid.clone(), conn.peer().lifecycle_generation);
        let delivered = self.inner.pending().on_reply(fields, &from_peer);
        if let Delivered::Completed(c) = delivered {
            let _ = c.waker.send(c.outcome);
        }
        inc(&self.inner.metrics.reply_relays_accepted);
        let ack = Record::new(CommandBody::ReplyRelayAck(
            zlink_protocol::generated::ReplyRelayAck {
                relocation_id: r.relocation_id,
                operation_id: r.operation_id,
                reply_route_id: r.reply_route_id,
            },
        ));
        if let Ok(frames) = ack.encode(WireContext::route_mesh(WireLeg::Reply)) {
            conn.send_control(Leg::Reply, frames);
        }
    }

    /// Hand an admitted object command to the object runtime (the one typed path,
    /// [`ObjectSink::take`]). The flow charge is settled here: object queues do their own
    /// admission. A Spot / Actor message's route must name this node's lifecycle (else the
    /// sender's route is stale: a send is a counted `stale_target`, a request gets a
    /// `StaleRoute` terminal that invalidates the sender's cache entry). Without an object
    /// runtime the command is counted as unserved and a request is answered `NotFound`.
    fn take_object(&mut self, conn: Arc<Connection>, charge: u32, command: ObjectCommand) {
        self.consumed(&conn, charge);
        let source = Arc::clone(conn.peer_shared());
        if let Some(route) = command.message_route()
            && (route.target_node.rid != self.inner.rid
                || route.target_node.lifecycle_generation != self.inner.lifecycle)
        {
            // A route cached before this node restarted: legitimate traffic, not a wire break.
            inc(&self.inner.metrics.stale_object_routes);
            if let Some(req) = command.request() {
                let detail = format!("route of {} names another node lifecycle", route.object_id);
                super::dispatch::send_reply(
                    &self.inner,
                    &source,
                    &req,
                    Err(CallError::new(
                        crate::call::error::ErrorKind::StaleRoute,
                        detail,
                    )),
                );
            }
            return;
        }
        match self.inner.object_sink.get() {
            Some(sink) => sink.take(source, command),
            None => self.refuse_without_objects(&source, command.request().as_ref()),
        }
    }

    /// A node without an object runtime: the command is counted as unserved and a request is
    /// answered `NotFound` (a one-way record has no one to answer).
    fn refuse_without_objects(
        &self,
        source: &NodeFence,
        request: Option<&zlink_protocol::generated::RequestHeader>,
    ) {
        inc(&self.inner.metrics.unserved_commands);
        if let Some(request) = request {
            super::dispatch::send_reply(
                &self.inner,
                source,
                request,
                Err(CallError::new(
                    crate::call::error::ErrorKind::NotFound,
                    format!("node {} hosts no objects", self.inner.rid),
                )),
            );
        }
    }

    /// Whether this node has a Server membership of `channel` (at any weight: weight `0` and
    /// draining stop new selection at the senders, not delivery of work already submitted).
    fn serves_channel(&self, channel: &str) -> bool {
        self.inner
            .config
            .channels
            .iter()
            .any(|c| c.channel_name == channel && c.role == ChannelRole::Server)
    }

    fn consumed(&self, conn: &Arc<Connection>, charge: u32) {
        if charge > 0 {
            conn.on_consumed(charge);
            conn.flush_credit(conn.credit_step());
        }
    }

    // ---- admission -------------------------------------------------------------------

    fn reject(&mut self, zmq_id: &Bytes, reason: RejectReason, detail: String) {
        inc(&self.inner.metrics.rejected);
        tracing::info!(peer = %String::from_utf8_lossy(zmq_id), ?reason, %detail, "admission rejected");
        let rec = Record::new(CommandBody::Reject(Reject {
            reason,
            detail: detail.chars().take(1024).collect(),
        }));
        if let Some(mut frames) = encode(&rec, WireLeg::Reply) {
            frames.insert(0, Header::Reply(Stamp::UNADMITTED).encode());
            let _ = self.inner.pump.send_control(zmq_id.clone(), frames);
        }
        if let Some(rid) = rid_of(zmq_id) {
            let mut peers = self.inner.peers();
            if let Some(e) = peers.get_mut(&rid)
                && e.conn.is_none()
                && e.state != PeerState::NotRequired
            {
                e.state = PeerState::Rejected(reason);
            }
            drop(peers);
            self.inner.notify_peers_changed();
        }
    }

    /// Checks that need no I/O; `Err` is the reject reason and detail.
    fn check_hello(
        &self,
        zmq_id: &Bytes,
        h: &Hello,
        acceptor_nonce: &[u8; 32],
    ) -> Result<(), (RejectReason, String)> {
        if h.topology != Topology::RouteMesh {
            return Err((
                RejectReason::TopologyMismatch,
                "RouteMesh connection".into(),
            ));
        }
        if h.capability != CAPABILITY {
            return Err((
                RejectReason::CapabilityMissing,
                format!("{CAPABILITY} required"),
            ));
        }
        let d = &h.descriptor;
        if d.mesh_name != self.inner.config.mesh_name {
            return Err((
                RejectReason::MeshMismatch,
                format!("this is mesh {}", self.inner.config.mesh_name),
            ));
        }
        if rid_of(zmq_id).as_deref() != Some(d.node.rid.as_str()) {
            return Err((
                RejectReason::DescriptorMismatch,
                "RID differs from the routing identity".into(),
            ));
        }
        if !self
            .inner
            .secret
            .verify_hello(acceptor_nonce, &h.nonce, d, &h.capability, &h.proof)
        {
            return Err((
                RejectReason::AuthenticationFailed,
                "security identity not proven".into(),
            ));
        }
        if self.inner.shutting_down.load(Ordering::Acquire) {
            return Err((RejectReason::ShuttingDown, "node is shutting down".into()));
        }
        let me = self.inner.descriptor();
        if connection_not_required(&me, d) {
            return Err((
                RejectReason::RoleMismatch,
                "not required: both Object Clients without Channel Server membership".into(),
            ));
        }
        let peers = self.inner.peers();
        if let Some(exp) = peers
            .get(d.node.rid.as_str())
            .and_then(|e| e.intent.as_ref())
            .and_then(|i| i.expected.as_ref())
        {
            if exp.node.lifecycle_generation != d.node.lifecycle_generation {
                return Err((
                    RejectReason::StaleLifecycle,
                    "lifecycle differs from the discovered descriptor".into(),
                ));
            }
            if exp.security_identity != d.security_identity || exp.object_role != d.object_role {
                return Err((
                    RejectReason::DescriptorMismatch,
                    "identity differs from the discovered descriptor".into(),
                ));
            }
        }
        Ok(())
    }

    fn on_hello(&mut self, zmq_id: &Bytes, h: Hello) {
        let Some(acceptor_nonce) = self.greeted.remove(zmq_id) else {
            self.reject(
                zmq_id,
                RejectReason::AuthenticationFailed,
                "hello without a greeting challenge".into(),
            );
            return;
        };
        if let Err((reason, detail)) = self.check_hello(zmq_id, &h, &acceptor_nonce) {
            if reason == RejectReason::RoleMismatch {
                let rid = h.descriptor.node.rid.to_string();
                let mut peers = self.inner.peers();
                let e = peers
                    .entry(rid.clone())
                    .or_insert_with(|| PeerEntry::new(rid, None));
                e.state = PeerState::NotRequired;
                e.descriptor = Some(h.descriptor.clone());
            }
            self.reject(zmq_id, reason, detail);
            return;
        }
        match self.inner.store.clone() {
            None => self.admit(zmq_id, &h, acceptor_nonce),
            Some(store) => {
                self.next_attempt += 1;
                let attempt = self.next_attempt;
                self.checking.insert(zmq_id.clone(), attempt);
                let tx = self.inner.cmd_tx.clone();
                let mesh = self.inner.config.mesh_name.clone();
                let zmq_id = zmq_id.clone();
                tokio::spawn(async move {
                    let verdict = owner_check(store.as_ref(), &mesh, &h.descriptor).await;
                    let _ = tx.send(Cmd::AdmissionChecked {
                        zmq_id,
                        attempt,
                        hello: Box::new(h),
                        acceptor_nonce,
                        verdict,
                    });
                });
            }
        }
    }

    fn admit(&mut self, zmq_id: &Bytes, h: &Hello, acceptor_nonce: [u8; 32]) {
        let d = &h.descriptor;
        let generation = new_connection_generation();
        let me = self.inner.descriptor();
        let admitted_revision = me.descriptor_revision;
        let now = self.now();
        let t = &self.inner.config.timings;
        let Some(mut frames) = self.admit_frames(me, &h.nonce, acceptor_nonce, generation) else {
            return;
        };
        frames.insert(0, Header::Reply(Stamp::UNADMITTED).encode());
        let conn = Arc::new(Connection::new(
            d.node.clone(),
            zmq_id.clone(),
            generation,
            self.inner.config.flow.window_bytes,
            self.inner.pump.clone(),
        ));
        let mut restarted = None;
        {
            let mut peers = self.inner.peers();
            let rid = d.node.rid.to_string();
            let e = peers
                .entry(rid.clone())
                .or_insert_with(|| PeerEntry::new(rid, None));
            if let Some(old) = e.conn.take() {
                old.close();
            }
            if let Some(prev) = &e.descriptor
                && prev.node.lifecycle_generation != d.node.lifecycle_generation
            {
                restarted = Some(prev.node.clone());
            }
            // Queue `admit` and the initial credit grant before the connection becomes visible
            // to senders (they look it up under this lock): nothing stamped with the new
            // generation may reach the dialer ahead of the `admit` that announces it.
            let _ = self.inner.pump.send_control(zmq_id.clone(), frames);
            conn.grant_initial_credit();
            e.conn = Some(Arc::clone(&conn));
            e.descriptor = Some(d.clone());
            e.last_update = None;
            e.hello = None;
            e.liveness = Some(Liveness::admitted(
                generation,
                t.probe_interval.as_millis() as u64,
                t.liveness_deadline.as_millis() as u64,
                now,
            ));
            e.state = PeerState::Ready;
            e.epochs += 1;
            e.lost_at = None;
            // Counted before the peer shows Ready (under the same lock), so whoever sees it
            // Ready also sees the admission counted.
            inc(&self.inner.metrics.admitted);
        }
        if let Some(fence) = restarted {
            self.fail_pending(&fence);
        }
        self.announce_if_newer(&conn, admitted_revision);
        self.inner.notify_peers_changed();
    }

    /// A repeated hello on a live admitted connection: idempotent, same generation (wire §5).
    fn on_rehello(&mut self, conn: &Arc<Connection>, h: Hello) {
        let same = {
            let peers = self.inner.peers();
            peers
                .get(conn.peer().rid.as_str())
                .and_then(|e| e.descriptor.as_ref())
                .is_some_and(|d| {
                    d.node == h.descriptor.node
                        && d.security_identity == h.descriptor.security_identity
                        && d.object_role == h.descriptor.object_role
                        && d.mesh_name == h.descriptor.mesh_name
                })
        };
        if !same
            || h.capability != CAPABILITY
            || !self.inner.secret.verify_hello(
                &[0; 32],
                &h.nonce,
                &h.descriptor,
                CAPABILITY,
                &h.proof,
            )
        {
            self.inner
                .metrics
                .protocol_error("rehello_identity_changed");
            return;
        }
        inc(&self.inner.metrics.idempotent_admissions);
        let Ok(acceptor_nonce) = random_bytes::<32>() else {
            return;
        };
        let me = self.inner.descriptor();
        if let Some(frames) = self.admit_frames(me, &h.nonce, acceptor_nonce, conn.generation()) {
            conn.send_control(Leg::Reply, frames);
        }
    }

    /// The encoded `admit` for a dialer's `hello` nonce, proven with our secret.
    fn admit_frames(
        &self,
        me: NodeDescriptor,
        dialer_nonce: &[u8; 32],
        acceptor_nonce: [u8; 32],
        generation: u64,
    ) -> Option<Vec<Vec<u8>>> {
        let proof = self.inner.secret.admit_proof(
            dialer_nonce,
            &acceptor_nonce,
            &me,
            CAPABILITY,
            generation,
        );
        let admit = Record::new(CommandBody::Admit(Admit {
            descriptor: me,
            connection_generation: generation,
            receive_chunk_limit_bytes: RECEIVE_CHUNK_LIMIT,
            max_message_bytes: 0,
            nonce: acceptor_nonce,
            proof,
        }));
        encode(&admit, WireLeg::Reply)
    }

    fn on_admit(&mut self, zmq_id: &Bytes, a: Admit) {
        let Some(rid) = rid_of(zmq_id) else { return };
        let now = self.now();
        let t = self.inner.config.timings.clone();
        let mut peers = self.inner.peers();
        let Some(e) = peers.get_mut(&rid) else {
            inc(&self.inner.metrics.unadmitted);
            return;
        };
        let Some(hs) = e.hello.take() else {
            inc(&self.inner.metrics.unadmitted);
            return;
        };
        let d = &a.descriptor;
        let proof_ok = a.nonce == hs.acceptor_nonce
            && self.inner.secret.verify_admit(
                &hs.dialer_nonce,
                &hs.acceptor_nonce,
                d,
                CAPABILITY,
                a.connection_generation,
                &a.proof,
            );
        let mut verdict = if !proof_ok {
            Err(RejectReason::AuthenticationFailed)
        } else if d.node.rid != rid || d.mesh_name != self.inner.config.mesh_name {
            Err(RejectReason::DescriptorMismatch)
        } else {
            Ok(())
        };
        if verdict.is_ok()
            && let Some(exp) = e.intent.as_ref().and_then(|i| i.expected.as_ref())
        {
            if exp.node.lifecycle_generation != d.node.lifecycle_generation {
                verdict = Err(RejectReason::StaleLifecycle);
            } else if exp.security_identity != d.security_identity
                || exp.object_role != d.object_role
            {
                verdict = Err(RejectReason::DescriptorMismatch);
            }
        }
        if let Err(reason) = verdict {
            inc(&self.inner.metrics.rejected);
            self.inner.metrics.protocol_error("admit_refused");
            // Tell the acceptor, which already counts the connection as admitted.
            let frame = Header::Reset {
                generation: a.connection_generation,
            }
            .encode();
            let _ = self.inner.pump.send_control(zmq_id.clone(), vec![frame]);
            e.state = PeerState::Rejected(reason);
            let backoff = t.reject_backoff.as_millis() as u64;
            self.redial(e, Some(backoff));
            drop(peers);
            self.inner.notify_peers_changed();
            return;
        }
        let restarted = e
            .descriptor
            .as_ref()
            .filter(|p| p.node.lifecycle_generation != d.node.lifecycle_generation)
            .map(|p| p.node.clone());
        if let Some(old) = e.conn.take() {
            old.close();
        }
        let conn = Arc::new(Connection::new(
            d.node.clone(),
            zmq_id.clone(),
            a.connection_generation,
            self.inner.config.flow.window_bytes,
            self.inner.pump.clone(),
        ));
        conn.grant_initial_credit();
        let sent_revision = hs.revision;
        e.conn = Some(Arc::clone(&conn));
        e.receive_chunk_limit =
            (a.receive_chunk_limit_bytes > 0).then_some(a.receive_chunk_limit_bytes);
        e.descriptor = Some(d.clone());
        e.last_update = None;
        e.liveness = Some(Liveness::admitted(
            a.connection_generation,
            t.probe_interval.as_millis() as u64,
            t.liveness_deadline.as_millis() as u64,
            now,
        ));
        e.state = PeerState::Ready;
        e.epochs += 1;
        e.lost_at = None;
        e.redial_at = None;
        // As in `admit`: counted before the peer shows Ready.
        inc(&self.inner.metrics.admitted);
        drop(peers);
        if let Some(fence) = restarted {
            self.fail_pending(&fence);
        }
        self.announce_if_newer(&conn, sent_revision);
        self.inner.notify_peers_changed();
    }

    /// An `update` broadcast while this connection was being admitted skipped it: send the
    /// current descriptor state when it is newer than the one the handshake carried.
    fn announce_if_newer(&self, conn: &Arc<Connection>, sent_revision: u64) {
        let d = self.inner.descriptor();
        if d.descriptor_revision > sent_revision {
            let update = super::node::update_of(&self.inner, &d);
            if let Some(frames) = encode(&Record::new(CommandBody::Update(update)), WireLeg::Send) {
                conn.send_control(Leg::Send, frames);
            }
        }
    }

    fn on_reject(&mut self, zmq_id: &Bytes, r: Reject) {
        let Some(rid) = rid_of(zmq_id) else { return };
        let backoff = self.inner.config.timings.reject_backoff.as_millis() as u64;
        let me = self.inner.descriptor();
        let mut peers = self.inner.peers();
        let Some(e) = peers.get_mut(&rid) else { return };
        if e.hello.take().is_none() {
            inc(&self.inner.metrics.unadmitted);
            return;
        }
        inc(&self.inner.metrics.rejected);
        tracing::info!(peer = %rid, reason = ?r.reason, detail = %r.detail, "peer rejected admission");
        let not_required = r.reason == RejectReason::RoleMismatch
            && me.object_role == zlink_protocol::generated::ObjectRole::Client;
        if not_required {
            // Terminal for this endpoint and configuration: never re-dialed.
            e.state = PeerState::NotRequired;
            if let Some(ep) = e.dial_endpoint().map(str::to_owned) {
                self.disconnect_endpoint(ep, "not required");
            }
            e.dialing = false;
            e.redial_at = Some(u64::MAX);
        } else {
            e.state = PeerState::Rejected(r.reason);
            self.redial(e, Some(backoff));
        }
        drop(peers);
        self.inner.notify_peers_changed();
    }

    /// Dialer: send `hello` again on the live connection (stamped with its generation).
    fn rehello(&mut self, rid: &str) {
        let conn = self.inner.peers().get(rid).and_then(|e| e.conn.clone());
        let Some(conn) = conn else { return };
        let Ok(nonce) = random_bytes::<32>() else {
            return;
        };
        let me = self.inner.descriptor();
        // The proof of a repeated hello binds a fresh nonce; the acceptor answers with the
        // same generation and a proof over its own fresh nonce.
        let proof = self
            .inner
            .secret
            .hello_proof(&[0; 32], &nonce, &me, CAPABILITY);
        let hello = Hello {
            capability: CAPABILITY.into(),
            topology: Topology::RouteMesh,
            channel_name: String::new(),
            descriptor: me,
            max_message_bytes: 0,
            nonce,
            proof,
        };
        if let Some(frames) = encode(&Record::new(CommandBody::Hello(hello)), WireLeg::Request) {
            conn.send_control(Leg::Request, frames);
        }
    }

    // ---- update ----------------------------------------------------------------------

    fn on_update(&mut self, rid: &str, conn: &Arc<Connection>, u: Update) {
        if u.sender != *conn.peer() {
            self.inner.metrics.protocol_error("update_sender_mismatch");
            return;
        }
        let mut peers = self.inner.peers();
        let Some(e) = peers.get_mut(rid) else { return };
        let current = match &e.last_update {
            Some((rev, _)) => *rev,
            None => e.descriptor.as_ref().map_or(0, |d| d.descriptor_revision),
        };
        let same_as_admitted = |d: &NodeDescriptor| {
            d.state == u.state
                && d.placement_weight == u.placement_weight
                && d.maintenance_wave == u.maintenance_wave
                && u.channel_weights.iter().all(|cw| {
                    d.channels.iter().any(|c| {
                        c.channel_name == cw.channel_name
                            && c.role == ChannelRole::Server
                            && c.weight == cw.weight
                    })
                })
        };
        let verdict = match &e.last_update {
            _ if u.descriptor_revision > current => Ok(true),
            Some((rev, body)) if *rev == u.descriptor_revision && *body == u => Ok(false),
            // Same revision as the admitted descriptor: idempotent only with the same contents.
            None if u.descriptor_revision == current
                && e.descriptor.as_ref().is_some_and(same_as_admitted) =>
            {
                Ok(false)
            }
            _ => Err(()),
        };
        match verdict {
            Ok(true) => {
                if let Some(d) = e.descriptor.as_mut() {
                    apply_update(d, &u);
                }
                e.last_update = Some((u.descriptor_revision, u));
                inc(&self.inner.metrics.updates_applied);
                drop(peers);
                self.inner.notify_peers_changed();
            }
            Ok(false) => {}
            Err(()) => {
                // Lower revision, or the same revision with other contents (wire §4).
                self.inner
                    .metrics
                    .protocol_error("descriptor_revision_order");
            }
        }
    }

    // ---- timers ----------------------------------------------------------------------

    /// Dialer: a new pipe whose acceptor greeting has not come within [`REPROBE_AFTER_MS`] is
    /// announced again (an empty message, as `PROBE_ROUTER` does), so the acceptor challenges
    /// us. The first announcement can be lost when the pipe replaced another of the same
    /// identity — after a cut connection through a proxy, found by the chaos run — and then the
    /// pair never met again.
    fn reprobe_if_silent(&self, e: &mut PeerEntry, now: u64) {
        let Some((zmq_id, since)) = e.awaiting_greeting.clone() else {
            return;
        };
        if e.conn.is_some() || e.hello.is_some() || !e.dialing {
            e.awaiting_greeting = None;
        } else if now.saturating_sub(since) >= REPROBE_AFTER_MS {
            tracing::debug!(peer = %e.rid, "no greeting on a new pipe: announcing it again");
            let _ = self
                .inner
                .pump
                .send_control(zmq_id.clone(), vec![Vec::new()]);
            e.awaiting_greeting = Some((zmq_id, now));
        }
    }

    fn on_tick(&mut self) {
        let now = self.now();
        let mut dead = Vec::new();
        let mut probes = Vec::new();
        {
            let mut peers = self.inner.peers();
            for e in peers.values_mut() {
                self.reprobe_if_silent(e, now);
                let Some(l) = e.liveness.as_mut() else {
                    continue;
                };
                match l.tick(now) {
                    LivenessAction::None => {}
                    LivenessAction::SendProbe { probe_id } => {
                        if let Some(c) = &e.conn {
                            probes.push((Arc::clone(c), probe_id));
                        }
                    }
                    LivenessAction::Dead => {
                        // Liveness fails the pending requests right away (below).
                        e.lost_at = Some(u64::MAX);
                        inc(&self.inner.metrics.liveness_deaths);
                        if let Some(c) = &e.conn {
                            dead.push(c.peer().clone());
                        }
                        tracing::info!(peer = %e.rid, "liveness deadline missed: peer not ready");
                        self.drop_connection(e, true, "liveness deadline");
                        self.redial(e, None);
                    }
                }
            }
        }
        for (c, probe_id) in probes {
            let rec = Record::new(CommandBody::LivenessProbe(LivenessProbe {
                probe_id,
                connection_generation: c.generation(),
            }));
            if let Some(f) = encode(&rec, WireLeg::Send) {
                c.send_control(Leg::Send, f);
            }
        }
        if !dead.is_empty() {
            for fence in &dead {
                self.fail_pending(fence);
            }
            self.inner.notify_peers_changed();
        }
        // Epochs lost without a liveness verdict (disconnect, reset, sequence gap): after the
        // liveness deadline without re-admission, the peer counts as dead for its requests.
        let deadline = self.inner.config.timings.liveness_deadline.as_millis() as u64;
        let mut expired = Vec::new();
        {
            let mut peers = self.inner.peers();
            for e in peers.values_mut() {
                if e.conn.is_none()
                    && let Some(t) = e.lost_at
                    && t != u64::MAX
                    && now >= t.saturating_add(deadline)
                {
                    e.lost_at = None;
                    if let Some(d) = &e.descriptor {
                        expired.push(d.node.clone());
                    }
                }
            }
        }
        for fence in &expired {
            self.fail_pending(fence);
        }
        // Safety net for flow control: while running, no consumed charge stays ungranted for
        // longer than a tick, whatever pressure transitions the dispatcher raced with.
        if self.inner.jobs.pressure() == crate::jobs::PressureState::Running {
            let conns: Vec<_> = self
                .inner
                .peers()
                .values()
                .filter_map(|e| e.conn.clone())
                .collect();
            for c in conns {
                c.flush_credit(1);
            }
        }
        self.dial_due();
    }
}

fn apply_update(d: &mut NodeDescriptor, u: &Update) {
    d.descriptor_revision = u.descriptor_revision;
    d.state = u.state;
    d.placement_weight = u.placement_weight;
    d.maintenance_wave = u.maintenance_wave.clone();
    for cw in &u.channel_weights {
        if let Some(c) = d
            .channels
            .iter_mut()
            .find(|c| c.channel_name == cw.channel_name && c.role == ChannelRole::Server)
        {
            c.weight = cw.weight;
        }
    }
}

/// How long a dialer waits for the acceptor's greeting on a new pipe before announcing the
/// pipe again.
const REPROBE_AFTER_MS: u64 = 500;

/// Admission's store check (wire §4): the peer's descriptor is live in the store with the
/// same lifecycle, and its publishing owner still holds that lease.
async fn owner_check(
    store: &dyn super::discovery::DiscoveryBackend,
    mesh: &str,
    d: &NodeDescriptor,
) -> Result<(), (RejectReason, String)> {
    let records = store.list_mesh_nodes(mesh).await.map_err(|e| {
        (
            RejectReason::StaleOwner,
            format!("location store unavailable: {e}"),
        )
    })?;
    let Some(rec) = records.iter().find(|r| r.key.rid == d.node.rid) else {
        return Err((
            RejectReason::StaleOwner,
            "no live descriptor in the location store".into(),
        ));
    };
    if rec.lifecycle_generation != d.node.lifecycle_generation {
        return Err((
            RejectReason::StaleLifecycle,
            "store descriptor has another lifecycle".into(),
        ));
    }
    match store.read_lease(&rec.owner.owner_id).await {
        Ok(LeaseRead::Found { token, .. }) if token == rec.owner => Ok(()),
        Ok(_) => Err((RejectReason::StaleOwner, "owner lease is not live".into())),
        Err(e) => Err((
            RejectReason::StaleOwner,
            format!("location store unavailable: {e}"),
        )),
    }
}

/// Descriptor publication and polling, while the node runs (lease renewal is
/// [`lease_loop`]'s, so a slow poll never delays a renewal and a failed renewal is retried at
/// once).
pub(crate) async fn discovery_loop(inner: Arc<Inner>) {
    let Some(store) = inner.store.clone() else {
        return;
    };
    let t = inner.config.timings.clone();
    let mut poll = tokio::time::interval(t.discovery_poll);
    poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut published_revision = 1u64;
    let mut store_failing = false;
    loop {
        poll.tick().await;
        if inner.shutting_down.load(Ordering::Acquire) || *inner.lease_lost.borrow() {
            return;
        }
        let Some(token) = inner.lease_token() else {
            return;
        };
        let me = inner.descriptor();
        if me.descriptor_revision != published_revision {
            let key = super::discovery::descriptor_key(&me.mesh_name, &me.node.rid);
            match store
                .publish_descriptor(
                    &token,
                    &key,
                    me.node.lifecycle_generation,
                    me.descriptor_revision,
                    super::discovery::encode_descriptor(&me),
                )
                .await
            {
                Ok(_) => published_revision = me.descriptor_revision,
                Err(e) if !store_failing => {
                    tracing::warn!(error = %e, "descriptor publish failed; retrying every poll");
                }
                Err(_) => {}
            }
        }
        // One line when the store stops answering and one when it is back, not one per poll.
        match store.list_mesh_nodes(&me.mesh_name).await {
            Ok(records) => {
                if store_failing {
                    tracing::info!("descriptor poll works again");
                }
                store_failing = false;
                let desired = desired_peers(&me, &records);
                let _ = inner.cmd_tx.send(Cmd::Discovered(desired));
            }
            Err(e) => {
                if !store_failing {
                    tracing::warn!(error = %e, "descriptor poll failed; keeping the last peer set and retrying every poll");
                }
                store_failing = true;
            }
        }
    }
}

/// The owner lease, renewed by the pure [`LeaseKeeper`](super::lease::LeaseKeeper): a renewal
/// every `lease_renew`, a failed one retried after 50 ms doubling up to a quarter of the
/// fencing margin, fenced at the fencing deadline, lost on a stale answer or at the lease
/// deadline (then the task ends and [`Inner::lease_lost`] turns true).
pub(crate) async fn lease_loop(inner: Arc<Inner>) {
    use super::lease::{KeeperState, RenewOutcome};
    let Some(store) = inner.store.clone() else {
        return;
    };
    let ttl = inner.config.timings.lease_ttl;
    let margin = inner.config.timings.fencing_margin;
    let keeper = |f: &mut dyn FnMut(&mut super::lease::LeaseKeeper)| {
        let mut k = inner
            .lease_keeper
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(k) = k.as_mut() {
            f(k);
            inner
                .fencing_deadline_ms
                .store(k.fencing_deadline_ms(), Ordering::Release);
            return Some((k.state(), k.next_wake_ms(), k.lease_deadline_ms()));
        }
        None
    };
    let mut failing = false;
    loop {
        if inner.shutting_down.load(Ordering::Acquire) {
            return;
        }
        let Some(token) = inner.lease_token() else {
            return;
        };
        let now = inner.now_ms();
        let mut start = false;
        let Some((state, wake, lease_deadline)) = keeper(&mut |k| start = k.tick(now)) else {
            return;
        };
        if let KeeperState::Lost { reason, .. } = state {
            tracing::error!(
                ?reason,
                "owner lease lost: this host admits no new object work"
            );
            inner.lease_lost.send_replace(true);
            return;
        }
        if start && !inner.faults.pause_lease_renewal.load(Ordering::Acquire) {
            let sent_ms = inner.now_ms();
            // Bounded by the lease deadline: a hung call must not hide an expiry.
            let within = Duration::from_millis(lease_deadline.saturating_sub(sent_ms).max(1));
            let outcome = match tokio::time::timeout(within, store.renew_lease(&token, ttl)).await {
                Ok(Ok(grant)) => {
                    if failing {
                        tracing::info!("owner lease renewed again");
                    }
                    failing = false;
                    RenewOutcome::Renewed {
                        sent_ms,
                        fencing_delay_ms: crate::millis(grant.fencing_delay(margin)),
                    }
                }
                Ok(Err(zlink_store::StoreError::Stale { .. })) => RenewOutcome::Stale,
                Ok(Err(e)) => {
                    if !failing {
                        tracing::warn!(error = %e, "owner lease renewal failed; retrying");
                    }
                    failing = true;
                    RenewOutcome::Failed
                }
                Err(_) => {
                    failing = true;
                    RenewOutcome::Failed
                }
            };
            let done = inner.now_ms();
            keeper(&mut |k| k.renewal(done, outcome));
            continue;
        }
        let now = inner.now_ms();
        let sleep_ms = if start {
            // Renewals paused by fault injection: look again shortly (the deadlines still
            // apply).
            20
        } else {
            wake.unwrap_or(now).saturating_sub(now).max(1)
        };
        tokio::select! {
            () = tokio::time::sleep(Duration::from_millis(sleep_ms)) => {}
            () = inner.faults.changed.notified() => {}
        }
    }
}

/// The application part of a decoded object record.
fn app(
    metadata: Option<zlink_protocol::metadata::Metadata>,
    payload: Option<TypedPayload>,
) -> ObjectPayload {
    ObjectPayload {
        metadata,
        payload: payload.unwrap_or_default(),
        bound_session: None,
    }
}
