//! `zlink-node demo`: flags → [`DemoConfig`], a progress bar (or plain progress lines when
//! stdout is not a terminal), the summary table, and the exit status (0 only if the run
//! passed the per-ID check with every message delivered and counted).

use std::io::{IsTerminal, Write};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use indicatif::{ProgressBar, ProgressStyle};
use zlink_node::demo::{self, DemoConfig, DemoReport, DemoStore, Phase, Progress};
use zlink_node::refapp::RefAppConfig;

/// Flags of `zlink-node demo` (defaults: [`DemoConfig::default`]).
#[derive(clap::Args)]
pub struct DemoArgs {
    /// MeshNodes in the process.
    #[arg(long, default_value_t = DemoConfig::default().nodes)]
    nodes: usize,
    /// Room User Spots.
    #[arg(long, default_value_t = DemoConfig::default().rooms)]
    rooms: usize,
    /// Player Actors per room.
    #[arg(long, default_value_t = DemoConfig::default().players_per_room)]
    players_per_room: usize,
    /// Numbered messages to each player.
    #[arg(long, default_value_t = DemoConfig::default().messages_per_player)]
    messages_per_player: u64,
    /// Lines said in each room (each broadcast to every member).
    #[arg(long, default_value_t = DemoConfig::default().lines_per_room)]
    lines_per_room: u64,
    /// Every n-th message to a player is a request (0: one-way sends only).
    #[arg(long, default_value_t = DemoConfig::default().request_every)]
    request_every: u64,
    /// Calls in flight per node.
    #[arg(long, default_value_t = DemoConfig::default().concurrency)]
    concurrency: usize,
    /// Use this Redis as the Location Store instead of the embedded memory store.
    #[arg(long)]
    redis: Option<String>,
    /// Key namespace in Redis.
    #[arg(long, default_value = "zlink-demo")]
    redis_namespace: String,
    /// Period of each room's housekeeping timer.
    #[arg(long, default_value_t = 100)]
    room_tick_ms: u64,
    /// Deadline of every request.
    #[arg(long, default_value_t = 10_000)]
    request_timeout_ms: u64,
    /// How long the check waits for one-way messages to land.
    #[arg(long, default_value_t = 10_000)]
    settle_timeout_ms: u64,
    /// Live relocation: once half of the traffic is done, every object of this node (0-based)
    /// — its rooms with their players, state, queued messages and timers — moves to the other
    /// nodes while the traffic goes on.
    #[arg(long, default_value_t = 0, conflicts_with = "no_relocate")]
    relocate_node: usize,
    /// Move nothing mid-run.
    #[arg(long)]
    no_relocate: bool,
}

impl DemoArgs {
    fn config(&self) -> DemoConfig {
        DemoConfig {
            nodes: self.nodes,
            rooms: self.rooms,
            players_per_room: self.players_per_room,
            messages_per_player: self.messages_per_player,
            lines_per_room: self.lines_per_room,
            request_every: self.request_every,
            concurrency: self.concurrency,
            store: match &self.redis {
                Some(url) => DemoStore::Redis {
                    url: url.clone(),
                    namespace: self.redis_namespace.clone(),
                },
                None => DemoStore::Memory,
            },
            app: RefAppConfig {
                room_tick: Duration::from_millis(self.room_tick_ms),
                ..RefAppConfig::default()
            },
            request_timeout: Duration::from_millis(self.request_timeout_ms),
            settle_timeout: Duration::from_millis(self.settle_timeout_ms),
            relocate_node: (!self.no_relocate && self.nodes > 1).then_some(self.relocate_node),
            ..DemoConfig::default()
        }
    }
}

/// Progress on a terminal: one bar per phase.
fn bar_progress() -> impl Fn(Progress) + Send + Sync + 'static {
    let bar = ProgressBar::new(0);
    let style = ProgressStyle::with_template(
        "{prefix:>10.bold} [{bar:40.cyan/blue}] {pos:>6}/{len:6} {elapsed:>4}",
    )
    .unwrap_or_else(|_| ProgressStyle::default_bar())
    .progress_chars("=> ");
    bar.set_style(style);
    let phase = Mutex::new(None::<Phase>);
    move |p: Progress| {
        let mut current = phase
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if *current != Some(p.phase) {
            *current = Some(p.phase);
            bar.set_prefix(p.phase.label());
            bar.set_length(p.total);
            bar.reset();
        }
        drop(current);
        bar.set_position(p.done);
        if p.phase == Phase::ShuttingDown && p.done == p.total {
            bar.finish_and_clear();
        }
    }
}

/// Progress without a terminal: a line when a phase starts and ends, and at most one a
/// second within it.
fn line_progress() -> impl Fn(Progress) + Send + Sync + 'static {
    let last = Mutex::new((None::<Phase>, u64::MAX, Instant::now()));
    move |p: Progress| {
        let mut l = last
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let changed = l.0 != Some(p.phase);
        let finished = p.done == p.total && l.1 != p.done;
        if changed || finished || l.2.elapsed() >= Duration::from_secs(1) {
            *l = (Some(p.phase), p.done, Instant::now());
            drop(l);
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "demo: {:<9} {}/{}", p.phase.label(), p.done, p.total);
            let _ = out.flush();
        }
    }
}

/// Run the demo; `Err` (exit status 1) unless it passed.
pub async fn demo(args: DemoArgs) -> Result<()> {
    let cfg = args.config();
    let store = match &cfg.store {
        DemoStore::Memory => "embedded memory store".to_owned(),
        DemoStore::Redis { url, .. } => format!("Redis at {url}"),
    };
    println!(
        "zlink demo: {} nodes, {} rooms x {} players, {} messages per player, {} lines per room, {store}",
        cfg.nodes, cfg.rooms, cfg.players_per_room, cfg.messages_per_player, cfg.lines_per_room
    );
    let report = if std::io::stdout().is_terminal() {
        demo::run(cfg, bar_progress()).await?
    } else {
        demo::run(cfg, line_progress()).await?
    };
    print!("{}", summary(&report));
    let failures = report.failures();
    if failures.is_empty() {
        println!("result: PASS — every message delivered exactly once, per ID and per source");
        Ok(())
    } else {
        println!("result: FAIL");
        bail!("demo failed: {}", failures.join("; "))
    }
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

/// The summary table.
pub fn summary(r: &DemoReport) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let rows: Vec<(&str, String)> = vec![
        (
            "objects",
            format!(
                "{} live (expected {}: {} rooms, {} players, {} Entry Spots)",
                r.live_objects(),
                r.expected_objects,
                r.rooms,
                r.players,
                r.nodes.len()
            ),
        ),
        (
            "messages sent",
            format!(
                "{} ({} by the load generator, {} room broadcasts)",
                r.sent(),
                r.driver_sent,
                r.broadcasts
            ),
        ),
        ("delivered", r.delivered.to_string()),
        ("failed calls", r.failed_calls.to_string()),
        ("gaps", r.gaps.to_string()),
        ("duplicates", r.duplicates.to_string()),
        ("unexpected", r.unexpected.to_string()),
        (
            "request latency",
            format!(
                "p50 {}  p99 {}  max {}  ({} requests)",
                ms(r.latency_p50),
                ms(r.latency_p99),
                ms(r.latency_max),
                r.requests
            ),
        ),
        (
            "route cache",
            format!(
                "{:.1} % hits ({} of {} lookups)",
                r.cache_hit_rate() * 100.0,
                r.cache_hits(),
                r.cache_lookups()
            ),
        ),
        ("room timer ticks", r.room_ticks.to_string()),
        (
            "relocation",
            match &r.relocation {
                None => "none".to_owned(),
                Some(m) => format!(
                    "node {} moved {}/{} units ({} objects) to the others in {} mid-traffic \
                     (after {} operations)",
                    m.node,
                    m.handed_over,
                    m.units,
                    m.objects,
                    ms(m.elapsed),
                    m.started_after_ops
                ),
            },
        ),
        (
            "traffic",
            format!("{:.2} s", r.traffic_elapsed.as_secs_f64()),
        ),
        ("elapsed", format!("{:.2} s", r.elapsed.as_secs_f64())),
    ];
    s.push('\n');
    for (k, v) in rows {
        let _ = writeln!(s, "  {k:<17} {v}");
    }
    let _ = writeln!(
        s,
        "\n  {:<46} {:>8} {:>12} {:>12} {:>11} {:>12}",
        "node", "objects", "local calls", "remote calls", "cache hits", "cache misses"
    );
    for n in &r.nodes {
        let _ = writeln!(
            s,
            "  {:<46} {:>8} {:>12} {:>12} {:>11} {:>12}",
            n.rid, n.objects, n.local_calls, n.remote_calls, n.cache_hits, n.cache_misses
        );
    }
    if !r.errors.is_empty() {
        let _ = writeln!(s, "\n  first failed calls:");
        for e in &r.errors {
            let _ = writeln!(s, "    {e}");
        }
    }
    if !r.problems.is_empty() {
        let _ = writeln!(s, "\n  first IDs with gaps or duplicates:");
        for (id, sources) in &r.problems {
            for src in sources {
                let _ = writeln!(
                    s,
                    "    {id} from {}: missing {} {:?}, duplicates {} {:?}, unexpected {}",
                    src.source,
                    src.missing,
                    src.gaps,
                    src.duplicates,
                    src.duplicate_samples,
                    src.unexpected
                );
            }
        }
    }
    s.push('\n');
    s
}
