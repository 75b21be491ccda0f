//! A session on a remote worker, seen from the L4 Worker: the HTTP/2 channel (with keepalive),
//! the session's `Open` stream watched for its end, and the calls tasks and buffers make.
//!
//! Blocking helpers run on the process's client runtime (`super::runtime`); the endpoint's
//! task calls are spawned there and never block the scheduler.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::Interceptor;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint};
use tonic::{Request, Status};

use super::proto::node_worker_client::NodeWorkerClient;
use super::proto::session_event::Event;
use super::proto::{
    BufferHandle, CloseRequest, Completion, CreateBufferRequest, FreeBufferRequest, OpenRequest,
    ReadRequest, SubmitRequest, WriteChunk,
};
use super::server::CHUNK_BYTES;
use super::{
    KEEPALIVE_INTERVAL, KEEPALIVE_TIMEOUT, LostHook, PROTOCOL_VERSION, RemoteWorker, runtime,
};

/// The largest message accepted from a server (a run report of many tasks).
const MAX_MESSAGE_BYTES: usize = 64 << 20;
/// How long a TCP connect may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a refused connection is retried (the server may be starting).
const CONNECT_RETRY: Duration = Duration::from_secs(3);
/// How long `Close` may take at shutdown.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(2);

/// Adds `authorization: Bearer <token>` to every call when a token is set.
#[derive(Clone)]
struct Token(Option<MetadataValue<Ascii>>);

impl Interceptor for Token {
    fn call(&mut self, mut req: Request<()>) -> Result<Request<()>, Status> {
        if let Some(value) = &self.0 {
            req.metadata_mut().insert("authorization", value.clone());
        }
        Ok(req)
    }
}

type Client = NodeWorkerClient<InterceptedService<Channel, Token>>;

/// One open session.
pub(crate) struct Connection {
    pub(crate) remote: RemoteWorker,
    client: Client,
    pub(crate) session: u64,
    /// Why the session is gone (set once, by the watcher, a failed call or `mark_lost`).
    lost: Arc<Mutex<Option<String>>>,
    closing: Arc<AtomicBool>,
    watcher: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl Connection {
    /// Connects, opens a session (starting the server's L3 Worker) and watches it;
    /// `on_lost` runs (on the runtime) when the session ends without `close`.
    pub(crate) fn open(
        remote: &RemoteWorker,
        on_lost: Arc<dyn Fn() + Send + Sync>,
    ) -> Result<Connection, String> {
        let rt = runtime()?;
        let at = remote.to_string();
        block(rt, Connection::open_async(remote.clone(), on_lost))
            .and_then(|r| r)
            .map_err(|e| format!("remote worker {at}: {e}"))
    }

    async fn open_async(
        remote: RemoteWorker,
        on_lost: Arc<dyn Fn() + Send + Sync>,
    ) -> Result<Connection, String> {
        let channel = connect(&remote).await?;
        let token = match &remote.token {
            Some(t) => Some(
                format!("Bearer {t}")
                    .parse::<MetadataValue<Ascii>>()
                    .map_err(|_| "the token must be printable ASCII".to_string())?,
            ),
            None => None,
        };
        let mut client = NodeWorkerClient::with_interceptor(channel, Token(token))
            .max_decoding_message_size(MAX_MESSAGE_BYTES);
        let request = OpenRequest {
            protocol_version: PROTOCOL_VERSION,
            client: format!("pid {}", std::process::id()),
        };
        let opened = async {
            let mut stream = client.open(request).await?.into_inner();
            let first = stream.message().await?;
            Ok::<_, Status>((stream, first))
        };
        let (mut stream, first) = tokio::time::timeout(remote.open_timeout, opened)
            .await
            .map_err(|_| format!("the session did not open within {:?}", remote.open_timeout))?
            .map_err(|s| describe(&s))?;
        let Some(Event::Ready(ready)) = first.and_then(|e| e.event) else {
            return Err("the server ended the session before it was ready".to_string());
        };
        let lost = Arc::new(Mutex::new(None));
        let closing = Arc::new(AtomicBool::new(false));
        let watcher = {
            let (lost, closing) = (Arc::clone(&lost), Arc::clone(&closing));
            let hook = remote.on_lost.clone();
            tokio::spawn(async move {
                let why = loop {
                    match stream.message().await {
                        Ok(Some(_)) => continue,
                        Ok(None) => break "the server ended the session".to_string(),
                        Err(status) => break describe(&status),
                    }
                };
                if !closing.load(Ordering::Acquire) {
                    record_loss(&lost, hook.as_ref(), why);
                    on_lost();
                }
            })
        };
        Ok(Connection {
            remote,
            client,
            session: ready.session,
            lost,
            closing,
            watcher: Mutex::new(Some(watcher)),
        })
    }

    /// Why the session is gone, if it is.
    pub(crate) fn lost(&self) -> Option<String> {
        self.lost.lock().clone()
    }

    /// Records that the session is gone (a task call failed in transport, or a kill).
    pub(crate) fn mark_lost(&self, why: String) {
        record_loss(&self.lost, self.remote.on_lost.as_ref(), why);
    }

    /// Runs one task there; resolves when the remote run finished.
    pub(crate) fn submit(
        &self,
        mut req: SubmitRequest,
    ) -> impl Future<Output = Result<Completion, Status>> + Send + 'static {
        req.session = self.session;
        let mut client = self.client.clone();
        let mut request = Request::new(req);
        if let Some(t) = self.remote.submit_timeout {
            request.set_timeout(t);
        }
        async move { client.submit(request).await.map(|r| r.into_inner()) }
    }

    /// A buffer of `nbytes` zero bytes in the session.
    pub(crate) fn create_buffer(&self, nbytes: u64) -> Result<BufferHandle, String> {
        let mut client = self.client.clone();
        let req = CreateBufferRequest {
            session: self.session,
            nbytes,
        };
        self.call(async move { client.create_buffer(req).await.map(|r| r.into_inner()) })
    }

    /// Writes `data` into buffer `handle` from byte `offset`, in chunks.
    pub(crate) fn write(&self, handle: u64, offset: u64, data: &[u8]) -> Result<(), String> {
        let session = self.session;
        let chunks: Vec<WriteChunk> = data
            .chunks(CHUNK_BYTES)
            .enumerate()
            .map(|(i, c)| WriteChunk {
                session,
                buffer_id: handle,
                offset: offset + (i * CHUNK_BYTES) as u64,
                data: c.to_vec(),
            })
            .collect();
        let mut client = self.client.clone();
        let stream = tokio_stream::iter(chunks);
        self.call(async move { client.write_buffer(stream).await.map(|_| ()) })
    }

    /// `len` bytes of buffer `handle` from byte `offset`.
    pub(crate) fn read(&self, handle: u64, offset: u64, len: u64) -> Result<Vec<u8>, String> {
        let mut client = self.client.clone();
        let req = ReadRequest {
            session: self.session,
            buffer_id: handle,
            offset,
            len,
        };
        self.call(async move {
            let mut stream = client.read_buffer(req).await?.into_inner();
            let mut out = Vec::with_capacity(len as usize);
            while let Some(chunk) = stream.message().await? {
                out.extend_from_slice(&chunk.data);
            }
            Ok(out)
        })
    }

    /// Releases buffer `handle` (in the background: a drop must not wait for the network).
    pub(crate) fn free(&self, handle: u64) {
        let Ok(rt) = runtime() else {
            return;
        };
        let mut client = self.client.clone();
        let req = FreeBufferRequest {
            session: self.session,
            buffer_id: handle,
        };
        rt.spawn(async move {
            let _ = client.free_buffer(req).await;
        });
    }

    /// Ends the session: the server closes its Worker. Waits at most [`CLOSE_TIMEOUT`].
    pub(crate) fn close(&self) {
        self.closing.store(true, Ordering::Release);
        let Ok(rt) = runtime() else {
            return;
        };
        if self.lost().is_none() {
            let mut client = self.client.clone();
            let req = CloseRequest {
                session: self.session,
            };
            let _ = block(rt, async move {
                tokio::time::timeout(CLOSE_TIMEOUT, client.close(req)).await
            });
        }
        if let Some(w) = self.watcher.lock().take() {
            w.abort();
        }
    }

    /// Runs a call to completion on the runtime; a transport failure marks the session lost.
    fn call<T: Send + 'static>(
        &self,
        f: impl Future<Output = Result<T, Status>> + Send + 'static,
    ) -> Result<T, String> {
        if let Some(why) = self.lost() {
            return Err(format!("remote worker {} is lost: {why}", self.remote));
        }
        let rt = runtime()?;
        match block(rt, f)? {
            Ok(v) => Ok(v),
            Err(status) => {
                let why = describe(&status);
                if is_transport(&status) {
                    self.mark_lost(why.clone());
                }
                Err(format!("remote worker {}: {why}", self.remote))
            }
        }
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.closing.store(true, Ordering::Release);
        if let Some(w) = self.watcher.lock().take() {
            w.abort();
        }
    }
}

/// Connects, retrying a refused connection for up to [`CONNECT_RETRY`] (a server that is
/// still starting), within the open deadline.
async fn connect(remote: &RemoteWorker) -> Result<Channel, String> {
    let endpoint = channel_of(remote)?;
    let started = tokio::time::Instant::now();
    let retry_until = started + CONNECT_RETRY.min(remote.open_timeout);
    loop {
        let left = remote.open_timeout.saturating_sub(started.elapsed());
        let err = match tokio::time::timeout(left, endpoint.connect()).await {
            Ok(Ok(channel)) => return Ok(channel),
            Ok(Err(e)) => chain(&e),
            Err(_) => return Err(format!("no connection within {:?}", remote.open_timeout)),
        };
        if tokio::time::Instant::now() >= retry_until {
            return Err(format!(
                "cannot connect (tried for {:.1} s): {err}",
                started.elapsed().as_secs_f64()
            ));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The channel settings: keepalive both ways, TLS for `https://`.
fn channel_of(remote: &RemoteWorker) -> Result<Endpoint, String> {
    let endpoint = Endpoint::from_shared(remote.address.clone())
        .map_err(|e| format!("bad address: {e}"))?
        .connect_timeout(CONNECT_TIMEOUT)
        .http2_keep_alive_interval(KEEPALIVE_INTERVAL)
        .keep_alive_timeout(KEEPALIVE_TIMEOUT)
        .keep_alive_while_idle(true)
        .tcp_nodelay(true);
    if !remote.address.starts_with("https://") {
        return Ok(endpoint);
    }
    let mut tls = ClientTlsConfig::new();
    if let Some(ca) = &remote.ca_pem {
        tls = tls.ca_certificate(Certificate::from_pem(ca));
    }
    if let Some(domain) = &remote.domain {
        tls = tls.domain_name(domain.clone());
    }
    endpoint
        .tls_config(tls)
        .map_err(|e| format!("TLS settings: {e}"))
}

/// Keeps the first reason a session is lost and, for that first one only, runs the worker's
/// loss hook (outside the lock).
fn record_loss(slot: &Mutex<Option<String>>, hook: Option<&LostHook>, why: String) {
    {
        let mut lost = slot.lock();
        if lost.is_some() {
            return;
        }
        *lost = Some(why.clone());
    }
    if let Some(hook) = hook {
        hook(&why);
    }
}

/// Whether a failed call means the connection is gone rather than an answer of the server:
/// tonic makes such statuses from a transport error, which it keeps as their source.
pub(crate) fn is_transport(status: &Status) -> bool {
    std::error::Error::source(status).is_some()
        || matches!(
            status.code(),
            tonic::Code::Unavailable | tonic::Code::Cancelled
        )
}

/// A status as one line: its message and the chain of causes below it.
pub(crate) fn describe(status: &Status) -> String {
    let text = with_causes(
        status.message().to_string(),
        std::error::Error::source(status),
    );
    match text.is_empty() {
        true => format!("{:?}", status.code()),
        false => text,
    }
}

/// An error and its causes as one line.
fn chain(e: &dyn std::error::Error) -> String {
    with_causes(e.to_string(), e.source())
}

/// `text: cause: cause…`, each cause once (tonic and hyper repeat their source in their text).
fn with_causes(mut text: String, mut source: Option<&(dyn std::error::Error + 'static)>) -> String {
    while let Some(e) = source {
        let s = e.to_string();
        if !text.contains(&s) {
            if !text.is_empty() {
                text.push_str(": ");
            }
            text.push_str(&s);
        }
        source = e.source();
    }
    text
}

/// Runs `f` on `rt` and waits for it, also from a thread that is itself inside a runtime
/// (where `block_on` is not allowed).
fn block<T: Send + 'static>(
    rt: &tokio::runtime::Runtime,
    f: impl Future<Output = T> + Send + 'static,
) -> Result<T, String> {
    if tokio::runtime::Handle::try_current().is_err() {
        return Ok(rt.block_on(f));
    }
    let (tx, rx) = std::sync::mpsc::channel();
    rt.spawn(async move {
        let _ = tx.send(f.await);
    });
    rx.recv()
        .map_err(|_| "the remote client runtime stopped".to_string())
}
