//! The reference application (issue "node host" §6): what `zlink-node demo` runs, what the
//! node image ships and what the end-to-end tests drive.
//!
//! - [`room`] — the `room` User Spot: members, a bounded chat log, a periodic housekeeping
//!   timer; a line said in a room is broadcast to every member as a numbered message.
//! - [`player`] — the `player` Actor: counters, an inventory map and per-source sequence
//!   tracking.
//! - [`seq`] — the pure per-source sequence tracker behind the gap / duplicate reports.
//! - [`messages`] — the serde-typed messages, each with an explicit packet name.
//!
//! Both object types are registered with `PreserveStateWith` ([`VersionedJson`]), so a room or
//! a player relocates with its state (glossary §4 "Preserve-state relocation policy"). Every
//! node also registers the `lobby` Entry Spot (glossary §1): the default membership of Actors
//! placed without a Spot. [`registry`] builds the registration the demo, the tests and the
//! node image share. The `counter` Instance Spot ([`counter`]) is activated by its first
//! message sent with Instance intent (cold activation).
//!
//! Every application message carries `(source, seq)`: the receiver's tracker tells, per
//! source, which numbers are missing and which arrived twice — so a run can prove that no
//! message to any single ID was lost or duplicated, not only that the totals match.

pub mod chat;
pub mod counter;
pub mod messages;
pub mod player;
pub mod room;
pub mod seq;
pub mod stream;

use std::time::Duration;

use bytes::Bytes;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use player::{PlayerState, player_handlers};
use room::{RoomState, room_handlers};
use zlink::call::error::{CallError, ErrorKind};
use zlink::object::registry::{FactoryInput, Registry, StateAdapter};

/// The stable type of the room User Spot.
pub const ROOM: &str = "room";
/// The stable type of the player Actor.
pub const PLAYER: &str = "player";
/// The stable type of the counter Instance Spot.
pub const COUNTER: &str = "counter";
/// The stable type of every node's Entry Spot.
pub const LOBBY: &str = "lobby";

/// The version [`VersionedJson`] writes for the reference application's states.
pub const STATE_VERSION: u32 = 1;

/// Settings of the reference application.
#[derive(Debug, Clone)]
pub struct RefAppConfig {
    /// Period of a room's housekeeping timer (armed by its first join).
    pub room_tick: Duration,
    /// Lines a room's chat log keeps (the oldest are dropped).
    pub chat_log_limit: usize,
    /// The session token key: set, every STREAM session logs in with a token for its user
    /// ([`chat::session_token`]).
    pub session_key: Option<zlink::mesh::auth::MeshSecret>,
}

impl Default for RefAppConfig {
    fn default() -> Self {
        Self {
            room_tick: Duration::from_millis(100),
            chat_log_limit: 64,
            session_key: None,
        }
    }
}

/// A [`StateAdapter`] writing `{"v": <version>, "state": <state as JSON>}` and refusing, with
/// a typed error, bytes of another version or that do not decode — a new application version
/// that changes a state's shape bumps the version and restores the old one explicitly.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VersionedJson {
    /// The version written and the only one read.
    pub version: u32,
}

#[derive(Serialize)]
struct Envelope<'a, S> {
    v: u32,
    state: &'a S,
}

#[derive(Deserialize)]
struct Head {
    v: u32,
}

#[derive(Deserialize)]
struct Body<S> {
    state: S,
}

impl<S: Serialize + DeserializeOwned + Send + 'static> StateAdapter<S> for VersionedJson {
    fn capture(&self, state: &S) -> Result<Bytes, CallError> {
        serde_json::to_vec(&Envelope {
            v: self.version,
            state,
        })
        .map(Bytes::from)
        .map_err(|e| CallError::new(ErrorKind::HandlerFailed, format!("state capture: {e}")))
    }

    fn restore(&self, bytes: &[u8]) -> Result<S, CallError> {
        let bad = |what: String| CallError::new(ErrorKind::HandlerFailed, what);
        let head: Head =
            serde_json::from_slice(bytes).map_err(|e| bad(format!("state restore: {e}")))?;
        if head.v != self.version {
            return Err(bad(format!(
                "state restore: version {} is not the supported version {}",
                head.v, self.version
            )));
        }
        serde_json::from_slice::<Body<S>>(bytes)
            .map(|b| b.state)
            .map_err(|e| bad(format!("state restore: {e}")))
    }
}

/// The reference application's registration: the `room` User Spot, the `player` Actor (both
/// `PreserveStateWith(VersionedJson)`) and the `lobby` Entry Spot (a room without members).
pub fn registry(cfg: &RefAppConfig) -> Registry {
    let mut r = Registry::new();
    // Fixed, valid and unique names: a failure here is a bug, caught by every test that builds
    // the reference application.
    stream::register(r.stream_handlers_mut()).expect("the reference STREAM handlers register");
    chat::register(r.stream_handlers_mut()).expect("the chat STREAM handlers register");
    if let Some(key) = cfg.session_key.clone() {
        chat::require_login(r.stream_handlers_mut(), key);
    }
    let tick = cfg.room_tick;
    let limit = cfg.chat_log_limit;
    r.user_spot(
        ROOM,
        move |i: FactoryInput| async move { Ok(RoomState::new(i.id, limit)) },
        move || room_handlers(tick),
    )
    .preserve_state_with(VersionedJson {
        version: STATE_VERSION,
    })
    .register();
    r.actor(
        PLAYER,
        |i: FactoryInput| async move { Ok(PlayerState::new(i.id)) },
        player_handlers,
    )
    .preserve_state_with(VersionedJson {
        version: STATE_VERSION,
    })
    .register();
    r.instance_spot(
        COUNTER,
        |i: FactoryInput| async move { Ok(counter::CounterState::new(i.id)) },
        counter::counter_handlers,
    )
    .preserve_state_with(VersionedJson {
        version: STATE_VERSION,
    })
    .register();
    r.entry_spot(
        LOBBY,
        move |i: FactoryInput| async move { Ok(RoomState::new(i.id, limit)) },
        move || room_handlers(tick),
    )
    .register();
    r
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::collections::BTreeMap;

    use super::messages::{
        Ack, Deliver, DeliverRequest, Heard, Join, Joined, PlayerReport, ReportRequest, RoomReport,
        Say,
    };
    use super::*;
    use zlink::mesh::handler::{decode_json, encode_json};
    use zlink::object::exec::Binding;
    use zlink::object::registry::{LiveObject, ObjectTypeKind};
    use zlink_protocol::generated::RelocationPolicy;

    const V1: VersionedJson = VersionedJson { version: 1 };

    fn input(id: &str, ty: &str) -> FactoryInput {
        FactoryInput {
            id: id.into(),
            stable_type: ty.into(),
            object_generation: 1,
            init: None,
        }
    }

    fn busy_player() -> PlayerState {
        let mut p = PlayerState::new("p-1");
        for (src, seq) in [("a", 0), ("a", 2), ("a", 2), ("b", 0)] {
            p.apply(src, seq, Some(format!("gem-{seq}")));
        }
        p.sends = 3;
        p.requests = 1;
        p
    }

    fn busy_room() -> RoomState {
        let mut r = RoomState::new("room-1", 2);
        r.join("p-1".into());
        r.join("p-2".into());
        r.timer_armed = true;
        for seq in 0..3 {
            r.say("node-0", seq, "hi");
        }
        r.ticks = 4;
        r.broadcasts = 6;
        r
    }

    /// `PreserveStateWith` (glossary §4): the player's state survives capture → restore.
    #[test]
    fn player_state_round_trips_through_the_versioned_adapter() {
        let p = busy_player();
        let bytes = StateAdapter::<PlayerState>::capture(&V1, &p).unwrap();
        assert!(bytes.starts_with(br#"{"v":1,"#), "{bytes:?}");
        let back: PlayerState = V1.restore(&bytes).unwrap();
        assert_eq!(back, p);
        assert_eq!(
            back.seqs.duplicates(),
            1,
            "the tracker moved with the state"
        );
    }

    #[test]
    fn room_state_round_trips_through_the_versioned_adapter() {
        let r = busy_room();
        assert_eq!(r.log.len(), 2, "the chat log is bounded");
        let bytes = StateAdapter::<RoomState>::capture(&V1, &r).unwrap();
        let back: RoomState = V1.restore(&bytes).unwrap();
        assert_eq!(back, r);
    }

    #[test]
    fn another_version_or_bad_bytes_is_a_typed_error() {
        let bytes = StateAdapter::<RoomState>::capture(&V1, &busy_room()).unwrap();
        let v2 = VersionedJson { version: 2 };
        let e = StateAdapter::<RoomState>::restore(&v2, &bytes).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::HandlerFailed);
        assert!(e.detail().contains("version 1"), "{e}");
        for bad in [&b"{not json"[..], br#"{"v":1}"#, br#"{"state":{}}"#] {
            assert!(StateAdapter::<PlayerState>::restore(&V1, bad).is_err());
        }
    }

    async fn ask<M: zlink::mesh::JsonMessage, R: zlink::mesh::JsonMessage>(
        obj: &dyn LiveObject,
        m: &M,
    ) -> R {
        decode_json(&obj.request(encode_json(m).unwrap()).await.unwrap()).unwrap()
    }

    /// The registered types capture and restore a live instance's state through the runtime's
    /// own path (`LiveObject::capture_state` → `ObjectType::restore`).
    #[tokio::test]
    async fn registered_types_preserve_live_state() {
        let t = registry(&RefAppConfig::default()).build().unwrap();
        assert_eq!(t[PLAYER].kind(), ObjectTypeKind::Actor);
        assert_eq!(t[ROOM].kind(), ObjectTypeKind::UserSpot);
        assert_eq!(t[LOBBY].kind(), ObjectTypeKind::EntrySpot);
        for ty in [PLAYER, ROOM] {
            assert_eq!(t[ty].policy(), RelocationPolicy::PreserveState);
        }
        let p = t[PLAYER]
            .create(input("p-9", PLAYER), Binding::standalone())
            .await
            .unwrap();
        p.send(
            encode_json(&Deliver {
                source: "s".into(),
                seq: 0,
                item: Some("gem".into()),
            })
            .unwrap(),
            None,
        )
        .unwrap();
        let ack: Ack = ask(
            p.as_ref(),
            &DeliverRequest {
                source: "s".into(),
                seq: 0,
                item: Some("gem".into()),
            },
        )
        .await;
        assert!(ack.duplicate, "the send was handled first (queue order)");
        let bytes = p.capture_state().unwrap().unwrap();
        p.close().await;
        let back = t[PLAYER]
            .restore(input("p-9", PLAYER), Some(bytes), Binding::standalone())
            .await
            .unwrap();
        let expected = BTreeMap::from([("s".to_owned(), 1)]);
        let report: PlayerReport = ask(
            back.as_ref(),
            &ReportRequest {
                expected: Some(expected),
            },
        )
        .await;
        assert_eq!(report.player, "p-9");
        assert_eq!((report.sends, report.requests), (1, 1));
        assert_eq!(report.inventory, BTreeMap::from([("gem".to_owned(), 1)]));
        assert_eq!(report.sources[0].duplicates, 1);
        assert_eq!(report.sources[0].missing, 0);
        back.close().await;

        let room = t[ROOM]
            .create(input("room-9", ROOM), Binding::standalone())
            .await
            .unwrap();
        let j: Joined = ask(room.as_ref(), &Join { player: "p".into() }).await;
        assert_eq!(j.members, 1);
        let bytes = room.capture_state().unwrap().unwrap();
        room.close().await;
        let back = t[ROOM]
            .restore(input("room-9", ROOM), Some(bytes), Binding::standalone())
            .await
            .unwrap();
        let r: RoomReport = ask(back.as_ref(), &ReportRequest::default()).await;
        assert_eq!(r.members, vec!["p".to_owned()]);
        back.close().await;
    }

    /// The room's timer is armed by the first join and ticks on the room's queue.
    #[tokio::test]
    async fn the_room_timer_ticks_after_the_first_join() {
        let cfg = RefAppConfig {
            room_tick: Duration::from_millis(5),
            ..RefAppConfig::default()
        };
        let t = registry(&cfg).build().unwrap();
        let room = t[ROOM]
            .create(input("room-t", ROOM), Binding::standalone())
            .await
            .unwrap();
        let r: RoomReport = ask(room.as_ref(), &ReportRequest::default()).await;
        assert_eq!(r.ticks, 0);
        let _: Joined = ask(room.as_ref(), &Join { player: "p".into() }).await;
        let _: Joined = ask(room.as_ref(), &Join { player: "p".into() }).await;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        loop {
            let r: RoomReport = ask(room.as_ref(), &ReportRequest::default()).await;
            assert_eq!(r.members.len(), 1, "join is idempotent");
            if r.ticks >= 3 {
                break;
            }
            assert!(tokio::time::Instant::now() < deadline, "no ticks: {r:?}");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        // A duplicate line is neither logged nor broadcast.
        let room2 = t[ROOM]
            .create(input("room-u", ROOM), Binding::standalone())
            .await
            .unwrap();
        let say = Say {
            source: "x".into(),
            seq: 0,
            text: "hi".into(),
        };
        let h: Heard = ask(room2.as_ref(), &say).await;
        assert!(!h.duplicate);
        let h: Heard = ask(room2.as_ref(), &say).await;
        assert!(h.duplicate);
        let r: RoomReport = ask(room2.as_ref(), &ReportRequest::default()).await;
        assert_eq!((r.lines, r.log_len), (1, 1));
        assert_eq!(r.sources[0].duplicates, 1);
        room.close().await;
        room2.close().await;
    }
}
