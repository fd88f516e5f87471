//! `zlink-fake-node`: a test double for a `zlink-node` pod (issue 18 item 11). It serves the
//! real HostAdmin gRPC API and `/readyz` / `/healthz`, configured by the same `ZLINK_*`
//! environment the operator gives node pods, and relocates on a script instead of moving
//! objects — so operator tests can make a node succeed, fail, hang, never become safe, crash or
//! go silent without a mesh, a store or objects.
//!
//! It stands in for `zlink-node run` only where the operator is under test; everything about
//! relocation itself is tested against real nodes (issue 17).
//!
//! # Environment
//! - `ZLINK_ADMIN_GRPC_LISTEN`, `ZLINK_ADMIN_HTTP_LISTEN`: where to listen (required).
//! - `ZLINK_ADMIN_TOKEN_FILE` or `ZLINK_ADMIN_TOKEN`: the bearer token (required).
//! - `ZLINK_APPLICATION_VERSION` (default 1), `ZLINK_MESH_RID_PREFIX` or `POD_NAME` (the RID is
//!   `<prefix>-<random>` per process, like a node's per lifecycle).
//!
//! The test knobs are `FAKE_NODE_*`, outside the operator's `ZLINK_*` names, so a Mesh's
//! `template.env` can set them:
//!
//! - `FAKE_NODE_SCRIPT`: `succeed` (default), `fail`, `hang`, `never-safe`, `crash`, `silent`,
//!   `unimplemented` — what a `Relocate` does; `restart-once`: on the first `Relocate` a pod
//!   gets, the node process restarts in place (it `exec`s itself: a new RID, a fresh status, the
//!   container still running — what a quick container restart looks like between two
//!   observations), later ones succeed; the pods remember through marker files `<POD_NAME>` in
//!   `FAKE_NODE_MARKERS` (required then).
//! - `FAKE_NODE_OBJECTS` (default 0), `FAKE_NODE_STEP_MS` (default 200: the relocation time,
//!   and again until SafeToShutdown).
//! - `FAKE_NODE_DIR`: a directory shared by the fakes of one test; each writes a file named by
//!   its RID while it runs, and reports every other file as a Ready peer.
//!
//! - `FAKE_NODE_EVENTS`: a file the fakes of one test append JSON lines to, one per step of a
//!   relocation: `{"pod", "rid", "relocation_id", "event": "completed" | "failed" | "safe",
//!   "unix_us"}`, written *before* the step shows in `HostStatus`. A test compares them with
//!   the audit log's `requestReceivedTimestamp` (same machine, same clock) to prove an order
//!   without racing its own status stream.
//!
//! - `FAKE_NODE_FAULT`: `not-ready` (`/readyz` answers 503), `no-admin` (nothing listens on the
//!   gRPC address: the admin API is unreachable) or `bad-token` (every bearer token is
//!   refused); `FAKE_NODE_FAULT_VERSION`: only when `ZLINK_APPLICATION_VERSION` is this one
//!   (unset: every version), so a Mesh's template can break its new pods only.
//!
//! `GET /calls` (HTTP) answers `{"<relocation id>": <Relocate calls>}`. SIGTERM removes the
//! registry file and exits 0.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::pin::Pin;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::Stream;
use tokio::sync::watch;
use tonic::{Request, Response, Status};
use zlink_admin_api::proto::host_admin_server::{HostAdmin, HostAdminServer};
use zlink_admin_api::proto::{
    self, GetStatusRequest, HostStatus, LocateRequest, LocateResponse, RelocateRequest,
    RelocateResponse, RelocationStatus, SetChannelWeightRequest, SetChannelWeightResponse,
    ShutdownRequest, ShutdownResponse, WatchStatusRequest,
};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    None,
    NotReady,
    NoAdmin,
    BadToken,
}

impl Fault {
    fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "" => Self::None,
            "not-ready" => Self::NotReady,
            "no-admin" => Self::NoAdmin,
            "bad-token" => Self::BadToken,
            _ => return None,
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Script {
    Succeed,
    Fail,
    Hang,
    NeverSafe,
    Crash,
    RestartOnce,
    Silent,
    Unimplemented,
}

impl Script {
    fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "" | "succeed" => Self::Succeed,
            "fail" => Self::Fail,
            "hang" => Self::Hang,
            "never-safe" => Self::NeverSafe,
            "crash" => Self::Crash,
            "restart-once" => Self::RestartOnce,
            "silent" => Self::Silent,
            "unimplemented" => Self::Unimplemented,
            _ => return None,
        })
    }
}

struct Fake {
    script: Script,
    step: Duration,
    token: String,
    status: watch::Sender<HostStatus>,
    calls: Mutex<BTreeMap<String, u64>>,
    silent: watch::Sender<bool>,
    pod: String,
    events: Option<PathBuf>,
    markers: Option<PathBuf>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Fake {
    fn update(&self, f: impl FnOnce(&mut HostStatus)) {
        self.status.send_modify(|s| {
            f(s);
            s.sequence += 1;
        });
    }

    /// Appends one line to `FAKE_NODE_EVENTS` (one `write` of a short line with `O_APPEND`, so
    /// the lines of concurrent fakes do not interleave).
    fn record(&self, relocation_id: &str, event: &str) {
        use std::io::Write as _;
        let Some(path) = &self.events else { return };
        let unix_us = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_micros());
        let line = serde_json::json!({
            "pod": self.pod, "rid": self.status.borrow().rid, "relocation_id": relocation_id,
            "event": event, "unix_us": unix_us,
        });
        let written = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .and_then(|mut f| f.write_all(format!("{line}\n").as_bytes()));
        if let Err(e) = written {
            eprintln!("zlink-fake-node: FAKE_NODE_EVENTS {}: {e}", path.display());
        }
    }

    async fn hang_if_silent(&self) {
        if *self.silent.borrow() {
            std::future::pending::<()>().await;
        }
    }
}

type StatusStream = Pin<Box<dyn Stream<Item = Result<HostStatus, Status>> + Send + 'static>>;

struct Service(Arc<Fake>);

#[tonic::async_trait]
impl HostAdmin for Service {
    async fn get_status(
        &self,
        _: Request<GetStatusRequest>,
    ) -> Result<Response<HostStatus>, Status> {
        self.0.hang_if_silent().await;
        Ok(Response::new(self.0.status.borrow().clone()))
    }

    type WatchStatusStream = StatusStream;

    async fn watch_status(
        &self,
        _: Request<WatchStatusRequest>,
    ) -> Result<Response<Self::WatchStatusStream>, Status> {
        self.0.hang_if_silent().await;
        let rx = self.0.status.subscribe();
        let silent = self.0.silent.subscribe();
        let stream = futures::stream::unfold(
            (rx, silent, true),
            |(mut rx, mut silent, first)| async move {
                if !first {
                    // A silent fake keeps the stream open and sends nothing more.
                    let went_silent = tokio::select! {
                        r = rx.changed() => {
                            r.ok()?;
                            false
                        }
                        r = silent.wait_for(|s| *s) => r.is_ok(),
                    };
                    if went_silent {
                        std::future::pending::<()>().await;
                    }
                }
                let s = rx.borrow_and_update().clone();
                Some((Ok(s), (rx, silent, false)))
            },
        );
        Ok(Response::new(Box::pin(stream)))
    }

    async fn shutdown(
        &self,
        _: Request<ShutdownRequest>,
    ) -> Result<Response<ShutdownResponse>, Status> {
        Err(Status::unimplemented("the fake node does not drain"))
    }

    async fn set_channel_weight(
        &self,
        req: Request<SetChannelWeightRequest>,
    ) -> Result<Response<SetChannelWeightResponse>, Status> {
        self.0.hang_if_silent().await;
        let req = req.into_inner();
        let mut revision = 0;
        self.0.update(|s| {
            match s.channels.iter_mut().find(|c| c.channel == req.channel) {
                Some(c) => c.weight = req.weight,
                None => s.channels.push(proto::ChannelMembership {
                    channel: req.channel.clone(),
                    weight: req.weight,
                    ..proto::ChannelMembership::default()
                }),
            }
            s.descriptor_revision += 1;
            revision = s.descriptor_revision;
        });
        Ok(Response::new(SetChannelWeightResponse {
            descriptor_revision: revision,
        }))
    }

    async fn relocate(
        &self,
        req: Request<RelocateRequest>,
    ) -> Result<Response<RelocateResponse>, Status> {
        let fake = Arc::clone(&self.0);
        fake.hang_if_silent().await;
        let req = req.into_inner();
        let id = if req.relocation_id.is_empty() {
            format!("fake-{}", fake.status.borrow().sequence)
        } else {
            req.relocation_id.clone()
        };
        *lock(&fake.calls).entry(id.clone()).or_default() += 1;
        match fake.script {
            Script::Unimplemented => {
                return Err(Status::unimplemented(
                    "Relocate is not implemented by this node",
                ));
            }
            Script::Crash => {
                eprintln!("zlink-fake-node: crashing on Relocate {id} (script)");
                std::process::exit(137);
            }
            Script::RestartOnce => {
                let marker = fake.markers.as_ref().map(|d| d.join(&fake.pod));
                if let Some(marker) = marker.filter(|m| !m.exists()) {
                    use std::os::unix::process::CommandExt as _;
                    let _ = std::fs::write(&marker, &id);
                    eprintln!("zlink-fake-node: restarting on Relocate {id} (script restart-once)");
                    // Our sockets are close-on-exec: the new image binds the same ports.
                    let exe = std::env::current_exe()
                        .map_err(|e| Status::internal(format!("current_exe: {e}")))?;
                    let e = std::process::Command::new(exe)
                        .args(std::env::args_os().skip(1))
                        .exec();
                    return Err(Status::internal(format!("exec: {e}")));
                }
            }
            Script::Silent => {
                let _ = fake.silent.send(true);
                std::future::pending::<()>().await;
            }
            Script::Succeed | Script::Fail | Script::Hang | Script::NeverSafe => {}
        }
        let current = fake.status.borrow().relocation.clone();
        let mut rx = fake.status.subscribe();
        if current.as_ref().is_none_or(|r| r.relocation_id != id) {
            let state = fake.status.borrow().state;
            if state != proto::HostState::Serving as i32
                && state != proto::HostState::Relocated as i32
            {
                return Err(Status::failed_precondition("a relocation is running"));
            }
            fake.update(|s| {
                s.state = proto::HostState::Relocating as i32;
                s.safe_to_shutdown = false;
                s.relocation = Some(RelocationStatus {
                    relocation_id: id.clone(),
                    mode: req.mode,
                    target_application_version: req.target_application_version,
                    state: proto::RelocationState::Running as i32,
                    ..RelocationStatus::default()
                });
            });
            let f = Arc::clone(&fake);
            let id = id.clone();
            tokio::spawn(async move {
                if f.script == Script::Hang {
                    return;
                }
                tokio::time::sleep(f.step).await;
                f.record(
                    &id,
                    if f.script == Script::Fail {
                        "failed"
                    } else {
                        "completed"
                    },
                );
                f.update(|s| {
                    s.state = proto::HostState::Relocated as i32;
                    if let Some(r) = s.relocation.as_mut() {
                        if f.script == Script::Fail {
                            r.state = proto::RelocationState::Failed as i32;
                            r.reason = "failed: scripted".into();
                        } else {
                            r.state = proto::RelocationState::Completed as i32;
                            s.objects_live = 0;
                        }
                    }
                });
                if f.script == Script::NeverSafe {
                    return;
                }
                tokio::time::sleep(f.step).await;
                f.record(&id, "safe");
                f.update(|s| s.safe_to_shutdown = true);
            });
        }
        // Return once the relocation is terminal (like the node's Relocate).
        let done = rx
            .wait_for(|s| {
                s.relocation.as_ref().is_some_and(|r| {
                    r.relocation_id == id && r.state != proto::RelocationState::Running as i32
                })
            })
            .await
            .map_err(|_| Status::unavailable("stopping"))?
            .relocation
            .clone();
        Ok(Response::new(RelocateResponse {
            relocation: done,
            units: Vec::new(),
        }))
    }

    async fn locate(&self, _: Request<LocateRequest>) -> Result<Response<LocateResponse>, Status> {
        Err(Status::unimplemented("the fake node hosts no objects"))
    }
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

fn random_suffix() -> String {
    use ring::rand::SecureRandom as _;
    let mut b = [0u8; 6];
    let _ = ring::rand::SystemRandom::new().fill(&mut b);
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("zlink-fake-node: {e:#}");
            ExitCode::FAILURE
        }
    }
}

#[tokio::main(flavor = "current_thread")]
async fn run() -> anyhow::Result<()> {
    use anyhow::Context as _;
    let grpc: std::net::SocketAddr = env("ZLINK_ADMIN_GRPC_LISTEN")
        .context("ZLINK_ADMIN_GRPC_LISTEN is required")?
        .parse()
        .context("ZLINK_ADMIN_GRPC_LISTEN")?;
    let http: std::net::SocketAddr = env("ZLINK_ADMIN_HTTP_LISTEN")
        .context("ZLINK_ADMIN_HTTP_LISTEN is required")?
        .parse()
        .context("ZLINK_ADMIN_HTTP_LISTEN")?;
    let token = match env("ZLINK_ADMIN_TOKEN_FILE") {
        Some(p) => std::fs::read_to_string(&p).with_context(|| format!("read {p}"))?,
        None => env("ZLINK_ADMIN_TOKEN")
            .context("ZLINK_ADMIN_TOKEN_FILE or ZLINK_ADMIN_TOKEN is required")?,
    }
    .trim()
    .to_owned();
    let script_name = env("FAKE_NODE_SCRIPT").unwrap_or_default();
    let script =
        Script::parse(&script_name).with_context(|| format!("FAKE_NODE_SCRIPT {script_name:?}"))?;
    let version: u64 = env("ZLINK_APPLICATION_VERSION")
        .map_or(Ok(1), |v| v.parse())
        .context("ZLINK_APPLICATION_VERSION")?;
    let objects: u64 = env("FAKE_NODE_OBJECTS")
        .map_or(Ok(0), |v| v.parse())
        .context("FAKE_NODE_OBJECTS")?;
    let step = Duration::from_millis(
        env("FAKE_NODE_STEP_MS")
            .map_or(Ok(200), |v| v.parse())
            .context("FAKE_NODE_STEP_MS")?,
    );
    let fault_name = env("FAKE_NODE_FAULT").unwrap_or_default();
    let mut fault =
        Fault::parse(&fault_name).with_context(|| format!("FAKE_NODE_FAULT {fault_name:?}"))?;
    if let Some(only) = env("FAKE_NODE_FAULT_VERSION") {
        let only: u64 = only.parse().context("FAKE_NODE_FAULT_VERSION")?;
        if only != version {
            fault = Fault::None;
        }
    }
    let prefix = env("ZLINK_MESH_RID_PREFIX")
        .or_else(|| env("POD_NAME"))
        .unwrap_or_else(|| "fake".into());
    let rid = format!("{prefix}-{}", random_suffix());
    let dir = env("FAKE_NODE_DIR").map(PathBuf::from);

    let (status, _) = watch::channel(HostStatus {
        state: proto::HostState::Serving as i32,
        rid: rid.clone(),
        mesh_name: env("ZLINK_MESH_NAME").unwrap_or_default(),
        application_version: version,
        objects_live: objects,
        safe_to_shutdown: true,
        sequence: 1,
        ..HostStatus::default()
    });
    let markers = env("FAKE_NODE_MARKERS").map(PathBuf::from);
    if script == Script::RestartOnce {
        let dir = markers
            .as_ref()
            .context("FAKE_NODE_SCRIPT=restart-once needs FAKE_NODE_MARKERS")?;
        std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
    }
    let (silent, _) = watch::channel(false);
    let fake = Arc::new(Fake {
        script,
        step,
        token,
        status,
        calls: Mutex::default(),
        silent,
        pod: env("POD_NAME").unwrap_or_default(),
        events: env("FAKE_NODE_EVENTS").map(PathBuf::from),
        markers,
    });

    // Peers: every other registry file in the shared directory.
    if let Some(dir) = dir.clone() {
        std::fs::create_dir_all(&dir).with_context(|| format!("create {}", dir.display()))?;
        std::fs::write(dir.join(&rid), format!("{version}\n"))
            .context("write the registry file")?;
        let f = Arc::clone(&fake);
        let me = rid.clone();
        tokio::spawn(async move {
            loop {
                let mut peers: Vec<String> = std::fs::read_dir(&dir)
                    .map(|d| {
                        d.filter_map(Result::ok)
                            .filter_map(|e| e.file_name().into_string().ok())
                            .filter(|n| *n != me)
                            .collect()
                    })
                    .unwrap_or_default();
                peers.sort();
                let now: Vec<String> = f
                    .status
                    .borrow()
                    .peers
                    .iter()
                    .map(|p| p.rid.clone())
                    .collect();
                if now != peers {
                    f.update(|s| {
                        s.peers = peers
                            .iter()
                            .map(|r| proto::PeerStatus {
                                rid: r.clone(),
                                ready: true,
                                state: "Ready".into(),
                            })
                            .collect();
                        s.peers_ready = u32::try_from(s.peers.len()).unwrap_or(u32::MAX);
                    });
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        });
    }

    let f = Arc::clone(&fake);
    let auth = move |req: Request<()>| {
        if fault == Fault::BadToken {
            return Err(Status::unauthenticated(
                "missing or invalid bearer token (FAKE_NODE_FAULT=bad-token)",
            ));
        }
        let expected = format!("Bearer {}", f.token);
        match req.metadata().get("authorization").map(|v| v.as_bytes()) {
            Some(v) if v == expected.as_bytes() => Ok(req),
            _ => Err(Status::unauthenticated("missing or invalid bearer token")),
        }
    };
    let grpc_server = tonic::transport::Server::builder()
        .add_service(HostAdminServer::with_interceptor(
            Service(Arc::clone(&fake)),
            auth,
        ))
        .serve(grpc);
    let grpc_server = async move {
        if fault == Fault::NoAdmin {
            std::future::pending::<()>().await;
        }
        grpc_server.await
    };
    let f = Arc::clone(&fake);
    let app = axum::Router::new()
        .route(
            "/readyz",
            axum::routing::get(move || async move {
                if fault == Fault::NotReady {
                    (
                        axum::http::StatusCode::SERVICE_UNAVAILABLE,
                        "not ready (FAKE_NODE_FAULT)",
                    )
                } else {
                    (axum::http::StatusCode::OK, "ok")
                }
            }),
        )
        .route("/healthz", axum::routing::get(|| async { "ok" }))
        .route(
            "/calls",
            axum::routing::get(move || {
                let calls = lock(&f.calls).clone();
                async move { serde_json::to_string(&calls).unwrap_or_default() }
            }),
        );
    let listener = tokio::net::TcpListener::bind(http)
        .await
        .with_context(|| format!("bind {http}"))?;
    let http_server = axum::serve(listener, app);
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    eprintln!(
        "zlink-fake-node: {rid} serving admin on {grpc}, http on {http}, script {script:?}, fault {fault:?}"
    );
    tokio::select! {
        r = grpc_server => r.context("the gRPC server")?,
        r = http_server => r.context("the HTTP server")?,
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
    if let Some(dir) = dir {
        let _ = std::fs::remove_file(dir.join(&rid));
    }
    eprintln!("zlink-fake-node: {rid} stopped");
    Ok(())
}
