//! Application dispatch through the job queue (glossary §3 "Application job queue").
//!
//! The dispatcher takes a job-queue permit **before** it claims the next application record
//! (receive/claim), then hands the record and the permit to the runner of its handler. The
//! runner releases the permit at the handler's first instruction. Claiming consumes the
//! record's flow charge; credit goes back to the sender only while the host pressure state is
//! `Running`, so pressure reaches the senders as backpressure (their sends wait), never as a
//! drop. Terminal replies never come here: the reactor completes them directly.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures::FutureExt;
use std::panic::AssertUnwindSafe;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};
use tokio::task::JoinHandle;
use zlink_protocol::envelope::TypedPayload;
use zlink_protocol::generated::{
    CommandBody, NodeFence, ReplyResult, RequestHeader, TerminalStatus,
};
use zlink_protocol::metadata::Metadata;
use zlink_protocol::record::{Leg as WireLeg, Record, WireContext};
use zlink_protocol::shared_str::SharedStr;

use super::connection::{ConnRef, Leg};
use super::handler::{BuiltHandlers, Handler, HandlerKey, MessageContext, MessageKind};
use super::node::Inner;
use super::peer::PeerState;
use crate::call::error::{CallError, ErrorKind};
use crate::jobs::{JobPermit, PressureState};

/// An admitted application record waiting to be claimed. Its source is the connection's peer
/// (the reactor checked that the record names it).
pub(crate) struct DispatchItem {
    pub conn: ConnRef,
    pub charge: u32,
    /// The request header of a `NodeRequest` / `channelRequest`; `None` for a one-way send.
    pub request: Option<RequestHeader>,
    /// The Channel of a `channelSend` / `channelRequest` (its handler namespace); `None` for
    /// node direct.
    pub channel: Option<String>,
    pub metadata: Option<Metadata>,
    pub payload: TypedPayload,
}

/// A claimed record on its way to the handler's runner, with the job-queue permit it holds.
struct Job {
    ctx: MessageContext,
    payload: TypedPayload,
    permit: JobPermit,
    request: Option<RequestHeader>,
}

/// Claims application records and routes them to their handler's runner.
///
/// The reactor submits each record. When nothing is waiting in the backlog and a job permit is
/// free, the record is claimed at once (no task hop); otherwise it joins the backlog, which
/// [`run_backlog`] drains in order, taking a permit before each claim. `backlog` counts records
/// submitted and not yet claimed, and drops to zero only after the last one was handed to its
/// runner, so a record claimed on the fast path can never overtake an earlier one.
pub(crate) struct Dispatcher {
    /// Runners by packet name (its UTF-8 bytes), then message kind: looked up with the received
    /// name's bytes, no allocation or UTF-8 check per record. The namespace is this node's
    /// MeshName.
    runners: foldhash::HashMap<Box<[u8]>, Route>,
    /// The same per Channel this node serves, by Channel name.
    channel_runners: foldhash::HashMap<Box<[u8]>, ChannelRoutes>,
    backlog: AtomicUsize,
    backlog_tx: mpsc::UnboundedSender<DispatchItem>,
}

/// The runners of one packet name, by message kind, and the name as registered: handlers see
/// that copy, not a slice that would keep the received frame alive.
struct Route {
    name: SharedStr,
    kinds: [Option<RunnerRef>; 2],
}

/// The claim's side of one handler's runner.
///
/// A handler with concurrency above 1 runs each job in a task of its own. When a slot is free
/// and nothing waits in the runner, the claim starts that task itself: the record reaches its
/// handler without first waking the runner task (issue 21: one task hand-off fewer per
/// request). Otherwise the job goes through the runner, which starts jobs in claim order as
/// slots free up — so a job started directly never overtakes an earlier one.
struct RunnerRef {
    tx: mpsc::UnboundedSender<Job>,
    /// `Some` for concurrency above 1: the slots, the handler and the count of jobs sent to the
    /// runner and not yet started by it.
    direct: Option<DirectStart>,
}

struct DirectStart {
    slots: Arc<Semaphore>,
    handler: Handler,
    queued: Arc<AtomicUsize>,
}

/// The runners of one Channel namespace.
struct ChannelRoutes {
    name: SharedStr,
    routes: foldhash::HashMap<Box<[u8]>, Route>,
}

/// The receiving ends [`Dispatcher::new`] hands to the tasks [`Dispatcher::spawn`] starts.
pub(crate) struct DispatchTasks {
    backlog_rx: mpsc::UnboundedReceiver<DispatchItem>,
    runners: Vec<RunnerTask>,
}

/// What one runner task owns (see [`runner`]).
struct RunnerTask {
    handler: Handler,
    /// Concurrency above 1: the slots and the queued count it shares with its [`RunnerRef`].
    concurrent: Option<(Arc<Semaphore>, Arc<AtomicUsize>)>,
    rx: mpsc::UnboundedReceiver<Job>,
}

impl Dispatcher {
    pub(crate) fn new(handlers: BuiltHandlers) -> (Self, DispatchTasks) {
        let mut runner_rx = Vec::new();
        let runners = routes_of(handlers.node, &mut runner_rx);
        let channel_runners = handlers
            .channels
            .into_iter()
            .map(|(name, table)| {
                let routes = routes_of(table, &mut runner_rx);
                (
                    name.as_bytes().into(),
                    ChannelRoutes {
                        name: SharedStr::from(name),
                        routes,
                    },
                )
            })
            .collect();
        let (backlog_tx, backlog_rx) = mpsc::unbounded_channel();
        (
            Self {
                runners,
                channel_runners,
                backlog: AtomicUsize::new(0),
                backlog_tx,
            },
            DispatchTasks {
                backlog_rx,
                runners: runner_rx,
            },
        )
    }

    /// Start the runner, backlog and credit tasks.
    pub(crate) fn spawn(inner: &Arc<Inner>, tasks: DispatchTasks) -> Vec<JoinHandle<()>> {
        let mut out = Vec::new();
        for task in tasks.runners {
            out.push(tokio::spawn(runner(Arc::clone(inner), task)));
        }
        out.push(tokio::spawn(run_backlog(
            Arc::clone(inner),
            tasks.backlog_rx,
        )));
        out.push(tokio::spawn(credit_on_resume(Arc::clone(inner))));
        out
    }

    /// Submit an admitted application record (reactor only).
    pub(crate) fn submit(&self, inner: &Arc<Inner>, item: DispatchItem) {
        if self.backlog.load(Ordering::Acquire) == 0
            && let Ok(permit) = inner.jobs.try_acquire()
        {
            self.claim(inner, item, permit);
            return;
        }
        self.backlog.fetch_add(1, Ordering::AcqRel);
        if self.backlog_tx.send(item).is_err() {
            self.backlog.fetch_sub(1, Ordering::AcqRel);
        }
    }

    /// Claim one record under `permit`: consume its flow charge, return credit while running,
    /// and hand it to its runner (or answer `NotFound`).
    fn claim(&self, inner: &Arc<Inner>, item: DispatchItem, permit: JobPermit) {
        item.conn.on_consumed(item.charge);
        if inner.jobs.pressure() == PressureState::Running {
            item.conn.flush_credit(item.conn.credit_step());
        }
        let DispatchItem {
            conn,
            request,
            channel,
            metadata,
            payload,
            ..
        } = item;
        let kind = if request.is_some() {
            MessageKind::Request
        } else {
            MessageKind::Send
        };
        let source = Arc::clone(conn.peer_shared());
        drop(conn);
        let (routes, channel) = match &channel {
            None => (Some(&self.runners), None),
            Some(c) => match self.channel_runners.get(c.as_bytes()) {
                Some(cr) => (Some(&cr.routes), Some(cr.name.clone())),
                None => (None, None),
            },
        };
        let route = routes.and_then(|r| r.get(payload.packet_name.as_bytes()));
        let runner = route.and_then(|r| Some((&r.name, r.kinds[kind_index(kind)].as_ref()?)));
        let Some((name, runner)) = runner else {
            inner.metrics.no_handler.fetch_add(1, Ordering::Relaxed);
            drop(permit);
            if let Some(req) = &request {
                send_reply(
                    inner,
                    &source,
                    req,
                    Err(CallError::new(
                        ErrorKind::NotFound,
                        format!("no {} handler for {:?}", kind.name(), payload.packet_name),
                    )),
                );
            }
            return;
        };
        let ctx = MessageContext {
            source,
            correlation_id: request.as_ref().map(|r| r.correlation_id.clone()),
            metadata: metadata.unwrap_or_else(Metadata::empty),
            deadline: request
                .as_ref()
                .map(|r| UNIX_EPOCH + Duration::from_millis(r.deadline_unix_ms)),
            packet_name: name.clone(),
            channel,
        };
        let job = Job {
            ctx,
            payload,
            permit,
            request,
        };
        match &runner.direct {
            Some(d) => {
                // `queued` only falls (the runner lowers it once it started a job), and claims
                // are made one at a time (the reactor claims only while the backlog is empty),
                // so zero here means no earlier job of this handler is still to start.
                if d.queued.load(Ordering::Acquire) == 0
                    && let Ok(slot) = Arc::clone(&d.slots).try_acquire_owned()
                {
                    inner.metrics.direct_starts.fetch_add(1, Ordering::Relaxed);
                    start_job(Arc::clone(inner), d.handler.clone(), job, slot);
                    return;
                }
                d.queued.fetch_add(1, Ordering::AcqRel);
                if runner.tx.send(job).is_err() {
                    d.queued.fetch_sub(1, Ordering::AcqRel);
                }
            }
            None => {
                let _ = runner.tx.send(job);
            }
        }
    }
}

/// Drain the backlog in order: permit first, then claim (glossary §3). The next record is
/// taken off the backlog channel before the permit is awaited (taking it off is not the claim),
/// so an idle node holds no permit.
async fn run_backlog(inner: Arc<Inner>, mut rx: mpsc::UnboundedReceiver<DispatchItem>) {
    loop {
        let Some(item) = rx.recv().await else {
            break;
        };
        let Ok(permit) = inner.jobs.acquire().await else {
            break;
        };
        inner.dispatcher.claim(&inner, item, permit);
        inner.dispatcher.backlog.fetch_sub(1, Ordering::AcqRel);
    }
}

/// When pressure returns to `Running`, give back the credit withheld while paused. (A
/// `Running` moment this task misses is caught by the reactor's periodic flush.)
async fn credit_on_resume(inner: Arc<Inner>) {
    let mut rx = inner.jobs.subscribe();
    while rx.changed().await.is_ok() {
        if *rx.borrow_and_update() == PressureState::Running {
            let conns: Vec<ConnRef> = inner
                .peers()
                .values()
                .filter(|e| e.state == PeerState::Ready)
                .filter_map(|e| e.conn.clone())
                .collect();
            for c in conns {
                c.flush_credit(1);
            }
        }
    }
}

/// Route table of one namespace; each handler gets its runner channel.
fn routes_of(
    table: HashMap<HandlerKey, (Handler, usize)>,
    runner_tasks: &mut Vec<RunnerTask>,
) -> foldhash::HashMap<Box<[u8]>, Route> {
    let mut runners: foldhash::HashMap<Box<[u8]>, Route> = foldhash::HashMap::default();
    for (key, (handler, concurrency)) in table {
        let (tx, rx) = mpsc::unbounded_channel();
        let concurrent = (concurrency > 1).then(|| {
            (
                Arc::new(Semaphore::new(concurrency)),
                Arc::new(AtomicUsize::new(0)),
            )
        });
        let direct = concurrent.as_ref().map(|(slots, queued)| DirectStart {
            slots: Arc::clone(slots),
            handler: handler.clone(),
            queued: Arc::clone(queued),
        });
        let route = runners
            .entry(key.packet_name.as_bytes().into())
            .or_insert_with(|| Route {
                name: SharedStr::from(key.packet_name.clone()),
                kinds: [None, None],
            });
        route.kinds[kind_index(key.kind)] = Some(RunnerRef { tx, direct });
        runner_tasks.push(RunnerTask {
            handler,
            concurrent,
            rx,
        });
    }
    runners
}

fn kind_index(kind: MessageKind) -> usize {
    match kind {
        MessageKind::Send => 0,
        MessageKind::Request => 1,
    }
}

async fn runner(inner: Arc<Inner>, task: RunnerTask) {
    let RunnerTask {
        handler,
        concurrent,
        mut rx,
    } = task;
    let Some((slots, queued)) = concurrent else {
        // Serialized handler: run each job to completion in arrival order, in this task.
        while let Some(job) = rx.recv().await {
            run_job(&inner, &handler, job).await;
        }
        return;
    };
    while let Some(job) = rx.recv().await {
        let Ok(slot) = Arc::clone(&slots).acquire_owned().await else {
            break;
        };
        start_job(Arc::clone(&inner), handler.clone(), job, slot);
        // Started: a later claim may start its job directly once nothing else waits here.
        queued.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Run `job` in a task of its own, holding one of its handler's concurrency slots.
fn start_job(inner: Arc<Inner>, handler: Handler, job: Job, slot: OwnedSemaphorePermit) {
    tokio::spawn(async move {
        run_job(&inner, &handler, job).await;
        drop(slot);
    });
}

async fn run_job(inner: &Inner, handler: &Handler, job: Job) {
    // The handler's first instruction: the job-queue permit goes back here.
    job.permit.release();
    inner.metrics.delivered.fetch_add(1, Ordering::Relaxed);
    // A panicking handler must not take its runner (and every later record of its key) down,
    // nor leave a request without its terminal reply: it ends as `HandlerFailed`.
    let panicked = || {
        inner.metrics.handler_panics.fetch_add(1, Ordering::Relaxed);
        CallError::new(ErrorKind::HandlerFailed, "the handler panicked")
    };
    match (handler, job.request) {
        (Handler::Send(f), None) => {
            let outcome = AssertUnwindSafe(f(job.ctx, job.payload))
                .catch_unwind()
                .await
                .unwrap_or_else(|_| Err(panicked()));
            if let Err(e) = outcome {
                tracing::debug!(error = %e, "one-way handler failed");
            }
        }
        (Handler::Request(f), Some(req)) => {
            let source = job.ctx.source.clone();
            let expired = job.ctx.deadline.is_some_and(|d| d <= SystemTime::now());
            let result = if expired {
                Err(CallError::new(
                    ErrorKind::DeadlineExceeded,
                    "deadline passed before the handler ran",
                ))
            } else {
                AssertUnwindSafe(f(job.ctx, job.payload))
                    .catch_unwind()
                    .await
                    .unwrap_or_else(|_| Err(panicked()))
            };
            send_reply(inner, &source, &req, result);
        }
        (Handler::Send(_), Some(_)) | (Handler::Request(_), None) => {}
    }
}

/// Send the single terminal reply of a request back to its source node.
pub(crate) fn send_reply(
    inner: &Inner,
    source: &NodeFence,
    req: &RequestHeader,
    result: Result<TypedPayload, CallError>,
) {
    send_reply_tail(inner, source, req, result.map(Some), ReplyResult::None);
}

/// [`send_reply`] with an optional application payload and the operation-specific success
/// tail of command 20 (wire §8.1; ignored on an error).
pub(crate) fn send_reply_tail(
    inner: &Inner,
    source: &NodeFence,
    req: &RequestHeader,
    result: Result<Option<TypedPayload>, CallError>,
    tail: ReplyResult,
) {
    if source.rid == inner.rid && source.lifecycle_generation == inner.lifecycle {
        // A request of this node's own that came back here (Message Follow: the new owner is
        // the node that sent it on a stale route, wire §3.1): its pending entry takes the
        // reply as if it had come over the mesh.
        inner.metrics.replies_sent.fetch_add(1, Ordering::Relaxed);
        let fields = crate::call::pending::ReplyFields {
            operation_id: req.operation_id.clone(),
            reply_route_id: req.reply_route_id,
            correlation_id: req.correlation_id.clone(),
            outcome: result.map(Option::unwrap_or_default),
        };
        let me = crate::call::pending::PeerRef::new(inner.rid.clone(), inner.lifecycle);
        if let crate::call::pending::Delivered::Completed(c) = inner.pending().on_reply(fields, &me)
        {
            let _ = c.waker.send(c.outcome);
        }
        return;
    }
    let conn = {
        let peers = inner.peers();
        peers
            .get(source.rid.as_str())
            .filter(|e| e.state == PeerState::Ready)
            .and_then(|e| e.conn.clone())
            .filter(|c| c.peer().lifecycle_generation == source.lifecycle_generation)
    };
    let Some(conn) = conn else {
        inner
            .metrics
            .reply_unroutable
            .fetch_add(1, Ordering::Relaxed);
        return;
    };
    let (status, detail, payload, tail) = match result {
        Ok(p) => (TerminalStatus::Ok, String::new(), p, tail),
        Err(e) => (
            e.kind().to_status(),
            e.detail().chars().take(1024).collect(),
            None,
            ReplyResult::None,
        ),
    };
    let mut record = Record::new(CommandBody::Reply(zlink_protocol::generated::Reply {
        operation_id: req.operation_id.clone(),
        reply_route_id: req.reply_route_id,
        correlation_id: req.correlation_id.clone(),
        status,
        detail,
        result: tail,
    }));
    record.payload = payload;
    inner.metrics.replies_sent.fetch_add(1, Ordering::Relaxed);
    // Encoded straight into the message: no buffer per frame and no copy of the reply's
    // payload into the message (every request's reply takes this path).
    match inner.encode_packed(&record, WireContext::route_mesh(WireLeg::Reply)) {
        Ok(msg) => {
            conn.send_control_packed(Leg::Reply, msg);
        }
        Err(e) => {
            // The handler's payload did not fit the wire: answer with the error instead.
            let err = Record::new(CommandBody::Reply(zlink_protocol::generated::Reply {
                operation_id: req.operation_id.clone(),
                reply_route_id: req.reply_route_id,
                correlation_id: req.correlation_id.clone(),
                status: TerminalStatus::InvalidOperation,
                detail: format!("reply not encodable: {}", e.detail()),
                result: ReplyResult::None,
            }));
            if let Ok(msg) = inner.encode_packed(&err, WireContext::route_mesh(WireLeg::Reply)) {
                conn.send_control_packed(Leg::Reply, msg);
            }
        }
    }
}
