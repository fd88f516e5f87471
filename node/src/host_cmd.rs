//! `zlink-node run` (the node host, [`zlink_node::host`]) and `zlink-node ctl` (its admin
//! client over gRPC HostAdmin).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use tonic::transport::Channel;
use zlink_node::host::load::LoadConfig;
use zlink_node::host::proto::host_admin_client::HostAdminClient;
use zlink_node::host::proto::{
    GetStatusRequest, HostStatus, LocateRequest, RelocateRequest, RelocationMode, RelocationState,
    SetChannelWeightRequest, ShutdownRequest, WatchStatusRequest,
};
use zlink_node::host::{self, HostConfig, HostState};

/// Flags of `zlink-node run`.
#[derive(clap::Args)]
pub struct RunArgs {
    /// The YAML configuration file (every field can also be set by its `ZLINK_*` variable;
    /// without a file, defaults plus the environment).
    #[arg(long)]
    config: Option<PathBuf>,
}

fn env(k: &str) -> Option<String> {
    std::env::var(k).ok()
}

/// `zlink-node run`: the host of the reference application; returns the process exit status.
pub async fn run(args: RunArgs) -> Result<i32> {
    let code = host::run_from_config(
        args.config.as_deref(),
        |config| {
            zlink_node::refapp::registry(&zlink_node::refapp::RefAppConfig {
                room_tick: Duration::from_millis(config.objects.room_tick_ms),
                // Checked by the config's validation before the registry is built.
                session_key: config.session_key().ok().flatten(),
                ..zlink_node::refapp::RefAppConfig::default()
            })
        },
        crate::say_line,
    )
    .await?;
    Ok(code)
}

/// Flags of `zlink-node ctl`.
#[derive(clap::Args)]
pub struct CtlArgs {
    /// HostAdmin address.
    #[arg(long, default_value = "http://127.0.0.1:7070")]
    addr: String,
    /// File holding the admin bearer token (default: the `ZLINK_ADMIN_TOKEN` variable).
    #[arg(long)]
    token_file: Option<PathBuf>,
    /// Print JSON lines instead of text.
    #[arg(long)]
    json: bool,
    #[command(subcommand)]
    cmd: CtlCmd,
}

#[derive(clap::Subcommand)]
enum CtlCmd {
    /// Print the host status.
    Status,
    /// Print the status, then every change, until the host stops (or `--count` statuses).
    Watch {
        /// Stop after this many statuses.
        #[arg(long)]
        count: Option<usize>,
    },
    /// Drain and stop the host (HostAdmin `Shutdown`).
    Drain {
        /// Drain deadline in milliseconds (default: the host's configured one).
        #[arg(long, default_value_t = 0)]
        deadline_ms: u64,
        /// Relocate every object first and wait for SafeToShutdown (`true`/`false`; default:
        /// the host's `relocation.on_shutdown`).
        #[arg(long)]
        relocate_first: Option<bool>,
    },
    /// Which node owns an object now, with its fences (HostAdmin `Locate`), and what the host
    /// asked knows of it (live, moving, arriving). Exits 1 when the object does not exist.
    Locate {
        /// `actor` or `spot`.
        kind: String,
        /// The object's global ID.
        id: String,
    },
    /// Move this host's objects to other hosts (HostAdmin `Relocate`) and print the outcome of
    /// every unit. Exits 0 when the relocation is Completed, 4 when it Failed.
    Relocate {
        /// `planned-maintenance` (keep the version) or `rolling-update` (needs --version).
        #[arg(long, default_value = "planned-maintenance")]
        mode: String,
        /// RollingUpdate: the targets' exact application version.
        #[arg(long, default_value_t = 0)]
        version: u64,
        /// Deadline in milliseconds (0: the host's `relocation.deadline_ms`).
        #[arg(long, default_value_t = 0)]
        deadline_ms: u64,
        /// Idempotency key: the same id returns that relocation and starts nothing.
        #[arg(long)]
        id: Option<String>,
        /// Only these peers may take units (repeatable).
        #[arg(long = "target")]
        targets: Vec<String>,
        /// Then wait until the host reports SafeToShutdown (its Message Follow windows ended).
        #[arg(long)]
        wait_safe: bool,
    },
    /// Set this host's selection weight (0..=10000) in one of its Server channels.
    SetWeight {
        /// The channel.
        channel: String,
        /// The weight.
        weight: u32,
    },
}

fn status_json(s: &HostStatus) -> serde_json::Value {
    let state = HostState::from_proto(s.state).map_or("unspecified", HostState::name);
    serde_json::json!({
        "state": state,
        "rid": s.rid,
        "mesh": s.mesh_name,
        "application_version": s.application_version,
        "endpoint": s.endpoint,
        "descriptor_revision": s.descriptor_revision,
        "objects_live": s.objects_live,
        "objects": s.objects.iter().map(|o| (o.kind.clone(), o.count)).collect::<std::collections::BTreeMap<_, _>>(),
        "peers_ready": s.peers_ready,
        "peers_not_ready": s.peers_not_ready,
        "peers": s.peers.iter().map(|p| serde_json::json!({"rid": p.rid, "ready": p.ready, "state": p.state})).collect::<Vec<_>>(),
        "channels": s.channels.iter().map(|c| serde_json::json!({"channel": c.channel, "role": c.role, "weight": c.weight})).collect::<Vec<_>>(),
        "safe_to_shutdown": s.safe_to_shutdown,
        "sequence": s.sequence,
        "relocation": s.relocation.as_ref().map(relocation_json),
    })
}

fn relocation_json(r: &zlink_node::host::proto::RelocationStatus) -> serde_json::Value {
    serde_json::json!({
        "relocation_id": r.relocation_id,
        "mode": r.mode().as_str_name().trim_start_matches("RELOCATION_MODE_").to_ascii_lowercase(),
        "version": r.target_application_version,
        "state": r.state().as_str_name().trim_start_matches("RELOCATION_STATE_").to_ascii_lowercase(),
        "reason": r.reason,
        "units": r.units.iter().map(|c| (c.outcome.clone(), c.count)).collect::<std::collections::BTreeMap<_, _>>(),
    })
}

fn print_status(s: &HostStatus, json: bool) {
    if json {
        crate::say_line(&status_json(s).to_string());
        return;
    }
    let state = HostState::from_proto(s.state).map_or("unspecified", HostState::name);
    let mut out = format!(
        "state: {state}\nrid: {}\nmesh: {}\napplication version: {}\nendpoint: {}\n\
         descriptor revision: {}\nsafe to shutdown: {}\nobjects: {}",
        s.rid,
        s.mesh_name,
        s.application_version,
        s.endpoint,
        s.descriptor_revision,
        s.safe_to_shutdown,
        s.objects_live
    );
    for o in &s.objects {
        out.push_str(&format!(" {}={}", o.kind, o.count));
    }
    out.push_str(&format!(
        "\npeers: {} ready, {} not ready\n",
        s.peers_ready, s.peers_not_ready
    ));
    for p in &s.peers {
        out.push_str(&format!("  {:<48} {}\n", p.rid, p.state));
    }
    for c in &s.channels {
        out.push_str(&format!(
            "channel {} ({}) weight {}\n",
            c.channel, c.role, c.weight
        ));
    }
    if let Some(r) = &s.relocation {
        out.push_str(&format!("relocation: {}\n", relocation_json(r)));
    }
    crate::say_line(out.trim_end());
}

fn token(args: &CtlArgs) -> Result<String> {
    let raw = match &args.token_file {
        Some(p) => std::fs::read_to_string(p)
            .with_context(|| format!("reading the admin token from {}", p.display()))?,
        None => std::env::var("ZLINK_ADMIN_TOKEN")
            .context("no --token-file and ZLINK_ADMIN_TOKEN is not set")?,
    };
    Ok(raw.trim().to_owned())
}

/// `zlink-node ctl`: returns the process exit status.
pub async fn ctl(args: CtlArgs) -> Result<i32> {
    let token = token(&args)?;
    let bearer: tonic::metadata::MetadataValue<tonic::metadata::Ascii> = format!("Bearer {token}")
        .parse()
        .context("the admin token must be printable ASCII")?;
    let channel = Channel::from_shared(args.addr.clone())
        .with_context(|| format!("bad --addr {:?}", args.addr))?
        .connect_timeout(Duration::from_secs(5))
        .connect()
        .await
        .with_context(|| format!("connecting to {}", args.addr))?;
    let mut client =
        HostAdminClient::with_interceptor(channel, move |mut req: tonic::Request<()>| {
            req.metadata_mut().insert("authorization", bearer.clone());
            Ok(req)
        });
    match args.cmd {
        CtlCmd::Status => {
            let s = client.get_status(GetStatusRequest {}).await?.into_inner();
            print_status(&s, args.json);
        }
        CtlCmd::Watch { count } => {
            let mut stream = client
                .watch_status(WatchStatusRequest {})
                .await?
                .into_inner();
            let mut seen = 0;
            while let Some(s) = stream.message().await? {
                print_status(&s, args.json);
                seen += 1;
                if count.is_some_and(|c| seen >= c) {
                    break;
                }
            }
        }
        CtlCmd::Locate { kind, id } => {
            let r = client
                .locate(LocateRequest {
                    kind: kind.clone(),
                    id: id.clone(),
                })
                .await?
                .into_inner();
            if args.json {
                crate::say_line(
                    &serde_json::json!({
                        "kind": kind, "id": id, "found": r.found, "state": r.state,
                        "owner_rid": r.owner_rid, "owner_lifecycle_generation": r.owner_lifecycle_generation,
                        "object_generation": r.object_generation,
                        "authority_owner_generation": r.authority_owner_generation,
                        "owner_lease_generation": r.owner_lease_generation,
                        "store_version": r.store_version, "stable_type": r.stable_type,
                        "membership": r.membership, "here": r.here,
                    })
                    .to_string(),
                );
            } else if r.found {
                crate::say_line(&format!(
                    "{kind} {id} ({}): {} on {} (lifecycle {}), object generation {}, owner generation {}, lease generation {}, store version {}{}{}",
                    r.stable_type,
                    r.state,
                    r.owner_rid,
                    r.owner_lifecycle_generation,
                    r.object_generation,
                    r.authority_owner_generation,
                    r.owner_lease_generation,
                    r.store_version,
                    if r.membership.is_empty() {
                        String::new()
                    } else {
                        format!(", member of {}", r.membership)
                    },
                    if r.here.is_empty() {
                        String::new()
                    } else {
                        format!("; on this host: {}", r.here)
                    },
                ));
            } else {
                crate::say_line(&format!("{kind} {id} does not exist"));
            }
            if !r.found {
                return Ok(1);
            }
        }
        CtlCmd::Relocate {
            mode,
            version,
            deadline_ms,
            id,
            targets,
            wait_safe,
        } => {
            let mode = match mode.as_str() {
                "planned-maintenance" => RelocationMode::PlannedMaintenance,
                "rolling-update" => RelocationMode::RollingUpdate,
                other => bail!("--mode {other:?}: planned-maintenance or rolling-update"),
            };
            let r = client
                .relocate(RelocateRequest {
                    mode: mode as i32,
                    target_application_version: version,
                    deadline_ms,
                    relocation_id: id.unwrap_or_default(),
                    target_rids: targets,
                })
                .await?
                .into_inner();
            let st = r.relocation.unwrap_or_default();
            for u in &r.units {
                if args.json {
                    crate::say_line(
                        &serde_json::json!({"kind": u.kind, "id": u.id, "stable_type": u.stable_type, "members": u.member_actor_ids, "target": u.target_rid, "outcome": u.outcome, "detail": u.detail}).to_string(),
                    );
                } else {
                    crate::say_line(&format!(
                        "{} {} ({}){} → {} {}{}",
                        u.kind,
                        u.id,
                        u.stable_type,
                        match u.member_actor_ids.len() {
                            0 => String::new(),
                            n => format!(" with {n} member(s)"),
                        },
                        if u.target_rid.is_empty() {
                            "-"
                        } else {
                            &u.target_rid
                        },
                        u.outcome,
                        if u.detail.is_empty() {
                            String::new()
                        } else {
                            format!(": {}", u.detail)
                        }
                    ));
                }
            }
            let counts: Vec<String> = st
                .units
                .iter()
                .map(|c| format!("{}={}", c.outcome, c.count))
                .collect();
            let state = st
                .state()
                .as_str_name()
                .trim_start_matches("RELOCATION_STATE_")
                .to_ascii_lowercase();
            if args.json {
                crate::say_line(
                    &serde_json::json!({"relocation_id": st.relocation_id, "state": state, "version": st.target_application_version, "units": counts, "reason": st.reason}).to_string(),
                );
            } else {
                crate::say_line(&format!(
                    "relocation {} {state} (version {}): {}{}",
                    st.relocation_id,
                    st.target_application_version,
                    counts.join(" "),
                    if st.reason.is_empty() {
                        String::new()
                    } else {
                        format!("; {}", st.reason)
                    }
                ));
            }
            if wait_safe {
                let mut stream = client
                    .watch_status(WatchStatusRequest {})
                    .await?
                    .into_inner();
                while let Some(s) = stream.message().await? {
                    if s.safe_to_shutdown {
                        crate::say_line(if args.json {
                            "{\"safe_to_shutdown\":true}"
                        } else {
                            "safe to shut down"
                        });
                        break;
                    }
                }
            }
            if st.state() != RelocationState::Completed {
                return Ok(4);
            }
        }
        CtlCmd::Drain {
            deadline_ms,
            relocate_first,
        } => {
            let r = client
                .shutdown(ShutdownRequest {
                    deadline_ms,
                    relocate_first,
                })
                .await?
                .into_inner();
            let state = HostState::from_proto(r.state).map_or("unspecified", HostState::name);
            if args.json {
                crate::say_line(
                    &serde_json::json!({"started": r.started, "state": state}).to_string(),
                );
            } else if r.started {
                crate::say_line(&format!("drain started (state {state})"));
            } else {
                crate::say_line(&format!("a drain was already running (state {state})"));
            }
        }
        CtlCmd::SetWeight { channel, weight } => {
            if weight > 10_000 {
                bail!("weight {weight} must be 0..=10000");
            }
            let r = client
                .set_channel_weight(SetChannelWeightRequest {
                    channel: channel.clone(),
                    weight,
                })
                .await?
                .into_inner();
            if args.json {
                crate::say_line(
                    &serde_json::json!({"channel": channel, "weight": weight, "descriptor_revision": r.descriptor_revision}).to_string(),
                );
            } else {
                crate::say_line(&format!(
                    "channel {channel} weight {weight} (descriptor revision {})",
                    r.descriptor_revision
                ));
            }
        }
    }
    Ok(0)
}

/// Flags of `zlink-node session-token`.
#[derive(clap::Args)]
pub struct TokenArgs {
    /// The user name.
    #[arg(long)]
    user: String,
}

/// `zlink-node session-token`: print the user's token.
///
/// # Errors
/// When `ZLINK_STREAM_AUTH_KEY` is unset or shorter than 16 bytes.
pub fn session_token(args: &TokenArgs) -> Result<()> {
    let key = env("ZLINK_STREAM_AUTH_KEY").ok_or_else(|| {
        anyhow::anyhow!("ZLINK_STREAM_AUTH_KEY is not set (the hosts' stream.auth_key)")
    })?;
    let key = zlink::mesh::auth::MeshSecret::from_bytes(key.as_bytes())
        .map_err(|e| anyhow::anyhow!("ZLINK_STREAM_AUTH_KEY: {e}"))?;
    println!(
        "{}",
        zlink_node::refapp::chat::session_token(&key, &args.user)
    );
    Ok(())
}

/// Flags of `zlink-node load` (the mesh, Redis and timings come from the same configuration as
/// `run`: `--config` and the `ZLINK_*` variables).
#[derive(clap::Args)]
pub struct LoadArgs {
    /// The YAML configuration of the mesh to join (as for `run`).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Counter IDs to address.
    #[arg(long, default_value_t = LoadConfig::default().counters)]
    counters: usize,
    /// Numbered messages to each counter.
    #[arg(long, default_value_t = LoadConfig::default().messages_per_counter)]
    messages_per_counter: u64,
    /// Every n-th message is a request (0: one-way sends only).
    #[arg(long, default_value_t = LoadConfig::default().request_every)]
    request_every: u64,
    /// Calls in flight.
    #[arg(long, default_value_t = LoadConfig::default().concurrency)]
    concurrency: usize,
    /// Deadline of every request.
    #[arg(long, default_value_t = 10_000)]
    request_timeout_ms: u64,
    /// How long the check waits for one-way messages to be applied.
    #[arg(long, default_value_t = 10_000)]
    settle_timeout_ms: u64,
    /// How long to wait for a ready, serving Object Server.
    #[arg(long, default_value_t = 15_000)]
    ready_timeout_ms: u64,
    /// Continuous mode: send rounds until this many milliseconds passed (instead of
    /// `--messages-per-counter` rounds), then check every ID as usual.
    #[arg(long)]
    duration_ms: Option<u64>,
    /// Prefix of the counter IDs (default: `load-<random>`, unique per run).
    #[arg(long)]
    id_prefix: Option<String>,
    /// Write every call's outcome (serving RID and lifecycle, error kind) and every final read
    /// as JSON lines to this file, for a history checker.
    #[arg(long)]
    history: Option<PathBuf>,
    /// Rooms and players instead of counters: this many `room` User Spots, each with
    /// `--players-per-room` `player` Actors, created through the mesh before the traffic
    /// (0: counters).
    #[arg(long, default_value_t = 0)]
    rooms: usize,
    /// Players created in each room (with `--rooms`).
    #[arg(long, default_value_t = 5)]
    players_per_room: usize,
    /// Closed loop: every call a request, one in flight per ID, so each ID's arrivals must be
    /// strictly in order (otherwise pipelined, with one-way sends).
    #[arg(long)]
    closed_loop: bool,
    /// Print the report as one JSON line.
    #[arg(long)]
    json: bool,
}

/// `zlink-node load`: returns the process exit status (0 only without gaps, duplicates or
/// failed calls).
pub async fn load(args: LoadArgs) -> Result<i32> {
    let mut hc = HostConfig::default();
    if let Some(p) = &args.config {
        hc = HostConfig::from_file(p)?;
    }
    hc.apply_env(env)?;
    // The admin listeners are not used by `load`; only the mesh, Redis and timings matter.
    hc.validate()?;
    host::init_logs(&hc.log_level);
    let secret = hc.mesh_secret()?;
    let mut random = [0u8; 4];
    ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut random)
        .map_err(|_| anyhow::anyhow!("no randomness for the ID prefix"))?;
    let id_prefix = args.id_prefix.clone().unwrap_or_else(|| {
        format!(
            "load-{}",
            random
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect::<String>()
        )
    });
    let cfg = LoadConfig {
        counters: args.counters,
        messages_per_counter: args.messages_per_counter,
        request_every: args.request_every,
        concurrency: args.concurrency,
        request_timeout: Duration::from_millis(args.request_timeout_ms),
        settle_timeout: Duration::from_millis(args.settle_timeout_ms),
        ready_timeout: Duration::from_millis(args.ready_timeout_ms),
        source: id_prefix.clone(),
        id_prefix,
        duration: args.duration_ms.map(Duration::from_millis),
        history: args.history.clone(),
        rooms: (args.rooms > 0).then_some(zlink_node::host::load::RoomsConfig {
            rooms: args.rooms,
            players_per_room: args.players_per_room,
        }),
        closed_loop: args.closed_loop,
    };
    let report = zlink_node::host::load::run(&hc, secret, &cfg).await?;
    let failures = report.failures();
    let gaps: u64 = report.ids.iter().map(|r| r.missing).sum();
    let dups: u64 = report.ids.iter().map(|r| r.duplicates).sum();
    let applied: u64 = report.ids.iter().map(|r| r.applied).sum();
    if args.json {
        crate::say_line(
            &serde_json::json!({
                "rid": report.rid,
                "ids": report.ids.len(),
                "sent": report.sent,
                "requests": report.requests,
                "applied": applied,
                "failed_calls": report.failed_calls,
                "error_kinds": report.error_kinds,
                "gaps": gaps,
                "duplicates": dups,
                "ids_with_gaps": report.ids.iter().filter(|r| r.missing > 0).count(),
                "out_of_order": report.ids.iter().map(|r| r.out_of_order).sum::<u64>(),
                "ids_out_of_order": report.ids.iter().filter(|r| r.out_of_order > 0).count(),
                "ids_with_duplicates": report.ids.iter().filter(|r| r.duplicates > 0 || r.unexpected > 0).count(),
                "closed_loop": cfg.closed_loop,
                "rooms": cfg.rooms.map_or(0, |r| r.rooms),
                "players": cfg.rooms.map_or(0, |r| r.rooms * r.players_per_room),
                "p50_us": report.p50.as_micros() as u64,
                "p99_us": report.p99.as_micros() as u64,
                "traffic_ms": report.traffic_time.as_millis() as u64,
                "failures": failures,
            })
            .to_string(),
        );
    } else {
        crate::say_line(&format!(
            "load {}: {} IDs x {} messages\n  sent {} ({} requests), applied {applied}, \
             failed calls {}\n  gaps {gaps} in {} IDs, duplicates {dups} in {} IDs, out of \
             order {} (reported only)\n  \
             request latency p50 {:?} p99 {:?} max {:?}\n  traffic {:?}",
            report.rid,
            report.ids.len(),
            cfg.messages_per_counter,
            report.sent,
            report.requests,
            report.failed_calls,
            report.ids.iter().filter(|r| r.missing > 0).count(),
            report.ids.iter().filter(|r| r.duplicates > 0).count(),
            report.ids.iter().map(|r| r.out_of_order).sum::<u64>(),
            report.p50,
            report.p99,
            report.max,
            report.traffic_time,
        ));
        for f in &failures {
            crate::say_line(&format!("FAILED: {f}"));
        }
    }
    Ok(i32::from(!failures.is_empty()))
}
