//! The `zlink-operator` command line ([`main`]): `run` runs the controller (see
//! [`crate::controller`]) under leader election ([`crate::leader`]), `crdgen` writes the CRDs
//! (see [`crate::crdgen`]).
//!
//! `check` is the chart's `helm test` probe: the credentials reach the API server, the CRDs
//! are served, and the operator may list Meshes and Channels where it watches.
//!
//! It lives in the library so the e2e tests can run this very `main` as a pod's process (cargo
//! gives a package's tests the paths of that package's binaries only).

use std::path::PathBuf;
use std::process::ExitCode;

fn usage() -> ExitCode {
    eprintln!(
        "usage: zlink-operator run [--namespace NS] [--admin-port PORT] [--metrics-listen ADDR]\n\
         \x20      zlink-operator check\n\
         \x20      zlink-operator crdgen [--root DIR] [--check | --kubeconform SCHEMA_DIR]\n\
         \n  run      reconcile every Mesh (of NS only, or ZLINK_OPERATOR_NAMESPACE; default: all\n\
         \x20          namespaces) with the in-cluster or KUBECONFIG credentials; the nodes' admin\n\
         \x20          API on PORT (default 7070); /metrics and /healthz on ADDR (default\n\
         \x20          0.0.0.0:8080, or ZLINK_OPERATOR_METRICS_LISTEN); stops on SIGTERM or SIGINT\n\
         \n  crdgen   write the CRDs to DIR/crds and DIR/charts/zlink/crds (DIR: the repository\n\
         \x20          root, default the current directory); --check only reports stale files\n\
         \x20          and exits 1 when there are any; --kubeconform writes the CRDs'\n\
         \x20          kubeconform schemas (<kind>-zlink-<version>.json, strict) to SCHEMA_DIR"
    );
    ExitCode::from(2)
}

/// The `zlink-operator` binary: parses `std::env::args` and runs a subcommand.
#[must_use]
pub fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some((cmd, rest)) = args.split_first() else {
        return usage();
    };
    match cmd.as_str() {
        "crdgen" => {
            let mut root = PathBuf::from(".");
            let mut check = false;
            let mut kubeconform: Option<PathBuf> = None;
            let mut it = rest.iter();
            while let Some(a) = it.next() {
                match a.as_str() {
                    "--root" => match it.next() {
                        Some(dir) => root = PathBuf::from(dir),
                        None => return usage(),
                    },
                    "--check" => check = true,
                    "--kubeconform" => match it.next() {
                        Some(dir) => kubeconform = Some(PathBuf::from(dir)),
                        None => return usage(),
                    },
                    _ => return usage(),
                }
            }
            let result = if let Some(dir) = kubeconform {
                crate::crdgen::write_kubeconform(&dir).map(|written| {
                    for p in &written {
                        println!("wrote {}", p.display());
                    }
                    ExitCode::SUCCESS
                })
            } else if check {
                crate::crdgen::stale(&root).map(|stale| {
                    for p in &stale {
                        eprintln!("stale: {} (run `zlink-operator crdgen`)", p.display());
                    }
                    if stale.is_empty() {
                        ExitCode::SUCCESS
                    } else {
                        ExitCode::FAILURE
                    }
                })
            } else {
                crate::crdgen::write_all(&root).map(|written| {
                    for p in &written {
                        println!("wrote {}", p.display());
                    }
                    ExitCode::SUCCESS
                })
            };
            result.unwrap_or_else(|e| {
                eprintln!("zlink-operator crdgen: {e:#}");
                ExitCode::FAILURE
            })
        }
        "run" => run(rest),
        "check" if rest.is_empty() => check(),
        _ => usage(),
    }
}

fn check() -> ExitCode {
    let namespace = std::env::var("ZLINK_OPERATOR_NAMESPACE")
        .ok()
        .filter(|s| !s.is_empty());
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("zlink-operator check: {e}");
            return ExitCode::FAILURE;
        }
    };
    rt.block_on(async move {
        let client = match kube::Client::try_default().await {
            Ok(c) => c,
            Err(e) => {
                eprintln!("zlink-operator check: no Kubernetes credentials: {e}");
                return ExitCode::FAILURE;
            }
        };
        match crate::controller::check(client, namespace.as_deref()).await {
            Ok(msg) => {
                println!("zlink-operator check: {msg}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("zlink-operator check: {e}");
                ExitCode::FAILURE
            }
        }
    })
}

fn run(args: &[String]) -> ExitCode {
    let mut namespace = std::env::var("ZLINK_OPERATOR_NAMESPACE")
        .ok()
        .filter(|s| !s.is_empty());
    let mut port: u16 = 7070;
    let mut metrics_listen = std::env::var("ZLINK_OPERATOR_METRICS_LISTEN")
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "0.0.0.0:8080".into());
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match (a.as_str(), it.next()) {
            ("--metrics-listen", Some(addr)) => metrics_listen.clone_from(addr),
            ("--namespace", Some(ns)) => namespace = Some(ns.clone()).filter(|s| !s.is_empty()),
            ("--admin-port", Some(p)) => match p.parse() {
                Ok(p) => port = p,
                Err(_) => {
                    eprintln!("zlink-operator run: --admin-port {p:?} is not a port");
                    return ExitCode::from(2);
                }
            },
            _ => return usage(),
        }
    }
    let Ok(metrics_addr) = metrics_listen.parse::<std::net::SocketAddr>() else {
        eprintln!("zlink-operator run: --metrics-listen {metrics_listen:?} is not host:port");
        return ExitCode::from(2);
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // ZLINK_LOG_FORMAT=json: one JSON object per line (the chart's default).
    if std::env::var("ZLINK_LOG_FORMAT").is_ok_and(|v| v == "json") {
        tracing_subscriber::fmt()
            .json()
            .with_env_filter(filter)
            .init();
    } else {
        tracing_subscriber::fmt().with_env_filter(filter).init();
    }
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("zlink-operator run: {e}");
            return ExitCode::FAILURE;
        }
    };
    rt.block_on(async move {
        let client = match kube::Client::try_default().await {
            Ok(c) => c,
            Err(e) => {
                eprintln!("zlink-operator run: no Kubernetes credentials: {e}");
                return ExitCode::FAILURE;
            }
        };
        let (wake_tx, wake_rx) = futures::channel::mpsc::unbounded();
        let hosts = std::sync::Arc::new(crate::hosts::AdminHosts::new(port, wake_tx));
        let config = crate::controller::Config {
            namespace,
            ..crate::controller::Config::default()
        };
        let signal = async {
            let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => return std::future::pending().await,
            };
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
        };
        let mut signal = Box::pin(signal);
        let ctx = std::sync::Arc::new(crate::controller::Context::new(client.clone(), hosts, config.clone()));
        let metrics = std::sync::Arc::clone(ctx.metrics());
        let app = axum::Router::new()
            .route(
                "/metrics",
                axum::routing::get(move || {
                    let text = metrics.encode();
                    async move {
                        (
                            [(axum::http::header::CONTENT_TYPE, "text/plain; version=0.0.4")],
                            text,
                        )
                    }
                }),
            )
            .route("/healthz", axum::routing::get(|| async { "ok" }));
        match tokio::net::TcpListener::bind(metrics_addr).await {
            Ok(l) => {
                tokio::spawn(async move {
                    let _ = axum::serve(l, app).await;
                });
            }
            Err(e) => {
                eprintln!("zlink-operator run: cannot listen on {metrics_addr}: {e}");
                return ExitCode::FAILURE;
            }
        }
        // Leader election (ZLINK_OPERATOR_LEADER_ELECTION=false turns it off): one controller
        // at a time over the Lease `zlink-operator` in the operator's own namespace.
        let elect = std::env::var("ZLINK_OPERATOR_LEADER_ELECTION").map_or(true, |v| v != "false");
        let (lost_tx, lost_rx) = tokio::sync::oneshot::channel::<()>();
        let (release_tx, release_rx) = tokio::sync::oneshot::channel::<()>();
        let mut elector_task = None;
        if elect {
            let lease_ns = std::env::var("POD_NAMESPACE")
                .ok()
                .filter(|s| !s.is_empty())
                .or_else(|| config.namespace.clone())
                .unwrap_or_else(|| "default".into());
            // `<pod name>_<random>`, new per process (client-go's convention): a container
            // restarted in the same pod does not ride on its dead predecessor's Lease, it
            // waits for the Lease to expire like any other replica.
            let identity = format!("{}_{}", config.instance, &crate::controller::random_hex()[..8]);
            let mut le = crate::leader::LeaderElection::new(
                kube::Api::namespaced(client.clone(), &lease_ns),
                "zlink-operator",
                &identity,
                crate::leader::Timings::default(),
            );
            tracing::info!(lease_ns = %lease_ns, %identity, "waiting for the leader Lease");
            if !le.acquire(&mut signal).await {
                return ExitCode::SUCCESS;
            }
            elector_task = Some(tokio::spawn(async move {
                tokio::select! {
                    () = le.keep() => { let _ = lost_tx.send(()); }
                    _ = release_rx => le.release().await,
                }
            }));
        } else {
            drop(lost_tx);
        }
        ctx.metrics().leader.set(1);
        tracing::info!(namespace = ?config.namespace, admin_port = port, %metrics_addr, "zlink-operator running");
        let lost = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let lost_flag = std::sync::Arc::clone(&lost);
        let shutdown = async move {
            tokio::select! {
                () = signal => {}
                r = lost_rx => if r.is_ok() { lost_flag.store(true, std::sync::atomic::Ordering::SeqCst) } else { std::future::pending::<()>().await },
            }
        };
        crate::controller::run(ctx, wake_rx, shutdown).await;
        if lost.load(std::sync::atomic::Ordering::SeqCst) {
            tracing::error!("zlink-operator stopped: the leader Lease was lost");
            return ExitCode::FAILURE;
        }
        let _ = release_tx.send(());
        if let Some(t) = elector_task {
            let _ = t.await;
        }
        tracing::info!("zlink-operator stopped");
        ExitCode::SUCCESS
    })
}
