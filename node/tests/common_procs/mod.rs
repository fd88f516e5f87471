//! `zlink-node run` processes for the process tests: spawn one (the built binary, a YAML
//! file plus `ZLINK_*` overrides), read its announce line, drive it with `zlink-node ctl`, read
//! its HTTP endpoints, kill it on drop.
#![allow(dead_code, clippy::unwrap_used)] // each test binary uses a subset

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::Value;

pub const SECRET: &str = "host-process-mesh-secret-012345";
pub const TOKEN: &str = "host-process-admin-token-012345";
pub const WAIT: Duration = Duration::from_secs(20);
pub const BIN: &str = env!("CARGO_BIN_EXE_zlink-node");

pub struct Host {
    pub child: Child,
    pub rid: String,
    pub grpc: String,
    pub http: String,
    /// The STREAM listener, when `stream.listen` is set.
    pub stream: Option<String>,
}

impl Host {
    pub fn spawn(config: &Path, prefix: &str) -> Host {
        Self::spawn_with(config, prefix, &[])
    }

    /// [`Host::spawn`] with extra `ZLINK_*` overrides.
    pub fn spawn_with(config: &Path, prefix: &str, env: &[(&str, String)]) -> Host {
        Self::spawn_logged(config, prefix, env, None)
    }

    /// [`Host::spawn_with`], its stderr (the logs) collected into `log` when given (echoed
    /// to the test's stderr either way).
    pub fn spawn_logged(
        config: &Path,
        prefix: &str,
        env: &[(&str, String)],
        log: Option<std::sync::Arc<std::sync::Mutex<String>>>,
    ) -> Host {
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
            .stderr(if log.is_some() {
                Stdio::piped()
            } else {
                Stdio::inherit()
            })
            .spawn()
            .expect("spawn zlink-node run");
        if let (Some(log), Some(stderr)) = (log, child.stderr.take()) {
            std::thread::spawn(move || {
                for line in BufReader::new(stderr).lines() {
                    let Ok(line) = line else { break };
                    eprintln!("{line}");
                    let mut l = log.lock().unwrap();
                    l.push_str(&line);
                    l.push('\n');
                }
            });
        }
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
            stream: first["stream"].as_str().map(str::to_owned),
        }
    }

    pub fn ctl(&self, args: &[&str]) -> std::process::Output {
        Command::new(BIN)
            .args(["ctl", "--json", "--addr", &format!("http://{}", self.grpc)])
            .args(args)
            .env("ZLINK_ADMIN_TOKEN", TOKEN)
            .output()
            .expect("run zlink-node ctl")
    }

    pub fn status(&self) -> Value {
        let out = self.ctl(&["status"]);
        assert!(
            out.status.success(),
            "ctl status: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    }

    pub fn wait_status(&self, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
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

    pub fn wait_exit(&mut self) -> std::process::ExitStatus {
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

pub fn http_get(addr: &str, path: &str) -> (u16, String) {
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

pub fn metric(text: &str, sample: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(sample)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no sample {sample}"))
}

/// Drain every host without relocating (2 s deadline) and check each exits 0.
pub fn drain_all(hosts: &mut [Host]) {
    for h in hosts {
        let out = h.ctl(&[
            "drain",
            "--deadline-ms",
            "2000",
            "--relocate-first",
            "false",
        ]);
        assert!(out.status.success(), "ctl drain {}", h.rid);
        assert!(h.wait_exit().success(), "{} exited non-zero", h.rid);
    }
}

/// `zlink-node load --json --config <config> <args>` with the mesh secret, output piped.
pub fn load_cmd(config: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(BIN);
    c.args(["load", "--json", "--config"])
        .arg(config)
        .args(args)
        .env("ZLINK_MESH_SECRET", SECRET)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

/// The JSON report a finished `zlink-node load --json` printed.
pub fn load_report(out: &std::process::Output) -> Value {
    let stdout = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| {
        panic!(
            "load printed no report ({e}): {stdout} {}",
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// A host configuration in `dir` for the STREAM process tests: mesh `mesh` on `redis_url`
/// under `namespace`, short timings, admin and STREAM listeners on ephemeral loopback ports, no
/// relocation on shutdown, a 4 s drain deadline.
pub fn write_stream_config(dir: &Path, redis_url: &str, namespace: &str, mesh: &str) -> PathBuf {
    let path = dir.join("node.yaml");
    std::fs::write(
        &path,
        format!(
            "mesh:\n  name: {mesh}\n  rid_prefix: yaml\n\
             redis:\n  url: {redis_url}\n  namespace: {namespace}\n\
             timings:\n  probe_interval_ms: 100\n  liveness_deadline_ms: 3000\n  lease_ttl_ms: 6000\n  discovery_poll_ms: 100\n\
             admin:\n  grpc_listen: 127.0.0.1:0\n  http_listen: 127.0.0.1:0\n\
             stream:\n  listen: 127.0.0.1:0\n\
             relocation:\n  on_shutdown: none\n\
             drain_deadline_ms: 4000\nlog_level: warn\n"
        ),
    )
    .unwrap();
    path
}
