//! Remote L3 over gRPC (NODE_RUNTIME.md §6.2): `pto serve` runs an L3 Worker per session
//! ([`serve`]), and an L4 Worker reaches it as a next-level worker
//! (`WorkerBuilder::remote_worker`): each task it submits there is a whole L3 run of a node
//! callable registered in the server's image, carrying its `CallConfig` record whole, so the
//! remote chips resolve exactly the sizing a local chip would.
//!
//! - [`server`](self) — the `NodeWorker` service (module `server`): sessions, runs, buffers;
//! - `client` — a session seen from the client (open, submit, buffers, loss detection);
//! - `endpoint` — the scheduler's lane to a remote worker (`Endpoint`);
//! - [`RemoteBuffer`] — a buffer of a remote session, filled and read with chunked streams.
//!
//! Liveness: a session is one `Open` response stream kept open for its life, and both sides
//! send HTTP/2 keepalive pings ([`KEEPALIVE_INTERVAL`], [`KEEPALIVE_TIMEOUT`]). A killed server
//! resets the connection (the client sees it at once); a stopped or unreachable one stops
//! answering pings. Either way the lane is dead: the task in flight fails with `WORKER_LOST`
//! naming the address, and later submits to it fail with `WorkerUnavailable`. A client that
//! vanishes closes its session's stream, and the server closes that session's Worker.
//!
//! Security: servers bind loopback unless told otherwise; with a token, every call must carry
//! `authorization: Bearer <token>` (compared in constant time; refusals are logged with the
//! peer address, never the token); with a certificate and key the server speaks TLS (rustls).

mod buffer;
mod client;
pub(crate) mod endpoint;
pub(crate) mod guard;
#[cfg(test)]
mod hostile_tests;
pub(crate) mod proto;
mod server;

use std::fmt;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

use pto_chip::ChipSpec;
use tokio::sync::oneshot;
use tonic::transport::{Identity, ServerTlsConfig};

pub use buffer::RemoteBuffer;
pub(crate) use client::Connection;

use crate::EndpointMode;

/// The protocol version both sides must speak (`OpenRequest.protocol_version`).
pub const PROTOCOL_VERSION: u32 = 1;
/// The port `pto serve` listens on by default.
pub const DEFAULT_PORT: u16 = 7070;
/// HTTP/2 keepalive ping interval, both sides.
pub const KEEPALIVE_INTERVAL: Duration = Duration::from_millis(500);
/// A connection whose ping is unanswered this long is dead (so a stopped peer is noticed
/// within interval + timeout, 2.5 s).
pub const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(2);
/// The largest header list a client may send (the token and gRPC's own headers fit many times).
const MAX_HEADER_LIST_BYTES: u32 = 16 << 10;
/// Default deadline of `Open` (it starts the session's L3 Worker and its child processes).
pub const DEFAULT_OPEN_TIMEOUT: Duration = Duration::from_secs(30);

/// A remote L3 worker an L4 Worker submits to (`WorkerBuilder::remote`): where it listens and
/// how to reach it. Its `Display` shows the address only, never the token.
#[derive(Clone)]
pub struct RemoteWorker {
    pub(crate) address: String,
    pub(crate) token: Option<String>,
    pub(crate) ca_pem: Option<Vec<u8>>,
    pub(crate) domain: Option<String>,
    pub(crate) open_timeout: Duration,
    pub(crate) submit_timeout: Option<Duration>,
    /// Who the worker is, for messages (`MPI rank 1 on node7`).
    pub(crate) label: Option<String>,
    pub(crate) on_lost: Option<LostHook>,
}

/// Called once, on the client runtime, when a session on the worker is lost (not when it is
/// closed), with why: the first sign of a loss, before any task fails of it.
pub type LostHook = std::sync::Arc<dyn Fn(&str) + Send + Sync>;

impl RemoteWorker {
    /// A worker at `address`: `http://HOST:PORT`, `https://HOST:PORT` (TLS), or `HOST:PORT`
    /// (plain HTTP/2).
    pub fn new(address: &str) -> RemoteWorker {
        let address = if address.contains("://") {
            address.to_string()
        } else {
            format!("http://{address}")
        };
        RemoteWorker {
            address,
            token: None,
            ca_pem: None,
            domain: None,
            open_timeout: DEFAULT_OPEN_TIMEOUT,
            submit_timeout: None,
            label: None,
            on_lost: None,
        }
    }

    /// Who the worker is, shown before its address in every message that names it
    /// (`MPI rank 1 on node7 at 10.0.0.7:40321`).
    pub fn label(mut self, label: &str) -> RemoteWorker {
        self.label = Some(label.to_string());
        self
    }

    /// Runs `hook` when a session on this worker is lost (its server died, stopped answering
    /// or reset the connection); the tasks in flight there fail with `WORKER_LOST` as always.
    pub fn on_lost(mut self, hook: LostHook) -> RemoteWorker {
        self.on_lost = Some(hook);
        self
    }

    /// The token the server requires (`pto serve --token-file`).
    pub fn token(mut self, token: &str) -> RemoteWorker {
        self.token = Some(token.trim().to_string());
        self
    }

    /// The PEM certificate (or CA) that a TLS server's certificate must chain to.
    pub fn ca_certificate(mut self, pem: &[u8]) -> RemoteWorker {
        self.ca_pem = Some(pem.to_vec());
        self
    }

    /// The name the server's certificate must carry (default: the address's host).
    pub fn tls_domain(mut self, domain: &str) -> RemoteWorker {
        self.domain = Some(domain.to_string());
        self
    }

    /// Deadline of `Open`, which starts the session's Worker (default 30 s).
    pub fn open_timeout(mut self, timeout: Duration) -> RemoteWorker {
        self.open_timeout = timeout;
        self
    }

    /// gRPC deadline of each `Submit` (a whole L3 run); default none (the Worker's
    /// `task_timeout`, when set, bounds a task instead). Liveness does not depend on it.
    pub fn submit_timeout(mut self, timeout: Duration) -> RemoteWorker {
        self.submit_timeout = Some(timeout);
        self
    }

    /// The address as given (with its scheme).
    pub fn address(&self) -> &str {
        &self.address
    }

    /// `127.0.0.1:7070`: the address without its scheme, for names and messages.
    pub(crate) fn host_port(&self) -> &str {
        self.address
            .split_once("://")
            .map_or(self.address.as_str(), |(_, rest)| rest)
            .trim_end_matches('/')
    }

    /// Checks the address and TLS settings without connecting.
    pub fn validate(&self) -> Result<(), String> {
        tonic::transport::Endpoint::from_shared(self.address.clone())
            .map_err(|e| format!("{:?} is not a valid address: {e}", self.address))?;
        let https = self.address.starts_with("https://");
        if !https && !self.address.starts_with("http://") {
            return Err(format!(
                "{:?}: the scheme must be http:// or https://",
                self.address
            ));
        }
        if self.ca_pem.is_some() && !https {
            return Err(format!(
                "{:?}: a CA certificate needs an https:// address",
                self.address
            ));
        }
        if self.token.as_deref() == Some("") {
            return Err("the token is empty".to_string());
        }
        Ok(())
    }
}

impl fmt::Debug for RemoteWorker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RemoteWorker")
            .field("address", &self.address)
            .field("token", &self.token.as_ref().map(|_| "<set>"))
            .field("tls", &self.ca_pem.is_some())
            .field("label", &self.label)
            .finish_non_exhaustive()
    }
}

impl fmt::Display for RemoteWorker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.label {
            Some(label) => write!(f, "{label} at {}", self.host_port()),
            None => f.write_str(self.host_port()),
        }
    }
}

/// A TLS certificate chain and private key, PEM.
#[derive(Clone)]
pub struct TlsIdentity {
    pub cert_pem: Vec<u8>,
    pub key_pem: Vec<u8>,
}

impl fmt::Debug for TlsIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("TlsIdentity { .. }")
    }
}

/// What `pto serve` serves: where it listens and the L3 Worker each session gets. Its `Debug`
/// shows whether a token is set, never the token.
#[derive(Clone)]
pub struct ServeOptions {
    /// Default `127.0.0.1:7070` (loopback only; a non-loopback address is the caller's choice).
    pub listen: SocketAddr,
    pub chips: usize,
    pub sub_workers: usize,
    pub mode: EndpointMode,
    /// The spec of every chip of a session's Worker.
    pub chip_spec: ChipSpec,
    /// `WorkerBuilder::heap_ring_size` of a session's Worker.
    pub heap_ring_size: u64,
    /// Calls without `authorization: Bearer <token>` are refused.
    pub token: Option<String>,
    pub tls: Option<TlsIdentity>,
    /// What one peer may cost the server (connections, sessions, calls, bytes, time).
    pub limits: ServeLimits,
}

impl fmt::Debug for ServeOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServeOptions")
            .field("listen", &self.listen)
            .field("chips", &self.chips)
            .field("sub_workers", &self.sub_workers)
            .field("mode", &self.mode)
            .field("chip_spec", &self.chip_spec)
            .field("heap_ring_size", &self.heap_ring_size)
            .field("token", &self.token.as_ref().map(|_| "<set>"))
            .field("tls", &self.tls)
            .field("limits", &self.limits)
            .finish()
    }
}

/// What a client, or anyone who can connect, may cost a server. A peer over a limit is refused
/// (its call fails with `RESOURCE_EXHAUSTED` naming the limit, or its connection is closed and
/// logged); every other peer goes on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServeLimits {
    /// TCP connections open at once; more are closed as soon as they are accepted.
    pub max_connections: usize,
    /// A connection must start HTTP/2 (or TLS) within this, or it is cut off.
    pub handshake_timeout: Duration,
    /// A connection that sends nothing for this long is cut off (a live client answers the
    /// server's keepalive pings every [`KEEPALIVE_INTERVAL`]).
    pub idle_timeout: Duration,
    /// Sessions open at once (each runs an L3 Worker); checked after the token, before a
    /// Worker starts.
    pub max_sessions: usize,
    /// Calls of one session in flight at once (submits and buffer calls).
    pub max_calls_per_session: usize,
    /// HTTP/2 streams one connection may have open at once.
    pub max_streams_per_connection: u32,
    /// The largest gRPC message a client may send (a `WriteBuffer` chunk, a submit).
    pub max_message_bytes: usize,
    /// Bytes of host buffers one session may hold at once.
    pub max_buffer_bytes_per_session: u64,
}

impl Default for ServeLimits {
    fn default() -> ServeLimits {
        ServeLimits {
            max_connections: 256,
            handshake_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            max_sessions: 16,
            max_calls_per_session: 256,
            max_streams_per_connection: 512,
            max_message_bytes: 4 << 20,
            max_buffer_bytes_per_session: 64 << 30,
        }
    }
}

impl Default for ServeOptions {
    fn default() -> ServeOptions {
        ServeOptions {
            listen: SocketAddr::from((Ipv4Addr::LOCALHOST, DEFAULT_PORT)),
            chips: 1,
            sub_workers: 0,
            mode: EndpointMode::ChildProcess,
            chip_spec: ChipSpec::default(),
            heap_ring_size: 64 << 20,
            token: None,
            tls: None,
            limits: ServeLimits::default(),
        }
    }
}

/// Why a server did not start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("cannot start the server's runtime: {0}")]
    Runtime(std::io::Error),
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("bad TLS identity: {0}")]
    Tls(String),
    #[error("bad option: {0}")]
    Option(String),
}

/// A running server. Dropping it stops it and closes every session.
pub struct Server {
    addr: SocketAddr,
    runtime: Option<tokio::runtime::Runtime>,
    stop: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<Result<(), tonic::transport::Error>>>,
    sessions: server::Sessions,
    connections: guard::Connections,
}

impl Server {
    /// The address it listens on (with the port the OS chose for port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Sessions open now.
    pub fn sessions(&self) -> usize {
        self.sessions.lock().len()
    }

    /// TCP connections open now (every peer, with a session or not).
    pub fn connections(&self) -> usize {
        self.connections.open()
    }

    /// Blocks until the server stops (it stops only on an error or [`Server::shutdown`] from
    /// another handle: in `pto serve`, until the process is signalled).
    pub fn wait(mut self) -> Result<(), String> {
        let (Some(rt), Some(task)) = (self.runtime.as_ref(), self.task.take()) else {
            return Ok(());
        };
        match rt.block_on(task) {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(e.to_string()),
            Err(e) => Err(e.to_string()),
        }
    }

    /// Stops accepting calls, closes every session's Worker, stops the runtime.
    pub fn shutdown(mut self) {
        self.stop_now();
    }

    fn stop_now(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let sessions: Vec<_> = self.sessions.lock().drain().map(|(_, s)| s).collect();
        for s in sessions {
            server::close_session(&s);
        }
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_timeout(Duration::from_secs(2));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop_now();
    }
}

/// Starts a server on its own runtime (two threads) and returns once it listens.
pub fn serve(options: ServeOptions) -> Result<Server, ServeError> {
    if options.chips == 0 && options.sub_workers == 0 {
        return Err(ServeError::Option(
            "a session's Worker needs at least one chip or sub worker".to_string(),
        ));
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("pto-serve")
        .enable_all()
        .build()
        .map_err(ServeError::Runtime)?;
    let listen = options.listen;
    let listener = runtime
        .block_on(tokio::net::TcpListener::bind(listen))
        .map_err(|source| ServeError::Bind {
            addr: listen,
            source,
        })?;
    let addr = listener.local_addr().map_err(|source| ServeError::Bind {
        addr: listen,
        source,
    })?;
    let limits = options.limits.clone();
    let mut builder = tonic::transport::Server::builder()
        .http2_keepalive_interval(Some(KEEPALIVE_INTERVAL))
        .http2_keepalive_timeout(Some(KEEPALIVE_TIMEOUT))
        .max_concurrent_streams(limits.max_streams_per_connection)
        .http2_max_header_list_size(MAX_HEADER_LIST_BYTES);
    if let Some(tls) = &options.tls {
        let identity = Identity::from_pem(&tls.cert_pem, &tls.key_pem);
        builder = builder
            .tls_config(ServerTlsConfig::new().identity(identity))
            .map_err(|e| ServeError::Tls(e.to_string()))?;
    }
    let token = options.token.clone();
    let service = server::Service::new(options);
    let sessions = service.sessions();
    let svc = tonic::service::interceptor::InterceptedService::new(
        proto::node_worker_server::NodeWorkerServer::new(service)
            .max_decoding_message_size(limits.max_message_bytes)
            .max_encoding_message_size(limits.max_message_bytes.max(server::CHUNK_BYTES + 1024)),
        move |req| server::check_token(token.as_deref(), req),
    );
    let (stop_tx, stop_rx) = oneshot::channel::<()>();
    // Every connection is guarded (`guard.rs`); `admit` also sets TCP_NODELAY: small HTTP/2
    // frames must leave at once, or Nagle's algorithm against the peer's delayed ACK stalls
    // pipelined calls for 40 ms (measured: 4 tasks in 43.8 ms).
    let connections = guard::Connections::default();
    let live = connections.clone();
    let incoming = tokio_stream::StreamExt::filter_map(
        tokio_stream::wrappers::TcpListenerStream::new(listener),
        move |conn| match conn {
            Ok(stream) => connections.admit(stream, &limits).map(Ok),
            Err(e) => Some(Err(e)),
        },
    );
    let task = runtime.spawn(builder.add_service(svc).serve_with_incoming_shutdown(
        incoming,
        async move {
            let _ = stop_rx.await;
        },
    ));
    Ok(Server {
        addr,
        runtime: Some(runtime),
        stop: Some(stop_tx),
        task: Some(task),
        sessions,
        connections: live,
    })
}

/// The client runtime of this process (one thread: gRPC clients only wait on sockets), started
/// on first use by an L4 Worker with remote workers.
pub(crate) fn runtime() -> Result<&'static tokio::runtime::Runtime, String> {
    static RUNTIME: OnceLock<Result<tokio::runtime::Runtime, String>> = OnceLock::new();
    RUNTIME
        .get_or_init(|| {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .thread_name("pto-remote")
                .enable_all()
                .build()
                .map_err(|e| format!("cannot start the remote client runtime: {e}"))
        })
        .as_ref()
        .map_err(Clone::clone)
}

/// Reads a token file: its first line, trimmed; an empty token is an error.
pub fn read_token_file(path: &std::path::Path) -> Result<String, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read token file {}: {e}", path.display()))?;
    let token = text.lines().next().unwrap_or("").trim().to_string();
    if token.is_empty() {
        return Err(format!("token file {} is empty", path.display()));
    }
    Ok(token)
}

/// Where `pto serve` finds its TLS files.
#[derive(Clone, Debug)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl TlsFiles {
    /// Reads both files.
    pub fn load(&self) -> Result<TlsIdentity, String> {
        let read =
            |p: &PathBuf| std::fs::read(p).map_err(|e| format!("cannot read {}: {e}", p.display()));
        Ok(TlsIdentity {
            cert_pem: read(&self.cert)?,
            key_pem: read(&self.key)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_debug_or_display_form_shows_a_token() {
        let options = ServeOptions {
            token: Some("s3cret-token".to_string()),
            ..ServeOptions::default()
        };
        let worker = RemoteWorker::new("127.0.0.1:1")
            .token("s3cret-token")
            .label("MPI rank 1 on h");
        for text in [
            format!("{options:?}"),
            format!("{worker:?}"),
            worker.to_string(),
        ] {
            assert!(!text.contains("s3cret"), "{text}");
        }
        assert_eq!(worker.to_string(), "MPI rank 1 on h at 127.0.0.1:1");
    }
}
