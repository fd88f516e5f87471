//! Host configuration (issue 8 item 1, acceptance "Config validation tests: each invalid field
//! yields an error naming it"): YAML parsing, `ZLINK_*` environment overrides and the
//! validation table — each invalid value is refused with an error that names its field and the
//! allowed range.
#![allow(clippy::unwrap_used)]

use std::collections::HashMap;

use zlink_node::host::config::{FIELDS, env_var_of};
use zlink_node::host::{HostConfig, HostConfigError};

const VALID: &str = "\
mesh:
  name: prod
  rid_prefix: game
  bind_host: 0.0.0.0
  advertise_host: game-0.game.svc
  port: 7100
  channels:
    - { name: chat, role: server, weight: 250 }
    - { name: ops, role: client }
redis:
  url: redis://redis:6379/
  namespace: prod
objects:
  role: server
  placement_weight: 50
timings:
  probe_interval_ms: 5000
  liveness_deadline_ms: 15000
  lease_ttl_ms: 10000
  discovery_poll_ms: 1000
admin:
  grpc_listen: 0.0.0.0:7070
  http_listen: 0.0.0.0:9090
drain_deadline_ms: 20000
application_version: 3
log_level: info
";

fn valid() -> HostConfig {
    HostConfig::from_yaml(VALID, "valid.yaml").unwrap()
}

fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let m: HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    move |k| m.get(k).cloned()
}

/// The valid file parses into the fields it names and passes validation; channels keep their
/// roles and weights (a client's weight defaults to 100 and is not announced).
#[test]
fn a_valid_file_parses_and_validates() {
    let c = valid();
    c.validate().unwrap();
    assert_eq!(c.mesh.name, "prod");
    assert_eq!(c.mesh.port, 7100);
    assert_eq!(c.mesh.channels[0].weight, 250);
    assert_eq!(c.mesh.channels[1].weight, 100);
    assert_eq!(c.timings.lease_ttl_ms, 10_000);
    assert_eq!(c.application_version, 3);
    let secret = zlink::mesh::auth::MeshSecret::from_bytes(b"0123456789abcdef0123").unwrap();
    let m = c.mesh_node_config(secret);
    m.validate().unwrap();
    assert_eq!(m.channels.len(), 2);
    assert_eq!(m.channels[0].weight, 250);
    assert_eq!(m.channels[1].weight, 0);
    assert_eq!(m.placement_weight, 50);
    assert_eq!(m.timings.lease_renew.as_millis(), 3_333);
    assert_eq!(m.timings.fencing_margin.as_secs(), 2);
}

/// Every field has an environment variable `ZLINK_<PATH>`; overrides replace file values,
/// empty values clear optional fields, channels parse from `name:role[:weight]`.
#[test]
fn environment_variables_override_every_kind_of_field() {
    assert_eq!(env_var_of("mesh.name"), "ZLINK_MESH_NAME");
    assert_eq!(env_var_of("admin.grpc_listen"), "ZLINK_ADMIN_GRPC_LISTEN");
    assert_eq!(env_var_of("drain_deadline_ms"), "ZLINK_DRAIN_DEADLINE_MS");
    assert_eq!(FIELDS.len(), 54);
    let mut c = valid();
    c.apply_env(env(&[
        ("ZLINK_MESH_NAME", "staging"),
        ("ZLINK_MESH_PORT", "7200"),
        ("ZLINK_MESH_ADVERTISE_HOST", "other.svc"),
        ("ZLINK_MESH_CHANNELS", "a:server:7, b:client"),
        ("ZLINK_REDIS_URL", "redis://other:6379/"),
        ("ZLINK_TIMINGS_LEASE_RENEW_MS", "2000"),
        ("ZLINK_ADMIN_HTTP_LISTEN", "127.0.0.1:9999"),
        ("ZLINK_APPLICATION_VERSION", "9"),
        ("ZLINK_LOG_LEVEL", "debug"),
        ("ZLINK_RELOCATION_ON_SHUTDOWN", "none"),
        ("ZLINK_RELOCATION_MESSAGE_FOLLOW_MS", "8000"),
        ("ZLINK_RELOCATION_ROUTE_CACHE_MAX_AGE_MS", "3000"),
        ("ZLINK_RELOCATION_MAINTENANCE_WAVE", "wave-b"),
        ("ZLINK_RELOCATION_IN_FLIGHT_BUDGET_BYTES", "0"),
        ("ZLINK_RELOCATION_NODE_IN_FLIGHT_BUDGET_BYTES", "33554432"),
        ("ZLINK_LEASE_LOSS", "exit"),
        ("ZLINK_MESH_ADVERTISE_PORT", "7300"),
        ("ZLINK_STREAM_LISTEN", "127.0.0.1:7201"),
        ("ZLINK_STREAM_MAX_MESSAGE_SIZE", "0"),
        ("ZLINK_STREAM_MAX_CONNECTIONS", "10"),
        ("ZLINK_STREAM_IDLE_TIMEOUT_MS", "5000"),
        ("ZLINK_STREAM_OUTBOUND_BUFFER_BYTES", "4096"),
        ("ZLINK_STREAM_REQUEST_TIMEOUT_MS", "700"),
        ("ZLINK_OBJECTS_CAPACITY_ACTORS", "500"),
        ("ZLINK_OBJECTS_CAPACITY_SPOTS", "40"),
    ]))
    .unwrap();
    c.validate().unwrap();
    let stream = c.stream_config().unwrap().expect("stream.listen is set");
    assert_eq!(stream.listen.to_string(), "127.0.0.1:7201");
    assert_eq!(
        stream.session.max_message_size.limit(),
        None,
        "0 = unlimited"
    );
    assert_eq!(stream.max_connections, 10);
    assert_eq!(stream.session.idle_timeout.as_millis(), 5_000);
    assert_eq!(stream.session.outbound_buffer_bytes, 4_096);
    assert_eq!(stream.session.request_timeout.as_millis(), 700);
    assert!(
        HostConfig::default().stream_config().unwrap().is_none(),
        "no StreamNode unless stream.listen is set"
    );
    assert_eq!(
        HostConfig::default().stream.max_message_size,
        65_536,
        "MaxMessageSize defaults to 64 KiB"
    );
    assert_eq!(c.relocation.on_shutdown, "none");
    assert_eq!(
        (c.objects.capacity_actors, c.objects.capacity_spots),
        (500, 40)
    );
    assert_eq!(
        HostConfig::default().objects.capacity_spots,
        0,
        "unlimited by default"
    );
    assert_eq!(c.lease_loss, "exit");
    assert_eq!(c.mesh.advertise_port, Some(7300));
    assert_eq!(HostConfig::default().lease_loss, "rejoin");
    assert_eq!(c.relocation.message_follow_ms, 8_000);
    assert_eq!(
        c.relocation.in_flight_budget_bytes, 0,
        "0 turns the budget off"
    );
    assert_eq!(c.relocation.node_in_flight_budget_bytes, 32 * 1024 * 1024);
    assert_eq!(c.relocation.route_cache_max_age_ms, 3_000);
    let secret = zlink::mesh::auth::MeshSecret::from_bytes(b"0123456789abcdef0123").unwrap();
    assert_eq!(c.mesh_node_config(secret).maintenance_wave, "wave-b");
    assert_eq!(c.mesh.name, "staging");
    assert_eq!(c.mesh.port, 7200);
    assert_eq!(c.mesh.advertise_host.as_deref(), Some("other.svc"));
    assert_eq!(c.mesh.channels.len(), 2);
    assert_eq!(
        (c.mesh.channels[0].name.as_str(), c.mesh.channels[0].weight),
        ("a", 7)
    );
    assert_eq!(c.mesh.channels[1].role, "client");
    assert_eq!(c.redis.url, "redis://other:6379/");
    assert_eq!(c.timings.lease_renew_ms, Some(2_000));
    assert_eq!(c.admin.http_listen, "127.0.0.1:9999");
    assert_eq!(c.application_version, 9);
    assert_eq!(c.log_level, "debug");
    // Clearing an optional field with an empty value.
    c.apply_env(env(&[("ZLINK_TIMINGS_LEASE_RENEW_MS", "")]))
        .unwrap();
    assert_eq!(c.timings.lease_renew_ms, None);
}

/// A variable that does not parse as its field's type names the variable and the field.
#[test]
fn an_unparsable_environment_value_names_the_variable_and_field() {
    for (var, raw, field) in [
        ("ZLINK_MESH_PORT", "seventy", "mesh.port"),
        ("ZLINK_MESH_PORT", "70000", "mesh.port"),
        ("ZLINK_TIMINGS_LEASE_TTL_MS", "-1", "timings.lease_ttl_ms"),
        ("ZLINK_MESH_CHANNELS", "chat", "mesh.channels"),
        ("ZLINK_MESH_CHANNELS", "chat:server:heavy", "mesh.channels"),
        (
            "ZLINK_OBJECTS_PLACEMENT_WEIGHT",
            "1e3",
            "objects.placement_weight",
        ),
    ] {
        let mut c = valid();
        let e = c.apply_env(env(&[(var, raw)])).unwrap_err();
        assert!(
            matches!(e, HostConfigError::Env { .. }),
            "{var}={raw}: {e:?}"
        );
        assert_eq!(e.field(), Some(field), "{var}={raw}");
        let msg = e.to_string();
        assert!(msg.contains(var) && msg.contains(field), "{msg}");
    }
}

/// YAML that does not fit the schema is refused with the field path in the message.
#[test]
fn yaml_schema_errors_name_the_field() {
    for (yaml, needle) in [
        ("mesh:\n  port: 70000\n", "mesh.port"),
        ("mesh:\n  nmae: x\n", "nmae"),
        ("timings:\n  lease_ttl_ms: soon\n", "timings.lease_ttl_ms"),
        ("admin:\n  grpc_listen: [1, 2]\n", "admin.grpc_listen"),
        ("surprise: 1\n", "surprise"),
    ] {
        let e = HostConfig::from_yaml(yaml, "bad.yaml").unwrap_err();
        let msg = e.to_string();
        assert!(matches!(e, HostConfigError::Parse { .. }), "{msg}");
        assert!(
            msg.contains(needle) && msg.contains("bad.yaml"),
            "{yaml:?}: {msg}"
        );
    }
}

/// The validation table: each row breaks one field; the error names exactly that field and
/// states the allowed range or form.
#[test]
fn each_invalid_field_yields_an_error_naming_it() {
    type Edit = fn(&mut HostConfig);
    let table: &[(&str, Edit, &str)] = &[
        (
            "mesh.name",
            |c| c.mesh.name = String::new(),
            "1..=255 bytes",
        ),
        (
            "mesh.name",
            |c| c.mesh.name = "m".repeat(256),
            "1..=255 bytes",
        ),
        (
            "mesh.rid",
            |c| c.mesh.rid = Some(String::new()),
            "a valid RID",
        ),
        (
            "mesh.rid",
            |c| c.mesh.rid = Some("r".repeat(256)),
            "a valid RID",
        ),
        (
            "mesh.rid_prefix",
            |c| c.mesh.rid_prefix = "has space".into(),
            "a valid RID prefix",
        ),
        (
            "mesh.rid_prefix",
            |c| c.mesh.rid_prefix = String::new(),
            "a valid RID prefix",
        ),
        (
            "mesh.bind_host",
            |c| c.mesh.bind_host = String::new(),
            "non-empty",
        ),
        (
            "mesh.advertise_host",
            |c| c.mesh.advertise_host = None,
            "wildcard",
        ),
        (
            "mesh.advertise_host",
            |c| c.mesh.advertise_host = Some("0.0.0.0".into()),
            "not a wildcard",
        ),
        (
            "mesh.secret_env",
            |c| c.mesh.secret_env = String::new(),
            "variable name",
        ),
        (
            "mesh.channels",
            |c| c.mesh.channels[0].role = "boss".into(),
            "server or client",
        ),
        (
            "mesh.channels",
            |c| c.mesh.channels[0].weight = 10_001,
            "0..=10000",
        ),
        (
            "mesh.channels",
            |c| c.mesh.channels[1].name = "chat".into(),
            "each channel once",
        ),
        (
            "mesh.channels",
            |c| c.mesh.channels[0].name = String::new(),
            "1..=255 bytes",
        ),
        ("redis.url", |c| c.redis.url = String::new(), "redis://"),
        (
            "redis.url",
            |c| c.redis.url = "http://redis".into(),
            "redis://",
        ),
        (
            "redis.namespace",
            |c| c.redis.namespace = "a{b}".into(),
            "without { or }",
        ),
        (
            "redis.response_timeout_ms",
            |c| c.redis.response_timeout_ms = 0,
            "1..=60000",
        ),
        (
            "redis.connection_timeout_ms",
            |c| c.redis.connection_timeout_ms = 60_001,
            "1..=60000",
        ),
        (
            "objects.role",
            |c| c.objects.role = "host".into(),
            "server, client or none",
        ),
        (
            "objects.placement_weight",
            |c| c.objects.placement_weight = 10_001,
            "0..=10000",
        ),
        (
            "objects.room_tick_ms",
            |c| c.objects.room_tick_ms = 0,
            "1..=3600000",
        ),
        (
            "timings.probe_interval_ms",
            |c| c.timings.probe_interval_ms = 0,
            "1..=3600000",
        ),
        (
            "timings.liveness_deadline_ms",
            |c| c.timings.liveness_deadline_ms = 5_000,
            "5001..=3600000",
        ),
        (
            "timings.lease_ttl_ms",
            |c| c.timings.lease_ttl_ms = 99,
            "100..=3600000",
        ),
        (
            "timings.fencing_margin_ms",
            |c| c.timings.fencing_margin_ms = Some(6_000),
            "1..=5000",
        ),
        (
            "timings.lease_renew_ms",
            |c| c.timings.lease_renew_ms = Some(8_000),
            "1..=7999",
        ),
        (
            "timings.lease_renew_ms",
            |c| c.timings.lease_renew_ms = Some(0),
            "1..=7999",
        ),
        (
            "timings.discovery_poll_ms",
            |c| c.timings.discovery_poll_ms = 4_000,
            "1..=3333",
        ),
        (
            "timings.status_poll_ms",
            |c| c.timings.status_poll_ms = 5,
            "10..=60000",
        ),
        (
            "timings.drain_seal_ms",
            |c| c.timings.drain_seal_ms = 70_000,
            "0..=60000",
        ),
        (
            "admin.grpc_listen",
            |c| c.admin.grpc_listen = "localhost".into(),
            "ip:port",
        ),
        (
            "admin.http_listen",
            |c| c.admin.http_listen = "9090".into(),
            "ip:port",
        ),
        (
            "admin.http_listen",
            |c| c.admin.http_listen = "0.0.0.0:7070".into(),
            "different address",
        ),
        (
            "admin.token_env",
            |c| c.admin.token_env = String::new(),
            "variable name",
        ),
        (
            "drain_deadline_ms",
            |c| c.drain_deadline_ms = 0,
            "1..=3600000",
        ),
        (
            "log_level",
            |c| c.log_level = "loud".into(),
            "error, warn, info, debug or trace",
        ),
        (
            "relocation.on_shutdown",
            |c| c.relocation.on_shutdown = "always".into(),
            "planned_maintenance or none",
        ),
        (
            "lease_loss",
            |c| c.lease_loss = "restart".into(),
            "rejoin or exit",
        ),
        (
            "mesh.advertise_port",
            |c| c.mesh.advertise_port = Some(0),
            "1..=65535",
        ),
        (
            "relocation.chunk_limit_bytes",
            |c| c.relocation.chunk_limit_bytes = 10,
            "1024..=16777216",
        ),
        (
            "relocation.in_flight_budget_bytes",
            |c| c.relocation.in_flight_budget_bytes = 10,
            "0 (off) or 1024..=1099511627776",
        ),
        (
            "relocation.node_in_flight_budget_bytes",
            |c| c.relocation.node_in_flight_budget_bytes = 1,
            "0 (off) or 1024..=1099511627776",
        ),
        (
            "stream.max_message_size",
            |c| {
                c.stream.listen = Some("127.0.0.1:0".into());
                c.stream.max_message_size = -1;
            },
            "0 (unlimited) or a positive byte count",
        ),
        (
            "stream.listen",
            |c| c.stream.listen = Some("localhost".into()),
            "an ip:port socket address",
        ),
        (
            "stream.max_connections",
            |c| {
                c.stream.listen = Some("127.0.0.1:0".into());
                c.stream.max_connections = 0;
            },
            "1..=1000000",
        ),
        (
            "stream.idle_timeout_ms",
            |c| {
                c.stream.listen = Some("127.0.0.1:0".into());
                c.stream.idle_timeout_ms = 0;
            },
            "1..=3600000",
        ),
        (
            "stream.outbound_buffer_bytes",
            |c| {
                c.stream.listen = Some("127.0.0.1:0".into());
                c.stream.outbound_buffer_bytes = 10;
            },
            "1024..=1073741824",
        ),
        (
            "stream.request_timeout_ms",
            |c| {
                c.stream.listen = Some("127.0.0.1:0".into());
                c.stream.request_timeout_ms = 0;
            },
            "1..=3600000",
        ),
        (
            // A cached route must expire 5 s before the old owner stops following (routing §2.5).
            "relocation.route_cache_max_age_ms",
            |c| c.relocation.message_follow_ms = 6_000,
            "MessageFollowDuration",
        ),
    ];
    for (field, edit, allowed) in table {
        let mut c = valid();
        edit(&mut c);
        let Err(e) = c.validate() else {
            panic!("{field} ({allowed}): the broken value was accepted")
        };
        assert_eq!(e.field(), Some(*field), "{field}: {e}");
        let msg = e.to_string();
        assert!(msg.starts_with(field), "{msg}");
        assert!(msg.contains(allowed), "{field}: {msg:?} lacks {allowed:?}");
    }
}

/// `HostConfig::load` applies the environment on top of the file, then validates: an invalid
/// override is refused naming its field even when the file is fine.
#[test]
fn load_validates_after_the_overrides() {
    let dir = std::env::temp_dir().join(format!("zlink-hostcfg-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("node.yaml");
    std::fs::write(&path, VALID).unwrap();
    let c = HostConfig::load(Some(&path), env(&[("ZLINK_MESH_NAME", "x")])).unwrap();
    assert_eq!(c.mesh.name, "x");
    let e = HostConfig::load(Some(&path), env(&[("ZLINK_DRAIN_DEADLINE_MS", "0")])).unwrap_err();
    assert_eq!(e.field(), Some("drain_deadline_ms"));
    let e = HostConfig::load(Some(&dir.join("missing.yaml")), env(&[])).unwrap_err();
    assert!(matches!(e, HostConfigError::Read { .. }), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The admin token comes from the file (trimmed) or the named variable, and must be at least
/// 16 bytes; errors name the field.
#[test]
fn the_admin_token_is_loaded_from_file_or_env_and_must_be_long_enough() {
    let mut c = valid();
    assert_eq!(
        c.admin_token(env(&[("ZLINK_ADMIN_TOKEN", "0123456789abcdef")]))
            .unwrap(),
        "0123456789abcdef"
    );
    let e = c.admin_token(env(&[])).unwrap_err();
    assert_eq!(e.field(), Some("admin.token_env"));
    let e = c
        .admin_token(env(&[("ZLINK_ADMIN_TOKEN", "short")]))
        .unwrap_err();
    assert_eq!(e.field(), Some("admin.token_env"));
    let dir = std::env::temp_dir().join(format!("zlink-hosttok-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("token"), "file-token-0123456789\n").unwrap();
    c.admin.token_file = Some(dir.join("token"));
    assert_eq!(c.admin_token(env(&[])).unwrap(), "file-token-0123456789");
    c.admin.token_file = Some(dir.join("absent"));
    assert_eq!(
        c.admin_token(env(&[])).unwrap_err().field(),
        Some("admin.token_file")
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The example configuration shipped in the node image (`node/node.example.yaml`) parses; it
/// binds a wildcard address and leaves the advertised host to the deployment, so it is refused
/// (naming `mesh.advertise_host`) until that is set, and valid then.
#[test]
fn the_shipped_example_configuration_is_valid_once_the_advertised_host_is_set() {
    let mut c =
        HostConfig::from_yaml(include_str!("../node.example.yaml"), "node.example.yaml").unwrap();
    let err = c.validate().unwrap_err().to_string();
    assert!(err.contains("mesh.advertise_host"), "{err}");
    c.mesh.advertise_host = Some("10.0.0.7".into());
    c.validate().unwrap();
    assert_eq!(c.mesh.port, 7100);
    assert_eq!(c.admin.grpc_listen, "0.0.0.0:7070");
}
