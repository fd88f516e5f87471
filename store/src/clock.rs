//! Clocks for the memory provider: the system clock, or a manual clock tests can turn.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::types::{StoreTime, duration_ms};

/// A source of store time.
pub trait Clock: Send + Sync + 'static {
    /// Now, in store time.
    fn now(&self) -> StoreTime;
}

/// The machine's wall clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> StoreTime {
        let ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(duration_ms)
            .unwrap_or(0);
        StoreTime(ms)
    }
}

/// A clock that only moves when told to (shared by clones).
#[derive(Debug, Clone)]
pub struct ManualClock(Arc<AtomicU64>);

impl ManualClock {
    /// A manual clock starting at `start`.
    pub fn new(start: StoreTime) -> Self {
        Self(Arc::new(AtomicU64::new(start.millis())))
    }

    /// Move the clock forward.
    pub fn advance(&self, d: Duration) {
        self.0.fetch_add(duration_ms(d), Ordering::SeqCst);
    }
}

impl Default for ManualClock {
    /// Starts at 2026-01-01T00:00:00Z.
    fn default() -> Self {
        Self::new(StoreTime(1_767_225_600_000))
    }
}

impl Clock for ManualClock {
    fn now(&self) -> StoreTime {
        StoreTime(self.0.load(Ordering::SeqCst))
    }
}
