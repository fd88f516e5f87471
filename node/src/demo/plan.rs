//! The demo's traffic plan and latency summary — pure, so the numbering the check relies on is
//! tested apart from any socket.
//!
//! Player `p` receives `messages_per_player` numbered messages. Message `j` is sent by node
//! `(p + j) mod N` (so every node talks to every player once there are at least N messages),
//! with sequence number `j div N` in that node's stream to that player: consecutive messages of
//! one node to one player are `N` apart in `j`, so each stream is numbered densely from 0. Room
//! `r` receives `lines_per_room` lines numbered the same way. Every `request_every`-th message
//! to a player is a request (its latency is measured); the others are one-way sends. Lines to a
//! room are always requests (the room answers once it has broadcast the line).

use std::collections::BTreeMap;
use std::time::Duration;

/// What one planned operation does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpKind {
    /// One-way `Deliver` to a player.
    Send,
    /// `DeliverRequest` to a player.
    Request,
    /// `Say` request to a room (broadcast to its members).
    Say,
}

/// One planned operation: node `node` sends to player or room `target` (an index) its
/// message number `seq`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Op {
    /// The sending node (index).
    pub node: usize,
    /// Player index for `Send`/`Request`, room index for `Say`.
    pub target: usize,
    /// The sequence number in the (node, target) stream.
    pub seq: u64,
    /// What it is.
    pub kind: OpKind,
}

/// The traffic shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    /// Nodes (≥ 1).
    pub nodes: usize,
    /// Rooms.
    pub rooms: usize,
    /// Players (all rooms together).
    pub players: usize,
    /// Messages to each player.
    pub messages_per_player: u64,
    /// Lines said in each room.
    pub lines_per_room: u64,
    /// Every n-th message to a player is a request (0: none).
    pub request_every: u64,
}

/// The name of node `i`'s sending stream.
pub fn source_name(node: usize) -> String {
    format!("node-{node}")
}

impl Shape {
    fn node_of(&self, target: usize, j: u64) -> usize {
        let n = self.nodes.max(1);
        ((target % n) + usize::try_from(j % n as u64).unwrap_or(0)) % n
    }

    /// Every operation, grouped per sending node (index = node), in rounds: round `j` holds
    /// message `j` of every player, then line `j` of every room. Consecutive calls of a node
    /// therefore go to different IDs, the way many independent clients would call (ordering by
    /// target instead would send a node's whole in-flight window to one cold ID at once).
    pub fn ops(&self) -> Vec<Vec<Op>> {
        let n = self.nodes.max(1);
        let mut per_node = vec![Vec::new(); n];
        for j in 0..self.messages_per_player.max(self.lines_per_room) {
            for p in (0..self.players).take_while(|_| j < self.messages_per_player) {
                let kind = if self.request_every > 0 && (j + 1) % self.request_every == 0 {
                    OpKind::Request
                } else {
                    OpKind::Send
                };
                let node = self.node_of(p, j);
                per_node[node].push(Op {
                    node,
                    target: p,
                    seq: j / n as u64,
                    kind,
                });
            }
            for r in (0..self.rooms).take_while(|_| j < self.lines_per_room) {
                let node = self.node_of(r, j);
                per_node[node].push(Op {
                    node,
                    target: r,
                    seq: j / n as u64,
                    kind: OpKind::Say,
                });
            }
        }
        per_node
    }

    /// How many messages numbered `0..k` each node's stream carries to one target that receives
    /// `per_target` messages: source name → k (nodes with nothing to send are left out).
    pub fn expected_from_nodes(&self, target: usize, per_target: u64) -> BTreeMap<String, u64> {
        let mut out = BTreeMap::new();
        for j in 0..per_target {
            *out.entry(source_name(self.node_of(target, j))).or_insert(0) += 1;
        }
        out
    }

    /// Total operations of the plan.
    pub fn total_ops(&self) -> u64 {
        self.players as u64 * self.messages_per_player + self.rooms as u64 * self.lines_per_room
    }
}

/// The `q`-quantile (0.0..=1.0) of sorted samples by nearest rank; zero without samples.
pub fn quantile(sorted: &[Duration], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    // Nearest rank: ceil(q · n), 1-based, clamped to 1..=n.
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        clippy::cast_precision_loss
    )]
    let rank = ((q.clamp(0.0, 1.0) * sorted.len() as f64).ceil() as usize).max(1);
    sorted[rank.min(sorted.len()) - 1]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(nodes: usize, players: usize, m: u64) -> Shape {
        Shape {
            nodes,
            rooms: 2,
            players,
            messages_per_player: m,
            lines_per_room: 5,
            request_every: 3,
        }
    }

    /// Each (node, target) stream is numbered densely from 0, and the expectation per source
    /// is exactly what the plan sends — the premise of the per-ID check.
    #[test]
    fn every_stream_is_dense_and_matches_its_expectation() {
        for (nodes, m) in [(1, 7), (3, 20), (3, 2), (4, 9)] {
            let s = shape(nodes, 5, m);
            let ops = s.ops();
            assert_eq!(ops.len(), nodes);
            assert_eq!(
                ops.iter().map(Vec::len).sum::<usize>() as u64,
                s.total_ops()
            );
            let mut seen: BTreeMap<(bool, usize, usize), Vec<u64>> = BTreeMap::new();
            for (i, list) in ops.iter().enumerate() {
                for op in list {
                    assert_eq!(op.node, i);
                    let room = op.kind == OpKind::Say;
                    seen.entry((room, op.target, op.node))
                        .or_default()
                        .push(op.seq);
                }
            }
            for ((room, target, node), mut seqs) in seen {
                seqs.sort_unstable();
                let k = seqs.len() as u64;
                assert_eq!(seqs, (0..k).collect::<Vec<_>>(), "dense from 0");
                let per = if room {
                    s.lines_per_room
                } else {
                    s.messages_per_player
                };
                assert_eq!(s.expected_from_nodes(target, per)[&source_name(node)], k);
            }
        }
    }

    #[test]
    fn every_node_talks_to_every_player_and_requests_follow_the_ratio() {
        let s = shape(3, 4, 6);
        for p in 0..4 {
            assert_eq!(s.expected_from_nodes(p, 6).len(), 3, "all three nodes");
        }
        let requests = s
            .ops()
            .iter()
            .flatten()
            .filter(|o| o.kind == OpKind::Request)
            .count();
        assert_eq!(requests, 4 * 2, "every third of six messages, four players");
    }

    #[test]
    fn quantiles_use_the_nearest_rank() {
        let ms = |v: u64| Duration::from_millis(v);
        let v: Vec<Duration> = (1..=100).map(ms).collect();
        assert_eq!(quantile(&v, 0.5), ms(50));
        assert_eq!(quantile(&v, 0.99), ms(99));
        assert_eq!(quantile(&v, 1.0), ms(100));
        assert_eq!(quantile(&v, 0.0), ms(1));
        assert_eq!(quantile(&[ms(7)], 0.99), ms(7));
        assert_eq!(quantile(&[], 0.5), Duration::ZERO);
    }
}
