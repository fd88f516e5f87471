//! The host as a process: configuration from a file and the environment, logs to stderr,
//! SIGTERM/SIGINT, the store connection, the exit status. `zlink-node run` is
//! [`run_from_config`] with the reference application; a user's own node binary is one call to
//! [`main`] with its own registry:
//!
//! ```no_run
//! use zlink::object::registry::Registry;
//!
//! fn main() {
//!     std::process::exit(zlink_node::host::main(|_config| {
//!         let registry = Registry::new();
//!         // registry.user_spot("room", ...), registry.actor("player", ...), ...
//!         registry
//!     }));
//! }
//! ```

use std::future::Future;
use std::path::Path;

use super::{HostConfig, HostError, RunOptions};
use zlink::object::registry::Registry;

/// Exit status when the drain deadline cut work in flight.
pub const EXIT_DRAIN_CUT: i32 = 3;
/// Exit status when the owner lease was lost and `lease_loss` is `exit` (a supervisor restarts
/// the process as a new lifecycle).
pub const EXIT_LEASE_LOST: i32 = 4;
/// Exit status when the host could not start (bad configuration, a port in use; an
/// unreachable Redis is retried, not fatal); the reason is logged.
pub const EXIT_START_FAILED: i32 = 1;

fn env(k: &str) -> Option<String> {
    std::env::var(k).ok()
}

/// Logs to stderr at `level` (`error`, `warn`, `info`, `debug`, `trace`; anything else is
/// `info`). A second call is a no-op.
pub fn init_logs(level: &str) {
    let level = match level {
        "error" => tracing::Level::ERROR,
        "warn" => tracing::Level::WARN,
        "debug" => tracing::Level::DEBUG,
        "trace" => tracing::Level::TRACE,
        _ => tracing::Level::INFO,
    };
    let _ = tracing_subscriber::fmt()
        .with_max_level(level)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .try_init();
}

/// A future that completes on SIGTERM or SIGINT.
///
/// The handlers are installed when this is called (not when the future is first polled), so a
/// SIGTERM during startup is never lost — also as PID 1 in a container. Call it inside a tokio
/// runtime.
pub fn termination() -> impl Future<Output = ()> + Send {
    use tokio::signal::unix::{SignalKind, signal};
    let handlers = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    );
    async move {
        let (Ok(mut term), Ok(mut int)) = handlers else {
            tracing::error!("cannot install SIGTERM/SIGINT handlers; stop with the admin Shutdown");
            return std::future::pending().await;
        };
        tokio::select! {
            _ = term.recv() => tracing::info!("SIGTERM: draining"),
            _ = int.recv() => tracing::info!("SIGINT: draining"),
        }
    }
}

/// Load the configuration (`config_file`, or defaults, plus `ZLINK_*` overrides), start logs,
/// connect to the store and run the host of the registry `application` builds, until SIGTERM
/// or SIGINT. `announce` gets the one JSON line `{"rid","endpoint","grpc","http","state"}`
/// once serving. Returns the exit status: 0 after a clean drain, [`EXIT_DRAIN_CUT`] when the
/// drain deadline cut work.
///
/// # Errors
/// [`HostError`] when the host could not start. A SIGTERM while connecting to the store ends
/// the start cleanly (`Ok(0)`).
pub async fn run_from_config(
    config_file: Option<&Path>,
    application: impl FnOnce(&HostConfig) -> Registry,
    announce: impl FnOnce(&str) + Send + 'static,
) -> Result<i32, HostError> {
    let config = HostConfig::load(config_file, env)?;
    init_logs(&config.log_level);
    let token = config.admin_token(env)?;
    let shutdown = termination();
    tokio::pin!(shutdown);
    let store = tokio::select! {
        s = connect_store_retrying(&config) => s?,
        () = &mut shutdown => return Ok(0),
    };
    let registry = application(&config);
    let options = RunOptions::new(token).on_serving(move |a| {
        if let Ok(line) = serde_json::to_string(a) {
            announce(&line);
        }
    });
    let outcome = super::run(config, registry, store, shutdown, options).await?;
    Ok(if outcome.lease_lost {
        EXIT_LEASE_LOST
    } else if outcome.cut == 0 {
        0
    } else {
        EXIT_DRAIN_CUT
    })
}

/// Connect to the Location Store, retrying while it is unreachable (issue 20: a host started
/// before Redis, or during an outage, waits and says so rather than exiting or spinning):
/// 100 ms after the first failure, doubling up to 5 s, one warning per attempt. Only a bad
/// configuration ends it.
async fn connect_store_retrying(
    config: &HostConfig,
) -> Result<std::sync::Arc<zlink_store::redis::RedisStore>, HostError> {
    let mut backoff = std::time::Duration::from_millis(100);
    let mut attempts = 0u32;
    loop {
        match super::connect_store(config).await {
            Ok(s) => {
                if attempts > 0 {
                    tracing::info!(attempts, "location store reachable: starting");
                }
                return Ok(s);
            }
            Err(HostError::Store { url, source }) => {
                attempts += 1;
                tracing::warn!(
                    %url,
                    error = %source,
                    attempts,
                    retry_in = ?backoff,
                    "location store unreachable; retrying"
                );
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(std::time::Duration::from_secs(5));
            }
            Err(e) => return Err(e),
        }
    }
}

/// The whole `main` of a node binary that hosts `application`'s object types: reads
/// `--config <file>` (or `ZLINK_CONFIG`) from the command line, builds a tokio runtime and
/// calls [`run_from_config`], printing the serving line on stdout. Returns the exit status for
/// `std::process::exit`.
pub fn main(application: impl FnOnce(&HostConfig) -> Registry) -> i32 {
    let mut args = std::env::args().skip(1);
    let mut config_file = env("ZLINK_CONFIG").map(std::path::PathBuf::from);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--config" => match args.next() {
                Some(p) => config_file = Some(p.into()),
                None => {
                    eprintln!("--config needs a file");
                    return 2;
                }
            },
            other => match other.strip_prefix("--config=") {
                Some(p) => config_file = Some(p.into()),
                None => {
                    eprintln!("unknown argument {other:?} (usage: [--config node.yaml])");
                    return 2;
                }
            },
        }
    }
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("cannot start the tokio runtime: {e}");
            return EXIT_START_FAILED;
        }
    };
    let result = rt.block_on(run_from_config(
        config_file.as_deref(),
        application,
        |line| {
            use std::io::Write;
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "{line}");
            let _ = out.flush();
        },
    ));
    match result {
        Ok(code) => code,
        Err(e) => {
            tracing::error!(error = %e, "the host did not start");
            eprintln!("error: {e}");
            EXIT_START_FAILED
        }
    }
}
