//! Typed classic fanout event handlers (glossary §4 "Classic fanout", "Topic"; §7 "Packet name",
//! "Message kind" = publish).
//!
//! A handler is registered for one (topic, packet name) pair; a duplicate pair fails when the
//! subscriber starts. Events use the same [`JsonMessage`] types and `framework-json-v1` codec as
//! mesh handlers ([`encode_json`](crate::mesh::handler::encode_json) /
//! [`decode_json`]); raw handlers get the payload bytes. A payload that does not decode never
//! reaches the application function: it is counted as `undecodable` instead.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;

use bytes::Bytes;
use zlink_protocol::metadata::Metadata;
use zlink_protocol::shared_str::SharedStr;

use super::error::FanoutError;
use super::record::wire_topic;
use crate::call::error::CallError;
use crate::mesh::handler::{BoxFuture, JsonMessage, decode_json};

/// Which publisher an event came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublisherRef {
    /// The publisher's RID (discovered publishers; `None` for a manual endpoint).
    pub rid: Option<String>,
    /// Its lifecycle generation (discovered publishers; `None` for a manual endpoint).
    pub lifecycle_generation: Option<u64>,
    /// The endpoint the subscriber's SUB socket is connected to.
    pub endpoint: String,
}

/// What a fanout handler sees besides the event.
#[derive(Debug, Clone)]
pub struct FanoutContext {
    /// The publisher (shared by every event of one SUB socket).
    pub publisher: Arc<PublisherRef>,
    /// The application topic the handler was registered for.
    pub topic: Arc<str>,
    /// The packet name.
    pub packet_name: SharedStr,
    /// The metadata snapshot (empty when the publisher sent none).
    pub metadata: Metadata,
}

/// Why a handler run did not succeed.
#[derive(Debug)]
pub(crate) enum HandlerFailure {
    /// The payload did not decode as the handler's type; the application function never ran.
    Undecodable(CallError),
    /// The application function returned an error.
    Failed(CallError),
}

pub(crate) type EventFn = Arc<
    dyn Fn(
            FanoutContext,
            zlink_protocol::envelope::TypedPayload,
        ) -> BoxFuture<Result<(), HandlerFailure>>
        + Send
        + Sync,
>;

/// The frozen handler table: wire topic → packet name → (topic, handler).
pub(crate) type HandlerTable = HashMap<Vec<u8>, HashMap<String, (Arc<str>, EventFn)>>;

/// The event handlers of one subscriber, built before it starts.
#[derive(Default)]
pub struct FanoutHandlers {
    table: HandlerTable,
    error: Option<FanoutError>,
}

impl std::fmt::Debug for FanoutHandlers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FanoutHandlers")
            .field("topics", &self.table.len())
            .finish()
    }
}

impl FanoutHandlers {
    /// No handlers.
    pub fn new() -> Self {
        Self::default()
    }

    fn insert(&mut self, topic: &str, packet_name: &str, h: EventFn) {
        if self.error.is_some() {
            return;
        }
        let wire = match wire_topic(topic) {
            Ok(w) => w.to_vec(),
            Err(e) => {
                self.error = Some(e.into());
                return;
            }
        };
        let by_name = self.table.entry(wire).or_default();
        if by_name.contains_key(packet_name) {
            self.error = Some(FanoutError::DuplicateHandler {
                topic: topic.to_owned(),
                packet_name: packet_name.to_owned(),
            });
            return;
        }
        by_name.insert(packet_name.to_owned(), (Arc::from(topic), h));
    }

    /// Handle JSON event `M` published on `topic`, one event at a time in arrival order.
    pub fn on_event<M, F, Fut>(&mut self, topic: &str, f: F) -> &mut Self
    where
        M: JsonMessage,
        F: Fn(FanoutContext, M) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), CallError>> + Send + 'static,
    {
        let f = Arc::new(f);
        let h: EventFn = Arc::new(move |ctx, p| {
            let f = Arc::clone(&f);
            Box::pin(async move {
                let m: M = decode_json(&p).map_err(HandlerFailure::Undecodable)?;
                f(ctx, m).await.map_err(HandlerFailure::Failed)
            })
        });
        self.insert(topic, M::PACKET_NAME, h);
        self
    }

    /// Handle events of `packet_name` on `topic` as raw payload bytes.
    pub fn on_event_raw<F, Fut>(&mut self, topic: &str, packet_name: &str, f: F) -> &mut Self
    where
        F: Fn(FanoutContext, Bytes) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), CallError>> + Send + 'static,
    {
        let f = Arc::new(f);
        let h: EventFn = Arc::new(move |ctx, p| {
            let f = Arc::clone(&f);
            Box::pin(async move { f(ctx, p.payload).await.map_err(HandlerFailure::Failed) })
        });
        self.insert(topic, packet_name, h);
        self
    }

    /// The wire topics the subscriber must subscribe to.
    pub fn topics(&self) -> impl Iterator<Item = &[u8]> {
        self.table.keys().map(Vec::as_slice)
    }

    /// Freeze, failing on the first bad topic or duplicate registration.
    pub(crate) fn build(self) -> Result<HandlerTable, FanoutError> {
        match self.error {
            Some(e) => Err(e),
            None => Ok(self.table),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::fanout::record::TopicError;
    use serde::{Deserialize, Serialize};

    #[derive(Serialize, Deserialize)]
    struct Tick {
        n: u32,
    }
    impl JsonMessage for Tick {
        const PACKET_NAME: &'static str = "test.Tick";
    }

    #[test]
    fn duplicate_topic_and_packet_name_fails_at_build() {
        let mut h = FanoutHandlers::new();
        h.on_event("a", |_, _: Tick| async { Ok(()) });
        h.on_event("b", |_, _: Tick| async { Ok(()) });
        h.on_event_raw("a", "other", |_, _| async { Ok(()) });
        assert_eq!(h.table.len(), 2);
        assert_eq!(h.table[&b"a"[..]].len(), 2);
        h.on_event("a", |_, _: Tick| async { Ok(()) });
        assert!(matches!(
            h.build(),
            Err(FanoutError::DuplicateHandler { topic, packet_name })
                if topic == "a" && packet_name == "test.Tick"
        ));
    }

    #[test]
    fn reserved_or_empty_topics_fail_at_build() {
        let mut h = FanoutHandlers::new();
        h.on_event("\u{1}ZLF1", |_, _: Tick| async { Ok(()) });
        assert!(matches!(
            h.build(),
            Err(FanoutError::Topic(TopicError::Reserved))
        ));
        let mut h = FanoutHandlers::new();
        h.on_event("", |_, _: Tick| async { Ok(()) });
        assert!(matches!(
            h.build(),
            Err(FanoutError::Topic(TopicError::Empty))
        ));
    }
}
