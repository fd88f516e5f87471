//! The target's shell of [`TerminalLedger`] (issue 17 item 9; wire §11): carried requests of a
//! unit, their terminals relayed (33) and recorded in an immutable Relocation Store root, the
//! root linked with the counts by a Preserve CAS, released once every terminal is
//! acknowledged (46).
//!
//! **The root (ours, wire §11 leaves its content to us):** version `v` of relocation `R` is a
//! ZRM1 manifest at `terminals/<R hex>/<v>` over ZRD1 chunks at `terminals/<R hex>/<v>/<i>`
//! (≤ 256 KiB each) of one JSON document: every terminal so far — operation and reply route
//! identity, correlation, the requester's lease fence, status, detail, reply payload — with
//! its ack state. Its inventory digest is SHA-256 over the terminals' identities and ack
//! flags, in order. The ZRP1 pointer (manifest reference, SHA-256, size, inventory digest) is
//! linked in the authority payload of the unit's first carried object, under
//! `terminals.<R hex>` with `count` (TerminalCompletionCount) and `pending`
//! (PendingRelayCount), by a Preserve CAS — after the root was written and read back intact.
//! The previous version is verified before it is replaced (missing or corrupt: the ledger
//! retires `DataLost`, `RelocationDataLost`) and deleted after the CAS ("authority releases the
//! reference before the record is deleted"). Retention: `terminal_retention`.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;
use zlink_protocol::crc::crc32c;
use zlink_protocol::envelope::TypedPayload;
use zlink_protocol::generated::{
    CommandBody, LeaseFence, ManifestChunk, NodeFence, ObjectKind as WireKind,
    RelocationDataChunkV1, RelocationManifestV1, RelocationRootPointer, ReplyRelay, RequestHeader,
    TerminalStatus,
};
use zlink_store::types::{AuthorityKey, AuthorityRead, ObjectKind as StoreKind};

use super::{Inner, ObjectStore, store_error};
use crate::call::error::{CallError, ErrorKind};
use crate::mesh::connection::Leg;
use crate::relocation::terminals::{LedgerAction, LedgerEvent, Retired, TerminalLedger};

/// A carried request's identity: (operation high, low, reply route).
pub(super) type TermKey = (u64, u64, u64);

/// The largest ZRD1 chunk of a terminal root.
const ROOT_CHUNK: usize = 256 * 1024;

/// The pause before a publish the store did not take is tried again.
const PUBLISH_RETRY: Duration = Duration::from_millis(100);

/// How long a publish waits before it takes the ledger's state, so a terminal and its ack —
/// usually a round trip apart — go into one publish, and a unit whose requests are all
/// answered and acknowledged by then writes no root at all (**ours**).
const PUBLISH_COALESCE: Duration = Duration::from_millis(20);

/// One terminal: the 33 body and its reply payload.
#[derive(Debug, Clone)]
struct Terminal {
    body: ReplyRelay,
    payload: Option<TypedPayload>,
    source: NodeFence,
}

struct State {
    ledger: TerminalLedger<TermKey>,
    terminals: BTreeMap<TermKey, Terminal>,
    /// The root linked in authority now.
    published: Option<RelocationRootPointer>,
    /// The latest deadline of an accepted request (unix ms).
    last_deadline_ms: u64,
    /// Per relayed terminal, how to stop its resend loop.
    acks: HashMap<TermKey, tokio::sync::oneshot::Sender<()>>,
}

/// The ledger of one unit's carried requests on this target.
pub(super) struct UnitTerminals {
    relocation_id: [u8; 16],
    /// The object whose authority row links the root.
    lead: (StoreKind, String, u64),
    state: std::sync::Mutex<State>,
    /// The versions to publish, in order (the worker takes the ledger's state when it starts
    /// one: [`TerminalLedger::refresh`]).
    publish_tx: mpsc::UnboundedSender<u64>,
    retired: tokio::sync::watch::Sender<Option<Retired>>,
}

impl UnitTerminals {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn hex_id(&self) -> String {
        hex(&self.relocation_id)
    }

    fn root_ref(&self, version: u64) -> String {
        format!("terminals/{}/{version}", self.hex_id())
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The JSON document a root holds.
#[derive(Debug, Serialize, Deserialize)]
struct RootDoc {
    relocation_id: String,
    terminals: Vec<RootTerminal>,
}

#[derive(Debug, Serialize, Deserialize)]
struct RootTerminal {
    operation_high: u64,
    operation_low: u64,
    reply_route_id: u64,
    correlation_id: String,
    source_rid: String,
    source_lifecycle_generation: u64,
    source_lease_generation: u64,
    status: u8,
    detail: String,
    packet_name: String,
    content_type: String,
    payload_hex: String,
    acked: bool,
}

/// SHA-256 over the terminals' identities and ack flags, in key order.
fn inventory_digest<'a>(entries: impl Iterator<Item = (&'a TermKey, bool)>) -> [u8; 32] {
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    for ((high, low, route), acked) in entries {
        ctx.update(&high.to_be_bytes());
        ctx.update(&low.to_be_bytes());
        ctx.update(&route.to_be_bytes());
        ctx.update(&[u8::from(acked)]);
    }
    let mut out = [0u8; 32];
    out.copy_from_slice(ctx.finish().as_ref());
    out
}

fn sha256(bytes: &[u8]) -> [u8; 32] {
    let mut out = [0u8; 32];
    out.copy_from_slice(ring::digest::digest(&ring::digest::SHA256, bytes).as_ref());
    out
}

/// Why a publish did not happen.
enum Verify {
    /// The published root is missing, or its bytes do not match the pointer / manifest:
    /// `RelocationDataLost`.
    Lost(String),
    /// The store did not answer: try again.
    Store(String),
    /// The unit's object is not this node's: its commit did not happen here.
    NotOurs(String),
}

impl<S: ObjectStore> Inner<S> {
    /// The open ledger of relocation `relocation_id` (made, with its worker, on its first
    /// carried request, naming that request's object as the one that links the root).
    fn unit_terminals(
        &self,
        relocation_id: [u8; 16],
        lead: (StoreKind, String, u64),
        first_deadline_ms: u64,
    ) -> Option<Arc<UnitTerminals>> {
        let this = self.this.get().and_then(std::sync::Weak::upgrade)?;
        let mut map = self.relocations.terminals();
        if let Some(u) = map.get(&relocation_id) {
            return Some(Arc::clone(u));
        }
        let (publish_tx, publish_rx) = mpsc::unbounded_channel();
        let unit = Arc::new(UnitTerminals {
            relocation_id,
            lead,
            state: std::sync::Mutex::new(State {
                ledger: TerminalLedger::new(),
                terminals: BTreeMap::new(),
                published: None,
                // Set before the deadline watch starts: it must never see an empty deadline.
                last_deadline_ms: first_deadline_ms,
                acks: HashMap::new(),
            }),
            publish_tx,
            retired: tokio::sync::watch::Sender::new(None),
        });
        map.insert(relocation_id, Arc::clone(&unit));
        drop(map);
        tokio::spawn(Arc::clone(&this).publish_worker(Arc::clone(&unit), publish_rx));
        tokio::spawn(this.deadline_watch(Arc::clone(&unit)));
        Some(unit)
    }

    /// A carried request of relocation `relocation_id` for object `lead` entered its queue;
    /// `deadline_unix_ms` is its deadline. The ledger its terminal will go through.
    pub(super) fn carried_accepted(
        &self,
        relocation_id: [u8; 16],
        lead: (StoreKind, String, u64),
        deadline_unix_ms: u64,
    ) -> Option<Arc<UnitTerminals>> {
        self.relocations
            .carried_accepted
            .fetch_add(1, Ordering::Relaxed);
        loop {
            let unit = self.unit_terminals(relocation_id, lead.clone(), deadline_unix_ms)?;
            let actions = {
                let mut st = unit.lock();
                if st.ledger.retired().is_some() {
                    // It ended between the lookup and now: this request opens a new one.
                    None
                } else {
                    st.last_deadline_ms = st.last_deadline_ms.max(deadline_unix_ms);
                    Some(st.ledger.handle(LedgerEvent::Accepted))
                }
            };
            match actions {
                Some(actions) => {
                    self.perform(&unit, actions);
                    return Some(unit);
                }
                None => self.forget_terminals(&unit),
            }
        }
    }

    /// The carried request `header` from `source` (relayed back under the requester's lease
    /// generation `lease_generation`) ended with `result`: relayed at once, recorded in the
    /// unit's next root.
    pub(super) fn carried_terminal(
        &self,
        unit: &Arc<UnitTerminals>,
        header: &RequestHeader,
        source: NodeFence,
        lease_generation: u64,
        result: Result<TypedPayload, CallError>,
    ) {
        let (status, detail, payload) = match result {
            Ok(p) => (TerminalStatus::Ok, String::new(), Some(p)),
            Err(e) => (
                e.kind().to_status(),
                e.detail().chars().take(1024).collect(),
                None,
            ),
        };
        let key = (
            header.operation_id.high,
            header.operation_id.low,
            header.reply_route_id,
        );
        let body = ReplyRelay {
            relocation_id: unit.relocation_id,
            source_lease: LeaseFence {
                owner_node: source.clone(),
                owner_lease_generation: lease_generation,
            },
            operation_id: header.operation_id.clone(),
            reply_route_id: header.reply_route_id,
            correlation_id: header.correlation_id.clone(),
            status,
            detail,
        };
        let (actions, retired) = {
            let mut st = unit.lock();
            st.terminals.insert(
                key,
                Terminal {
                    body,
                    payload,
                    source,
                },
            );
            let retired = st.ledger.retired().is_some();
            (st.ledger.handle(LedgerEvent::Terminal(key)), retired)
        };
        self.perform(unit, actions);
        if retired {
            // A terminal after its ledger ended (no root to keep it in): relayed all the same.
            self.relay(unit, key);
        }
    }

    /// A `replyRelayAck` (46) of relocation `relocation_id`; whether a ledger knew it.
    pub(super) fn carried_acked(&self, relocation_id: [u8; 16], key: TermKey) -> bool {
        let Some(unit) = self.relocations.terminals().get(&relocation_id).cloned() else {
            return false;
        };
        let (stop, actions) = {
            let mut st = unit.lock();
            let stop = st.acks.remove(&key);
            (stop, st.ledger.handle(LedgerEvent::Acked(key)))
        };
        let known = stop.is_some();
        if let Some(tx) = stop {
            let _ = tx.send(());
        }
        self.perform(&unit, actions);
        known
    }

    fn perform(&self, unit: &Arc<UnitTerminals>, actions: Vec<LedgerAction<TermKey>>) {
        for a in actions {
            match a {
                LedgerAction::Publish { version, .. } => {
                    let _ = unit.publish_tx.send(version);
                }
                LedgerAction::Relay(k) => self.relay(unit, k),
                LedgerAction::Retire(r) => self.retire(unit, r),
            }
        }
    }

    /// Send terminal `k`'s 33 until its ack (46), or until the unit's last deadline plus the
    /// retransmission window (when its ledger retires `ForceStopped`).
    fn relay(&self, unit: &Arc<UnitTerminals>, k: TermKey) {
        let Some(this) = self.this.get().and_then(std::sync::Weak::upgrade) else {
            return;
        };
        let (ack_tx, mut ack_rx) = tokio::sync::oneshot::channel();
        let Some(t) = ({
            let mut st = unit.lock();
            st.acks.insert(k, ack_tx);
            st.terminals.get(&k).cloned()
        }) else {
            return;
        };
        let unit = Arc::clone(unit);
        tokio::spawn(async move {
            loop {
                let dropped = this.relocations.settings().fault
                    == Some(super::TransferFault::DropReplyRelays);
                if !dropped {
                    let _ = this.mesh.relocation_record(
                        &t.source,
                        Leg::Request,
                        CommandBody::ReplyRelay(t.body.clone()),
                        t.payload.clone(),
                    );
                    this.relocations
                        .reply_relays_sent
                        .fetch_add(1, Ordering::Relaxed);
                }
                tokio::select! {
                    _ = &mut ack_rx => return,
                    () = tokio::time::sleep(Duration::from_secs(1)) => {}
                }
                let window = this.relocations.settings().cutover_wait;
                let until = unit
                    .lock()
                    .last_deadline_ms
                    .saturating_add(super::millis(window));
                if super::now_unix_ms() >= until {
                    return;
                }
            }
        });
    }

    fn retire(&self, unit: &Arc<UnitTerminals>, r: Retired) {
        match r {
            Retired::Completed => self.forget_terminals(unit),
            Retired::ForceStopped => {
                self.forget_terminals(unit);
                // The root and its reference stay for the retention, then both go (authority
                // releases the reference before the record is deleted).
                if let Some(this) = self.this.get().and_then(std::sync::Weak::upgrade) {
                    let unit = Arc::clone(unit);
                    let retention = self.relocations.settings().terminal_retention;
                    tokio::spawn(async move {
                        tokio::time::sleep(retention).await;
                        this.release_kept_root(&unit).await;
                    });
                }
            }
            Retired::DataLost | Retired::Abandoned => {
                // Its relays go on and still take acks: forget it at its last deadline.
                let until = unit.lock().last_deadline_ms;
                if let Some(this) = self.this.get().and_then(std::sync::Weak::upgrade) {
                    let unit = Arc::clone(unit);
                    tokio::spawn(async move {
                        let left = until.saturating_sub(super::now_unix_ms());
                        tokio::time::sleep(Duration::from_millis(left)).await;
                        this.forget_terminals(&unit);
                    });
                }
            }
        }
        let _ = unit.retired.send(Some(r));
        let stats = &self.relocations;
        match r {
            Retired::Completed => stats.terminals_completed.fetch_add(1, Ordering::Relaxed),
            Retired::ForceStopped => {
                tracing::warn!(
                    relocation = %unit.hex_id(),
                    "carried requests unacknowledged at their last deadline: ForceStopped, the terminal root stays for its retention"
                );
                stats
                    .terminals_force_stopped
                    .fetch_add(1, Ordering::Relaxed)
            }
            Retired::Abandoned => stats.terminals_abandoned.fetch_add(1, Ordering::Relaxed),
            Retired::DataLost => {
                tracing::error!(
                    relocation = %unit.hex_id(),
                    "RelocationDataLost: the published terminal root is missing or corrupt (the committed owner stays)"
                );
                stats.terminals_data_lost.fetch_add(1, Ordering::Relaxed)
            }
        };
    }

    /// A `ForceStopped` unit's retention ended: unlink its root (if the object is still this
    /// node's) and delete it.
    async fn release_kept_root(&self, unit: &UnitTerminals) {
        let Some(p) = unit.lock().published.clone() else {
            return;
        };
        let (terminals, pending) = {
            let st = unit.lock();
            (st.ledger.terminals(), st.ledger.pending())
        };
        match self.link_root(unit, None, terminals, pending).await {
            Ok(()) => {
                self.delete_root(&p).await;
                unit.lock().published = None;
                self.relocations
                    .terminal_roots_expired
                    .fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => {
                tracing::warn!(relocation = %unit.hex_id(), error = %e, "a kept terminal root could not be unlinked at the end of its retention; it expires in the store");
            }
        }
    }

    fn forget_terminals(&self, unit: &Arc<UnitTerminals>) {
        let mut map = self.relocations.terminals();
        if map
            .get(&unit.relocation_id)
            .is_some_and(|u| Arc::ptr_eq(u, unit))
        {
            map.remove(&unit.relocation_id);
        }
    }

    /// Wait for the unit's last deadline (it may grow), plus the retransmission window, then
    /// tell the ledger.
    async fn deadline_watch(self: Arc<Self>, unit: Arc<UnitTerminals>) {
        let mut retired = unit.retired.subscribe();
        loop {
            let window = self.relocations.settings().cutover_wait;
            let deadline = unit.lock().last_deadline_ms;
            let due = deadline.saturating_add(super::millis(window));
            let now = super::now_unix_ms();
            if now < due {
                tokio::select! {
                    _ = retired.wait_for(Option::is_some) => return,
                    () = tokio::time::sleep(Duration::from_millis(due - now)) => {}
                }
                continue;
            }
            let actions = unit.lock().ledger.handle(LedgerEvent::DeadlinePassed);
            self.perform(&unit, actions);
            // Complete at the deadline, its clearing publish retires it — unless a request
            // with a later deadline was accepted meanwhile: then watch that one.
            let (retired_now, later) = {
                let st = unit.lock();
                (
                    st.ledger.retired().is_some(),
                    st.last_deadline_ms > deadline,
                )
            };
            if retired_now || !later {
                return;
            }
        }
    }

    /// Publish the ledger's versions one at a time, in order.
    async fn publish_worker(
        self: Arc<Self>,
        unit: Arc<UnitTerminals>,
        mut rx: mpsc::UnboundedReceiver<u64>,
    ) {
        let mut retired = unit.retired.subscribe();
        loop {
            let next = tokio::select! {
                n = rx.recv() => n,
                _ = retired.wait_for(Option::is_some) => None,
            };
            let Some(version) = next else {
                break;
            };
            tokio::time::sleep(PUBLISH_COALESCE).await;
            let Some((terminals, pending, clear)) = unit.lock().ledger.refresh(version) else {
                continue;
            };
            let event = match self
                .publish(&unit, version, terminals, pending, clear)
                .await
            {
                Ok(()) => {
                    self.relocations
                        .terminal_roots_published
                        .fetch_add(1, Ordering::Relaxed);
                    LedgerEvent::Published(version)
                }
                Err(Verify::Lost(why)) => {
                    tracing::error!(relocation = %unit.hex_id(), %why, "a published terminal root does not verify");
                    LedgerEvent::RootLost
                }
                Err(Verify::Store(why)) => {
                    tracing::warn!(relocation = %unit.hex_id(), %why, "a terminal root was not published; trying again");
                    tokio::time::sleep(PUBLISH_RETRY).await;
                    LedgerEvent::PublishFailed(version)
                }
                Err(Verify::NotOurs(why)) => {
                    tracing::debug!(relocation = %unit.hex_id(), %why, "carried requests of a unit that is not this node's");
                    LedgerEvent::Abandoned
                }
            };
            let actions = unit.lock().ledger.handle(event);
            self.perform(&unit, actions);
        }
        // A ForceStopped root stays for the retention (it expires by itself); its reference
        // stays in authority.
    }

    /// Verify the published root, write version `version` (or, with `clear`, release the
    /// reference), link it by a Preserve CAS, delete the previous root.
    async fn publish(
        &self,
        unit: &UnitTerminals,
        version: u64,
        terminals: u64,
        pending: u64,
        clear: bool,
    ) -> Result<(), Verify> {
        let (previous, doc, digest) = {
            let st = unit.lock();
            let doc = RootDoc {
                relocation_id: unit.hex_id(),
                terminals: st
                    .ledger
                    .entries()
                    .filter_map(|(k, acked)| st.terminals.get(k).map(|t| root_terminal(t, acked)))
                    .collect(),
            };
            (
                st.published.clone(),
                doc,
                inventory_digest(st.ledger.entries()),
            )
        };
        if clear && previous.is_none() {
            // Nothing was ever linked: nothing to release.
            return Ok(());
        }
        if let Some(p) = &previous {
            self.verify_root(p).await?;
        }
        let link = if clear {
            None
        } else {
            Some(self.write_root(unit, version, &doc, digest).await?)
        };
        if let Err(e) = self
            .link_root(unit, link.as_ref(), terminals, pending)
            .await
        {
            if let Some(p) = &link {
                self.delete_root(p).await;
            }
            return Err(match e.kind() {
                ErrorKind::StaleRoute | ErrorKind::NotFound => Verify::NotOurs(e.to_string()),
                _ => Verify::Store(e.to_string()),
            });
        }
        if let Some(p) = &previous {
            self.delete_root(p).await;
        }
        unit.lock().published = link;
        Ok(())
    }

    async fn write_root(
        &self,
        unit: &UnitTerminals,
        version: u64,
        doc: &RootDoc,
        digest: [u8; 32],
    ) -> Result<RelocationRootPointer, Verify> {
        let retention = self.relocations.settings().terminal_retention;
        let bytes = serde_json::to_vec(doc).map_err(|e| Verify::Store(e.to_string()))?;
        let base = unit.root_ref(version);
        let mut chunks = Vec::new();
        for (i, data) in bytes.chunks(ROOT_CHUNK).enumerate() {
            let ordinal = u32::try_from(i).map_err(|e| Verify::Store(e.to_string()))?;
            let reference = format!("{base}/{i}");
            let encoded = RelocationDataChunkV1 {
                chunk_ordinal: ordinal,
                data: Bytes::copy_from_slice(data),
            }
            .encode()
            .map_err(|e| Verify::Store(e.to_string()))?;
            self.store
                .put(&reference, Bytes::from(encoded), retention)
                .await
                .map_err(|e| Verify::Store(e.to_string()))?;
            chunks.push(ManifestChunk {
                ordinal,
                length: u32::try_from(data.len()).map_err(|e| Verify::Store(e.to_string()))?,
                checksum_crc32c: crc32c(data),
                reference,
            });
        }
        let (kind, id, generation) = &unit.lead;
        let manifest = RelocationManifestV1 {
            relocation_id: unit.relocation_id,
            object_kind: match kind {
                StoreKind::Actor => WireKind::Actor,
                StoreKind::Spot => WireKind::Spot,
            },
            object_id: id.clone(),
            object_generation: *generation,
            payload_total_length: bytes.len() as u64,
            payload_checksum_crc32c: crc32c(&bytes),
            chunks,
            inventory_digest: digest,
        }
        .encode()
        .map_err(|e| Verify::Store(e.to_string()))?;
        let pointer = RelocationRootPointer {
            reference: base.clone(),
            sha256: sha256(&manifest),
            size_bytes: manifest.len() as u64,
            inventory_digest: digest,
        };
        self.store
            .put(&base, Bytes::from(manifest), retention)
            .await
            .map_err(|e| Verify::Store(e.to_string()))?;
        // Read back before it is linked: a root that does not verify now is not published.
        self.verify_root(&pointer).await.map_err(|e| match e {
            Verify::Lost(why) | Verify::Store(why) | Verify::NotOurs(why) => Verify::Store(why),
        })?;
        Ok(pointer)
    }

    /// Read root `p` and check it against its pointer and manifest.
    async fn verify_root(&self, p: &RelocationRootPointer) -> Result<(), Verify> {
        let read = |r: String| async move {
            match self.store.read(&r).await {
                Ok(Some(s)) => Ok(s.bytes),
                Ok(None) => Err(Verify::Lost(format!("{r} is missing"))),
                Err(e) => Err(Verify::Store(e.to_string())),
            }
        };
        let manifest_bytes = read(p.reference.clone()).await?;
        if sha256(&manifest_bytes) != p.sha256 || manifest_bytes.len() as u64 != p.size_bytes {
            return Err(Verify::Lost(format!(
                "{} does not match its pointer",
                p.reference
            )));
        }
        let m = RelocationManifestV1::decode(&manifest_bytes)
            .map_err(|e| Verify::Lost(format!("{}: {e}", p.reference)))?;
        if m.inventory_digest != p.inventory_digest {
            return Err(Verify::Lost("inventory digest mismatch".into()));
        }
        let mut all = Vec::with_capacity(usize::try_from(m.payload_total_length).unwrap_or(0));
        for c in &m.chunks {
            let bytes = read(c.reference.clone()).await?;
            let chunk = RelocationDataChunkV1::decode(&bytes)
                .map_err(|e| Verify::Lost(format!("{}: {e}", c.reference)))?;
            if chunk.chunk_ordinal != c.ordinal
                || chunk.data.len() as u64 != u64::from(c.length)
                || crc32c(&chunk.data) != c.checksum_crc32c
            {
                return Err(Verify::Lost(format!("{} is corrupt", c.reference)));
            }
            all.extend_from_slice(&chunk.data);
        }
        if all.len() as u64 != m.payload_total_length || crc32c(&all) != m.payload_checksum_crc32c {
            return Err(Verify::Lost("the root's payload is corrupt".into()));
        }
        let doc: RootDoc = serde_json::from_slice(&all)
            .map_err(|e| Verify::Lost(format!("the root does not decode: {e}")))?;
        let keys: Vec<(TermKey, bool)> = doc
            .terminals
            .iter()
            .map(|t| {
                (
                    (t.operation_high, t.operation_low, t.reply_route_id),
                    t.acked,
                )
            })
            .collect();
        if inventory_digest(keys.iter().map(|(k, a)| (k, *a))) != m.inventory_digest {
            return Err(Verify::Lost("the root's inventory does not match".into()));
        }
        Ok(())
    }

    async fn delete_root(&self, p: &RelocationRootPointer) {
        if let Ok(Some(s)) = self.store.read(&p.reference).await
            && let Ok(m) = RelocationManifestV1::decode(&s.bytes)
        {
            for c in &m.chunks {
                let _ = self.store.delete(&c.reference).await;
            }
        }
        let _ = self.store.delete(&p.reference).await;
    }

    /// The Preserve CAS: the lead's authority payload gets `terminals.<R>` = {count, pending,
    /// root} (or loses it when `root` is `None`); retried on a concurrent write.
    async fn link_root(
        &self,
        unit: &UnitTerminals,
        root: Option<&RelocationRootPointer>,
        terminals: u64,
        pending: u64,
    ) -> Result<(), CallError> {
        let (kind, id, _) = &unit.lead;
        let key = AuthorityKey::new(*kind, id)
            .map_err(|e| CallError::new(ErrorKind::InvalidOperation, e.to_string()))?;
        let me = self.mesh.fence();
        let mut last = None;
        for _ in 0..4 {
            let a = match self.store.read_authority(&key).await.map_err(store_error)? {
                AuthorityRead::Found(a) => *a,
                AuthorityRead::Missing { .. } => {
                    return Err(CallError::new(ErrorKind::NotFound, format!("{id} is gone")));
                }
            };
            if a.owner_node.rid != me.rid
                || a.owner_node.lifecycle_generation != me.lifecycle_generation
            {
                return Err(CallError::new(
                    ErrorKind::StaleRoute,
                    format!("{id} is owned by {} now", a.owner_node.rid),
                ));
            }
            let payload = with_terminals(&a.payload, &unit.hex_id(), root, terminals, pending);
            match self.store.preserve(&a.fence(), payload).await {
                Ok(_) => return Ok(()),
                Err(e) => last = Some(store_error(e)),
            }
        }
        Err(last.unwrap_or_else(|| CallError::new(ErrorKind::Conflict, "preserve CAS lost")))
    }
}

fn root_terminal(t: &Terminal, acked: bool) -> RootTerminal {
    let b = &t.body;
    let p = t.payload.clone().unwrap_or_default();
    RootTerminal {
        operation_high: b.operation_id.high,
        operation_low: b.operation_id.low,
        reply_route_id: b.reply_route_id,
        correlation_id: b.correlation_id.clone(),
        source_rid: b.source_lease.owner_node.rid.to_string(),
        source_lifecycle_generation: b.source_lease.owner_node.lifecycle_generation,
        source_lease_generation: b.source_lease.owner_lease_generation,
        status: b.status as u8,
        detail: b.detail.clone(),
        packet_name: p.packet_name.to_string(),
        content_type: p.content_type.to_string(),
        payload_hex: hex(&p.payload),
        acked,
    }
}

/// `payload` with `terminals.<relocation>` set to the counts and root pointer (hex of its ZRP1
/// bytes), or removed when `root` is `None`; a payload that is not a framework JSON object
/// becomes one.
fn with_terminals(
    payload: &[u8],
    relocation: &str,
    root: Option<&RelocationRootPointer>,
    terminals: u64,
    pending: u64,
) -> Bytes {
    let mut m = match serde_json::from_slice::<serde_json::Value>(payload) {
        Ok(serde_json::Value::Object(m)) => m,
        _ => serde_json::Map::new(),
    };
    let mut all = match m.remove("terminals") {
        Some(serde_json::Value::Object(t)) => t,
        _ => serde_json::Map::new(),
    };
    match root {
        Some(p) => {
            all.insert(
                relocation.to_owned(),
                serde_json::json!({
                    "count": terminals,
                    "pending": pending,
                    "root": p.encode().map(|b| hex(&b)).unwrap_or_default(),
                }),
            );
        }
        None => {
            all.remove(relocation);
        }
    }
    if !all.is_empty() {
        m.insert("terminals".into(), serde_json::Value::Object(all));
    }
    Bytes::from(serde_json::to_vec(&m).unwrap_or_default())
}

/// The terminal roots an authority payload links: (relocation hex, count, pending, pointer).
pub fn linked_terminal_roots(payload: &[u8]) -> Vec<(String, u64, u64, RelocationRootPointer)> {
    let Ok(serde_json::Value::Object(m)) = serde_json::from_slice::<serde_json::Value>(payload)
    else {
        return Vec::new();
    };
    let Some(serde_json::Value::Object(t)) = m.get("terminals") else {
        return Vec::new();
    };
    t.iter()
        .filter_map(|(r, v)| {
            let bytes = unhex(v.get("root")?.as_str()?)?;
            Some((
                r.clone(),
                v.get("count")?.as_u64()?,
                v.get("pending")?.as_u64()?,
                RelocationRootPointer::decode(&bytes).ok()?,
            ))
        })
        .collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    (0..s.len())
        .step_by(2)
        .map(|i| s.get(i..i + 2).and_then(|b| u8::from_str_radix(b, 16).ok()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pointer() -> RelocationRootPointer {
        RelocationRootPointer {
            reference: "terminals/ab/1".into(),
            sha256: [7; 32],
            size_bytes: 99,
            inventory_digest: [9; 32],
        }
    }

    #[test]
    fn the_authority_payload_links_and_releases_a_root_and_keeps_its_other_fields() {
        let base = br#"{"membership":"lobby-1","moves":[5]}"#;
        let linked = with_terminals(base, "ab", Some(&pointer()), 3, 1);
        let v: serde_json::Value = serde_json::from_slice(&linked).unwrap_or_default();
        assert_eq!(v["membership"], "lobby-1");
        assert_eq!(v["moves"][0], 5);
        assert_eq!(
            linked_terminal_roots(&linked),
            vec![("ab".to_owned(), 3, 1, pointer())]
        );
        let released = with_terminals(&linked, "ab", None, 3, 0);
        assert!(linked_terminal_roots(&released).is_empty());
        let v: serde_json::Value = serde_json::from_slice(&released).unwrap_or_default();
        assert!(v.get("terminals").is_none(), "{v}");
        assert_eq!(v["membership"], "lobby-1");
    }

    #[test]
    fn the_inventory_digest_covers_identities_and_ack_flags_in_order() {
        let a = [((1, 2, 3), false), ((1, 2, 4), true)];
        let b = [((1, 2, 3), false), ((1, 2, 4), false)];
        let d = |x: &[(TermKey, bool)]| inventory_digest(x.iter().map(|(k, f)| (k, *f)));
        assert_ne!(d(&a), d(&b), "an ack changes it");
        assert_eq!(d(&a), d(&a));
        assert_ne!(d(&a[..1]), d(&a), "a terminal more changes it");
    }
}
