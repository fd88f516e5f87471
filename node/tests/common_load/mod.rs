//! The STREAM session load of `scripts/bench-sessions` (issue 19 acceptance 7) and of its
//! 1,000-connection variant in `node/tests/session_load.rs`: three `zlink-node run` hosts on a
//! real `redis-server`, `sessions` Stream Connector sessions spread over their STREAM
//! listeners, each bound (`refapp.Bind`) to its own player Actor — placed over the three hosts
//! — then rounds of traffic, then every player's own account of what it received.
//!
//! - Before anything, the load raises its `RLIMIT_NOFILE` to what it needs or stops with a
//!   clear error (the hosts raise their own for `stream.max_connections`).
//! - A round on one session: `sends` one-way `refapp.Deliver`s and one `refapp.DeliverRequest`,
//!   whose round trip is the measured latency. `workers` tasks run rounds at once, each on its
//!   own sessions in turn (a session's rounds never overlap, so its sequence numbers are sent
//!   in order).
//! - The baseline, measured in the same run before the sessions open: the same bytes (the same
//!   encoded STREAM packets) written by `workers` raw TCP connections to an in-process echo
//!   server and read back — the floor a loopback round trip of that size costs here.
//! - RSS per idle session: the hosts' resident memory with every session open, bound and idle,
//!   minus before the first connected, divided by the sessions (a session's bound player Actor
//!   included); the load process's own growth per Connector is reported too.
//! - At the end every session must still be open on its first connection (no disconnect, no
//!   reconnect), every request answered, and every player must report exactly
//!   `rounds × sends` sends and `rounds` requests with nothing missing, duplicated or out of
//!   order.
#![allow(dead_code, clippy::unwrap_used)] // each test binary uses a subset

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use serde::Serialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use zlink_connector::{Connector, ConnectorConfig, ConnectorEvent, DispatchMode, ReconnectPolicy};
use zlink_node::host::limits::raise_open_files;
use zlink_node::refapp::messages::{Ack, Deliver, DeliverRequest, PlayerReport, ReportRequest};
use zlink_node::refapp::stream::{Bind, Bound};
use zlink_protocol::json::JsonMessage;
use zlink_protocol::stream::{StreamCodec, StreamPacket};

use crate::common_procs::{Host, drain_all, http_get, metric, write_stream_config};
use crate::redis_server::RedisServer;

/// What to run.
#[derive(Debug, Clone)]
pub struct LoadPlan {
    /// Client sessions, each bound to its own player.
    pub sessions: usize,
    /// Rounds per session.
    pub rounds: usize,
    /// One-way sends per round (before its request).
    pub sends: usize,
    /// Rounds in flight at once.
    pub workers: usize,
    /// Sessions connecting and binding at once.
    pub connect_parallel: usize,
    /// Requests made one at a time after the load, each on its own session (the unloaded
    /// latency), against as many one at a time on one raw echo connection; 0: none.
    pub probe: usize,
    /// Progress lines on stderr.
    pub progress: bool,
}

/// Latency percentiles of one path.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Latency {
    pub p50_us: f64,
    pub p99_us: f64,
    pub max_us: f64,
    pub samples: usize,
}

impl Latency {
    fn of(mut v: Vec<Duration>) -> Self {
        if v.is_empty() {
            return Self::default();
        }
        v.sort();
        let at = |q: f64| {
            let i = ((v.len() as f64 * q).ceil() as usize).clamp(1, v.len()) - 1;
            v[i].as_secs_f64() * 1e6
        };
        Self {
            p50_us: at(0.50),
            p99_us: at(0.99),
            max_us: at(1.0),
            samples: v.len(),
        }
    }
}

/// What the load measured and checked.
#[derive(Debug, Clone, Serialize)]
pub struct LoadReport {
    pub sessions: usize,
    pub rounds: usize,
    pub sends: usize,
    pub workers: usize,
    /// The load process's open-file limit after raising it.
    pub nofile: Option<u64>,
    /// Players bound per owner host (placement over the three).
    pub players_per_host: BTreeMap<String, usize>,
    pub connect_and_bind_secs: f64,
    /// Sessions open on their first connection at the end (every one, or the load failed).
    pub open_at_end: usize,
    /// Sessions the hosts' `zlink_stream_sessions` gauges count at the end.
    pub host_sessions_at_end: u64,
    /// Disconnect and reconnect events the clients saw.
    pub connection_events: u64,
    pub requests_failed: u64,
    /// Sends and requests the players did not get exactly once, in order.
    pub players_wrong: usize,
    pub missing: u64,
    pub duplicates: u64,
    pub out_of_order: u64,
    pub zlink: Latency,
    pub echo: Latency,
    pub p50_ratio: f64,
    pub p99_ratio: f64,
    /// One request at a time (nothing else in flight), and the echo of its bytes.
    pub probe_zlink: Latency,
    pub probe_echo: Latency,
    pub probe_p50_ratio: f64,
    pub probe_p99_ratio: f64,
    pub traffic_secs: f64,
    pub messages_per_sec: f64,
    /// Hosts' RSS growth per idle bound session (its player Actor included), KiB.
    pub host_rss_per_session_kib: f64,
    /// The load process's RSS growth per Connector, KiB.
    pub client_rss_per_session_kib: f64,
}

impl LoadReport {
    /// Whether every check held (all open, nothing lost, duplicated or reordered).
    pub fn clean(&self) -> bool {
        self.open_at_end == self.sessions
            && self.host_sessions_at_end == self.sessions as u64
            && self.connection_events == 0
            && self.requests_failed == 0
            && self.players_wrong == 0
    }
}

/// Resident memory of process `pid`, KiB (`VmRSS` of `/proc/<pid>/status`).
fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

fn hosts_rss(hosts: &[Host]) -> u64 {
    hosts.iter().map(|h| rss_kib(h.child.id())).sum()
}

fn deliver(seq: u64) -> Deliver {
    Deliver {
        source: "load".into(),
        seq,
        item: None,
    }
}

fn deliver_request(seq: u64) -> DeliverRequest {
    DeliverRequest {
        source: "load-req".into(),
        seq,
        item: None,
    }
}

/// The bytes of one round as a raw client would write them (the echo baseline's payload).
fn round_bytes(sends: usize, round: u64) -> Vec<u8> {
    let mut out = Vec::new();
    for j in 0..sends as u64 {
        let p = StreamPacket::send(
            StreamCodec::FrameworkJson,
            Deliver::PACKET_NAME,
            serde_json::to_vec(&deliver(round * sends as u64 + j)).unwrap(),
        );
        out.extend(p.encode().unwrap());
    }
    let p = StreamPacket::request(
        StreamCodec::FrameworkJson,
        round + 1,
        DeliverRequest::PACKET_NAME,
        serde_json::to_vec(&deliver_request(round)).unwrap(),
    );
    out.extend(p.encode().unwrap());
    out
}

/// The raw TCP echo baseline: `workers` connections to an echo server on 127.0.0.1, each
/// writing a round's bytes and reading them back, `total` rounds in all.
async fn echo_baseline(sends: usize, workers: usize, total: usize) -> Vec<Duration> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = listener.accept().await else {
                return;
            };
            let _ = s.set_nodelay(true);
            tokio::spawn(async move {
                let mut buf = vec![0u8; 64 * 1024];
                loop {
                    match s.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => {
                            if s.write_all(&buf[..n]).await.is_err() {
                                return;
                            }
                        }
                    }
                }
            });
        }
    });
    let per = total.div_ceil(workers.max(1));
    let tasks: Vec<_> = (0..workers)
        .map(|_| {
            tokio::spawn(async move {
                let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
                s.set_nodelay(true).unwrap();
                let mut back = Vec::new();
                let mut lat = Vec::with_capacity(per);
                for r in 0..per as u64 {
                    let bytes = round_bytes(sends, r);
                    back.resize(bytes.len(), 0);
                    let t0 = Instant::now();
                    s.write_all(&bytes).await.unwrap();
                    s.read_exact(&mut back).await.unwrap();
                    lat.push(t0.elapsed());
                    assert_eq!(back, bytes, "the echo server returned other bytes");
                }
                lat
            })
        })
        .collect();
    let mut all = Vec::with_capacity(total);
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    server.abort();
    all
}

/// One bound session of the load.
struct Session {
    client: Connector,
    player: String,
}

fn client_config(addr: &str) -> ConnectorConfig {
    let mut cfg = ConnectorConfig::new(addr.to_owned());
    cfg.dispatch_mode = DispatchMode::Immediate;
    cfg.reconnect = ReconnectPolicy::never();
    cfg.request_timeout = Duration::from_secs(30);
    cfg.connect_timeout = Duration::from_secs(30);
    cfg
}

/// Run `plan` (see the module docs).
///
/// # Errors
/// A clear reason when the load cannot start (the open-file hard limit is too low).
pub fn run(plan: &LoadPlan) -> Result<LoadReport, String> {
    // The Connectors, the baseline's two ends and some spare.
    let want = (plan.sessions + 2 * plan.workers + 512) as u64;
    let files = raise_open_files(want).map_err(|e| format!("setrlimit(RLIMIT_NOFILE): {e}"))?;
    if !files.allows(want) {
        return Err(format!(
            "{} sessions need {want} open files, but the hard RLIMIT_NOFILE is {:?} \
             (raise it: ulimit -Hn {want} as root, or run fewer sessions)",
            plan.sessions, files.hard
        ));
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let redis = rt.block_on(RedisServer::start());
    let tag = format!("{}-sload", std::process::id());
    let dir = std::env::temp_dir().join(format!("zlink-{tag}"));
    std::fs::create_dir_all(&dir).unwrap();
    let config = write_stream_config(&dir, &redis.url(), &tag, "sessions");
    let mut hosts: Vec<Host> = (0..3)
        .map(|i| Host::spawn(&config, &format!("s{i}")))
        .collect();
    for h in &hosts {
        h.wait_status("two ready peers", |s| s["peers_ready"] == 2);
    }
    let addrs: Vec<String> = hosts.iter().map(|h| h.stream.clone().unwrap()).collect();
    let report = rt.block_on(load(plan, &hosts, &addrs, files.now));
    drain_all(&mut hosts);
    drop(redis);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(report)
}

fn say(plan: &LoadPlan, what: &str) {
    if plan.progress {
        eprintln!("bench-sessions: {what}");
    }
}

#[allow(clippy::too_many_lines)]
async fn load(
    plan: &LoadPlan,
    hosts: &[Host],
    addrs: &[String],
    nofile: Option<u64>,
) -> LoadReport {
    let total_rounds = plan.sessions * plan.rounds;
    say(
        plan,
        &format!(
            "echo baseline: {total_rounds} rounds over {} connections",
            plan.workers
        ),
    );
    let echo = echo_baseline(plan.sends, plan.workers, total_rounds).await;
    let probe_echo = if plan.probe > 0 {
        echo_baseline(0, 1, plan.probe).await
    } else {
        Vec::new()
    };
    let me = std::process::id();
    let (hosts_before, client_before) = (hosts_rss(hosts), rss_kib(me));
    let events = Arc::new(AtomicU64::new(0));
    say(plan, &format!("opening {} sessions", plan.sessions));
    let t0 = Instant::now();
    let opened = AtomicU64::new(0);
    let mut sessions: Vec<(usize, Session, String)> = futures::stream::iter(0..plan.sessions)
        .map(|i| {
            let addr = addrs[i % addrs.len()].clone();
            let events = Arc::clone(&events);
            let opened = &opened;
            async move {
                let client = Connector::connect(client_config(&addr))
                    .await
                    .unwrap_or_else(|e| panic!("session {i} to {addr}: {e}"));
                client.on_event(move |e: &ConnectorEvent| {
                    if matches!(
                        e,
                        ConnectorEvent::Disconnected(_)
                            | ConnectorEvent::Reconnecting { .. }
                            | ConnectorEvent::Reconnected { .. }
                    ) {
                        events.fetch_add(1, Ordering::Relaxed);
                    }
                });
                let player = format!("player:load-{i}");
                let bound: Bound = client
                    .request(&Bind {
                        player: player.clone(),
                    })
                    .await
                    .unwrap_or_else(|e| panic!("bind {player}: {e}"))
                    .json()
                    .unwrap();
                let n = opened.fetch_add(1, Ordering::Relaxed) + 1;
                if plan.progress && n.is_multiple_of(1_000) {
                    eprintln!("bench-sessions: {n} sessions bound");
                }
                (i, Session { client, player }, bound.owner_rid)
            }
        })
        .buffer_unordered(plan.connect_parallel.max(1))
        .collect()
        .await;
    let connect_and_bind_secs = t0.elapsed().as_secs_f64();
    sessions.sort_by_key(|(i, _, _)| *i);
    let mut players_per_host: BTreeMap<String, usize> = BTreeMap::new();
    for (_, _, owner) in &sessions {
        *players_per_host.entry(owner.clone()).or_default() += 1;
    }
    // Idle: every session open and bound, nothing in flight.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (hosts_idle, client_idle) = (hosts_rss(hosts), rss_kib(me));
    let sessions: Arc<Vec<Session>> = Arc::new(sessions.into_iter().map(|(_, s, _)| s).collect());
    say(
        plan,
        &format!("traffic: {total_rounds} rounds, {} workers", plan.workers),
    );
    let failed = Arc::new(AtomicU64::new(0));
    let t1 = Instant::now();
    let workers: Vec<_> = (0..plan.workers.min(plan.sessions))
        .map(|w| {
            let (sessions, failed) = (Arc::clone(&sessions), Arc::clone(&failed));
            let (rounds, sends, stride) = (plan.rounds, plan.sends as u64, plan.workers);
            tokio::spawn(async move {
                let mut lat = Vec::new();
                for r in 0..rounds as u64 {
                    for s in sessions.iter().skip(w).step_by(stride) {
                        for j in 0..sends {
                            if s.client.send(&deliver(r * sends + j)).await.is_err() {
                                failed.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                        let t = Instant::now();
                        match s.client.request(&deliver_request(r)).await {
                            Ok(reply) => {
                                lat.push(t.elapsed());
                                match reply.json::<Ack>() {
                                    Ok(a) if a.seq == r && !a.duplicate => {}
                                    _ => {
                                        failed.fetch_add(1, Ordering::Relaxed);
                                    }
                                }
                            }
                            Err(_) => {
                                failed.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    }
                }
                lat
            })
        })
        .collect();
    let mut zlink = Vec::with_capacity(total_rounds);
    for w in workers {
        zlink.extend(w.await.unwrap());
    }
    let traffic_secs = t1.elapsed().as_secs_f64();
    let probes = plan.probe.min(sessions.len());
    say(plan, &format!("probe: {probes} requests one at a time"));
    let mut probe_zlink = Vec::with_capacity(probes);
    for s in sessions.iter().take(probes) {
        let t = Instant::now();
        let ok = s
            .client
            .request(&DeliverRequest {
                source: "probe".into(),
                seq: 0,
                item: None,
            })
            .await
            .ok()
            .and_then(|r| r.json::<Ack>().ok())
            .is_some_and(|a| a.seq == 0 && !a.duplicate);
        probe_zlink.push(t.elapsed());
        if !ok {
            failed.fetch_add(1, Ordering::Relaxed);
        }
    }
    say(plan, "checking every player's account");
    // (report, requests it must count)
    let accounts: Vec<Option<(PlayerReport, u64)>> =
        futures::stream::iter(sessions.iter().enumerate())
            .map(|(i, s)| {
                let probed = i < probes;
                let mut expected: BTreeMap<String, u64> = [
                    ("load".to_owned(), (plan.rounds * plan.sends) as u64),
                    ("load-req".to_owned(), plan.rounds as u64),
                ]
                .into_iter()
                .collect();
                if probed {
                    expected.insert("probe".to_owned(), 1);
                }
                async move {
                    s.client
                        .request(&ReportRequest {
                            expected: Some(expected),
                        })
                        .await
                        .ok()
                        .and_then(|r| r.json::<PlayerReport>().ok())
                        .filter(|p| p.player == s.player)
                        .map(|p| (p, plan.rounds as u64 + u64::from(probed)))
                }
            })
            .buffer_unordered(plan.connect_parallel.max(1))
            .collect()
            .await;
    let (mut players_wrong, mut missing, mut duplicates, mut out_of_order) = (0, 0, 0, 0);
    for a in &accounts {
        let Some((p, requests)) = a else {
            players_wrong += 1;
            continue;
        };
        let mut ok = p.sends == (plan.rounds * plan.sends) as u64 && p.requests == *requests;
        for src in &p.sources {
            missing += src.missing;
            duplicates += src.duplicates;
            out_of_order += src.out_of_order;
            ok &= src.missing == 0
                && src.duplicates == 0
                && src.out_of_order == 0
                && src.unexpected == 0
                && src.expected == Some(src.distinct);
        }
        if !ok {
            players_wrong += 1;
        }
    }
    let open_at_end = sessions
        .iter()
        .filter(|s| s.client.is_connected() && s.client.stats().sessions == 1)
        .count();
    let connection_events = events.load(Ordering::Relaxed);
    let host_sessions_at_end: u64 = hosts
        .iter()
        .map(|h| metric(&http_get(&h.http, "/metrics").1, "zlink_stream_sessions") as u64)
        .sum();
    say(plan, "closing");
    futures::stream::iter(sessions.iter())
        .for_each_concurrent(plan.connect_parallel.max(1), |s| s.client.close())
        .await;
    let zlink = Latency::of(zlink);
    let echo = Latency::of(echo);
    let probe_zlink = Latency::of(probe_zlink);
    let probe_echo = Latency::of(probe_echo);
    let n = plan.sessions.max(1) as f64;
    LoadReport {
        sessions: plan.sessions,
        rounds: plan.rounds,
        sends: plan.sends,
        workers: plan.workers,
        nofile,
        players_per_host,
        connect_and_bind_secs,
        open_at_end,
        host_sessions_at_end,
        connection_events,
        requests_failed: failed.load(Ordering::Relaxed),
        players_wrong,
        missing,
        duplicates,
        out_of_order,
        p50_ratio: zlink.p50_us / echo.p50_us.max(f64::MIN_POSITIVE),
        p99_ratio: zlink.p99_us / echo.p99_us.max(f64::MIN_POSITIVE),
        probe_p50_ratio: probe_zlink.p50_us / probe_echo.p50_us.max(f64::MIN_POSITIVE),
        probe_p99_ratio: probe_zlink.p99_us / probe_echo.p99_us.max(f64::MIN_POSITIVE),
        probe_zlink,
        probe_echo,
        zlink,
        echo,
        traffic_secs,
        messages_per_sec: (total_rounds * (plan.sends + 1)) as f64 / traffic_secs.max(1e-9),
        host_rss_per_session_kib: hosts_idle.saturating_sub(hosts_before) as f64 / n,
        client_rss_per_session_kib: client_idle.saturating_sub(client_before) as f64 / n,
    }
}
