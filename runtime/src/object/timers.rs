//! Object timers held as data (issue "Spots and Actors" §2; wire §9 "timer 복원"): a due time,
//! a period and the payload to deliver — never a native timer handle or an opaque future, so a
//! relocation can capture them and a fresh runtime can restore them.
//!
//! Pure: times are milliseconds of the caller's monotonic clock. A timer that comes due does
//! not run by itself: [`TimerSet::take_due`] hands out its tick, and the runtime queues the tick
//! on the object's application lane like a message, so a timer never runs concurrently with a
//! handler and keeps its place relative to the messages accepted around it. Once queued, a tick
//! is ordinary queue work (captured with the saved queue); only the not-yet-due timers are
//! captured here, with their **remaining** time, so the clocks of source and target need not
//! agree.
//!
//! Periodic timers are fixed-rate: the next due time is the previous due time plus the period.
//! A runtime that was stalled for several periods gets one tick, and the schedule skips to the
//! first due time after `now` (no burst of catch-up ticks).

use std::collections::{BTreeMap, HashMap};

use bytes::Bytes;
use thiserror::Error;
use zlink_protocol::generated::{CapturedTimer, TimerKind};

/// A timer refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum TimerError {
    /// Timer IDs are non-zero.
    #[error("timer id 0 is reserved")]
    ZeroId,
    /// The ID is armed already (cancel it first).
    #[error("timer {0} is already armed")]
    Duplicate(u64),
    /// A periodic timer needs a positive period.
    #[error("periodic timer {0} needs a positive period")]
    ZeroPeriod(u64),
    /// A captured timer is inconsistent (one-shot with a period, periodic without).
    #[error("captured timer {0} is inconsistent: {1}")]
    BadCapture(u64, &'static str),
}

/// One armed timer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Timer {
    /// Caller-chosen non-zero ID, unique per object.
    pub id: u64,
    /// One-shot or periodic.
    pub kind: TimerKind,
    /// Period in milliseconds (0 for one-shot).
    pub period_ms: u64,
    /// Packet name the tick is delivered as.
    pub packet_name: String,
    /// Payload delivered with every tick.
    pub payload: Bytes,
}

/// A tick handed out by [`TimerSet::take_due`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tick {
    /// The timer.
    pub timer: Timer,
    /// The due time this tick stands for.
    pub due_ms: u64,
    /// Which arming of the timer produced it (see [`TimerSet::is_current`]).
    pub arming: u64,
}

/// The armed timers of one object.
#[derive(Debug, Default, Clone)]
pub struct TimerSet {
    by_due: BTreeMap<(u64, u64), Timer>,
    due_of: HashMap<u64, u64>,
    /// The current arming of each timer that is armed or has a tick handed out and not yet
    /// run: a tick of an older arming (cancelled, or re-armed since) is stale.
    current: HashMap<u64, u64>,
    armings: u64,
}

impl TimerSet {
    /// No timers.
    pub fn new() -> Self {
        Self::default()
    }

    /// Arm a one-shot timer due at `due_ms`.
    ///
    /// # Errors
    /// [`TimerError::ZeroId`], [`TimerError::Duplicate`].
    pub fn once(
        &mut self,
        id: u64,
        due_ms: u64,
        packet_name: &str,
        payload: Bytes,
    ) -> Result<(), TimerError> {
        self.arm(
            Timer {
                id,
                kind: TimerKind::OneShot,
                period_ms: 0,
                packet_name: packet_name.to_owned(),
                payload,
            },
            due_ms,
        )
    }

    /// Arm a periodic timer, first due at `first_due_ms`, then every `period_ms`.
    ///
    /// # Errors
    /// [`TimerError::ZeroId`], [`TimerError::Duplicate`], [`TimerError::ZeroPeriod`].
    pub fn periodic(
        &mut self,
        id: u64,
        first_due_ms: u64,
        period_ms: u64,
        packet_name: &str,
        payload: Bytes,
    ) -> Result<(), TimerError> {
        if period_ms == 0 {
            return Err(TimerError::ZeroPeriod(id));
        }
        self.arm(
            Timer {
                id,
                kind: TimerKind::Periodic,
                period_ms,
                packet_name: packet_name.to_owned(),
                payload,
            },
            first_due_ms,
        )
    }

    fn arm(&mut self, t: Timer, due_ms: u64) -> Result<(), TimerError> {
        if t.id == 0 {
            return Err(TimerError::ZeroId);
        }
        if self.due_of.contains_key(&t.id) {
            return Err(TimerError::Duplicate(t.id));
        }
        self.armings += 1;
        self.current.insert(t.id, self.armings);
        self.due_of.insert(t.id, due_ms);
        self.by_due.insert((due_ms, t.id), t);
        Ok(())
    }

    /// Whether `tick` still stands for its timer: the timer was not cancelled or re-armed
    /// after the tick was handed out. The runtime drops a stale tick instead of running it.
    pub fn is_current(&self, tick: &Tick) -> bool {
        self.current.get(&tick.timer.id) == Some(&tick.arming)
    }

    /// A tick ran (or was dropped): a one-shot timer is then fully done.
    pub fn consumed(&mut self, tick: &Tick) {
        if tick.timer.kind == TimerKind::OneShot && self.is_current(tick) {
            self.current.remove(&tick.timer.id);
        }
    }

    /// Cancel timer `id`; `true` if it was armed or had a tick waiting to run. A tick already
    /// handed out becomes stale ([`TimerSet::is_current`]), so it does not run either.
    pub fn cancel(&mut self, id: u64) -> bool {
        let pending = self.current.remove(&id).is_some();
        match self.due_of.remove(&id) {
            Some(due) => self.by_due.remove(&(due, id)).is_some() || pending,
            None => pending,
        }
    }

    /// The earliest due time, for the runtime's one wake-up timer.
    pub fn next_due(&self) -> Option<u64> {
        self.by_due.keys().next().map(|(due, _)| *due)
    }

    /// Every tick due at `now_ms`, in due order (ties by timer ID). One-shot timers are
    /// removed; periodic ones re-armed at their next due time after `now_ms`.
    pub fn take_due(&mut self, now_ms: u64) -> Vec<Tick> {
        let mut out = Vec::new();
        while let Some((&(due, id), _)) = self.by_due.iter().next() {
            if due > now_ms {
                break;
            }
            let Some(timer) = self.by_due.remove(&(due, id)) else {
                break;
            };
            self.due_of.remove(&id);
            if timer.kind == TimerKind::Periodic && timer.period_ms > 0 {
                let behind = (now_ms - due) / timer.period_ms;
                let next = due.saturating_add((behind + 1).saturating_mul(timer.period_ms));
                self.due_of.insert(id, next);
                self.by_due.insert((next, id), timer.clone());
            }
            let arming = self.current.get(&id).copied().unwrap_or(0);
            out.push(Tick {
                timer,
                due_ms: due,
                arming,
            });
        }
        out
    }

    /// Number of armed timers.
    pub fn len(&self) -> usize {
        self.by_due.len()
    }

    /// Whether no timer is armed.
    pub fn is_empty(&self) -> bool {
        self.by_due.is_empty()
    }

    /// The armed timers as data, with their time remaining after `now_ms`, in due order (the
    /// durable `CapturedTimer` of `relocation-envelope-v1`).
    pub fn capture(&self, now_ms: u64) -> Vec<CapturedTimer> {
        self.by_due
            .iter()
            .map(|(&(due, _), t)| CapturedTimer {
                timer_id: t.id,
                kind: t.kind,
                remaining_ms: due.saturating_sub(now_ms),
                period_ms: t.period_ms,
                packet_name: t.packet_name.clone(),
                payload: t.payload.clone(),
            })
            .collect()
    }

    /// Timers restored from `captured` on a clock whose current time is `now_ms`.
    ///
    /// # Errors
    /// [`TimerError`] for an inconsistent or duplicate captured timer; nothing is restored then.
    pub fn restore(captured: &[CapturedTimer], now_ms: u64) -> Result<Self, TimerError> {
        let mut set = Self::new();
        for c in captured {
            let timer = Timer {
                id: c.timer_id,
                kind: c.kind,
                period_ms: c.period_ms,
                packet_name: c.packet_name.clone(),
                payload: c.payload.clone(),
            };
            match (c.kind, c.period_ms) {
                (TimerKind::OneShot, p) if p != 0 => {
                    return Err(TimerError::BadCapture(c.timer_id, "one-shot with a period"));
                }
                (TimerKind::Periodic, 0) => {
                    return Err(TimerError::BadCapture(
                        c.timer_id,
                        "periodic without a period",
                    ));
                }
                _ => {}
            }
            set.arm(timer, now_ms.saturating_add(c.remaining_ms))?;
        }
        Ok(set)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn ids(ticks: &[Tick]) -> Vec<(u64, u64)> {
        ticks.iter().map(|t| (t.timer.id, t.due_ms)).collect()
    }

    #[test]
    fn ticks_come_due_in_order_and_periodic_timers_rearm_at_a_fixed_rate() {
        let mut s = TimerSet::new();
        s.once(1, 100, "t.once", Bytes::from_static(b"o")).unwrap();
        s.periodic(2, 50, 40, "t.every", Bytes::from_static(b"p"))
            .unwrap();
        assert_eq!(s.next_due(), Some(50));
        assert!(s.take_due(49).is_empty());
        // At 95 the ticks due at 50 and 90 both passed: one tick, then the next due time after
        // now (fixed rate, no burst of catch-up ticks).
        assert_eq!(ids(&s.take_due(95)), vec![(2, 50)]);
        assert_eq!(s.next_due(), Some(100));
        assert_eq!(ids(&s.take_due(100)), vec![(1, 100)]);
        assert_eq!(s.len(), 1, "the one-shot timer is gone");
        assert_eq!(s.next_due(), Some(130));
        assert_eq!(ids(&s.take_due(130)), vec![(2, 130)]);
        // Stalled for several periods: one tick, then the schedule skips ahead.
        assert_eq!(ids(&s.take_due(1_000)), vec![(2, 170)]);
        assert_eq!(s.next_due(), Some(1_010));
        assert!(s.cancel(2));
        assert!(!s.cancel(2));
        assert!(s.is_empty());
        // A tick handed out and then cancelled (or re-armed) is stale.
        s.once(5, 10, "x", Bytes::new()).unwrap();
        let t = s.take_due(10).pop().unwrap();
        assert!(s.is_current(&t));
        assert!(s.cancel(5), "a tick waiting to run counts as armed");
        assert!(!s.is_current(&t));
        s.once(6, 10, "x", Bytes::new()).unwrap();
        let t = s.take_due(10).pop().unwrap();
        s.once(6, 50, "x", Bytes::new()).unwrap();
        assert!(!s.is_current(&t), "re-armed since");
        let t2 = s.take_due(50).pop().unwrap();
        assert!(s.is_current(&t2));
        s.consumed(&t2);
        assert!(!s.cancel(6), "a one-shot that ran is gone");
    }

    #[test]
    fn bad_timers_are_refused() {
        let mut s = TimerSet::new();
        assert_eq!(s.once(0, 1, "x", Bytes::new()), Err(TimerError::ZeroId));
        assert_eq!(
            s.periodic(3, 1, 0, "x", Bytes::new()),
            Err(TimerError::ZeroPeriod(3))
        );
        s.once(4, 1, "x", Bytes::new()).unwrap();
        assert_eq!(
            s.once(4, 9, "x", Bytes::new()),
            Err(TimerError::Duplicate(4))
        );
    }

    #[test]
    fn capture_keeps_remaining_time_and_restore_rebases_it_on_another_clock() {
        let mut s = TimerSet::new();
        s.once(1, 1_300, "a", Bytes::from_static(b"1")).unwrap();
        s.periodic(2, 1_100, 500, "b", Bytes::from_static(b"2"))
            .unwrap();
        let captured = s.capture(1_000);
        assert_eq!(
            captured
                .iter()
                .map(|c| (c.timer_id, c.remaining_ms))
                .collect::<Vec<_>>(),
            vec![(2, 100), (1, 300)]
        );
        // The durable encoding round-trips through the generated codec.
        let env = zlink_protocol::generated::RelocationEnvelopeV1 {
            relocation_id: [7; 16],
            object_kind: zlink_protocol::generated::ObjectKind::Actor,
            object_id: "p-1".into(),
            stable_type: "player".into(),
            object_generation: 1,
            relocation_policy: zlink_protocol::generated::RelocationPolicy::PreserveState,
            application_state: Bytes::new(),
            saved_queue: vec![],
            timers: captured,
            bound_session_present: false,
            bound_session: None,
        };
        let bytes = env.encode().unwrap();
        let back = zlink_protocol::generated::RelocationEnvelopeV1::decode(&bytes).unwrap();
        // A target whose clock reads 50 000: same remaining times, same order.
        let mut t = TimerSet::restore(&back.timers, 50_000).unwrap();
        assert_eq!(ids(&t.take_due(50_100)), vec![(2, 50_100)]);
        assert_eq!(ids(&t.take_due(50_600)), vec![(1, 50_300), (2, 50_600)]);
        // Inconsistent captures are refused.
        let mut bad = back.timers.clone();
        bad[0].period_ms = 0;
        assert!(matches!(
            TimerSet::restore(&bad, 0),
            Err(TimerError::BadCapture(2, _))
        ));
    }
}
