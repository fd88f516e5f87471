//! Classic fanout: one-way PUB/SUB service events with a liveness beacon (glossary §4 "Classic
//! fanout", "Topic"; §6 "Fanout publisher descriptor", "Automatic discovery", "Manual
//! endpoint", "Ready target"; §7 "Liveness와 liveness beacon"; wire §5 "Classic fanout beacon",
//! "Subscriber ready 판정").
//!
//! Classic fanout shares no socket or subscription state with RouteMesh Logical Multicast. A
//! [`Publisher`] binds a ZeroMQ `PUB` socket, publishes typed events on topics and a beacon every
//! 5 s; a [`Subscriber`] holds one `SUB` socket per publisher (manual endpoints and/or publisher
//! descriptors from the Location Store), judges each publisher ready or not-ready on its own,
//! and hands events to typed handlers. There are no acknowledgements, no replay and no
//! backpressure across the wire: a subscriber that falls behind loses events at the publisher's
//! high-water mark.
//!
//! - [`record`] — topics and the record frame layout (pure).
//! - [`readiness`] — the per-publisher ready/not-ready state machine (pure).
//! - [`descriptor`] — the publisher descriptor, its content encoding, discovery reconcile.
//! - [`handler`] — typed event handlers per (topic, packet name).
//! - [`config`] — settings with the spec defaults.
//! - [`publisher`], [`subscriber`] — the I/O shells.

pub mod config;
pub mod descriptor;
pub mod error;
pub mod handler;
pub mod publisher;
pub mod readiness;
pub mod record;
pub mod subscriber;

pub use config::{OwnerLease, PublisherConfig, SubscriberConfig};
pub use error::FanoutError;
pub use handler::{FanoutContext, FanoutHandlers, PublisherRef};
pub use publisher::{Publisher, PublisherMetrics};
pub use subscriber::{PublisherSnapshot, PublisherSource, Subscriber, SubscriberMetrics};
