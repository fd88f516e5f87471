//! `zlink-chat` against real `zlink-node run` hosts (issue 19 item 9, acceptance 8): two chat
//! processes with scripted stdin, each logged in on another host of a two-host mesh on a real
//! `redis-server`, join one room and see each other's lines; a bad user name is refused with a
//! clear message and exit code 1.
#![allow(clippy::unwrap_used)]

#[path = "../../store/tests/support/redis_server.rs"]
mod redis_server;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

mod common_procs;
use common_procs::{BIN, Host, WAIT, drain_all, write_stream_config};

/// The `zlink-chat` binary next to `zlink-node` (built by a workspace test run; built here
/// when this package's tests run alone).
fn chat_bin() -> PathBuf {
    let bin = Path::new(BIN).with_file_name("zlink-chat");
    if !bin.exists() {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let ok = Command::new(cargo)
            .args(["build", "-p", "zlink-connector", "--bin", "zlink-chat"])
            .status()
            .unwrap()
            .success();
        assert!(ok, "cargo build -p zlink-connector --bin zlink-chat failed");
    }
    bin
}

/// One `zlink-chat` process: its stdin, and its stdout / stderr lines as they come.
struct Chat {
    child: Child,
    stdin: Option<ChildStdin>,
    out: mpsc::Receiver<String>,
    err: mpsc::Receiver<String>,
    seen_out: Vec<String>,
    seen_err: Vec<String>,
}

fn lines_of(r: impl std::io::Read + Send + 'static) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for l in BufReader::new(r).lines().map_while(Result::ok) {
            eprintln!("[chat] {l}");
            if tx.send(l).is_err() {
                break;
            }
        }
    });
    rx
}

impl Chat {
    fn spawn(addr: &str, user: &str) -> Self {
        let mut child = Command::new(chat_bin())
            .args(["--addr", addr, "--user", user])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let out = lines_of(child.stdout.take().unwrap());
        let err = lines_of(child.stderr.take().unwrap());
        Self {
            stdin: child.stdin.take(),
            child,
            out,
            err,
            seen_out: Vec::new(),
            seen_err: Vec::new(),
        }
    }

    fn type_line(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().unwrap();
        writeln!(stdin, "{line}").unwrap();
        stdin.flush().unwrap();
    }

    /// Wait until a line of stdout (`err` false) or stderr contains `needle`.
    fn expect(&mut self, err: bool, needle: &str) {
        let deadline = Instant::now() + WAIT;
        loop {
            let seen = if err { &self.seen_err } else { &self.seen_out };
            if seen.iter().any(|l| l.contains(needle)) {
                return;
            }
            let rx = if err { &self.err } else { &self.out };
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(l) if err => self.seen_err.push(l),
                Ok(l) => self.seen_out.push(l),
                Err(_) => panic!(
                    "no {} line with {needle:?} within {WAIT:?}; stdout {:?}, stderr {:?}",
                    if err { "stderr" } else { "stdout" },
                    self.seen_out,
                    self.seen_err
                ),
            }
        }
    }

    fn quit(mut self) -> std::process::ExitStatus {
        self.type_line("/quit");
        drop(self.stdin.take());
        self.child.wait().unwrap()
    }
}

#[test]
fn two_chat_processes_on_two_hosts_see_each_others_lines() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let redis = rt.block_on(redis_server::RedisServer::start());
    let tag = format!("{}-chat", std::process::id());
    let dir = std::env::temp_dir().join(format!("zlink-{tag}"));
    std::fs::create_dir_all(&dir).unwrap();
    let config = write_stream_config(&dir, &redis.url(), &tag, "chat");
    let mut hosts: Vec<Host> = (0..2)
        .map(|i| Host::spawn(&config, &format!("c{i}")))
        .collect();
    for h in &hosts {
        h.wait_status("one ready peer", |s| s["peers_ready"] == 1);
    }
    let mut ann = Chat::spawn(hosts[0].stream.as_deref().unwrap(), "ann");
    let mut bob = Chat::spawn(hosts[1].stream.as_deref().unwrap(), "bob");
    ann.expect(true, "* logged in as player:ann");
    bob.expect(true, "* logged in as player:bob");
    ann.type_line("/join lobby");
    ann.expect(true, "* joined lobby (1 members)");
    bob.type_line("/join lobby");
    bob.expect(true, "* joined lobby (2 members)");
    ann.type_line("hello from ann");
    bob.expect(false, "lobby ann: hello from ann");
    ann.expect(false, "lobby ann: hello from ann");
    bob.type_line("hi ann, bob here");
    ann.expect(false, "lobby bob: hi ann, bob here");
    bob.expect(false, "lobby bob: hi ann, bob here");
    assert!(ann.quit().success());
    assert!(bob.quit().success());
    // A name the host refuses ends the client with a clear message and code 1.
    let out = Command::new(chat_bin())
        .args([
            "--addr",
            hosts[0].stream.as_deref().unwrap(),
            "--user",
            "no spaces",
        ])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("login refused") && err.contains("user name"),
        "{err}"
    );
    drain_all(&mut hosts);
    drop(redis);
}

/// Issue 19 item 10: with `stream.auth_key` set, a session's first packet must be a
/// `chat.Login` whose token `zlink-node session-token` made for that user; the right token logs
/// in, another user's token and no token are refused (the client exits 1 naming it) and each
/// refused session is counted closed `Unauthenticated`.
#[test]
fn sessions_log_in_only_with_their_users_token() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let redis = rt.block_on(redis_server::RedisServer::start());
    let tag = format!("{}-chat-auth", std::process::id());
    let dir = std::env::temp_dir().join(format!("zlink-{tag}"));
    std::fs::create_dir_all(&dir).unwrap();
    let config = write_stream_config(&dir, &redis.url(), &tag, "chat");
    const KEY: &str = "a-session-key-of-32-bytes-000000";
    let key = [("ZLINK_STREAM_AUTH_KEY", KEY.to_owned())];
    let mut hosts = vec![Host::spawn_with(&config, "auth", &key)];
    let addr = hosts[0].stream.clone().unwrap();
    let token = |user: &str| {
        let out = Command::new(BIN)
            .args(["session-token", "--user", user])
            .env("ZLINK_STREAM_AUTH_KEY", KEY)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout).unwrap().trim().to_owned()
    };
    let ann_token = token("ann");
    assert_eq!(ann_token.len(), 64);
    let login = |user: &str, tok: Option<&str>| {
        let mut args = vec!["--addr", addr.as_str(), "--user", user];
        if let Some(t) = tok {
            args.extend(["--token", t]);
        }
        Command::new(chat_bin())
            .args(&args)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    let ok = login("ann", Some(&ann_token));
    assert!(ok.status.success(), "{ok:?}");
    assert!(String::from_utf8_lossy(&ok.stderr).contains("* logged in as player:ann"));
    for (user, tok, why) in [
        ("bob", Some(ann_token.as_str()), "not valid for user"),
        ("ann", None, "no token"),
    ] {
        let out = login(user, tok);
        assert_eq!(out.status.code(), Some(1), "{out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("unauthenticated") && err.contains(why),
            "{err}"
        );
    }
    let t0 = Instant::now();
    loop {
        let (_, text) = common_procs::http_get(&hosts[0].http, "/metrics");
        let refused = common_procs::metric(
            &text,
            "zlink_stream_sessions_closed_total{reason=\"Unauthenticated\"}",
        );
        if refused == 2.0 {
            break;
        }
        assert!(t0.elapsed() < WAIT, "refused sessions counted: {refused}");
        std::thread::sleep(Duration::from_millis(20));
    }
    drain_all(&mut hosts);
    drop(redis);
}

/// `ctl --json locate actor <id>`: the RID of the host that owns it now.
fn owner_of(host: &Host, id: &str) -> String {
    let out = host.ctl(&["locate", "actor", id]);
    assert!(out.status.success(), "{out:?}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["found"], true, "{v}");
    v["owner_rid"].as_str().unwrap().to_owned()
}

/// Issue 19 acceptance 8 "also during relocation" (and item 7 across processes): two chat
/// processes on two of three hosts chat in one room; then the host that owns ann's player
/// relocates (`ctl relocate`, PlannedMaintenance) while both sessions stay open.
/// The player moves to another host with its session binding — ann's session is not touched —
/// and lines typed after the move (and one typed while it runs) reach both users once.
#[test]
fn chat_keeps_flowing_while_a_players_host_relocates() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let redis = rt.block_on(redis_server::RedisServer::start());
    let tag = format!("{}-chatmove", std::process::id());
    let dir = std::env::temp_dir().join(format!("zlink-{tag}"));
    std::fs::create_dir_all(&dir).unwrap();
    let config = write_stream_config(&dir, &redis.url(), &tag, "chatmove");
    let mut hosts: Vec<Host> = (0..3)
        .map(|i| Host::spawn(&config, &format!("m{i}")))
        .collect();
    for h in &hosts {
        h.wait_status("two ready peers", |s| s["peers_ready"] == 2);
    }
    let mut ann = Chat::spawn(hosts[0].stream.as_deref().unwrap(), "ann");
    let mut bob = Chat::spawn(hosts[1].stream.as_deref().unwrap(), "bob");
    ann.expect(true, "* logged in as player:ann");
    bob.expect(true, "* logged in as player:bob");
    ann.type_line("/join lobby");
    ann.expect(true, "* joined lobby (1 members)");
    bob.type_line("/join lobby");
    bob.expect(true, "* joined lobby (2 members)");
    ann.type_line("before the move");
    bob.expect(false, "lobby ann: before the move");
    ann.expect(false, "lobby ann: before the move");
    let from = owner_of(&hosts[0], "player:ann");
    let h = hosts.iter().position(|x| x.rid == from).unwrap();
    // The relocation runs in its own thread; a line typed meanwhile still arrives.
    let relocating = {
        let grpc = hosts[h].grpc.clone();
        std::thread::spawn(move || {
            Command::new(BIN)
                .args(["ctl", "--json", "--addr", &format!("http://{grpc}")])
                .args(["relocate"])
                .env("ZLINK_ADMIN_TOKEN", common_procs::TOKEN)
                .output()
                .unwrap()
        })
    };
    ann.type_line("during the move");
    let out = relocating.join().unwrap();
    assert!(
        out.status.success(),
        "relocate: {} {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    bob.expect(false, "lobby ann: during the move");
    ann.expect(false, "lobby ann: during the move");
    let to = owner_of(&hosts[0], "player:ann");
    assert_ne!(to, from, "ann's player moved off the relocated host");
    // It moved with its session binding (42/43 on the way out, 44 from its new host).
    let sealed = common_procs::metric(
        &common_procs::http_get(&hosts[h].http, "/metrics").1,
        r#"zlink_session_events_total{event="legs_sealed"}"#,
    );
    assert!(sealed >= 1.0, "legs_sealed {sealed}");
    ann.type_line("after the move");
    bob.expect(false, "lobby ann: after the move");
    ann.expect(false, "lobby ann: after the move");
    bob.type_line("bob still here");
    ann.expect(false, "lobby bob: bob still here");
    // Neither client lost its session (the chat client prints every connection event but the
    // first `Connected` on stderr, e.g. "* Disconnected(…)", "* Reconnecting { … }").
    for c in [&mut ann, &mut bob] {
        while let Ok(l) = c.err.try_recv() {
            c.seen_err.push(l);
        }
        while let Ok(l) = c.out.try_recv() {
            c.seen_out.push(l);
        }
        assert!(
            !c.seen_err.iter().any(|l| {
                let l = l.to_lowercase();
                l.contains("disconnected") || l.contains("reconnect")
            }),
            "{:?}",
            c.seen_err
        );
    }
    // Each line once: no duplicate of a line seen.
    for c in [&ann, &bob] {
        let moved: Vec<&String> = c
            .seen_out
            .iter()
            .filter(|l| l.contains("the move"))
            .collect();
        assert_eq!(moved.len(), 3, "{moved:?}");
    }
    assert!(ann.quit().success());
    assert!(bob.quit().success());
    drain_all(&mut hosts);
    drop(redis);
}
