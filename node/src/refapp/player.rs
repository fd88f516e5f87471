//! The `player` Actor (issue "node host" §6): counters, an inventory map and per-source
//! sequence tracking, so a report can name every gap and duplicate per player.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::messages::{Ack, Deliver, DeliverRequest, PlayerReport, ReportRequest};
use super::seq::{Receipt, SeqTracker};
use zlink::call::error::CallError;
use zlink::object::exec::ObjectHandlers;

/// The state of one player. Captured and restored as versioned JSON
/// ([`VersionedJson`](super::VersionedJson)) when the player relocates.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlayerState {
    /// The player's global ID.
    pub id: String,
    /// One-way messages handled (duplicates included).
    pub sends: u64,
    /// Requests handled (duplicates included).
    pub requests: u64,
    /// Items held, by name. A duplicated message grants nothing.
    pub inventory: BTreeMap<String, u64>,
    /// Sequence numbers received, per source.
    pub seqs: SeqTracker,
    /// The chat room the player is in (`chat.Join`), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub room: Option<String>,
}

impl PlayerState {
    /// A fresh player.
    pub fn new(id: impl Into<String>) -> Self {
        Self {
            id: id.into(),
            ..Self::default()
        }
    }

    /// Apply one numbered message; `true` when it was a duplicate (and changed nothing but
    /// the counters).
    pub fn apply(&mut self, source: &str, seq: u64, item: Option<String>) -> bool {
        let duplicate = self.seqs.record(source, seq) == Receipt::Duplicate;
        if let (false, Some(item)) = (duplicate, item) {
            *self.inventory.entry(item).or_default() += 1;
        }
        duplicate
    }

    /// The report, checked against `expected` when given.
    pub fn report(&self, expected: Option<&BTreeMap<String, u64>>) -> PlayerReport {
        PlayerReport {
            player: self.id.clone(),
            sends: self.sends,
            requests: self.requests,
            inventory: self.inventory.clone(),
            sources: match expected {
                Some(e) => self.seqs.check(e),
                None => self.seqs.report(),
            },
        }
    }
}

/// The player's handlers: [`Deliver`] (one-way), [`DeliverRequest`] → [`Ack`], and
/// [`ReportRequest`] → [`PlayerReport`].
pub fn player_handlers() -> ObjectHandlers<PlayerState> {
    let mut h: ObjectHandlers<PlayerState> = ObjectHandlers::new();
    h.on_send(|ctx, d: Deliver| async move {
        let mut p = ctx.state();
        p.sends += 1;
        p.apply(&d.source, d.seq, d.item);
        Ok(())
    });
    h.on_request(|ctx, d: DeliverRequest| async move {
        let mut p = ctx.state();
        p.requests += 1;
        let duplicate = p.apply(&d.source, d.seq, d.item);
        Ok::<_, CallError>(Ack {
            seq: d.seq,
            duplicate,
        })
    });
    h.on_request(|ctx, r: ReportRequest| async move {
        Ok::<_, CallError>(ctx.state().report(r.expected.as_ref()))
    });
    super::chat::add_player_handlers(&mut h);
    h
}
