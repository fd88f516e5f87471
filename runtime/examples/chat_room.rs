//! A chat room User Spot with member player Actors, on two in-process MeshNodes sharing the
//! embedded memory Location Store. Everything is addressed by global ID only.
//!
//! ```text
//! cargo run -p zlink --example chat_room
//! ```
//!
//! What it shows:
//!
//! * factories registered per explicit stable type (`room`, `player`), with a preserve-state
//!   adapter on the player;
//! * a room and two players placed by weight across the two nodes (remote create), each player
//!   a member of its node's Entry Spot;
//! * the room's handler calling each member player by ID (a remote call; `Async` keeps the
//!   room's turn) and a periodic timer on the room (queue work, never concurrent with a handler);
//! * callers on either node reaching any object by ID, with the route cache doing the rest.

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use zlink::call::error::CallError;
use zlink::mesh::auth::MeshSecret;
use zlink::mesh::discovery::DiscoveryBackend;
use zlink::mesh::{Handlers, JsonMessage, MeshNode, MeshNodeConfig, RidConfig};
use zlink::object::ObjectCalls;
use zlink::object::exec::ObjectHandlers;
use zlink::object::registry::{FactoryInput, JsonState, Registry};
use zlink::object::runtime::ObjectRuntime;
use zlink::routing::CacheConfig;
use zlink_store::MemoryStore;
use zlink_store::clock::SystemClock;

// ---- messages ---------------------------------------------------------------------------

/// A player joins the room.
#[derive(Debug, Serialize, Deserialize)]
struct Join {
    player: String,
}
impl JsonMessage for Join {
    const PACKET_NAME: &'static str = "chat.Join";
}

/// A line said in the room by a player.
#[derive(Debug, Serialize, Deserialize)]
struct Say {
    player: String,
    text: String,
}
impl JsonMessage for Say {
    const PACKET_NAME: &'static str = "chat.Say";
}

/// The room's answer to `Say`: how many members heard it.
#[derive(Debug, Serialize, Deserialize)]
struct Heard {
    members: usize,
}
impl JsonMessage for Heard {
    const PACKET_NAME: &'static str = "chat.Heard";
}

/// Delivered to a player: one line of the room.
#[derive(Debug, Serialize, Deserialize)]
struct Line {
    text: String,
}
impl JsonMessage for Line {
    const PACKET_NAME: &'static str = "chat.Line";
}

/// Ask a player for its counters.
#[derive(Debug, Serialize, Deserialize)]
struct Stats;
impl JsonMessage for Stats {
    const PACKET_NAME: &'static str = "chat.Stats";
}

/// A player's counters.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
struct PlayerState {
    lines_heard: u64,
    last: Option<String>,
}
impl JsonMessage for PlayerState {
    const PACKET_NAME: &'static str = "chat.PlayerState";
}

/// The room's periodic tick.
#[derive(Debug, Serialize, Deserialize)]
struct Tick;
impl JsonMessage for Tick {
    const PACKET_NAME: &'static str = "chat.Tick";
}

// ---- objects ----------------------------------------------------------------------------

#[derive(Debug, Default)]
struct Room {
    members: Vec<String>,
    log: Vec<String>,
    ticks: u64,
}

fn room_handlers() -> ObjectHandlers<Room> {
    let mut h: ObjectHandlers<Room> = ObjectHandlers::new();
    h.on_request(|ctx, j: Join| async move {
        let first = {
            let mut room = ctx.state();
            room.members.push(j.player);
            room.members.len() == 1
        };
        if first {
            // A timer is data on the room's queue: its ticks run as turns of their own.
            ctx.timer_every(1, Duration::from_millis(20), &Tick)?;
        }
        Ok::<_, CallError>(Heard {
            members: ctx.state().members.len(),
        })
    });
    h.on_request(|ctx, s: Say| async move {
        let line = format!("{}: {}", s.player, s.text);
        let members = {
            let mut room = ctx.state();
            room.log.push(line.clone());
            room.members.clone()
        };
        // Each member is an Actor addressed by ID; the state guard is not held across awaits.
        for m in &members {
            ctx.send_to_actor(m, &Line { text: line.clone() }).await?;
        }
        Ok::<_, CallError>(Heard {
            members: members.len(),
        })
    });
    h.on_send(|ctx, _: Tick| async move {
        ctx.state().ticks += 1;
        Ok(())
    });
    h
}

fn player_handlers() -> ObjectHandlers<PlayerState> {
    let mut h: ObjectHandlers<PlayerState> = ObjectHandlers::new();
    h.on_send(|ctx, l: Line| async move {
        let mut p = ctx.state();
        p.lines_heard += 1;
        p.last = Some(l.text);
        Ok(())
    });
    h.on_request(|ctx, _: Stats| async move { Ok::<_, CallError>(ctx.state().clone()) });
    h
}

fn registry() -> Registry {
    let mut r = Registry::new();
    r.user_spot(
        "room",
        |_: FactoryInput| async { Ok(Room::default()) },
        room_handlers,
    )
    .register();
    r.actor(
        "player",
        |_: FactoryInput| async { Ok(PlayerState::default()) },
        player_handlers,
    )
    .preserve_state_with(JsonState)
    .register();
    // Each node's Entry Spot: the default membership of the Actors placed there.
    r.entry_spot(
        "lobby",
        |_: FactoryInput| async { Ok(Room::default()) },
        room_handlers,
    )
    .register();
    r
}

async fn node(
    rid: &str,
    store: &Arc<MemoryStore>,
) -> Result<Arc<MeshNode>, Box<dyn std::error::Error>> {
    let mut c = MeshNodeConfig::new(
        "chat",
        MeshSecret::from_bytes(b"example-secret-0123456789")?,
    );
    c.rid = RidConfig::Fixed(rid.into());
    // Announce what this node can host, so peers may place rooms on it.
    c.object_capabilities = registry().capabilities();
    c.entry_spot_prefix = Some(rid.into());
    let store: Arc<dyn DiscoveryBackend> = Arc::clone(store) as Arc<dyn DiscoveryBackend>;
    Ok(Arc::new(
        MeshNode::start(c, Handlers::new(), Some(store)).await?,
    ))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let store = Arc::new(MemoryStore::new(SystemClock));
    let a = node("node-a", &store).await?;
    let b = node("node-b", &store).await?;
    a.wait_ready("node-b", Duration::from_secs(10)).await?;
    let rt_a = ObjectRuntime::start(
        Arc::clone(&a),
        Arc::clone(&store),
        registry(),
        CacheConfig::default(),
    )
    .await?;
    let rt_b = ObjectRuntime::start(
        Arc::clone(&b),
        Arc::clone(&store),
        registry(),
        CacheConfig::default(),
    )
    .await?;

    rt_a.create_user_spot("room", "room-7", None).await?;
    for p in ["alice", "bob"] {
        rt_b.create_actor("player", p, None).await?;
    }
    let t = Duration::from_secs(5);
    for p in ["alice", "bob"] {
        let _: Heard = rt_b
            .request_to_spot("room-7", &Join { player: p.into() }, t)
            .await?;
    }
    let heard: Heard = rt_b
        .request_to_spot(
            "room-7",
            &Say {
                player: "alice".into(),
                text: "hello".into(),
            },
            t,
        )
        .await?;
    println!("room-7: {} members heard alice", heard.members);
    tokio::time::sleep(Duration::from_millis(100)).await;
    for p in ["alice", "bob"] {
        let s: PlayerState = rt_a.request_to_actor(p, &Stats, t).await?;
        println!("{p}: {} line(s), last {:?}", s.lines_heard, s.last);
    }
    a.shutdown().await;
    b.shutdown().await;
    Ok(())
}
