//! Typed messages (issue "typed messages"; glossary §7 "Handler namespace", "Message kind",
//! "Packet name"; wire §2 typed payload envelope, §6 `framework-json-v1`).
//!
//! Handlers are registered by (namespace, message kind, packet name) before the node starts;
//! a duplicate key fails at startup. Application code deals in its own types: the default
//! codec is JSON through serde (`framework-json-v1`, content type
//! [`JSON_CONTENT_TYPE`]); raw handlers get the payload bytes as they arrived
//! ([`RAW_CONTENT_TYPE`]). Frames, envelopes and codec tables stay inside the runtime.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::SystemTime;

use bytes::Bytes;
use serde::de::DeserializeOwned;
use zlink_protocol::envelope::TypedPayload;
use zlink_protocol::generated::NodeFence;
use zlink_protocol::metadata::Metadata;
use zlink_protocol::shared_str::SharedStr;

use super::config::MeshConfigError;
use crate::call::error::{CallError, ErrorKind};

pub use zlink_protocol::json::{JSON_CONTENT_TYPE, JsonMessage, RAW_CONTENT_TYPE};

/// How a message completes (glossary §7 "Message kind").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MessageKind {
    /// One-way.
    Send,
    /// Request with exactly one terminal reply.
    Request,
}

impl MessageKind {
    /// Stable name.
    pub const fn name(self) -> &'static str {
        match self {
            Self::Send => "send",
            Self::Request => "request",
        }
    }
}

/// What a handler sees of the message besides its payload.
#[derive(Debug, Clone)]
pub struct MessageContext {
    /// The node that sent it (shared by every message of one connection epoch).
    pub source: Arc<NodeFence>,
    /// Correlation ID of a request (`None` for one-way messages).
    pub correlation_id: Option<String>,
    /// Immutable metadata snapshot (never copied to the reply).
    pub metadata: Metadata,
    /// End-to-end deadline of a request.
    pub deadline: Option<SystemTime>,
    /// The packet name.
    pub packet_name: SharedStr,
    /// The RouteMesh Channel the message was selected for (`None` for node direct): the
    /// handler namespace it was looked up in (glossary §7 "Handler namespace").
    pub channel: Option<SharedStr>,
}

/// Boxed future returned by handlers.
pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;
type SendFn =
    Arc<dyn Fn(MessageContext, TypedPayload) -> BoxFuture<Result<(), CallError>> + Send + Sync>;
type RequestFn = Arc<
    dyn Fn(MessageContext, TypedPayload) -> BoxFuture<Result<TypedPayload, CallError>>
        + Send
        + Sync,
>;

/// One registered handler.
#[derive(Clone)]
pub(crate) enum Handler {
    Send(SendFn),
    Request(RequestFn),
}

impl std::fmt::Debug for Handler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Send(_) => "Handler::Send",
            Self::Request(_) => "Handler::Request",
        })
    }
}

/// Handler lookup key.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct HandlerKey {
    pub namespace: String,
    pub kind: MessageKind,
    pub packet_name: String,
}

/// Handlers of one MeshNode, built before start: node-direct handlers (namespace = its
/// MeshName) and, through [`Handlers::channel`], one separate namespace per RouteMesh Channel
/// the node serves (glossary §7 "Handler namespace": Node direct and ChannelName handlers never
/// share a key space).
#[derive(Clone, Default)]
pub struct Handlers {
    map: HashMap<HandlerKey, (Handler, usize)>,
    duplicate: Option<MeshConfigError>,
    channels: std::collections::BTreeMap<String, Handlers>,
}

impl std::fmt::Debug for Handlers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Handlers")
            .field("count", &self.map.len())
            .field("channels", &self.channels.keys().collect::<Vec<_>>())
            .finish()
    }
}

/// Frozen handler tables: node direct plus one table per Channel namespace.
pub(crate) struct BuiltHandlers {
    pub node: HashMap<HandlerKey, (Handler, usize)>,
    pub channels: std::collections::BTreeMap<String, HashMap<HandlerKey, (Handler, usize)>>,
}

/// Encode a JSON message into a typed payload ([`zlink_protocol::json::encode_json`]).
///
/// # Errors
/// `InvalidOperation` when serde cannot serialize the value.
pub fn encode_json<M: JsonMessage>(msg: &M) -> Result<TypedPayload, CallError> {
    zlink_protocol::json::encode_json(msg)
        .map_err(|e| CallError::new(ErrorKind::InvalidOperation, e.to_string()))
}

/// Decode a typed payload as JSON message `M` ([`zlink_protocol::json::decode_json`]).
///
/// # Errors
/// `InvalidOperation` when the content type is not JSON or the bytes do not decode as `M`.
pub fn decode_json<M: DeserializeOwned>(p: &TypedPayload) -> Result<M, CallError> {
    zlink_protocol::json::decode_json(p)
        .map_err(|e| CallError::new(ErrorKind::InvalidOperation, e.to_string()))
}

impl Handlers {
    /// No handlers.
    pub fn new() -> Self {
        Self::default()
    }

    fn insert(&mut self, kind: MessageKind, packet_name: &str, h: Handler, concurrency: usize) {
        if packet_name.starts_with(super::object_command::SESSION_FRAMEWORK_PREFIX) {
            // The object runtime answers these itself; a handler would never run.
            self.duplicate.get_or_insert(MeshConfigError::Invalid {
                field: "handlers",
                reason: format!("packet name {packet_name:?} is reserved for the framework"),
            });
            return;
        }
        let key = HandlerKey {
            namespace: String::new(),
            kind,
            packet_name: packet_name.to_owned(),
        };
        if self.map.contains_key(&key) {
            self.duplicate
                .get_or_insert(MeshConfigError::DuplicateHandler {
                    namespace: String::new(),
                    kind: kind.name(),
                    packet_name: packet_name.to_owned(),
                });
            return;
        }
        self.map.insert(key, (h, concurrency.max(1)));
    }

    /// One-way handler for JSON message `M`, run one message at a time in arrival order.
    pub fn on_send<M, F, Fut>(&mut self, f: F) -> &mut Self
    where
        M: JsonMessage,
        F: Fn(MessageContext, M) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), CallError>> + Send + 'static,
    {
        let f = Arc::new(f);
        let h: SendFn = Arc::new(move |ctx, p| {
            let f = Arc::clone(&f);
            Box::pin(async move {
                let m: M = decode_json(&p)?;
                f(ctx, m).await
            })
        });
        self.insert(MessageKind::Send, M::PACKET_NAME, Handler::Send(h), 1);
        self
    }

    /// Request handler for JSON request `Req` answered with JSON `Resp`, one at a time.
    pub fn on_request<Req, Resp, F, Fut>(&mut self, f: F) -> &mut Self
    where
        Req: JsonMessage,
        Resp: JsonMessage,
        F: Fn(MessageContext, Req) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Resp, CallError>> + Send + 'static,
    {
        self.on_request_concurrent::<Req, Resp, F, Fut>(1, f)
    }

    /// Request handler allowed to run `concurrency` requests at once.
    pub fn on_request_concurrent<Req, Resp, F, Fut>(
        &mut self,
        concurrency: usize,
        f: F,
    ) -> &mut Self
    where
        Req: JsonMessage,
        Resp: JsonMessage,
        F: Fn(MessageContext, Req) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Resp, CallError>> + Send + 'static,
    {
        let f = Arc::new(f);
        let h: RequestFn = Arc::new(move |ctx, p| {
            let f = Arc::clone(&f);
            Box::pin(async move {
                let req: Req = decode_json(&p)?;
                let resp = f(ctx, req).await?;
                encode_json(&resp)
            })
        });
        self.insert(
            MessageKind::Request,
            Req::PACKET_NAME,
            Handler::Request(h),
            concurrency,
        );
        self
    }

    /// One-way handler receiving raw bytes of `packet_name`.
    pub fn on_send_raw<F, Fut>(&mut self, packet_name: &str, f: F) -> &mut Self
    where
        F: Fn(MessageContext, Bytes) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), CallError>> + Send + 'static,
    {
        let f = Arc::new(f);
        let h: SendFn = Arc::new(move |ctx, p| {
            let f = Arc::clone(&f);
            Box::pin(async move { f(ctx, p.payload).await })
        });
        self.insert(MessageKind::Send, packet_name, Handler::Send(h), 1);
        self
    }

    /// Request handler receiving and answering raw bytes, `concurrency` at once.
    pub fn on_request_raw<F, Fut>(
        &mut self,
        packet_name: &str,
        concurrency: usize,
        f: F,
    ) -> &mut Self
    where
        F: Fn(MessageContext, Bytes) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Bytes, CallError>> + Send + 'static,
    {
        let f = Arc::new(f);
        let h: RequestFn = Arc::new(move |ctx, p| {
            let f = Arc::clone(&f);
            Box::pin(async move {
                let out = f(ctx, p.payload).await?;
                Ok(TypedPayload::new("", RAW_CONTENT_TYPE, out))
            })
        });
        self.insert(
            MessageKind::Request,
            packet_name,
            Handler::Request(h),
            concurrency,
        );
        self
    }

    /// The handler namespace of RouteMesh Channel `name`: handlers registered on the returned
    /// value answer `channel_send` / `channel_request` selected for this node as a Server of
    /// that Channel, never node-direct messages (and the reverse). The node must have a Server
    /// membership for `name` in its configuration, or start fails.
    pub fn channel(&mut self, name: &str) -> &mut Handlers {
        self.channels.entry(name.to_owned()).or_default()
    }

    /// Number of node-direct handlers (Channel namespaces not counted).
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether there are no node-direct handlers.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Freeze every namespace: node direct as `mesh_name`, Channels under their names. Fails on
    /// the first duplicate registration.
    pub(crate) fn build_all(mut self, mesh_name: &str) -> Result<BuiltHandlers, MeshConfigError> {
        let channels = std::mem::take(&mut self.channels)
            .into_iter()
            .map(|(name, h)| h.build(&name).map(|m| (name, m)))
            .collect::<Result<_, _>>()?;
        Ok(BuiltHandlers {
            node: self.build(mesh_name)?,
            channels,
        })
    }

    /// Freeze for a node of `namespace`, failing on the first duplicate registration.
    pub(crate) fn build(
        self,
        namespace: &str,
    ) -> Result<HashMap<HandlerKey, (Handler, usize)>, MeshConfigError> {
        if !self.channels.is_empty() {
            return Err(MeshConfigError::Invalid {
                field: "handlers",
                reason: format!(
                    "Channel namespaces cannot be nested (inside {namespace:?}: {:?})",
                    self.channels.keys().collect::<Vec<_>>()
                ),
            });
        }
        if let Some(dup) = self.duplicate {
            return Err(match dup {
                MeshConfigError::DuplicateHandler {
                    kind, packet_name, ..
                } => MeshConfigError::DuplicateHandler {
                    namespace: namespace.to_owned(),
                    kind,
                    packet_name,
                },
                other => other,
            });
        }
        Ok(self
            .map
            .into_iter()
            .map(|(mut k, v)| {
                k.namespace = namespace.to_owned();
                (k, v)
            })
            .collect())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde::{Deserialize, Serialize};

    #[derive(Serialize, Deserialize, Debug, PartialEq)]
    struct Ping {
        n: u32,
    }
    impl JsonMessage for Ping {
        const PACKET_NAME: &'static str = "test.Ping";
    }

    #[test]
    fn duplicate_keys_fail_at_build_with_the_key_named() {
        let mut h = Handlers::new();
        h.on_send(|_, _: Ping| async { Ok(()) });
        h.on_send(|_, _: Ping| async { Ok(()) });
        let err = h.build("mesh-a").unwrap_err();
        assert_eq!(
            err,
            MeshConfigError::DuplicateHandler {
                namespace: "mesh-a".into(),
                kind: "send",
                packet_name: "test.Ping".into()
            }
        );
    }

    #[test]
    fn framework_session_names_cannot_be_registered() {
        let mut h = Handlers::new();
        h.on_request_raw(
            "zlink.session.BindingTombstone",
            1,
            |_, b| async move { Ok(b) },
        );
        let err = h.build("m").unwrap_err();
        assert!(
            matches!(&err, MeshConfigError::Invalid { field: "handlers", reason } if reason.contains("reserved")),
            "{err:?}"
        );
    }

    #[test]
    fn same_packet_name_may_have_a_send_and_a_request_handler() {
        let mut h = Handlers::new();
        h.on_send(|_, _: Ping| async { Ok(()) });
        h.on_request(|_, p: Ping| async move { Ok(p) });
        assert_eq!(h.build("m").unwrap().len(), 2);
    }

    #[test]
    fn json_round_trip_and_typed_decode_errors() {
        let p = encode_json(&Ping { n: 7 }).unwrap();
        assert_eq!(p.packet_name, "test.Ping");
        assert_eq!(decode_json::<Ping>(&p).unwrap(), Ping { n: 7 });
        let bad = TypedPayload::new("test.Ping", JSON_CONTENT_TYPE, &b"{\"n\":\"x\"}"[..]);
        assert_eq!(
            decode_json::<Ping>(&bad).unwrap_err().kind(),
            ErrorKind::InvalidOperation
        );
        let raw = TypedPayload::new("test.Ping", RAW_CONTENT_TYPE, &b"{}"[..]);
        assert_eq!(
            decode_json::<Ping>(&raw).unwrap_err().kind(),
            ErrorKind::InvalidOperation
        );
    }
}
