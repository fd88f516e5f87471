//! A user's own object types, hosted by the zlink node host: the `leaderboard` Instance Spot
//! (activated by its first call, wire §8) keeps each player's best score and answers a
//! submission with the player's rank. `src/main.rs` is the whole node binary:
//! `zlink_node::host::main(|_| registry())`, with the same YAML configuration, `ZLINK_*`
//! overrides, gRPC HostAdmin, `/healthz` `/readyz` `/metrics` and SIGTERM drain as
//! `zlink-node run` (README, "Hosting your own objects").
//!
//! The message types are plain serde structs with a packet name, so a caller (another node, a
//! client binary, the process test in `tests/`) uses the same types.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use zlink::call::error::CallError;
use zlink::mesh::JsonMessage;
use zlink::object::exec::ObjectHandlers;
use zlink::object::registry::{FactoryInput, JsonState, Registry};

/// The stable type name of the leaderboard Instance Spot.
pub const LEADERBOARD: &str = "leaderboard";

/// Submit a score for a player.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Submit {
    /// The player.
    pub player: String,
    /// The score of this round.
    pub score: u64,
}
impl JsonMessage for Submit {
    const PACKET_NAME: &'static str = "example.Submit";
}

/// A player's standing after a [`Submit`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Standing {
    /// The board's global ID.
    pub board: String,
    /// The player's best score so far.
    pub best: u64,
    /// 1 for the best player on the board.
    pub rank: usize,
    /// Players on the board.
    pub players: usize,
}
impl JsonMessage for Standing {
    const PACKET_NAME: &'static str = "example.Standing";
}

/// The board's state: each player's best score (preserved as JSON when it moves).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Board {
    id: String,
    best: BTreeMap<String, u64>,
}

impl Board {
    fn submit(&mut self, s: &Submit) -> Standing {
        let best = self.best.entry(s.player.clone()).or_default();
        *best = (*best).max(s.score);
        let best = *best;
        let rank = 1 + self.best.values().filter(|&&b| b > best).count();
        Standing {
            board: self.id.clone(),
            best,
            rank,
            players: self.best.len(),
        }
    }
}

fn handlers() -> ObjectHandlers<Board> {
    let mut h: ObjectHandlers<Board> = ObjectHandlers::new();
    h.on_request(|ctx, s: Submit| async move { Ok::<_, CallError>(ctx.state().submit(&s)) });
    h
}

/// The application's registry: what this node binary hosts.
pub fn registry() -> Registry {
    let mut r = Registry::new();
    r.instance_spot(
        LEADERBOARD,
        |i: FactoryInput| async move {
            Ok(Board {
                id: i.id,
                ..Board::default()
            })
        },
        handlers,
    )
    .preserve_state_with(JsonState)
    .register();
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_player_keeps_the_best_score_and_is_ranked_by_it() {
        let mut b = Board::default();
        let s = |p: &str, score| Submit {
            player: p.into(),
            score,
        };
        assert_eq!(b.submit(&s("ann", 5)).rank, 1);
        assert_eq!(b.submit(&s("bob", 9)).rank, 1);
        let ann = b.submit(&s("ann", 3));
        assert_eq!((ann.best, ann.rank, ann.players), (5, 2, 2));
    }
}
