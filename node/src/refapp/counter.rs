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
    /// The node that served this call: its RID (empty outside a runtime)…
    #[serde(default)]
    pub rid: String,
    /// …and its node lifecycle generation, so a history checker sees who served every call.
    #[serde(default)]
    pub lifecycle: u64,
    /// For a [`Read`] with a source: one past the highest number applied from it.
    #[serde(default)]
    pub end: u64,
    /// For a [`Read`] with a source: every missing range below `end` (uncapped).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub holes: Vec<super::seq::SeqRange>,
}
impl JsonMessage for Total {
    const PACKET_NAME: &'static str = "refapp.Total";
}

/// Ask a counter for its [`Total`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Read;

/// Ask a counter for its [`Total`] with the exact applied set of one source (`end` and
/// `holes`): the load generator's check tells an acknowledged message that was lost from one
/// whose call failed and that was never applied.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReadSource {
    /// The source stream.
    pub source: String,
}
impl JsonMessage for ReadSource {
    const PACKET_NAME: &'static str = "refapp.ReadSource";
}
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
            rid: String::new(),
            lifecycle: 0,
            end: 0,
            holes: Vec::new(),
        }
    }

    fn total_of(&self, source: &str) -> Total {
        let mut t = self.total();
        if let Some(s) = self.seen.source(source) {
            t.end = s.end();
            t.holes = s.holes();
        }
        t
    }
}

/// `t` stamped with the serving node.
fn served<S: Send + 'static>(ctx: &zlink::object::exec::Ctx<S>, mut t: Total) -> Total {
    if let Some((rid, lifecycle)) = ctx.node() {
        t.rid = rid;
        t.lifecycle = lifecycle;
    }
    t
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
        let t = {
            let mut c = ctx.state();
            c.add(&a);
            c.total()
        };
        Ok::<_, CallError>(served(&ctx, t))
    });
    h.on_request(|ctx, _: Read| async move {
        let t = ctx.state().total();
        Ok::<_, CallError>(served(&ctx, t))
    });
    h.on_request(|ctx, r: ReadSource| async move {
        let t = ctx.state().total_of(&r.source);
        Ok::<_, CallError>(served(&ctx, t))
    });
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

    #[test]
    fn a_source_read_lists_every_hole_below_the_highest_number() {
        let mut c = CounterState::new("c".into());
        for seq in [0, 1, 4, 5, 9] {
            c.add(&Add {
                source: "s".into(),
                seq,
                by: 1,
            });
        }
        let t = c.total_of("s");
        assert_eq!(t.end, 10);
        let holes: Vec<(u64, u64)> = t.holes.iter().map(|r| (r.first, r.last)).collect();
        assert_eq!(holes, vec![(2, 3), (6, 8)]);
        let none = c.total_of("other");
        assert_eq!((none.end, none.holes.len()), (0, 0));
        // A reset counter (a new incarnation that saw only 500..) shows its lost prefix.
        let mut r = CounterState::new("r".into());
        r.add(&Add {
            source: "s".into(),
            seq: 500,
            by: 1,
        });
        let t = r.total_of("s");
        assert_eq!(t.end, 501);
        assert_eq!((t.holes[0].first, t.holes[0].last), (0, 499));
    }
}
