//! Helpers shared by the Redis test binaries.

pub mod redis_server;
