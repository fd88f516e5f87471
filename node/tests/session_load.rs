//! The 1,000-connection variant of `scripts/bench-sessions` (issue 19 acceptance 7): three
//! `zlink-node run` hosts on a real `redis-server`, 1,000 Stream Connector sessions spread over
//! them, each bound to its own player Actor; two rounds of five sends and a request each. Every
//! session stays open on its first connection and every player got exactly what its session
//! sent, once and in order. Latency is reported, not asserted (targets live in the benchmark).
#![allow(clippy::unwrap_used)]

#[path = "../../store/tests/support/redis_server.rs"]
mod redis_server;

mod common_load;
mod common_procs;

#[test]
fn a_thousand_bound_sessions_stay_open_and_lose_nothing() {
    let report = common_load::run(&common_load::LoadPlan {
        sessions: 1_000,
        rounds: 2,
        sends: 5,
        workers: 32,
        connect_parallel: 64,
        probe: 100,
        progress: false,
    })
    .unwrap();
    eprintln!("{}", serde_json::to_string_pretty(&report).unwrap());
    assert_eq!(report.open_at_end, 1_000, "{report:?}");
    assert_eq!(report.host_sessions_at_end, 1_000, "{report:?}");
    assert_eq!(report.connection_events, 0, "{report:?}");
    assert_eq!(report.requests_failed, 0, "{report:?}");
    assert_eq!(
        (
            report.players_wrong,
            report.missing,
            report.duplicates,
            report.out_of_order
        ),
        (0, 0, 0, 0),
        "{report:?}"
    );
    assert_eq!(report.zlink.samples, 2_000);
    assert_eq!(report.probe_zlink.samples, 100);
    assert!(report.clean());
    // Placement spread the players over the three hosts.
    assert_eq!(
        report.players_per_host.len(),
        3,
        "{:?}",
        report.players_per_host
    );
}
