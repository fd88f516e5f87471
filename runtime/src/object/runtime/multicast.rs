//! Logical Multicast (glossary §4; issue "Instance Spot cold activation" §4): `publish` fixes the target snapshot and sends one record per remote node; a received publish is delivered to this node's Spots subscribed to (Channel, topic, packet name).

use super::*;

impl<S: ObjectStore> Inner<S> {
    /// Queue a publish, one-way, on every live Spot here subscribed to (`channel`, `topic`,
    /// its packet name).
    pub(super) fn deliver_to_subscribers(
        &self,
        channel: &str,
        topic: &str,
        payload: &TypedPayload,
        metadata: Option<&Metadata>,
    ) {
        let packet_name = payload.packet_name.as_str();
        let subscribers: Vec<Arc<dyn LiveObject>> = self
            .live()
            .values()
            .filter(|e| {
                e.ty.subscriptions().iter().any(|s| {
                    s.channel == channel && s.topic == topic && s.packet_name == packet_name
                })
            })
            .map(|e| Arc::clone(&e.obj))
            .collect();
        for obj in subscribers {
            if obj.send(payload.clone(), metadata.cloned()).is_ok() {
                self.stats
                    .multicast_local_deliveries
                    .fetch_add(1, Ordering::Relaxed);
            }
        }
    }
    /// Deliver a publish from another node to the local subscriptions.
    pub(super) fn multicast_delivery(&self, d: MulticastIn) {
        let member = self
            .mesh
            .descriptor()
            .channels
            .iter()
            .any(|c| c.channel_name == d.channel);
        if !member {
            self.stats
                .multicast_not_member
                .fetch_add(1, Ordering::Relaxed);
            return;
        }
        self.deliver_to_subscribers(&d.channel, &d.topic, &d.payload, d.metadata.as_ref());
    }
}

impl<S: ObjectStore> ObjectRuntime<S> {
    /// Logical Multicast (glossary §4; issue "Instance Spot cold activation" §4): publish `msg`
    /// on (`channel`, `topic`). The target snapshot is fixed now: every ready remote node that
    /// is a Server of `channel` with a positive weight gets one `logicalMulticast` (23) — the
    /// weight's size does not matter — and this node's own matching Spot subscriptions get it
    /// locally. Each receiving node delivers it, one-way, to its local Spots subscribed to
    /// (`channel`, `topic`, `M`'s packet name). Completes without a per-target result (a target
    /// that cannot be reached is counted); membership changes during the publish do not
    /// change its snapshot.
    ///
    /// # Errors
    /// `InvalidOperation` for a reserved or malformed topic, or when this node is not a member
    /// of `channel` — checked before anything is sent.
    pub async fn publish<M: JsonMessage>(
        &self,
        channel: &str,
        topic: &str,
        msg: &M,
    ) -> Result<(), CallError> {
        self.publish_payload(channel, topic, encode_json(msg)?, None)
            .await
    }
    /// [`ObjectRuntime::publish`] with a typed payload and a metadata snapshot.
    ///
    /// # Errors
    /// As [`ObjectRuntime::publish`].
    pub async fn publish_payload(
        &self,
        channel: &str,
        topic: &str,
        payload: TypedPayload,
        metadata: Option<Metadata>,
    ) -> Result<(), CallError> {
        let inner = &self.inner;
        if let Some(why) = crate::object::registry::topic_problem(topic) {
            return Err(CallError::new(
                ErrorKind::InvalidOperation,
                format!("topic {topic:?} cannot be published: {why}"),
            ));
        }
        let me = inner.mesh.descriptor();
        if !me.channels.iter().any(|c| c.channel_name == channel) {
            return Err(CallError::new(
                ErrorKind::InvalidOperation,
                format!(
                    "node {} is not a member of Channel {channel:?}",
                    me.node.rid
                ),
            ));
        }
        // The target snapshot, fixed once.
        let remote: Vec<zlink_protocol::generated::NodeFence> = inner
            .mesh
            .peers()
            .into_iter()
            .filter(|p| p.state == crate::mesh::PeerState::Ready)
            .filter_map(|p| p.descriptor)
            .filter(|d| {
                d.channels.iter().any(|c| {
                    c.channel_name == channel
                        && c.role == zlink_protocol::generated::ChannelRole::Server
                        && c.weight > 0
                })
            })
            .map(|d| d.node)
            .collect();
        let sequence = inner.publish_seq.fetch_add(1, Ordering::Relaxed) + 1;
        inner
            .stats
            .multicast_published
            .fetch_add(1, Ordering::Relaxed);
        inner.deliver_to_subscribers(channel, topic, &payload, metadata.as_ref());
        // One record per target, submitted side by side: a slow peer does not hold up the rest.
        let sends = remote.iter().map(|node| {
            let (payload, metadata) = (payload.clone(), metadata.clone());
            async move {
                let sent = inner
                    .mesh
                    .logical_multicast(node, channel, topic, sequence, payload, metadata)
                    .await;
                (node, sent)
            }
        });
        for (node, sent) in futures::future::join_all(sends).await {
            match sent {
                Ok(()) => inner.stats.multicast_sent.fetch_add(1, Ordering::Relaxed),
                Err(e) => {
                    tracing::debug!(node = %node.rid, error = %e, "a multicast target was not reached");
                    inner
                        .stats
                        .multicast_submit_failures
                        .fetch_add(1, Ordering::Relaxed)
                }
            };
        }
        Ok(())
    }
}
