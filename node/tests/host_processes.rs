//! Process-level node host tests (issue 8 acceptance): three real `zlink-node run` processes
//! (the built binary, configured by a YAML file plus `ZLINK_*` overrides) against a real
//! redis-server form a mesh; `zlink-node ctl status` (the real binary) shows every peer ready;
//! SIGTERM on one host drains it (`ctl watch` sees Draining then Stopped), it exits 0, its
//! descriptor disappears from Redis, and the other hosts stop selecting it.
#![allow(clippy::unwrap_used)]

#[path = "../../store/tests/support/redis_server.rs"]
mod redis_server;

#[path = "../../e2e/src/fault_proxy.rs"]
mod fault_proxy;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::Value;

mod common_procs;
use common_procs::{BIN, Host, SECRET, TOKEN, WAIT, http_get, load_cmd, load_report, metric};

fn write_config(dir: &Path, redis_url: &str, namespace: &str) -> PathBuf {
    let path = dir.join("node.yaml");
    std::fs::write(
        &path,
        format!(
            "mesh:\n  name: procs\n  rid_prefix: yaml\n  channels:\n    - {{ name: work, role: server, weight: 100 }}\n\
             redis:\n  url: {redis_url}\n  namespace: {namespace}\n\
             timings:\n  probe_interval_ms: 100\n  liveness_deadline_ms: 3000\n  lease_ttl_ms: 6000\n  discovery_poll_ms: 100\n  status_poll_ms: 50\n\
             admin:\n  grpc_listen: 127.0.0.1:0\n  http_listen: 127.0.0.1:0\n\
             drain_deadline_ms: 3000\napplication_version: 7\nlog_level: warn\n"
        ),
    )
    .unwrap();
    path
}

fn peer<'a>(status: &'a Value, rid: &str) -> Option<&'a Value> {
    status["peers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["rid"] == rid)
}

/// Issue 8 acceptance, "Process-level tests": three `zlink-node run` processes on one Redis
/// form a mesh and `ctl status` shows both peers ready on each; SIGTERM on one makes it drain
/// (a `ctl watch` stream shows Draining, then Stopped), exit 0 and vanish from the MeshNode
/// descriptors in Redis; the other two drop it from their ready peers (no select-one or
/// placement can pick it any more).
#[test]
fn sigterm_drains_one_of_three_hosts_out_of_the_mesh() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let redis = rt.block_on(redis_server::RedisServer::start());
    let namespace = format!("hostprocs-{}", std::process::id());
    let dir = std::env::temp_dir().join(format!("zlink-hostprocs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = write_config(&dir, &redis.url(), &namespace);
    let mut hosts: Vec<Host> = (0..3)
        .map(|i| Host::spawn(&config, &format!("h{i}")))
        .collect();
    let rids: Vec<String> = hosts.iter().map(|h| h.rid.clone()).collect();

    for h in &hosts {
        let s = h.wait_status("two ready peers", |s| s["peers_ready"] == 2);
        assert_eq!(s["state"], "serving");
        assert_eq!(s["application_version"], 7);
        assert_eq!(s["peers_not_ready"], 0);
        for rid in rids.iter().filter(|r| **r != h.rid) {
            assert_eq!(peer(&s, rid).unwrap()["ready"], true, "{s}");
        }
        let (code, _) = http_get(&h.http, "/readyz");
        assert_eq!(code, 200);
    }

    // Watch the host that will be terminated.
    let victim_grpc = hosts[2].grpc.clone();
    let mut watch = Command::new(BIN)
        .args([
            "ctl",
            "--json",
            "--addr",
            &format!("http://{victim_grpc}"),
            "watch",
        ])
        .env("ZLINK_ADMIN_TOKEN", TOKEN)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let watch_out = watch.stdout.take().unwrap();
    let (wtx, wrx) = mpsc::channel::<Value>();
    std::thread::spawn(move || {
        for line in BufReader::new(watch_out).lines() {
            let Ok(line) = line else { break };
            if wtx.send(serde_json::from_str(&line).unwrap()).is_err() {
                break;
            }
        }
    });
    let first = wrx.recv_timeout(WAIT).expect("watch: first status");
    assert_eq!(first["state"], "serving");

    let ok = Command::new("kill")
        .args(["-TERM", &hosts[2].child.id().to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok);
    let status = hosts[2].wait_exit();
    assert!(status.success(), "drained host exited with {status}");

    let mut states = Vec::new();
    while let Ok(s) = wrx.recv_timeout(WAIT) {
        states.push(s["state"].as_str().unwrap().to_owned());
    }
    assert!(states.contains(&"draining".to_owned()), "{states:?}");
    assert_eq!(
        states.last().map(String::as_str),
        Some("stopped"),
        "{states:?}"
    );
    assert!(watch.wait().unwrap().success(), "ctl watch ends cleanly");

    // Its descriptor is gone from Redis at once (the lease release took it along).
    let listed: Vec<String> = rt.block_on(async {
        let store = zlink_store::redis::RedisStore::connect(
            &redis.url(),
            zlink_store::redis::RedisStoreConfig {
                namespace: namespace.clone(),
                ..Default::default()
            },
        )
        .await
        .unwrap();
        zlink_store::LocationStore::list_descriptors(
            &store,
            zlink_store::types::DescriptorKind::MeshNode,
            "procs",
        )
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.key.rid)
        .collect()
    });
    let mut expected = vec![rids[0].clone(), rids[1].clone()];
    expected.sort();
    let mut listed = listed;
    listed.sort();
    assert_eq!(listed, expected);

    // The others stop selecting it: it leaves their ready peers.
    for h in &hosts[..2] {
        let s = h.wait_status("the drained host is no longer a ready peer", |s| {
            s["peers_ready"] == 1 && peer(s, &rids[2]).is_none_or(|p| p["ready"] == false)
        });
        let other = if h.rid == rids[0] { &rids[1] } else { &rids[0] };
        assert_eq!(peer(&s, other).unwrap()["ready"], true, "{s}");
    }

    // The survivors drain cleanly too.
    for h in hosts.iter_mut().take(2) {
        let out = h.ctl(&["drain", "--deadline-ms", "2000"]);
        assert!(out.status.success());
        let r: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(r["started"], true);
        assert!(h.wait_exit().success());
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue 8 item 6 (load generator): `zlink-node load` joins the mesh of two running hosts as an
/// Object Client, sends 10 numbered requests to each of 40 counter IDs (cold-activated on the
/// hosts) and reports, per ID, no gap and no duplicate; exit 0. The hosts' `/metrics` show the
/// activations and the live counters that the traffic created.
#[test]
fn the_load_generator_reports_every_id_complete_through_running_hosts() {
    load_through_two_hosts(1, 40 * 10);
}

/// The same with one-way sends mixed in (every third message a request). This reproduced a
/// real loss: a one-way send that reached a freshly activated counter between its Ready commit
/// and its entry in the host's live table was answered `StaleRoute` and dropped. The runtime now
/// enters the instance before the Ready commit is visible, so no ID may miss a number.
#[test]
fn the_load_generator_reports_every_id_complete_with_one_way_sends() {
    load_through_two_hosts(3, 40 * 3);
}

fn load_through_two_hosts(request_every: u64, requests: u64) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let redis = rt.block_on(redis_server::RedisServer::start());
    // Per call: the two load tests run side by side in this process.
    let tag = format!("{}-{request_every}", std::process::id());
    let namespace = format!("hostload-{tag}");
    let dir = std::env::temp_dir().join(format!("zlink-hostload-{tag}"));
    std::fs::create_dir_all(&dir).unwrap();
    let config = write_config(&dir, &redis.url(), &namespace);
    let mut hosts: Vec<Host> = (0..2)
        .map(|i| Host::spawn(&config, &format!("l{i}")))
        .collect();
    for h in &hosts {
        h.wait_status("one ready peer", |s| s["peers_ready"] == 1);
    }
    let spots_before: f64 = hosts
        .iter()
        .map(|h| {
            metric(
                &http_get(&h.http, "/metrics").1,
                "zlink_objects_live{kind=\"spot\"}",
            )
        })
        .sum();
    let out = Command::new(BIN)
        .args(["load", "--json", "--config"])
        .arg(&config)
        .args([
            "--counters",
            "40",
            "--messages-per-counter",
            "10",
            "--request-every",
            &request_every.to_string(),
            "--concurrency",
            "16",
        ])
        .env("ZLINK_MESH_SECRET", SECRET)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "load failed: {stdout} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(r["ids"], 40, "{r}");
    assert_eq!(r["sent"], 400, "{r}");
    assert_eq!(r["applied"], 400, "{r}");
    assert_eq!(r["gaps"], 0, "{r}");
    assert_eq!(r["duplicates"], 0, "{r}");
    assert_eq!(r["failed_calls"], 0, "{r}");
    assert_eq!(r["requests"], requests, "{r}");
    assert!(r["rid"].as_str().unwrap().starts_with("load-"), "{r}");

    let mut activated = 0.0;
    let mut spots_after = 0.0;
    let mut reserves = 0.0;
    let mut ready_commits = 0.0;
    for h in &hosts {
        let text = http_get(&h.http, "/metrics").1;
        activated += metric(
            &text,
            "zlink_object_activations_total{outcome=\"activated\"}",
        );
        spots_after += metric(&text, "zlink_objects_live{kind=\"spot\"}");
        reserves += metric(&text, "zlink_store_ops_total{op=\"reserve\",result=\"ok\"}");
        ready_commits += metric(
            &text,
            "zlink_store_ops_total{op=\"commit_ready\",result=\"ok\"}",
        );
    }
    assert_eq!(activated, 40.0);
    assert_eq!(spots_after - spots_before, 40.0);
    // The object runtime's store calls are counted: one reservation and one Ready commit per
    // activation (plus the Entry Spots of the hosts' own startup).
    assert_eq!(ready_commits - reserves, 0.0);
    assert!(reserves >= 40.0, "{reserves}");
    for h in hosts.iter_mut() {
        let out = h.ctl(&["drain"]);
        assert!(out.status.success());
        assert!(h.wait_exit().success());
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `zlink-node run` refuses a bad configuration before binding anything: exit status non-zero
/// and the error names the field and its allowed range (issue 8 item 1).
#[test]
fn run_refuses_an_invalid_field_naming_it() {
    let out = Command::new(BIN)
        .args(["run"])
        .env("ZLINK_REDIS_URL", "redis://127.0.0.1:1/")
        .env("ZLINK_TIMINGS_PROBE_INTERVAL_MS", "0")
        .env("ZLINK_MESH_SECRET", SECRET)
        .env("ZLINK_ADMIN_TOKEN", TOKEN)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("timings.probe_interval_ms = 0: must be 1..=3600000"),
        "{err}"
    );
}

/// A redis-server, a temporary directory and a Redis namespace of their own for mesh `mesh`.
fn redis_and_dir(mesh: &str) -> (redis_server::RedisServer, PathBuf, String) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let redis = rt.block_on(redis_server::RedisServer::start());
    let tag = format!("{}-{mesh}", std::process::id());
    let dir = std::env::temp_dir().join(format!("zlink-host{mesh}-{tag}"));
    std::fs::create_dir_all(&dir).unwrap();
    (redis, dir, format!("host{mesh}-{tag}"))
}

/// A redis-server and a host configuration for the relocation process tests (mesh `mesh`):
/// short timings, relocation before the drain with a 6 s Message Follow window and a 1 s route
/// cache (5 s shorter, routing §2.5), a 20 s drain deadline. Returns the server (keep it), the
/// temporary directory and the configuration file.
fn relocation_setup(mesh: &str) -> (redis_server::RedisServer, PathBuf, PathBuf) {
    let (redis, dir, namespace) = redis_and_dir(mesh);
    let config = dir.join("node.yaml");
    std::fs::write(
        &config,
        format!(
            "mesh:\n  name: {mesh}\n  rid_prefix: yaml\n\
             redis:\n  url: {}\n  namespace: {namespace}\n\
             timings:\n  probe_interval_ms: 100\n  liveness_deadline_ms: 3000\n  lease_ttl_ms: 6000\n  discovery_poll_ms: 100\n  status_poll_ms: 50\n  drain_seal_ms: 300\n\
             admin:\n  grpc_listen: 127.0.0.1:0\n  http_listen: 127.0.0.1:0\n\
             relocation:\n  shutdown_deadline_ms: 8000\n  cutover_wait_ms: 300\n  message_follow_ms: 6000\n  route_cache_max_age_ms: 1000\n\
             drain_deadline_ms: 20000\napplication_version: 7\nlog_level: warn\n",
            redis.url()
        ),
    )
    .unwrap();
    (redis, dir, config)
}

/// Issue 17 item 2, capacity at the host: `objects.capacity_spots` reaches the Location Store,
/// so a host full of counters refuses to activate another (a typed failure, never a silent
/// drop) while the ones it holds keep serving.
#[test]
fn a_host_at_its_spot_capacity_refuses_more_counters_typed() {
    let (_redis, dir, config) = relocation_setup("capacity");
    let mut hosts = vec![Host::spawn_with(
        &config,
        "c0",
        &[("ZLINK_OBJECTS_CAPACITY_SPOTS", "2".to_owned())],
    )];
    let out = load_cmd(
        &config,
        &[
            "--counters",
            "4",
            "--messages-per-counter",
            "3",
            "--request-every",
            "1",
            "--concurrency",
            "1",
            "--settle-timeout-ms",
            "500",
        ],
    )
    .output()
    .unwrap();
    let r = common_procs::load_report(&out);
    assert!(!out.status.success(), "some calls must fail: {r}");
    // Two counters fit and got every message; the other two were refused, typed.
    let complete = r["applied"].as_u64().unwrap();
    assert_eq!(complete, 2 * 3, "{r}");
    assert!(
        r["error_kinds"]["Rejected"].as_u64().unwrap() >= 2 * 3,
        "{r}"
    );
    assert_eq!(r["duplicates"], 0, "{r}");
    common_procs::drain_all(&mut hosts);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue 17 "Drain without loss": three `zlink-node run` hosts on a real redis-server under
/// `zlink-node load` (one-way sends and requests to counter Instance Spots); SIGTERM one host
/// mid-load. SIGTERM relocates first (`relocation.on_shutdown: planned_maintenance`, the
/// default): the host moves its counters to the other two (state, queued work, calls in
/// flight), waits for SafeToShutdown (its Message Follow windows), drains and exits 0. The load
/// run then reports every numbered message applied exactly once and no failed call — before
/// the mover, this same run lost the whole state of every counter on the drained host.
#[test]
fn sigterm_mid_load_moves_every_counter_without_losing_a_message() {
    let (_redis, dir, config) = relocation_setup("relocs");
    let mut hosts: Vec<Host> = (0..3)
        .map(|i| Host::spawn(&config, &format!("r{i}")))
        .collect();
    for h in &hosts {
        h.wait_status("two ready peers", |s| s["peers_ready"] == 2);
    }
    let mut load = load_cmd(
        &config,
        &[
            "--counters",
            "30",
            "--messages-per-counter",
            "300",
            "--request-every",
            "3",
            "--concurrency",
            "8",
        ],
    )
    .spawn()
    .unwrap();
    // Mid-load: the victim hosts counters (its Entry Spot is one Spot more).
    let victim = 0;
    let s = hosts[victim].wait_status("counters on the victim", |s| {
        s["objects"]["spot"].as_u64().unwrap_or(0) >= 6
    });
    let hosted = s["objects"]["spot"].as_u64().unwrap() - 1;
    assert!(
        load.try_wait().unwrap().is_none(),
        "the load finished before the SIGTERM: make it longer"
    );
    let ok = Command::new("kill")
        .args(["-TERM", &hosts[victim].child.id().to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok);
    let status = hosts[victim].wait_exit();
    assert!(status.success(), "the drained host exited with {status}");
    let out = load.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "load failed: {stdout} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(r["ids"], 30, "{r}");
    assert_eq!(r["sent"], 30 * 300, "{r}");
    assert_eq!(
        r["applied"],
        30 * 300,
        "every message applied, state intact: {r}"
    );
    assert_eq!(r["gaps"], 0, "{r}");
    assert_eq!(r["duplicates"], 0, "{r}");
    assert_eq!(r["failed_calls"], 0, "{r}");
    // The counters the victim hosted live on the others now.
    let live: u64 = hosts
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != victim)
        .map(|(_, h)| h.status()["objects"]["spot"].as_u64().unwrap() - 1)
        .sum();
    assert_eq!(
        live, 30,
        "all 30 counters live on the two survivors ({hosted} moved)"
    );
    drop(hosts.remove(victim));
    common_procs::drain_all(&mut hosts);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue 17 "Soak": three `zlink-node run` hosts on a real redis-server under two continuous
/// `zlink-node load`s: pipelined one-way sends and requests to 40 counters, and closed-loop
/// requests to 4 rooms with 5 players each (every player also gets each room line as a
/// broadcast). A seeded driver
/// (`ZLINK_SOAK_SEED` replays a run) picks a host each round and alternates the modes: it starts
/// the host's replacement first (the same application version for PlannedMaintenance, one
/// higher for RollingUpdate, so a target of the right version exists), runs
/// `ctl relocate --wait-safe` (it must end Completed), SIGTERMs the host (exit 0), for
/// `ZLINK_SOAK_SECS` (60 in `scripts/test`; 600 for the opt-in long run). Pass: both loads
/// report every numbered message applied exactly once (broadcasts included) and no failed
/// call, and the closed loop no out-of-order arrival.
#[test]
fn soak_relocate_sigterm_restart_rounds_under_continuous_load() {
    let secs: u64 = std::env::var("ZLINK_SOAK_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(60);
    let seed: u64 = std::env::var("ZLINK_SOAK_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0x5eed_2026);
    eprintln!("soak: {secs} s, ZLINK_SOAK_SEED={seed}");
    let mut rng = seed | 1;
    let mut next = move |n: usize| {
        rng = rng
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        usize::try_from(rng >> 33).unwrap() % n
    };
    let (_redis, dir, config) = relocation_setup("soak");
    let mut hosts: Vec<Host> = (0..3)
        .map(|i| Host::spawn(&config, &format!("s{i}")))
        .collect();
    let mut versions: Vec<u64> = vec![7; hosts.len()];
    let all_see_each_other = |hosts: &[Host]| {
        for h in hosts {
            for other in hosts.iter().filter(|o| o.rid != h.rid) {
                h.wait_status("hosts see each other", |s| {
                    peer(s, &other.rid).is_some_and(|p| p["ready"] == true)
                });
            }
        }
    };
    all_see_each_other(&hosts);
    let load = load_cmd(
        &config,
        &[
            "--counters",
            "40",
            "--duration-ms",
            &(secs * 1000).to_string(),
            "--request-every",
            "3",
            "--concurrency",
            "8",
        ],
    )
    .spawn()
    .unwrap();
    // Beside it, rooms with their players (User Spots moving with every member Actor) under
    // closed-loop requests: one in flight per ID, so every ID's numbers must arrive in order.
    let room_load = load_cmd(
        &config,
        &[
            "--rooms",
            "4",
            "--players-per-room",
            "5",
            "--closed-loop",
            "--duration-ms",
            &(secs * 1000).to_string(),
            "--concurrency",
            "6",
        ],
    )
    .spawn()
    .unwrap();
    let t0 = Instant::now();
    let mut round = 0;
    // Leave time for the last round to finish before the load stops.
    while t0.elapsed() + Duration::from_secs(12) < Duration::from_secs(secs) {
        round += 1;
        let v = next(hosts.len());
        let rolling = round % 2 == 0;
        let version = versions[v] + u64::from(rolling);
        // The replacement first: the target of the right version.
        let replacement = Host::spawn_with(
            &config,
            &format!("s{}", 3 + round),
            &[("ZLINK_APPLICATION_VERSION", version.to_string())],
        );
        hosts.push(replacement);
        all_see_each_other(&hosts);
        let version_arg = version.to_string();
        let args: Vec<&str> = if rolling {
            vec![
                "relocate",
                "--wait-safe",
                "--mode",
                "rolling-update",
                "--version",
                &version_arg,
            ]
        } else {
            vec!["relocate", "--wait-safe"]
        };
        let out = hosts[v].ctl(&args);
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        assert!(
            out.status.success(),
            "round {round}: relocate of {} did not complete: {text} {}",
            hosts[v].rid,
            String::from_utf8_lossy(&out.stderr)
        );
        let ok = Command::new("kill")
            .args(["-TERM", &hosts[v].child.id().to_string()])
            .status()
            .unwrap()
            .success();
        assert!(ok);
        let status = hosts[v].wait_exit();
        assert!(
            status.success(),
            "round {round}: {} exited with {status}",
            hosts[v].rid
        );
        let replacement = hosts.pop().unwrap();
        drop(std::mem::replace(&mut hosts[v], replacement));
        versions[v] = version;
        eprintln!(
            "soak round {round}: host {v} {} to version {version}, stopped and replaced ({:?})",
            if rolling { "rolled" } else { "relocated" },
            t0.elapsed()
        );
    }
    let out = load.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "load failed after {round} rounds (ZLINK_SOAK_SEED={seed}): {stdout} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(r["ids"], 40, "{r}");
    assert_eq!(r["applied"], r["sent"], "every message applied once: {r}");
    assert_eq!(r["gaps"], 0, "{r}");
    assert_eq!(r["duplicates"], 0, "{r}");
    assert_eq!(r["failed_calls"], 0, "{r}");
    assert!(round >= 2, "only {round} rounds ran");
    assert!(
        r["out_of_order"].is_u64(),
        "out-of-order arrivals are reported: {r}"
    );
    let out = room_load.wait_with_output().unwrap();
    let rooms = common_procs::load_report(&out);
    assert!(
        out.status.success(),
        "rooms load failed after {round} rounds (ZLINK_SOAK_SEED={seed}): {rooms} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        (&rooms["rooms"], &rooms["players"], &rooms["ids"]),
        (&Value::from(4), &Value::from(20), &Value::from(24)),
        "{rooms}"
    );
    assert_eq!(rooms["closed_loop"], true, "{rooms}");
    assert_eq!(
        rooms["applied"], rooms["sent"],
        "every message applied once: {rooms}"
    );
    assert_eq!(rooms["gaps"], 0, "{rooms}");
    assert_eq!(rooms["duplicates"], 0, "{rooms}");
    assert_eq!(rooms["failed_calls"], 0, "{rooms}");
    assert_eq!(
        rooms["out_of_order"], 0,
        "closed loop: strictly in order: {rooms}"
    );
    eprintln!("soak: {round} rounds, load {r}, rooms load {rooms}");
    common_procs::drain_all(&mut hosts);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A redis-server and a host configuration for the store-outage process tests (issue 20):
/// lease TTL 3,000 ms (renewal every 1,000 ms, fencing margin 600 ms), discovery poll 100 ms.
fn outage_setup(mesh: &str) -> (redis_server::RedisServer, PathBuf, PathBuf) {
    let (redis, dir, namespace) = redis_and_dir(mesh);
    let config = dir.join("node.yaml");
    std::fs::write(
        &config,
        format!(
            "mesh:\n  name: {mesh}\n  rid_prefix: yaml\n\
             redis:\n  url: {}\n  namespace: {namespace}\n  response_timeout_ms: 300\n  connection_timeout_ms: 300\n\
             timings:\n  probe_interval_ms: 100\n  liveness_deadline_ms: 3000\n  lease_ttl_ms: 3000\n  discovery_poll_ms: 100\n  status_poll_ms: 50\n  drain_seal_ms: 200\n\
             admin:\n  grpc_listen: 127.0.0.1:0\n  http_listen: 127.0.0.1:0\n\
             relocation:\n  on_shutdown: none\n\
             drain_deadline_ms: 5000\napplication_version: 7\nlog_level: warn\n",
            redis.url()
        ),
    )
    .unwrap();
    (redis, dir, config)
}

/// Issue 20 acceptance 1 (item 3): three `zlink-node run` hosts on a real redis-server, lease
/// TTL 3,000 ms, `zlink-node load` running; Redis is killed and restarted ~1 s later (AOF,
/// nothing lost in Redis). A failed renewal is retried after 50 ms (doubling), so the first one
/// after Redis is back lands long before the fencing deadline: no host is fenced or loses its
/// lease, no object is dropped, and the load reports no lost and no duplicated message (calls
/// that needed the store during the outage may fail with a typed error; they are not
/// acknowledged, so they are not counted as lost).
#[test]
fn a_one_second_redis_outage_costs_no_lease_and_no_message() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (mut redis, dir, config) = outage_setup("blip");
    // The descriptor poll at its 1 s renew period: a renewal retried only on the next poll
    // tick (the reported defect) would be fenced by this outage.
    let slow_poll = [("ZLINK_TIMINGS_DISCOVERY_POLL_MS", "1000".to_owned())];
    let mut hosts: Vec<Host> = (0..3)
        .map(|i| Host::spawn_with(&config, &format!("b{i}"), &slow_poll))
        .collect();
    for h in &hosts {
        h.wait_status("two ready peers", |s| s["peers_ready"] == 2);
    }
    let load = load_cmd(
        &config,
        &[
            "--counters",
            "20",
            "--duration-ms",
            "6000",
            "--request-every",
            "3",
            "--concurrency",
            "8",
        ],
    )
    .spawn()
    .unwrap();
    // Mid-load: the counters are live (each host's Entry Spot is one Spot more).
    let t0 = Instant::now();
    while hosts
        .iter()
        .map(|h| h.status()["objects"]["spot"].as_u64().unwrap_or(0))
        .sum::<u64>()
        < 20 + 3
    {
        assert!(t0.elapsed() < WAIT, "the counters never activated");
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(500));
    redis.stop();
    std::thread::sleep(Duration::from_millis(1_000));
    rt.block_on(redis.restart());
    let out = load.wait_with_output().unwrap();
    let r = load_report(&out);
    assert!(r["sent"].as_u64().unwrap() > 1_000, "{r}");
    assert_eq!(r["gaps"], 0, "no acknowledged message lost: {r}");
    assert_eq!(r["duplicates"], 0, "{r}");
    // Calls that needed the store during the outage ended with StoreFailure, and only those:
    // no host was fenced (`Unavailable`), no call hung (`DeadlineExceeded`).
    for (kind, _) in r["error_kinds"].as_object().unwrap() {
        assert_eq!(kind, "StoreFailure", "{r}");
    }
    for h in &hosts {
        let (code, text) = http_get(&h.http, "/metrics");
        assert_eq!(code, 200);
        assert!(
            metric(&text, "zlink_lease_renew_failures_total") >= 1.0,
            "{}: a renewal fell into the outage",
            h.rid
        );
        assert!(
            metric(&text, "zlink_lease_renew_attempts_total") >= 3.0,
            "{}: renewals went on",
            h.rid
        );
        assert_eq!(
            metric(&text, "zlink_host_fenced_seconds_total"),
            0.0,
            "{} was never fenced",
            h.rid
        );
        assert_eq!(metric(&text, "zlink_host_rejoins_total"), 0.0, "{}", h.rid);
        assert_eq!(metric(&text, "zlink_host_objects_dropped_total"), 0.0);
        let s = h.status();
        assert_eq!(s["state"], "serving", "{s}");
        assert_eq!(s["rid"], h.rid, "the same lifecycle serves");
    }
    common_procs::drain_all(&mut hosts);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue 20 acceptance 2 (item 2, `lease_loss: rejoin`, the default): Redis down for longer
/// than the lease TTL. Every host is fenced, then loses its lease; it drops its objects (counted
/// in `zlink_host_objects_dropped_total`) and shows `fenced` while `/healthz` stays 200 (the
/// rejoin makes progress) and `/readyz` is 503. Once Redis is back, every host claims a new
/// lease as a new node lifecycle (a new RID) and is `serving` with both peers ready again
/// within TTL + two poll periods, without a process restart; a load run started after the
/// recovery then loses, duplicates and fails nothing.
#[test]
fn redis_down_longer_than_the_lease_ttl_every_host_rejoins_without_a_restart() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (mut redis, dir, config) = outage_setup("rejoin");
    let mut hosts: Vec<Host> = (0..3)
        .map(|i| Host::spawn(&config, &format!("j{i}")))
        .collect();
    for h in &hosts {
        h.wait_status("two ready peers", |s| s["peers_ready"] == 2);
    }
    // Objects that the loss will drop.
    let out = load_cmd(
        &config,
        &["--counters", "12", "--messages-per-counter", "3"],
    )
    .output()
    .unwrap();
    assert_eq!(load_report(&out)["gaps"], 0);
    let held: u64 = hosts
        .iter()
        .map(|h| h.status()["objects"]["spot"].as_u64().unwrap())
        .sum();
    assert!(held >= 12, "{held}");
    let down = Instant::now();
    redis.stop();
    for h in &hosts {
        h.wait_status("fenced after the lease is lost", |s| s["state"] == "fenced");
        assert_eq!(http_get(&h.http, "/readyz").0, 503);
    }
    // Past a whole TTL of fencing: still healthy, because the rejoin keeps trying.
    while down.elapsed() < Duration::from_millis(4_500) {
        for h in &hosts {
            assert_eq!(http_get(&h.http, "/healthz").0, 200, "{}", h.rid);
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    rt.block_on(redis.restart());
    let back = Instant::now();
    let mut serving_after = Vec::new();
    for h in &hosts {
        let s = h.wait_status("serving again", |s| s["state"] == "serving");
        serving_after.push(back.elapsed());
        assert_ne!(
            s["rid"], h.rid,
            "a new node lifecycle claimed a new RID: {s}"
        );
    }
    let worst = serving_after.iter().max().unwrap();
    eprintln!("serving again after Redis returned: {serving_after:?}");
    assert!(
        *worst <= Duration::from_millis(3_000 + 2 * 100),
        "serving again within TTL + two polls of Redis returning: {serving_after:?}"
    );
    let mut dropped = 0.0;
    for h in &hosts {
        h.wait_status("both peers ready again", |s| s["peers_ready"] == 2);
        let (code, text) = http_get(&h.http, "/metrics");
        assert_eq!(code, 200);
        assert_eq!(metric(&text, "zlink_host_rejoins_total"), 1.0, "{}", h.rid);
        assert!(metric(&text, "zlink_host_fenced_seconds_total") > 1.0);
        dropped += metric(&text, "zlink_host_objects_dropped_total");
        assert_eq!(http_get(&h.http, "/readyz").0, 200);
    }
    assert!(
        dropped >= held as f64,
        "every object of the lost lifecycles was dropped and counted: {dropped} of {held}"
    );
    let out = load_cmd(
        &config,
        &[
            "--counters",
            "30",
            "--messages-per-counter",
            "20",
            "--request-every",
            "3",
        ],
    )
    .output()
    .unwrap();
    let r = load_report(&out);
    assert!(out.status.success(), "{r}");
    assert_eq!(r["sent"], 30 * 20, "{r}");
    assert_eq!(r["applied"], 30 * 20, "{r}");
    assert_eq!(r["gaps"], 0, "{r}");
    assert_eq!(r["duplicates"], 0, "{r}");
    assert_eq!(r["failed_calls"], 0, "{r}");
    common_procs::drain_all(&mut hosts);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue 20 item 2, `lease_loss: exit`: a host whose lease is lost exits with status 4 (so its
/// supervisor restarts it) instead of staying up fenced.
#[test]
fn lease_loss_exit_ends_the_process_with_status_4() {
    let (mut redis, dir, config) = outage_setup("exit");
    let mut host = Host::spawn_with(&config, "x0", &[("ZLINK_LEASE_LOSS", "exit".into())]);
    redis.stop();
    let t0 = Instant::now();
    let status = host.wait_exit();
    assert_eq!(status.code(), Some(4), "{status}");
    assert!(t0.elapsed() < Duration::from_secs(8), "{:?}", t0.elapsed());
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue 20 "Bad input and faults": a host started while Redis is down neither exits nor
/// spins. It keeps retrying with backoff and says so in its log (one warning per attempt),
/// and starts serving once Redis answers.
#[test]
fn a_host_started_before_redis_waits_for_it_then_serves() {
    let (mut redis, dir, config) = outage_setup("early");
    redis.stop();
    let log = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let t0 = Instant::now();
    let starter = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(1_500));
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(redis.restart());
        redis
    });
    let mut host = Host::spawn_logged(&config, "e0", &[], Some(std::sync::Arc::clone(&log)));
    let _redis = starter.join().unwrap();
    assert!(
        t0.elapsed() >= Duration::from_millis(1_500),
        "it served before Redis was up"
    );
    let text = log.lock().unwrap().clone();
    let attempts = text.matches("location store unreachable; retrying").count();
    assert!(
        (2..=10).contains(&attempts),
        "a few backed-off attempts in 1.5 s, each logged (not a spin): {attempts}\n{text}"
    );
    assert_eq!(host.status()["state"], "serving");
    assert!(
        host.ctl(&["drain", "--deadline-ms", "2000"])
            .status
            .success()
    );
    assert!(host.wait_exit().success());
    let _ = std::fs::remove_dir_all(&dir);
}

/// A host killed with kill -9 and restarted on the same fixed mesh port (a container restart
/// in the same pod) comes back under a new RID while its old descriptor still lives until its
/// lease lapses. The peer dials both RIDs at the same endpoint; removing the old one once its
/// descriptor lapsed must not tear down the new one's connection (it once did: the survivor
/// saw the restarted host `NotConnected` for good — found by the chaos run).
#[test]
fn a_host_restarted_on_the_same_port_stays_connected_after_its_old_descriptor_lapses() {
    let (_redis, dir, config) = outage_setup("sameport");
    let port = fault_proxy::port_below_the_ephemeral_range();
    let fixed = [("ZLINK_MESH_PORT", port.to_string())];
    let a = Host::spawn(&config, "p0");
    let mut b = Host::spawn_with(&config, "p1", &fixed);
    a.wait_status("b ready", |s| s["peers_ready"] == 1);
    b.child.kill().unwrap();
    let _ = b.child.wait();
    let b2 = Host::spawn_with(&config, "p1", &fixed);
    assert_ne!(b2.rid, b.rid);
    let ready = |s: &Value| {
        s["peers"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["rid"] == b2.rid && p["ready"] == true)
    };
    a.wait_status("the restarted host ready", ready);
    // The old RID's descriptor lapses with its lease (TTL 3 s) and its entry is removed.
    a.wait_status("the old RID gone", |s| {
        !s["peers"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["rid"] == b.rid)
    });
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(2) {
        let s = a.status();
        assert!(ready(&s), "the restarted host must stay connected: {s}");
        std::thread::sleep(Duration::from_millis(100));
    }
    drop(b);
    let mut hosts = vec![a, b2];
    common_procs::drain_all(&mut hosts);
    let _ = std::fs::remove_dir_all(&dir);
}
