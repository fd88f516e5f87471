//! The node-wide home of object execution queues: one [`ObjectTable`] under one lock, plus the
//! wake-up of each object's executor. Every executor of the node runs its queue inside this
//! table, so the relocation hooks of the table (temporary queue first, admission seal with
//! ingress hold, queue before instance, atomic switch) act on exactly the queue the executor
//! hands turns from.

use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::Notify;
use zlink_store::types::AuthorityKey;

use super::queue::{Captured, ExecQueue, Lane};
use super::table::{Dispatched, ObjectTable, SlotState, TableError};
use super::work::Work;

#[derive(Default)]
struct Inner {
    table: ObjectTable<Work>,
    /// Looked up on every message (foldhash: seeded, fast for short keys).
    wakers: foldhash::HashMap<AuthorityKey, Arc<Notify>>,
}

/// The execution queues of one node.
#[derive(Default)]
pub struct Objects {
    inner: Mutex<Inner>,
}

impl std::fmt::Debug for Objects {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Objects")
            .field("queues", &self.lock().table.len())
            .finish()
    }
}

impl Objects {
    /// No objects.
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn wake(inner: &Inner, key: &AuthorityKey) {
        if let Some(w) = inner.wakers.get(key) {
            w.notify_one();
        }
    }

    /// Open the queue of a creation in progress (it holds work until marked Ready).
    ///
    /// # Errors
    /// [`TableError::Exists`].
    pub fn open(&self, key: &AuthorityKey, generation: u64) -> Result<(), TableError> {
        self.lock().table.open(key, generation)
    }

    /// The instance is ready: its executor may hand out turns.
    ///
    /// # Errors
    /// [`TableError::Missing`], [`TableError::GenerationMismatch`].
    pub fn mark_ready(&self, key: &AuthorityKey, generation: u64) -> Result<(), TableError> {
        let mut inner = self.lock();
        inner.table.mark_ready(key, generation)?;
        Self::wake(&inner, key);
        Ok(())
    }

    /// Whether incarnation `generation` of `key` is still being created or activated (its
    /// slot exists and is not Ready yet: a cold activation's first message may not be in its
    /// queue yet).
    pub(crate) fn is_creating(&self, key: &AuthorityKey, generation: u64) -> bool {
        let mut inner = self.lock();
        inner
            .table
            .slot_of(key, generation)
            .is_ok_and(|s| s.state() == SlotState::Creating)
    }

    /// Dispatch an item (temporary queue, then seal, then queue); wakes the executor when the
    /// item joined its queue.
    pub(crate) fn dispatch(&self, key: &AuthorityKey, lane: Lane, work: Work) -> Dispatched<Work> {
        let mut inner = self.lock();
        let out = inner.table.dispatch(key, lane, work);
        if matches!(out, Dispatched::Queued(_)) {
            Self::wake(&inner, key);
        }
        out
    }

    /// Run `f` on the queue of `key` if it is Ready.
    pub(crate) fn with_ready_queue<R>(
        &self,
        key: &AuthorityKey,
        f: impl FnOnce(&mut ExecQueue<Work>) -> R,
    ) -> Option<R> {
        let mut inner = self.lock();
        let slot = inner.table.slot(key)?;
        if slot.state() != SlotState::Ready {
            return None;
        }
        Some(f(slot.queue()))
    }

    /// Run `f` on the queue of `key` in any state.
    pub(crate) fn with_queue<R>(
        &self,
        key: &AuthorityKey,
        f: impl FnOnce(&mut ExecQueue<Work>) -> R,
    ) -> Option<R> {
        let mut inner = self.lock();
        inner.table.slot(key).map(|s| f(s.queue()))
    }

    /// Register the executor wake-up of `key`.
    pub(crate) fn set_waker(&self, key: &AuthorityKey, wake: Arc<Notify>) {
        self.lock().wakers.insert(key.clone(), wake);
    }

    /// Seal admission of `key` (arrivals park in its ingress hold).
    ///
    /// # Errors
    /// [`TableError`].
    pub fn seal(&self, key: &AuthorityKey, generation: u64) -> Result<(), TableError> {
        self.lock().table.seal(key, generation)
    }

    /// Unseal: held items join the queue.
    ///
    /// # Errors
    /// [`TableError`].
    pub fn unseal(&self, key: &AuthorityKey, generation: u64) -> Result<usize, TableError> {
        let mut inner = self.lock();
        let n = inner.table.unseal(key, generation)?;
        Self::wake(&inner, key);
        Ok(n)
    }

    /// Take the items a sealed object held so far (to relay them to the target).
    ///
    /// # Errors
    /// [`TableError`].
    #[cfg_attr(
        not(test),
        expect(
            dead_code,
            reason = "the relocation runtime (a later issue) calls it; tests do now"
        )
    )]
    pub(crate) fn take_held(
        &self,
        key: &AuthorityKey,
        generation: u64,
    ) -> Result<Vec<Work>, TableError> {
        self.lock().table.take_held(key, generation)
    }

    /// Register a relocation temporary queue (target side).
    ///
    /// # Errors
    /// [`TableError::Exists`].
    pub fn register_temporary(
        &self,
        key: &AuthorityKey,
        relocation_id: [u8; 16],
        attempt: u64,
        generation: u64,
    ) -> Result<(), TableError> {
        self.lock()
            .table
            .register_temporary(key, relocation_id, attempt, generation)
    }

    /// Switch `key` from its temporary queue to the real queue (saved work first), atomically.
    ///
    /// # Errors
    /// [`TableError::NoTemporaryQueue`].
    #[cfg_attr(
        not(test),
        expect(
            dead_code,
            reason = "the relocation runtime (a later issue) calls it; tests do now"
        )
    )]
    pub(crate) fn switch_to_real(
        &self,
        key: &AuthorityKey,
        relocation_id: [u8; 16],
        attempt: u64,
        saved: Vec<Captured<Work>>,
    ) -> Result<(), TableError> {
        let mut inner = self.lock();
        inner
            .table
            .switch_to_real(key, relocation_id, attempt, saved)?;
        Self::wake(&inner, key);
        Ok(())
    }

    /// Remove incarnation `generation` of `key`; its waiting and held work comes back.
    ///
    /// # Errors
    /// [`TableError`].
    pub(crate) fn remove(
        &self,
        key: &AuthorityKey,
        generation: u64,
    ) -> Result<Vec<Work>, TableError> {
        let mut inner = self.lock();
        let out = inner.table.remove(key, generation)?;
        if let Some(w) = inner.wakers.remove(key) {
            w.notify_one();
        }
        Ok(out)
    }

    /// Number of objects with a queue.
    pub fn len(&self) -> usize {
        self.lock().table.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
