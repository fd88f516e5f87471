//! The node's object dispatch table, built for relocation (glossary §5 "Object execution
//! queue", "Relocation temporary queue", "Admission seal"; routing §2.5–§2.6).
//!
//! Pure: one value the runtime keeps under one lock, so every step below is atomic with
//! respect to dispatch.
//!
//! Dispatch of an arriving item for object `key`, in this order:
//!
//! 1. **Temporary queue.** If a relocation registered a temporary queue for `key` (the target
//!    side, while it restores), the item joins it — before the instance is even looked up.
//! 2. **Admission seal.** If the object's admission is sealed (the source side, after capture),
//!    the item is parked in the object's unbounded ingress hold, to be relayed or released.
//! 3. **Execution queue.** Otherwise the item joins the object's execution queue, which exists
//!    from the moment a creation starts (state `Creating`), before any application instance.
//! 4. Otherwise the object is not here.
//!
//! [`ObjectTable::switch_to_real`] ends a temporary queue atomically: saved (captured) work
//! first, then the temporary queue's items, into the real queue, and the registration is gone
//! in the same step — an item dispatched before the switch is in the temporary queue (and
//! moves with it), an item dispatched after goes straight to the real queue.
//!
//! ObjectGeneration is not a target-match condition for messages (routing §2.6): dispatch
//! finds the current incarnation by key. Control work that changes one incarnation (destroy,
//! close, membership, relocation) names its generation and is refused on a mismatch.

use std::collections::VecDeque;

use thiserror::Error;
use zlink_store::types::AuthorityKey;

use super::queue::{Captured, ExecQueue, Lane};

/// Where an item went.
#[derive(Debug, PartialEq, Eq)]
pub enum Dispatched<W> {
    /// Into the object's execution queue, with its sequence.
    Queued(u64),
    /// Into the ingress hold of a sealed object.
    Held,
    /// Into a relocation temporary queue.
    Temporary,
    /// No queue for the key on this node; the item comes back.
    NotHere(W),
}

/// Lifecycle of a queue slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlotState {
    /// A creation is in progress: the queue exists, the instance does not yet.
    Creating,
    /// The instance is ready; its queue may run.
    Ready,
}

/// A refused table operation.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum TableError {
    /// No slot for the key.
    #[error("no execution queue for {0}")]
    Missing(String),
    /// Control work named another incarnation.
    #[error("{key} is incarnation {current}, not {requested}")]
    GenerationMismatch {
        /// Object key.
        key: String,
        /// Current ObjectGeneration.
        current: u64,
        /// Requested ObjectGeneration.
        requested: u64,
    },
    /// A slot or temporary queue already exists for the key.
    #[error("{0} already has an execution queue or temporary queue")]
    Exists(String),
    /// No temporary queue registered for the key (or another relocation's).
    #[error("no matching temporary queue for {0}")]
    NoTemporaryQueue(String),
}

/// One object's execution queue and admission state.
#[derive(Debug)]
pub struct Slot<W> {
    generation: u64,
    state: SlotState,
    queue: ExecQueue<W>,
    /// `Some` while admission is sealed: the ingress hold (with each item's lane), unbounded.
    hold: Option<VecDeque<(Lane, W)>>,
}

impl<W> Slot<W> {
    /// Current ObjectGeneration.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Creating or Ready.
    pub fn state(&self) -> SlotState {
        self.state
    }

    /// The execution queue.
    pub fn queue(&mut self) -> &mut ExecQueue<W> {
        &mut self.queue
    }

    /// Whether admission is sealed.
    pub fn is_sealed(&self) -> bool {
        self.hold.is_some()
    }
}

/// A relocation temporary queue on the target (its identity and the items that arrived).
#[derive(Debug)]
struct TempQueue<W> {
    relocation_id: [u8; 16],
    attempt: u64,
    generation: u64,
    items: VecDeque<(Lane, W)>,
}

/// The objects of one node.
#[derive(Debug)]
pub struct ObjectTable<W> {
    // Looked up on every message (foldhash: seeded, fast for short keys).
    slots: foldhash::HashMap<AuthorityKey, Slot<W>>,
    temp: foldhash::HashMap<AuthorityKey, TempQueue<W>>,
}

impl<W> Default for ObjectTable<W> {
    fn default() -> Self {
        Self {
            slots: foldhash::HashMap::default(),
            temp: foldhash::HashMap::default(),
        }
    }
}

impl<W> ObjectTable<W> {
    /// No objects.
    pub fn new() -> Self {
        Self::default()
    }

    /// Open the execution queue of a creation in progress (state `Creating`): work can queue
    /// before the application instance exists; it runs once the slot is marked Ready.
    ///
    /// # Errors
    /// [`TableError::Exists`] when the key has a slot or a temporary queue.
    pub fn open(&mut self, key: &AuthorityKey, generation: u64) -> Result<(), TableError> {
        if self.slots.contains_key(key) || self.temp.contains_key(key) {
            return Err(TableError::Exists(key.as_str().to_owned()));
        }
        self.slots.insert(
            key.clone(),
            Slot {
                generation,
                state: SlotState::Creating,
                queue: ExecQueue::new(),
                hold: None,
            },
        );
        Ok(())
    }

    /// The instance of `generation` is ready.
    ///
    /// # Errors
    /// [`TableError::Missing`], [`TableError::GenerationMismatch`].
    pub fn mark_ready(&mut self, key: &AuthorityKey, generation: u64) -> Result<(), TableError> {
        self.slot_of(key, generation)?.state = SlotState::Ready;
        Ok(())
    }

    /// Dispatch an arriving item (see the module docs for the order).
    pub fn dispatch(&mut self, key: &AuthorityKey, lane: Lane, item: W) -> Dispatched<W> {
        if let Some(t) = self.temp.get_mut(key) {
            t.items.push_back((lane, item));
            return Dispatched::Temporary;
        }
        match self.slots.get_mut(key) {
            Some(slot) => match &mut slot.hold {
                Some(hold) => {
                    hold.push_back((lane, item));
                    Dispatched::Held
                }
                None => Dispatched::Queued(slot.queue.push(lane, item)),
            },
            None => Dispatched::NotHere(item),
        }
    }

    /// The slot of `key`, for running its queue.
    pub fn slot(&mut self, key: &AuthorityKey) -> Option<&mut Slot<W>> {
        self.slots.get_mut(key)
    }

    /// The slot of `key` if it is incarnation `generation` (control work).
    ///
    /// # Errors
    /// [`TableError::Missing`], [`TableError::GenerationMismatch`].
    pub fn slot_of(
        &mut self,
        key: &AuthorityKey,
        generation: u64,
    ) -> Result<&mut Slot<W>, TableError> {
        let slot = self
            .slots
            .get_mut(key)
            .ok_or_else(|| TableError::Missing(key.as_str().to_owned()))?;
        if slot.generation != generation {
            return Err(TableError::GenerationMismatch {
                key: key.as_str().to_owned(),
                current: slot.generation,
                requested: generation,
            });
        }
        Ok(slot)
    }

    /// Seal admission of incarnation `generation`: from now on arrivals park in its ingress
    /// hold. Sealing twice is a no-op.
    ///
    /// # Errors
    /// [`TableError::Missing`], [`TableError::GenerationMismatch`].
    pub fn seal(&mut self, key: &AuthorityKey, generation: u64) -> Result<(), TableError> {
        let slot = self.slot_of(key, generation)?;
        slot.hold.get_or_insert_with(VecDeque::new);
        Ok(())
    }

    /// Take what the ingress hold collected so far (to relay it to a target); the seal stays.
    ///
    /// # Errors
    /// [`TableError::Missing`], [`TableError::GenerationMismatch`].
    pub fn take_held(&mut self, key: &AuthorityKey, generation: u64) -> Result<Vec<W>, TableError> {
        let slot = self.slot_of(key, generation)?;
        Ok(slot
            .hold
            .as_mut()
            .map(|h| h.drain(..).map(|(_, w)| w).collect())
            .unwrap_or_default())
    }

    /// Unseal (a relocation aborted before cutover): held items join the queue in arrival
    /// order, behind what was queued before the seal.
    ///
    /// # Errors
    /// [`TableError::Missing`], [`TableError::GenerationMismatch`].
    pub fn unseal(&mut self, key: &AuthorityKey, generation: u64) -> Result<usize, TableError> {
        let slot = self.slot_of(key, generation)?;
        let held = slot.hold.take().unwrap_or_default();
        let n = held.len();
        for (lane, item) in held {
            slot.queue.push(lane, item);
        }
        Ok(n)
    }

    /// Register a relocation temporary queue for `key` on the target, before the instance is
    /// created: from now on dispatch puts arrivals there.
    ///
    /// # Errors
    /// [`TableError::Exists`] when the key has a slot or another temporary queue.
    pub fn register_temporary(
        &mut self,
        key: &AuthorityKey,
        relocation_id: [u8; 16],
        attempt: u64,
        generation: u64,
    ) -> Result<(), TableError> {
        if self.slots.contains_key(key) || self.temp.contains_key(key) {
            return Err(TableError::Exists(key.as_str().to_owned()));
        }
        self.temp.insert(
            key.clone(),
            TempQueue {
                relocation_id,
                attempt,
                generation,
                items: VecDeque::new(),
            },
        );
        Ok(())
    }

    /// Whether `key` has a temporary queue.
    pub fn has_temporary(&self, key: &AuthorityKey) -> bool {
        self.temp.contains_key(key)
    }

    /// Switch dispatch of `key` from its temporary queue to the real execution queue, in one
    /// step: the real queue gets `saved` (the captured queue, in order) first, then the
    /// temporary queue's items; the registration is removed; the slot is Ready. Items
    /// dispatched afterwards go to the real queue directly.
    ///
    /// # Errors
    /// [`TableError::NoTemporaryQueue`] when no temporary queue of this relocation attempt is
    /// registered (nothing changes then).
    pub fn switch_to_real(
        &mut self,
        key: &AuthorityKey,
        relocation_id: [u8; 16],
        attempt: u64,
        saved: Vec<Captured<W>>,
    ) -> Result<(), TableError> {
        match self.temp.get(key) {
            Some(t) if t.relocation_id == relocation_id && t.attempt == attempt => {}
            _ => return Err(TableError::NoTemporaryQueue(key.as_str().to_owned())),
        }
        let Some(t) = self.temp.remove(key) else {
            return Err(TableError::NoTemporaryQueue(key.as_str().to_owned()));
        };
        let first = saved.iter().map(|c| c.seq + 1).max().unwrap_or(1);
        let mut queue = ExecQueue::starting_at(first);
        queue.restore_front(saved);
        for (lane, item) in t.items {
            queue.push(lane, item);
        }
        self.slots.insert(
            key.clone(),
            Slot {
                generation: t.generation,
                state: SlotState::Ready,
                queue,
                hold: None,
            },
        );
        Ok(())
    }

    /// Drop a temporary queue (relocation aborted before the target accepted): its items come
    /// back to the caller, which discards them (the source still owns them).
    pub fn abort_temporary(&mut self, key: &AuthorityKey) -> Vec<W> {
        self.temp
            .remove(key)
            .map(|t| t.items.into_iter().map(|(_, w)| w).collect())
            .unwrap_or_default()
    }

    /// Remove incarnation `generation` (closed, destroyed, relocated away): its waiting and held
    /// items come back for their terminal results.
    ///
    /// # Errors
    /// [`TableError::Missing`], [`TableError::GenerationMismatch`].
    pub fn remove(&mut self, key: &AuthorityKey, generation: u64) -> Result<Vec<W>, TableError> {
        self.slot_of(key, generation)?;
        let Some(mut slot) = self.slots.remove(key) else {
            return Err(TableError::Missing(key.as_str().to_owned()));
        };
        let mut out = slot.queue.drain();
        out.extend(
            slot.hold
                .take()
                .unwrap_or_default()
                .into_iter()
                .map(|(_, w)| w),
        );
        Ok(out)
    }

    /// Number of objects with an execution queue.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::super::queue::Picked;
    use super::*;
    use zlink_store::types::ObjectKind;

    fn key(id: &str) -> AuthorityKey {
        AuthorityKey::new(ObjectKind::Actor, id).unwrap()
    }

    fn run_all(slot: &mut Slot<&'static str>) -> Vec<&'static str> {
        let mut out = Vec::new();
        while let Some(p) = slot.queue().next_turn() {
            if let Picked::Work { item, .. } = p {
                out.push(item);
            }
            slot.queue().complete().unwrap();
        }
        out
    }

    #[test]
    fn a_queue_exists_before_the_instance_and_keeps_what_arrived_during_creation() {
        let mut t = ObjectTable::new();
        let k = key("p-1");
        assert_eq!(
            t.dispatch(&k, Lane::Application, "early"),
            Dispatched::NotHere("early")
        );
        t.open(&k, 3).unwrap();
        assert_eq!(t.slot(&k).unwrap().state(), SlotState::Creating);
        assert_eq!(
            t.dispatch(&k, Lane::Application, "m1"),
            Dispatched::Queued(1)
        );
        assert_eq!(t.open(&k, 3), Err(TableError::Exists(k.as_str().into())));
        assert!(matches!(
            t.mark_ready(&k, 4),
            Err(TableError::GenerationMismatch {
                current: 3,
                requested: 4,
                ..
            })
        ));
        t.mark_ready(&k, 3).unwrap();
        assert_eq!(run_all(t.slot(&k).unwrap()), vec!["m1"]);
    }

    #[test]
    fn a_sealed_object_parks_arrivals_in_its_ingress_hold() {
        let mut t = ObjectTable::new();
        let k = key("p-2");
        t.open(&k, 1).unwrap();
        t.dispatch(&k, Lane::Application, "before");
        t.seal(&k, 1).unwrap();
        assert_eq!(t.dispatch(&k, Lane::Lifecycle, "ctl"), Dispatched::Held);
        assert_eq!(t.take_held(&k, 1).unwrap(), vec!["ctl"]);
        for m in ["h1", "h2", "h3"] {
            assert_eq!(t.dispatch(&k, Lane::Application, m), Dispatched::Held);
        }
        // The hold is relayed in arrival order; the seal stays for later arrivals.
        assert_eq!(t.take_held(&k, 1).unwrap(), vec!["h1", "h2", "h3"]);
        assert_eq!(t.dispatch(&k, Lane::Application, "h4"), Dispatched::Held);
        // An aborted relocation unseals: held work runs after what was queued before the seal.
        assert_eq!(t.unseal(&k, 1).unwrap(), 1);
        assert!(matches!(
            t.dispatch(&k, Lane::Application, "after"),
            Dispatched::Queued(_)
        ));
        assert_eq!(run_all(t.slot(&k).unwrap()), vec!["before", "h4", "after"]);
        assert!(t.seal(&k, 2).is_err(), "control names its incarnation");
    }

    #[test]
    fn dispatch_prefers_a_registered_temporary_queue_and_the_switch_is_atomic() {
        let mut t = ObjectTable::new();
        let k = key("p-3");
        let rel = [9u8; 16];
        t.register_temporary(&k, rel, 1, 5).unwrap();
        assert!(t.has_temporary(&k));
        // Arrivals during restore go to the temporary queue, before any instance exists.
        assert_eq!(
            t.dispatch(&k, Lane::Application, "relayed-1"),
            Dispatched::Temporary
        );
        assert_eq!(
            t.dispatch(&k, Lane::Application, "direct-2"),
            Dispatched::Temporary
        );
        assert!(t.slot(&k).is_none());
        // Another attempt's switch changes nothing.
        assert_eq!(
            t.switch_to_real(&k, rel, 2, vec![]),
            Err(TableError::NoTemporaryQueue(k.as_str().into()))
        );
        assert!(t.has_temporary(&k));
        let saved = vec![
            Captured {
                seq: 10,
                lane: Lane::Application,
                item: "saved-10",
            },
            Captured {
                seq: 11,
                lane: Lane::Application,
                item: "saved-11",
            },
        ];
        t.switch_to_real(&k, rel, 1, saved).unwrap();
        assert!(!t.has_temporary(&k));
        // After the switch: straight into the real queue, behind saved and temporary work.
        assert_eq!(
            t.dispatch(&k, Lane::Application, "after"),
            Dispatched::Queued(14)
        );
        let slot = t.slot(&k).unwrap();
        assert_eq!((slot.generation(), slot.state()), (5, SlotState::Ready));
        assert_eq!(
            run_all(slot),
            vec!["saved-10", "saved-11", "relayed-1", "direct-2", "after"]
        );
    }

    #[test]
    fn removing_an_incarnation_returns_its_waiting_and_held_work() {
        let mut t = ObjectTable::new();
        let k = key("p-4");
        t.open(&k, 2).unwrap();
        t.dispatch(&k, Lane::Application, "q1");
        t.seal(&k, 2).unwrap();
        t.dispatch(&k, Lane::Application, "held");
        assert!(t.remove(&k, 1).is_err());
        assert_eq!(t.remove(&k, 2).unwrap(), vec!["q1", "held"]);
        assert!(t.is_empty());
        // An aborted temporary queue gives its items back.
        t.register_temporary(&k, [1; 16], 1, 3).unwrap();
        t.dispatch(&k, Lane::Application, "x");
        assert_eq!(t.abort_temporary(&k), vec!["x"]);
        assert_eq!(
            t.dispatch(&k, Lane::Application, "y"),
            Dispatched::NotHere("y")
        );
    }
}
