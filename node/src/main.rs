//! `zlink-node` — the node host binary.
//!
//! `zlink-node demo` runs the reference application on an in-process mesh and checks that every
//! message was delivered exactly once, per ID (see `zlink_node::demo`); it exits 0 only then.
//!
//! `zlink-node run --config node.yaml` runs the node host (`zlink_node::host`): one MeshNode and
//! the reference application's object runtime on Redis, the gRPC HostAdmin service, `/healthz`,
//! `/readyz` and `/metrics`; SIGTERM or SIGINT drains it. It prints one JSON line once serving:
//! `{"rid", "endpoint", "grpc", "http", "state"}`. Exit status 0 after a clean drain, 3 when
//! the drain deadline cut work in flight, 1 when it could not start.
//!
//! `zlink-node ctl` is the admin client: `status`, `watch`, `drain`, `set-weight`.
//!
//! `zlink-node load` joins a running mesh as an Object Client, sends numbered messages to many
//! counter IDs and reports per-ID gaps and duplicates (`zlink_node::host::load`).
//!
//! `zlink-node peer` runs one MeshNode, driven over stdin/stdout so multi-process tests and
//! operators can exercise a real mesh across processes.
//!
//! `zlink-node peer` prints one JSON line when started — `{"rid", "endpoint", "lifecycle"}` —
//! then reads commands, one per line, and answers each with one JSON line:
//!
//! * `peers` → `[{"rid", "state", "generation", "epochs"}]`
//! * `request <rid> <n> [timeout-ms]` → `{"ok": n + 1}` or `{"err": "<ErrorKind>", "detail"}`
//! * `send <rid> <n>` → `{"ok": null}` or `{"err": ...}`
//! * `received` → `{"ok": <one-way messages received>}`
//! * `quit` (or end of input) → graceful shutdown, exit 0.

use std::io::{BufRead, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};
use serde::{Deserialize, Serialize};
use zlink::call::error::CallError;
use zlink::mesh::auth::MeshSecret;
use zlink::mesh::config::{ManualPeer, RidConfig};
use zlink::mesh::discovery::DiscoveryBackend;
use zlink::mesh::{Handlers, JsonMessage, MeshNode, MeshNodeConfig};
use zlink_protocol::generated::ObjectRole;

mod demo_cmd;
mod host_cmd;

#[derive(Parser)]
#[command(name = "zlink-node", version, about = "zlink mesh node host")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run one MeshNode with an echo request handler, driven over stdin/stdout.
    Peer(PeerArgs),
    /// Run the reference application on an in-process mesh, drive numbered traffic through
    /// every node and check that every message was delivered exactly once, per ID.
    Demo(demo_cmd::DemoArgs),
    /// Run the node host: a MeshNode with the reference application on Redis, the gRPC
    /// HostAdmin service and the HTTP health and metrics endpoints, until SIGTERM or SIGINT.
    Run(host_cmd::RunArgs),
    /// Administer a running host over gRPC HostAdmin.
    Ctl(host_cmd::CtlArgs),
    /// Join a running mesh as an Object Client and send numbered messages to many counter IDs;
    /// report per-ID gaps and duplicates (exit 0 only if there are none).
    Load(host_cmd::LoadArgs),
    /// Print the STREAM session token of a user (`zlink-chat --token`), signed with the key in
    /// `ZLINK_STREAM_AUTH_KEY` (the hosts' `stream.auth_key`).
    SessionToken(host_cmd::TokenArgs),
}

#[derive(clap::Args)]
struct PeerArgs {
    /// MeshName to join.
    #[arg(long, default_value = "default")]
    mesh: String,
    /// Fixed RID (manual topology); default: automatic `<rid-prefix>-<uuid>`.
    #[arg(long)]
    rid: Option<String>,
    /// Prefix of the automatic RID.
    #[arg(long, default_value = "node")]
    rid_prefix: String,
    /// Interface to bind.
    #[arg(long, default_value = "127.0.0.1")]
    bind_host: String,
    /// Address peers dial (required with a wildcard bind host).
    #[arg(long)]
    advertise_host: Option<String>,
    /// Port (0 = ephemeral).
    #[arg(long, default_value_t = 0)]
    port: u16,
    /// File holding the mesh secret (e.g. a mounted Kubernetes Secret).
    #[arg(long, conflicts_with = "secret_env")]
    secret_file: Option<std::path::PathBuf>,
    /// Environment variable holding the mesh secret.
    #[arg(long, default_value = "ZLINK_MESH_SECRET")]
    secret_env: String,
    /// Manual peer `tcp://host:port` or `tcp://host:port@rid` (repeatable).
    #[arg(long = "peer")]
    peers: Vec<String>,
    /// Redis URL for automatic discovery through the Location Store.
    #[arg(long)]
    redis: Option<String>,
    /// Key namespace in Redis.
    #[arg(long, default_value = "zlink")]
    redis_namespace: String,
    /// Object role: none, client or server.
    #[arg(long, default_value = "server")]
    role: String,
    /// Liveness probe interval.
    #[arg(long, default_value_t = 5_000)]
    probe_interval_ms: u64,
    /// Liveness deadline.
    #[arg(long, default_value_t = 15_000)]
    liveness_deadline_ms: u64,
    /// Discovery poll interval.
    #[arg(long, default_value_t = 1_000)]
    discovery_poll_ms: u64,
    /// Owner lease TTL.
    #[arg(long, default_value_t = 10_000)]
    lease_ttl_ms: u64,
    /// Host the reference application's objects (an Object Server with an Entry Spot; needs
    /// `--redis`). `ZLINK_ACTIVATION_FAULT=exit` makes the process exit in the middle of a cold
    /// activation (process-death tests).
    #[arg(long)]
    objects: bool,
}

#[derive(Serialize, Deserialize)]
struct Echo {
    text: String,
    n: u64,
}
impl JsonMessage for Echo {
    const PACKET_NAME: &'static str = "zlink.Echo";
}

#[derive(Serialize, Deserialize)]
struct Note {
    n: u64,
}
impl JsonMessage for Note {
    const PACKET_NAME: &'static str = "zlink.Note";
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("tokio runtime")?;
    let code = match cli.command {
        Command::Peer(args) => rt.block_on(peer(args)).map(|()| 0),
        Command::Demo(args) => rt.block_on(demo_cmd::demo(args)).map(|()| 0),
        Command::Run(args) => rt.block_on(host_cmd::run(args)),
        Command::Ctl(args) => rt.block_on(host_cmd::ctl(args)),
        Command::Load(args) => rt.block_on(host_cmd::load(args)),
        Command::SessionToken(args) => host_cmd::session_token(&args).map(|()| 0),
    }?;
    drop(rt);
    if code != 0 {
        std::process::exit(code);
    }
    Ok(())
}

/// Print one line on stdout and flush (the announcement and `ctl` output).
fn say_line(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

fn secret(args: &PeerArgs) -> Result<MeshSecret> {
    Ok(match &args.secret_file {
        Some(path) => MeshSecret::from_file(path)?,
        None => MeshSecret::from_env(&args.secret_env)?,
    })
}

async fn peer(args: PeerArgs) -> Result<()> {
    let mut cfg = MeshNodeConfig::new(args.mesh.clone(), secret(&args)?);
    cfg.rid = match &args.rid {
        Some(rid) => RidConfig::Fixed(rid.clone()),
        None => RidConfig::Automatic {
            prefix: args.rid_prefix.clone(),
        },
    };
    cfg.bind_host = args.bind_host.clone();
    cfg.advertise_host = args.advertise_host.clone();
    cfg.port = args.port;
    cfg.object_role = match args.role.as_str() {
        "none" => ObjectRole::None,
        "client" => ObjectRole::Client,
        "server" => ObjectRole::Server,
        other => bail!("--role must be none, client or server, not {other:?}"),
    };
    cfg.timings.probe_interval = Duration::from_millis(args.probe_interval_ms);
    cfg.timings.liveness_deadline = Duration::from_millis(args.liveness_deadline_ms);
    cfg.timings.discovery_poll = Duration::from_millis(args.discovery_poll_ms);
    cfg.timings.lease_ttl = Duration::from_millis(args.lease_ttl_ms);
    cfg.timings.lease_renew = Duration::from_millis((args.lease_ttl_ms / 3).max(1));
    // The fencing margin scales with short test leases (renewals every third of the TTL must
    // land inside TTL − margin); the spec default otherwise.
    cfg.timings.fencing_margin = Duration::from_millis((args.lease_ttl_ms / 5).max(1))
        .min(zlink::config::defaults::FENCING_MARGIN);
    for p in &args.peers {
        let (endpoint, rid) = match p.rsplit_once('@') {
            Some((ep, rid)) => (ep.to_owned(), Some(rid.to_owned())),
            None => (p.clone(), None),
        };
        cfg.manual_peers.push(ManualPeer {
            endpoint,
            expected_rid: rid,
        });
    }
    let redis: Option<Arc<zlink_store::redis::RedisStore>> = match &args.redis {
        Some(url) => {
            let store = zlink_store::redis::RedisStore::connect(
                url,
                zlink_store::redis::RedisStoreConfig {
                    namespace: args.redis_namespace.clone(),
                    response_timeout: Duration::from_secs(2),
                    connection_timeout: Duration::from_secs(2),
                    reconnect_retries: 3,
                },
            )
            .await
            .with_context(|| format!("connecting to {url}"))?;
            Some(Arc::new(store))
        }
        None => None,
    };
    if args.objects {
        if redis.is_none() {
            bail!("--objects needs --redis (objects live in the Location Store)");
        }
        cfg.object_capabilities =
            zlink_node::refapp::registry(&zlink_node::refapp::RefAppConfig::default())
                .capabilities();
        cfg.entry_spot_prefix = Some(args.rid_prefix.clone());
    }
    let fencing_margin = cfg.timings.fencing_margin;
    let store = redis.clone().map(|r| r as Arc<dyn DiscoveryBackend>);
    let received = Arc::new(AtomicU64::new(0));
    let mut handlers = Handlers::new();
    handlers.on_request_concurrent(64, |_, e: Echo| async move {
        Ok::<_, CallError>(Echo {
            text: e.text,
            n: e.n + 1,
        })
    });
    {
        let received = Arc::clone(&received);
        handlers.on_send(move |_, _: Note| {
            received.fetch_add(1, Ordering::Relaxed);
            async { Ok(()) }
        });
    }
    let node = Arc::new(MeshNode::start(cfg, handlers, store).await?);
    let objects = match (&redis, args.objects) {
        (Some(r), true) => Some(
            zlink::object::runtime::ObjectRuntime::start(
                Arc::clone(&node),
                Arc::clone(r),
                zlink_node::refapp::registry(&zlink_node::refapp::RefAppConfig::default()),
                zlink::routing::CacheConfig {
                    fencing_margin,
                    ..zlink::routing::CacheConfig::default()
                },
            )
            .await?,
        ),
        _ => None,
    };
    say(&serde_json::json!({
        "rid": node.rid(),
        "endpoint": node.endpoint(),
        "lifecycle": node.lifecycle_generation(),
    }));
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            match line {
                Ok(l) => {
                    if tx.send(l).is_err() {
                        break;
                    }
                }
                Err(_) => break,
            }
        }
    });
    while let Some(line) = rx.recv().await {
        let parts: Vec<&str> = line.split_whitespace().collect();
        match parts.as_slice() {
            ["peers"] => {
                let peers: Vec<_> = node
                    .peers()
                    .into_iter()
                    .map(|p| {
                        serde_json::json!({
                            "rid": p.rid,
                            "state": format!("{:?}", p.state),
                            "generation": p.connection_generation,
                            "epochs": p.epochs,
                        })
                    })
                    .collect();
                say(&serde_json::Value::Array(peers));
            }
            ["request", rid, n, rest @ ..] => {
                let n: u64 = n.parse().unwrap_or(0);
                let timeout = rest
                    .first()
                    .and_then(|t| t.parse().ok())
                    .map_or(Duration::from_secs(5), Duration::from_millis);
                let r = node
                    .request::<Echo, Echo>(
                        rid,
                        &Echo {
                            text: String::new(),
                            n,
                        },
                        timeout,
                    )
                    .await;
                say(&match r {
                    Ok(e) => serde_json::json!({ "ok": e.n }),
                    Err(e) => err_json(&e),
                });
            }
            ["send", rid, n] => {
                let n: u64 = n.parse().unwrap_or(0);
                say(&match node.send(rid, &Note { n }).await {
                    Ok(()) => serde_json::json!({ "ok": null }),
                    Err(e) => err_json(&e),
                });
            }
            ["received"] => say(&serde_json::json!({ "ok": received.load(Ordering::Relaxed) })),
            ["quit"] => break,
            _ => say(
                &serde_json::json!({ "err": "InvalidOperation", "detail": format!("unknown command {line:?}") }),
            ),
        }
    }
    if let Some(rt) = &objects {
        rt.shutdown().await;
    }
    node.shutdown().await;
    Ok(())
}

fn err_json(e: &CallError) -> serde_json::Value {
    serde_json::json!({ "err": e.kind().spec_name(), "detail": e.detail() })
}

fn say(v: &serde_json::Value) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{v}");
    let _ = out.flush();
}
