//! The `NodeWorker` service of `pto serve`: one L3 Worker per session (NODE_RUNTIME.md §6.2).
//!
//! A session starts with `Open`, whose response stream stays open while the client lives: when
//! it closes (the client closed it, went away, or stopped answering HTTP/2 keepalive pings), the
//! session's Worker is closed and its buffers released, so a vanished client leaks nothing.
//! Work that blocks (starting a Worker, a whole L3 run, buffer copies) runs on tokio's blocking
//! pool, never on the reactor.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use pto_types::node_wire::args_blob::{TensorSpace, decode_args};
use pto_types::node_wire::run_report::WireRunReport;
use pto_types::wire::call_config_record::decode_call_config;
use pto_types::{ErrorCode, TaskArgs, Tensor};
use tokio::sync::mpsc;
use tokio_stream::Stream;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

use super::proto::node_worker_server::NodeWorker;
use super::proto::session_event::Event;
use super::proto::{
    BufferHandle, CloseReply, CloseRequest, Completion, CreateBufferRequest, FreeBufferRequest,
    FreeReply, OpenRequest, ReadChunk, ReadRequest, SessionEvent, SessionReady, SubmitRequest,
    WriteChunk, WriteReply,
};
use super::{PROTOCOL_VERSION, ServeOptions};
use crate::report::wire::run_to_wire;
use crate::{Callable, HostBuffer, Worker, WorkerRunError};

/// How long closing a session waits for its unfinished runs.
const SESSION_CLOSE_TIMEOUT: Duration = Duration::from_millis(500);
/// How long a closing session's child processes get to exit before they are killed.
const SESSION_SHUTDOWN_GRACE: Duration = Duration::from_secs(1);

/// Bytes per `ReadBuffer` chunk (gRPC's default message limit is 4 MiB).
pub(crate) const CHUNK_BYTES: usize = 1 << 20;

/// The open sessions by id.
pub(crate) type Sessions = Arc<Mutex<HashMap<u64, Arc<Session>>>>;

/// One client's L3 Worker and the buffers it created there.
pub(crate) struct Session {
    id: u64,
    worker: Worker,
    buffers: Mutex<HashMap<u64, HostBuffer>>,
    /// Bytes of `buffers` (`ServeLimits::max_buffer_bytes_per_session`).
    buffer_bytes: AtomicU64,
    /// Calls in flight (`ServeLimits::max_calls_per_session`).
    calls: AtomicUsize,
}

/// One call of a session in flight; released when dropped.
struct CallSlot(Arc<Session>);

impl Drop for CallSlot {
    fn drop(&mut self) {
        self.0.calls.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A session being started, counted against `max_sessions` until it is open or failed.
struct Opening<'a>(&'a AtomicUsize);

impl Drop for Opening<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The service: the open sessions.
pub(crate) struct Service {
    options: ServeOptions,
    sessions: Sessions,
    next_session: AtomicU64,
    /// Sessions whose Worker is starting.
    opening: AtomicUsize,
}

impl Service {
    pub(crate) fn new(options: ServeOptions) -> Service {
        Service {
            options,
            sessions: Arc::new(Mutex::new(HashMap::new())),
            next_session: AtomicU64::new(1),
            opening: AtomicUsize::new(0),
        }
    }

    /// Counts a session about to start against `max_sessions` (under the sessions' lock, so
    /// concurrent opens cannot overshoot).
    fn reserve_session(&self, from: &str) -> Result<Opening<'_>, Status> {
        let max = self.options.limits.max_sessions;
        let open = self.sessions.lock().len();
        let starting = self.opening.fetch_add(1, Ordering::SeqCst);
        let slot = Opening(&self.opening);
        if open + starting >= max {
            tracing::warn!(peer = %from, limit = max, "refused a session: the server's session limit is reached");
            return Err(Status::resource_exhausted(format!(
                "this server already holds its limit of {max} sessions (max_sessions); close one \
                 or try again later"
            )));
        }
        Ok(slot)
    }

    /// The session `id` with one more call in flight, unless it has `max_calls_per_session`.
    fn call(&self, id: u64) -> Result<CallSlot, Status> {
        let session = self.session(id)?;
        let max = self.options.limits.max_calls_per_session;
        let before = session.calls.fetch_add(1, Ordering::SeqCst);
        let slot = CallSlot(session);
        if before >= max {
            tracing::warn!(
                session = id,
                limit = max,
                "refused a call: the session's call limit is reached"
            );
            return Err(Status::resource_exhausted(format!(
                "session {id} already has {max} calls in flight (max_calls_per_session)"
            )));
        }
        Ok(slot)
    }

    /// Sessions open now (their Workers are running).
    pub(crate) fn sessions(&self) -> Sessions {
        Arc::clone(&self.sessions)
    }

    fn session(&self, id: u64) -> Result<Arc<Session>, Status> {
        self.sessions
            .lock()
            .get(&id)
            .cloned()
            .ok_or_else(|| Status::not_found(format!("no open session {id} on this server")))
    }

    /// The session's Worker: every chip and sub callable of this image registered, started.
    fn start_worker(options: &ServeOptions) -> Result<Worker, String> {
        let mut builder = Worker::builder(3)
            .chips(options.chips)
            .sub_workers(options.sub_workers)
            .endpoint_mode(options.mode)
            .heap_ring_size(options.heap_ring_size)
            // A session closes when its client is gone: nobody waits for its unfinished runs,
            // so they are abandoned at once and its children get a short grace.
            .close_timeout(SESSION_CLOSE_TIMEOUT)
            .shutdown_grace(SESSION_SHUTDOWN_GRACE);
        for i in 0..options.chips {
            builder = builder.chip_spec(i, options.chip_spec.clone());
        }
        let worker = builder.build().map_err(|e| e.to_string())?;
        for name in pto_chip::callable::chip_callable_names() {
            worker
                .register(Callable::chip(name))
                .map_err(|e| e.to_string())?;
        }
        for name in crate::callable::sub_callable_names() {
            worker
                .register(Callable::sub(name))
                .map_err(|e| e.to_string())?;
        }
        worker.init().map_err(|e| e.to_string())?;
        Ok(worker)
    }
}

/// The interceptor of every call: with a token set, `authorization: Bearer <token>` must match
/// (in constant time). A refusal is logged with the peer's address, never with any token.
pub(crate) fn check_token(token: Option<&str>, req: Request<()>) -> Result<Request<()>, Status> {
    let Some(token) = token else {
        return Ok(req);
    };
    let given = req
        .metadata()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    let ok = given.is_some_and(|g| same_bytes(g.as_bytes(), token.as_bytes()));
    if ok {
        return Ok(req);
    }
    let why = if given.is_some() {
        "wrong token"
    } else {
        "no token"
    };
    tracing::warn!(peer = %peer(&req), "refused a call: {why}");
    Err(Status::unauthenticated(format!(
        "this server requires a token ({why})"
    )))
}

/// Equality whose time does not depend on where the bytes differ.
fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn blocking_error(e: tokio::task::JoinError) -> Status {
    Status::internal(format!("the server's worker thread failed: {e}"))
}

fn peer<T>(request: &Request<T>) -> String {
    request.remote_addr().map_or_else(
        || "an unknown peer".to_string(),
        |a: SocketAddr| a.to_string(),
    )
}

type Events = Pin<Box<dyn Stream<Item = Result<SessionEvent, Status>> + Send>>;
type Chunks = Pin<Box<dyn Stream<Item = Result<ReadChunk, Status>> + Send>>;

#[tonic::async_trait]
impl NodeWorker for Service {
    type OpenStream = Events;
    type ReadBufferStream = Chunks;

    async fn open(&self, request: Request<OpenRequest>) -> Result<Response<Events>, Status> {
        let from = peer(&request);
        let req = request.into_inner();
        if req.protocol_version != PROTOCOL_VERSION {
            return Err(Status::failed_precondition(format!(
                "protocol version {} is not this server's ({PROTOCOL_VERSION})",
                req.protocol_version
            )));
        }
        let _opening = self.reserve_session(&from)?;
        let options = self.options.clone();
        let worker = tokio::task::spawn_blocking(move || Service::start_worker(&options))
            .await
            .map_err(blocking_error)?
            .map_err(|e| {
                Status::unavailable(format!("the session's L3 Worker did not start: {e}"))
            })?;
        let id = self.next_session.fetch_add(1, Ordering::Relaxed);
        let ready = SessionReady {
            session: id,
            chips: self.options.chips as u32,
            sub_workers: self.options.sub_workers as u32,
            chip_callables: pto_chip::callable::chip_callable_names()
                .into_iter()
                .map(String::from)
                .collect(),
            sub_callables: crate::callable::sub_callable_names()
                .into_iter()
                .map(String::from)
                .collect(),
            server_version: env!("CARGO_PKG_VERSION").to_string(),
        };
        let session = Arc::new(Session {
            id,
            worker,
            buffers: Mutex::new(HashMap::new()),
            buffer_bytes: AtomicU64::new(0),
            calls: AtomicUsize::new(0),
        });
        self.sessions.lock().insert(id, Arc::clone(&session));
        tracing::info!(session = id, client = %req.client, peer = %from, "session opened");
        let (tx, rx) = mpsc::channel(1);
        let _ = tx
            .send(Ok(SessionEvent {
                event: Some(Event::Ready(ready)),
            }))
            .await;
        let sessions = Arc::clone(&self.sessions);
        tokio::spawn(async move {
            // The response stream is dropped when the client closes it or its connection dies.
            tx.closed().await;
            let gone = sessions.lock().remove(&id);
            if let Some(session) = gone {
                tracing::info!(session = id, peer = %from, "client went away: closing its session");
                let _ = tokio::task::spawn_blocking(move || close_session(&session)).await;
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn submit(
        &self,
        request: Request<SubmitRequest>,
    ) -> Result<Response<Completion>, Status> {
        let req = request.into_inner();
        let slot = self.call(req.session)?;
        let completion = tokio::task::spawn_blocking(move || run_task(&slot.0, &req))
            .await
            .map_err(blocking_error)?;
        Ok(Response::new(completion))
    }

    async fn create_buffer(
        &self,
        request: Request<CreateBufferRequest>,
    ) -> Result<Response<BufferHandle>, Status> {
        let req = request.into_inner();
        let slot = self.call(req.session)?;
        let nbytes = usize::try_from(req.nbytes).map_err(|_| {
            Status::invalid_argument(format!("nbytes = {} is too large", req.nbytes))
        })?;
        let bytes = BufferBytes::reserve(&slot.0, req.nbytes, &self.options.limits)?;
        let handle = tokio::task::spawn_blocking(move || {
            let session = &slot.0;
            let buf = session
                .worker
                .create_buffer(nbytes)
                .map_err(|e| Status::resource_exhausted(e.to_string()))?;
            bytes.keep();
            let id = buf.id();
            session.buffers.lock().insert(id.buffer_id, buf);
            Ok::<_, Status>(BufferHandle {
                buffer_id: id.buffer_id,
                generation: id.generation,
                nbytes: req.nbytes,
            })
        })
        .await
        .map_err(blocking_error)??;
        Ok(Response::new(handle))
    }

    async fn write_buffer(
        &self,
        request: Request<Streaming<WriteChunk>>,
    ) -> Result<Response<WriteReply>, Status> {
        let mut chunks = request.into_inner();
        let mut written = 0u64;
        let mut target: Option<(u64, HostBuffer, CallSlot)> = None;
        while let Some(chunk) = chunks.message().await? {
            if target.is_none() {
                let slot = self.call(chunk.session)?;
                let buf = buffer_of(&slot.0, chunk.buffer_id)?;
                target = Some((chunk.buffer_id, buf, slot));
            }
            let Some((id, buf, _slot)) = &target else {
                continue;
            };
            if chunk.buffer_id != *id {
                return Err(Status::invalid_argument(
                    "every chunk of one WriteBuffer call must name the same buffer",
                ));
            }
            let offset = usize::try_from(chunk.offset)
                .map_err(|_| Status::out_of_range(format!("offset {}", chunk.offset)))?;
            let buf = buf.clone();
            let len = chunk.data.len() as u64;
            tokio::task::spawn_blocking(move || buf.write_from::<u8>(offset, &chunk.data))
                .await
                .map_err(blocking_error)?
                .map_err(|e| Status::out_of_range(e.to_string()))?;
            written += len;
        }
        Ok(Response::new(WriteReply { bytes: written }))
    }

    async fn read_buffer(&self, request: Request<ReadRequest>) -> Result<Response<Chunks>, Status> {
        let req = request.into_inner();
        let slot = self.call(req.session)?;
        let buf = buffer_of(&slot.0, req.buffer_id)?;
        let (offset, len) = match (usize::try_from(req.offset), usize::try_from(req.len)) {
            (Ok(o), Ok(l)) => (o, l),
            _ => return Err(Status::out_of_range("offset or length too large")),
        };
        let (tx, rx) = mpsc::channel(4);
        tokio::spawn(async move {
            // The call is in flight until its last chunk is sent.
            let _slot = slot;
            let mut at = offset;
            let end = offset.saturating_add(len);
            while at < end {
                let n = CHUNK_BYTES.min(end - at);
                let b = buf.clone();
                let data = match tokio::task::spawn_blocking(move || b.read_vec::<u8>(at, n)).await
                {
                    Ok(Ok(data)) => Ok(ReadChunk {
                        offset: at as u64,
                        data,
                    }),
                    Ok(Err(e)) => Err(Status::out_of_range(e.to_string())),
                    Err(e) => Err(blocking_error(e)),
                };
                let failed = data.is_err();
                if tx.send(data).await.is_err() || failed {
                    return;
                }
                at += n;
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn free_buffer(
        &self,
        request: Request<FreeBufferRequest>,
    ) -> Result<Response<FreeReply>, Status> {
        let req = request.into_inner();
        let session = self.session(req.session)?;
        let freed = session.buffers.lock().remove(&req.buffer_id);
        if let Some(buf) = freed {
            session
                .buffer_bytes
                .fetch_sub(buf.len() as u64, Ordering::SeqCst);
        }
        Ok(Response::new(FreeReply {}))
    }

    async fn close(&self, request: Request<CloseRequest>) -> Result<Response<CloseReply>, Status> {
        let req = request.into_inner();
        let session = self.sessions.lock().remove(&req.session);
        if let Some(session) = session {
            tracing::info!(session = req.session, "session closed by its client");
            tokio::task::spawn_blocking(move || close_session(&session))
                .await
                .map_err(blocking_error)?;
        }
        Ok(Response::new(CloseReply {}))
    }
}

/// Bytes reserved against `max_buffer_bytes_per_session` for a buffer being created; given
/// back when dropped unless the buffer was made (`keep`).
struct BufferBytes {
    session: Arc<Session>,
    bytes: u64,
}

impl BufferBytes {
    fn reserve(
        session: &Arc<Session>,
        bytes: u64,
        limits: &super::ServeLimits,
    ) -> Result<BufferBytes, Status> {
        let max = limits.max_buffer_bytes_per_session;
        let held = session.buffer_bytes.fetch_add(bytes, Ordering::SeqCst);
        let reserved = BufferBytes {
            session: Arc::clone(session),
            bytes,
        };
        if held.saturating_add(bytes) > max {
            return Err(Status::resource_exhausted(format!(
                "session {}: a buffer of {bytes} bytes beside the {held} it holds is over its \
                 limit of {max} bytes (max_buffer_bytes_per_session)",
                session.id
            )));
        }
        Ok(reserved)
    }

    fn keep(mut self) {
        self.bytes = 0;
    }
}

impl Drop for BufferBytes {
    fn drop(&mut self) {
        self.session
            .buffer_bytes
            .fetch_sub(self.bytes, Ordering::SeqCst);
    }
}

fn buffer_of(session: &Session, id: u64) -> Result<HostBuffer, Status> {
    session
        .buffers
        .lock()
        .get(&id)
        .cloned()
        .ok_or_else(|| Status::not_found(format!("no buffer {id} in this session")))
}

pub(crate) fn close_session(session: &Session) {
    session.buffers.lock().clear();
    session.worker.close();
}

/// A failed completion with `code` and `message`.
fn failed(seq: u64, code: ErrorCode, message: String) -> Completion {
    Completion {
        seq,
        error_code: code.code(),
        message,
        report: Vec::new(),
        exec_nanos: 0,
    }
}

/// Runs one node task on the session's Worker (the whole L3 run) and answers with its report.
fn run_task(session: &Session, req: &SubmitRequest) -> Completion {
    let started = Instant::now();
    let Some(f) = crate::callable::find_node_callable(&req.callable_name) else {
        return failed(
            req.seq,
            ErrorCode::UnknownCallable,
            format!(
                "no node callable {:?} in the server's image",
                req.callable_name
            ),
        );
    };
    // The server re-validates the record: a chip resolves exactly what it would locally.
    let cfg = match decode_call_config(&req.call_config) {
        Ok(cfg) => cfg,
        Err(e) => return failed(req.seq, ErrorCode::InvalidConfig, e.to_string()),
    };
    let args = match session_args(session, req) {
        Ok(args) => args,
        Err(message) => return failed(req.seq, ErrorCode::BufferUnavailable, message),
    };
    let (code, message, report) = match session.worker.run(f, args, cfg) {
        Ok(report) => (0, String::new(), Some(report)),
        Err(WorkerRunError::Failed(e)) => (
            ErrorCode::InnerRunFailed.code(),
            e.to_string(),
            Some(crate::RunReport::clone(&e.report)),
        ),
        Err(WorkerRunError::Submit(e)) => (ErrorCode::InnerRunFailed.code(), e.to_string(), None),
    };
    Completion {
        seq: req.seq,
        error_code: code,
        message,
        report: report.map_or_else(Vec::new, |r| WireRunReport::encode(&run_to_wire(&r))),
        exec_nanos: started.elapsed().as_nanos() as u64,
    }
}

/// The task's arguments over the session's buffers: every tensor must name one (space =
/// remote, segment = the buffer's id).
fn session_args(session: &Session, req: &SubmitRequest) -> Result<TaskArgs, String> {
    let wire = decode_args(&req.task_args).map_err(|e| format!("bad task arguments: {e}"))?;
    let mut args = TaskArgs::new();
    for (i, w) in wire.tensors.iter().enumerate() {
        if w.location.space != TensorSpace::Remote {
            return Err(format!(
                "tensor {i} is not a buffer of this server (space {:?})",
                w.location.space
            ));
        }
        let buf = buffer_of(session, w.location.segment)
            .map_err(|s| format!("tensor {i}: {}", s.message()))?;
        if buf.len() as u64 != w.buffer_bytes {
            return Err(format!(
                "tensor {i}: buffer {} has {} bytes, the request says {}",
                w.location.segment,
                buf.len(),
                w.buffer_bytes
            ));
        }
        let t = Tensor::new(
            buf.buffer_ref(),
            w.byte_offset,
            &w.shape,
            &w.strides,
            w.dtype,
        )
        .map_err(|e| format!("tensor {i}: {e}"))?;
        args = args.tensor(w.tag, &t);
    }
    for &s in &wire.scalars {
        args = args.scalar(s);
    }
    if !req.label.is_empty() {
        args = args.label(&req.label);
    }
    Ok(args)
}
