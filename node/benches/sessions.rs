//! `scripts/bench-sessions` (issue 19 acceptance 7): 10,000 concurrent Stream Connector
//! sessions on loopback, each bound to its own player Actor on three `zlink-node run` hosts
//! (real `redis-server`); request p50/p99 as a ratio to a raw TCP echo of the same bytes
//! measured in the same run; RSS per idle session. See `node/tests/common_load/mod.rs` for what
//! a round is and what is checked.
//!
//! Settings (environment): `ZLINK_BENCH_SESSIONS` (10000), `ZLINK_BENCH_ROUNDS` (5),
//! `ZLINK_BENCH_SENDS` (4 sends per round before its request), `ZLINK_BENCH_WORKERS` (256
//! rounds in flight), `ZLINK_BENCH_CONNECT_PARALLEL` (128), `ZLINK_BENCH_PROBE` (2000 requests
//! one at a time after the load, each on its own session: the unloaded latency). Exit status 1: the load could not
//! start (the reason is printed, e.g. a hard `RLIMIT_NOFILE` too low); 2: a session closed or
//! something was lost, duplicated or reordered.
#![allow(clippy::unwrap_used, missing_docs)]

#[path = "../../store/tests/support/redis_server.rs"]
mod redis_server;

#[path = "../tests/common_load/mod.rs"]
mod common_load;
#[path = "../tests/common_procs/mod.rs"]
mod common_procs;

fn setting(name: &str, default: usize) -> usize {
    match std::env::var(name) {
        Ok(v) => v
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v}: not a number")),
        Err(_) => default,
    }
}

fn main() {
    // `cargo bench` passes `--bench`; a filter or other flags are not used here.
    let plan = common_load::LoadPlan {
        sessions: setting("ZLINK_BENCH_SESSIONS", 10_000),
        rounds: setting("ZLINK_BENCH_ROUNDS", 5),
        sends: setting("ZLINK_BENCH_SENDS", 4),
        workers: setting("ZLINK_BENCH_WORKERS", 256),
        connect_parallel: setting("ZLINK_BENCH_CONNECT_PARALLEL", 128),
        probe: setting("ZLINK_BENCH_PROBE", 2_000),
        progress: true,
    };
    let report = match common_load::run(&plan) {
        Ok(r) => r,
        Err(why) => {
            eprintln!("bench-sessions: cannot start: {why}");
            std::process::exit(1);
        }
    };
    println!(
        "sessions {} (players per host {:?}), connect+bind {:.1} s",
        report.sessions, report.players_per_host, report.connect_and_bind_secs
    );
    println!(
        "request through a bound session: p50 {:.0} µs, p99 {:.0} µs, max {:.0} µs ({} samples)",
        report.zlink.p50_us, report.zlink.p99_us, report.zlink.max_us, report.zlink.samples
    );
    println!(
        "raw TCP echo of the same bytes:  p50 {:.0} µs, p99 {:.0} µs",
        report.echo.p50_us, report.echo.p99_us
    );
    println!(
        "one request at a time: p50 {:.0} µs, p99 {:.0} µs; raw TCP echo p50 {:.0} µs, p99 {:.0} µs; ratio p50 {:.2}×, p99 {:.2}× ({} samples)",
        report.probe_zlink.p50_us,
        report.probe_zlink.p99_us,
        report.probe_echo.p50_us,
        report.probe_echo.p99_us,
        report.probe_p50_ratio,
        report.probe_p99_ratio,
        report.probe_zlink.samples
    );
    println!(
        "under load ratio p50 {:.2}×, p99 {:.2}×; {:.0} messages/s; RSS per idle session: hosts {:.1} KiB, client {:.1} KiB",
        report.p50_ratio,
        report.p99_ratio,
        report.messages_per_sec,
        report.host_rss_per_session_kib,
        report.client_rss_per_session_kib
    );
    println!(
        "open at end {} (hosts count {}), connection events {}, failed requests {}, players wrong {} (missing {}, duplicates {}, out of order {})",
        report.open_at_end,
        report.host_sessions_at_end,
        report.connection_events,
        report.requests_failed,
        report.players_wrong,
        report.missing,
        report.duplicates,
        report.out_of_order
    );
    println!("{}", serde_json::to_string(&report).unwrap());
    if !report.clean() {
        eprintln!("bench-sessions: FAILED: not every session stayed open or something was lost");
        std::process::exit(2);
    }
}
