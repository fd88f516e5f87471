//! How a StreamNode reaches the object runtime of its node (issue 19 items 4–5): the session
//! owner's half of binding, relay and push. The object runtime implements [`SessionRouter`]
//! (`ObjectRuntime::session_router`); a StreamNode started without one serves sessions that
//! cannot bind.

use std::time::Duration;

use zlink_protocol::envelope::TypedPayload;
use zlink_protocol::metadata::Metadata;
use zlink_session::{CloseReason, SessionId};

use super::bindings::BindingRoute;
use super::handlers::SessionCtx;
use crate::call::error::CallError;
use crate::mesh::handler::BoxFuture;
use crate::object::actor_ref::ActorRef;

/// The object runtime as the session owner sees it (see the module docs).
pub trait SessionRouter: Send + Sync + 'static {
    /// Session `ctx.id()` was accepted: pushes for it go to `ctx`.
    fn opened(&self, ctx: SessionCtx);

    /// Session `id` closed (`reason`): its binding routes are dropped, and each bound Actor
    /// gets one `zlink.session.Disconnected` notice on its route.
    fn closed(&self, id: SessionId, reason: CloseReason);

    /// Bind session `id` to the incarnation `actor` names (command 38 to its owner): the
    /// session's route for that Actor switches once the owner accepted.
    fn bind(&self, id: SessionId, actor: ActorRef) -> BoxFuture<Result<BindingRoute, CallError>>;

    /// Unbind session `id` from Actor `actor_id`: its route is dropped at once and the Actor
    /// gets one `zlink.session.Unbound` notice on it (which ends its binding).
    fn unbind(&self, id: SessionId, actor_id: String) -> BoxFuture<Result<(), CallError>>;

    /// Relay to Actor `actor_id` on session `id`'s stored route (24 with `timeout` `None`, 25
    /// otherwise), with the bound-session tail. Never resent; a route the owner refuses is
    /// dropped.
    fn relay(
        &self,
        id: SessionId,
        actor_id: String,
        payload: TypedPayload,
        metadata: Option<Metadata>,
        timeout: Option<Duration>,
    ) -> BoxFuture<Result<Option<TypedPayload>, CallError>>;

    /// Session `id`'s route for Actor `actor_id`.
    fn binding(&self, id: SessionId, actor_id: &str) -> Option<BindingRoute>;

    /// Every route of session `id` (sorted by Actor ID).
    fn bindings(&self, id: SessionId) -> Vec<BindingRoute>;

    /// The current ActorRef of Actor `id` (one store read), or — with `create_as` — the
    /// Actor of that stable type, created if it is Missing (`get_or_create_actor`).
    fn actor_ref(
        &self,
        id: String,
        create_as: Option<String>,
    ) -> BoxFuture<Result<ActorRef, CallError>>;

    /// Make sure User Spot `id` of `stable_type` exists (get-or-create; placed by the runtime).
    fn ensure_spot(&self, stable_type: String, id: String) -> BoxFuture<Result<(), CallError>>;
}

/// A client packet as the typed payload a relay carries (issue 19 item 5: "name and codec →
/// typed envelope"): the packet name, the codec as content type, the bytes.
pub fn typed_from_packet(packet: &zlink_protocol::stream::StreamPacket) -> TypedPayload {
    use zlink_protocol::json::{JSON_CONTENT_TYPE, RAW_CONTENT_TYPE};
    use zlink_protocol::stream::StreamCodec;
    let content_type = match packet.codec {
        StreamCodec::FrameworkJson => JSON_CONTENT_TYPE,
        StreamCodec::Raw => RAW_CONTENT_TYPE,
    };
    TypedPayload::new(
        packet.packet_name.clone(),
        content_type,
        packet.payload.clone(),
    )
}

/// A push's typed payload as the Send packet its client gets: the framework-json content type
/// becomes that codec, any other content type is sent as raw bytes (**ours**; a STREAM packet
/// has only the two codecs). A push carries no metadata (command 36 has no flags).
pub fn packet_from_typed(payload: &TypedPayload) -> zlink_protocol::stream::StreamPacket {
    use zlink_protocol::json::JSON_CONTENT_TYPE;
    use zlink_protocol::stream::{StreamCodec, StreamPacket};
    let codec = if &*payload.content_type == JSON_CONTENT_TYPE {
        StreamCodec::FrameworkJson
    } else {
        StreamCodec::Raw
    };
    StreamPacket::send(
        codec,
        payload.packet_name.to_string(),
        payload.payload.to_vec(),
    )
}
