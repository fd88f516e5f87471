//! The application job queue: a per-host pool of permits that bounds handler admission, and the
//! host pressure state derived from it (glossary, Application job queue; Backpressure).
//!
//! ## Who takes a permit, and when it goes back
//!
//! The receive loop takes a [`JobPermit`] *before* it receives or claims application, control
//! and malformed ordinary ingress. Supplies identified before receive as terminal replies or
//! error completions bypass the queue; that is the caller's decision, this module only hands out
//! permits. The permit of an application record is released at the handler's first instruction
//! ([`JobPermit::release`]); the permit of a control or malformed record right after its
//! internal processing. Permits therefore count jobs admitted but not yet started, not running
//! handlers.
//!
//! ## Backpressure, never drops
//!
//! When all permits are in use, [`JobQueue::acquire`] waits. The wait is a cancellable future
//! on a FIFO [`tokio::sync::Semaphore`]: no capacity reject, no drop, no polling loop, no
//! busy-spin and no unbounded side queue. Dropping the future cancels the wait without leaking a
//! permit, even if a permit was granted to it in the meantime. [`JobQueue::close`] wakes every
//! waiter with [`Closed`] at shutdown.
//!
//! ## Host pressure state
//!
//! ```text
//!               in_use >= pause_at
//!   ┌─────────┐ ─────────────────► ┌────────┐
//!   │ Running │                    │ Paused │
//!   └─────────┘ ◄───────────────── └────────┘
//!               in_use <= resume_at
//! ```
//!
//! Between the two thresholds the state is kept (hysteresis). The thresholds come from
//! percentages of the permit count ([`JobQueueConfig`], defaults 80 and 60):
//!
//! - `pause_at = ceil(permits × pause_percent / 100)`: pausing happens at *at least* the
//!   configured share in use, never below it.
//! - `resume_at = floor(permits × resume_percent / 100)`: resuming happens at *at most* the
//!   configured share in use, never above it.
//!
//! With 10 permits that is pause at 8, resume at 6, hysteresis at 7. Because
//! `resume_percent < pause_percent`, this rounding always gives `resume_at < pause_at` and
//! `pause_at ≥ 1`, so an idle queue is `Running` for every valid configuration.
//!
//! The state is published through a [`tokio::sync::watch`] channel on every transition
//! ([`JobQueue::subscribe`]) so the transport can apply it as the absolute receive-flow state
//! (PAUSED/RUNNING) of the supporting sockets. It does not change route readiness or transport
//! liveness.
//!
//! ## Accounting
//!
//! `in_use` counts [`JobPermit`]s alive. It is raised after the semaphore grants a permit and
//! lowered before the semaphore gets it back, so it never exceeds the permit count. A move that
//! crosses a threshold (up onto `pause_at`, down onto `resume_at`) runs, with the pressure
//! decision, under the watch channel's lock ([`watch::Sender::send_if_modified`]); every other
//! move is a compare-and-swap that cannot change the state. So every transition is decided
//! under the lock on the exact count that caused it, and concurrent acquires and releases
//! publish transitions in the order they happen. The lock is held for a few instructions and
//! never across an `.await`.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use thiserror::Error;
use tokio::sync::watch;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, TryAcquireError as SemaphoreTryAcquireError};

/// The default pause threshold, in percent of permits in use (glossary, Application job queue).
pub const DEFAULT_PAUSE_PERCENT: u8 = 80;

/// The default resume threshold, in percent of permits in use (glossary, Application job queue).
pub const DEFAULT_RESUME_PERCENT: u8 = 60;

/// The host pressure state derived from permits in use (glossary, Application job queue).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum PressureState {
    /// Permits in use have not reached the pause threshold since they last fell to the resume
    /// threshold: supporting sockets receive normally.
    #[default]
    Running,
    /// Permits in use reached the pause threshold and have not yet fallen to the resume
    /// threshold: supporting sockets are flow-controlled (PAUSED).
    Paused,
}

/// How an application job queue is sized and when it signals pressure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JobQueueConfig {
    /// The number of permits, `N ≥ 1`: the most jobs admitted but not yet started at once.
    pub permits: usize,
    /// Pause when at least this percentage of permits is in use; `resume_percent < pause ≤ 100`.
    pub pause_percent: u8,
    /// Resume when at most this percentage of permits is in use; below `pause_percent`.
    pub resume_percent: u8,
}

impl JobQueueConfig {
    /// A configuration with `permits` permits and the spec's default thresholds (80 %, 60 %).
    #[must_use]
    pub fn with_permits(permits: usize) -> Self {
        Self {
            permits,
            pause_percent: DEFAULT_PAUSE_PERCENT,
            resume_percent: DEFAULT_RESUME_PERCENT,
        }
    }

    /// Checks the configuration and derives the thresholds, in permits, from the percentages.
    ///
    /// See the [module documentation](self) for the rounding.
    ///
    /// # Errors
    ///
    /// A [`JobQueueConfigError`] naming the first rule broken.
    pub fn validate(&self) -> Result<PressureThresholds, JobQueueConfigError> {
        if self.permits == 0 {
            return Err(JobQueueConfigError::NoPermits);
        }
        if self.permits > Semaphore::MAX_PERMITS {
            return Err(JobQueueConfigError::TooManyPermits {
                permits: self.permits,
                max: Semaphore::MAX_PERMITS,
            });
        }
        if self.pause_percent > 100 {
            return Err(JobQueueConfigError::PauseAbove100 {
                pause_percent: self.pause_percent,
            });
        }
        if self.resume_percent >= self.pause_percent {
            return Err(JobQueueConfigError::ResumeNotBelowPause {
                resume_percent: self.resume_percent,
                pause_percent: self.pause_percent,
            });
        }
        // u128 so that permits × 100 cannot overflow; both results are ≤ permits.
        let share = |percent: u8| self.permits as u128 * u128::from(percent);
        let pause_at = share(self.pause_percent).div_ceil(100);
        let resume_at = share(self.resume_percent) / 100;
        Ok(PressureThresholds {
            pause_at: usize::try_from(pause_at).unwrap_or(self.permits),
            resume_at: usize::try_from(resume_at).unwrap_or(0),
        })
    }
}

/// A [`JobQueueConfig`] that breaks a rule; the queue is not created.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum JobQueueConfigError {
    /// `permits` is 0, which would block all ingress forever.
    #[error("the application job queue needs at least one permit")]
    NoPermits,
    /// `permits` exceeds what the underlying semaphore can count.
    #[error("the application job queue has {permits} permits, more than the maximum {max}")]
    TooManyPermits {
        /// The configured permit count.
        permits: usize,
        /// [`Semaphore::MAX_PERMITS`].
        max: usize,
    },
    /// `pause_percent` is above 100, so the queue could never pause.
    #[error("pause_percent is {pause_percent}, above 100")]
    PauseAbove100 {
        /// The configured pause percentage.
        pause_percent: u8,
    },
    /// `resume_percent` is not below `pause_percent`, which leaves no hysteresis band.
    #[error("resume_percent ({resume_percent}) must be below pause_percent ({pause_percent})")]
    ResumeNotBelowPause {
        /// The configured resume percentage.
        resume_percent: u8,
        /// The configured pause percentage.
        pause_percent: u8,
    },
}

/// The pause and resume thresholds in permits, derived by [`JobQueueConfig::validate`].
///
/// Invariant: `resume_at < pause_at`, and `1 ≤ pause_at ≤ permits`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PressureThresholds {
    pause_at: usize,
    resume_at: usize,
}

impl PressureThresholds {
    /// Permits in use at or above which the state becomes [`PressureState::Paused`].
    #[must_use]
    pub fn pause_at(&self) -> usize {
        self.pause_at
    }

    /// Permits in use at or below which the state becomes [`PressureState::Running`].
    #[must_use]
    pub fn resume_at(&self) -> usize {
        self.resume_at
    }

    /// The state that follows `state` when `in_use` permits are in use: the transition function
    /// of the diagram in the [module documentation](self).
    #[must_use]
    pub fn next(&self, state: PressureState, in_use: usize) -> PressureState {
        match state {
            PressureState::Running if in_use >= self.pause_at => PressureState::Paused,
            PressureState::Paused if in_use <= self.resume_at => PressureState::Running,
            PressureState::Running | PressureState::Paused => state,
        }
    }
}

/// The queue was closed by [`JobQueue::close`] (host shutdown); no further permits are issued.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[error("the application job queue is closed")]
pub struct Closed;

/// Why [`JobQueue::try_acquire`] returned no permit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum TryAcquireError {
    /// All permits are in use (or promised to earlier waiters); [`JobQueue::acquire`] would wait.
    #[error("all application job permits are in use")]
    NoPermits,
    /// The queue is closed.
    #[error(transparent)]
    Closed(#[from] Closed),
}

/// A snapshot of the queue's monotonic counters, for metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct JobQueueCounters {
    /// Permits handed out since the queue was created.
    pub acquired_total: u64,
    /// Acquires that found no free permit and had to wait (including ones later cancelled or
    /// woken by [`JobQueue::close`]).
    pub waits_total: u64,
    /// Transitions from [`PressureState::Running`] to [`PressureState::Paused`].
    pub pause_transitions: u64,
}

/// The application job queue of one host; cheap to clone, all clones share the same permits.
///
/// See the [module documentation](self) for the permit rules and the pressure state.
#[derive(Debug, Clone)]
pub struct JobQueue {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    semaphore: Arc<Semaphore>,
    permits: usize,
    thresholds: PressureThresholds,
    /// Live [`JobPermit`]s. A move that crosses a threshold is made inside
    /// `pressure.send_if_modified`; every other move is a compare-and-swap (see `record`).
    in_use: AtomicUsize,
    /// The host pressure state; its lock also serializes updates of `in_use`.
    pressure: watch::Sender<PressureState>,
    acquired_total: AtomicU64,
    waits_total: AtomicU64,
    pause_transitions: AtomicU64,
}

impl Shared {
    /// Moves `in_use` by one and publishes a pressure transition if it causes one.
    ///
    /// The state can change only when the count crosses a threshold: up onto `pause_at`, or
    /// down onto `resume_at`. A move that crosses neither is a plain compare-and-swap (the
    /// common case, also when the queue sits full); a move that may cross takes the watch
    /// lock and updates the count inside it. So every crossing is judged under the lock, on
    /// the exact count it produced, in the order the crossings happened.
    fn record(&self, acquired: bool) {
        let mut cur = self.in_use.load(Ordering::Relaxed);
        while let Some(new) = if acquired {
            cur.checked_add(1)
        } else {
            cur.checked_sub(1)
        } {
            let crosses = if acquired {
                cur < self.thresholds.pause_at && new >= self.thresholds.pause_at
            } else {
                cur > self.thresholds.resume_at && new <= self.thresholds.resume_at
            };
            if crosses {
                break;
            }
            match self
                .in_use
                .compare_exchange_weak(cur, new, Ordering::AcqRel, Ordering::Relaxed)
            {
                Ok(_) => return,
                Err(actual) => cur = actual,
            }
        }
        self.pressure.send_if_modified(|state| {
            let in_use = if acquired {
                self.in_use.fetch_add(1, Ordering::Relaxed) + 1
            } else {
                self.in_use.fetch_sub(1, Ordering::Relaxed) - 1
            };
            let next = self.thresholds.next(*state, in_use);
            if next == *state {
                return false;
            }
            if next == PressureState::Paused {
                self.pause_transitions.fetch_add(1, Ordering::Relaxed);
            }
            *state = next;
            true
        });
    }
}

impl JobQueue {
    /// Creates a queue with all permits free and the state [`PressureState::Running`].
    ///
    /// # Errors
    ///
    /// A [`JobQueueConfigError`] when `config` is invalid ([`JobQueueConfig::validate`]).
    pub fn new(config: JobQueueConfig) -> Result<Self, JobQueueConfigError> {
        let thresholds = config.validate()?;
        let (pressure, _) = watch::channel(PressureState::Running);
        Ok(Self {
            shared: Arc::new(Shared {
                semaphore: Arc::new(Semaphore::new(config.permits)),
                permits: config.permits,
                thresholds,
                in_use: AtomicUsize::new(0),
                pressure,
                acquired_total: AtomicU64::new(0),
                waits_total: AtomicU64::new(0),
                pause_transitions: AtomicU64::new(0),
            }),
        })
    }

    /// Waits for a free permit, in FIFO order with other waiters.
    ///
    /// The returned future owns a handle to the queue (it does not borrow `self`), so it can be
    /// spawned or kept in a `select!`. Dropping it before it completes cancels the wait cleanly:
    /// no permit is leaked and the next waiter is served.
    ///
    /// # Errors
    ///
    /// [`Closed`] when the queue is closed before or while waiting.
    pub fn acquire(
        &self,
    ) -> impl Future<Output = Result<JobPermit, Closed>> + Send + 'static + use<> {
        let shared = Arc::clone(&self.shared);
        async move {
            let permit = match Arc::clone(&shared.semaphore).try_acquire_owned() {
                Ok(permit) => permit,
                Err(SemaphoreTryAcquireError::Closed) => return Err(Closed),
                Err(SemaphoreTryAcquireError::NoPermits) => {
                    shared.waits_total.fetch_add(1, Ordering::Relaxed);
                    Arc::clone(&shared.semaphore)
                        .acquire_owned()
                        .await
                        .map_err(|_| Closed)?
                }
            };
            Ok(JobPermit::admit(shared, permit))
        }
    }

    /// Takes a free permit without waiting.
    ///
    /// It never overtakes a waiting [`acquire`](Self::acquire): while anyone waits, no permit
    /// is free.
    ///
    /// # Errors
    ///
    /// [`TryAcquireError::NoPermits`] when none is free, [`TryAcquireError::Closed`] when the
    /// queue is closed.
    pub fn try_acquire(&self) -> Result<JobPermit, TryAcquireError> {
        match Arc::clone(&self.shared.semaphore).try_acquire_owned() {
            Ok(permit) => Ok(JobPermit::admit(Arc::clone(&self.shared), permit)),
            Err(SemaphoreTryAcquireError::NoPermits) => Err(TryAcquireError::NoPermits),
            Err(SemaphoreTryAcquireError::Closed) => Err(TryAcquireError::Closed(Closed)),
        }
    }

    /// Closes the queue at shutdown: every waiting and future acquire fails with [`Closed`].
    ///
    /// Permits already held stay valid and are released as usual; the pressure state keeps
    /// following them.
    pub fn close(&self) {
        self.shared.semaphore.close();
    }

    /// Whether [`close`](Self::close) has been called.
    #[must_use]
    pub fn is_closed(&self) -> bool {
        self.shared.semaphore.is_closed()
    }

    /// The configured number of permits, `N`.
    #[must_use]
    pub fn permits(&self) -> usize {
        self.shared.permits
    }

    /// The number of [`JobPermit`]s currently alive.
    #[must_use]
    pub fn in_use(&self) -> usize {
        self.shared.in_use.load(Ordering::Relaxed)
    }

    /// The thresholds derived from the configuration.
    #[must_use]
    pub fn thresholds(&self) -> PressureThresholds {
        self.shared.thresholds
    }

    /// The current host pressure state.
    #[must_use]
    pub fn pressure(&self) -> PressureState {
        *self.shared.pressure.borrow()
    }

    /// A receiver that sees every pressure transition, for the transport's flow control.
    ///
    /// The receiver starts with the current state marked as seen.
    #[must_use]
    pub fn subscribe(&self) -> watch::Receiver<PressureState> {
        self.shared.pressure.subscribe()
    }

    /// A snapshot of the monotonic counters.
    #[must_use]
    pub fn counters(&self) -> JobQueueCounters {
        JobQueueCounters {
            acquired_total: self.shared.acquired_total.load(Ordering::Relaxed),
            waits_total: self.shared.waits_total.load(Ordering::Relaxed),
            pause_transitions: self.shared.pause_transitions.load(Ordering::Relaxed),
        }
    }
}

/// One admitted job's claim on the application job queue; released when dropped.
///
/// Release it at the handler's first instruction for an application record, or right after
/// internal processing for a control or malformed record ([`release`](Self::release) makes that
/// point explicit in the code).
#[derive(Debug)]
#[must_use = "a job permit is released as soon as it is dropped"]
pub struct JobPermit {
    shared: Arc<Shared>,
    /// Returned to the semaphore after `Drop::drop` has lowered `in_use`, because fields drop
    /// after the `Drop` impl runs.
    _permit: OwnedSemaphorePermit,
}

impl JobPermit {
    fn admit(shared: Arc<Shared>, permit: OwnedSemaphorePermit) -> Self {
        shared.acquired_total.fetch_add(1, Ordering::Relaxed);
        shared.record(true);
        Self {
            shared,
            _permit: permit,
        }
    }

    /// Releases the permit now; the same as dropping it, named for the release point.
    pub fn release(self) {
        drop(self);
    }
}

impl Drop for JobPermit {
    fn drop(&mut self) {
        self.shared.record(false);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::pin::Pin;
    use std::task::{Context, Poll};
    use std::time::Duration;

    use tokio::sync::mpsc;
    use tokio::time::{sleep, timeout};

    use super::*;

    fn queue(permits: usize) -> JobQueue {
        JobQueue::new(JobQueueConfig::with_permits(permits)).unwrap()
    }

    fn take(queue: &JobQueue, count: usize) -> Vec<JobPermit> {
        (0..count).map(|_| queue.try_acquire().unwrap()).collect()
    }

    /// Lets spawned tasks run until they block; with paused time this does not advance the clock
    /// past the shortest pending timer.
    async fn settle() {
        sleep(Duration::from_millis(1)).await;
    }

    /// Counts how often the wrapped future is polled.
    struct CountPolls<F> {
        inner: Pin<Box<F>>,
        polls: Arc<AtomicUsize>,
    }

    impl<F: Future> Future for CountPolls<F> {
        type Output = F::Output;

        fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
            self.polls.fetch_add(1, Ordering::Relaxed);
            self.inner.as_mut().poll(cx)
        }
    }

    #[test]
    fn ten_permits_pause_at_eight_resume_at_six_and_hold_at_seven() {
        let thresholds = JobQueueConfig::with_permits(10).validate().unwrap();
        assert_eq!((thresholds.pause_at(), thresholds.resume_at()), (8, 6));

        let (running, paused) = (PressureState::Running, PressureState::Paused);
        assert_eq!(thresholds.next(running, 7), running);
        assert_eq!(thresholds.next(running, 8), paused);
        assert_eq!(thresholds.next(paused, 7), paused);
        assert_eq!(thresholds.next(paused, 6), running);

        // Fill up one permit at a time, then drain: the state changes exactly at 8 and at 6.
        let mut state = running;
        let mut walk = Vec::new();
        for in_use in (0..=10).chain((0..10).rev()) {
            state = thresholds.next(state, in_use);
            walk.push((in_use, state == paused));
        }
        let paused_at: Vec<usize> = walk.iter().filter(|w| w.1).map(|w| w.0).collect();
        assert_eq!(paused_at, [8, 9, 10, 9, 8, 7]);
    }

    #[test]
    fn pause_rounds_up_and_resume_rounds_down() {
        let at = |permits, pause_percent, resume_percent| {
            let config = JobQueueConfig {
                permits,
                pause_percent,
                resume_percent,
            };
            let thresholds = config.validate().unwrap();
            (thresholds.pause_at(), thresholds.resume_at())
        };
        assert_eq!(at(1, 80, 60), (1, 0));
        assert_eq!(at(3, 80, 60), (3, 1));
        assert_eq!(at(7, 80, 60), (6, 4));
        assert_eq!(at(100, 80, 60), (80, 60));
        assert_eq!(at(10, 100, 0), (10, 0));
        assert_eq!(at(10, 1, 0), (1, 0));
        assert_eq!(
            at(Semaphore::MAX_PERMITS, 100, 99).0,
            Semaphore::MAX_PERMITS
        );
    }

    #[test]
    fn resume_stays_below_pause_for_every_valid_configuration() {
        for permits in 1..=200 {
            for pause_percent in 1..=100u8 {
                for resume_percent in 0..pause_percent {
                    let config = JobQueueConfig {
                        permits,
                        pause_percent,
                        resume_percent,
                    };
                    let t = config.validate().unwrap();
                    assert!(t.resume_at() < t.pause_at() && t.pause_at() >= 1);
                    assert!(t.pause_at() <= permits);
                    // Pausing at pause_at and not one permit earlier honours "≥ pause_percent".
                    assert!(t.pause_at() * 100 >= permits * usize::from(pause_percent));
                    assert!((t.pause_at() - 1) * 100 < permits * usize::from(pause_percent));
                    assert!(t.resume_at() * 100 <= permits * usize::from(resume_percent));
                }
            }
        }
    }

    #[test]
    fn invalid_configurations_are_rejected_with_the_broken_rule() {
        let config = |permits, pause_percent, resume_percent| JobQueueConfig {
            permits,
            pause_percent,
            resume_percent,
        };
        assert_eq!(
            JobQueue::new(config(0, 80, 60)).err(),
            Some(JobQueueConfigError::NoPermits)
        );
        assert!(matches!(
            JobQueue::new(config(Semaphore::MAX_PERMITS + 1, 80, 60)).err(),
            Some(JobQueueConfigError::TooManyPermits { .. })
        ));
        assert_eq!(
            JobQueue::new(config(10, 101, 60)).err(),
            Some(JobQueueConfigError::PauseAbove100 { pause_percent: 101 })
        );
        assert_eq!(
            JobQueue::new(config(10, 60, 60)).err(),
            Some(JobQueueConfigError::ResumeNotBelowPause {
                resume_percent: 60,
                pause_percent: 60
            })
        );
        assert!(JobQueue::new(config(10, 0, 0)).is_err());
    }

    #[test]
    fn queue_pressure_follows_permits_in_use_with_hysteresis() {
        let queue = queue(10);
        let mut held = take(&queue, 7);
        assert_eq!(queue.pressure(), PressureState::Running);
        held.push(queue.try_acquire().unwrap());
        assert_eq!(
            (queue.in_use(), queue.pressure()),
            (8, PressureState::Paused)
        );
        held.pop().unwrap().release();
        assert_eq!(
            (queue.in_use(), queue.pressure()),
            (7, PressureState::Paused)
        );
        drop(held.pop());
        assert_eq!(
            (queue.in_use(), queue.pressure()),
            (6, PressureState::Running)
        );
        held.push(queue.try_acquire().unwrap());
        assert_eq!(
            (queue.in_use(), queue.pressure()),
            (7, PressureState::Running)
        );
        assert_eq!(queue.counters().pause_transitions, 1);
    }

    #[tokio::test(start_paused = true)]
    async fn watch_receiver_sees_paused_then_running() {
        let queue = queue(10);
        let mut pressure = queue.subscribe();
        assert_eq!(*pressure.borrow_and_update(), PressureState::Running);

        let mut held = take(&queue, 8);
        pressure.changed().await.unwrap();
        assert_eq!(*pressure.borrow_and_update(), PressureState::Paused);

        held.truncate(7);
        assert!(
            !pressure.has_changed().unwrap(),
            "7 in use is inside the band"
        );
        held.truncate(6);
        pressure.changed().await.unwrap();
        assert_eq!(*pressure.borrow_and_update(), PressureState::Running);
    }

    #[tokio::test(start_paused = true)]
    async fn waiters_are_blocked_when_all_permits_are_taken_and_resume_in_fifo_order() {
        let queue = queue(1);
        let held = queue.try_acquire().unwrap();
        let (order_tx, mut order_rx) = mpsc::unbounded_channel();
        for waiter in 0..4 {
            let acquire = queue.acquire();
            let order_tx = order_tx.clone();
            tokio::spawn(async move {
                let permit = acquire.await.unwrap();
                order_tx.send(waiter).unwrap();
                permit.release();
            });
            settle().await;
        }
        drop(order_tx);
        assert!(
            order_rx.try_recv().is_err(),
            "no waiter may pass a taken permit"
        );
        assert_eq!(queue.try_acquire().err(), Some(TryAcquireError::NoPermits));

        held.release();
        let mut order = Vec::new();
        while let Some(waiter) = order_rx.recv().await {
            order.push(waiter);
        }
        assert_eq!(order, [0, 1, 2, 3]);
        assert_eq!(queue.in_use(), 0);
        let counters = queue.counters();
        assert_eq!((counters.acquired_total, counters.waits_total), (5, 4));
    }

    #[tokio::test(start_paused = true)]
    async fn cancelled_acquire_leaks_no_permit_and_the_next_waiter_is_served() {
        let queue = queue(1);
        let held = queue.try_acquire().unwrap();

        let cancelled = timeout(Duration::from_millis(10), queue.acquire()).await;
        assert!(cancelled.is_err(), "the acquire must still be waiting");
        let behind = tokio::spawn(queue.acquire());
        settle().await;

        held.release();
        let permit = behind.await.unwrap().unwrap();
        assert_eq!(queue.in_use(), 1);
        permit.release();
        assert_eq!(queue.in_use(), 0);
        let again = queue.try_acquire().unwrap();
        assert_eq!(queue.try_acquire().err(), Some(TryAcquireError::NoPermits));
        drop(again);
    }

    #[tokio::test(start_paused = true)]
    async fn acquire_dropped_after_its_permit_was_granted_returns_the_permit() {
        let queue = queue(1);
        let held = queue.try_acquire().unwrap();
        let mut waiting = Box::pin(queue.acquire());
        std::future::poll_fn(|cx| {
            assert!(waiting.as_mut().poll(cx).is_pending());
            Poll::Ready(())
        })
        .await;

        // The release hands the permit to the queued waiter, which is dropped before it runs.
        held.release();
        drop(waiting);

        assert_eq!(queue.in_use(), 0);
        assert!(queue.try_acquire().is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn close_wakes_waiters_with_closed_and_held_permits_still_release() {
        let queue = queue(1);
        let held = queue.try_acquire().unwrap();
        let waiters: Vec<_> = (0..3).map(|_| tokio::spawn(queue.acquire())).collect();
        settle().await;

        queue.close();
        for waiter in waiters {
            assert_eq!(waiter.await.unwrap().err(), Some(Closed));
        }
        assert!(queue.is_closed());
        assert_eq!(queue.acquire().await.err(), Some(Closed));
        assert_eq!(
            queue.try_acquire().err(),
            Some(TryAcquireError::Closed(Closed))
        );
        held.release();
        assert_eq!(queue.in_use(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn blocked_waiter_is_not_polled_while_it_waits() {
        let queue = queue(2);
        let held = take(&queue, 2);
        let polls = Arc::new(AtomicUsize::new(0));
        let waiter = tokio::spawn(CountPolls {
            inner: Box::pin(queue.acquire()),
            polls: Arc::clone(&polls),
        });

        let start = tokio::time::Instant::now();
        sleep(Duration::from_millis(200)).await;
        assert_eq!(start.elapsed(), Duration::from_millis(200));
        assert_eq!(polls.load(Ordering::Relaxed), 1, "polled once, then parked");

        drop(held);
        let permit = waiter.await.unwrap().unwrap();
        assert!(
            polls.load(Ordering::Relaxed) <= 2,
            "woken once by the release"
        );
        assert_eq!(queue.in_use(), 1);
        drop(permit);
    }

    #[tokio::test]
    async fn clones_share_permits_and_pressure() {
        let queue = queue(10);
        let clone = queue.clone();
        let _held = take(&clone, 8);
        assert_eq!(queue.in_use(), 8);
        assert_eq!(queue.pressure(), PressureState::Paused);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_acquire_and_release_never_exceed_permits_and_settle_at_zero() {
        let queue = queue(4);
        let peak = Arc::new(AtomicUsize::new(0));
        let tasks: Vec<_> = (0..32)
            .map(|_| {
                let queue = queue.clone();
                let peak = Arc::clone(&peak);
                tokio::spawn(async move {
                    for _ in 0..200 {
                        let permit = queue.acquire().await.unwrap();
                        peak.fetch_max(queue.in_use(), Ordering::Relaxed);
                        tokio::task::yield_now().await;
                        permit.release();
                    }
                })
            })
            .collect();
        for task in tasks {
            task.await.unwrap();
        }
        assert!(peak.load(Ordering::Relaxed) <= 4);
        assert_eq!(queue.in_use(), 0);
        assert_eq!(queue.pressure(), PressureState::Running);
        assert_eq!(queue.counters().acquired_total, 32 * 200);
        assert!(queue.counters().pause_transitions >= 1);
        let _all = take(&queue, 4);
    }

    /// Threads racing acquires and releases across both thresholds: at every quiescent point
    /// the state is what the hysteresis rule gives for the path the total count took, whether
    /// the moves went through the compare-and-swap fast path or the locked crossing path.
    /// 100 permits: pause at 80, resume at 60. Each round: 4 threads move to `per_thread`
    /// held permits each while churning (acquire one, release one) in between, then all stop.
    #[test]
    fn racing_moves_across_the_thresholds_leave_the_hysteresis_state() {
        use std::sync::Barrier;
        const THREADS: usize = 4;
        let queue = queue(100);
        // (held per thread, expected state after reaching it from the previous step)
        let path = [
            (20, PressureState::Paused),  // 80: pause
            (16, PressureState::Paused),  // 64: hysteresis keeps it
            (15, PressureState::Running), // 60: resume
            (19, PressureState::Running), // 76: hysteresis keeps it
            (25, PressureState::Paused),  // 100: pause
            (0, PressureState::Running),  // 0: resume
        ];
        let barrier = Arc::new(Barrier::new(THREADS + 1));
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let queue = queue.clone();
                let barrier = Arc::clone(&barrier);
                std::thread::spawn(move || {
                    let mut held: Vec<JobPermit> = Vec::new();
                    for round in 0..200 {
                        for &(target, _) in &path {
                            while held.len() != target {
                                if held.len() < target {
                                    held.push(queue.try_acquire().unwrap());
                                } else {
                                    held.pop();
                                }
                                // Churn: a release and an acquire that cancel out.
                                if (round + t + held.len()).is_multiple_of(3)
                                    && let Some(p) = held.pop()
                                {
                                    drop(p);
                                    held.push(queue.try_acquire().unwrap());
                                }
                            }
                            barrier.wait();
                            barrier.wait();
                        }
                    }
                })
            })
            .collect();
        for _ in 0..200 {
            for &(target, expected) in &path {
                barrier.wait();
                assert_eq!(queue.in_use(), target * THREADS);
                assert_eq!(queue.pressure(), expected, "at {} in use", target * THREADS);
                barrier.wait();
            }
        }
        for h in handles {
            h.join().unwrap();
        }
        assert_eq!(queue.in_use(), 0);
    }
}
