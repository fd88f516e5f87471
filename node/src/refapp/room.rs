//! The `room` User Spot (issue "node host" §6): members (player IDs), a bounded chat log, a
//! periodic housekeeping timer, and per-source sequence tracking of the lines said in it.
//!
//! A [`Say`] is logged and broadcast as a numbered [`Deliver`] to every member (the room is the
//! source of that stream; each member has its own numbering, so a member that joins late
//! starts at 0). The broadcast uses one-way sends: the room's turn never waits for a member's
//! handler (a request to a member of a SpotWide Spot from the Spot's own turn could wait for
//! the very gate the Spot holds).

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::messages::{Deliver, Heard, Join, Joined, ReportRequest, RoomReport, Say, Tick};
use super::seq::{Receipt, SeqTracker};
use zlink::call::error::CallError;
use zlink::object::ObjectCalls;
use zlink::object::exec::ObjectHandlers;

/// The ID of the room's housekeeping timer.
pub const ROOM_TICK_TIMER: u64 = 1;

/// The state of one room. Captured and restored as versioned JSON
/// ([`VersionedJson`](super::VersionedJson)) when the room relocates.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoomState {
    /// The room's global ID (the source name of its broadcasts).
    pub id: String,
    /// Member player IDs, in join order.
    pub members: Vec<String>,
    /// The next broadcast sequence number per member.
    pub member_seq: BTreeMap<String, u64>,
    /// The last `log_limit` lines.
    pub log: VecDeque<String>,
    /// Bound of the chat log.
    pub log_limit: usize,
    /// Lines said (duplicates excluded).
    pub lines: u64,
    /// Broadcast messages sent to members.
    pub broadcasts: u64,
    /// Housekeeping ticks.
    pub ticks: u64,
    /// Whether the housekeeping timer is armed (it is armed by the first join).
    pub timer_armed: bool,
    /// Sequence numbers of the lines said, per source.
    pub seqs: SeqTracker,
}

impl RoomState {
    /// An empty room keeping at most `log_limit` lines.
    pub fn new(id: impl Into<String>, log_limit: usize) -> Self {
        Self {
            id: id.into(),
            log_limit,
            ..Self::default()
        }
    }

    /// Add `player` (idempotent). Returns whether the timer still has to be armed.
    pub fn join(&mut self, player: String) -> bool {
        if !self.members.contains(&player) {
            self.member_seq.entry(player.clone()).or_insert(0);
            self.members.push(player);
        }
        !self.timer_armed
    }

    /// Log a line (dropping the oldest beyond the bound) and number one broadcast per member;
    /// `None` for a duplicate, which is neither logged nor broadcast again.
    pub fn say(&mut self, source: &str, seq: u64, text: &str) -> Option<Vec<(String, u64)>> {
        if self.seqs.record(source, seq) == Receipt::Duplicate {
            return None;
        }
        self.lines += 1;
        self.log.push_back(format!("{source}#{seq}: {text}"));
        while self.log.len() > self.log_limit {
            self.log.pop_front();
        }
        let mut out = Vec::with_capacity(self.members.len());
        for m in &self.members {
            let next = self.member_seq.entry(m.clone()).or_insert(0);
            out.push((m.clone(), *next));
            *next += 1;
        }
        Some(out)
    }

    /// The report, checked against `expected` when given.
    pub fn report(&self, expected: Option<&BTreeMap<String, u64>>) -> RoomReport {
        RoomReport {
            room: self.id.clone(),
            members: self.members.clone(),
            log_len: self.log.len(),
            lines: self.lines,
            broadcasts: self.broadcasts,
            ticks: self.ticks,
            sources: match expected {
                Some(e) => self.seqs.check(e),
                None => self.seqs.report(),
            },
        }
    }
}

/// The room's handlers: [`Join`] → [`Joined`] (the first join arms the housekeeping timer
/// every `tick`), [`Say`] → [`Heard`], [`ReportRequest`] → [`RoomReport`], and the [`Tick`]
/// timer.
pub fn room_handlers(tick: Duration) -> ObjectHandlers<RoomState> {
    let mut h: ObjectHandlers<RoomState> = ObjectHandlers::new();
    h.on_request(move |ctx, j: Join| async move {
        let (arm, members) = {
            let mut room = ctx.state();
            let arm = room.join(j.player);
            (arm, room.members.len())
        };
        if arm {
            // A timer is data on the room's queue: its ticks run as turns of their own.
            ctx.timer_every(ROOM_TICK_TIMER, tick, &Tick)?;
            ctx.state().timer_armed = true;
        }
        Ok::<_, CallError>(Joined { members })
    });
    h.on_request(|ctx, s: Say| async move {
        let (room, sends) = {
            let mut room = ctx.state();
            (room.id.clone(), room.say(&s.source, s.seq, &s.text))
        };
        let Some(sends) = sends else {
            return Ok(Heard {
                members: 0,
                duplicate: true,
            });
        };
        // The state guard is not held across awaits (it cannot be: it is not Send).
        for (member, seq) in &sends {
            ctx.send_to_actor(
                member,
                &Deliver {
                    source: room.clone(),
                    seq: *seq,
                    item: None,
                },
            )
            .await?;
            ctx.state().broadcasts += 1;
        }
        Ok::<_, CallError>(Heard {
            members: sends.len(),
            duplicate: false,
        })
    });
    h.on_request(|ctx, r: ReportRequest| async move {
        Ok::<_, CallError>(ctx.state().report(r.expected.as_ref()))
    });
    h.on_send(|ctx, _: Tick| async move {
        ctx.state().ticks += 1;
        Ok(())
    });
    super::chat::add_room_handlers(&mut h);
    h
}
