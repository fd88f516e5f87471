//! The Redis provider: the production Location Store and Relocation Store.
//!
//! Every operation is **one Redis command**: an `EVALSHA` of one Lua script (the scripts are
//! `store/src/redis/*.lua`, each prefixed with `common.lua`), or a plain `TIME` for
//! [`LocationStore::store_now`]. Scripts are loaded once at [`RedisStore::connect`] (and again
//! after a Redis restart), so the normal path never sees `NOSCRIPT`. Store time is Redis `TIME`
//! read inside the script; no expiry is judged by this process's clock. Generations travel as
//! decimal strings end to end (a Lua number is a double), so counters are exact up to
//! `i64::MAX`, where they fail with [`StoreError::GenerationExhausted`].
//!
//! Every key of a namespace lives under `zl:{<namespace>}:` — one Redis Cluster hash tag per
//! namespace, so every multi-key script stays in one slot. The key layout, every script's
//! preconditions and effects, the durability Redis needs in production and the error mapping
//! are described in `docs/store.md`.
//!
//! The provider behaves exactly like [`crate::memory::MemoryStore`] (same error kinds, same
//! [`StaleReason`]s, same check order); both run the same conformance suite.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bytes::Bytes;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{RedisError, Script, ServerErrorKind, Value};
use serde::Deserialize;
use tokio::sync::{Mutex, watch};

use crate::error::{Result, StaleReason, StoreError};
use crate::location::{LocationStore, RelocationStore};
use crate::memory::RESERVATION_REPLAY_RETENTION;
use crate::types::{
    AggregateOp, Allocation, AllocationState, AuthorityKey, AuthorityRead, AuthoritySnapshot,
    AuthorityState, CapacityLimits, CapacityUse, ContentReceipt, DescriptorKey, DescriptorKind,
    DescriptorRecord, LeaseGrant, LeaseRead, NodeRef, ObjectKind, OwnerFence, OwnerLeaseState,
    OwnerToken, PendingCreation, PublishOutcome, Reservation, ReserveRequest, RouteRead, StoreTime,
    StoredPayload, TargetFence, TermLease, TransferOwner, duration_ms,
};

/// Longest TTL or retention the provider accepts, in milliseconds (about 35,000 years); longer
/// values are clamped so store-time arithmetic inside Lua (doubles) stays exact.
pub const MAX_TTL_MS: u64 = 1 << 50;

/// How long a lapsed owner lease's key is kept before Redis garbage-collects it. Liveness is
/// always judged by the stored expiry against `TIME`; this only bounds memory use.
pub const LEASE_GC_GRACE: Duration = Duration::from_secs(3600);

/// Configuration of a [`RedisStore`].
#[derive(Debug, Clone)]
pub struct RedisStoreConfig {
    /// Key namespace: every key is `zl:{<namespace>}:…` (one Redis Cluster hash tag). Must be
    /// non-empty and must not contain `{` or `}`.
    pub namespace: String,
    /// How long to wait for a reply before the request is a [`StoreError::StoreFailure`] with
    /// `ambiguous: true`.
    pub response_timeout: Duration,
    /// How long one connection attempt may take.
    pub connection_timeout: Duration,
    /// Connection attempts per reconnect before requests fail (with backoff between them).
    pub reconnect_retries: usize,
}

impl Default for RedisStoreConfig {
    fn default() -> Self {
        Self {
            namespace: "zlink".into(),
            response_timeout: Duration::from_secs(2),
            connection_timeout: Duration::from_secs(1),
            reconnect_retries: 2,
        }
    }
}

macro_rules! script {
    ($file:literal) => {
        Script::new(concat!(include_str!("common.lua"), include_str!($file)))
    };
}

struct Scripts {
    claim_lease: Script,
    renew_lease: Script,
    read_lease: Script,
    release_lease: Script,
    acquire_term: Script,
    read_term: Script,
    release_term: Script,
    publish_descriptor: Script,
    list_descriptors: Script,
    remove_descriptor: Script,
    claim_rid: Script,
    set_limits: Script,
    capacity_use: Script,
    read_authority: Script,
    read_route: Script,
    reserve: Script,
    commit_ready: Script,
    abort: Script,
    aggregate: Script,
    set_state: Script,
    delete_fenced: Script,
    payload_put: Script,
    payload_read: Script,
    payload_renew: Script,
    payload_delete: Script,
}

impl Scripts {
    fn new() -> Self {
        Self {
            claim_lease: script!("claim_lease.lua"),
            renew_lease: script!("renew_lease.lua"),
            read_lease: script!("read_lease.lua"),
            release_lease: script!("release_lease.lua"),
            acquire_term: script!("acquire_term.lua"),
            read_term: script!("read_term.lua"),
            release_term: script!("release_term.lua"),
            publish_descriptor: script!("publish_descriptor.lua"),
            list_descriptors: script!("list_descriptors.lua"),
            remove_descriptor: script!("remove_descriptor.lua"),
            claim_rid: script!("claim_rid.lua"),
            set_limits: script!("set_limits.lua"),
            capacity_use: script!("capacity_use.lua"),
            // Standalone: the hottest read skips the common.lua prelude.
            read_authority: Script::new(include_str!("read_authority.lua")),
            read_route: Script::new(include_str!("read_route.lua")),
            reserve: script!("reserve.lua"),
            commit_ready: script!("commit_ready.lua"),
            abort: script!("abort.lua"),
            aggregate: script!("aggregate.lua"),
            set_state: script!("set_state.lua"),
            delete_fenced: script!("delete_fenced.lua"),
            payload_put: script!("payload_put.lua"),
            payload_read: script!("payload_read.lua"),
            payload_renew: script!("payload_renew.lua"),
            payload_delete: script!("payload_delete.lua"),
        }
    }

    fn all(&self) -> [&Script; 25] {
        [
            &self.claim_lease,
            &self.renew_lease,
            &self.read_lease,
            &self.release_lease,
            &self.acquire_term,
            &self.read_term,
            &self.release_term,
            &self.publish_descriptor,
            &self.list_descriptors,
            &self.remove_descriptor,
            &self.claim_rid,
            &self.set_limits,
            &self.capacity_use,
            &self.read_authority,
            &self.read_route,
            &self.reserve,
            &self.commit_ready,
            &self.abort,
            &self.aggregate,
            &self.set_state,
            &self.delete_fenced,
            &self.payload_put,
            &self.payload_read,
            &self.payload_renew,
            &self.payload_delete,
        ]
    }
}

struct Inner {
    conn: ConnectionManager,
    prefix: String,
    scripts: Scripts,
    /// A request failed with a store failure since the last success.
    failed: AtomicBool,
    /// Redis `run_id` last seen (changes when the server restarted).
    run_id: Mutex<String>,
    recovery: watch::Sender<u64>,
}

/// The Redis provider. Cheap to clone (one shared auto-reconnecting connection).
#[derive(Clone)]
pub struct RedisStore {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
            .field("prefix", &self.inner.prefix)
            .finish_non_exhaustive()
    }
}

/// One script argument.
type Args = Vec<Vec<u8>>;

fn a(s: impl AsRef<[u8]>) -> Vec<u8> {
    s.as_ref().to_vec()
}

fn ttl_ms(d: Duration) -> String {
    duration_ms(d).min(MAX_TTL_MS).to_string()
}

fn kind_str(kind: ObjectKind) -> &'static str {
    match kind {
        ObjectKind::Actor => "actor",
        ObjectKind::Spot => "spot",
    }
}

fn state_str(state: AuthorityState) -> &'static str {
    match state {
        AuthorityState::Creating => "creating",
        AuthorityState::Ready => "ready",
        AuthorityState::Closing => "closing",
        AuthorityState::Relocating => "relocating",
    }
}

/// Map a client error: `ambiguous` unless the request surely was not executed.
fn failure(e: &RedisError) -> StoreError {
    let not_sent = e.is_connection_refusal()
        || matches!(
            e.kind(),
            redis::ErrorKind::Server(
                ServerErrorKind::BusyLoading
                    | ServerErrorKind::ReadOnly
                    | ServerErrorKind::NoScript
            )
        );
    StoreError::StoreFailure {
        message: format!("redis: {e}"),
        ambiguous: !not_sent,
    }
}

fn bad_reply(what: &str) -> StoreError {
    StoreError::StoreFailure {
        message: format!("redis: unexpected script reply ({what})"),
        ambiguous: true,
    }
}

/// The `{'ok', …}` items of a script reply, or the mapped refusal.
struct Reply(Vec<Value>);

impl Reply {
    fn get(&self, i: usize) -> Result<&Value> {
        self.0.get(i).ok_or_else(|| bad_reply("too short"))
    }

    fn len(&self) -> usize {
        self.0.len()
    }

    fn bytes(&self, i: usize) -> Result<Vec<u8>> {
        match self.get(i)? {
            Value::BulkString(b) => Ok(b.clone()),
            Value::SimpleString(s) => Ok(s.clone().into_bytes()),
            Value::Int(n) => Ok(n.to_string().into_bytes()),
            _ => Err(bad_reply("expected a string")),
        }
    }

    fn string(&self, i: usize) -> Result<String> {
        String::from_utf8(self.bytes(i)?).map_err(|_| bad_reply("invalid UTF-8"))
    }

    fn u64(&self, i: usize) -> Result<u64> {
        match self.get(i)? {
            Value::Int(n) => u64::try_from(*n).map_err(|_| bad_reply("negative integer")),
            _ => self
                .string(i)?
                .parse()
                .map_err(|_| bad_reply("expected a decimal")),
        }
    }

    fn time(&self, i: usize) -> Result<StoreTime> {
        self.u64(i).map(StoreTime)
    }
}

fn parse_reply(v: Value) -> Result<Reply> {
    let items = match v {
        Value::Array(items) => items,
        _ => return Err(bad_reply("not an array")),
    };
    let reply = Reply(items);
    match reply.bytes(0)?.as_slice() {
        b"ok" => Ok(Reply(reply.0.into_iter().skip(1).collect())),
        b"e" => Err(refusal(&reply)),
        _ => Err(bad_reply("unknown status")),
    }
}

/// Map `{'e', kind, detail, …}` to the same error the memory provider returns.
fn refusal(r: &Reply) -> StoreError {
    let kind = match r.string(1) {
        Ok(k) => k,
        Err(e) => return e,
    };
    let detail = r.string(2).unwrap_or_default();
    if let Some(reason) = kind.strip_prefix("Stale:") {
        let reason = match reason {
            "StoreVersion" => StaleReason::StoreVersion,
            "ObjectGeneration" => StaleReason::ObjectGeneration,
            "OwnerGeneration" => StaleReason::OwnerGeneration,
            "Owner" => StaleReason::Owner,
            "Reservation" => StaleReason::Reservation,
            "State" => StaleReason::State,
            "LeaseNotLive" => StaleReason::LeaseNotLive,
            "Descriptor" => StaleReason::Descriptor,
            _ => return bad_reply("unknown stale reason"),
        };
        return StoreError::stale(reason, detail);
    }
    match kind.as_str() {
        "Missing" => StoreError::Missing(detail),
        "AlreadyExists" => match (r.string(3), r.time(4)) {
            (Ok(json), Ok(now)) => match decode_record(&json, now) {
                Ok(snap) => StoreError::AlreadyExists(Box::new(snap)),
                Err(e) => e,
            },
            _ => bad_reply("AlreadyExists without a record"),
        },
        "SpotIdConflict" => StoreError::SpotIdConflict(detail),
        "Conflict" => StoreError::Conflict(detail),
        "RoutingIdConflict" => StoreError::RoutingIdConflict(detail),
        "CapacityExhausted" => StoreError::CapacityExhausted(detail),
        "GenerationExhausted" => StoreError::GenerationExhausted(detail),
        "InvalidArgument" => StoreError::InvalidArgument(detail),
        _ => bad_reply("unknown refusal"),
    }
}

// ---- the stored authority record (canonical JSON, generations as decimal strings) ----------

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct TokenJson {
    owner_id: String,
    lease_generation: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct NodeJson {
    mesh: String,
    rid: String,
    lifecycle_generation: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct AllocationJson {
    state: AllocationState,
    object_kind: ObjectKind,
    stable_type: String,
    units: u32,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ContentJson {
    reference: String,
    sha256: String,
    size: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct TargetJson {
    node: NodeJson,
    owner: TokenJson,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PendingJson {
    reservation_id: String,
    reservation_version: String,
    target: TargetJson,
    capacity_delta: u32,
    content: Option<ContentJson>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RecordJson {
    key: String,
    state: AuthorityState,
    store_version: String,
    object_generation: String,
    authority_owner_generation: String,
    owner: TokenJson,
    owner_node: NodeJson,
    allocation: AllocationJson,
    pending_creation: Option<PendingJson>,
    payload: String,
}

fn dec(s: &str) -> Result<u64> {
    s.parse()
        .map_err(|_| bad_reply("generation is not a decimal"))
}

fn hex_bytes(s: &str) -> Result<Vec<u8>> {
    zlink_protocol::codec::hex::decode(s).map_err(|_| bad_reply("payload is not hex"))
}

impl TokenJson {
    fn into_token(self) -> Result<OwnerToken> {
        Ok(OwnerToken {
            lease_generation: dec(&self.lease_generation)?,
            owner_id: self.owner_id,
        })
    }
}

impl NodeJson {
    fn into_node(self) -> Result<NodeRef> {
        Ok(NodeRef {
            lifecycle_generation: dec(&self.lifecycle_generation)?,
            mesh: self.mesh,
            rid: self.rid,
        })
    }
}

fn decode_record(json: &str, now: StoreTime) -> Result<AuthoritySnapshot> {
    let r: RecordJson =
        serde_json::from_str(json).map_err(|_| bad_reply("authority record is not valid JSON"))?;
    let pending_creation = match r.pending_creation {
        None => None,
        Some(p) => Some(PendingCreation {
            reservation_version: dec(&p.reservation_version)?,
            reservation_id: p.reservation_id,
            target: TargetFence {
                node: p.target.node.into_node()?,
                owner: p.target.owner.into_token()?,
            },
            capacity_delta: p.capacity_delta,
            content: match p.content {
                None => None,
                Some(c) => Some(ContentReceipt {
                    sha256: hex_bytes(&c.sha256)?
                        .try_into()
                        .map_err(|_| bad_reply("sha256 is not 32 bytes"))?,
                    size: dec(&c.size)?,
                    reference: c.reference,
                }),
            },
        }),
    };
    Ok(AuthoritySnapshot {
        key: AuthorityKey::from_raw(r.key),
        state: r.state,
        store_version: dec(&r.store_version)?,
        object_generation: dec(&r.object_generation)?,
        authority_owner_generation: dec(&r.authority_owner_generation)?,
        owner: r.owner.into_token()?,
        owner_node: r.owner_node.into_node()?,
        allocation: Allocation {
            state: r.allocation.state,
            object_kind: r.allocation.object_kind,
            stable_type: r.allocation.stable_type,
            units: r.allocation.units,
        },
        pending_creation,
        payload: Bytes::from(hex_bytes(&r.payload)?),
        store_now: now,
    })
}

fn fence_args(args: &mut Args, f: &OwnerFence) {
    args.push(a(f.key.as_str()));
    args.push(a(f.store_version.to_string()));
    args.push(a(f.object_generation.to_string()));
    args.push(a(f.authority_owner_generation.to_string()));
    args.push(a(&f.owner.owner_id));
    args.push(a(f.owner.lease_generation.to_string()));
}

fn reservation_args(res: &Reservation) -> Args {
    vec![
        a(res.key.as_str()),
        a(&res.reservation_id),
        a(res.store_version.to_string()),
        a(res.object_generation.to_string()),
        a(res.authority_owner_generation.to_string()),
        a(res.reservation_version.to_string()),
    ]
}

/// The 14 arguments of one aggregate member (see `aggregate.lua`).
fn aggregate_args(args: &mut Args, op: &AggregateOp) {
    let (tag, fence, target, payload) = match op {
        AggregateOp::Transfer(t) => ("t", &t.source, Some(&t.target), t.payload.as_ref()),
        AggregateOp::Preserve { fence, payload } => ("p", fence, None, Some(payload)),
        AggregateOp::Check(fence) => ("c", fence, None, None),
    };
    args.push(a(tag));
    fence_args(args, fence);
    match target {
        Some(t) => {
            args.push(a(&t.node.mesh));
            args.push(a(&t.node.rid));
            args.push(a(t.node.lifecycle_generation.to_string()));
            args.push(a(&t.owner.owner_id));
            args.push(a(t.owner.lease_generation.to_string()));
        }
        None => args.extend(std::iter::repeat_n(Vec::new(), 5)),
    }
    match payload {
        Some(p) => {
            args.push(a("1"));
            args.push(a(zlink_protocol::codec::hex::encode(p)));
        }
        None => {
            args.push(a("0"));
            args.push(Vec::new());
        }
    }
}

fn run_id_of(info: &str) -> String {
    info.lines()
        .find_map(|l| l.strip_prefix("run_id:"))
        .map(|s| s.trim().to_owned())
        .unwrap_or_default()
}

impl RedisStore {
    /// Connect to `url` (e.g. `redis://127.0.0.1:6379/`), load every script and remember the
    /// server's `run_id`.
    ///
    /// # Errors
    /// `InvalidArgument` for a bad namespace or URL; `StoreFailure` when Redis cannot be reached.
    pub async fn connect(url: &str, config: RedisStoreConfig) -> Result<Self> {
        if config.namespace.is_empty() || config.namespace.contains(['{', '}']) {
            return Err(StoreError::InvalidArgument(
                "the namespace must be non-empty and must not contain '{' or '}'".into(),
            ));
        }
        let client = redis::Client::open(url)
            .map_err(|e| StoreError::InvalidArgument(format!("redis url: {e}")))?;
        let manager_config = ConnectionManagerConfig::new()
            .set_response_timeout(Some(config.response_timeout))
            .set_connection_timeout(Some(config.connection_timeout))
            .set_number_of_retries(config.reconnect_retries)
            .set_min_delay(Duration::from_millis(10))
            .set_max_delay(Duration::from_millis(200));
        let mut conn = ConnectionManager::new_with_config(client, manager_config)
            .await
            .map_err(|e| failure(&e))?;
        let scripts = Scripts::new();
        for s in scripts.all() {
            s.load_async(&mut conn).await.map_err(|e| failure(&e))?;
        }
        let info: String = redis::cmd("INFO")
            .arg("server")
            .query_async(&mut conn)
            .await
            .map_err(|e| failure(&e))?;
        let (recovery, _rx) = watch::channel(0);
        Ok(Self {
            inner: Arc::new(Inner {
                conn,
                prefix: format!("zl:{{{}}}:", config.namespace),
                scripts,
                failed: AtomicBool::new(false),
                run_id: Mutex::new(run_id_of(&info)),
                recovery,
            }),
        })
    }

    /// The key prefix of this store's namespace, `zl:{<namespace>}:`.
    pub fn prefix(&self) -> &str {
        &self.inner.prefix
    }

    /// The Redis key of a store-global counter (one of [`crate::memory::counters::ALL`]).
    pub fn counter_key(&self, name: &str) -> String {
        format!("{}c:{name}", self.inner.prefix)
    }

    /// Load every script into Redis' script cache (done at connect and after a restart).
    ///
    /// # Errors
    /// `StoreFailure` when Redis cannot be reached.
    pub async fn load_scripts(&self) -> Result<()> {
        let mut conn = self.inner.conn.clone();
        for s in self.inner.scripts.all() {
            s.load_async(&mut conn).await.map_err(|e| failure(&e))?;
        }
        Ok(())
    }

    /// Record a store failure, or notice a recovery after one.
    async fn observe<T>(&self, r: std::result::Result<T, RedisError>) -> Result<T> {
        match r {
            Ok(v) => {
                if self.inner.failed.swap(false, Ordering::SeqCst) {
                    self.recovered().await;
                }
                Ok(v)
            }
            Err(e) => {
                self.inner.failed.store(true, Ordering::SeqCst);
                Err(failure(&e))
            }
        }
    }

    /// The store answered again after a failure: signal recovery and, when Redis restarted
    /// (a new `run_id`), reload the scripts so later requests stay one command each.
    async fn recovered(&self) {
        self.inner.recovery.send_modify(|e| *e += 1);
        let mut conn = self.inner.conn.clone();
        let info: std::result::Result<String, _> = redis::cmd("INFO")
            .arg("server")
            .query_async(&mut conn)
            .await;
        let Ok(info) = info else {
            self.inner.failed.store(true, Ordering::SeqCst);
            return;
        };
        let run_id = run_id_of(&info);
        let mut seen = self.inner.run_id.lock().await;
        if *seen != run_id {
            *seen = run_id;
            drop(seen);
            if self.load_scripts().await.is_err() {
                self.inner.failed.store(true, Ordering::SeqCst);
            }
        }
    }

    /// Invoke `script` with `args` (after the namespace prefix) and `keys` declared for
    /// cluster routing: exactly one `EVALSHA` while the script is cached.
    async fn eval(&self, script: &Script, keys: &[String], args: Args) -> Result<Reply> {
        let mut inv = script.prepare_invoke();
        for k in keys {
            inv.key(format!("{}{k}", self.inner.prefix));
        }
        inv.arg(self.inner.prefix.as_bytes());
        for x in &args {
            inv.arg(x.as_slice());
        }
        let mut conn = self.inner.conn.clone();
        let r: std::result::Result<Value, RedisError> = inv.invoke_async(&mut conn).await;
        parse_reply(self.observe(r).await?)
    }

    fn descriptor_from(
        kind: DescriptorKind,
        scope: &str,
        r: &Reply,
        i: usize,
    ) -> Result<DescriptorRecord> {
        Ok(DescriptorRecord {
            key: DescriptorKey {
                kind,
                scope: scope.to_owned(),
                rid: r.string(i)?,
            },
            owner: OwnerToken {
                owner_id: r.string(i + 1)?,
                lease_generation: r.u64(i + 2)?,
            },
            lifecycle_generation: r.u64(i + 3)?,
            revision: r.u64(i + 4)?,
            content: Bytes::from(r.bytes(i + 5)?),
            updated_at: r.time(i + 6)?,
        })
    }

    fn snapshots(r: &Reply, from: usize, now: StoreTime) -> Result<Vec<AuthoritySnapshot>> {
        (from..r.len())
            .map(|i| decode_record(&r.string(i)?, now))
            .collect()
    }
}

impl LocationStore for RedisStore {
    async fn store_now(&self) -> Result<StoreTime> {
        let mut conn = self.inner.conn.clone();
        let r: std::result::Result<(u64, u64), RedisError> =
            redis::cmd("TIME").query_async(&mut conn).await;
        let (sec, usec) = self.observe(r).await?;
        Ok(StoreTime(
            sec.saturating_mul(1000).saturating_add(usec / 1000),
        ))
    }

    async fn claim_lease(&self, owner_id: &str, ttl: Duration) -> Result<LeaseGrant> {
        crate::validate::ttl(ttl)?;
        crate::validate::non_empty(owner_id, "owner id")?;
        let s = &self.inner.scripts;
        let r = self
            .eval(
                &s.claim_lease,
                &[format!("l:{owner_id}")],
                vec![a(owner_id), a(ttl_ms(ttl)), a(ttl_ms(LEASE_GC_GRACE))],
            )
            .await?;
        Ok(LeaseGrant {
            token: OwnerToken {
                owner_id: owner_id.to_owned(),
                lease_generation: r.u64(0)?,
            },
            lease_expires_at: r.time(1)?,
            store_now: r.time(2)?,
        })
    }

    async fn renew_lease(&self, token: &OwnerToken, ttl: Duration) -> Result<LeaseGrant> {
        crate::validate::ttl(ttl)?;
        let s = &self.inner.scripts;
        let r = self
            .eval(
                &s.renew_lease,
                &[format!("l:{}", token.owner_id)],
                vec![
                    a(&token.owner_id),
                    a(token.lease_generation.to_string()),
                    a(ttl_ms(ttl)),
                    a(ttl_ms(LEASE_GC_GRACE)),
                ],
            )
            .await?;
        Ok(LeaseGrant {
            token: token.clone(),
            lease_expires_at: r.time(0)?,
            store_now: r.time(1)?,
        })
    }

    async fn read_lease(&self, owner_id: &str) -> Result<LeaseRead> {
        let s = &self.inner.scripts;
        let r = self
            .eval(&s.read_lease, &[format!("l:{owner_id}")], vec![a(owner_id)])
            .await?;
        let store_now = r.time(0)?;
        if r.len() < 3 {
            return Ok(LeaseRead::Missing { store_now });
        }
        Ok(LeaseRead::Found {
            token: OwnerToken {
                owner_id: owner_id.to_owned(),
                lease_generation: r.u64(1)?,
            },
            lease_expires_at: r.time(2)?,
            store_now,
        })
    }

    async fn release_lease(&self, token: &OwnerToken) -> Result<bool> {
        let s = &self.inner.scripts;
        let r = self
            .eval(
                &s.release_lease,
                &[format!("l:{}", token.owner_id)],
                vec![a(&token.owner_id), a(token.lease_generation.to_string())],
            )
            .await?;
        Ok(r.u64(0)? == 1)
    }

    async fn acquire_term_lease(
        &self,
        name: &str,
        holder: &OwnerToken,
        config_epoch: u64,
        ttl: Duration,
    ) -> Result<TermLease> {
        crate::validate::ttl(ttl)?;
        let s = &self.inner.scripts;
        let r = self
            .eval(
                &s.acquire_term,
                &[format!("t:{name}")],
                vec![
                    a(name),
                    a(&holder.owner_id),
                    a(holder.lease_generation.to_string()),
                    a(config_epoch.to_string()),
                    a(ttl_ms(ttl)),
                ],
            )
            .await?;
        Ok(TermLease {
            name: name.to_owned(),
            holder: holder.clone(),
            term: r.u64(0)?,
            config_epoch,
            expires_at: r.time(1)?,
            store_now: r.time(2)?,
        })
    }

    async fn read_term_lease(&self, name: &str) -> Result<Option<TermLease>> {
        let s = &self.inner.scripts;
        let r = self
            .eval(&s.read_term, &[format!("t:{name}")], vec![a(name)])
            .await?;
        if r.len() < 7 {
            return Ok(None);
        }
        Ok(Some(TermLease {
            name: name.to_owned(),
            holder: OwnerToken {
                owner_id: r.string(1)?,
                lease_generation: r.u64(2)?,
            },
            term: r.u64(3)?,
            config_epoch: r.u64(4)?,
            expires_at: r.time(5)?,
            store_now: r.time(0)?,
        }))
    }

    async fn release_term_lease(&self, name: &str, holder: &OwnerToken, term: u64) -> Result<bool> {
        let s = &self.inner.scripts;
        let r = self
            .eval(
                &s.release_term,
                &[format!("t:{name}")],
                vec![
                    a(name),
                    a(&holder.owner_id),
                    a(holder.lease_generation.to_string()),
                    a(term.to_string()),
                ],
            )
            .await?;
        Ok(r.u64(0)? == 1)
    }

    async fn publish_descriptor(
        &self,
        owner: &OwnerToken,
        key: &DescriptorKey,
        lifecycle_generation: u64,
        revision: u64,
        content: Bytes,
    ) -> Result<PublishOutcome> {
        crate::validate::descriptor(lifecycle_generation, revision)?;
        let s = &self.inner.scripts;
        let r = self
            .eval(
                &s.publish_descriptor,
                &[format!("d:{}:{}", key.kind.tag(), key.scope)],
                vec![
                    a(&owner.owner_id),
                    a(owner.lease_generation.to_string()),
                    a(key.kind.tag()),
                    a(&key.scope),
                    a(&key.rid),
                    a(lifecycle_generation.to_string()),
                    a(revision.to_string()),
                    content.to_vec(),
                ],
            )
            .await?;
        match r.bytes(0)?.as_slice() {
            b"published" => Ok(PublishOutcome::Published),
            b"unchanged" => Ok(PublishOutcome::Unchanged),
            _ => Err(bad_reply("publish outcome")),
        }
    }

    async fn list_descriptors(
        &self,
        kind: DescriptorKind,
        scope: &str,
    ) -> Result<Vec<DescriptorRecord>> {
        let s = &self.inner.scripts;
        let r = self
            .eval(
                &s.list_descriptors,
                &[format!("d:{}:{scope}", kind.tag())],
                vec![a(kind.tag()), a(scope)],
            )
            .await?;
        let mut out = Vec::new();
        let mut i = 1;
        while i + 7 <= r.len() {
            out.push(Self::descriptor_from(kind, scope, &r, i)?);
            i += 7;
        }
        out.sort_by(|x, y| x.key.rid.cmp(&y.key.rid));
        Ok(out)
    }

    async fn remove_descriptor(&self, owner: &OwnerToken, key: &DescriptorKey) -> Result<bool> {
        let s = &self.inner.scripts;
        let r = self
            .eval(
                &s.remove_descriptor,
                &[format!("d:{}:{}", key.kind.tag(), key.scope)],
                vec![
                    a(&owner.owner_id),
                    a(owner.lease_generation.to_string()),
                    a(key.kind.tag()),
                    a(&key.scope),
                    a(&key.rid),
                ],
            )
            .await?;
        Ok(r.u64(0)? == 1)
    }

    async fn claim_routing_id(&self, owner: &OwnerToken, mesh: &str, rid: &str) -> Result<()> {
        let s = &self.inner.scripts;
        self.eval(
            &s.claim_rid,
            &[format!("r:{mesh}")],
            vec![
                a(&owner.owner_id),
                a(owner.lease_generation.to_string()),
                a(mesh),
                a(rid),
            ],
        )
        .await?;
        Ok(())
    }

    async fn set_capacity_limits(
        &self,
        owner: &OwnerToken,
        node: &NodeRef,
        limits: CapacityLimits,
    ) -> Result<()> {
        let s = &self.inner.scripts;
        self.eval(
            &s.set_limits,
            &[],
            vec![
                a(&owner.owner_id),
                a(owner.lease_generation.to_string()),
                a(&node.mesh),
                a(&node.rid),
                a(node.lifecycle_generation.to_string()),
                a(limits.actors.to_string()),
                a(limits.spots.to_string()),
            ],
        )
        .await?;
        Ok(())
    }

    async fn capacity_use(&self, node: &NodeRef) -> Result<CapacityUse> {
        let s = &self.inner.scripts;
        let r = self
            .eval(
                &s.capacity_use,
                &[],
                vec![
                    a(&node.mesh),
                    a(&node.rid),
                    a(node.lifecycle_generation.to_string()),
                ],
            )
            .await?;
        Ok(CapacityUse {
            actors: r.u64(0)?,
            spots: r.u64(1)?,
        })
    }

    async fn read_authority(&self, key: &AuthorityKey) -> Result<AuthorityRead> {
        let s = &self.inner.scripts;
        let r = self
            .eval(
                &s.read_authority,
                &[format!("a:{}", key.as_str())],
                vec![a(key.as_str())],
            )
            .await?;
        let store_now = r.time(0)?;
        if r.len() < 2 {
            return Ok(AuthorityRead::Missing { store_now });
        }
        Ok(AuthorityRead::Found(Box::new(decode_record(
            &r.string(1)?,
            store_now,
        )?)))
    }

    async fn read_route(&self, key: &AuthorityKey) -> Result<RouteRead> {
        let s = &self.inner.scripts;
        let r = self
            .eval(
                &s.read_route,
                &[format!("a:{}", key.as_str())],
                vec![a(key.as_str())],
            )
            .await?;
        let store_now = r.time(0)?;
        if r.len() < 2 {
            return Ok(RouteRead {
                authority: AuthorityRead::Missing { store_now },
                owner_lease: None,
            });
        }
        let record = decode_record(&r.string(1)?, store_now)?;
        let owner_lease = if r.len() >= 4 {
            Some(OwnerLeaseState {
                token: OwnerToken {
                    owner_id: record.owner.owner_id.clone(),
                    lease_generation: r.u64(2)?,
                },
                lease_expires_at: r.time(3)?,
            })
        } else {
            None
        };
        Ok(RouteRead {
            authority: AuthorityRead::Found(Box::new(record)),
            owner_lease,
        })
    }

    async fn reserve(&self, req: &ReserveRequest) -> Result<Reservation> {
        crate::validate::reservation(&req.reservation_id, &req.stable_type)?;
        let canonical = serde_json::to_string(req)
            .map_err(|e| StoreError::InvalidArgument(format!("request: {e}")))?;
        let (has_content, reference, sha, size) = match &req.content {
            Some(c) => (
                "1",
                c.reference.as_str(),
                zlink_protocol::codec::hex::encode(&c.sha256),
                c.size.to_string(),
            ),
            None => ("0", "", String::new(), String::new()),
        };
        let t = &req.target;
        let args = vec![
            a(req.key.as_str()),
            a(&req.reservation_id),
            a(canonical),
            a(kind_str(req.object_kind)),
            a(&req.stable_type),
            a(&t.node.mesh),
            a(&t.node.rid),
            a(t.node.lifecycle_generation.to_string()),
            a(&t.owner.owner_id),
            a(t.owner.lease_generation.to_string()),
            a(req.capacity_delta.to_string()),
            a(has_content),
            a(reference),
            a(sha),
            a(size),
            a(zlink_protocol::codec::hex::encode(&req.payload)),
            a(duration_ms(RESERVATION_REPLAY_RETENTION).to_string()),
        ];
        let s = &self.inner.scripts;
        let r = self
            .eval(
                &s.reserve,
                &[
                    format!("a:{}", req.key.as_str()),
                    format!("res:{}", req.reservation_id),
                ],
                args,
            )
            .await?;
        Ok(Reservation {
            key: req.key.clone(),
            reservation_id: req.reservation_id.clone(),
            store_version: r.u64(0)?,
            object_generation: r.u64(1)?,
            authority_owner_generation: r.u64(2)?,
            reservation_version: r.u64(3)?,
            target: req.target.clone(),
        })
    }

    async fn commit_ready(&self, res: &Reservation, payload: Bytes) -> Result<AuthoritySnapshot> {
        let mut args = reservation_args(res);
        args.push(a(&res.target.owner.owner_id));
        args.push(a(res.target.owner.lease_generation.to_string()));
        args.push(a(zlink_protocol::codec::hex::encode(&payload)));
        let s = &self.inner.scripts;
        let r = self
            .eval(&s.commit_ready, &[format!("a:{}", res.key.as_str())], args)
            .await?;
        decode_record(&r.string(1)?, r.time(0)?)
    }

    async fn abort(&self, res: &Reservation) -> Result<()> {
        let s = &self.inner.scripts;
        self.eval(
            &s.abort,
            &[format!("a:{}", res.key.as_str())],
            reservation_args(res),
        )
        .await?;
        Ok(())
    }

    async fn transfer_owner(&self, transfer: &TransferOwner) -> Result<AuthoritySnapshot> {
        let mut out = self
            .commit_aggregate(&[AggregateOp::Transfer(transfer.clone())])
            .await?;
        out.pop().ok_or_else(|| bad_reply("empty aggregate result"))
    }

    async fn preserve(&self, fence: &OwnerFence, payload: Bytes) -> Result<AuthoritySnapshot> {
        let op = AggregateOp::Preserve {
            fence: fence.clone(),
            payload,
        };
        let mut out = self.commit_aggregate(&[op]).await?;
        out.pop().ok_or_else(|| bad_reply("empty aggregate result"))
    }

    async fn set_state(
        &self,
        fence: &OwnerFence,
        from: AuthorityState,
        to: AuthorityState,
    ) -> Result<AuthoritySnapshot> {
        crate::validate::transition(from, to)?;
        let mut args = Args::new();
        fence_args(&mut args, fence);
        args.push(a(state_str(from)));
        args.push(a(state_str(to)));
        let s = &self.inner.scripts;
        let r = self
            .eval(&s.set_state, &[format!("a:{}", fence.key.as_str())], args)
            .await?;
        decode_record(&r.string(1)?, r.time(0)?)
    }

    async fn commit_aggregate(&self, ops: &[AggregateOp]) -> Result<Vec<AuthoritySnapshot>> {
        crate::validate::aggregate(ops)?;
        let mut args = vec![a(ops.len().to_string())];
        for op in ops {
            aggregate_args(&mut args, op);
        }
        let keys: Vec<String> = ops
            .iter()
            .map(|op| format!("a:{}", op.key().as_str()))
            .collect();
        let s = &self.inner.scripts;
        let r = self.eval(&s.aggregate, &keys, args).await?;
        let out = Self::snapshots(&r, 1, r.time(0)?)?;
        if out.len() != ops.len() {
            return Err(bad_reply("aggregate result length"));
        }
        Ok(out)
    }

    async fn delete_fenced(&self, fence: &OwnerFence) -> Result<()> {
        let mut args = Args::new();
        fence_args(&mut args, fence);
        let s = &self.inner.scripts;
        self.eval(
            &s.delete_fenced,
            &[format!("a:{}", fence.key.as_str())],
            args,
        )
        .await?;
        Ok(())
    }

    fn recovery(&self) -> watch::Receiver<u64> {
        self.inner.recovery.subscribe()
    }
}

impl RelocationStore for RedisStore {
    async fn put(&self, reference: &str, bytes: Bytes, retention: Duration) -> Result<StoreTime> {
        crate::validate::ttl(retention)?;
        crate::validate::non_empty(reference, "reference")?;
        let s = &self.inner.scripts;
        let r = self
            .eval(
                &s.payload_put,
                &[format!("p:{reference}")],
                vec![a(reference), bytes.to_vec(), a(ttl_ms(retention))],
            )
            .await?;
        r.time(0)
    }

    async fn read(&self, reference: &str) -> Result<Option<StoredPayload>> {
        let s = &self.inner.scripts;
        let r = self
            .eval(
                &s.payload_read,
                &[format!("p:{reference}")],
                vec![a(reference)],
            )
            .await?;
        if r.len() < 3 {
            return Ok(None);
        }
        Ok(Some(StoredPayload {
            bytes: Bytes::from(r.bytes(1)?),
            expires_at: r.time(2)?,
            store_now: r.time(0)?,
        }))
    }

    async fn renew(&self, reference: &str, retention: Duration) -> Result<StoreTime> {
        crate::validate::ttl(retention)?;
        let s = &self.inner.scripts;
        let r = self
            .eval(
                &s.payload_renew,
                &[format!("p:{reference}")],
                vec![a(reference), a(ttl_ms(retention))],
            )
            .await?;
        r.time(0)
    }

    async fn delete(&self, reference: &str) -> Result<bool> {
        let s = &self.inner.scripts;
        let r = self
            .eval(
                &s.payload_delete,
                &[format!("p:{reference}")],
                vec![a(reference)],
            )
            .await?;
        Ok(r.u64(0)? == 1)
    }
}
