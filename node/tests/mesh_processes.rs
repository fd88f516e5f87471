//! Multi-process mesh: real `zlink-node peer` processes (the built binary) on 127.0.0.1, driven
//! over stdin/stdout — discovery through a real `redis-server`, requests across processes,
//! liveness across a `SIGSTOP`ped process and recovery after `SIGCONT`.
#![allow(clippy::unwrap_used)]

#[path = "../../store/tests/support/redis_server.rs"]
mod redis_server;

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::Value;

const SECRET: &str = "multi-process-mesh-secret-0123";
const WAIT: Duration = Duration::from_secs(15);

struct Proc {
    child: Child,
    stdin: ChildStdin,
    lines: mpsc::Receiver<String>,
    rid: String,
    endpoint: String,
}

impl Proc {
    fn spawn(args: &[String]) -> Proc {
        let mut child = Command::new(env!("CARGO_BIN_EXE_zlink-node"))
            .arg("peer")
            .args(args)
            .env("ZLINK_MESH_SECRET", SECRET)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn zlink-node");
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let stdin = child.stdin.take().unwrap();
        let first: Value =
            serde_json::from_str(&lines.recv_timeout(WAIT).expect("startup line")).unwrap();
        Proc {
            child,
            stdin,
            lines,
            rid: first["rid"].as_str().unwrap().to_owned(),
            endpoint: first["endpoint"].as_str().unwrap().to_owned(),
        }
    }

    fn cmd(&mut self, line: &str) -> Value {
        writeln!(self.stdin, "{line}").unwrap();
        self.stdin.flush().unwrap();
        serde_json::from_str(&self.lines.recv_timeout(WAIT).expect("answer")).unwrap()
    }

    fn peer_state(&mut self, rid: &str) -> Option<(String, u64)> {
        let peers = self.cmd("peers");
        peers
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["rid"] == rid)
            .map(|p| {
                (
                    p["state"].as_str().unwrap().to_owned(),
                    p["epochs"].as_u64().unwrap(),
                )
            })
    }

    /// Poll `peers` every 10 ms until `rid` is in `state`; returns the time it took.
    fn wait_state(
        &mut self,
        rid: &str,
        want: impl Fn(&str) -> bool,
        timeout: Duration,
    ) -> Duration {
        let t0 = Instant::now();
        loop {
            if let Some((s, _)) = self.peer_state(rid)
                && want(&s)
            {
                return t0.elapsed();
            }
            assert!(
                t0.elapsed() < timeout,
                "{} never saw {rid} in the wanted state",
                self.rid
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn signal(&self, sig: &str) {
        let ok = Command::new("kill")
            .args([sig, &self.child.id().to_string()])
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill {sig}");
    }

    fn quit(mut self) {
        let _ = writeln!(self.stdin, "quit");
        let _ = self.stdin.flush();
        let t0 = Instant::now();
        while t0.elapsed() < WAIT {
            if let Ok(Some(status)) = self.child.try_wait() {
                assert!(status.success(), "{} exited with {status}", self.rid);
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("{} did not shut down", self.rid);
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn args(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| (*s).to_owned()).collect()
}

#[test]
fn processes_discover_each_other_through_redis_and_answer_requests() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let server = rt.block_on(redis_server::RedisServer::start());
    let ns = format!("procs-{}", std::process::id());
    let mut procs: Vec<Proc> = (0..3)
        .map(|i| {
            Proc::spawn(&args(&[
                "--mesh",
                "m",
                "--rid-prefix",
                &format!("p{i}"),
                "--redis",
                &server.url(),
                "--redis-namespace",
                &ns,
                "--probe-interval-ms",
                "100",
                "--liveness-deadline-ms",
                "1500",
                "--discovery-poll-ms",
                "100",
                "--lease-ttl-ms",
                "3000",
            ]))
        })
        .collect();
    let rids: Vec<String> = procs.iter().map(|p| p.rid.clone()).collect();
    for p in procs.iter_mut() {
        for rid in &rids {
            if *rid != p.rid {
                p.wait_state(rid, |s| s == "Ready", WAIT);
            }
        }
    }
    for i in 0..3 {
        let target = rids[(i + 1) % 3].clone();
        let r = procs[i].cmd(&format!("request {target} {i}"));
        assert_eq!(r["ok"].as_u64(), Some(i as u64 + 1), "{r}");
        let r = procs[i].cmd(&format!("send {target} 1"));
        assert!(r["ok"].is_null() && r.get("err").is_none(), "{r}");
    }
    // Node direct is never retargeted: an unknown RID is Unavailable, not another node.
    let r = procs[0].cmd("request no-such-node 1 500");
    assert_eq!(r["err"], "Unavailable", "{r}");
    for p in procs {
        p.quit();
    }
}

#[test]
fn a_stopped_process_is_declared_dead_by_liveness_and_recovers_after_sigcont() {
    const DEADLINE_MS: u64 = 400;
    let timing = ["--probe-interval-ms", "50", "--liveness-deadline-ms", "400"];
    let mut b_args = args(&["--mesh", "m", "--rid", "proc-b"]);
    b_args.extend(args(&timing));
    let mut b = Proc::spawn(&b_args);
    let mut a_args = args(&["--mesh", "m", "--rid", "proc-a", "--peer"]);
    a_args.push(format!("{}@proc-b", b.endpoint));
    a_args.extend(args(&timing));
    let mut a = Proc::spawn(&a_args);
    a.wait_state("proc-b", |s| s == "Ready", WAIT);
    b.wait_state("proc-a", |s| s == "Ready", WAIT);
    // The TCP connection stays up while the process is stopped: only liveness can tell.
    b.signal("-STOP");
    let took = a.wait_state("proc-b", |s| s != "Ready", WAIT);
    assert!(
        took <= Duration::from_millis(DEADLINE_MS + 300),
        "stopped peer declared dead after {took:?} (deadline {DEADLINE_MS} ms + 300 ms tolerance)"
    );
    let r = a.cmd("request proc-b 1 300");
    assert_eq!(r["err"], "Unavailable", "{r}");
    b.signal("-CONT");
    a.wait_state("proc-b", |s| s == "Ready", WAIT);
    let (_, epochs) = a.peer_state("proc-b").unwrap();
    assert_eq!(epochs, 2, "recovery is a new connection epoch");
    let r = a.cmd("request proc-b 41");
    assert_eq!(r["ok"], 42, "{r}");
    a.quit();
    b.quit();
}
