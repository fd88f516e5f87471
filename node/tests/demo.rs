//! The demo (issue "node host" §5) in-process on the memory store: the reference application on
//! three real MeshNodes, traffic through every node by global ID, and the per-ID exactly-once
//! check (§6) — plus the `zlink-node demo` binary as a real process.
#![allow(clippy::unwrap_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use zlink::mesh::config::MeshTimings;
use zlink_node::demo::{self, DemoConfig, Phase};
use zlink_node::refapp::RefAppConfig;

fn small() -> DemoConfig {
    DemoConfig {
        nodes: 3,
        rooms: 4,
        players_per_room: 3,
        messages_per_player: 9,
        lines_per_room: 4,
        request_every: 3,
        concurrency: 8,
        timings: MeshTimings {
            discovery_poll: Duration::from_millis(50),
            ..MeshTimings::default()
        },
        app: RefAppConfig {
            room_tick: Duration::from_millis(2),
            ..RefAppConfig::default()
        },
        relocate_node: None,
        ..DemoConfig::default()
    }
}

/// §5 acceptance: a small run passes the per-ID sequence check, and its numbers agree with each
/// other and with the plan — sent == delivered, every message of the plan sent, per-node object
/// counts summing to rooms + players + one Entry Spot per node, objects on more than one node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_small_demo_delivers_every_message_exactly_once() {
    let phases = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&phases);
    let cfg = small();
    let r = demo::run(cfg.clone(), move |p| {
        let mut v = seen.lock().unwrap();
        if v.last() != Some(&p.phase) {
            v.push(p.phase);
        }
    })
    .await
    .unwrap();
    assert!(r.passed(), "{:?}\n{r:#?}", r.failures());
    assert_eq!(r.rooms, 4);
    assert_eq!(r.players, 12);
    // 12 players × 9 messages + 4 rooms × 4 lines, all sent.
    assert_eq!(r.driver_sent, 12 * 9 + 4 * 4);
    assert_eq!(r.failed_calls, 0);
    // Every line was broadcast to the room's 3 members.
    assert_eq!(r.broadcasts, 4 * 4 * 3);
    assert_eq!(r.sent(), r.delivered);
    assert_eq!((r.gaps, r.duplicates, r.unexpected), (0, 0, 0));
    assert!(r.problems.is_empty());
    assert_eq!(r.nodes.len(), 3);
    assert_eq!(r.live_objects(), 4 + 12 + 3);
    assert_eq!(r.expected_objects, r.live_objects());
    // Placement by weight spread the 4 rooms (with their players) over all 3 nodes.
    assert!(
        r.nodes.iter().all(|n| n.objects > 1),
        "every node hosts a room: {:?}",
        r.nodes
    );
    // Requests: every third player message plus every line.
    assert_eq!(r.requests, 12 * 3 + 4 * 4);
    assert!(r.latency_p50 > Duration::ZERO && r.latency_p50 <= r.latency_p99);
    assert!(r.latency_p99 <= r.latency_max);
    // Every node called objects it does not own, and most lookups hit the route cache.
    assert!(r.nodes.iter().all(|n| n.remote_calls > 0), "{:?}", r.nodes);
    assert!(r.cache_lookups() > 0);
    assert!(r.cache_hit_rate() > 0.5, "{}", r.cache_hit_rate());
    assert!(r.traffic_elapsed <= r.elapsed);
    // The rooms' housekeeping timers ran (every 2 ms) on the rooms' queues.
    assert!(r.room_ticks > 0);
    assert_eq!(
        *phases.lock().unwrap(),
        vec![
            Phase::Starting,
            Phase::Creating,
            Phase::Traffic,
            Phase::Verifying,
            Phase::ShuttingDown
        ]
    );
}

/// Issue 17 (the product's point): the demo with node 0 relocated while the traffic runs —
/// its rooms move with their players (one unit each), state, queued messages and timers — still
/// delivers every message exactly once, per ID and per source; node 0 ends with its Entry Spot
/// only, the others hold every room and player.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_demo_with_a_node_relocated_mid_traffic_delivers_every_message_exactly_once() {
    let cfg = DemoConfig {
        rooms: 9,
        players_per_room: 4,
        messages_per_player: 30,
        lines_per_room: 12,
        relocate_node: Some(0),
        ..small()
    };
    let r = demo::run(cfg, |_| {}).await.unwrap();
    assert!(r.passed(), "{:?}\n{r:#?}", r.failures());
    let m = r.relocation.clone().expect("the relocation ran");
    assert_eq!(m.node, 0);
    assert!(m.units > 0, "node 0 held rooms to move: {m:?}");
    assert_eq!(m.handed_over, m.units, "{m:?}");
    assert_eq!(
        m.objects,
        m.units * 5,
        "each room moved with its 4 players: {m:?}"
    );
    let total = 9 * 4 * 30 + 9 * 12;
    assert!(
        m.started_after_ops >= total / 2 && m.started_after_ops < total,
        "it started mid-traffic: {m:?}"
    );
    assert_eq!(
        r.nodes[0].objects, 1,
        "only node 0's Entry Spot stays: {:?}",
        r.nodes
    );
    assert_eq!(r.live_objects(), 9 + 36 + 3);
    assert_eq!(r.sent(), r.delivered);
    assert_eq!(
        (r.gaps, r.duplicates, r.unexpected, r.failed_calls),
        (0, 0, 0, 0)
    );
}

/// Bad settings are refused before anything starts, naming the field.
#[tokio::test]
async fn bad_settings_name_the_field() {
    for (cfg, field) in [
        (
            DemoConfig {
                nodes: 0,
                ..small()
            },
            "nodes",
        ),
        (
            DemoConfig {
                rooms: 0,
                ..small()
            },
            "rooms",
        ),
        (
            DemoConfig {
                concurrency: 0,
                ..small()
            },
            "concurrency",
        ),
    ] {
        let e = demo::run(cfg, |_| {}).await.unwrap_err();
        assert!(
            matches!(&e, demo::DemoError::Config { field: f, .. } if *f == field),
            "{e}"
        );
    }
}

/// §5: the `zlink-node demo` binary, run as a real process with small flags, exits 0, prints
/// plain progress lines (its stdout is a pipe, not a terminal: no progress bar) and the summary.
#[test]
fn the_demo_command_passes_and_prints_its_summary() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_zlink-node"))
        .args([
            "demo",
            "--rooms",
            "3",
            "--players-per-room",
            "2",
            "--messages-per-player",
            "6",
            "--lines-per-room",
            "3",
            "--concurrency",
            "4",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    for line in [
        "demo: traffic   45/45",
        "objects           12 live (expected 12: 3 rooms, 6 players, 3 Entry Spots)",
        // 6 × 6 + 3 × 3 sent by the load generator, each line broadcast to 2 members.
        "messages sent     63 (45 by the load generator, 18 room broadcasts)",
        "delivered         63",
        "gaps              0",
        "duplicates        0",
        "request latency   p50",
        "route cache",
        "relocation        node 0 moved",
        "result: PASS",
    ] {
        assert!(stdout.contains(line), "{line:?} not in:\n{stdout}");
    }
    assert!(!stdout.contains('\u{1b}'), "no terminal escapes on a pipe");
}

/// A bad flag value exits non-zero with a message naming the setting.
#[test]
fn the_demo_command_refuses_bad_settings() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_zlink-node"))
        .args(["demo", "--nodes", "0"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("demo setting nodes"), "{stderr}");
}
