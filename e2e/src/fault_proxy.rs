//! A TCP fault proxy on 127.0.0.1 for chaos runs (issue 20 item 4): it listens on a loopback
//! port and forwards every connection to one target on 127.0.0.1, and on command **cuts**
//! (closes every live connection and refuses new ones), **stalls** (keeps connections open but
//! forwards nothing) or **delays** (holds every chunk for a fixed time before forwarding) the
//! traffic, until told to pass again.
//!
//! It stands in for a flaky network between mesh nodes: a node advertises the proxy's port
//! (`mesh.advertise_port`), so every peer that dials it crosses the proxy.
//!
//! Loopback only: [`FaultProxy::start`] refuses a target that is not 127.0.0.1, and the
//! listener binds 127.0.0.1. Std only (threads, no runtime), so process tests can include this
//! file with `#[path]`.

#![allow(dead_code)] // included by several test binaries, each using a subset

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A free loopback port for a node to bind later, from below the kernel's ephemeral range: a
/// port taken with `bind(0)` and released is the one the next `bind(0)` of another node or
/// process tends to get (seen in CI as `Address already in use`), while nothing in our tests
/// binds or dials from below that range by itself.
pub fn port_below_the_ephemeral_range() -> u16 {
    let low: u16 = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|r| r.split_whitespace().next()?.parse().ok())
        .unwrap_or(32_768);
    let base = low.saturating_sub(12_000).max(1_024);
    let span = low - base;
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos())
        ^ std::process::id();
    (0..u32::from(span))
        .map(|i| base + ((seed.wrapping_add(i.wrapping_mul(7_919))) % u32::from(span)) as u16)
        .find(|p| std::net::TcpListener::bind(("127.0.0.1", *p)).is_ok())
        .expect("a free port below the ephemeral range")
}

/// What the proxy does to traffic now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Forward everything at once.
    Pass,
    /// Every live connection is closed; new ones are accepted and closed at once.
    Cut,
    /// Connections stay open; nothing is forwarded until the mode changes.
    Stall,
    /// Every chunk waits this long before it is forwarded.
    Delay(Duration),
}

/// Why the proxy did not start.
#[derive(Debug)]
pub enum ProxyError {
    /// The target is not on 127.0.0.1.
    NotLoopback(SocketAddr),
    /// The listener could not be bound.
    Bind(std::io::Error),
}

impl std::fmt::Display for ProxyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::NotLoopback(a) => {
                write!(f, "fault proxy target {a} is not on 127.0.0.1: refused")
            }
            Self::Bind(e) => write!(f, "fault proxy cannot bind 127.0.0.1: {e}"),
        }
    }
}

impl std::error::Error for ProxyError {}

struct Shared {
    mode: Mutex<Mode>,
    /// Bumped on every mode change: a cut closes connections opened before it.
    cut_epoch: AtomicU64,
    stop: AtomicBool,
    /// Both halves of every live connection, with the cut epoch it was opened in.
    live: Mutex<Vec<(u64, TcpStream, TcpStream)>>,
    forwarded: AtomicU64,
    accepted: AtomicU64,
    refused: AtomicU64,
}

/// A running proxy; stopped on drop.
pub struct FaultProxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
}

impl FaultProxy {
    /// Listen on `127.0.0.1:listen_port` (0: ephemeral) and forward to `target`.
    ///
    /// # Errors
    /// [`ProxyError::NotLoopback`] for a target other than 127.0.0.1, [`ProxyError::Bind`].
    pub fn start(listen_port: u16, target: SocketAddr) -> Result<Self, ProxyError> {
        if target.ip() != std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST) {
            return Err(ProxyError::NotLoopback(target));
        }
        let listener = TcpListener::bind(("127.0.0.1", listen_port)).map_err(ProxyError::Bind)?;
        let addr = listener.local_addr().map_err(ProxyError::Bind)?;
        listener.set_nonblocking(true).map_err(ProxyError::Bind)?;
        let shared = Arc::new(Shared {
            mode: Mutex::new(Mode::Pass),
            cut_epoch: AtomicU64::new(0),
            stop: AtomicBool::new(false),
            live: Mutex::new(Vec::new()),
            forwarded: AtomicU64::new(0),
            accepted: AtomicU64::new(0),
            refused: AtomicU64::new(0),
        });
        let s = Arc::clone(&shared);
        std::thread::spawn(move || accept_loop(&listener, target, &s));
        Ok(Self { addr, shared })
    }

    /// The listening address (always 127.0.0.1).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Change the mode. `Cut` closes every live connection at once.
    pub fn set(&self, mode: Mode) {
        *self
            .shared
            .mode
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = mode;
        if mode == Mode::Cut {
            self.shared.cut_epoch.fetch_add(1, Ordering::AcqRel);
            let live = std::mem::take(
                &mut *self
                    .shared
                    .live
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner),
            );
            for (_, a, b) in live {
                let _ = a.shutdown(Shutdown::Both);
                let _ = b.shutdown(Shutdown::Both);
            }
        }
    }

    /// Bytes forwarded so far (both directions).
    pub fn forwarded(&self) -> u64 {
        self.shared.forwarded.load(Ordering::Relaxed)
    }

    /// Connections accepted and forwarded so far.
    pub fn accepted(&self) -> u64 {
        self.shared.accepted.load(Ordering::Relaxed)
    }

    /// Connections refused because the proxy was cut.
    pub fn refused(&self) -> u64 {
        self.shared.refused.load(Ordering::Relaxed)
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        self.set(Mode::Cut);
    }
}

fn mode(s: &Shared) -> Mode {
    *s.mode
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn accept_loop(listener: &TcpListener, target: SocketAddr, s: &Arc<Shared>) {
    while !s.stop.load(Ordering::Acquire) {
        match listener.accept() {
            Ok((client, _)) => {
                if mode(s) == Mode::Cut {
                    s.refused.fetch_add(1, Ordering::Relaxed);
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                }
                let Ok(server) = TcpStream::connect_timeout(&target, Duration::from_secs(2)) else {
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                };
                let _ = client.set_nonblocking(false);
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                let epoch = s.cut_epoch.load(Ordering::Acquire);
                let (Ok(c2), Ok(s2)) = (client.try_clone(), server.try_clone()) else {
                    continue;
                };
                s.live
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .push((epoch, c2, s2));
                s.accepted.fetch_add(1, Ordering::Relaxed);
                for (from, to) in [(&client, &server), (&server, &client)] {
                    let (Ok(from), Ok(to)) = (from.try_clone(), to.try_clone()) else {
                        continue;
                    };
                    let s = Arc::clone(s);
                    std::thread::spawn(move || pump(from, to, epoch, &s));
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(_) => std::thread::sleep(Duration::from_millis(5)),
        }
    }
}

/// Copy `from` → `to` under the current mode until either side closes or a cut ends it.
fn pump(mut from: TcpStream, mut to: TcpStream, epoch: u64, s: &Shared) {
    let _ = from.set_read_timeout(Some(Duration::from_millis(50)));
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        if s.stop.load(Ordering::Acquire) || s.cut_epoch.load(Ordering::Acquire) != epoch {
            break;
        }
        match mode(s) {
            Mode::Stall => {
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
            Mode::Cut => break,
            Mode::Pass | Mode::Delay(_) => {}
        }
        let n = match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                continue;
            }
            Err(_) => break,
        };
        // A chunk read just before a stall or delay began waits for it too.
        loop {
            match mode(s) {
                Mode::Stall if s.cut_epoch.load(Ordering::Acquire) == epoch => {
                    std::thread::sleep(Duration::from_millis(10));
                }
                Mode::Delay(d) => {
                    std::thread::sleep(d);
                    break;
                }
                Mode::Stall | Mode::Pass | Mode::Cut => break,
            }
        }
        if s.cut_epoch.load(Ordering::Acquire) != epoch {
            break;
        }
        // Counted before the write, so a peer that got the bytes sees them counted.
        s.forwarded.fetch_add(n as u64, Ordering::Relaxed);
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = from.shutdown(Shutdown::Both);
    let _ = to.shutdown(Shutdown::Both);
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::time::Instant;

    /// An echo server on 127.0.0.1.
    fn echo() -> SocketAddr {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        std::thread::spawn(move || {
            for c in l.incoming() {
                let Ok(mut c) = c else { break };
                std::thread::spawn(move || {
                    let mut buf = [0u8; 1024];
                    while let Ok(n) = c.read(&mut buf) {
                        if n == 0 || c.write_all(&buf[..n]).is_err() {
                            break;
                        }
                    }
                });
            }
        });
        addr
    }

    fn round_trip(c: &mut TcpStream, msg: &[u8]) -> std::io::Result<Vec<u8>> {
        c.write_all(msg)?;
        let mut got = vec![0u8; msg.len()];
        c.read_exact(&mut got)?;
        Ok(got)
    }

    #[test]
    fn only_127_0_0_1_is_a_target() {
        // Refused before anything is dialed; only loopback and unspecified addresses are named
        // here (tests never name another range).
        for refused in ["127.0.0.2:80", "127.1.2.3:80", "0.0.0.0:80", "[::1]:80"] {
            let target: SocketAddr = refused.parse().unwrap();
            assert!(
                matches!(
                    FaultProxy::start(0, target),
                    Err(ProxyError::NotLoopback(_))
                ),
                "{refused} must be refused"
            );
        }
    }

    #[test]
    fn pass_cut_stall_and_delay_do_what_they_say() {
        let p = FaultProxy::start(0, echo()).unwrap();
        assert_eq!(p.addr().ip().to_string(), "127.0.0.1");
        let mut c = TcpStream::connect(p.addr()).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        assert_eq!(round_trip(&mut c, b"hello").unwrap(), b"hello");
        assert!(p.forwarded() >= 10);

        // Delay: a round trip takes at least two delays (one each way).
        p.set(Mode::Delay(Duration::from_millis(100)));
        let t0 = Instant::now();
        assert_eq!(round_trip(&mut c, b"slow").unwrap(), b"slow");
        assert!(
            t0.elapsed() >= Duration::from_millis(200),
            "{:?}",
            t0.elapsed()
        );

        // Stall: nothing comes back while stalled; everything does after.
        p.set(Mode::Stall);
        c.write_all(b"held").unwrap();
        c.set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        let mut b = [0u8; 4];
        assert!(
            c.read_exact(&mut b).is_err(),
            "stalled traffic must not pass"
        );
        p.set(Mode::Pass);
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        c.read_exact(&mut b).unwrap();
        assert_eq!(
            &b, b"held",
            "stalled traffic is delivered once the stall ends"
        );

        // Cut: the live connection closes and a new one is refused.
        p.set(Mode::Cut);
        let mut one = [0u8; 1];
        let closed = matches!(c.read(&mut one), Ok(0) | Err(_));
        assert!(closed, "the live connection must be closed");
        let mut d = TcpStream::connect(p.addr()).unwrap();
        d.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        assert!(round_trip(&mut d, b"x").is_err());
        assert!(p.refused() >= 1);

        // Pass again: new connections work.
        p.set(Mode::Pass);
        let mut e = TcpStream::connect(p.addr()).unwrap();
        e.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        assert_eq!(round_trip(&mut e, b"back").unwrap(), b"back");
    }
}
