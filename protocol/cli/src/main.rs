//! `zlink-wire` — the wire inspector.
//!
//! Operators use it to read captures; tests use it for black-box conformance.
//!
//! ```text
//! zlink-wire decode <HEX|FILE|->   [--as record|stream|durable] [--topology routeMesh|clientServer] [--leg send|request|reply]
//! zlink-wire encode <JSON|FILE|->
//! ```
//!
//! Records with several frames are written as hex frames joined by `|` (`5a4d01…|0001…`).
//! `decode` prints one JSON document; for a malformed input it prints
//! `{"error": {"kind": "<ProtocolError variant>", "message": "…"}}` and exits with status 1.
//! The JSON that `decode` prints is accepted by `encode`, which prints the hex again.

use std::io::Read as _;
use std::process::ExitCode;

use anyhow::{Context as _, bail};
use clap::{Parser, Subcommand, ValueEnum};
use serde_json::{Value, json};
use zlink_protocol::codec::hex;
use zlink_protocol::generated::DurableValue;
use zlink_protocol::record::{CommandId, Leg, Record, Topology, WireContext};
use zlink_protocol::stream::{MaxMessageSize, StreamPacket};
use zlink_protocol::{ProtocolError, generated};

#[derive(Parser)]
#[command(
    name = "zlink-wire",
    version,
    about = "Decode and encode zlink service wire v1 records, STREAM packets and durable formats"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Decode hex (or a file holding hex or raw bytes; `-` for stdin) and print JSON.
    Decode {
        /// Hex string, file path, or `-`.
        input: String,
        /// What the bytes are; guessed from the leading bytes when omitted.
        #[arg(long = "as", value_enum)]
        kind: Option<Kind>,
        /// Connection topology of a record (default routeMesh).
        #[arg(long, value_enum, default_value = "route-mesh")]
        topology: TopologyArg,
        /// Leg of a record; defaults to the command's first allowed leg (instanceSpot: the leg its body implies).
        #[arg(long, value_enum)]
        leg: Option<LegArg>,
        /// STREAM MaxMessageSize for `--as stream` (0 = unlimited).
        #[arg(long, default_value_t = 0)]
        max_message_size: i64,
    },
    /// Encode JSON (as printed by `decode`; a file path or `-` for stdin) and print hex.
    Encode {
        /// JSON text, file path, or `-`.
        input: String,
    },
}

#[derive(Clone, Copy, ValueEnum)]
enum Kind {
    Record,
    Stream,
    Durable,
}

#[derive(Clone, Copy, ValueEnum)]
enum TopologyArg {
    RouteMesh,
    ClientServer,
}

#[derive(Clone, Copy, ValueEnum)]
enum LegArg {
    Send,
    Request,
    Reply,
}

impl From<TopologyArg> for Topology {
    fn from(t: TopologyArg) -> Self {
        match t {
            TopologyArg::RouteMesh => Topology::RouteMesh,
            TopologyArg::ClientServer => Topology::ClientServer,
        }
    }
}

impl From<LegArg> for Leg {
    fn from(l: LegArg) -> Self {
        match l {
            LegArg::Send => Leg::Send,
            LegArg::Request => Leg::Request,
            LegArg::Reply => Leg::Reply,
        }
    }
}

fn read_input(input: &str) -> anyhow::Result<Vec<u8>> {
    if input == "-" {
        let mut buf = Vec::new();
        std::io::stdin()
            .read_to_end(&mut buf)
            .context("reading stdin")?;
        return Ok(buf);
    }
    let path = std::path::Path::new(input);
    if path.is_file() {
        return std::fs::read(path).with_context(|| format!("reading {input}"));
    }
    Ok(input.as_bytes().to_vec())
}

/// Split input into frames: hex text (frames separated by `|`), or raw bytes as one frame.
fn frames_of(raw: &[u8]) -> anyhow::Result<Vec<Vec<u8>>> {
    if let Ok(text) = std::str::from_utf8(raw) {
        let text = text.trim();
        if !text.is_empty()
            && text
                .bytes()
                .all(|b| b.is_ascii_hexdigit() || b == b'|' || b.is_ascii_whitespace())
        {
            return text
                .split('|')
                .map(|f| hex::decode(f).map_err(|e| anyhow::anyhow!("bad hex: {e}")))
                .collect();
        }
    }
    Ok(vec![raw.to_vec()])
}

fn error_json(e: &ProtocolError) -> Value {
    json!({ "error": { "kind": e.kind(), "message": e.to_string() } })
}

fn guess(frames: &[Vec<u8>]) -> Kind {
    let f0 = frames.first().map(Vec::as_slice).unwrap_or_default();
    if f0.starts_with(&generated::MAGIC) {
        Kind::Record
    } else if f0.len() >= 4
        && DurableValue::FORMAT_NAMES.iter().any(|name| {
            DurableValue::decode_named(name, f0)
                .is_some_and(|r| !matches!(r, Err(ProtocolError::BadMagic { .. })))
        })
    {
        Kind::Durable
    } else {
        Kind::Stream
    }
}

fn decode_record(frames: &[Vec<u8>], topology: Topology, leg: Option<Leg>) -> Value {
    let legs: Vec<Leg> = match leg {
        Some(l) => vec![l],
        None => frames
            .first()
            .and_then(|f| f.get(3))
            .and_then(|id| CommandId::from_wire(*id).ok())
            .map(|c| c.spec().legs.to_vec())
            .unwrap_or_else(|| vec![Leg::Send]),
    };
    let mut last = None;
    for leg in legs {
        let ctx = WireContext { topology, leg };
        match Record::decode(frames, ctx) {
            Ok(rec) => {
                return json!({
                    "kind": "record",
                    "topology": topology.name(),
                    "leg": leg.name(),
                    "id": rec.command().id(),
                    "flags": format!("0x{:02x}", rec.flags()),
                    "record": rec,
                });
            }
            Err(e) => last = Some(e),
        }
    }
    match last {
        Some(e) => error_json(&e),
        None => json!({ "error": { "kind": "WrongFrameCount", "message": "no frames" } }),
    }
}

fn run_decode(
    input: &str,
    kind: Option<Kind>,
    topology: Topology,
    leg: Option<Leg>,
    max: i64,
) -> anyhow::Result<Value> {
    let frames = frames_of(&read_input(input)?)?;
    let kind = kind.unwrap_or_else(|| guess(&frames));
    let single = || -> anyhow::Result<&[u8]> {
        match frames.as_slice() {
            [one] => Ok(one.as_slice()),
            _ => bail!("expected a single frame"),
        }
    };
    Ok(match kind {
        Kind::Record => decode_record(&frames, topology, leg),
        Kind::Durable => match DurableValue::decode_any(single()?) {
            Ok(v) => json!({ "kind": "durable", "value": v }),
            Err(e) => error_json(&e),
        },
        Kind::Stream => {
            let limit = MaxMessageSize::new(max).map_err(|e| anyhow::anyhow!("{e}"))?;
            match StreamPacket::decode(single()?, limit) {
                Ok(p) => json!({ "kind": "stream", "packet": p }),
                Err(e) => error_json(&e),
            }
        }
    })
}

fn run_encode(input: &str) -> anyhow::Result<String> {
    let raw = read_input(input)?;
    let v: Value = serde_json::from_slice(&raw).context("input is not JSON")?;
    let kind = v.get("kind").and_then(Value::as_str).unwrap_or("record");
    match kind {
        "record" => {
            let topology: Topology = match v.get("topology") {
                Some(t) => serde_json::from_value(t.clone()).context("topology")?,
                None => Topology::RouteMesh,
            };
            let rec: Record =
                serde_json::from_value(v.get("record").cloned().unwrap_or(Value::Null))
                    .context("record")?;
            let leg: Leg = match v.get("leg") {
                Some(l) => serde_json::from_value(l.clone()).context("leg")?,
                None => rec
                    .body
                    .implied_leg()
                    .unwrap_or(rec.command().spec().legs[0]),
            };
            let frames = rec.encode(WireContext { topology, leg })?;
            Ok(frames
                .iter()
                .map(|f| hex::encode(f))
                .collect::<Vec<_>>()
                .join("|"))
        }
        "durable" => {
            let d: DurableValue =
                serde_json::from_value(v.get("value").cloned().unwrap_or(Value::Null))
                    .context("value")?;
            Ok(hex::encode(&d.encode()?))
        }
        "stream" => {
            let p: StreamPacket =
                serde_json::from_value(v.get("packet").cloned().unwrap_or(Value::Null))
                    .context("packet")?;
            Ok(hex::encode(&p.encode()?))
        }
        other => bail!("unknown kind {other:?} (record, durable, stream)"),
    }
}

/// Print to stdout; a closed pipe (`zlink-wire decode … | head`) is not an error.
fn emit(text: &str) -> bool {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    match writeln!(out, "{text}").and_then(|()| out.flush()) {
        Ok(()) => true,
        Err(e) => e.kind() == std::io::ErrorKind::BrokenPipe,
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Decode {
            input,
            kind,
            topology,
            leg,
            max_message_size,
        } => match run_decode(
            &input,
            kind,
            topology.into(),
            leg.map(Into::into),
            max_message_size,
        ) {
            Ok(v) => {
                let failed = v.get("error").is_some();
                if !emit(&serde_json::to_string_pretty(&v).unwrap_or_default()) {
                    return ExitCode::from(2);
                }
                if failed {
                    ExitCode::from(1)
                } else {
                    ExitCode::SUCCESS
                }
            }
            Err(e) => {
                eprintln!("zlink-wire: {e:#}");
                ExitCode::from(2)
            }
        },
        Command::Encode { input } => match run_encode(&input) {
            Ok(hex) => {
                if emit(&hex) {
                    ExitCode::SUCCESS
                } else {
                    ExitCode::from(2)
                }
            }
            Err(e) => {
                eprintln!("zlink-wire: {e:#}");
                ExitCode::from(1)
            }
        },
    }
}
