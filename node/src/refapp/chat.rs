//! Chat in the reference application (issue 19 item 9): what `zlink-chat` speaks.
//!
//! A client session logs in (`chat.Login`): the host get-or-creates Actor `player:<user>` and
//! binds the session to it (command 38; the player may live on any host). Then:
//!
//! - `chat.Join {room}` (request) → the host makes sure User Spot `room:<room>` exists and
//!   relays the request to the player, which joins the room (`refapp.Join`) and remembers it
//!   (one room at a time) → `chat.Joined {room, members}`;
//! - `chat.Leave {}` (request) → the player forgets its room (the room keeps it as a member;
//!   lines of a room the player is not in are not pushed) → `chat.Left {}`;
//! - `chat.Say {text}` (send) → player → `chat.RoomSay` to its room → `chat.Heard` to every
//!   member → each member pushes `chat.Line {room, from, text}` (command 36) to its session.
//!
//! Every hop after the login is on a stored route: relays on the binding route, the player's
//! calls to its room and the room's to its members by ID through the route cache, pushes on the
//! Actor's binding. A user name is 1..=64 of `A-Z a-z 0-9 _ -`.

use serde::{Deserialize, Serialize};
use zlink::call::error::{CallError, ErrorKind as CallKind};
use zlink::mesh::JsonMessage;
use zlink::object::ObjectCalls;
use zlink::object::exec::ObjectHandlers;
use zlink::session::{ErrorKind, RequestReply, SessionCtx, SessionHandlers, StreamError};
use zlink_protocol::stream::StreamPacket;

use super::player::PlayerState;
use super::room::RoomState;
use super::{PLAYER, ROOM};

/// Log in as `user` (binds the session to `player:<user>`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Login {
    /// The user name.
    pub user: String,
    /// A credential (the authentication hook checks it when one is configured).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
}
impl JsonMessage for Login {
    const PACKET_NAME: &'static str = "chat.Login";
}

/// The answer to [`Login`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LoggedIn {
    /// The player Actor the session is bound to.
    pub player: String,
    /// The RID of the node that owns it.
    pub owner_rid: String,
}
impl JsonMessage for LoggedIn {
    const PACKET_NAME: &'static str = "chat.LoggedIn";
}

/// Join room `room` (client → session → player).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Join {
    /// The room name (its Spot is `room:<room>`).
    pub room: String,
}
impl JsonMessage for Join {
    const PACKET_NAME: &'static str = "chat.Join";
}

/// The answer to [`Join`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Joined {
    /// The room name.
    pub room: String,
    /// Members after the join.
    pub members: usize,
}
impl JsonMessage for Joined {
    const PACKET_NAME: &'static str = "chat.Joined";
}

/// Leave the current room.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Leave {}
impl JsonMessage for Leave {
    const PACKET_NAME: &'static str = "chat.Leave";
}

/// The answer to [`Leave`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Left {}
impl JsonMessage for Left {
    const PACKET_NAME: &'static str = "chat.Left";
}

/// Say a line in the current room (one-way).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Say {
    /// The line.
    pub text: String,
}
impl JsonMessage for Say {
    const PACKET_NAME: &'static str = "chat.Say";
}

/// A player's line to its room (player → room request).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoomSay {
    /// The user who said it.
    pub from: String,
    /// The line.
    pub text: String,
}
impl JsonMessage for RoomSay {
    const PACKET_NAME: &'static str = "chat.RoomSay";
}

/// The room's answer to [`RoomSay`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoomHeard {
    /// Members the line went to.
    pub members: usize,
}
impl JsonMessage for RoomHeard {
    const PACKET_NAME: &'static str = "chat.RoomHeard";
}

/// A line the room broadcasts to a member (room → player, one-way).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Heard {
    /// The room name.
    pub room: String,
    /// The user who said it.
    pub from: String,
    /// The line.
    pub text: String,
}
impl JsonMessage for Heard {
    const PACKET_NAME: &'static str = "chat.Heard";
}

/// A line pushed to a client (player → session, command 36).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Line {
    /// The room name.
    pub room: String,
    /// The user who said it.
    pub from: String,
    /// The line.
    pub text: String,
}
impl JsonMessage for Line {
    const PACKET_NAME: &'static str = "chat.Line";
}

/// The Spot ID of room `name`.
pub fn room_id(name: &str) -> String {
    format!("room:{name}")
}

/// Whether `user` is a valid user name (see the module docs).
pub fn valid_user(user: &str) -> bool {
    (1..=64).contains(&user.len())
        && user
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

fn user_of(player_id: &str) -> &str {
    player_id.strip_prefix("player:").unwrap_or(player_id)
}

/// The player's chat handlers (added to its other handlers).
pub fn add_player_handlers(h: &mut ObjectHandlers<PlayerState>) {
    h.on_request(|ctx, j: Join| async move {
        let room = room_id(&j.room);
        let me = ctx.state().id.clone();
        let joined: super::messages::Joined = ctx
            .request_to_spot(
                &room,
                &super::messages::Join { player: me },
                std::time::Duration::from_secs(5),
            )
            .await?;
        ctx.state().room = Some(j.room.clone());
        Ok::<_, CallError>(Joined {
            room: j.room,
            members: joined.members,
        })
    });
    h.on_request(|ctx, _: Leave| async move {
        ctx.state().room = None;
        Ok::<_, CallError>(Left {})
    });
    h.on_send(|ctx, s: Say| async move {
        let (room, from) = {
            let p = ctx.state();
            (p.room.clone(), user_of(&p.id).to_owned())
        };
        let Some(room) = room else {
            return Err(CallError::new(
                CallKind::InvalidOperation,
                "not in a room: /join first",
            ));
        };
        let _: RoomHeard = ctx
            .request_to_spot(
                &room_id(&room),
                &RoomSay { from, text: s.text },
                std::time::Duration::from_secs(5),
            )
            .await?;
        Ok(())
    });
    h.on_send(|ctx, heard: Heard| async move {
        let here = ctx.state().room.as_deref() == Some(heard.room.as_str());
        if here && ctx.session().is_some() {
            let line = Line {
                room: heard.room,
                from: heard.from,
                text: heard.text,
            };
            if let Err(e) = ctx.push(&line).await {
                tracing::debug!(error = %e, "chat line not pushed");
            }
        }
        Ok(())
    });
}

/// The room's chat handler (added to its other handlers): a line goes to every member.
pub fn add_room_handlers(h: &mut ObjectHandlers<RoomState>) {
    h.on_request(|ctx, s: RoomSay| async move {
        let (room, members) = {
            let r = ctx.state();
            (r.id.clone(), r.members.clone())
        };
        let name = room.strip_prefix("room:").unwrap_or(&room).to_owned();
        for m in &members {
            let heard = Heard {
                room: name.clone(),
                from: s.from.clone(),
                text: s.text.clone(),
            };
            ctx.send_to_actor(m, &heard).await?;
        }
        Ok::<_, CallError>(RoomHeard {
            members: members.len(),
        })
    });
}

/// The session token of `user` under `key` (issue 19 item 10; **ours**): lowercase hex of
/// HMAC-SHA256(key, `"zlink-session-token-v1"` ‖ 0x00 ‖ user).
pub fn session_token(key: &zlink::mesh::auth::MeshSecret, user: &str) -> String {
    let tag = key.proof_over(&[b"zlink-session-token-v1", &[0], user.as_bytes()]);
    tag.iter().map(|b| format!("{b:02x}")).collect()
}

fn token_ok(key: &zlink::mesh::auth::MeshSecret, user: &str, token: &str) -> bool {
    let Some(bytes) = (0..token.len())
        .step_by(2)
        .map(|i| {
            token
                .get(i..i + 2)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
        })
        .collect::<Option<Vec<u8>>>()
    else {
        return false;
    };
    let Ok(proof) = <[u8; 32]>::try_from(bytes) else {
        return false;
    };
    key.verify_over(&[b"zlink-session-token-v1", &[0], user.as_bytes()], &proof)
}

/// The reference application's authenticator (issue 19 item 10): a session's first packet
/// must be `chat.Login` whose `token` is [`session_token`] of its `user` (constant-time check);
/// the identity is the user. Anything else is refused and the session closed.
pub fn require_login(handlers: &mut SessionHandlers, key: zlink::mesh::auth::MeshSecret) {
    handlers.authenticate(move |packet| {
        let verdict = if packet.packet_name == Login::PACKET_NAME {
            match serde_json::from_slice::<Login>(&packet.payload) {
                Ok(l) => match l.token.as_deref() {
                    Some(t) if token_ok(&key, &l.user, t) => Ok(l.user),
                    Some(_) => Err(format!("the token is not valid for user {:?}", l.user)),
                    None => Err("chat.Login carries no token".to_owned()),
                },
                Err(e) => Err(format!("chat.Login does not parse: {e}")),
            }
        } else {
            Err(format!(
                "the first packet must be chat.Login, not {:?}",
                packet.packet_name
            ))
        };
        std::future::ready(verdict)
    });
}

fn bound_player(ctx: &SessionCtx) -> Option<String> {
    ctx.bindings()
        .into_iter()
        .next()
        .map(|r| r.actor.actor_id().to_owned())
}

async fn to_player(ctx: SessionCtx, packet: StreamPacket, reply: RequestReply) {
    match bound_player(&ctx) {
        Some(player) => {
            let answer = ctx
                .relay_request(&player, &packet, std::time::Duration::from_secs(10))
                .await;
            reply.answer(answer);
        }
        None => reply.error(ErrorKind::InvalidOperation, "log in first (chat.Login)"),
    }
}

/// Register the chat STREAM handlers.
///
/// # Errors
/// [`StreamError`] if a name is taken already.
pub fn register(handlers: &mut SessionHandlers) -> Result<(), StreamError> {
    handlers.on_request(Login::PACKET_NAME, |ctx, packet, reply| async move {
        let login: Login = match serde_json::from_slice(&packet.payload) {
            Ok(l) => l,
            Err(e) => return reply.error(ErrorKind::InvalidOperation, e.to_string()),
        };
        if ctx.identity().is_some_and(|who| who != login.user) {
            return reply.error(
                ErrorKind::Application,
                "this session is authenticated as another user",
            );
        }
        if !valid_user(&login.user) {
            return reply.error(
                ErrorKind::InvalidOperation,
                "a user name is 1..=64 of A-Z a-z 0-9 _ -",
            );
        }
        let player = format!("player:{}", login.user);
        let bound = match ctx.get_or_create_actor(PLAYER, &player).await {
            Ok(actor) => ctx.bind(&actor).await,
            Err(e) => Err(e),
        };
        match bound {
            Ok(route) => reply.json(&LoggedIn {
                player,
                owner_rid: route.actor.owner().rid.to_string(),
            }),
            Err(e) => reply.call_error(&e),
        }
    })?;
    handlers.on_request(Join::PACKET_NAME, |ctx, packet, reply| async move {
        let join: Join = match serde_json::from_slice(&packet.payload) {
            Ok(j) => j,
            Err(e) => return reply.error(ErrorKind::InvalidOperation, e.to_string()),
        };
        if !valid_user(&join.room) {
            return reply.error(
                ErrorKind::InvalidOperation,
                "a room name is 1..=64 of A-Z a-z 0-9 _ -",
            );
        }
        if let Err(e) = ctx.get_or_create_spot(ROOM, &room_id(&join.room)).await {
            return reply.call_error(&e);
        }
        to_player(ctx, packet, reply).await;
    })?;
    handlers.on_request(Leave::PACKET_NAME, to_player)?;
    handlers.on_send(Say::PACKET_NAME, |ctx, packet| async move {
        match bound_player(&ctx) {
            Some(player) => {
                if let Err(e) = ctx.relay(&player, &packet).await {
                    tracing::debug!(session = %ctx.id(), error = %e, "chat line not relayed");
                }
            }
            None => tracing::debug!(session = %ctx.id(), "chat.Say before chat.Login dropped"),
        }
    })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_and_room_names_are_short_plain_words() {
        for ok in ["ann", "Bob_2", "x-y", &"a".repeat(64)] {
            assert!(valid_user(ok), "{ok}");
        }
        for bad in ["", "a b", "ann:1", "ünï", &"a".repeat(65)] {
            assert!(!valid_user(bad), "{bad}");
        }
        assert_eq!(room_id("lobby"), "room:lobby");
        assert_eq!(user_of("player:ann"), "ann");
    }

    #[test]
    fn a_session_token_verifies_only_for_its_user_and_key() {
        let key = zlink::mesh::auth::MeshSecret::from_bytes(b"sixteen-byte-key!").unwrap();
        let other = zlink::mesh::auth::MeshSecret::from_bytes(b"another-16-byte-k").unwrap();
        let t = session_token(&key, "ann");
        assert_eq!(t.len(), 64);
        assert!(token_ok(&key, "ann", &t));
        assert!(!token_ok(&key, "bob", &t));
        assert!(!token_ok(&other, "ann", &t));
        assert!(!token_ok(&key, "ann", &t[..62]));
        assert!(!token_ok(&key, "ann", "zz"));
        let mut flipped = t[..63].to_owned();
        flipped.push(if t.ends_with('0') { '1' } else { '0' });
        assert!(!token_ok(&key, "ann", &flipped));
    }
}
