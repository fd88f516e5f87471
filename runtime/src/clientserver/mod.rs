//! The ClientServer Channel (glossary §8; wire §2 framing and complete-message limit, §4
//! admission and "ClientServer 방향", §5 liveness).
//!
//! A Client starts sends and requests; Servers run handlers and reply. The Server never starts
//! a call to a Client. Unlike RouteMesh, the connection is directional: the client owns one
//! ZeroMQ DEALER per server connection, the server one ROUTER.
//!
//! - [`config`] — [`ServerConfig`], [`ClientConfig`], timings and [`ClientServerError`].
//! - [`admission`] — `hello` / `admit` / `reject` built and checked as pure functions; the
//!   admitted complete-message limit is `min(client, server)`.
//! - [`descriptor`] — the ClientServer Server descriptor content and DescriptorRevision
//!   ordering.
//! - [`store`] — the object-safe Location Store surface (lease, publish, list, remove).
//! - [`server`] — [`ClientServerServer`].
//! - [`client`] — [`ClientServerClient`]: discovery, admission, select-one, requests.
//! - `socket` — the thread that owns a side's sockets.
//!
//! Service-wire records on a ClientServer connection are only the infrastructure commands
//! 1..6 (the generated codec refuses the others with `TopologyNotAllowed`); application
//! records are the two-frame channel envelope of
//! [`zlink_protocol::channel_envelope`]. See `docs/architecture.md`, "ClientServer Channel".

pub mod admission;
pub mod client;
pub mod config;
pub mod descriptor;
pub mod server;
mod socket;
pub mod store;

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

pub use client::{ClientMetrics, ClientServerClient, ServerSnapshot};
pub use config::{ClientConfig, ClientServerError, ClientServerTimings, ServerConfig};
pub use server::{ClientServerServer, ServerMetrics};

pub(crate) use crate::mesh::node::{new_connection_generation, process_context};

/// Protocol errors counted by kind; nothing counted here ever reaches a handler.
#[derive(Debug, Default)]
pub struct ProtocolErrors(Mutex<BTreeMap<String, u64>>);

impl ProtocolErrors {
    pub(crate) fn count(&self, kind: &str) {
        let mut m = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *m.entry(kind.to_owned()).or_insert(0) += 1;
    }

    /// A copy of the counters.
    pub fn snapshot(&self) -> BTreeMap<String, u64> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// All protocol errors.
    pub fn total(&self) -> u64 {
        self.snapshot().values().sum()
    }
}

/// The `deadlineUnixMs` of a request sent now with `timeout`: saturating, so a huge timeout
/// (`Duration::MAX`) never overflows the clock (review item 5); at least 1 (0 is invalid).
pub(crate) fn deadline_unix_ms(now: std::time::SystemTime, timeout: Duration) -> u64 {
    let since_epoch = now
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or(Duration::ZERO);
    ms(since_epoch).saturating_add(ms(timeout)).max(1)
}

/// `now + d` on tokio's clock, or about thirty years from now when that overflows.
pub(crate) fn instant_after(now: tokio::time::Instant, d: Duration) -> tokio::time::Instant {
    now.checked_add(d)
        .unwrap_or_else(|| now + Duration::from_secs(30 * 365 * 86_400))
}

pub(crate) use crate::millis as ms;

pub(crate) fn random<const N: usize>() -> Result<[u8; N], ClientServerError> {
    crate::mesh::auth::random_bytes::<N>().map_err(|_| ClientServerError::Random)
}

/// A new lifecycle generation: CSPRNG, non-zero, ≤ `i64::MAX` (glossary §6).
pub(crate) fn new_generation() -> Result<u64, ClientServerError> {
    loop {
        let r = u64::from_be_bytes(random::<8>()?);
        if let Some(g) = zlink_protocol::ids::lifecycle_generation_from_random(r) {
            return Ok(g);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, SystemTime, UNIX_EPOCH};

    use super::{deadline_unix_ms, instant_after, ms};

    /// Review item 5: adding the largest timeouts to a clock saturates instead of panicking.
    #[test]
    fn huge_timeouts_saturate_instead_of_overflowing() {
        assert_eq!(deadline_unix_ms(SystemTime::now(), Duration::MAX), u64::MAX);
        assert_eq!(deadline_unix_ms(UNIX_EPOCH, Duration::ZERO), 1);
        let now = SystemTime::now();
        let d = deadline_unix_ms(now, Duration::from_secs(2));
        let base = ms(now.duration_since(UNIX_EPOCH).unwrap());
        assert_eq!(d, base + 2_000);
        let t = tokio::time::Instant::now();
        assert!(instant_after(t, Duration::MAX) > t + Duration::from_secs(86_400 * 365));
        assert_eq!(u64::MAX.saturating_add(ms(Duration::MAX)), u64::MAX);
    }
}
