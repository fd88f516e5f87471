//! The operator's HostAdmin client (`zlink_operator::hosts::AdminHosts`) against real gRPC
//! servers: `zlink-fake-node` processes (the test double of a node pod, see its docs) on their
//! own 127.0.0.x addresses, one port for all, as pods have.
//!
//! - status streams arrive and wake the Mesh; peers show as Ready peers;
//! - a `Relocate` sent twice while in flight reaches the host once, and its completion and
//!   SafeToShutdown show in the observation;
//! - `UNIMPLEMENTED`, a wrong token, nothing listening and a crashed host are each typed;
//! - a restarted host shows with its new RID.

use std::collections::{BTreeMap, HashSet};
use std::io::{Read as _, Write as _};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context as _, bail, ensure};
use futures::StreamExt as _;
use kube::runtime::reflector::ObjectRef;
use zlink_operator::crd::Mesh;
use zlink_operator::hosts::{AdminHosts, Hosts, PodAddr, RelocateCall};
use zlink_operator::planner::{HostObservation, HostState, HostView, Mode, RelocationState};

const TOKEN: &str = "test-admin-token";

/// A free port, and a distinct loopback /24 slot per test so tests in parallel never share an
/// address.
fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr").port()
}

fn ip(slot: u8, n: u8) -> String {
    format!("127.0.{slot}.{n}")
}

struct Fake(Child);

impl Drop for Fake {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn fake(ip: &str, port: u16, script: &str, dir: &std::path::Path, name: &str) -> Fake {
    let child = Command::new(env!("CARGO_BIN_EXE_zlink-fake-node"))
        .env_clear()
        .env("ZLINK_ADMIN_GRPC_LISTEN", format!("{ip}:{port}"))
        .env("ZLINK_ADMIN_HTTP_LISTEN", format!("{ip}:{}", port + 1))
        .env("ZLINK_ADMIN_TOKEN", TOKEN)
        .env("ZLINK_APPLICATION_VERSION", "3")
        .env("FAKE_NODE_SCRIPT", script)
        .env("FAKE_NODE_OBJECTS", "5")
        .env("FAKE_NODE_STEP_MS", "150")
        .env("FAKE_NODE_DIR", dir)
        .env("POD_NAME", name)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn zlink-fake-node");
    Fake(child)
}

fn addr(name: &str, ip: &str) -> PodAddr {
    PodAddr {
        mesh: ObjectRef::<Mesh>::new("game").within("ns"),
        name: name.into(),
        uid: format!("uid-{name}"),
        ip: ip.into(),
    }
}

async fn until<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> anyhow::Result<T> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(v) = f() {
            return Ok(v);
        }
        if tokio::time::Instant::now() > deadline {
            bail!("timed out waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn status(o: HostObservation) -> Option<HostView> {
    match o {
        HostObservation::Status(v) => Some(v),
        _ => None,
    }
}

/// `GET /calls` of a fake node.
fn calls(ip: &str, port: u16) -> anyhow::Result<BTreeMap<String, u64>> {
    let mut s = std::net::TcpStream::connect((ip, port + 1))?;
    write!(s, "GET /calls HTTP/1.0\r\nHost: x\r\n\r\n")?;
    let mut body = String::new();
    s.read_to_string(&mut body)?;
    let json = body.split("\r\n\r\n").nth(1).context("no body")?;
    Ok(serde_json::from_str(json)?)
}

fn temp_dir(tag: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("zlink-fake-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

#[tokio::test]
async fn status_streams_wake_the_mesh_and_a_relocate_reaches_the_host_once() -> anyhow::Result<()> {
    let (port, dir) = (free_port(), temp_dir("relocate"));
    let (a_ip, b_ip) = (ip(31, 1), ip(31, 2));
    let _a = fake(&a_ip, port, "succeed", &dir, "a");
    let _b = fake(&b_ip, port, "succeed", &dir, "b");
    let (tx, mut wake) = futures::channel::mpsc::unbounded();
    let hosts = AdminHosts::new(port, tx);
    let (a, b) = (addr("a", &a_ip), addr("b", &b_ip));
    let vb = until("b serving", || status(hosts.observe(&b, TOKEN))).await?;
    let va = until("a serving with b as a Ready peer", || {
        status(hosts.observe(&a, TOKEN)).filter(|v| v.ready_peers.contains(&vb.rid))
    })
    .await?;
    ensure!(
        va.state == HostState::Serving && va.version == 3 && va.objects == 5,
        "{va:?}"
    );
    ensure!(va.safe_to_shutdown && va.relocation.is_none());
    ensure!(va.rid.starts_with("a-"), "rid {}", va.rid);
    let woken = tokio::time::timeout(Duration::from_secs(5), wake.next())
        .await
        .context("no wake-up")?
        .context("wake channel closed")?;
    ensure!(woken == ObjectRef::<Mesh>::new("game").within("ns"));

    // A channel weight goes to the host and shows in its next status.
    hosts.set_channel_weight(&a, TOKEN, "chat", 9);
    until("chat weight 9 on a", || {
        hosts
            .channel_weights(&a)
            .filter(|w| w.get("chat") == Some(&9))
    })
    .await?;

    let call = RelocateCall {
        id: "uid-a-1".into(),
        mode: Mode::RollingUpdate,
        target_version: 4,
        deadline_ms: 5_000,
        target_rids: vec![vb.rid.clone()],
    };
    hosts.relocate(&a, TOKEN, call.clone());
    hosts.relocate(&a, TOKEN, call.clone());
    let done = until("a relocated, completed and safe", || {
        status(hosts.observe(&a, TOKEN))
            .filter(|v| v.safe_to_shutdown && v.state == HostState::Relocated)
    })
    .await?;
    let r = done.relocation.context("no relocation")?;
    ensure!(
        r.id == "uid-a-1" && r.state == RelocationState::Completed,
        "{r:?}"
    );
    ensure!(done.objects == 0);
    ensure!(
        calls(&a_ip, port)? == BTreeMap::from([("uid-a-1".to_owned(), 1)]),
        "two calls in flight reached the host"
    );
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

#[tokio::test]
async fn unimplemented_a_wrong_token_and_nothing_listening_are_typed() -> anyhow::Result<()> {
    let (port, dir) = (free_port(), temp_dir("typed"));
    let c_ip = ip(32, 1);
    let _c = fake(&c_ip, port, "unimplemented", &dir, "c");
    let (tx, _wake) = futures::channel::mpsc::unbounded();
    let hosts = AdminHosts::new(port, tx);
    let c = addr("c", &c_ip);
    until("c serving", || status(hosts.observe(&c, TOKEN))).await?;
    hosts.relocate(
        &c,
        TOKEN,
        RelocateCall {
            id: "uid-c-1".into(),
            mode: Mode::PlannedMaintenance,
            target_version: 3,
            deadline_ms: 1_000,
            target_rids: Vec::new(),
        },
    );
    until("relocate_unsupported", || {
        status(hosts.observe(&c, TOKEN)).filter(|v| v.relocate_unsupported)
    })
    .await?;
    until("AuthFailed with a wrong token", || {
        (hosts.observe(&c, "wrong") == HostObservation::AuthFailed).then_some(())
    })
    .await?;
    let nobody = addr("d", &ip(32, 2));
    until("Unreachable with nothing listening", || {
        (hosts.observe(&nobody, TOKEN) == HostObservation::Unreachable).then_some(())
    })
    .await?;
    // Pods gone from the mesh are no longer watched: a later look starts afresh (no status
    // yet), while a kept pod keeps its stream.
    until("c serving again with the right token", || {
        status(hosts.observe(&c, TOKEN))
    })
    .await?;
    hosts.retain(&c.mesh, &HashSet::from([c.uid.clone()]));
    ensure!(
        matches!(hosts.observe(&c, TOKEN), HostObservation::Status(_)),
        "a kept pod lost its stream"
    );
    hosts.retain(&c.mesh, &HashSet::new());
    ensure!(
        hosts.observe(&c, TOKEN) == HostObservation::Unknown,
        "a forgotten pod kept its stream"
    );
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

#[tokio::test]
async fn a_crashed_host_is_unreachable_and_its_restart_shows_a_new_rid() -> anyhow::Result<()> {
    let (port, dir) = (free_port(), temp_dir("crash"));
    let e_ip = ip(33, 1);
    let mut e = fake(&e_ip, port, "crash", &dir, "e");
    let (tx, _wake) = futures::channel::mpsc::unbounded();
    let hosts = AdminHosts::new(port, tx);
    let pe = addr("e", &e_ip);
    let first = until("e serving", || status(hosts.observe(&pe, TOKEN))).await?;
    hosts.relocate(
        &pe,
        TOKEN,
        RelocateCall {
            id: "uid-e-1".into(),
            mode: Mode::PlannedMaintenance,
            target_version: 3,
            deadline_ms: 1_000,
            target_rids: Vec::new(),
        },
    );
    let code = tokio::task::spawn_blocking(move || {
        let s = e.0.wait();
        (s, e)
    })
    .await?;
    ensure!(code.0?.code() == Some(137), "the crash script exits 137");
    until("Unreachable after the crash", || {
        (hosts.observe(&pe, TOKEN) == HostObservation::Unreachable).then_some(())
    })
    .await?;
    let _e2 = fake(&e_ip, port, "succeed", &dir, "e");
    let again = until("e serving again", || status(hosts.observe(&pe, TOKEN))).await?;
    ensure!(
        again.rid != first.rid,
        "a restart keeps the RID {}",
        first.rid
    );
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
