//! The object execution queue (glossary §5 "Object execution queue", "Application lane",
//! "Lifecycle lane", "양보 부채" (yield debt); §3 "Handler turn", "Async와 Yield").
//!
//! Pure: a state machine over work items of any type `W`, no tasks, no clock. The runtime
//! shell asks [`ExecQueue::next_turn`] for the next item whenever the turn is free, runs it, and
//! reports how the turn ended ([`ExecQueue::complete`] or [`ExecQueue::yield_turn`]).
//!
//! # Rules
//!
//! - **One turn at a time.** [`ExecQueue::next_turn`] hands out nothing while a turn runs, so two
//!   handler turns of one queue never overlap.
//! - **Two FIFO lanes.** The lifecycle lane (create, join, leave, relocation and other control
//!   work) is served before the application lane (messages, timer ticks, resumed
//!   continuations), each lane in arrival order.
//! - **Yield debt.** After [`LIFECYCLE_BURST`] lifecycle turns in a row while application work
//!   waits, the queue owes the application lane one turn: the next pick is application work
//!   even if lifecycle work is waiting. Running that turn pays the debt. So a stream of control
//!   work cannot starve messages, and messages never delay control work by more than one turn
//!   per burst.
//! - **Yield.** A turn that yields gives the turn back ([`ExecQueue::yield_turn`]) while its
//!   continuation waits for a result; other items run meanwhile. When the result is there,
//!   [`ExecQueue::resume`] queues the continuation at the back of the application lane, and it
//!   continues in a new turn. Whether a handler may yield at all (SpotWide User Spots and
//!   Instance Spots only) is decided by the caller; the queue only keeps the turns apart.
//! - **Capture at a handler boundary.** [`ExecQueue::capture`] succeeds only when no turn runs
//!   and no yielded continuation is outstanding; it returns the not-yet-run items in the order
//!   they would have run (lifecycle items first), each with its sequence number.

use std::collections::VecDeque;

use thiserror::Error;

/// Lifecycle turns in a row, while application work waits, before the application lane is
/// owed a turn (yield debt).
pub const LIFECYCLE_BURST: u32 = 16;

/// Which FIFO a work item waits in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Lane {
    /// Messages, timer ticks, resumed continuations.
    Application,
    /// Create, join, leave, relocation and other lifecycle control.
    Lifecycle,
}

/// A yielded continuation waiting to be resumed in a new turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ResumeToken(u64);

/// What [`ExecQueue::next_turn`] hands out: the turn now belongs to it.
#[derive(Debug, PartialEq, Eq)]
pub enum Picked<W> {
    /// A queued item, with its sequence number and lane.
    Work {
        /// Queue sequence (increasing in acceptance order).
        seq: u64,
        /// Its lane.
        lane: Lane,
        /// The item.
        item: W,
    },
    /// A yielded continuation continues.
    Resume(ResumeToken),
}

/// One not-yet-run item returned by [`ExecQueue::capture`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Captured<W> {
    /// Queue sequence.
    pub seq: u64,
    /// Its lane.
    pub lane: Lane,
    /// The item.
    pub item: W,
}

/// A queue operation refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum QueueError {
    /// `complete` or `yield_turn` without a running turn.
    #[error("no turn is running")]
    NoTurn,
    /// `resume` of a token that is not outstanding (twice, or never yielded).
    #[error("continuation {0:?} is not waiting to resume")]
    UnknownToken(ResumeToken),
    /// `capture` while a turn runs or a yielded continuation is outstanding: not a handler
    /// boundary.
    #[error(
        "not at a handler boundary: a turn runs or {0} yielded continuation(s) are outstanding"
    )]
    NotAtBoundary(usize),
}

#[derive(Debug)]
enum Entry<W> {
    Work { seq: u64, item: W },
    Resume(ResumeToken),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Turn {
    Idle,
    Running(Lane),
}

/// A serialized execution queue of one object incarnation.
#[derive(Debug)]
pub struct ExecQueue<W> {
    app: VecDeque<Entry<W>>,
    lifecycle: VecDeque<Entry<W>>,
    next_seq: u64,
    next_token: u64,
    turn: Turn,
    /// Yielded continuations not yet resumed or finished.
    outstanding: std::collections::BTreeSet<ResumeToken>,
    /// Lifecycle turns in a row while application work waited.
    streak: u32,
    debt: bool,
}

impl<W> Default for ExecQueue<W> {
    fn default() -> Self {
        Self::new()
    }
}

impl<W> ExecQueue<W> {
    /// An empty queue, sequence numbers starting at 1.
    pub fn new() -> Self {
        Self::starting_at(1)
    }

    /// An empty queue whose first item gets sequence `first_seq` (a restored queue continues
    /// after the captured sequences).
    pub fn starting_at(first_seq: u64) -> Self {
        Self {
            app: VecDeque::new(),
            lifecycle: VecDeque::new(),
            next_seq: first_seq.max(1),
            next_token: 1,
            turn: Turn::Idle,
            outstanding: std::collections::BTreeSet::new(),
            streak: 0,
            debt: false,
        }
    }

    /// Accept `item` into `lane`; returns its sequence number.
    pub fn push(&mut self, lane: Lane, item: W) -> u64 {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.lane_mut(lane).push_back(Entry::Work { seq, item });
        seq
    }

    /// Put captured items back, in their captured order, ahead of anything queued since
    /// (restore: saved work runs before work that arrived during the move).
    pub fn restore_front(&mut self, items: Vec<Captured<W>>) {
        let (mut app, mut life) = (VecDeque::new(), VecDeque::new());
        for c in items {
            self.next_seq = self.next_seq.max(c.seq + 1);
            let e = Entry::Work {
                seq: c.seq,
                item: c.item,
            };
            match c.lane {
                Lane::Application => app.push_back(e),
                Lane::Lifecycle => life.push_back(e),
            }
        }
        app.append(&mut self.app);
        life.append(&mut self.lifecycle);
        self.app = app;
        self.lifecycle = life;
    }

    /// The next item to run, if the turn is free and anything waits. The turn belongs to the
    /// returned item until [`ExecQueue::complete`] or [`ExecQueue::yield_turn`].
    pub fn next_turn(&mut self) -> Option<Picked<W>> {
        if self.turn != Turn::Idle {
            return None;
        }
        let app_waiting = !self.app.is_empty();
        let owe_app = self.debt && app_waiting;
        let lane = if !self.lifecycle.is_empty() && !owe_app {
            Lane::Lifecycle
        } else if app_waiting {
            Lane::Application
        } else {
            return None;
        };
        let entry = self.lane_mut(lane).pop_front()?;
        match lane {
            Lane::Lifecycle => {
                // The burst counts only while application work is kept waiting.
                if app_waiting {
                    self.streak += 1;
                    if self.streak >= LIFECYCLE_BURST {
                        self.debt = true;
                    }
                }
            }
            Lane::Application => {
                self.streak = 0;
                self.debt = false;
            }
        }
        self.turn = Turn::Running(lane);
        Some(match entry {
            Entry::Work { seq, item } => Picked::Work { seq, lane, item },
            Entry::Resume(t) => Picked::Resume(t),
        })
    }

    /// While draining to a handler boundary (capture): the first queued continuation, if the
    /// turn is free. New work keeps waiting; continuations must finish for the boundary.
    pub fn next_resume(&mut self) -> Option<ResumeToken> {
        if self.turn != Turn::Idle {
            return None;
        }
        let pos = self
            .app
            .iter()
            .position(|e| matches!(e, Entry::Resume(_)))?;
        let Some(Entry::Resume(t)) = self.app.remove(pos) else {
            return None;
        };
        self.turn = Turn::Running(Lane::Application);
        Some(t)
    }

    /// The running turn finished (its handler and every continuation completed).
    ///
    /// # Errors
    /// [`QueueError::NoTurn`].
    pub fn complete(&mut self) -> Result<(), QueueError> {
        if self.turn == Turn::Idle {
            return Err(QueueError::NoTurn);
        }
        self.turn = Turn::Idle;
        Ok(())
    }

    /// The running turn yields: the turn is free for other items while the continuation waits;
    /// [`ExecQueue::resume`] with the returned token queues it again.
    ///
    /// # Errors
    /// [`QueueError::NoTurn`].
    pub fn yield_turn(&mut self) -> Result<ResumeToken, QueueError> {
        if self.turn == Turn::Idle {
            return Err(QueueError::NoTurn);
        }
        self.turn = Turn::Idle;
        let t = ResumeToken(self.next_token);
        self.next_token += 1;
        self.outstanding.insert(t);
        Ok(t)
    }

    /// The result a yielded continuation waited for is there: queue it at the back of the
    /// application lane; it continues in a new turn.
    ///
    /// # Errors
    /// [`QueueError::UnknownToken`] for a token not outstanding.
    pub fn resume(&mut self, token: ResumeToken) -> Result<(), QueueError> {
        if !self.outstanding.remove(&token) {
            return Err(QueueError::UnknownToken(token));
        }
        self.app.push_back(Entry::Resume(token));
        Ok(())
    }

    /// Forget a yielded continuation that will never continue (its handler was dropped or
    /// panicked while yielded): it leaves the outstanding set and, if its resume was queued
    /// already, the application lane. Returns whether anything was removed.
    pub fn forget(&mut self, token: ResumeToken) -> bool {
        let was_outstanding = self.outstanding.remove(&token);
        let before = self.app.len();
        self.app
            .retain(|e| !matches!(e, Entry::Resume(t) if *t == token));
        was_outstanding || self.app.len() != before
    }

    /// Work not finished yet: waiting items, the running turn and yielded continuations.
    pub fn pending(&self) -> usize {
        self.len() + usize::from(self.turn != Turn::Idle) + self.outstanding.len()
    }

    /// Whether a turn runs now.
    pub fn is_running(&self) -> bool {
        self.turn != Turn::Idle
    }

    /// Items waiting (both lanes, resumed continuations included).
    pub fn len(&self) -> usize {
        self.app.len() + self.lifecycle.len()
    }

    /// Whether nothing waits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether the queue is at a handler boundary: no turn runs and no yielded continuation is
    /// outstanding or queued to resume.
    pub fn at_boundary(&self) -> bool {
        self.turn == Turn::Idle
            && self.outstanding.is_empty()
            && !self.app.iter().any(|e| matches!(e, Entry::Resume(_)))
    }

    /// Take every not-yet-run item, in the order they would have run (lifecycle lane first,
    /// then the application lane; each in arrival order), leaving the queue empty.
    ///
    /// # Errors
    /// [`QueueError::NotAtBoundary`] while a turn runs or a continuation is outstanding.
    pub fn capture(&mut self) -> Result<Vec<Captured<W>>, QueueError> {
        if !self.at_boundary() {
            return Err(QueueError::NotAtBoundary(
                self.outstanding.len()
                    + self
                        .app
                        .iter()
                        .filter(|e| matches!(e, Entry::Resume(_)))
                        .count(),
            ));
        }
        let mut out = Vec::with_capacity(self.len());
        for (lane, q) in [
            (Lane::Lifecycle, std::mem::take(&mut self.lifecycle)),
            (Lane::Application, std::mem::take(&mut self.app)),
        ] {
            for e in q {
                if let Entry::Work { seq, item } = e {
                    out.push(Captured { seq, lane, item });
                }
            }
        }
        Ok(out)
    }

    /// Remove every waiting item (e.g. the object was removed: the caller ends each with a
    /// terminal result). Outstanding continuations are not affected.
    pub fn drain(&mut self) -> Vec<W> {
        let mut out = Vec::new();
        for q in [&mut self.lifecycle, &mut self.app] {
            for e in q.drain(..) {
                if let Entry::Work { item, .. } = e {
                    out.push(item);
                }
            }
        }
        out
    }

    /// The sequence the next accepted item gets.
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    fn lane_mut(&mut self, lane: Lane) -> &mut VecDeque<Entry<W>> {
        match lane {
            Lane::Application => &mut self.app,
            Lane::Lifecycle => &mut self.lifecycle,
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// Run every waiting item to completion, returning them in run order.
    fn run_all(q: &mut ExecQueue<&'static str>) -> Vec<&'static str> {
        let mut out = Vec::new();
        while let Some(p) = q.next_turn() {
            match p {
                Picked::Work { item, .. } => out.push(item),
                Picked::Resume(_) => out.push("resume"),
            }
            q.complete().unwrap();
        }
        out
    }

    #[test]
    fn one_turn_at_a_time_in_arrival_order_with_increasing_sequences() {
        let mut q = ExecQueue::new();
        assert_eq!(q.push(Lane::Application, "a"), 1);
        assert_eq!(q.push(Lane::Application, "b"), 2);
        let first = q.next_turn().unwrap();
        assert_eq!(
            first,
            Picked::Work {
                seq: 1,
                lane: Lane::Application,
                item: "a"
            }
        );
        // While "a" runs, nothing else is handed out.
        assert_eq!(q.next_turn(), None);
        assert!(q.is_running());
        q.complete().unwrap();
        assert_eq!(q.complete(), Err(QueueError::NoTurn));
        assert_eq!(run_all(&mut q), vec!["b"]);
    }

    #[test]
    fn lifecycle_work_goes_first_but_owes_the_application_lane_a_turn_per_burst() {
        let mut q = ExecQueue::new();
        let app = ["m1", "m2", "m3"];
        for m in app {
            q.push(Lane::Application, m);
        }
        for _ in 0..40 {
            q.push(Lane::Lifecycle, "L");
        }
        let order = run_all(&mut q);
        let burst = LIFECYCLE_BURST as usize;
        let mut expected = vec!["L"; burst];
        expected.push("m1");
        expected.extend(vec!["L"; burst]);
        expected.push("m2");
        expected.extend(vec!["L"; 40 - 2 * burst]);
        expected.push("m3");
        assert_eq!(order, expected);
    }

    #[test]
    fn lifecycle_turns_without_waiting_application_work_build_no_debt() {
        let mut q = ExecQueue::new();
        for _ in 0..(LIFECYCLE_BURST * 2) {
            q.push(Lane::Lifecycle, "L");
            assert!(matches!(q.next_turn(), Some(Picked::Work { .. })));
            q.complete().unwrap();
        }
        // Now application work arrives together with more control work: control goes first.
        q.push(Lane::Application, "m");
        q.push(Lane::Lifecycle, "L2");
        assert_eq!(run_all(&mut q), vec!["L2", "m"]);
    }

    #[test]
    fn a_yield_lets_other_work_run_and_resumes_in_a_new_turn_at_the_back() {
        let mut q = ExecQueue::new();
        q.push(Lane::Application, "slow");
        q.push(Lane::Application, "b");
        assert!(matches!(
            q.next_turn(),
            Some(Picked::Work { item: "slow", .. })
        ));
        let t = q.yield_turn().unwrap();
        assert!(!q.at_boundary());
        // "b" runs while "slow" waits; "c" arrives meanwhile.
        assert!(matches!(
            q.next_turn(),
            Some(Picked::Work { item: "b", .. })
        ));
        q.push(Lane::Application, "c");
        q.resume(t).unwrap();
        assert_eq!(q.resume(t), Err(QueueError::UnknownToken(t)));
        q.complete().unwrap();
        // Resumed continuations queue behind work accepted before the resume.
        assert_eq!(run_all(&mut q), vec!["c", "resume"]);
        assert!(q.at_boundary());
        // A continuation that will never continue is forgotten, queued or not.
        q.push(Lane::Application, "d");
        assert!(matches!(
            q.next_turn(),
            Some(Picked::Work { item: "d", .. })
        ));
        let t = q.yield_turn().unwrap();
        assert!(!q.at_boundary());
        assert!(q.forget(t));
        assert!(q.at_boundary());
        q.push(Lane::Application, "e");
        assert!(matches!(
            q.next_turn(),
            Some(Picked::Work { item: "e", .. })
        ));
        let t = q.yield_turn().unwrap();
        q.resume(t).unwrap();
        assert!(q.forget(t));
        assert!(!q.forget(t));
        assert!(q.at_boundary() && q.is_empty());
    }

    #[test]
    fn capture_only_at_a_handler_boundary_and_restore_keeps_the_order() {
        let mut q = ExecQueue::new();
        q.push(Lane::Application, "m1");
        q.push(Lane::Lifecycle, "join");
        q.push(Lane::Application, "m2");
        assert!(matches!(
            q.next_turn(),
            Some(Picked::Work { item: "join", .. })
        ));
        assert_eq!(q.capture(), Err(QueueError::NotAtBoundary(0)));
        let t = q.yield_turn().unwrap();
        assert_eq!(q.capture(), Err(QueueError::NotAtBoundary(1)));
        q.resume(t).unwrap();
        assert_eq!(q.capture(), Err(QueueError::NotAtBoundary(1)));
        assert_eq!(run_all(&mut q), vec!["m1", "m2", "resume"]);
        q.push(Lane::Application, "m3");
        q.push(Lane::Lifecycle, "leave");
        q.push(Lane::Application, "m4");
        let captured = q.capture().unwrap();
        assert!(q.is_empty());
        let seqs: Vec<_> = captured.iter().map(|c| (c.seq, c.item)).collect();
        assert_eq!(seqs, vec![(5, "leave"), (4, "m3"), (6, "m4")]);
        // A fresh queue: saved work runs before work that arrived during the move, and new
        // sequences continue after the captured ones.
        let mut fresh = ExecQueue::new();
        fresh.push(Lane::Application, "arrived-during-move");
        fresh.restore_front(captured);
        assert_eq!(fresh.push(Lane::Application, "after"), 7);
        assert_eq!(
            run_all(&mut fresh),
            vec!["leave", "m3", "m4", "arrived-during-move", "after"]
        );
    }
}
