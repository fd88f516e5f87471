//! The crate graph holds its boundaries (issue 16 acceptance; docs/architecture.md, "Crates"):
//! the admin API links no libzmq, and the runtime library pulls no CLI, progress-bar, YAML,
//! logging-subscriber or metrics-exposition crate. Read from the real `cargo tree` of this
//! workspace (offline, from the lock file), so a dependency added to the wrong crate fails here.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::process::Command;

/// The crate names in the normal (non-dev) dependency tree of `package`, build scripts
/// included.
fn tree(package: &str) -> BTreeSet<String> {
    let out = Command::new(env!("CARGO"))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args([
            "tree",
            "--locked",
            "--offline",
            "-p",
            package,
            "-e",
            "normal,build",
            "--prefix",
            "none",
            "--format",
            "{p}",
        ])
        .output()
        .expect("run cargo tree");
    assert!(
        out.status.success(),
        "cargo tree -p {package}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let names: BTreeSet<String> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
        .collect();
    assert!(names.contains(package), "the tree names {package} itself");
    names
}

#[test]
fn the_admin_api_crate_links_no_zeromq() {
    let names = tree("zlink-admin-api");
    assert!(names.contains("tonic"), "the admin API is a tonic API");
    for banned in ["zmq", "zmq-sys", "zlink", "zlink-store"] {
        assert!(
            !names.contains(banned),
            "zlink-admin-api depends on {banned}"
        );
    }
}

#[test]
fn the_runtime_library_has_no_cli_progress_yaml_log_subscriber_or_exposition_dependencies() {
    let names = tree("zlink");
    assert!(
        names.contains("zmq"),
        "the runtime is the crate with the mesh"
    );
    for banned in [
        "clap",
        "indicatif",
        "serde_norway",
        "tracing-subscriber",
        "tonic",
        "axum",
        "anyhow",
        // The host encodes /metrics; the runtime only counts (docs/architecture.md, "Node host").
        "prometheus-client",
    ] {
        assert!(!names.contains(banned), "the runtime depends on {banned}");
    }
}

/// The STREAM session core is pure (docs/architecture.md, "Crates"): no async runtime, no
/// sockets library, no libzmq, so the fuzz target links it alone.
#[test]
fn the_session_core_links_no_tokio_and_no_zeromq() {
    let names = tree("zlink-session");
    assert!(
        names.contains("zlink-protocol"),
        "it decodes STREAM packets"
    );
    for banned in ["tokio", "mio", "zmq", "zmq-sys", "zlink", "futures"] {
        assert!(!names.contains(banned), "zlink-session depends on {banned}");
    }
}

#[test]
fn the_stream_connector_links_no_zeromq_and_no_runtime() {
    let names = tree("zlink-connector");
    assert!(names.contains("tokio"), "it is a tokio client");
    assert!(
        names.contains("zlink-session"),
        "it shares the error payloads"
    );
    for banned in ["zmq", "zmq-sys", "zlink", "zlink-store", "redis"] {
        assert!(
            !names.contains(banned),
            "zlink-connector depends on {banned}"
        );
    }
}
