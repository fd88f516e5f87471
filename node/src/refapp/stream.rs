//! The reference application's client STREAM handlers (issue 19): what a game client reaches
//! over `stream.listen` on a `zlink-node run` host.
//!
//! - `refapp.Echo` (request): answers with its own payload and codec — the probe the session
//!   tests and the load tools use.
//! - `refapp.Bind` (request, [`Bind`]): get-or-create the `player` Actor and bind the session
//!   to it (command 38 to wherever it lives); answers [`Bound`].
//! - `refapp.Deliver` (send), `refapp.DeliverRequest` and `refapp.ReportRequest` (requests):
//!   relayed as they are to the session's bound player (its first binding, by Actor ID) on the
//!   stored route — the player's own messages ([`super::messages`]); a request gets the
//!   player's answer. Unbound, a request is answered `InvalidOperation` and a send dropped.

use serde::{Deserialize, Serialize};
use zlink::mesh::JsonMessage;
use zlink::session::{ErrorKind, SessionCtx, SessionHandlers, StreamError};
use zlink_protocol::stream::StreamPacket;

use super::PLAYER;
use super::messages::{Deliver, DeliverRequest, ReportRequest};

/// Packet name of the echo request.
pub const ECHO: &str = "refapp.Echo";

/// Bind the session to player `player` (created if it does not exist).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Bind {
    /// The player's global ID.
    pub player: String,
}
impl JsonMessage for Bind {
    const PACKET_NAME: &'static str = "refapp.Bind";
}

/// The answer to [`Bind`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Bound {
    /// The session owner's binding generation.
    pub binding_generation: u64,
    /// The RID of the node that owns the player (where relays go).
    pub owner_rid: String,
}
impl JsonMessage for Bound {
    const PACKET_NAME: &'static str = "refapp.Bound";
}

fn bound_player(ctx: &SessionCtx) -> Option<String> {
    ctx.bindings()
        .into_iter()
        .next()
        .map(|r| r.actor.actor_id().to_owned())
}

async fn relay_request(ctx: SessionCtx, packet: StreamPacket, reply: zlink::session::RequestReply) {
    match bound_player(&ctx) {
        Some(player) => {
            let answer = ctx
                .relay_request(&player, &packet, std::time::Duration::from_secs(10))
                .await;
            reply.answer(answer);
        }
        None => reply.error(
            ErrorKind::InvalidOperation,
            "the session is bound to no player",
        ),
    }
}

/// Register the reference application's STREAM handlers on `handlers`.
///
/// # Errors
/// [`StreamError`] if a name is taken already (the names are fixed and valid).
pub fn register(handlers: &mut SessionHandlers) -> Result<(), StreamError> {
    handlers.on_request(ECHO, |_ctx, packet, reply| async move {
        reply.ok(packet.codec, packet.payload);
    })?;
    handlers.on_request(Bind::PACKET_NAME, |ctx, packet, reply| async move {
        let bind: Bind = match serde_json::from_slice(&packet.payload) {
            Ok(b) => b,
            Err(e) => return reply.error(ErrorKind::InvalidOperation, e.to_string()),
        };
        if let Some(who) = ctx.identity()
            && bind.player != format!("player:{who}")
        {
            return reply.error(
                ErrorKind::Application,
                "an authenticated session binds only its own player",
            );
        }
        let bound = match ctx.get_or_create_actor(PLAYER, &bind.player).await {
            Ok(actor) => ctx.bind(&actor).await,
            Err(e) => Err(e),
        };
        match bound {
            Ok(route) => reply.json(&Bound {
                binding_generation: route.binding_generation,
                owner_rid: route.actor.owner().rid.to_string(),
            }),
            Err(e) => reply.call_error(&e),
        }
    })?;
    handlers.on_send(Deliver::PACKET_NAME, |ctx, packet| async move {
        let Some(player) = bound_player(&ctx) else {
            tracing::debug!(session = %ctx.id(), "refapp.Deliver on an unbound session dropped");
            return;
        };
        if let Err(e) = ctx.relay(&player, &packet).await {
            tracing::debug!(session = %ctx.id(), error = %e, "refapp.Deliver relay refused");
        }
    })?;
    handlers.on_request(DeliverRequest::PACKET_NAME, relay_request)?;
    handlers.on_request(ReportRequest::PACKET_NAME, relay_request)?;
    Ok(())
}
