//! The `counter` Instance Spot of the reference application (issue "node host" §6): activated
//! on its first message by a call with Instance intent (cold activation, wire §8), it counts
//! increments per source with the same per-source sequence tracking as the player, so a run
//! can prove that a first message was handled exactly once.

use serde::{Deserialize, Serialize};

use super::seq::SeqTracker;
use zlink::call::error::CallError;
use zlink::mesh::JsonMessage;
use zlink::object::exec::ObjectHandlers;

/// Add `by` to the counter; numbered in its source's stream.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Add {
    /// The sending stream.
    pub source: String,
    /// The stream's sequence number for this counter, from 0.
    pub seq: u64,
    /// The increment.
    pub by: u64,
}
impl JsonMessage for Add {
    const PACKET_NAME: &'static str = "refapp.Add";
}

/// The counter's value after an [`Add`] (or for a [`Read`]), and how many increments it saw.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Total {
    /// The counter's ID.
    pub id: String,
    /// Sum of the increments applied.
    pub value: u64,
    /// Increments applied (duplicates excluded).
    pub adds: u64,
    /// Increments received twice (never applied twice).
    pub duplicates: u64,
    /// Increments that arrived ahead of a lower number (applied; reordering is reported only).
    #[serde(default)]
    pub out_of_order: u64,
}
impl JsonMessage for Total {
    const PACKET_NAME: &'static str = "refapp.Total";
}

/// Ask a counter for its [`Total`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Read;
impl JsonMessage for Read {
    const PACKET_NAME: &'static str = "refapp.Read";
}

/// The counter's state.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct CounterState {
    /// The counter's ID.
    pub id: String,
    /// Sum of the increments applied.
    pub value: u64,
    /// Increments applied.
    pub adds: u64,
    /// Per-source sequence tracking.
    pub seen: SeqTracker,
}

impl CounterState {
    /// A zero counter.
    pub fn new(id: String) -> Self {
        Self {
            id,
            ..Self::default()
        }
    }

    fn add(&mut self, a: &Add) {
        if self.seen.record(&a.source, a.seq) != super::seq::Receipt::Duplicate {
            self.value += a.by;
            self.adds += 1;
        }
    }

    fn total(&self) -> Total {
        Total {
            id: self.id.clone(),
            value: self.value,
            adds: self.adds,
            duplicates: self.seen.duplicates(),
            out_of_order: self.seen.out_of_order(),
        }
    }
}

/// The counter's handlers: `Add` as a send or a request (answered with the new [`Total`]), and
/// `Read`.
pub fn counter_handlers() -> ObjectHandlers<CounterState> {
    let mut h: ObjectHandlers<CounterState> = ObjectHandlers::new();
    h.on_send(|ctx, a: Add| async move {
        ctx.state().add(&a);
        Ok(())
    });
    h.on_request(|ctx, a: Add| async move {
        let mut c = ctx.state();
        c.add(&a);
        Ok::<_, CallError>(c.total())
    });
    h.on_request(|ctx, _: Read| async move { Ok::<_, CallError>(ctx.state().total()) });
    h
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_duplicate_add_is_counted_and_never_applied_twice() {
        let mut c = CounterState::new("c".into());
        let add = |seq, by| Add {
            source: "s".into(),
            seq,
            by,
        };
        c.add(&add(0, 5));
        c.add(&add(1, 2));
        c.add(&add(1, 2));
        let t = c.total();
        assert_eq!((t.value, t.adds, t.duplicates), (7, 2, 1));
        assert_eq!(t.out_of_order, 0);
        // 3 before 2: applied, counted as out of order (reported only).
        c.add(&add(3, 1));
        c.add(&add(2, 1));
        let t = c.total();
        assert_eq!(
            (t.value, t.adds, t.duplicates, t.out_of_order),
            (9, 4, 1, 1)
        );
    }
}
