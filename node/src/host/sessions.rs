//! The host's STREAM sessions reach whichever object runtime is current (issue 19; a rejoin
//! after a lost owner lease replaces the runtime, issue 20).
//!
//! [`HostRouter`] is the [`SessionRouter`] the host's StreamNode is served with. It keeps the
//! open sessions itself, and the first call after the runtime changed opens them in the new
//! one: a session outlives its node lifecycle, its bindings do not (the Actors of the old
//! lifecycle were dropped with it, so the application binds again).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use zlink::call::error::{CallError, ErrorKind};
use zlink::mesh::handler::BoxFuture;
use zlink::object::ActorRef;
use zlink::session::{BindingRoute, CloseReason, SessionCtx, SessionId, SessionRouter};
use zlink_protocol::envelope::TypedPayload;
use zlink_protocol::metadata::Metadata;

use super::{Host, HostRuntime};

/// See the module docs.
pub(super) struct HostRouter {
    host: Weak<Host>,
    open: Mutex<HashMap<SessionId, SessionCtx>>,
    /// The runtime the open sessions were last opened in.
    last: Mutex<Weak<HostRuntime>>,
}

fn no_runtime() -> CallError {
    CallError::new(
        ErrorKind::Unavailable,
        "this host has no object runtime now (starting, or rejoining after a lost lease)",
    )
}

impl HostRouter {
    pub(super) fn new(host: &Arc<Host>) -> Arc<Self> {
        Arc::new(Self {
            host: Arc::downgrade(host),
            open: Mutex::default(),
            last: Mutex::new(Weak::new()),
        })
    }

    /// The current runtime's router, with every open session opened in it.
    fn current(&self) -> Option<Arc<dyn SessionRouter>> {
        let rt = self.host.upgrade()?.objects()?;
        let router = rt.session_router();
        let mut last = self
            .last
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if !last.upgrade().is_some_and(|l| Arc::ptr_eq(&l, &rt)) {
            *last = Arc::downgrade(&rt);
            let open = self
                .open
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            for ctx in open.values() {
                router.opened(ctx.clone());
            }
        }
        Some(router)
    }
}

impl SessionRouter for HostRouter {
    fn opened(&self, ctx: SessionCtx) {
        self.open
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(ctx.id(), ctx.clone());
        if let Some(r) = self.current() {
            r.opened(ctx);
        }
    }

    fn closed(&self, id: SessionId, reason: CloseReason) {
        self.open
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(&id);
        if let Some(r) = self.current() {
            r.closed(id, reason);
        }
    }

    fn bind(&self, id: SessionId, actor: ActorRef) -> BoxFuture<Result<BindingRoute, CallError>> {
        match self.current() {
            Some(r) => r.bind(id, actor),
            None => Box::pin(async { Err(no_runtime()) }),
        }
    }

    fn unbind(&self, id: SessionId, actor_id: String) -> BoxFuture<Result<(), CallError>> {
        match self.current() {
            Some(r) => r.unbind(id, actor_id),
            None => Box::pin(async { Err(no_runtime()) }),
        }
    }

    fn relay(
        &self,
        id: SessionId,
        actor_id: String,
        payload: TypedPayload,
        metadata: Option<Metadata>,
        timeout: Option<Duration>,
    ) -> BoxFuture<Result<Option<TypedPayload>, CallError>> {
        match self.current() {
            Some(r) => r.relay(id, actor_id, payload, metadata, timeout),
            None => Box::pin(async { Err(no_runtime()) }),
        }
    }

    fn binding(&self, id: SessionId, actor_id: &str) -> Option<BindingRoute> {
        self.current()?.binding(id, actor_id)
    }

    fn ensure_spot(&self, stable_type: String, id: String) -> BoxFuture<Result<(), CallError>> {
        match self.current() {
            Some(r) => r.ensure_spot(stable_type, id),
            None => Box::pin(async { Err(no_runtime()) }),
        }
    }

    fn bindings(&self, id: SessionId) -> Vec<BindingRoute> {
        self.current().map(|r| r.bindings(id)).unwrap_or_default()
    }

    fn actor_ref(
        &self,
        id: String,
        create_as: Option<String>,
    ) -> BoxFuture<Result<ActorRef, CallError>> {
        match self.current() {
            Some(r) => r.actor_ref(id, create_as),
            None => Box::pin(async { Err(no_runtime()) }),
        }
    }
}
