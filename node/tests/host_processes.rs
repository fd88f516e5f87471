//! Process-level node host tests (issue 8 acceptance): three real `zlink-node run` processes
//! (the built binary, configured by a YAML file plus `ZLINK_*` overrides) against a real
//! redis-server form a mesh; `zlink-node ctl status` (the real binary) shows every peer ready;
//! SIGTERM on one host drains it (`ctl watch` sees Draining then Stopped), it exits 0, its
//! descriptor disappears from Redis, and the other hosts stop selecting it.
#![allow(clippy::unwrap_used)]

#[path = "../../store/tests/support/redis_server.rs"]
mod redis_server;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::Value;

const SECRET: &str = "host-process-mesh-secret-012345";
const TOKEN: &str = "host-process-admin-token-012345";
const WAIT: Duration = Duration::from_secs(20);
const BIN: &str = env!("CARGO_BIN_EXE_zlink-node");

struct Host {
    child: Child,
    rid: String,
    grpc: String,
    http: String,
}

impl Host {
    fn spawn(config: &Path, prefix: &str) -> Host {
        Self::spawn_with(config, prefix, &[])
    }

    /// [`Host::spawn`] with extra `ZLINK_*` overrides.
    fn spawn_with(config: &Path, prefix: &str, env: &[(&str, String)]) -> Host {
        let mut child = Command::new(BIN)
            .args(["run", "--config"])
            .arg(config)
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
            // Overrides through the environment (the YAML has rid_prefix "yaml").
            .env("ZLINK_MESH_RID_PREFIX", prefix)
            .env("ZLINK_MESH_SECRET", SECRET)
            .env("ZLINK_ADMIN_TOKEN", TOKEN)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn zlink-node run");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let first: Value = serde_json::from_str(&rx.recv_timeout(WAIT).expect("announce line"))
            .expect("announce JSON");
        assert_eq!(first["state"], "serving");
        let rid = first["rid"].as_str().unwrap().to_owned();
        assert!(rid.starts_with(&format!("{prefix}-")), "{rid}");
        Host {
            child,
            rid,
            grpc: first["grpc"].as_str().unwrap().to_owned(),
            http: first["http"].as_str().unwrap().to_owned(),
        }
    }

    fn ctl(&self, args: &[&str]) -> std::process::Output {
        Command::new(BIN)
            .args(["ctl", "--json", "--addr", &format!("http://{}", self.grpc)])
            .args(args)
            .env("ZLINK_ADMIN_TOKEN", TOKEN)
            .output()
            .expect("run zlink-node ctl")
    }

    fn status(&self) -> Value {
        let out = self.ctl(&["status"]);
        assert!(
            out.status.success(),
            "ctl status: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    }

    fn wait_status(&self, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        let t0 = Instant::now();
        loop {
            let s = self.status();
            if pred(&s) {
                return s;
            }
            assert!(t0.elapsed() < WAIT, "{what}: last status {s}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn wait_exit(&mut self) -> std::process::ExitStatus {
        let t0 = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(t0.elapsed() < WAIT, "{} did not exit", self.rid);
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

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

fn metric(text: &str, sample: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(sample)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no sample {sample}"))
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

fn http_get(addr: &str, path: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap();
    (
        head.split_whitespace().nth(1).unwrap().parse().unwrap(),
        body.to_owned(),
    )
}

/// A redis-server and a host configuration for the relocation process tests (mesh `mesh`):
/// short timings, relocation before the drain with a 6 s Message Follow window and a 1 s route
/// cache (5 s shorter, routing §2.5), a 20 s drain deadline. Returns the server (keep it), the
/// temporary directory and the configuration file.
fn relocation_setup(mesh: &str) -> (redis_server::RedisServer, PathBuf, PathBuf) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let redis = rt.block_on(redis_server::RedisServer::start());
    let tag = format!("{}-{mesh}", std::process::id());
    let namespace = format!("host{mesh}-{tag}");
    let dir = std::env::temp_dir().join(format!("zlink-host{mesh}-{tag}"));
    std::fs::create_dir_all(&dir).unwrap();
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
    let mut load = Command::new(BIN)
        .args(["load", "--json", "--config"])
        .arg(&config)
        .args([
            "--counters",
            "30",
            "--messages-per-counter",
            "300",
            "--request-every",
            "3",
            "--concurrency",
            "8",
        ])
        .env("ZLINK_MESH_SECRET", SECRET)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
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
    for (i, h) in hosts.iter_mut().enumerate() {
        if i == victim {
            continue;
        }
        let out = h.ctl(&[
            "drain",
            "--deadline-ms",
            "3000",
            "--relocate-first",
            "false",
        ]);
        assert!(out.status.success());
        assert!(h.wait_exit().success());
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue 17 "Soak": three `zlink-node run` hosts on a real redis-server under a continuous
/// `zlink-node load` (one-way sends and requests to 40 counters). A seeded driver
/// (`ZLINK_SOAK_SEED` replays a run) picks a host each round and alternates the modes: it starts
/// the host's replacement first (the same application version for PlannedMaintenance, one
/// higher for RollingUpdate, so a target of the right version exists), runs
/// `ctl relocate --wait-safe` (it must end Completed), SIGTERMs the host (exit 0), for
/// `ZLINK_SOAK_SECS` (60 in `scripts/test`; 600 for the opt-in long run). Pass: the load
/// reports every numbered message applied exactly once and no failed call.
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
    let load = Command::new(BIN)
        .args(["load", "--json", "--config"])
        .arg(&config)
        .args([
            "--counters",
            "40",
            "--duration-ms",
            &(secs * 1000).to_string(),
            "--request-every",
            "3",
            "--concurrency",
            "8",
        ])
        .env("ZLINK_MESH_SECRET", SECRET)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
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
    eprintln!("soak: {round} rounds, load {r}");
    for h in hosts.iter_mut() {
        let out = h.ctl(&[
            "drain",
            "--deadline-ms",
            "3000",
            "--relocate-first",
            "false",
        ]);
        assert!(out.status.success());
        assert!(h.wait_exit().success());
    }
    let _ = std::fs::remove_dir_all(&dir);
}
