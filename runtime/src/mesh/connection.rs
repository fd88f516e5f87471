//! One admitted physical connection to a peer — one **connection epoch** (wire §4, §5).
//!
//! A `Connection` lives from `admit` until the connection is torn down (liveness deadline,
//! sequence gap, pipe replaced, peer reset, shutdown). A new physical connection is always a
//! new `Connection` with a new generation, so a sender holding an `Arc<Connection>` can tell
//! whether the epoch it sent on is still current ([`Connection::is_closed`]) and resend a batch
//! if it needs to (relocation does).
//!
//! Per epoch and direction it provides:
//! * **FIFO order**: every record is stamped with the next sequence number under one lock that
//!   also enqueues it to the pump, so sequence order is queue order is wire order; the receiver
//!   delivers only in sequence and treats a gap as a broken connection.
//! * **Credit-based flow control** for application records: a sender may have at most
//!   `window` charge bytes in flight (sent and not yet consumed by the receiver's dispatcher).
//!   [`Connection::bytes_in_flight`] is the per-connection in-flight accounting.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

use bytes::Bytes;
use tokio::sync::{Notify, Semaphore, SemaphorePermit};
use zlink_protocol::generated::NodeFence;

use crate::call::error::{CallError, ErrorKind};
use crate::transport::header::{Header, Packed, Stamp};
use crate::transport::pump::{DataSlot, PumpHandle};

/// Leg of a service record, chosen by the sender.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Leg {
    /// Plain send.
    Send,
    /// Opens a request.
    Request,
    /// Reply leg.
    Reply,
}

impl Leg {
    /// The leg as the record codec names it.
    pub(crate) const fn wire(self) -> zlink_protocol::record::Leg {
        match self {
            Self::Send => zlink_protocol::record::Leg::Send,
            Self::Request => zlink_protocol::record::Leg::Request,
            Self::Reply => zlink_protocol::record::Leg::Reply,
        }
    }
}

/// One admitted connection epoch.
#[derive(Debug)]
pub struct Connection {
    peer: Arc<NodeFence>,
    zmq_id: Bytes,
    generation: u64,
    window: u32,
    pump: PumpHandle,
    /// Sender side: charge we may still send (grants minus charge sent).
    credit: Semaphore,
    /// Sender side: the peer's receive window, learned from its first grant (0 until then).
    peer_window: AtomicU64,
    /// Sender side: the highest cumulative limit the peer granted.
    peer_limit: AtomicU64,
    /// Sender side: cumulative charge sent.
    sent_charge: AtomicU64,
    /// Sender side: signalled at the first grant and at close.
    granted: Notify,
    next_seq: Mutex<u64>,
    closed: AtomicBool,
    /// Receiver side: cumulative charge we consumed of the peer's records.
    consumed: AtomicU64,
    /// Receiver side: cumulative charge received (must stay ≤ the limit we granted).
    received: AtomicU64,
    /// Receiver side: `consumed` at the time of the last grant.
    credit_sent: AtomicU64,
    /// Receiver side: the sequence number the next record must carry (from 1).
    recv_seq: AtomicU64,
    /// Records sent on this epoch.
    sent_records: AtomicU64,
    /// Sender side: frame 0 of a tail-less `NodeSend` to this peer, encoded once by the
    /// generated encoder. It depends only on the two fences, which are fixed for the epoch.
    send_head: OnceLock<Bytes>,
    /// Receiver side: frame 0 of the first tail-less `NodeSend` received on this epoch that
    /// passed every check (source = the admitted peer, target = this node). A later record
    /// with byte-identical frame 0 has the same body and passes the same checks, so it skips
    /// decoding it.
    recv_send_head: OnceLock<Bytes>,
}

impl Connection {
    pub(crate) fn new(
        peer: NodeFence,
        zmq_id: Bytes,
        generation: u64,
        window: u32,
        pump: PumpHandle,
    ) -> Self {
        Self {
            peer: Arc::new(peer),
            zmq_id,
            generation,
            window,
            pump,
            credit: Semaphore::new(0),
            peer_window: AtomicU64::new(0),
            peer_limit: AtomicU64::new(0),
            sent_charge: AtomicU64::new(0),
            granted: Notify::new(),
            next_seq: Mutex::new(0),
            closed: AtomicBool::new(false),
            consumed: AtomicU64::new(0),
            received: AtomicU64::new(0),
            credit_sent: AtomicU64::new(0),
            recv_seq: AtomicU64::new(1),
            sent_records: AtomicU64::new(0),
            send_head: OnceLock::new(),
            recv_send_head: OnceLock::new(),
        }
    }

    /// Frame 0 of a tail-less `NodeSend` to this peer, encoded by `encode` on first use.
    ///
    /// # Errors
    /// What `encode` returns; nothing is cached then.
    pub(crate) fn send_head<E>(
        &self,
        encode: impl FnOnce(&NodeFence) -> Result<Vec<u8>, E>,
    ) -> Result<Bytes, E> {
        if let Some(h) = self.send_head.get() {
            return Ok(h.clone());
        }
        let head = Bytes::from(encode(&self.peer)?);
        Ok(self.send_head.get_or_init(|| head).clone())
    }

    /// Whether `frame0` is byte-identical to a `NodeSend` frame 0 already validated on this
    /// epoch (see [`Connection::remember_send_head`]).
    pub(crate) fn is_validated_send_head(&self, frame0: &[u8]) -> bool {
        self.recv_send_head.get().is_some_and(|h| h[..] == *frame0)
    }

    /// Remember a validated tail-less `NodeSend` frame 0 (the first one wins). Copied: a
    /// slice would keep the whole received buffer alive for the life of the connection.
    pub(crate) fn remember_send_head(&self, frame0: &[u8]) {
        if self.recv_send_head.get().is_none() {
            let _ = self.recv_send_head.set(Bytes::copy_from_slice(frame0));
        }
    }

    /// Receiver side: accept `seq` if it is the next one expected (and expect the one after).
    /// A gap means a record was lost: the epoch is broken.
    pub(crate) fn take_recv_seq(&self, seq: u64) -> bool {
        // Only the reactor receives, so load-then-store cannot race.
        let expected = self.recv_seq.load(Ordering::Acquire);
        if seq != expected {
            return false;
        }
        self.recv_seq.store(expected + 1, Ordering::Release);
        true
    }

    /// The peer as a shared handle (what handlers see as the message source).
    pub fn peer_shared(&self) -> &Arc<NodeFence> {
        &self.peer
    }

    /// The peer (RID and lifecycle generation).
    pub fn peer(&self) -> &NodeFence {
        &self.peer
    }

    /// The connection generation (epoch) issued by `admit`.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Whether this epoch ended.
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Application charge bytes sent on this epoch and not yet consumed by the peer (as far
    /// as its grants tell).
    pub fn bytes_in_flight(&self) -> u64 {
        let consumed_by_peer = self
            .peer_limit
            .load(Ordering::Acquire)
            .saturating_sub(self.peer_window.load(Ordering::Acquire));
        self.sent_charge
            .load(Ordering::Acquire)
            .saturating_sub(consumed_by_peer)
    }

    /// This side's receive window (what it grants the peer).
    pub fn window(&self) -> u32 {
        self.window
    }

    /// The peer's receive window, once its first grant arrived.
    pub fn peer_window(&self) -> Option<u32> {
        match self.peer_window.load(Ordering::Acquire) {
            0 => None,
            w => Some(u32::try_from(w).unwrap_or(u32::MAX)),
        }
    }

    /// Records sent on this epoch.
    pub fn sent_records(&self) -> u64 {
        self.sent_records.load(Ordering::Relaxed)
    }

    pub(crate) fn zmq_id(&self) -> &Bytes {
        &self.zmq_id
    }

    /// End the epoch: waiting senders fail with `Unavailable`.
    pub(crate) fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.credit.close();
        self.granted.notify_waiters();
    }

    /// The charge of a record of `bytes` bytes sent to a receiver whose window is `window`:
    /// its size, capped at half that window.
    ///
    /// The receiver returns credit in steps of a quarter window ([`Self::credit_step`]), so up
    /// to a quarter window of consumed charge may sit unreturned while the peer is idle. With
    /// every charge ≤ half the window, a sender whose records were all consumed always has
    /// room for its next record: no credit is needed "on idle", and none is sent per record (a
    /// credit record per request would double the messages of request/reply).
    fn charge(bytes: usize, window: u64) -> u32 {
        u32::try_from(bytes)
            .unwrap_or(u32::MAX)
            .min(u32::try_from(window / 2).unwrap_or(u32::MAX))
            .max(1)
    }

    /// Receiver side: the charge a record of `bytes` bytes must carry.
    pub(crate) fn expected_charge(&self, bytes: usize) -> u32 {
        Self::charge(bytes, u64::from(self.window))
    }

    /// Consumed charge worth a credit record: a quarter window.
    pub(crate) fn credit_step(&self) -> u64 {
        u64::from(self.window / 4).max(1)
    }

    /// Sender side, without waiting: credit for a record of `bytes` bytes if the window is known
    /// and the credit is there now (the fast path of [`Connection::acquire_credit`]).
    pub(crate) fn try_acquire_credit(&self, bytes: usize) -> Option<SemaphorePermit<'_>> {
        if self.is_closed() {
            return None;
        }
        let window = self.peer_window.load(Ordering::Acquire);
        if window == 0 {
            return None;
        }
        self.credit
            .try_acquire_many(Self::charge(bytes, window))
            .ok()
    }

    /// Sender side: wait for the peer's first grant (its window), then for credit for a record
    /// of `bytes` bytes. Cancel-safe: the permit returns if dropped unsent.
    pub(crate) async fn acquire_credit(
        &self,
        bytes: usize,
    ) -> Result<SemaphorePermit<'_>, CallError> {
        let closed = || {
            CallError::new(
                ErrorKind::Unavailable,
                format!("connection to {} was replaced or closed", self.peer.rid),
            )
        };
        // Fast path: the window is known and the credit is there; no wait registration.
        if let Some(permit) = self.try_acquire_credit(bytes) {
            return Ok(permit);
        }
        let window = loop {
            let notified = self.granted.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.is_closed() {
                return Err(closed());
            }
            match self.peer_window.load(Ordering::Acquire) {
                0 => notified.await,
                w => break w,
            }
        };
        self.credit
            .acquire_many(Self::charge(bytes, window))
            .await
            .map_err(|_| closed())
    }

    /// Stamp `msg` (a [`Packed::stamped`] message) with the next sequence number and hand it
    /// to `enqueue` under the sequence lock, so sequence order is queue order.
    fn stamp_and<F: FnOnce(Packed)>(&self, leg: Leg, charge: u32, mut msg: Packed, enqueue: F) {
        let mut seq = self
            .next_seq
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *seq += 1;
        let stamp = Stamp {
            generation: self.generation,
            seq: *seq,
            charge,
        };
        let header = match leg {
            Leg::Send => Header::Send(stamp),
            Leg::Request => Header::Request(stamp),
            Leg::Reply => Header::Reply(stamp),
        };
        if let Some(bytes) = header.encode_stamp() {
            // Every caller builds `msg` with `Packed::stamped`, so the slot is there.
            let stamped = msg.stamp(&bytes);
            debug_assert!(stamped, "record message without a transport-header slot");
        }
        enqueue(msg);
        drop(seq);
        self.sent_records.fetch_add(1, Ordering::Relaxed);
    }

    /// Send a flow-controlled application record whose credit and queue room are reserved.
    pub(crate) fn send_data(
        &self,
        leg: Leg,
        permit: SemaphorePermit<'_>,
        slot: DataSlot,
        msg: Packed,
    ) {
        let charge = permit.num_permits() as u32;
        // The credit comes back with the peer's next grant, not when the permit drops.
        permit.forget();
        self.sent_charge
            .fetch_add(u64::from(charge), Ordering::AcqRel);
        self.stamp_and(leg, charge, msg, |m| slot.send(self.zmq_id.clone(), m));
    }

    /// Send a record that bypasses flow control (admission, liveness, replies, update).
    pub(crate) fn send_control(&self, leg: Leg, frames: Vec<Vec<u8>>) -> bool {
        let Some(msg) = Packed::stamped_from_frames(&frames) else {
            return false;
        };
        self.send_control_packed(leg, msg)
    }

    /// [`Connection::send_control`] of a record already encoded into a [`Packed::stamped`]
    /// message (no buffer per frame, no copy into the message).
    pub(crate) fn send_control_packed(&self, leg: Leg, msg: Packed) -> bool {
        let mut ok = true;
        self.stamp_and(leg, 0, msg, |m| {
            ok = self
                .pump
                .send_control_packed(self.zmq_id.clone(), m)
                .is_ok();
        });
        ok
    }

    /// Sender side: the peer granted a cumulative `limit` of charge on this epoch. The first
    /// grant also tells its window (nothing was consumed yet, so the limit is the window).
    pub(crate) fn on_credit(&self, limit: u64) {
        let prev = self.peer_limit.fetch_max(limit, Ordering::AcqRel);
        if prev == 0 && limit > 0 {
            self.peer_window.store(limit, Ordering::Release);
            self.granted.notify_waiters();
        }
        if limit > prev {
            let delta = usize::try_from(limit - prev).unwrap_or(usize::MAX);
            // The semaphore's own bound; a peer cannot make it overflow.
            let room = Semaphore::MAX_PERMITS.saturating_sub(self.credit.available_permits());
            self.credit.add_permits(delta.min(room));
        }
    }

    /// Receiver side: grant the peer our window at the start of the epoch.
    pub(crate) fn grant_initial_credit(&self) {
        self.send_grant(0);
    }

    fn send_grant(&self, consumed: u64) {
        let frame = Header::Credit {
            generation: self.generation,
            limit: consumed + u64::from(self.window),
        }
        .encode();
        let _ = self.pump.send_control(self.zmq_id.clone(), vec![frame]);
    }

    /// Receiver side: a record with `charge` arrived. Returns false when the peer exceeded
    /// what it was granted (a protocol violation).
    pub(crate) fn on_received(&self, charge: u32) -> bool {
        let received =
            self.received.fetch_add(u64::from(charge), Ordering::AcqRel) + u64::from(charge);
        received <= self.credit_sent.load(Ordering::Acquire) + u64::from(self.window)
    }

    /// Receiver side: `charge` bytes were consumed (claimed by the dispatcher, or dropped).
    pub(crate) fn on_consumed(&self, charge: u32) {
        if charge > 0 {
            self.consumed.fetch_add(u64::from(charge), Ordering::AcqRel);
        }
    }

    /// Receiver side: grant more if at least `min_delta` charge was consumed since the last
    /// grant.
    pub(crate) fn flush_credit(&self, min_delta: u64) {
        if self.is_closed() {
            return;
        }
        let consumed = self.consumed.load(Ordering::Acquire);
        let sent = self.credit_sent.load(Ordering::Acquire);
        if consumed > sent
            && consumed - sent >= min_delta.max(1)
            && self
                .credit_sent
                .compare_exchange(sent, consumed, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        {
            self.send_grant(consumed);
        }
    }
}

/// A shared handle.
pub type ConnRef = Arc<Connection>;
