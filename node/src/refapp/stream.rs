//! The reference application's client STREAM handlers (issue 19): what a game client reaches
//! over `stream.listen` on a `zlink-node run` host.
//!
//! - `refapp.Echo` (request): answers with its own payload and codec — the probe the session
//!   tests and the load tools use.

use zlink::session::{SessionHandlers, StreamError};

/// Packet name of the echo request.
pub const ECHO: &str = "refapp.Echo";

/// Register the reference application's STREAM handlers on `handlers`.
///
/// # Errors
/// [`StreamError`] if a name is taken already (the names are fixed and valid).
pub fn register(handlers: &mut SessionHandlers) -> Result<(), StreamError> {
    handlers.on_request(ECHO, |_ctx, packet, reply| async move {
        reply.ok(packet.codec, packet.payload);
    })?;
    Ok(())
}
