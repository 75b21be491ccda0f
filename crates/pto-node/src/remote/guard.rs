//! The connection guard of `pto serve`: what a peer may cost before it holds a session.
//!
//! Every accepted TCP connection is wrapped in a [`Guarded`] stream that counts the bytes it
//! reads. A peer must send the start of an HTTP/2 connection (the 24-byte preface and a frame
//! header: [`HANDSHAKE_BYTES`], or a TLS client hello of at least that size) within the
//! handshake timeout, and afterwards must send something at least every idle timeout (a live
//! client answers the server's keepalive pings every `KEEPALIVE_INTERVAL`, so only a dead or
//! hostile peer goes quiet). A peer that does neither is cut off: its next read fails, hyper
//! drops the connection, and the cut is logged with the peer's address. At
//! [`ServeLimits::max_connections`], a new connection evicts the oldest one still before its
//! handshake, or is closed if there is none ([`Connections`]). Everything else a
//! hostile peer can send (random bytes, oversized messages, bad records) is refused by hyper,
//! tonic's message limit or the service itself, on that connection or call only.

use std::collections::VecDeque;
use std::io;
use std::net::SocketAddr;
use std::os::fd::OwnedFd;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::{Instant, Sleep};
use tonic::transport::server::{Connected, TcpConnectInfo};

use super::ServeLimits;

/// Bytes that start an HTTP/2 connection: the client preface (24) and a SETTINGS frame
/// header (9).
pub(crate) const HANDSHAKE_BYTES: u64 = 33;

/// Connections open now, shared by the accept loop and every [`Guarded`] stream, and the
/// ones that have not finished their handshake, oldest first: when the server is full, the
/// oldest of those is evicted to make room (a client sends its preface at once, so a flood of
/// silent connections cannot lock it out); only when every connection is past its handshake
/// is a new one refused.
#[derive(Clone, Default)]
pub(crate) struct Connections(Arc<Shared>);

#[derive(Default)]
struct Shared {
    open: AtomicUsize,
    next_id: AtomicU64,
    /// Connections before their handshake: id and a duplicate of the socket, to shut it down.
    unshaken: Mutex<VecDeque<(u64, OwnedFd)>>,
}

impl Connections {
    pub(crate) fn open(&self) -> usize {
        self.0.open.load(Ordering::SeqCst)
    }

    /// Admits `stream`, evicting the oldest connection that has not finished its handshake if
    /// `limits.max_connections` are open; refuses it (closes it) if none can be evicted.
    pub(crate) fn admit(&self, stream: TcpStream, limits: &ServeLimits) -> Option<Guarded> {
        let peer = stream.peer_addr().ok();
        let before = self.0.open.fetch_add(1, Ordering::SeqCst);
        if before >= limits.max_connections && !self.evict_oldest_unshaken() {
            self.0.open.fetch_sub(1, Ordering::SeqCst);
            tracing::warn!(
                peer = %describe(peer),
                limit = limits.max_connections,
                "refused a connection: the server's connection limit is reached"
            );
            return None;
        }
        let _ = stream.set_nodelay(true);
        let id = self.0.next_id.fetch_add(1, Ordering::Relaxed);
        // Without a duplicate the connection cannot be evicted, only timed out.
        if let Ok(dup) = rustix::io::dup(&stream) {
            self.0.unshaken.lock().push_back((id, dup));
        }
        Some(Guarded {
            inner: stream,
            id,
            peer,
            read: 0,
            handshake: limits.handshake_timeout,
            idle: limits.idle_timeout,
            timer: Box::pin(tokio::time::sleep(limits.handshake_timeout)),
            last_read: Instant::now(),
            live: self.clone(),
        })
    }

    /// Shuts down the oldest connection still before its handshake (its reads end, hyper drops
    /// it); whether there was one.
    fn evict_oldest_unshaken(&self) -> bool {
        let Some((_, fd)) = self.0.unshaken.lock().pop_front() else {
            return false;
        };
        let _ = rustix::net::shutdown(&fd, rustix::net::Shutdown::Both);
        tracing::warn!("evicted the oldest connection without a handshake: the server is full");
        true
    }

    /// Connection `id` finished its handshake or ended: it can no longer be evicted.
    fn shaken(&self, id: u64) {
        let mut unshaken = self.0.unshaken.lock();
        if let Some(at) = unshaken.iter().position(|&(i, _)| i == id) {
            unshaken.remove(at);
        }
    }
}

fn describe(peer: Option<SocketAddr>) -> String {
    peer.map_or_else(|| "an unknown peer".to_string(), |p| p.to_string())
}

/// A TCP connection under the handshake and idle timeouts.
pub(crate) struct Guarded {
    inner: TcpStream,
    id: u64,
    peer: Option<SocketAddr>,
    /// Bytes read so far.
    read: u64,
    handshake: Duration,
    idle: Duration,
    /// The handshake deadline until [`HANDSHAKE_BYTES`] arrived, then at most the idle
    /// deadline (moved lazily to `last_read + idle` when it fires).
    timer: Pin<Box<Sleep>>,
    /// When bytes last arrived after the handshake.
    last_read: Instant,
    live: Connections,
}

impl Guarded {
    /// Why the timer ending cuts this peer off.
    fn cut(&self) -> io::Error {
        let why = if self.read < HANDSHAKE_BYTES {
            format!(
                "no HTTP/2 handshake within {} ms ({} bytes received)",
                self.handshake.as_millis(),
                self.read
            )
        } else {
            format!("nothing received for {} ms", self.idle.as_millis())
        };
        tracing::warn!(peer = %describe(self.peer), "cut off a connection: {why}");
        io::Error::new(io::ErrorKind::TimedOut, why)
    }
}

impl Drop for Guarded {
    fn drop(&mut self) {
        if self.read < HANDSHAKE_BYTES {
            self.live.shaken(self.id);
        }
        self.live.0.open.fetch_sub(1, Ordering::SeqCst);
    }
}

impl AsyncRead for Guarded {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        match Pin::new(&mut self.inner).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                let n = (buf.filled().len() - before) as u64;
                if n > 0 {
                    let was = self.read;
                    self.read += n;
                    if was < HANDSHAKE_BYTES && self.read >= HANDSHAKE_BYTES {
                        self.live.shaken(self.id);
                    }
                    if self.read >= HANDSHAKE_BYTES {
                        // Only noted here; the timer is moved when it fires (below), not on
                        // every read.
                        self.last_read = Instant::now();
                    }
                }
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => loop {
                if self.timer.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
                // Past the handshake, a read since the timer was set moves the deadline.
                let due = self.last_read + self.idle;
                if self.read < HANDSHAKE_BYTES || due <= Instant::now() {
                    return Poll::Ready(Err(self.cut()));
                }
                self.timer.as_mut().reset(due);
            },
        }
    }
}

impl AsyncWrite for Guarded {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

impl Connected for Guarded {
    type ConnectInfo = TcpConnectInfo;

    fn connect_info(&self) -> TcpConnectInfo {
        self.inner.connect_info()
    }
}
