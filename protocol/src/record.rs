//! Service record framing (wire §2).
//!
//! ```text
//! frame 0: 5A 4D 01 <command> <flags> <command body> [0x02 BoundSessionTail] [0x04 SourceSpotTail] [0x08 Extension]
//! frame 1: metadata frame                      (iff flag 0x01)
//! next:    typed payload envelope              (iff the command's payload rule is required/optional)
//! ```
//!
//! The command body is encoded and decoded only by the schema-generated code in
//! [`crate::generated`]; this module owns the head, flags, conditional tails, the frame count and
//! the decision of which leg and topology a command may travel on.
//!
//! # Decode order
//! Checks run cheapest-first and every failure is a distinct [`ProtocolError`] variant, raised
//! before any application code can see the record:
//!
//! 1. at least one frame (`WrongFrameCount`); frame 0 head: `Incomplete`, `BadMagic`,
//!    `UnsupportedVersion` (major ≠ 1), `ReservedCommand` / `UnknownCommand`;
//! 2. flags: `UndefinedFlags` (bits outside `0x0F`), `FlagNotAllowed` (defined but not allowed
//!    for this command);
//! 3. `TopologyNotAllowed` (only 1..6 on ClientServer), `WrongLeg`;
//! 4. `WrongFrameCount` (metadata flag ⇔ frame 1; payload rule ⇔ payload frame);
//! 5. the body (generated; bounds, UTF-8, enums, counts, constraints), then the leg the body
//!    implies (instanceSpot `operationKind`, `WrongLeg`);
//! 6. tails in flag-bit order, each opened by its tag byte (`ConditionalTailMismatch`), then
//!    `TrailingBytes` for anything left in frame 0;
//! 7. the metadata frame and the payload envelope frame.

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::codec::{Reader, Writer};
use crate::envelope::TypedPayload;
use crate::error::{ProtocolError, Result};
pub use crate::generated::{
    BoundSessionTail, CommandBody, CommandId, CommandSpec, Extension, Layer, Leg, PayloadRule,
    SourceSpotTail, Topology, flags,
};
use crate::generated::{MAGIC, WIRE_MAJOR};
use crate::metadata::Metadata;

/// Length of the frame 0 head (`5A 4D 01 <command> <flags>`).
pub const HEAD_LEN: usize = 5;

/// Where a record travels: the connection topology and the leg.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct WireContext {
    /// RouteMesh or ClientServer connection.
    pub topology: Topology,
    /// Send, request or reply leg.
    pub leg: Leg,
}

impl WireContext {
    /// A RouteMesh context on the given leg.
    pub const fn route_mesh(leg: Leg) -> Self {
        Self {
            topology: Topology::RouteMesh,
            leg,
        }
    }

    /// A ClientServer context on the given leg (only commands 1..6 are allowed there).
    pub const fn client_server(leg: Leg) -> Self {
        Self {
            topology: Topology::ClientServer,
            leg,
        }
    }
}

impl Topology {
    fn label(self) -> &'static str {
        self.name()
    }
}

/// One complete service record: command body, conditional tails, metadata and payload.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Record {
    /// The command and its body (`"command"` + `"body"` in JSON).
    #[serde(flatten)]
    pub body: CommandBody,
    /// Tail of flag `0x02`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bound_session: Option<BoundSessionTail>,
    /// Tail of flag `0x04`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_spot_id: Option<SourceSpotTail>,
    /// Tail of flag `0x08` (no v1 command allows it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extension: Option<Extension>,
    /// Metadata frame (flag `0x01`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Metadata>,
    /// Typed payload envelope frame.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload: Option<TypedPayload>,
}

impl Record {
    /// A record with only a body.
    pub fn new(body: CommandBody) -> Self {
        Self {
            body,
            bound_session: None,
            source_spot_id: None,
            extension: None,
            metadata: None,
            payload: None,
        }
    }

    /// Attach a typed payload.
    #[must_use]
    pub fn with_payload(mut self, payload: TypedPayload) -> Self {
        self.payload = Some(payload);
        self
    }

    /// Attach metadata.
    #[must_use]
    pub fn with_metadata(mut self, metadata: Metadata) -> Self {
        self.metadata = Some(metadata);
        self
    }

    /// The command.
    pub fn command(&self) -> CommandId {
        self.body.command()
    }

    /// The flag byte this record encodes with.
    pub fn flags(&self) -> u8 {
        let mut f = 0;
        if self.metadata.is_some() {
            f |= flags::METADATA;
        }
        if self.bound_session.is_some() {
            f |= flags::BOUND_SESSION;
        }
        if self.source_spot_id.is_some() {
            f |= flags::SOURCE_SPOT_ID;
        }
        if self.extension.is_some() {
            f |= flags::EXTENSION;
        }
        f
    }

    /// Decode a record from its frames (the ROUTER routing identity already stripped). Byte
    /// fields and the payload are copied out of the frames; see [`Record::decode_shared`] for the
    /// zero-copy form.
    ///
    /// # Errors
    /// The first [`ProtocolError`] in the order documented at module level.
    pub fn decode<F: AsRef<[u8]>>(frames: &[F], ctx: WireContext) -> Result<Self> {
        let frame0 = frames.first().map(|f| Reader::new(f.as_ref()));
        Self::decode_in(frame0, frames.len(), ctx, |i| {
            let f = frames[i].as_ref();
            if i == 0 {
                Err(())
            } else {
                Ok((Reader::new(f), f))
            }
        })
    }

    /// Decode a record whose frames are shared buffers (as received from the transport): byte
    /// fields (relocation chunks, relayed frames, state) and the payload are zero-copy slices.
    ///
    /// # Errors
    /// As [`Record::decode`].
    pub fn decode_shared(frames: &[Bytes], ctx: WireContext) -> Result<Self> {
        let frame0 = frames.first().map(Reader::shared);
        Self::decode_in(frame0, frames.len(), ctx, |i| {
            let f = &frames[i];
            if i == 0 {
                Err(())
            } else {
                Ok((Reader::shared(f), f.as_ref()))
            }
        })
    }

    fn decode_in<'a>(
        frame0: Option<Reader<'a>>,
        frame_count: usize,
        ctx: WireContext,
        frame: impl Fn(usize) -> std::result::Result<(Reader<'a>, &'a [u8]), ()>,
    ) -> Result<Self> {
        let Some(mut r) = frame0 else {
            return Err(ProtocolError::WrongFrameCount {
                command: "record",
                actual: 0,
                min: 1,
                max: 3,
            });
        };
        let (spec, flag_bits) = decode_head(&mut r, ctx)?;
        check_frame_count(spec, flag_bits, frame_count)?;

        let body = CommandBody::decode_from(spec_command(spec), &mut r)?;
        if let Some(leg) = body.implied_leg()
            && leg != ctx.leg
        {
            return Err(ProtocolError::WrongLeg {
                command: spec.name,
                leg: ctx.leg.name(),
            });
        }
        let bound_session = if flag_bits & flags::BOUND_SESSION != 0 {
            open_tail(&mut r, spec, flags::BOUND_SESSION)?;
            Some(BoundSessionTail::decode_from(&mut r)?)
        } else {
            None
        };
        let source_spot_id = if flag_bits & flags::SOURCE_SPOT_ID != 0 {
            open_tail(&mut r, spec, flags::SOURCE_SPOT_ID)?;
            Some(SourceSpotTail::decode_from(&mut r)?)
        } else {
            None
        };
        let extension = if flag_bits & flags::EXTENSION != 0 {
            open_tail(&mut r, spec, flags::EXTENSION)?;
            Some(Extension::decode_from(&mut r)?)
        } else {
            None
        };
        r.finish("frame 0")?;

        // `check_frame_count` guaranteed these frames exist.
        let mut next = 1;
        let metadata = if flag_bits & flags::METADATA != 0 {
            let (_, bytes) = frame(next).map_err(|()| missing_frame(spec, frame_count))?;
            next += 1;
            Some(Metadata::decode(bytes)?)
        } else {
            None
        };
        let payload = if next < frame_count {
            let (reader, _) = frame(next).map_err(|()| missing_frame(spec, frame_count))?;
            Some(TypedPayload::decode_reader(reader)?)
        } else {
            None
        };
        Ok(Self {
            body,
            bound_session,
            source_spot_id,
            extension,
            metadata,
            payload,
        })
    }

    /// Encode the record into frames, applying the same rules a decoder applies.
    ///
    /// # Errors
    /// `FlagNotAllowed`, `TopologyNotAllowed`, `WrongLeg`, `WrongFrameCount` (payload presence
    /// against the payload rule), and any bound or constraint violation of the body or tails.
    pub fn encode(&self, ctx: WireContext) -> Result<Vec<Vec<u8>>> {
        let mut frames = Vec::with_capacity(3);
        let mut w = Writer::with_capacity(128);
        self.encode_frame0(ctx, &mut w)?;
        frames.push(w.into_vec());
        if let Some(m) = &self.metadata {
            frames.push(m.encode());
        }
        if let Some(p) = &self.payload {
            frames.push(p.encode()?);
        }
        Ok(frames)
    }

    /// Encode only frame 0 (head, body, tails) into `w`, after checking flags, topology, leg and
    /// payload presence. Lets a transport reuse one buffer per record.
    ///
    /// # Errors
    /// As [`Record::encode`].
    pub fn encode_frame0(&self, ctx: WireContext, w: &mut Writer) -> Result<()> {
        let command = self.command();
        let spec = command.spec();
        let flag_bits = self.flags();
        check_flags(spec, flag_bits)?;
        check_route(spec, ctx)?;
        if let Some(leg) = self.body.implied_leg()
            && leg != ctx.leg
        {
            return Err(ProtocolError::WrongLeg {
                command: spec.name,
                leg: ctx.leg.name(),
            });
        }
        let frame_count =
            1 + usize::from(self.metadata.is_some()) + usize::from(self.payload.is_some());
        check_frame_count(spec, flag_bits, frame_count)?;
        w.put_slice(&MAGIC);
        w.u8(WIRE_MAJOR);
        w.u8(command.id());
        w.u8(flag_bits);
        self.body.encode_to(w)?;
        if let Some(t) = &self.bound_session {
            w.u8(flags::BOUND_SESSION);
            t.encode_to(w)?;
        }
        if let Some(t) = &self.source_spot_id {
            w.u8(flags::SOURCE_SPOT_ID);
            t.encode_to(w)?;
        }
        if let Some(t) = &self.extension {
            w.u8(flags::EXTENSION);
            t.encode_to(w)?;
        }
        Ok(())
    }
}

#[cold]
fn missing_frame(spec: &CommandSpec, actual: usize) -> ProtocolError {
    ProtocolError::WrongFrameCount {
        command: spec.name,
        actual: actual as u64,
        min: 1,
        max: 3,
    }
}

fn spec_command(spec: &CommandSpec) -> CommandId {
    // `spec` came from `CommandId::spec`, so its id maps back.
    match CommandId::from_wire(spec.id) {
        Ok(c) => c,
        Err(_) => unreachable_command(spec),
    }
}

#[cold]
fn unreachable_command(spec: &CommandSpec) -> CommandId {
    // COMMAND_SPECS is generated from the same list as CommandId; a mismatch is a generator bug
    // caught by `every_spec_maps_back_to_its_command`. Fall back to a harmless lookup by name.
    CommandId::from_name(spec.name).unwrap_or(CommandId::Hello)
}

/// Read and check the 5-byte head, the flags, topology and leg.
fn decode_head(r: &mut Reader<'_>, ctx: WireContext) -> Result<(&'static CommandSpec, u8)> {
    let magic = r.fixed::<2>("record head")?;
    let major = r.u8("record head")?;
    let command = r.u8("record head")?;
    let flag_bits = r.u8("record head")?;
    if magic != MAGIC {
        return Err(ProtocolError::BadMagic { context: "record" });
    }
    if major != WIRE_MAJOR {
        return Err(ProtocolError::UnsupportedVersion {
            context: "record",
            found: u64::from(major),
        });
    }
    let spec = CommandId::from_wire(command)?.spec();
    check_flags(spec, flag_bits)?;
    check_route(spec, ctx)?;
    Ok((spec, flag_bits))
}

fn check_flags(spec: &CommandSpec, flag_bits: u8) -> Result<()> {
    let undefined = flag_bits & !flags::DEFINED;
    if undefined != 0 {
        return Err(ProtocolError::UndefinedFlags {
            command: spec.name,
            bits: undefined,
        });
    }
    let disallowed = flag_bits & !spec.allowed_flags;
    if disallowed != 0 {
        // Report the lowest offending flag.
        return Err(ProtocolError::FlagNotAllowed {
            command: spec.name,
            flag: disallowed & disallowed.wrapping_neg(),
        });
    }
    Ok(())
}

fn check_route(spec: &CommandSpec, ctx: WireContext) -> Result<()> {
    let topology_ok = match ctx.topology {
        Topology::RouteMesh => spec.route_mesh,
        Topology::ClientServer => spec.client_server,
    };
    if !topology_ok {
        return Err(ProtocolError::TopologyNotAllowed {
            command: spec.name,
            topology: ctx.topology.label(),
        });
    }
    if !spec.legs.contains(&ctx.leg) {
        return Err(ProtocolError::WrongLeg {
            command: spec.name,
            leg: ctx.leg.name(),
        });
    }
    Ok(())
}

fn check_frame_count(spec: &CommandSpec, flag_bits: u8, actual: usize) -> Result<()> {
    let base = 1 + u64::from(flag_bits & flags::METADATA != 0);
    let (min, max) = match spec.payload {
        PayloadRule::None => (base, base),
        PayloadRule::Required => (base + 1, base + 1),
        PayloadRule::Optional => (base, base + 1),
    };
    let actual = actual as u64;
    if actual < min || actual > max {
        return Err(ProtocolError::WrongFrameCount {
            command: spec.name,
            actual,
            min,
            max,
        });
    }
    Ok(())
}

fn open_tail(r: &mut Reader<'_>, spec: &CommandSpec, flag: u8) -> Result<()> {
    match r.peek_u8() {
        Some(tag) if tag == flag => {
            r.take(1, "tail tag")?;
            Ok(())
        }
        _ => Err(ProtocolError::ConditionalTailMismatch {
            command: spec.name,
            flag,
        }),
    }
}

/// Whether a command may travel on `ctx` (topology and leg), without decoding anything.
pub fn allowed(command: CommandId, ctx: WireContext) -> bool {
    check_route(command.spec(), ctx).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::generated::{LivenessProbe, NodeFence, NodeSend};

    fn probe() -> Record {
        Record::new(CommandBody::LivenessProbe(LivenessProbe {
            probe_id: 7,
            connection_generation: 3,
        }))
    }

    #[test]
    fn every_spec_maps_back_to_its_command() {
        for c in CommandId::ALL {
            assert_eq!(spec_command(c.spec()), c);
            assert_eq!(c.spec().id, c.id());
        }
    }

    #[test]
    fn probe_round_trips_on_both_topologies() {
        for topology in [Topology::RouteMesh, Topology::ClientServer] {
            let ctx = WireContext {
                topology,
                leg: Leg::Send,
            };
            let frames = probe().encode(ctx).unwrap();
            assert_eq!(
                frames[0],
                [
                    0x5a, 0x4d, 1, 5, 0, 0, 0, 0, 0, 0, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0, 3
                ]
            );
            assert_eq!(Record::decode(&frames, ctx).unwrap(), probe());
        }
    }

    #[test]
    fn node_send_is_refused_on_client_server_before_encoding() {
        let rec = Record::new(CommandBody::NodeSend(NodeSend {
            source: NodeFence {
                rid: "a".into(),
                lifecycle_generation: 1,
            },
            target: NodeFence {
                rid: "b".into(),
                lifecycle_generation: 2,
            },
        }))
        .with_payload(TypedPayload::new("p", "", vec![1]));
        let ctx = WireContext {
            topology: Topology::ClientServer,
            leg: Leg::Send,
        };
        assert_eq!(rec.encode(ctx).unwrap_err().kind(), "TopologyNotAllowed");
        assert!(rec.encode(WireContext::route_mesh(Leg::Send)).is_ok());
        assert_eq!(
            rec.encode(WireContext::route_mesh(Leg::Request))
                .unwrap_err()
                .kind(),
            "WrongLeg"
        );
    }

    #[test]
    fn record_json_has_command_and_body_keys() {
        let v = serde_json::to_value(probe()).unwrap();
        assert_eq!(v["command"], "livenessProbe");
        assert_eq!(v["body"]["probeId"], 7);
        let back: Record = serde_json::from_value(v).unwrap();
        assert_eq!(back, probe());
    }
}
