//! The state a MeshNode's tasks share (the reactor, the dispatcher, the lease and discovery
//! loops) and its handle: peers, pending requests, identifiers, descriptor, lease and fencing
//! deadline, metrics, fault switches. Crate-private: the public surface is [`super::MeshNode`].

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use tokio::sync::{mpsc, oneshot, watch};
use zlink_protocol::codec::Writer;
use zlink_protocol::envelope::TypedPayload;
use zlink_protocol::generated::{ChannelRole, NodeDescriptor, NodeFence, RuntimeState};
use zlink_protocol::record::{Record, WireContext};
use zlink_store::types::OwnerToken;

use super::auth::MeshSecret;
use super::config::MeshNodeConfig;
use super::connection::{ConnRef, Leg};
use super::discovery::DiscoveryBackend;
use super::dispatch::Dispatcher;
use super::peer::{PeerEntry, PeerState};
use super::reactor::Cmd;
use crate::call::error::{CallError, ErrorKind};
use crate::call::ids::{CorrelationIdAllocator, OperationIdAllocator, ReplyRouteIdAllocator};
use crate::call::pending::PendingTable;
use crate::jobs::JobQueue;
use crate::select::SmoothWeighted;
use crate::transport::header::Packed;
use crate::transport::pump::PumpHandle;

/// Room reserved for frame 0 of an application record (head, fences, tails): most are shorter,
/// a longer one grows the buffer once.
const FRAME0_ESTIMATE: usize = 160;

/// Append one frame to `msg`, written by `encode` straight into the message's buffer.
///
/// # Errors
/// `InvalidOperation` for what `encode` refuses, or for a frame over 4 GiB (or past the 255th,
/// which no record reaches).
pub(crate) fn push_encoded(
    msg: &mut Packed,
    encode: impl FnOnce(&mut Writer) -> zlink_protocol::error::Result<()>,
) -> Result<(), CallError> {
    let appended = msg
        .push_with(|buf| {
            let mut w = Writer::from_vec(std::mem::take(buf));
            let r = encode(&mut w);
            *buf = w.into_vec();
            r
        })
        .map_err(|e| CallError::new(ErrorKind::InvalidOperation, e.to_string()))?;
    if appended {
        Ok(())
    } else {
        Err(CallError::new(
            ErrorKind::InvalidOperation,
            "record frame over 4 GiB",
        ))
    }
}

pub(crate) type Waker = oneshot::Sender<Result<TypedPayload, CallError>>;

/// Counters of a node (Prometheus names in `docs/architecture.md`).
#[derive(Debug, Default)]
pub struct MeshMetrics {
    /// Protocol errors by kind (`ProtocolError::kind()` names plus transport-level labels).
    pub(crate) protocol_errors: Mutex<BTreeMap<String, u64>>,
    /// Records dropped because they belonged to another connection generation.
    pub stale_generation: AtomicU64,
    /// Records from a peer that was not admitted.
    pub unadmitted: AtomicU64,
    /// Connections torn down for a sequence gap.
    pub sequence_gaps: AtomicU64,
    /// Peers declared dead by liveness.
    pub liveness_deaths: AtomicU64,
    /// Admissions accepted / rejected.
    pub admitted: AtomicU64,
    /// Admissions rejected (either side).
    pub rejected: AtomicU64,
    /// Application records handed to handlers.
    pub delivered: AtomicU64,
    /// Of those, records of a concurrent handler started straight from their claim, without
    /// the hand-off to the handler's runner task (a diagnostic of that fast path).
    pub direct_starts: AtomicU64,
    /// Application records for which no handler is registered.
    pub no_handler: AtomicU64,
    /// Handlers that panicked (their record ended as `HandlerFailed`).
    pub handler_panics: AtomicU64,
    /// Terminal replies sent to requesters.
    pub replies_sent: AtomicU64,
    /// Replies that could not be routed back to the requester.
    pub reply_unroutable: AtomicU64,
    /// Commands this node does not serve (yet) that arrived anyway.
    pub unserved_commands: AtomicU64,
    /// Relayed terminals (`replyRelay`, 33) accepted and acknowledged.
    pub reply_relays_accepted: AtomicU64,
    /// Relayed terminals naming another lease of this node (dropped).
    pub reply_relays_dropped: AtomicU64,
    /// Spot / Actor records whose route named an earlier lifecycle of this node (a sender's
    /// stale cache; answered `StaleRoute` for requests, dropped for sends).
    pub stale_object_routes: AtomicU64,
    /// Repeated `hello` on a live connection answered with the same generation.
    pub idempotent_admissions: AtomicU64,
    /// `update` records applied.
    pub updates_applied: AtomicU64,
    /// Round-trip latency of every request this node issued (node direct, select-one, object),
    /// from submission to its terminal result.
    pub request_latency: crate::metrics::Histogram,
}

impl MeshMetrics {
    pub(crate) fn protocol_error(&self, kind: &str) {
        let mut m = self
            .protocol_errors
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *m.entry(kind.to_owned()).or_insert(0) += 1;
    }

    /// Protocol errors counted per kind.
    pub fn protocol_errors(&self) -> BTreeMap<String, u64> {
        self.protocol_errors
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

pub(crate) struct Ids {
    pub(crate) operation: OperationIdAllocator,
    pub(crate) reply_route: ReplyRouteIdAllocator,
    pub(crate) correlation: CorrelationIdAllocator,
}

/// State shared by the node's tasks and its handle.
pub(crate) struct Inner {
    pub(crate) config: MeshNodeConfig,
    pub(crate) rid: zlink_protocol::shared_str::SharedStr,
    pub(crate) lifecycle: u64,
    pub(crate) endpoint: String,
    pub(crate) owner_id: String,
    pub(crate) descriptor: Mutex<NodeDescriptor>,
    pub(crate) pump: PumpHandle,
    pub(crate) secret: MeshSecret,
    /// Looked up on every record (foldhash: seeded, fast for short keys).
    pub(crate) peers: Mutex<foldhash::HashMap<String, PeerEntry>>,
    pub(crate) pending: Mutex<PendingTable<Waker, TypedPayload>>,
    pub(crate) ids: Mutex<Ids>,
    pub(crate) jobs: JobQueue,
    pub(crate) metrics: MeshMetrics,
    pub(crate) shutting_down: AtomicBool,
    pub(crate) cmd_tx: mpsc::UnboundedSender<Cmd>,
    pub(crate) dispatcher: Dispatcher,
    pub(crate) store: Option<Arc<dyn DiscoveryBackend>>,
    pub(crate) lease: Mutex<Option<OwnerToken>>,
    pub(crate) epoch: Instant,
    pub(crate) peer_change: watch::Sender<u64>,
    pub(crate) placement_capacity: AtomicU64,
    pub(crate) faults: Faults,
    /// Key of the OperationId salt (per lifecycle, from the CSPRNG).
    pub(crate) op_key: ring::hmac::Key,
    /// Select-one state of every Channel this node is registered on (Client or Server).
    pub(crate) selectors: Mutex<foldhash::HashMap<String, ChannelSelector>>,
    /// The object runtime, once attached.
    pub(crate) object_sink: std::sync::OnceLock<Arc<dyn super::ObjectSink>>,
    /// Fencing deadline on the node's clock ([`Inner::now_ms`]): the last confirmed lease
    /// deadline minus the fencing margin, measured from when that claim or renewal was sent.
    /// `u64::MAX` without a store.
    pub(crate) fencing_deadline_ms: AtomicU64,
    /// The owner-lease keeper (issue 20 item 1); `None` without a store. The lease task is the
    /// only writer; it mirrors the fencing deadline into [`Self::fencing_deadline_ms`].
    pub(crate) lease_keeper: Mutex<Option<super::lease::LeaseKeeper>>,
    /// `true` once the owner lease is lost for good (a stale answer, or its deadline passed).
    pub(crate) lease_lost: watch::Sender<bool>,
}

/// Smooth weighted round-robin state of one Channel, with the peer-table version its
/// candidate set was built from.
pub(crate) struct ChannelSelector {
    pub(crate) version: Option<u64>,
    pub(crate) selector: SmoothWeighted<String>,
}

/// Fault injection for tests and chaos drills (see [`MeshNode::set_frozen`]).
#[derive(Debug, Default)]
pub(crate) struct Faults {
    pub(crate) frozen: AtomicBool,
    pub(crate) drop_liveness_acks: AtomicBool,
    pub(crate) pause_lease_renewal: AtomicBool,
    pub(crate) changed: tokio::sync::Notify,
}

impl Inner {
    pub(crate) fn peers(&self) -> MutexGuard<'_, foldhash::HashMap<String, PeerEntry>> {
        self.peers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(crate) fn pending(&self) -> MutexGuard<'_, PendingTable<Waker, TypedPayload>> {
        self.pending
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(crate) fn descriptor(&self) -> NodeDescriptor {
        self.descriptor
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Unpredictable high-word salt for the OperationId with this low word.
    pub(crate) fn operation_salt(&self, low: u64) -> u64 {
        let tag = ring::hmac::sign(&self.op_key, &low.to_be_bytes());
        let mut w = [0u8; 8];
        w.copy_from_slice(&tag.as_ref()[..8]);
        u64::from_be_bytes(w)
    }

    /// Milliseconds of the node's monotonic clock.
    /// The owner lease token (`None` without a store, or once released).
    pub(crate) fn lease_token(&self) -> Option<OwnerToken> {
        self.lease
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    pub(crate) fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    pub(crate) fn fence(&self) -> NodeFence {
        NodeFence {
            rid: self.rid.clone(),
            lifecycle_generation: self.lifecycle,
        }
    }

    pub(crate) fn notify_peers_changed(&self) {
        self.peer_change.send_modify(|v| *v += 1);
    }

    /// Select-one (glossary §7): pick the Server of `channel` that gets this message, among
    /// ready peers whose admitted descriptor has a positive-weight Server membership of the
    /// Channel and state `Serving` (draining and other states take no new work), by smooth
    /// weighted round-robin; return its connection. The caller submits on exactly that
    /// connection and never resubmits elsewhere.
    pub(crate) fn select_channel(&self, channel: &str) -> Result<ConnRef, CallError> {
        let version = *self.peer_change.borrow();
        let mut selectors = self
            .selectors
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let Some(s) = selectors.get_mut(channel) else {
            return Err(CallError::new(
                ErrorKind::InvalidOperation,
                format!(
                    "channel {channel:?} is not registered on this node (it needs a Client or \
                     Server membership)"
                ),
            ));
        };
        let peers = self.peers();
        if s.version != Some(version) {
            // The candidate set changes only with admitted descriptors and updates; ordered by
            // RID so ties resolve the same way on every run.
            let mut candidates: Vec<(String, u16)> =
                peers
                    .iter()
                    .filter_map(|(rid, e)| {
                        let m =
                            e.descriptor.as_ref()?.channels.iter().find(|m| {
                                m.channel_name == channel && m.role == ChannelRole::Server
                            })?;
                        Some((rid.clone(), m.weight.min(crate::select::MAX_WEIGHT)))
                    })
                    .collect();
            candidates.sort();
            if s.selector.set_candidates(candidates).is_ok() {
                s.version = Some(version);
            }
        }
        let picked = s.selector.pick_filtered(|rid| {
            peers.get(rid).is_some_and(|e| {
                e.state == PeerState::Ready
                    && e.conn.is_some()
                    && e.descriptor
                        .as_ref()
                        .is_some_and(|d| d.state == RuntimeState::Serving)
            })
        });
        let conn = picked
            .and_then(|rid| peers.get(&rid))
            .and_then(|e| e.conn.clone());
        conn.ok_or_else(|| {
            CallError::new(
                ErrorKind::Unavailable,
                format!(
                    "no ready, serving Server with a positive weight for channel {channel:?} in \
                     mesh {}",
                    self.config.mesh_name
                ),
            )
        })
    }

    /// The admitted connection to `rid`, if ready.
    pub(crate) fn ready_conn(&self, rid: &str) -> Result<ConnRef, CallError> {
        let peers = self.peers();
        match peers.get(rid) {
            Some(p) if p.state == PeerState::Ready => p.conn.clone().ok_or_else(|| {
                CallError::new(ErrorKind::Unavailable, format!("no connection to {rid}"))
            }),
            Some(p) => Err(CallError::new(
                ErrorKind::Unavailable,
                format!("peer {rid} is not ready ({:?})", p.state),
            )),
            None => Err(CallError::new(
                ErrorKind::Unavailable,
                format!("no route to node {rid} in mesh {}", self.config.mesh_name),
            )),
        }
    }

    /// Encode and send a flow-controlled application record on `conn`.
    pub(crate) async fn send_app_record(
        &self,
        conn: &ConnRef,
        leg: Leg,
        record: &Record,
    ) -> Result<(), CallError> {
        let msg = self.encode_packed(record, WireContext::route_mesh(leg.wire()))?;
        self.send_packed(conn, leg, msg).await
    }

    /// [`Inner::send_app_record`] without waiting: `true` once sent; `false` — nothing sent —
    /// when it cannot go at once (no credit or queue room now, the connection closed, the
    /// record too large, an encoding error); the waiting path then sends it or reports why.
    pub(crate) fn try_send_app_record(&self, conn: &ConnRef, leg: Leg, record: &Record) -> bool {
        let Ok(msg) = self.encode_packed(record, WireContext::route_mesh(leg.wire())) else {
            return false;
        };
        let bytes = msg.record_bytes();
        if self.check_record_size(bytes).is_err() {
            return false;
        }
        let Some(permit) = conn.try_acquire_credit(bytes) else {
            return false;
        };
        let Ok(Some(slot)) = self.pump.try_reserve_data(bytes) else {
            return false;
        };
        if conn.is_closed() {
            return false;
        }
        conn.send_data(leg, permit, slot, msg);
        true
    }

    /// Encode `record` straight into a [`Packed::stamped`] message in a buffer of the pump's
    /// pool: the same checks and bytes as [`Record::encode`], without a buffer per frame and a
    /// copy of each into the message (runtime/tests/allocations.rs counts the difference).
    pub(crate) fn encode_packed(
        &self,
        record: &Record,
        ctx: WireContext,
    ) -> Result<Packed, CallError> {
        let capacity = 4
            + FRAME0_ESTIMATE
            + record.metadata.as_ref().map_or(0, |m| 4 + m.encoded_len())
            + record.payload.as_ref().map_or(0, |p| 4 + p.encoded_len());
        let mut msg = Packed::stamped_in(self.pump.buffer(), capacity);
        push_encoded(&mut msg, |w| record.encode_frame0(ctx, w))?;
        if let Some(m) = &record.metadata {
            push_encoded(&mut msg, |w| {
                m.encode_into(w);
                Ok(())
            })?;
        }
        if let Some(p) = &record.payload {
            push_encoded(&mut msg, |w| p.encode_into(w))?;
        }
        Ok(msg)
    }

    /// A record of `bytes` bytes fits `flow.max_message_bytes`.
    fn check_record_size(&self, bytes: usize) -> Result<(), CallError> {
        if bytes as u64 > self.config.flow.max_message_bytes {
            return Err(CallError::new(
                ErrorKind::InvalidOperation,
                format!(
                    "record of {bytes} bytes exceeds flow.max_message_bytes ({})",
                    self.config.flow.max_message_bytes
                ),
            ));
        }
        Ok(())
    }

    /// Send a flow-controlled application record, already in a [`Packed::stamped`] message.
    pub(crate) async fn send_packed(
        &self,
        conn: &ConnRef,
        leg: Leg,
        msg: Packed,
    ) -> Result<(), CallError> {
        let bytes = msg.record_bytes();
        self.check_record_size(bytes)?;
        let permit = conn.acquire_credit(bytes).await?;
        let slot = self
            .pump
            .reserve_data(bytes)
            .await
            .map_err(|_| CallError::new(ErrorKind::ShuttingDown, "transport stopped"))?;
        if conn.is_closed() {
            return Err(CallError::new(
                ErrorKind::Unavailable,
                format!("connection to {} was replaced", conn.peer().rid),
            ));
        }
        conn.send_data(leg, permit, slot, msg);
        Ok(())
    }
}
