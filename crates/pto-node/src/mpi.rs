//! An L4 job over an MPI world (cargo feature `mpi`; docs/decisions/mpi.md).
//!
//! Every rank runs the same program: `mpirun -n N prog ...`. [`init`] tells each process what
//! it is. Rank 0 ([`MpiRoot`]) is the level-4 client: it hands every other rank a fresh token
//! ([`MpiRoot::start`]), learns where each one listens, and submits to them as remote workers
//! ([`WorkerBuilder::mpi`]). Ranks 1..N-1 ([`MpiRank::serve`]) each serve a level-3 Worker over
//! gRPC ([`crate::remote::serve`]) until rank 0 ends the job ([`MpiRoot::end`]).
//!
//! - **Addresses and the token travel over MPI only**: the token is 32 random bytes made on
//!   rank 0 and sent point-to-point; it is never on a command line, in an environment (so no
//!   child of a rank inherits it) or in a log. A rank on rank 0's host binds loopback; a rank
//!   on another host binds its host's address ([`MpiServe::bind`] overrides).
//! - **A lost rank ends the job.** Rank 0 names the rank, host and pid on stderr as soon as a
//!   session on it is lost (the tasks there fail with `WORKER_LOST`, naming it too), lets the
//!   run end for [`LOST_RANK_GRACE`], then ends the job with `MPI_Abort`: a dead MPI rank
//!   cannot take part in finalization, and mpirun takes down every rank of an aborted job.
//! - **No wait spins a core**: MPI receives here are probes at [`POLL`] intervals (OpenMPI's
//!   blocking receive polls the network at full speed, which would take a core from the
//!   chips on a small host for as long as the job runs).

use std::net::{IpAddr, Ipv4Addr, SocketAddr, ToSocketAddrs as _};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use mpi::Tag;
use mpi::environment::Universe;
use mpi::point_to_point::MatchedReceiveVec as _;
use mpi::topology::{Rank, SimpleCommunicator};
use mpi::traits::{Communicator as _, Destination as _, Source as _};
use parking_lot::Mutex;
use pto_chip::ChipSpec;

use crate::EndpointMode;
use crate::WorkerBuilder;
use crate::remote::{RemoteWorker, ServeLimits, ServeOptions, serve};

/// How often a waiting rank looks for a message: control messages are rare, and a few
/// milliseconds of latency on them cost nothing.
pub const POLL: Duration = Duration::from_millis(5);
/// How long rank 0 waits for every rank's address once it sent the token (a rank only binds a
/// socket before it answers; sessions start their Workers later).
pub const START_TIMEOUT: Duration = Duration::from_secs(60);
/// How long rank 0 waits for every rank to close its server at the end of the job (a session's
/// chips and children are stopped within the Worker's own shutdown bound).
pub const STOP_TIMEOUT: Duration = Duration::from_secs(15);
/// After a rank is lost, how long the run on rank 0 may go on before the job is aborted:
/// enough for the run to fail its tasks and print its report.
pub const LOST_RANK_GRACE: Duration = Duration::from_secs(3);

const TAG_HELLO: Tag = 71;
const TAG_READY: Tag = 72;
const TAG_STOP: Tag = 73;
const TAG_STOPPED: Tag = 74;

/// Why the MPI job could not go on.
#[derive(Debug, thiserror::Error)]
pub enum MpiError {
    #[error(
        "MPI is already initialized in this process, or could not be (was this program built against the MPI that mpirun belongs to?)"
    )]
    Init,
    #[error(
        "the MPI library gives threading level {0:?}; pto needs Multiple (its runtime threads may end the job)"
    )]
    Threading(mpi::environment::Threading),
    #[error("MPI rank {rank} on {host} (pid {pid}) cannot serve: {message}")]
    Rank {
        rank: Rank,
        host: String,
        pid: u32,
        message: String,
    },
    #[error("MPI rank {rank} did not say where it listens within {timeout:?}")]
    Silent { rank: Rank, timeout: Duration },
    #[error("MPI rank {rank} sent a message pto cannot read: {message}")]
    Protocol { rank: Rank, message: String },
}

/// What this process is in the MPI job.
pub enum MpiProcess {
    Root(MpiRoot),
    Rank(MpiRank),
}

/// Initializes MPI (threading level Multiple) and says whether this process is rank 0 or a
/// serving rank. Call it once, first thing, on every rank.
pub fn init() -> Result<MpiProcess, MpiError> {
    let (universe, threading) =
        mpi::initialize_with_threading(mpi::environment::Threading::Multiple)
            .ok_or(MpiError::Init)?;
    if threading != mpi::environment::Threading::Multiple {
        return Err(MpiError::Threading(threading));
    }
    let world = universe.world();
    let host = mpi::environment::processor_name().unwrap_or_else(|_| "?".to_string());
    let (rank, size) = (world.rank(), world.size());
    Ok(if rank == 0 {
        MpiProcess::Root(MpiRoot {
            universe: Some(universe),
            host,
            size,
            ranks: Vec::new(),
            token: None,
            lost: Arc::new(Lost::default()),
        })
    } else {
        MpiProcess::Rank(MpiRank {
            universe,
            host,
            rank,
            size,
        })
    })
}

/// A serving rank's level-3 Worker: what each session on it gets.
#[derive(Clone, Debug)]
pub struct MpiServe {
    pub chips: usize,
    pub sub_workers: usize,
    pub mode: EndpointMode,
    pub chip_spec: ChipSpec,
    /// The address to listen on; default loopback when the rank shares rank 0's host, else
    /// the first non-loopback IPv4 address its host name resolves to.
    pub bind: Option<IpAddr>,
    pub limits: ServeLimits,
}

impl Default for MpiServe {
    fn default() -> MpiServe {
        let serve = ServeOptions::default();
        MpiServe {
            chips: serve.chips,
            sub_workers: serve.sub_workers,
            mode: serve.mode,
            chip_spec: serve.chip_spec,
            bind: None,
            limits: serve.limits,
        }
    }
}

/// A serving rank (1..N-1).
pub struct MpiRank {
    universe: Universe,
    host: String,
    rank: Rank,
    size: Rank,
}

impl MpiRank {
    pub fn rank(&self) -> i32 {
        self.rank
    }

    /// Serves until rank 0 ends the job (then closes every session and finalizes MPI), or
    /// returns at once if rank 0 ended it before it began. `announce` gets one line to print
    /// once the server listens (where, with what).
    pub fn serve(self, options: &MpiServe, announce: impl FnOnce(&str)) -> Result<(), MpiError> {
        let world = self.universe.world();
        let root = world.process_at_rank(0);
        // No deadline: rank 0 answers as soon as it has read its input, and if it dies
        // instead, mpirun ends every rank of the job.
        let hello = receive(&world, 0, TAG_HELLO, None).unwrap_or_default();
        let Some((token, root_host)) = parse_hello(&hello) else {
            return Ok(());
        };
        let pid = std::process::id();
        let started = self.listen(options, token, &root_host);
        let ready = match &started {
            Ok((_, at)) => format!("ok\n{}\n{pid}\n{at}", self.host),
            Err(e) => format!("err\n{}\n{pid}\n{e}", self.host),
        };
        root.send_with_tag(ready.as_bytes(), TAG_READY);
        if let Ok((_, at)) = &started {
            announce(&format!(
                "MPI rank {} of {} on {} (pid {pid}) serves {} chip(s) and {} sub worker(s) ({}) on {}",
                self.rank,
                self.size,
                self.host,
                options.chips,
                options.sub_workers,
                options.mode.name(),
                at
            ));
        }
        let _ = receive(&world, 0, TAG_STOP, None);
        if let Ok((server, _)) = started {
            server.shutdown();
        }
        root.send_with_tag(&b"stopped"[..], TAG_STOPPED);
        Ok(())
    }

    /// The server, and the address rank 0 is to dial (for a wildcard bind, the one a default
    /// bind would have chosen, with the bound port).
    fn listen(
        &self,
        options: &MpiServe,
        token: String,
        root_host: &str,
    ) -> Result<(crate::remote::Server, SocketAddr), String> {
        let reachable = || -> Result<IpAddr, String> {
            if root_host == self.host {
                Ok(IpAddr::V4(Ipv4Addr::LOCALHOST))
            } else {
                host_address(&self.host)
            }
        };
        let ip = match options.bind {
            Some(ip) => ip,
            None => reachable()?,
        };
        let server = serve(ServeOptions {
            listen: SocketAddr::new(ip, 0),
            chips: options.chips,
            sub_workers: options.sub_workers,
            mode: options.mode,
            chip_spec: options.chip_spec.clone(),
            token: Some(token),
            limits: options.limits.clone(),
            ..ServeOptions::default()
        })
        .map_err(|e| e.to_string())?;
        let mut at = server.local_addr();
        if at.ip().is_unspecified() {
            at.set_ip(reachable()?);
        }
        Ok((server, at))
    }
}

/// A serving rank as rank 0 knows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RankInfo {
    pub rank: i32,
    pub host: String,
    pub pid: u32,
    pub address: String,
}

impl RankInfo {
    /// `MPI rank 1 on node7 (pid 4242)`.
    pub fn describe(&self) -> String {
        format!("MPI rank {} on {} (pid {})", self.rank, self.host, self.pid)
    }
}

/// Ranks lost so far, and whether the job already ended.
#[derive(Default)]
struct Lost {
    ranks: Mutex<Vec<i32>>,
    ended: AtomicBool,
}

/// Rank 0: the level-4 client of the job. Dropped without [`MpiRoot::end`] (a panic, an early
/// return), it aborts the job: finalizing alone would wait for ranks that wait for it.
pub struct MpiRoot {
    /// `None` once the job ended.
    universe: Option<Universe>,
    host: String,
    size: Rank,
    ranks: Vec<RankInfo>,
    token: Option<String>,
    lost: Arc<Lost>,
}

impl MpiRoot {
    /// Ranks that serve a level-3 Worker (the world's size less rank 0).
    pub fn serving_ranks(&self) -> usize {
        (self.size - 1) as usize
    }

    /// The world's size (`mpirun -n`).
    pub fn world_size(&self) -> usize {
        self.size as usize
    }

    /// Hands every serving rank a fresh token and waits (up to [`START_TIMEOUT`]) until each
    /// one listens; returns them in rank order. On an error the job is not usable: call
    /// [`MpiRoot::end`].
    pub fn start(&mut self) -> Result<&[RankInfo], MpiError> {
        let token = fresh_token();
        let world = SimpleCommunicator::world();
        let hello = format!("go\n{token}\n{}", self.host);
        for rank in 1..self.size {
            world
                .process_at_rank(rank)
                .send_with_tag(hello.as_bytes(), TAG_HELLO);
        }
        self.token = Some(token);
        let deadline = Instant::now() + START_TIMEOUT;
        for rank in 1..self.size {
            let bytes =
                receive(&world, rank, TAG_READY, Some(deadline)).ok_or(MpiError::Silent {
                    rank,
                    timeout: START_TIMEOUT,
                })?;
            self.ranks.push(parse_ready(rank, &bytes)?);
        }
        Ok(&self.ranks)
    }

    /// The serving ranks as remote workers (with the job's token, named by rank and host,
    /// and watched: see the module docs), in rank order. Empty before [`MpiRoot::start`].
    pub fn remote_workers(&self) -> Vec<RemoteWorker> {
        let Some(token) = &self.token else {
            return Vec::new();
        };
        self.ranks
            .iter()
            .map(|info| {
                RemoteWorker::new(&format!("http://{}", info.address))
                    .token(token)
                    .label(&info.describe())
                    .on_lost(self.watch(info.clone()))
            })
            .collect()
    }

    /// The loss hook of one rank: says so at once and arms the job's end.
    fn watch(&self, info: RankInfo) -> crate::remote::LostHook {
        let lost = Arc::clone(&self.lost);
        Arc::new(move |why: &str| {
            let first = {
                let mut ranks = lost.ranks.lock();
                let first = ranks.is_empty();
                if !ranks.contains(&info.rank) {
                    ranks.push(info.rank);
                }
                first
            };
            say(&format!(
                "WORKER_LOST: {} at {} is lost: {why}",
                info.describe(),
                info.address
            ));
            if first {
                let lost = Arc::clone(&lost);
                std::thread::spawn(move || {
                    std::thread::sleep(LOST_RANK_GRACE);
                    if !lost.ended.load(Ordering::Acquire) {
                        say(&format!(
                            "ending the MPI job: a rank was lost {LOST_RANK_GRACE:?} ago"
                        ));
                        SimpleCommunicator::world().abort(1);
                    }
                });
            }
        })
    }

    /// The ranks lost so far (in the order they were lost).
    pub fn lost_ranks(&self) -> Vec<i32> {
        self.lost.ranks.lock().clone()
    }

    /// Ends the job with exit status `code` for rank 0: every serving rank closes its server
    /// and exits 0, and MPI is finalized. If a rank was lost, or one does not stop within
    /// [`STOP_TIMEOUT`], the job is aborted instead (status `code`, at least 1) and this does
    /// not return.
    pub fn end(mut self, code: i32) -> i32 {
        self.lost.ended.store(true, Ordering::Release);
        let world = SimpleCommunicator::world();
        if !self.lost_ranks().is_empty() {
            abort(&world, code, "a rank was lost");
        }
        let (message, tag): (&[u8], Tag) = if self.token.is_some() {
            (b"stop", TAG_STOP)
        } else {
            (b"end", TAG_HELLO)
        };
        for rank in 1..self.size {
            world.process_at_rank(rank).send_with_tag(message, tag);
        }
        if self.token.is_some() {
            let deadline = Instant::now() + STOP_TIMEOUT;
            for rank in 1..self.size {
                if receive(&world, rank, TAG_STOPPED, Some(deadline)).is_none() {
                    let who = self
                        .ranks
                        .iter()
                        .find(|r| r.rank == rank)
                        .map_or_else(|| format!("MPI rank {rank}"), RankInfo::describe);
                    abort(
                        &world,
                        code,
                        &format!("{who} did not stop within {STOP_TIMEOUT:?}"),
                    );
                }
            }
        }
        drop(self.universe.take());
        code
    }
}

impl Drop for MpiRoot {
    fn drop(&mut self) {
        if self.universe.is_some() {
            abort(
                &SimpleCommunicator::world(),
                1,
                "rank 0 stopped without ending the job (a panic or an early return)",
            );
        }
    }
}

impl WorkerBuilder {
    /// The serving ranks of an MPI job as this level-4 Worker's remote workers, in rank order
    /// (remote worker `i` is rank `i + 1`). Call after [`MpiRoot::start`].
    pub fn mpi(mut self, root: &MpiRoot) -> Self {
        for worker in root.remote_workers() {
            self = self.remote(worker);
        }
        self
    }
}

fn abort(world: &SimpleCommunicator, code: i32, why: &str) -> ! {
    say(&format!("ending the MPI job: {why}"));
    world.abort(code.max(1))
}

/// The next message from `from` with `tag`, probing every [`POLL`]; `None` past `deadline`.
fn receive(
    world: &SimpleCommunicator,
    from: Rank,
    tag: Tag,
    deadline: Option<Instant>,
) -> Option<Vec<u8>> {
    let source = world.process_at_rank(from);
    loop {
        if let Some(matched) = source.immediate_matched_probe_with_tag(tag) {
            return Some(matched.matched_receive_vec::<u8>().0);
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return None;
        }
        std::thread::sleep(POLL);
    }
}

/// `go\nTOKEN\nROOT_HOST` → (token, rank 0's host); anything else (`end`) → the job is over.
fn parse_hello(bytes: &[u8]) -> Option<(String, String)> {
    let text = std::str::from_utf8(bytes).ok()?;
    let mut lines = text.splitn(3, '\n');
    match (lines.next(), lines.next(), lines.next()) {
        (Some("go"), Some(token), Some(host)) => Some((token.to_string(), host.to_string())),
        _ => None,
    }
}

/// `ok\nHOST\nPID\nADDR` or `err\nHOST\nPID\nMESSAGE`.
fn parse_ready(rank: Rank, bytes: &[u8]) -> Result<RankInfo, MpiError> {
    let bad = |message: &str| MpiError::Protocol {
        rank,
        message: message.to_string(),
    };
    let text = std::str::from_utf8(bytes).map_err(|_| bad("not UTF-8"))?;
    let fields: Vec<&str> = text.splitn(4, '\n').collect();
    let [kind, host, pid, rest] = fields[..] else {
        return Err(bad("expected four lines"));
    };
    let pid: u32 = pid.parse().map_err(|_| bad("no pid"))?;
    match kind {
        "ok" => Ok(RankInfo {
            rank,
            host: host.to_string(),
            pid,
            address: rest.to_string(),
        }),
        "err" => Err(MpiError::Rank {
            rank,
            host: host.to_string(),
            pid,
            message: rest.to_string(),
        }),
        _ => Err(bad("neither ok nor err")),
    }
}

/// 32 random bytes from the kernel, as 64 hex digits.
fn fresh_token() -> String {
    use std::io::Read as _;
    let mut bytes = [0u8; 32];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .expect("/dev/urandom is readable on Linux");
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The first non-loopback IPv4 address `host` resolves to.
fn host_address(host: &str) -> Result<IpAddr, String> {
    (host, 0)
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve this host's name {host:?}: {e}"))?
        .map(|a| a.ip())
        .find(|ip| ip.is_ipv4() && !ip.is_loopback())
        .ok_or_else(|| {
            format!(
                "this host's name {host:?} resolves to no non-loopback IPv4 address; give one to listen on (--mpi-bind)"
            )
        })
}

/// Prints `pto: <line>` on stderr in one write ([`eprint_line`]).
fn say(line: &str) {
    eprint_line(&format!("pto: {line}"));
}

/// Prints `line` and a newline on stderr in one write. `mpirun` and every rank write to the
/// same stream, and `eprintln!` writes a formatted line piece by piece, so their output could
/// land inside it: a CI run saw mpirun's abort banner split "WORKER_LOST: MPI rank 1 …" in
/// two, and two ranks announcing at once could garble both lines.
pub fn eprint_line(line: &str) {
    use std::io::Write;
    let _ = std::io::stderr().write_all(format!("{line}\n").as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hello_and_ready_messages_round_trip_and_bad_ones_are_named() {
        assert_eq!(
            parse_hello(b"go\nabc\nnode0"),
            Some(("abc".into(), "node0".into()))
        );
        assert_eq!(parse_hello(b"end"), None);
        let info = parse_ready(2, b"ok\nnode2\n77\n127.0.0.1:4000").unwrap();
        assert_eq!(info.describe(), "MPI rank 2 on node2 (pid 77)");
        assert_eq!(info.address, "127.0.0.1:4000");
        let err = parse_ready(1, b"err\nnode1\n9\ncannot listen on x").unwrap_err();
        assert_eq!(
            err.to_string(),
            "MPI rank 1 on node1 (pid 9) cannot serve: cannot listen on x"
        );
        assert!(matches!(
            parse_ready(1, b"ok\nnode1"),
            Err(MpiError::Protocol { rank: 1, .. })
        ));
    }

    #[test]
    fn tokens_are_fresh_hex() {
        let (a, b) = (fresh_token(), fresh_token());
        assert_eq!(a.len(), 64);
        assert!(a.bytes().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
    }
}
