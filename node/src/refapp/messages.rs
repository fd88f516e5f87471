//! The reference application's messages: serde-typed JSON payloads, each with its own explicit
//! packet name (never derived from the Rust type name).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::seq::SourceReport;
use zlink::mesh::JsonMessage;

/// One-way application message to a player, numbered in its source's stream.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Deliver {
    /// The sending stream (a load caller, or the room that broadcast it).
    pub source: String,
    /// The stream's sequence number for this player, from 0.
    pub seq: u64,
    /// An inventory item granted with the message (added once, even if duplicated).
    pub item: Option<String>,
}
impl JsonMessage for Deliver {
    const PACKET_NAME: &'static str = "refapp.Deliver";
}

/// The request form of [`Deliver`]: the player answers with an [`Ack`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeliverRequest {
    /// The sending stream.
    pub source: String,
    /// The stream's sequence number for this player, from 0.
    pub seq: u64,
    /// An inventory item granted with the message.
    pub item: Option<String>,
}
impl JsonMessage for DeliverRequest {
    const PACKET_NAME: &'static str = "refapp.DeliverRequest";
}

/// A player's answer to [`DeliverRequest`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ack {
    /// The acknowledged sequence number.
    pub seq: u64,
    /// Whether the player had seen that number from that source before.
    pub duplicate: bool,
}
impl JsonMessage for Ack {
    const PACKET_NAME: &'static str = "refapp.Ack";
}

/// Ask a player or a room for its report, checked against the expected message counts per
/// source (`None`: report without expectations).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReportRequest {
    /// Source → messages numbered `0..n` the check expects.
    pub expected: Option<BTreeMap<String, u64>>,
}
impl JsonMessage for ReportRequest {
    const PACKET_NAME: &'static str = "refapp.ReportRequest";
}

/// A player's counters, inventory and per-source sequence report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlayerReport {
    /// The player's global ID.
    pub player: String,
    /// One-way messages handled (duplicates included).
    pub sends: u64,
    /// Requests handled (duplicates included).
    pub requests: u64,
    /// Items held, by name.
    pub inventory: BTreeMap<String, u64>,
    /// One report per source.
    pub sources: Vec<SourceReport>,
}
impl JsonMessage for PlayerReport {
    const PACKET_NAME: &'static str = "refapp.PlayerReport";
}

/// A player joins a room (the room records it as a member and broadcasts to it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Join {
    /// The player's global ID.
    pub player: String,
}
impl JsonMessage for Join {
    const PACKET_NAME: &'static str = "refapp.Join";
}

/// The room's answer to [`Join`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Joined {
    /// Members after the join.
    pub members: usize,
}
impl JsonMessage for Joined {
    const PACKET_NAME: &'static str = "refapp.Joined";
}

/// A chat line said in a room: the room logs it and broadcasts a [`Deliver`] to every member.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Say {
    /// The sending stream.
    pub source: String,
    /// The stream's sequence number for this room, from 0.
    pub seq: u64,
    /// The line.
    pub text: String,
}
impl JsonMessage for Say {
    const PACKET_NAME: &'static str = "refapp.Say";
}

/// The room's answer to [`Say`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Heard {
    /// Members the line was broadcast to (0 for a duplicate, which is not broadcast again).
    pub members: usize,
    /// Whether the room had seen that number from that source before.
    pub duplicate: bool,
}
impl JsonMessage for Heard {
    const PACKET_NAME: &'static str = "refapp.Heard";
}

/// A room's members, chat log, timer ticks and per-source sequence report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoomReport {
    /// The room's global ID.
    pub room: String,
    /// Member player IDs.
    pub members: Vec<String>,
    /// Lines in the (bounded) chat log.
    pub log_len: usize,
    /// Lines said (duplicates excluded).
    pub lines: u64,
    /// Broadcast messages sent to members.
    pub broadcasts: u64,
    /// Housekeeping timer ticks so far.
    pub ticks: u64,
    /// One report per source.
    pub sources: Vec<SourceReport>,
}
impl JsonMessage for RoomReport {
    const PACKET_NAME: &'static str = "refapp.RoomReport";
}

/// The room's periodic housekeeping tick (a timer payload).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tick;
impl JsonMessage for Tick {
    const PACKET_NAME: &'static str = "refapp.Tick";
}
