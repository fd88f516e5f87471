//! The demo (issue "node host" §5) in-process on the memory store: the reference application on
//! three real MeshNodes, traffic through every node by global ID, and the per-ID exactly-once
//! check (§6) — plus the `zlink-node demo` binary as a real process.
#![allow(clippy::unwrap_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use zlink_node::demo::{self, DemoConfig, Phase};
use zlink_node::mesh::config::MeshTimings;
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
    assert!(
        r.nodes.iter().filter(|n| n.objects > 1).count() >= 2,
        "rooms were placed on more than one node: {:?}",
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
