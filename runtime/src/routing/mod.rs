//! ID-addressed routing (routing `000_…` §2): the resolver with its four closed results and the
//! positive route cache.
//!
//! - [`cache`] — the positive route cache, pure (time is a parameter).
//! - [`resolver`] — global ID → `ReadyRoute` / `Missing` / `Unavailable` / `StoreFailure`,
//!   a cache hit without a store read, a miss with exactly one.

pub mod cache;
pub mod resolver;

pub use cache::{CacheConfig, Invalidation, InvalidationMark, ReadyRoute, RouteCache, RouteFence};
pub use resolver::{Resolution, Resolver, RouteSource, UnavailableReason};
