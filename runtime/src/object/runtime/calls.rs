//! The call path shared by every ID-addressed surface: resolve (route cache first), submit to the owner (local queue or the mesh), and target admission of records that arrive (routing `000_…` §2.1–§2.6). `ObjectRuntime` and a handler's `Ctx` share it.

use super::*;

/// A one-way send [`Inner::try_send_now`] could not complete at once, for the waiting path:
/// the payload, metadata and, when the route was cached, that route.
pub(super) struct SendLater {
    payload: TypedPayload,
    metadata: Option<Metadata>,
    route: Option<Arc<ReadyRoute>>,
}

impl<S: ObjectStore> Inner<S> {
    /// The call path shared by every ID-addressed surface: `timeout` `None` is a one-way send.
    ///
    /// # Errors
    /// See the module docs.
    pub(super) async fn call(
        &self,
        kind: StoreKind,
        id: &str,
        payload: TypedPayload,
        metadata: Option<Metadata>,
        timeout: Option<Duration>,
    ) -> Result<Option<TypedPayload>, CallError> {
        self.call_with(kind, id, None, payload, metadata, timeout)
            .await
    }

    /// [`Inner::call`] on `cached`, the route a [`Inner::try_send_now`] found, when it has one
    /// (it is not resolved again).
    async fn call_with(
        &self,
        kind: StoreKind,
        id: &str,
        cached: Option<Arc<ReadyRoute>>,
        payload: TypedPayload,
        metadata: Option<Metadata>,
        timeout: Option<Duration>,
    ) -> Result<Option<TypedPayload>, CallError> {
        let inner = self;
        let invalid = |e: zlink_protocol::ids::IdError| {
            CallError::new(ErrorKind::InvalidOperation, e.to_string())
        };
        // A cached route is found by the key text in a reused buffer; the key is allocated
        // only for a read from the store.
        let cached = match cached {
            Some(r) => Some(r),
            None => AuthorityKey::with_text(kind, id, |key| inner.resolver.cached(key))
                .map_err(invalid)?,
        };
        let resolved = match cached {
            Some(r) => Resolution::ReadyRoute(r),
            None => {
                let key = AuthorityKey::new(kind, id).map_err(invalid)?;
                inner.resolver.resolve(&key).await
            }
        };
        let route = match resolved {
            Resolution::ReadyRoute(r) => r,
            Resolution::Missing => {
                return Err(CallError::new(
                    ErrorKind::NotFound,
                    format!("{id} does not exist"),
                ));
            }
            Resolution::Unavailable { reason, .. } => {
                return Err(CallError::new(
                    ErrorKind::Unavailable,
                    format!("{id} cannot be used now ({reason:?})"),
                ));
            }
            Resolution::StoreFailure(e) => return Err(store_error(e)),
        };
        let fence = route_fence(&route, kind, id);
        let out = if inner.owns(&route) {
            match inner.admit_local(&fence, payload.payload.len()) {
                Ok(obj) => match timeout {
                    None => obj.send(payload, metadata).map(|()| None),
                    Some(t) => {
                        let rx = obj.request_start(payload, metadata)?;
                        match tokio::time::timeout(t, rx).await {
                            Ok(Ok(r)) => r.map(Some),
                            Ok(Err(_)) => {
                                Err(CallError::new(ErrorKind::Unavailable, "object closed"))
                            }
                            Err(_) => Err(CallError::new(
                                ErrorKind::DeadlineExceeded,
                                format!("no reply from {id} within {t:?}"),
                            )),
                        }
                    }
                },
                Err(e) => Err(e),
            }
        } else {
            inner.stats.remote_calls.fetch_add(1, Ordering::Relaxed);
            match timeout {
                None => inner
                    .mesh
                    .object_send(fence, payload, metadata)
                    .await
                    .map(|()| None),
                Some(t) => inner
                    .mesh
                    .object_request(fence, payload, metadata, t)
                    .await
                    .map(Some),
            }
        };
        inner.forget_route_after(&route, &out);
        out
    }

    /// Whether `route` names this node lifecycle as the owner.
    fn owns(&self, route: &ReadyRoute) -> bool {
        route.owner_node.rid == self.mesh.rid()
            && route.owner_node.lifecycle_generation == self.mesh.lifecycle_generation()
    }

    /// A call to an object this node owns: counted, admitted on `fence`, and the caller's own
    /// cached route dropped if it is an old one this node follows.
    fn admit_local(
        &self,
        fence: &RouteFence,
        payload_len: usize,
    ) -> Result<Arc<dyn LiveObject>, CallError> {
        self.stats.local_calls.fetch_add(1, Ordering::Relaxed);
        let admitted = self.admit(fence);
        if admitted.is_ok() {
            self.notice_follow(fence, &self.mesh.fence(), None, payload_len);
        }
        admitted
    }

    /// A call on `route` ended with `out`. StaleRoute: the owner refused the route.
    /// Unavailable: no connection to that owner lifecycle (it restarted or left). Either way
    /// the next call resolves again.
    fn forget_route_after<T>(&self, route: &ReadyRoute, out: &Result<T, CallError>) {
        if let Err(e) = out
            && matches!(e.kind(), ErrorKind::StaleRoute | ErrorKind::Unavailable)
        {
            self.resolver.cache().stale_route(&route.fence());
        }
    }

    /// A one-way send that completes now, without the waiting call path: the route is cached
    /// and the owner is this node, or another node whose connection takes the record at once
    /// (credit and queue room). `Ok` is the send's result, as [`Inner::call`] would give it;
    /// `Err` hands the send back for [`Inner::call_with`] — a cache miss, or no room now —
    /// which then resolves (unless a route was found), waits or reports as usual. Handlers'
    /// sends are mostly this: the waiting path's future (resolve, credit, queue room) is large,
    /// and building it (boxed, from a handler) for a send that never waits cost a copy of it
    /// per message.
    pub(super) fn try_send_now(
        &self,
        kind: StoreKind,
        id: &str,
        payload: TypedPayload,
        metadata: Option<Metadata>,
    ) -> Result<Result<(), CallError>, Box<SendLater>> {
        let later = |payload, metadata, route| {
            Box::new(SendLater {
                payload,
                metadata,
                route,
            })
        };
        // The key text is built in a reused buffer: no key allocated per send.
        let Ok(Some(route)) = AuthorityKey::with_text(kind, id, |key| self.resolver.cached(key))
        else {
            return Err(later(payload, metadata, None));
        };
        let fence = route_fence(&route, kind, id);
        if !self.owns(&route) {
            if let Err((payload, metadata)) = self.mesh.try_object_send(fence, payload, metadata) {
                return Err(later(payload, metadata, Some(route)));
            }
            self.stats.remote_calls.fetch_add(1, Ordering::Relaxed);
            return Ok(Ok(()));
        }
        let out = self
            .admit_local(&fence, payload.payload.len())
            .and_then(|obj| obj.send(payload, metadata));
        self.forget_route_after(&route, &out);
        Ok(out)
    }

    /// A one-way send on the waiting path: the call [`Inner::try_send_now`] handed back.
    pub(super) async fn send_later(
        &self,
        kind: StoreKind,
        id: &str,
        later: SendLater,
    ) -> Result<Option<TypedPayload>, CallError> {
        self.call_with(kind, id, later.route, later.payload, later.metadata, None)
            .await
    }

    /// Target admission and queueing of an admitted Spot / Actor record (see the module docs).
    pub(super) fn deliver(&self, d: RemoteMessage) {
        let admitted = match &d.session {
            None => self.admit(&d.route),
            Some(tail) => {
                let r = self.admit_relay(&d.route, tail, &d.payload);
                if r.is_err() {
                    let stats = &self.session_stats;
                    let c = if d.request.is_some() {
                        &stats.relays_refused
                    } else {
                        &stats.relay_drops
                    };
                    c.fetch_add(1, Ordering::Relaxed);
                }
                r
            }
        };
        if admitted.is_ok() {
            self.notice_follow(
                &d.route,
                &d.source,
                d.request.as_ref(),
                d.payload.payload.len(),
            );
        }
        match admitted {
            Ok(obj) => self.serve_admitted(&obj, d),
            Err(e) => match d.request {
                None => {
                    // A one-way message on a stale route has no one to answer: counted as a
                    // drop event (wire §7); the sender's cache entry lapses with its lifetime.
                    self.stats.dropped_sends.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(error = %e, "object send on a stale route dropped");
                }
                Some(req) => self.mesh.reply_to(&d.source, &req, Err(e)),
            },
        }
    }

    /// Queue an admitted Spot / Actor record in `obj` (a request is answered to its sender
    /// once it ends). When `obj` is the follow route of an object this node handed over, a
    /// record of another node is forwarded as it came instead (see
    /// [`Intake::take_as_sent`](super::intake::Intake::take_as_sent)).
    pub(super) fn serve_admitted(&self, obj: &Arc<dyn LiveObject>, d: RemoteMessage) {
        if let Some(req) = &d.request
            && req.deadline_unix_ms <= now_unix_ms()
        {
            self.mesh.reply_to(
                &d.source,
                req,
                Err(CallError::new(
                    ErrorKind::DeadlineExceeded,
                    "the request's deadline passed before it was admitted",
                )),
            );
            return;
        }
        let Some(d) = self.take_as_sent(obj, d) else {
            return;
        };
        match d.request {
            None => {
                if let Err(e) = obj.send(d.payload, d.metadata) {
                    tracing::debug!(error = %e, "object send refused after admission");
                }
            }
            // Queued now, in arrival order with later records of the same sender; whoever
            // ends it sends the reply (no task waits for it).
            Some(req) => obj.request_into(
                d.payload,
                d.metadata,
                crate::object::work::Reply::mesh(Arc::clone(&self.mesh), d.source, req),
            ),
        }
    }

    /// Message Follow as it came (wire §3.1, issue 17 item 7): `d` goes into `obj` with its
    /// sender, route and request identity when `obj` is a follow route taking such records;
    /// `Some(d)` back otherwise. Only looked at while this node follows some object.
    fn take_as_sent(&self, obj: &Arc<dyn LiveObject>, d: RemoteMessage) -> Option<RemoteMessage> {
        if d.session.is_some() || !self.relocations.follows_any() {
            return Some(d);
        }
        let Some(intake) = obj
            .as_any()
            .and_then(|a| a.downcast_ref::<super::intake::Intake>())
        else {
            return Some(d);
        };
        let origin = super::intake::Origin {
            source: d.source,
            route: d.route,
            request: d.request,
            mesh: Arc::clone(&self.mesh),
        };
        match intake.take_as_sent(Box::new((origin, d.payload, d.metadata))) {
            Ok(()) => None,
            Err(back) => {
                let (o, payload, metadata) = *back;
                Some(RemoteMessage {
                    source: o.source,
                    route: o.route,
                    request: o.request,
                    metadata,
                    payload,
                    session: None,
                })
            }
        }
    }

    /// Target admission: the live object for `route`, if this node holds it under the route's
    /// owner generation and lease (ObjectGeneration is not compared).
    pub(super) fn admit(&self, route: &RouteFence) -> Result<Arc<dyn LiveObject>, CallError> {
        let stale = |why: &str| {
            self.stats.stale_routes.fetch_add(1, Ordering::Relaxed);
            CallError::new(
                ErrorKind::StaleRoute,
                format!("{} on {}: {why}", route.object_id, self.mesh.rid()),
            )
        };
        let kind = store_kind(route.object_kind);
        // Looked up by the key text, built in a reused buffer (no key allocated per received
        // message); the checks below decide whether the lookup's answer is used.
        let admitted = AuthorityKey::with_text(kind, &route.object_id, |key| {
            self.live()
                .admit(
                    key,
                    route.object_generation,
                    route.authority_owner_generation,
                )
                .map(|e| Arc::clone(&e.obj))
        })
        .map_err(|e| CallError::new(ErrorKind::InvalidOperation, e.to_string()))?;
        if !self.mesh.admission_open() {
            // Fenced (glossary §8): renewals failed past the fencing deadline; no new work.
            return Err(CallError::new(
                ErrorKind::Unavailable,
                format!(
                    "{} on {}: the owner lease could not be renewed before the fencing deadline",
                    route.object_id,
                    self.mesh.rid()
                ),
            ));
        }
        let lease_ok = self.mesh.owner_lease_generation() == Some(route.owner_lease_generation);
        if !lease_ok {
            return Err(stale(
                "the route's owner lease is not this host's current lease",
            ));
        }
        match admitted {
            Ok(obj) => Ok(obj),
            Err(refusal) => AuthorityKey::new(kind, &route.object_id)
                .ok()
                .and_then(|key| self.temporary_admit(&key, route))
                .ok_or_else(|| stale(refusal.why())),
        }
    }
}

impl<S: ObjectStore> ObjectCaller for Inner<S> {
    fn hosting_node(&self) -> (String, u64) {
        (self.mesh.rid().to_owned(), self.mesh.lifecycle_generation())
    }

    fn bound_session(
        &self,
        key: &AuthorityKey,
        generation: u64,
    ) -> Option<zlink_protocol::generated::SessionRef> {
        self.binding_of(key, generation)
    }

    fn push_to_session(
        &self,
        key: AuthorityKey,
        generation: u64,
        payload: TypedPayload,
    ) -> crate::mesh::handler::BoxFuture<Result<(), CallError>> {
        let this = self.this.get().and_then(std::sync::Weak::upgrade);
        Box::pin(async move {
            match this {
                Some(this) => this.push(&key, generation, payload).await,
                None => Err(CallError::new(
                    ErrorKind::ShuttingDown,
                    "object runtime stopped",
                )),
            }
        })
    }

    fn call_object(
        &self,
        kind: StoreKind,
        id: String,
        payload: TypedPayload,
        timeout: Option<Duration>,
        held: Option<crate::object::exec::SpotGate>,
    ) -> crate::mesh::handler::BoxFuture<Result<Option<TypedPayload>, CallError>> {
        let this = self.this.get().and_then(std::sync::Weak::upgrade);
        if timeout.is_none()
            && let Some(this) = this
        {
            return match this.try_send_now(kind, &id, payload, None) {
                Ok(out) => Box::pin(std::future::ready(out.map(|()| None))),
                Err(later) => Box::pin(async move { this.send_later(kind, &id, *later).await }),
            };
        }
        Box::pin(async move {
            let Some(this) = this else {
                return Err(CallError::new(
                    ErrorKind::ShuttingDown,
                    "object runtime stopped",
                ));
            };
            if let (Some(held), Some(_)) = (&held, timeout)
                && let Ok(key) = AuthorityKey::new(kind, &id)
            {
                let same_gate = this
                    .live()
                    .get(&key)
                    .and_then(|e| e.obj.gate())
                    .is_some_and(|g| Arc::ptr_eq(&g, held));
                if same_gate {
                    return Err(CallError::new(
                        ErrorKind::InvalidOperation,
                        format!(
                            "{id} shares this turn's SpotWide gate: an Async request would wait \
                             for the gate its caller holds; wrap it in Yield or send one-way"
                        ),
                    ));
                }
            }
            this.call(kind, &id, payload, None, timeout).await
        })
    }
}

/// ID-addressed calls to Spots and Actors (routing `000_…` §2): the one call surface shared by
/// the runtime handle ([`ObjectRuntime`]) and a handler's context
/// ([`Ctx`](crate::object::exec::Ctx)). Each implements only [`ObjectCalls::call_payload`];
/// the typed methods are this trait's.
///
/// Bring it into scope to call: `use zlink::object::ObjectCalls;`.
pub trait ObjectCalls: Sync {
    /// Submit `payload` to the object (`kind`, `id`): `timeout` `None` is a one-way send that
    /// completes at source-local admission, `Some` a request with one end-to-end deadline whose
    /// reply payload is returned.
    ///
    /// # Errors
    /// `NotFound` (Missing), `Unavailable`, `StaleRoute`, `StoreFailure`, `InvalidOperation`,
    /// `DeadlineExceeded`, or the handler's error.
    fn call_payload(
        &self,
        kind: StoreKind,
        id: &str,
        payload: TypedPayload,
        timeout: Option<Duration>,
    ) -> impl Future<Output = Result<Option<TypedPayload>, CallError>> + Send;

    /// One-way `msg` to the object (`kind`, `id`): completes at source-local admission, so a
    /// handler's turn is not held for the remote handler.
    ///
    /// # Errors
    /// As [`ObjectCalls::call_payload`].
    fn send_to<M: JsonMessage>(
        &self,
        kind: StoreKind,
        id: &str,
        msg: &M,
    ) -> impl Future<Output = Result<(), CallError>> + Send {
        let payload = encode_json(msg);
        async move {
            self.call_payload(kind, id, payload?, None)
                .await
                .map(|_| ())
        }
    }

    /// Request `msg` to the object (`kind`, `id`) with one end-to-end `timeout`. From a
    /// handler, awaiting it is `Async` (the turn is kept); wrap it in
    /// [`Ctx::yield_on`](crate::object::exec::Ctx::yield_on) to `Yield`.
    ///
    /// # Errors
    /// As [`ObjectCalls::call_payload`]; `InvalidOperation` when the reply is not an `R`.
    fn request_to<M: JsonMessage, R: JsonMessage>(
        &self,
        kind: StoreKind,
        id: &str,
        msg: &M,
        timeout: Duration,
    ) -> impl Future<Output = Result<R, CallError>> + Send {
        let payload = encode_json(msg);
        async move {
            let reply = self.call_payload(kind, id, payload?, Some(timeout)).await?;
            decode_json(&reply.unwrap_or_default())
        }
    }

    /// One-way message to Actor `id` ([`ObjectCalls::send_to`]).
    ///
    /// # Errors
    /// As [`ObjectCalls::call_payload`].
    fn send_to_actor<M: JsonMessage>(
        &self,
        id: &str,
        msg: &M,
    ) -> impl Future<Output = Result<(), CallError>> + Send {
        self.send_to(StoreKind::Actor, id, msg)
    }

    /// Request to Actor `id` ([`ObjectCalls::request_to`]).
    ///
    /// # Errors
    /// As [`ObjectCalls::request_to`].
    fn request_to_actor<M: JsonMessage, R: JsonMessage>(
        &self,
        id: &str,
        msg: &M,
        timeout: Duration,
    ) -> impl Future<Output = Result<R, CallError>> + Send {
        self.request_to(StoreKind::Actor, id, msg, timeout)
    }

    /// One-way message to Spot `id` ([`ObjectCalls::send_to`]).
    ///
    /// # Errors
    /// As [`ObjectCalls::call_payload`].
    fn send_to_spot<M: JsonMessage>(
        &self,
        id: &str,
        msg: &M,
    ) -> impl Future<Output = Result<(), CallError>> + Send {
        self.send_to(StoreKind::Spot, id, msg)
    }

    /// Request to Spot `id` ([`ObjectCalls::request_to`]).
    ///
    /// # Errors
    /// As [`ObjectCalls::request_to`].
    fn request_to_spot<M: JsonMessage, R: JsonMessage>(
        &self,
        id: &str,
        msg: &M,
        timeout: Duration,
    ) -> impl Future<Output = Result<R, CallError>> + Send {
        self.request_to(StoreKind::Spot, id, msg, timeout)
    }
}

impl<S: ObjectStore> ObjectCalls for ObjectRuntime<S> {
    // Lazy, as every future: nothing is sent before the first poll. A send that goes at once
    // never builds the waiting path's future, which is large (boxed here, so a caller's loop
    // does not copy it per message).
    async fn call_payload(
        &self,
        kind: StoreKind,
        id: &str,
        payload: TypedPayload,
        timeout: Option<Duration>,
    ) -> Result<Option<TypedPayload>, CallError> {
        if timeout.is_none() {
            return match self.inner.try_send_now(kind, id, payload, None) {
                Ok(out) => out.map(|()| None),
                Err(later) => Box::pin(self.inner.send_later(kind, id, *later)).await,
            };
        }
        Box::pin(self.inner.call(kind, id, payload, None, timeout)).await
    }
}

impl<S: ObjectStore> ObjectRuntime<S> {
    /// The call path shared by every ID-addressed surface: `timeout` `None` is a one-way send.
    ///
    /// # Errors
    /// See the module docs.
    pub async fn call(
        &self,
        kind: StoreKind,
        id: &str,
        payload: TypedPayload,
        metadata: Option<Metadata>,
        timeout: Option<Duration>,
    ) -> Result<Option<TypedPayload>, CallError> {
        self.inner.call(kind, id, payload, metadata, timeout).await
    }
}
