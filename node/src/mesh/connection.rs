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
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use bytes::Bytes;
use tokio::sync::{Semaphore, SemaphorePermit};
use zlink_protocol::generated::NodeFence;

use crate::call::error::{CallError, ErrorKind};
use crate::transport::header::{Header, Stamp};
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

/// One admitted connection epoch.
#[derive(Debug)]
pub struct Connection {
    peer: NodeFence,
    zmq_id: Bytes,
    generation: u64,
    window: u32,
    pump: PumpHandle,
    credit: Semaphore,
    next_seq: Mutex<u64>,
    closed: AtomicBool,
    /// Cumulative charge the peer reported consumed (sender side).
    credited: AtomicU64,
    /// Cumulative charge we consumed of the peer's records (receiver side).
    consumed: AtomicU64,
    /// Cumulative charge received from the peer (receiver side; must stay ≤ consumed + window).
    received: AtomicU64,
    /// `consumed` value last sent in a credit record.
    credit_sent: AtomicU64,
    /// Records sent on this epoch.
    sent_records: AtomicU64,
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
            peer,
            zmq_id,
            generation,
            window,
            pump,
            credit: Semaphore::new(window as usize),
            next_seq: Mutex::new(0),
            closed: AtomicBool::new(false),
            credited: AtomicU64::new(0),
            consumed: AtomicU64::new(0),
            received: AtomicU64::new(0),
            credit_sent: AtomicU64::new(0),
            sent_records: AtomicU64::new(0),
        }
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

    /// Application charge bytes sent on this epoch and not yet consumed by the peer.
    pub fn bytes_in_flight(&self) -> u64 {
        (self.window as u64).saturating_sub(self.credit.available_permits() as u64)
    }

    /// The credit window.
    pub fn window(&self) -> u32 {
        self.window
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
    }

    /// Charge for a record of `bytes` bytes, capped at half the window.
    ///
    /// The receiver returns credit in steps of a quarter window ([`Self::credit_step`]), so up
    /// to a quarter window of consumed charge may sit unreturned while the peer is idle. With
    /// every charge ≤ half the window, a sender whose records were all consumed always has
    /// room for its next record: no credit is ever needed "on idle", and none is sent per
    /// record (a credit record per request would double the messages of request/reply).
    pub(crate) fn charge_for(&self, bytes: usize) -> u32 {
        u32::try_from(bytes)
            .unwrap_or(u32::MAX)
            .min(self.window / 2)
            .max(1)
    }

    /// Consumed charge worth a credit record: a quarter window.
    pub(crate) fn credit_step(&self) -> u64 {
        u64::from(self.window / 4).max(1)
    }

    /// Wait for `charge` bytes of credit. Cancel-safe: the permit returns if dropped unsent.
    pub(crate) async fn acquire_credit(
        &self,
        charge: u32,
    ) -> Result<SemaphorePermit<'_>, CallError> {
        self.credit.acquire_many(charge).await.map_err(|_| {
            CallError::new(
                ErrorKind::Unavailable,
                format!("connection to {} was replaced or closed", self.peer.rid),
            )
        })
    }

    fn stamp_and<F: FnOnce(Vec<Vec<u8>>)>(
        &self,
        leg: Leg,
        charge: u32,
        mut frames: Vec<Vec<u8>>,
        enqueue: F,
    ) {
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
        frames.insert(0, header.encode());
        // Enqueue while holding the sequence lock: sequence order is queue order.
        enqueue(frames);
        drop(seq);
        self.sent_records.fetch_add(1, Ordering::Relaxed);
    }

    /// Send a flow-controlled application record whose credit and queue room are reserved.
    pub(crate) fn send_data(
        &self,
        leg: Leg,
        permit: SemaphorePermit<'_>,
        slot: DataSlot,
        frames: Vec<Vec<u8>>,
    ) {
        let charge = permit.num_permits() as u32;
        // The credit comes back with the peer's credit record, not when the permit drops.
        permit.forget();
        self.stamp_and(leg, charge, frames, |f| slot.send(self.zmq_id.clone(), f));
    }

    /// Send a record that bypasses flow control (admission, liveness, replies, update).
    pub(crate) fn send_control(&self, leg: Leg, frames: Vec<Vec<u8>>) -> bool {
        let mut ok = true;
        self.stamp_and(leg, 0, frames, |f| {
            ok = self.pump.send_control(self.zmq_id.clone(), f).is_ok();
        });
        ok
    }

    /// The peer consumed `consumed` charge in total: return the difference as credit.
    pub(crate) fn on_credit(&self, consumed: u64) {
        let prev = self.credited.fetch_max(consumed, Ordering::AcqRel);
        if consumed > prev {
            let delta = usize::try_from(consumed - prev).unwrap_or(usize::MAX);
            // Never grow beyond the window, whatever a peer claims.
            let room = (self.window as usize).saturating_sub(self.credit.available_permits());
            self.credit.add_permits(delta.min(room));
        }
    }

    /// Receiver side: a record with `charge` arrived. Returns false when the peer exceeded the
    /// window it was granted (a protocol violation).
    pub(crate) fn on_received(&self, charge: u32) -> bool {
        let received =
            self.received.fetch_add(u64::from(charge), Ordering::AcqRel) + u64::from(charge);
        received <= self.consumed.load(Ordering::Acquire) + u64::from(self.window)
    }

    /// Receiver side: `charge` bytes were consumed (claimed by the dispatcher, or dropped).
    pub(crate) fn on_consumed(&self, charge: u32) {
        if charge > 0 {
            self.consumed.fetch_add(u64::from(charge), Ordering::AcqRel);
        }
    }

    /// Receiver side: send a credit record if at least `min_delta` consumed bytes are unsent.
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
            let frame = Header::Credit {
                generation: self.generation,
                consumed,
            }
            .encode();
            let _ = self.pump.send_control(self.zmq_id.clone(), vec![frame]);
        }
    }
}

/// A shared handle.
pub type ConnRef = Arc<Connection>;
