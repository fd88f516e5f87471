//! The node host's admin surface (issue 8 acceptance "Admin API tests", "/metrics"): in-process
//! hosts ([`zlink_node::host::run`]) on a real redis-server, called over real gRPC and HTTP on
//! 127.0.0.1, with a real mesh client node for select-one traffic.
//!
//! - Authentication: calls without a token or with a wrong one are `UNAUTHENTICATED` (HostAdmin
//!   and the standard health service alike) and counted.
//! - `WatchStatus` delivers the `Draining` state change within 1 s of `Shutdown`, then `Stopped`,
//!   then ends.
//! - `SetChannelWeight` publishes a descriptor revision that changes select-one on peers.
//! - `/metrics` parses as the Prometheus text format and its counters move under traffic.
#![allow(clippy::unwrap_used)]

#[path = "../../store/tests/support/redis_server.rs"]
mod redis_server;

mod common_host;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use common_host::{
    SECRET, TOKEN, TempDir, TestHost, WAIT, client_node, test_config, wait_serving_peer,
};
use zlink::mesh::MeshNode;
use zlink_node::host::proto::{
    GetStatusRequest, HostState as ProtoState, SetChannelWeightRequest, ShutdownRequest,
    WatchStatusRequest,
};
use zlink_node::host::{Whoami, WhoamiReply};

fn ns(tag: &str) -> String {
    format!("host-{tag}-{}", std::process::id())
}

/// `n` select-one `Whoami` requests on `channel`: answers per host RID.
async fn pick_counts(client: &MeshNode, channel: &str, n: usize) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for _ in 0..n {
        let r: WhoamiReply = client
            .channel_request(channel, &Whoami {}, Duration::from_secs(5))
            .await
            .unwrap();
        *out.entry(r.rid).or_insert(0) += 1;
    }
    out
}

/// Issue 8, "Admin API tests: auth required": HostAdmin and grpc.health.v1 reject a missing and
/// a wrong bearer token with UNAUTHENTICATED and count each rejection; the right token works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_calls_without_or_with_a_wrong_token_are_rejected() {
    let redis = redis_server::RedisServer::start().await;
    let dir = TempDir::new("auth");
    let secret = dir.write("secret", SECRET);
    let host = TestHost::start(test_config(&redis.url(), &ns("auth"), "a", &secret, &[])).await;

    let mut anon = host.admin(None).await;
    let e = anon.get_status(GetStatusRequest {}).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::Unauthenticated, "{e}");
    let mut wrong = host.admin(Some("host-test-admin-token-0123456780")).await;
    let e = wrong.get_status(GetStatusRequest {}).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::Unauthenticated, "{e}");
    let e = wrong
        .shutdown(ShutdownRequest {
            deadline_ms: 1,
            relocate_first: None,
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::Unauthenticated, "{e}");
    let mut health_anon = tonic_health::pb::health_client::HealthClient::new(
        common_host::admin_channel(&host.announce.grpc).await,
    );
    let e = health_anon
        .check(tonic_health::pb::HealthCheckRequest {
            service: String::new(),
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::Unauthenticated, "{e}");

    let mut ok = host.admin(Some(TOKEN)).await;
    let st = ok
        .get_status(GetStatusRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(st.state, ProtoState::Serving as i32);
    assert_eq!(st.rid, host.rid());
    let bearer: tonic::metadata::MetadataValue<_> = format!("Bearer {TOKEN}").parse().unwrap();
    let mut health = tonic_health::pb::health_client::HealthClient::with_interceptor(
        common_host::admin_channel(&host.announce.grpc).await,
        move |mut r: tonic::Request<()>| {
            r.metadata_mut().insert("authorization", bearer.clone());
            Ok(r)
        },
    );
    let h = health
        .check(tonic_health::pb::HealthCheckRequest {
            service: "zlink.admin.v1.HostAdmin".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        h.status,
        tonic_health::pb::health_check_response::ServingStatus::Serving as i32
    );
    // The rejected shutdown did not drain the host.
    assert_eq!(host.http_get("/readyz").0, 200);
    let (_, metrics) = host.http_get("/metrics");
    assert!(
        metrics.contains("zlink_admin_auth_failures_total 4\n"),
        "{metrics}"
    );
    let out = host.terminate().await;
    assert_eq!(out.cut, 0);
}

/// Issue 8, "WatchStatus streams a state change within 1 s of it happening": the stream starts
/// with the current (Serving) status, shows Draining within 1 s of a Shutdown call, ends with
/// Stopped; the host releases its descriptor and `/readyz` turned 503 while draining.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_status_streams_the_drain_within_one_second() {
    let redis = redis_server::RedisServer::start().await;
    let dir = TempDir::new("watch");
    let secret = dir.write("secret", SECRET);
    let namespace = ns("watch");
    let host = TestHost::start(test_config(&redis.url(), &namespace, "w", &secret, &[])).await;
    let mut admin = host.admin(Some(TOKEN)).await;
    let mut stream = admin
        .watch_status(WatchStatusRequest {})
        .await
        .unwrap()
        .into_inner();
    let first = stream.message().await.unwrap().unwrap();
    assert_eq!(first.state, ProtoState::Serving as i32);
    assert!(first.safe_to_shutdown);

    let t0 = Instant::now();
    let r = admin
        .shutdown(ShutdownRequest {
            deadline_ms: 3_000,
            relocate_first: None,
        })
        .await
        .unwrap()
        .into_inner();
    assert!(r.started);
    let mut states = Vec::new();
    let mut draining_after = None;
    let mut last_seq = first.sequence;
    while let Some(st) = tokio::time::timeout(WAIT, stream.message())
        .await
        .expect("stream progressed")
        .unwrap()
    {
        assert!(st.sequence > last_seq, "sequence increases");
        last_seq = st.sequence;
        if st.state == ProtoState::Draining as i32 && draining_after.is_none() {
            draining_after = Some(t0.elapsed());
        }
        states.push(st.state);
    }
    let draining_after = draining_after.expect("a Draining status was streamed");
    assert!(
        draining_after < Duration::from_secs(1),
        "Draining arrived after {draining_after:?}"
    );
    assert_eq!(
        states.last(),
        Some(&(ProtoState::Stopped as i32)),
        "{states:?}"
    );
    let out = host.terminate().await;
    assert_eq!(out.cut, 0);
    // Lease released: no descriptor of this mesh is left.
    let store = zlink_store::redis::RedisStore::connect(
        &redis.url(),
        zlink_store::redis::RedisStoreConfig {
            namespace,
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let left = zlink_store::LocationStore::list_descriptors(
        &store,
        zlink_store::types::DescriptorKind::MeshNode,
        "hosts",
    )
    .await
    .unwrap();
    assert!(left.is_empty(), "{left:?}");
}

/// Issue 8, "SetChannelWeight changes selection on peers": with two hosts serving channel
/// `work`, a mesh client's select-one picks both; weight 0 on one host (a new descriptor
/// revision, announced by `update`) makes the client pick only the other; weight 100 again
/// brings it back. Out-of-range weights and unknown channels are refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn set_channel_weight_changes_select_one_on_peers() {
    let redis = redis_server::RedisServer::start().await;
    let dir = TempDir::new("weight");
    let secret = dir.write("secret", SECRET);
    let namespace = ns("weight");
    let work = [("work", "server", 100)];
    let a = TestHost::start(test_config(&redis.url(), &namespace, "a", &secret, &work)).await;
    let b = TestHost::start(test_config(&redis.url(), &namespace, "b", &secret, &work)).await;
    let client = client_node(&redis.url(), &namespace, &secret, "work").await;
    wait_serving_peer(&client, a.rid()).await;
    wait_serving_peer(&client, b.rid()).await;

    let both = pick_counts(&client, "work", 40).await;
    assert!(both.get(a.rid()).copied().unwrap_or(0) > 0, "{both:?}");
    assert!(both.get(b.rid()).copied().unwrap_or(0) > 0, "{both:?}");

    let mut admin_a = a.admin(Some(TOKEN)).await;
    let before = admin_a
        .get_status(GetStatusRequest {})
        .await
        .unwrap()
        .into_inner()
        .descriptor_revision;
    let r = admin_a
        .set_channel_weight(SetChannelWeightRequest {
            channel: "work".into(),
            weight: 0,
        })
        .await
        .unwrap()
        .into_inner();
    assert!(r.descriptor_revision > before);
    // The update reaches the client within one round trip; allow a few seconds.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let picks = pick_counts(&client, "work", 20).await;
        if picks.keys().all(|rid| rid == b.rid()) {
            break;
        }
        assert!(Instant::now() < deadline, "still picking {picks:?}");
    }
    let only_b = pick_counts(&client, "work", 40).await;
    assert_eq!(only_b.get(b.rid()), Some(&40), "{only_b:?}");

    admin_a
        .set_channel_weight(SetChannelWeightRequest {
            channel: "work".into(),
            weight: 100,
        })
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let picks = pick_counts(&client, "work", 20).await;
        if picks.contains_key(a.rid()) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "a is never picked again: {picks:?}"
        );
    }

    let e = admin_a
        .set_channel_weight(SetChannelWeightRequest {
            channel: "work".into(),
            weight: 10_001,
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e}");
    let e = admin_a
        .set_channel_weight(SetChannelWeightRequest {
            channel: "no-such-channel".into(),
            weight: 5,
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::FailedPrecondition, "{e}");
    client.shutdown().await;
    a.terminate().await;
    b.terminate().await;
}

fn scrape(text: &str) -> prometheus_parse::Scrape {
    // Strict shape check first (the parser skips lines it does not understand): every line is
    // a comment or `name[{labels}] value` with a float value.
    let mut samples = 0;
    for line in text.lines() {
        if line.starts_with("# HELP ") || line.starts_with("# TYPE ") {
            continue;
        }
        let (name_labels, value) = line.rsplit_once(' ').unwrap();
        assert!(
            value == "+Inf" || value.parse::<f64>().is_ok(),
            "bad value in {line:?}"
        );
        let name = name_labels.split('{').next().unwrap();
        assert!(
            !name.is_empty()
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':'),
            "bad metric name in {line:?}"
        );
        if name_labels.contains('{') {
            assert!(
                name_labels.ends_with('}'),
                "unterminated labels in {line:?}"
            );
        }
        samples += 1;
    }
    assert!(samples > 50, "only {samples} samples");
    prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_owned()))).unwrap()
}

/// The families of a scrape: name → (type, label keys of its samples). A histogram's
/// `_bucket`/`_sum`/`_count` samples belong to its family and its `le` label is not counted.
fn families(text: &str) -> BTreeMap<String, (String, BTreeSet<String>)> {
    let mut out: BTreeMap<String, (String, BTreeSet<String>)> = BTreeMap::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap();
            let old = out.insert(name.to_owned(), (kind.to_owned(), BTreeSet::new()));
            assert!(old.is_none(), "family {name} declared twice");
            continue;
        }
        if line.starts_with('#') {
            continue;
        }
        let (name_labels, _) = line.rsplit_once(' ').unwrap();
        let (name, labels) = match name_labels.split_once('{') {
            Some((n, l)) => (n, l.trim_end_matches('}')),
            None => (name_labels, ""),
        };
        let family = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|suffix| {
                let base = name.strip_suffix(suffix)?;
                (out.get(base)?.0 == "histogram").then_some(base)
            })
            .unwrap_or(name);
        let (_, keys) = out
            .get_mut(family)
            .unwrap_or_else(|| panic!("sample {line:?} before its # TYPE"));
        // Label values in these tests never contain `,` or `=`.
        for pair in labels.split(',').filter(|p| !p.is_empty()) {
            let (k, _) = pair.split_once('=').unwrap();
            if k != "le" {
                keys.insert(k.to_owned());
            }
        }
    }
    out
}

/// Every family `/metrics` exposes with its type and label keys: the names are the interface
/// of dashboards and alerts (docs/operations.md, "Metrics"), so a rename or a lost family
/// fails here (issue 16 item 5 moved the exposition to prometheus-client; this list did not
/// change).
/// A family with no sample yet (`zlink_mesh_protocol_errors_total` before the first malformed
/// record) shows no label keys; every other family shows exactly the listed ones.
const FAMILIES: &[(&str, &str, &[&str])] = &[
    ("zlink_admin_auth_failures_total", "counter", &[]),
    ("zlink_host_drain_cut_total", "counter", &[]),
    ("zlink_host_fenced_seconds_total", "counter", &[]),
    ("zlink_host_in_flight", "gauge", &[]),
    (
        "zlink_host_info",
        "gauge",
        &["application_version", "mesh", "rid"],
    ),
    ("zlink_host_objects_dropped_total", "counter", &[]),
    ("zlink_host_ready", "gauge", &[]),
    ("zlink_host_rejoins_total", "counter", &[]),
    ("zlink_host_state", "gauge", &["state"]),
    ("zlink_job_permits", "gauge", &[]),
    ("zlink_late_replies_total", "counter", &[]),
    ("zlink_lease_renew_attempts_total", "counter", &[]),
    ("zlink_lease_renew_failures_total", "counter", &[]),
    ("zlink_mesh_admissions_total", "counter", &["result"]),
    ("zlink_mesh_liveness_deaths_total", "counter", &[]),
    ("zlink_mesh_messages_total", "counter", &["kind"]),
    ("zlink_mesh_protocol_errors_total", "counter", &["kind"]),
    ("zlink_mesh_records_total", "counter", &["direction"]),
    ("zlink_mesh_sequence_gaps_total", "counter", &[]),
    ("zlink_object_activations_total", "counter", &["outcome"]),
    ("zlink_object_calls_total", "counter", &["path"]),
    ("zlink_object_stale_routes_total", "counter", &[]),
    ("zlink_objects_created_total", "counter", &["origin"]),
    ("zlink_objects_live", "gauge", &["kind"]),
    ("zlink_peers", "gauge", &["state"]),
    ("zlink_pending_requests", "gauge", &[]),
    ("zlink_queue_depth", "gauge", &["queue"]),
    ("zlink_relocation_events_total", "counter", &["event"]),
    ("zlink_relocation_units_total", "counter", &["outcome"]),
    ("zlink_request_latency_seconds", "histogram", &[]),
    ("zlink_requests_completed_total", "counter", &["result"]),
    ("zlink_route_cache_hits_total", "counter", &[]),
    (
        "zlink_route_cache_invalidations_total",
        "counter",
        &["reason"],
    ),
    ("zlink_route_cache_misses_total", "counter", &[]),
    ("zlink_route_resolutions_total", "counter", &["result"]),
    ("zlink_session_events_total", "counter", &["event"]),
    ("zlink_store_op_duration_seconds", "histogram", &["op"]),
    ("zlink_store_ops_total", "counter", &["op", "result"]),
    ("zlink_stream_bytes_total", "counter", &["direction"]),
    ("zlink_stream_connections_rejected_total", "counter", &[]),
    ("zlink_stream_dropped_total", "counter", &["reason"]),
    ("zlink_stream_packets_total", "counter", &["direction"]),
    ("zlink_stream_request_failures_total", "counter", &["kind"]),
    ("zlink_stream_sessions", "gauge", &[]),
    ("zlink_stream_sessions_accepted_total", "counter", &[]),
    ("zlink_stream_sessions_closed_total", "counter", &["reason"]),
    ("zlink_transport_hwm_stalls_total", "counter", &[]),
];

/// `text` exposes exactly [`FAMILIES`]: same names, types and label keys.
fn assert_families_unchanged(text: &str) {
    let found = families(text);
    let found_names: Vec<(&str, &str)> = found
        .iter()
        .map(|(name, (kind, _))| (name.as_str(), kind.as_str()))
        .collect();
    let listed_names: Vec<(&str, &str)> = FAMILIES.iter().map(|(n, k, _)| (*n, *k)).collect();
    assert_eq!(found_names, listed_names, "family names or types changed");
    for (name, _, labels) in FAMILIES {
        let keys = &found[*name].1;
        let listed: BTreeSet<String> = labels.iter().map(|l| (*l).to_owned()).collect();
        assert!(
            keys == &listed || keys.is_empty(),
            "{name}: label keys {keys:?}, listed {listed:?}"
        );
    }
}

/// docs/operations.md, "Metrics", names every family of [`FAMILIES`] in a table row that also
/// names each of its label keys, so the operator's reference cannot fall behind the exposition.
#[test]
fn the_operations_guide_lists_every_metrics_family_with_its_labels() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/operations.md");
    let doc = std::fs::read_to_string(path).unwrap();
    let section = doc
        .split("\n## ")
        .find(|s| s.starts_with("Metrics"))
        .expect("a Metrics section");
    let rows: Vec<Vec<&str>> = section
        .lines()
        .filter(|l| l.starts_with("| `"))
        .map(|l| l.split(" | ").collect())
        .collect();
    for (name, kind, labels) in FAMILIES {
        let row = rows
            .iter()
            .find(|r| r[0].contains(&format!("`{name}`")))
            .unwrap_or_else(|| panic!("docs/operations.md does not list {name}"));
        assert_eq!(row[1].trim(), *kind, "{name}: documented type");
        for label in *labels {
            assert!(
                row[2].contains(&format!("`{label}`")),
                "{name}: label {label} is not documented"
            );
        }
    }
}

fn value(s: &prometheus_parse::Scrape, metric: &str, labels: &[(&str, &str)]) -> f64 {
    let found: Vec<_> = s
        .samples
        .iter()
        .filter(|x| x.metric == metric && labels.iter().all(|(k, v)| x.labels.get(k) == Some(v)))
        .collect();
    assert_eq!(found.len(), 1, "{metric} {labels:?}: {found:?}");
    match found[0].value {
        prometheus_parse::Value::Counter(v)
        | prometheus_parse::Value::Gauge(v)
        | prometheus_parse::Value::Untyped(v) => v,
        ref other => panic!("{metric}: {other:?}"),
    }
}

/// Issue 8, "/metrics parses as Prometheus exposition format and counters move under traffic":
/// the scrape (served as `text/plain; version=0.0.4`, encoded by prometheus-client since issue
/// 16 item 5, with exactly the [`FAMILIES`]) parses (strictly and with `prometheus-parse`),
/// shows the host Serving with one ready peer, and 50 select-one requests from a mesh client
/// move the host's records-in, delivered and replies-sent counters by at least 50; store
/// operations and their latency histogram count the discovery polls. `/healthz` and `/readyz`
/// answer 200.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_parse_as_prometheus_text_and_counters_move_under_traffic() {
    let redis = redis_server::RedisServer::start().await;
    let dir = TempDir::new("metrics");
    let secret = dir.write("secret", SECRET);
    let namespace = ns("metrics");
    let host = TestHost::start(test_config(
        &redis.url(),
        &namespace,
        "m",
        &secret,
        &[("work", "server", 100)],
    ))
    .await;
    assert_eq!(host.http_get("/healthz"), (200, "ok\n".into()));
    assert_eq!(host.http_get("/readyz").0, 200);
    let client = client_node(&redis.url(), &namespace, &secret, "work").await;
    wait_serving_peer(&client, host.rid()).await;
    // The host sees the client Ready too before the baseline is taken.
    let deadline = Instant::now() + WAIT;
    let before = loop {
        let s = scrape(&host.http_get("/metrics").1);
        if value(&s, "zlink_peers", &[("state", "ready")]) >= 1.0 {
            break s;
        }
        assert!(
            Instant::now() < deadline,
            "the host never saw its peer ready"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(
        value(&before, "zlink_host_state", &[("state", "serving")]),
        1.0
    );
    assert_eq!(
        value(&before, "zlink_host_state", &[("state", "draining")]),
        0.0
    );
    assert_eq!(value(&before, "zlink_host_ready", &[]), 1.0);
    assert_eq!(
        value(&before, "zlink_objects_live", &[("kind", "spot")]),
        1.0
    );

    let picks = pick_counts(&client, "work", 50).await;
    assert_eq!(picks.get(host.rid()), Some(&50));
    let after = scrape(&host.http_get("/metrics").1);
    let moved = |metric: &str, labels: &[(&str, &str)]| {
        value(&after, metric, labels) - value(&before, metric, labels)
    };
    assert!(moved("zlink_mesh_records_total", &[("direction", "in")]) >= 50.0);
    assert!(moved("zlink_mesh_records_total", &[("direction", "out")]) >= 50.0);
    assert!(moved("zlink_mesh_messages_total", &[("kind", "delivered")]) >= 50.0);
    assert!(moved("zlink_mesh_messages_total", &[("kind", "reply_sent")]) >= 50.0);
    assert!(
        value(
            &after,
            "zlink_store_ops_total",
            &[("op", "list_descriptors"), ("result", "ok")]
        ) >= 1.0
    );
    assert!(
        value(
            &after,
            "zlink_store_ops_total",
            &[("op", "claim_lease"), ("result", "ok")]
        ) == 1.0
    );
    let (status, head, text) = host.http_get_with_headers("/metrics");
    assert_eq!(status, 200);
    assert!(
        head.to_ascii_lowercase()
            .contains("\r\ncontent-type: text/plain; version=0.0.4; charset=utf-8"),
        "{head}"
    );
    assert_families_unchanged(&text);
    assert!(
        text.contains(
            "zlink_store_op_duration_seconds_bucket{op=\"list_descriptors\",le=\"+Inf\"}"
        ),
        "{text}"
    );
    assert!(text.contains("# TYPE zlink_request_latency_seconds histogram"));
    client.shutdown().await;
    host.terminate().await;
}

/// Issue 8 item 1 / glossary §5 "Drain": a draining host announces `Draining` and keeps
/// serving through its seal window; peers stop selecting it at once — while it is still up and
/// answering — and the drain then completes cleanly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_draining_host_is_not_selected_while_it_is_still_up() {
    let redis = redis_server::RedisServer::start().await;
    let dir = TempDir::new("seal");
    let secret = dir.write("secret", SECRET);
    let namespace = ns("seal");
    let work = [("work", "server", 100)];
    let mut ca = test_config(&redis.url(), &namespace, "a", &secret, &work);
    ca.timings.drain_seal_ms = 2_500;
    ca.drain_deadline_ms = 5_000;
    let a = TestHost::start(ca).await;
    let b = TestHost::start(test_config(&redis.url(), &namespace, "b", &secret, &work)).await;
    let client = client_node(&redis.url(), &namespace, &secret, "work").await;
    wait_serving_peer(&client, a.rid()).await;
    wait_serving_peer(&client, b.rid()).await;
    let both = pick_counts(&client, "work", 40).await;
    assert!(both.get(a.rid()).copied().unwrap_or(0) > 0, "{both:?}");

    let mut admin_a = a.admin(Some(TOKEN)).await;
    let t0 = Instant::now();
    admin_a
        .shutdown(ShutdownRequest {
            deadline_ms: 5_000,
            relocate_first: None,
        })
        .await
        .unwrap();
    // The Draining update reaches the client quickly; from then on only b is picked.
    loop {
        let picks = pick_counts(&client, "work", 10).await;
        if picks.keys().all(|rid| rid == b.rid()) {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(2),
            "still picking {picks:?}"
        );
    }
    let only_b = pick_counts(&client, "work", 40).await;
    assert_eq!(only_b.get(b.rid()), Some(&40), "{only_b:?}");
    // a is still up (inside its seal window) and says so.
    assert!(t0.elapsed() < Duration::from_millis(2_500));
    let st = admin_a
        .get_status(GetStatusRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(st.state, ProtoState::Draining as i32);
    let out = a.terminate().await;
    assert_eq!(out.cut, 0);
    client.shutdown().await;
    b.terminate().await;
}

/// A client node with an object runtime typed by the reference application (it hosts nothing).
async fn object_client(
    redis_url: &str,
    namespace: &str,
    secret_file: &std::path::Path,
) -> (
    std::sync::Arc<MeshNode>,
    zlink::object::runtime::ObjectRuntime<zlink_store::redis::RedisStore>,
) {
    let mut hc = test_config(redis_url, namespace, "oc", secret_file, &[]);
    hc.objects.role = "client".into();
    let mut cfg =
        hc.mesh_node_config(zlink::mesh::auth::MeshSecret::from_bytes(SECRET.as_bytes()).unwrap());
    cfg.object_role = zlink_protocol::generated::ObjectRole::Client;
    let store = std::sync::Arc::new(
        zlink_store::redis::RedisStore::connect(
            redis_url,
            zlink_store::redis::RedisStoreConfig {
                namespace: namespace.into(),
                ..Default::default()
            },
        )
        .await
        .unwrap(),
    );
    let backend = std::sync::Arc::clone(&store)
        as std::sync::Arc<dyn zlink::mesh::discovery::DiscoveryBackend>;
    let node = std::sync::Arc::new(
        MeshNode::start(cfg, zlink::mesh::Handlers::new(), Some(backend))
            .await
            .unwrap(),
    );
    let rt = zlink::object::runtime::ObjectRuntime::start(
        std::sync::Arc::clone(&node),
        store,
        zlink_node::refapp::registry(&zlink_node::refapp::RefAppConfig::default()),
        zlink::routing::CacheConfig {
            fencing_margin: Duration::from_millis(200),
            max_age: Duration::from_millis(500),
            message_follow: Duration::from_millis(6_000),
        },
    )
    .await
    .unwrap();
    (node, rt)
}

/// Issue 17 item 1 over real gRPC: `Relocate` refuses bad arguments with `INVALID_ARGUMENT`;
/// a `PlannedMaintenance` relocation moves every counter of host A to host B with its state
/// (Relocating with `safe_to_shutdown: false` in the same status, then Relocated, pushed by
/// `WatchStatus`), returns one `handed_over` outcome per unit, and the same `relocation_id`
/// returns it again without starting anything; SafeToShutdown turns true once the follow
/// windows end; the counters answer from B with their totals intact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relocate_over_grpc_moves_the_counters_and_reports_every_unit() {
    use zlink_node::host::proto::{RelocateRequest, RelocationMode, RelocationState};
    use zlink_node::refapp::counter::{Add, Read, Total};
    let redis = redis_server::RedisServer::start().await;
    let dir = TempDir::new("reloc");
    let secret = dir.write("secret", SECRET);
    let namespace = ns("reloc");
    let config = |prefix: &str| {
        let mut c = test_config(&redis.url(), &namespace, prefix, &secret, &[]);
        c.relocation.cutover_wait_ms = 200;
        c.relocation.message_follow_ms = 6_000;
        c.relocation.route_cache_max_age_ms = 500;
        c.application_version = 3;
        c
    };
    let a = TestHost::start(config("ra")).await;
    let b = TestHost::start(config("rb")).await;
    let (client, rt) = object_client(&redis.url(), &namespace, &secret).await;
    wait_serving_peer(&client, a.rid()).await;
    wait_serving_peer(&client, b.rid()).await;
    let ids: Vec<String> = (0..12).map(|i| format!("rc-{i}")).collect();
    for id in &ids {
        for seq in 0..3 {
            let _: Total = rt
                .request_to_instance_spot(
                    zlink_node::refapp::COUNTER,
                    id,
                    &Add {
                        source: "t".into(),
                        seq,
                        by: 2,
                    },
                    WAIT,
                )
                .await
                .unwrap();
        }
    }
    let mut admin = a.admin(Some(TOKEN)).await;
    // A must see B as a ready peer (with B's descriptor) to move anything there.
    let t0 = Instant::now();
    let status = loop {
        let s = admin
            .get_status(GetStatusRequest {})
            .await
            .unwrap()
            .into_inner();
        if s.peers.iter().any(|p| p.rid == b.rid() && p.ready) {
            break s;
        }
        assert!(t0.elapsed() < WAIT, "A never saw B ready: {s:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let on_a = status
        .objects
        .iter()
        .find(|o| o.kind == "spot")
        .unwrap()
        .count
        - 1;
    assert!(on_a > 0, "cold activation placed nothing on A: {status:?}");
    assert!(status.relocation.is_none());

    // Bad arguments.
    let bad = |r: RelocateRequest| {
        let mut admin = admin.clone();
        async move { admin.relocate(r).await.unwrap_err().code() }
    };
    assert_eq!(
        bad(RelocateRequest {
            mode: 9,
            ..Default::default()
        })
        .await,
        tonic::Code::InvalidArgument
    );
    assert_eq!(
        bad(RelocateRequest {
            mode: RelocationMode::RollingUpdate as i32,
            target_application_version: 3,
            ..Default::default()
        })
        .await,
        tonic::Code::InvalidArgument,
        "RollingUpdate needs a higher version"
    );
    assert_eq!(
        bad(RelocateRequest {
            mode: RelocationMode::PlannedMaintenance as i32,
            target_application_version: 4,
            ..Default::default()
        })
        .await,
        tonic::Code::InvalidArgument,
        "PlannedMaintenance keeps the version"
    );
    assert_eq!(
        bad(RelocateRequest {
            target_rids: vec![String::new()],
            ..Default::default()
        })
        .await,
        tonic::Code::InvalidArgument
    );

    let mut watch = admin
        .clone()
        .watch_status(WatchStatusRequest {})
        .await
        .unwrap()
        .into_inner();
    let req = RelocateRequest {
        mode: RelocationMode::PlannedMaintenance as i32,
        relocation_id: "maint-1".into(),
        ..Default::default()
    };
    let r = admin.relocate(req.clone()).await.unwrap().into_inner();
    let st = r.relocation.clone().unwrap();
    assert_eq!(st.relocation_id, "maint-1");
    assert_eq!(st.state(), RelocationState::Completed, "{st:?}");
    assert_eq!(st.target_application_version, 3);
    assert_eq!(r.units.len() as u64, on_a);
    for u in &r.units {
        assert_eq!(u.outcome, "handed_over", "{u:?}");
        assert_eq!(u.target_rid, b.rid());
        assert_eq!(u.kind, "spot");
        assert_eq!(u.stable_type, "counter");
    }
    // The watch saw Relocating (not safe) and then Relocated.
    let mut saw_relocating_unsafe = false;
    loop {
        let s = tokio::time::timeout(WAIT, watch.message())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        if s.state == ProtoState::Relocating as i32 {
            assert!(!s.safe_to_shutdown, "{s:?}");
            assert!(s.relocation.is_some());
            saw_relocating_unsafe = true;
        }
        if s.state == ProtoState::Relocated as i32 {
            break;
        }
    }
    assert!(saw_relocating_unsafe);
    // Idempotent: the same id returns the same relocation, nothing new starts.
    let again = admin.relocate(req).await.unwrap().into_inner();
    assert_eq!(again.relocation, r.relocation);
    assert_eq!(again.units, r.units);
    // The counters answer from B with their totals.
    for id in &ids {
        let t: Total = rt
            .request_to_instance_spot(zlink_node::refapp::COUNTER, id, &Read, WAIT)
            .await
            .unwrap();
        assert_eq!((t.value, t.adds, t.duplicates), (6, 3, 0), "{id}");
    }
    let s = admin
        .get_status(GetStatusRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(s.state, ProtoState::Relocated as i32);
    // Locate: the authority names B; A still follows it, B hosts it.
    let moved = &r.units[0].id;
    let mut admin_b = b.admin(Some(TOKEN)).await;
    let on_a_view = admin
        .locate(zlink_node::host::proto::LocateRequest {
            kind: "spot".into(),
            id: moved.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(on_a_view.found);
    assert_eq!(on_a_view.owner_rid, b.rid());
    assert_eq!(on_a_view.state, "ready");
    assert_eq!(on_a_view.stable_type, "counter");
    assert_eq!(
        on_a_view.here, "moving",
        "A follows it to B for the follow window"
    );
    let on_b_view = admin_b
        .locate(zlink_node::host::proto::LocateRequest {
            kind: "spot".into(),
            id: moved.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(on_b_view.here, "live");
    assert_eq!(
        on_b_view.authority_owner_generation,
        on_a_view.authority_owner_generation
    );
    let missing = admin
        .locate(zlink_node::host::proto::LocateRequest {
            kind: "spot".into(),
            id: "no-such-counter".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(!missing.found);
    let e = admin
        .locate(zlink_node::host::proto::LocateRequest {
            kind: "room".into(),
            id: "x".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument);
    // SafeToShutdown once the follow windows (6 s + 0.2 s) ended.
    let t0 = Instant::now();
    loop {
        let s = admin
            .get_status(GetStatusRequest {})
            .await
            .unwrap()
            .into_inner();
        if s.safe_to_shutdown {
            break;
        }
        assert!(t0.elapsed() < WAIT, "never safe to shut down: {s:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // A second relocation from Relocated: nothing left to move, Completed at once.
    let r2 = admin
        .relocate(RelocateRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r2.relocation.unwrap().state(), RelocationState::Completed);
    assert!(r2.units.is_empty());
    rt.shutdown().await;
    client.shutdown().await;
    assert_eq!(a.terminate().await.cut, 0);
    assert_eq!(b.terminate().await.cut, 0);
}
