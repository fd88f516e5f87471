//! A routed StreamNode on loopback and a Stream Connector client of it: the setup of the
//! session binding and session relocation tests.

use std::sync::Arc;

use zlink::session::{SessionHandlers, SessionRouter, StreamConfig, StreamNode};
use zlink_connector::{Connector, ConnectorConfig, DispatchMode};

/// A StreamNode on 127.0.0.1 (an ephemeral port) serving `handlers` through `router`.
pub async fn routed_stream_node(
    handlers: SessionHandlers,
    router: Arc<dyn SessionRouter>,
) -> StreamNode {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let config = StreamConfig::new(listener.local_addr().unwrap());
    StreamNode::serve_routed(listener, config, handlers, router).unwrap()
}

/// A connected client of `node` dispatching pushes at once (`Immediate`).
pub async fn client(node: &StreamNode) -> Connector {
    let mut cfg = ConnectorConfig::new(node.local_addr().to_string());
    cfg.dispatch_mode = DispatchMode::Immediate;
    Connector::connect(cfg).await.unwrap()
}
