//! Command-line definitions: plain values, validated without side effects.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

#[derive(Debug, Parser)]
#[command(
    name = "pto",
    version,
    about = "Parallel Task Orchestration: build and run task graphs on simulated chips"
)]
pub(crate) struct Cli {
    /// More log output on stderr (-v: info, -vv: debug).
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub(crate) verbose: u8,
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Run the cases of a scene file and print a result table (exit 0 all pass, 1 a case
    /// failed, 2 load or usage error).
    Run(RunArgs),
    /// Ring-sizing configuration tools.
    #[command(subcommand)]
    Config(ConfigCommand),
    /// Recommend a per-ring `runtime_env` from a run's scope_stats.jsonl (the block on stdout,
    /// the per-ring table on stderr).
    Advise(AdviseArgs),
    /// Tune a scene's cases: run with scope stats, advise, re-run with the advice to verify
    /// it, repeat while a run fails with a capacity error; print sizing and reserved bytes
    /// before and after (exit 0 every case verified, 1 one was not, 2 usage error).
    Tune(TuneArgs),
    /// Measure pto against peers in the same run (BENCHMARKS.md): one benchmark or all; a
    /// table, or one JSON object per measured point.
    Bench(BenchArgs),
    /// List the scenes this binary knows: level, params (range, default), task labels and
    /// worker counts; with NAME, only that scene.
    Scenes(ScenesArgs),
    /// Run random level-3 and level-4 cases for a time while killing and stopping random
    /// chip, sub and server processes; check every run (passed, or failed naming the dead
    /// worker), and that no process, memfd, /dev/shm entry or thread leaks and RSS stays flat
    /// (exit 0 no problem, 1 a problem, 2 usage error).
    Soak(SoakArgs),
    /// Serve remote L3 Workers over gRPC: each client session gets an L3 Worker with these
    /// chips and sub workers, runs the node callables of this binary on it, and is closed when
    /// the client goes away. Binds 127.0.0.1 unless told otherwise.
    Serve(ServeArgs),
}

#[derive(Debug, Args)]
pub(crate) struct ServeArgs {
    /// Address to listen on (port 0: any free port; the chosen one is printed).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:7070")]
    pub(crate) listen: std::net::SocketAddr,
    /// Chips of each session's L3 Worker.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub(crate) chips: usize,
    /// Sub workers of each session's L3 Worker.
    #[arg(long, value_name = "M", default_value_t = 0)]
    pub(crate) sub_workers: usize,
    /// Clusters of each chip (default: the chip's default).
    #[arg(long, value_name = "N")]
    pub(crate) clusters: Option<u32>,
    /// Where each session runs its chips and sub workers.
    #[arg(long, value_enum, default_value_t = Mode::ChildProcess)]
    pub(crate) mode: Mode,
    /// Refuse calls without this token (the file's first line); the token is never logged.
    #[arg(long, value_name = "FILE")]
    pub(crate) token_file: Option<PathBuf>,
    /// Serve TLS with this PEM certificate chain (needs --tls-key).
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    pub(crate) tls_cert: Option<PathBuf>,
    /// The PEM private key of --tls-cert.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub(crate) tls_key: Option<PathBuf>,
    /// Sessions open at once (each runs an L3 Worker); more are refused.
    #[arg(long, value_name = "N", default_value_t = 16)]
    pub(crate) max_sessions: usize,
    /// TCP connections open at once; more are closed when accepted.
    #[arg(long, value_name = "N", default_value_t = 256)]
    pub(crate) max_connections: usize,
    /// Calls of one session in flight at once; more are refused.
    #[arg(long, value_name = "N", default_value_t = 256)]
    pub(crate) max_calls_per_session: usize,
    /// Seconds a new connection has to start HTTP/2 (or TLS) before it is cut off.
    #[arg(long, value_name = "SECONDS", default_value_t = 10.0)]
    pub(crate) handshake_timeout: f64,
}

#[derive(Debug, Args)]
pub(crate) struct SoakArgs {
    /// Scene files of level 3 or 4 (default: those under ./scenes).
    pub(crate) scenes: Vec<PathBuf>,
    /// How long to soak.
    #[arg(long, value_name = "SECONDS", default_value_t = 60.0)]
    pub(crate) seconds: f64,
    /// The share of runs that get a fault (0 to 1).
    #[arg(long, value_name = "P", default_value_t = 0.5)]
    pub(crate) fault_rate: f64,
    /// A run still going after this is a hang.
    #[arg(long, value_name = "SECONDS", default_value_t = 60.0)]
    pub(crate) run_deadline: f64,
    /// `pto serve` processes for the level-4 cases.
    #[arg(long, value_name = "N", default_value_t = 2)]
    pub(crate) servers: usize,
    /// The PRNG seed (default: from the clock; printed, so a soak can be repeated).
    #[arg(long)]
    pub(crate) seed: Option<u64>,
}

#[derive(Debug, Args)]
pub(crate) struct TuneArgs {
    /// The scene file.
    pub(crate) scene: PathBuf,
    /// Tune only this case.
    #[arg(long, value_name = "NAME")]
    pub(crate) case: Option<String>,
    /// Headroom over the observed peaks: a fraction (0.25) or a percentage (25%). Default 0:
    /// the advice already covers the worst case the run could need (dep-pool demand, a heap
    /// of peak + the largest allocation), and tune verifies it by re-running.
    #[arg(
        long,
        value_name = "H",
        default_value = "0",
        allow_hyphen_values = true
    )]
    pub(crate) headroom: String,
    /// Runs per case at most, the case as written included.
    #[arg(long, value_name = "N", default_value_t = 4)]
    pub(crate) max_rounds: usize,
    /// Save each verified advised case into the scene file as `<case>_advised`.
    #[arg(long)]
    pub(crate) write: bool,
    /// Where the rounds' scope stats go (`DIR/<case>/round<k>`); default: a temporary
    /// directory, removed afterwards.
    #[arg(long, value_name = "DIR")]
    pub(crate) output: Option<PathBuf>,
    /// Where level-3 scenes run their workers.
    #[arg(long, value_enum, default_value_t = Mode::InProcess)]
    pub(crate) mode: Mode,
    /// A chip environment variable laid over this process's environment (repeatable).
    #[arg(long = "ring-env", value_name = "KEY=VALUE")]
    pub(crate) ring_env: Vec<String>,
    /// Smaller inputs (what `cargo test` runs).
    #[arg(long)]
    pub(crate) fast: bool,
    /// Also write one self-contained HTML page with every case as written and as tuned
    /// (sizing, reserved vs high-water bars, ring occupancy over the run).
    #[arg(long, value_name = "FILE.html")]
    pub(crate) report: Option<PathBuf>,
}

/// The benchmark argument's help: every name `pto_bench` knows, so it cannot fall behind.
fn which_help() -> String {
    format!("The benchmark: {}, or all", pto_bench::names())
}

#[derive(Debug, Args)]
pub(crate) struct BenchArgs {
    #[arg(help = which_help())]
    pub(crate) which: String,
    /// One JSON object per measured point per line.
    #[arg(long)]
    pub(crate) json: bool,
    /// Small workloads (seconds, for tests): the figures are not meaningful.
    #[arg(long)]
    pub(crate) quick: bool,
}

#[derive(Debug, Args)]
pub(crate) struct ScenesArgs {
    /// One scene's name.
    pub(crate) name: Option<String>,
    /// One JSON object per scene per line instead of text.
    #[arg(long)]
    pub(crate) json: bool,
}

/// How chip and sub workers of level-3 scenes run (the command line's view of
/// `pto_node::EndpointMode`, for clap's help and completion).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum Mode {
    /// Threads in this process.
    InProcess,
    /// One OS process per worker, over shared-memory mailboxes.
    ChildProcess,
}

impl From<Mode> for pto_node::EndpointMode {
    fn from(mode: Mode) -> pto_node::EndpointMode {
        match mode {
            Mode::InProcess => pto_node::EndpointMode::InProcess,
            Mode::ChildProcess => pto_node::EndpointMode::ChildProcess,
        }
    }
}

#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    /// The scene file (TOML with `scene`, `level` and `[[cases]]`).
    pub(crate) scene: PathBuf,
    /// Run only this case.
    #[arg(long, value_name = "NAME")]
    pub(crate) case: Option<String>,
    /// Where level-3 scenes run their workers.
    #[arg(long, value_enum, default_value_t = Mode::InProcess)]
    pub(crate) mode: Mode,
    /// Diagnostics directory; each case writes under `<DIR>/<case name>` (a case whose
    /// directory cannot be written fails).
    #[arg(long, value_name = "DIR", default_value = "pto-out")]
    pub(crate) output: PathBuf,
    /// Write scope stats (input of `pto advise`).
    #[arg(long)]
    pub(crate) enable_scope_stats: bool,
    /// Write a swimlane trace of this level (1-4).
    #[arg(long, value_name = "LEVEL", default_value_t = 0)]
    pub(crate) enable_chip_swimlane: u8,
    /// Dump each chip run's task DAG as JSON and DOT.
    #[arg(long)]
    pub(crate) enable_dep_gen: bool,
    /// Environment problems in the chips' environment are errors.
    #[arg(long)]
    pub(crate) strict_env: bool,
    /// What chips do about a task that overwrites bytes an earlier, unfinished task reads when
    /// nothing orders them (write-after-read without track_war): auto (report in debug
    /// builds, off in release), off, report (a warning on the case), strict (the task fails).
    #[arg(long, value_name = "MODE", default_value = "auto", value_parser = parse_war_check)]
    pub(crate) war_check: pto_types::WarCheck,
    /// Same as --war-check strict: an unordered write-after-read fails the run.
    #[arg(long, conflicts_with = "war_check")]
    pub(crate) strict: bool,
    /// A chip environment variable laid over this process's environment (repeatable).
    #[arg(long = "ring-env", value_name = "KEY=VALUE")]
    pub(crate) ring_env: Vec<String>,
    /// One JSON object per (case, task) per line instead of the table.
    #[arg(long)]
    pub(crate) json: bool,
    /// Smaller inputs (what `cargo test` runs).
    #[arg(long)]
    pub(crate) fast: bool,
    /// Also write a self-contained HTML page (sizing, reserved vs high-water bars per ring and,
    /// with --enable-scope-stats, each ring's occupancy over the run) to FILE.
    #[arg(long, value_name = "FILE.html")]
    pub(crate) report: Option<PathBuf>,
    /// Fail a task that runs longer than SECS (TASK_TIMEOUT); its child is killed and
    /// restarted. Default: no limit.
    #[arg(long, value_name = "SECS", allow_hyphen_values = true)]
    pub(crate) task_timeout: Option<String>,
    /// Kill and restart a child process that does not answer liveness probes for SECS
    /// (default 5).
    #[arg(long, value_name = "SECS", allow_hyphen_values = true)]
    pub(crate) liveness_timeout: Option<String>,
    /// A remote L3 worker (`pto serve` address, e.g. http://127.0.0.1:7070) for level-4 scenes
    /// (repeatable; without it such a scene starts its own servers on loopback ports).
    #[arg(long = "remote", value_name = "ADDR")]
    pub(crate) remote: Vec<String>,
    /// The token the --remote servers require (the file's first line).
    #[arg(long, value_name = "FILE", requires = "remote")]
    pub(crate) remote_token_file: Option<PathBuf>,
    /// The PEM certificate (or CA) of https:// --remote servers.
    #[arg(long, value_name = "FILE", requires = "remote")]
    pub(crate) remote_ca: Option<PathBuf>,
    /// How the job starts. `mpi`: every rank of `mpirun -n N` runs this same command; rank 0
    /// runs the (level-4) scene and ranks 1..N-1 each serve it a level-3 Worker (--chips,
    /// --sub-workers, --mode). Needs a pto built with the `mpi` feature.
    #[arg(long, value_enum, default_value_t = Launcher::Local, conflicts_with = "remote")]
    pub(crate) launcher: Launcher,
    /// Chips of each serving rank's Worker (--launcher mpi; default 1).
    #[arg(long, value_name = "N")]
    pub(crate) chips: Option<usize>,
    /// Sub workers of each serving rank's Worker (--launcher mpi; default 0).
    #[arg(long, value_name = "M")]
    pub(crate) sub_workers: Option<usize>,
    /// The address serving ranks listen on (--launcher mpi; default: loopback on rank 0's
    /// host, else the first non-loopback IPv4 address of the rank's host name; 0.0.0.0: every
    /// interface, announced as that address).
    #[arg(long, value_name = "IP")]
    pub(crate) mpi_bind: Option<std::net::IpAddr>,
}

/// How `pto run` starts its job.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum Launcher {
    /// This process runs the scene (level-4 scenes reach --remote servers or start their own).
    Local,
    /// One rank of an MPI job started by mpirun, srun or an MPI operator.
    Mpi,
}

#[derive(Debug, Subcommand)]
pub(crate) enum ConfigCommand {
    /// Resolve one task's ring sizing (CallConfig > environment > default) and show where every
    /// value came from, the derived capacities and the arena footprint.
    Resolve(ResolveArgs),
}

#[derive(Debug, Args)]
pub(crate) struct ResolveArgs {
    /// Task window: one value for every ring, or four comma-separated values (0 = unset).
    #[arg(long, value_name = "N|A,B,C,D", allow_hyphen_values = true)]
    pub(crate) task_window: Option<String>,
    /// Heap bytes: one value for every ring, or four comma-separated values (0 = unset).
    #[arg(long, value_name = "N|A,B,C,D", allow_hyphen_values = true)]
    pub(crate) heap: Option<String>,
    /// Dep-pool entries: one value for every ring, or four comma-separated values (0 = unset).
    #[arg(long, value_name = "N|A,B,C,D", allow_hyphen_values = true)]
    pub(crate) dep_pool: Option<String>,
    /// A TOML file with the keys of a scene case's `config` block (e.g. the output of
    /// `pto advise`). The flags above override its non-zero entries.
    #[arg(long, value_name = "FILE")]
    pub(crate) config: Option<PathBuf>,
    /// Resolve what a task of this scene file's case `--case` binds (its `config` block,
    /// and with --label the overrides that apply to that task).
    #[arg(
        long,
        value_name = "FILE",
        requires = "case",
        conflicts_with = "config"
    )]
    pub(crate) scene: Option<PathBuf>,
    /// The case of `--scene`.
    #[arg(long, value_name = "NAME", requires = "scene")]
    pub(crate) case: Option<String>,
    /// With --config or --scene: the task's label; the overrides of `tasks.<LABEL>` (or of its
    /// family, `tasks.ew` for `ew3`) apply on top of the base.
    #[arg(long, value_name = "LABEL")]
    pub(crate) label: Option<String>,
    /// An environment variable for the environment tier (repeatable). When given, these pairs
    /// replace this process's environment entirely.
    #[arg(long = "env", value_name = "KEY=VALUE")]
    pub(crate) env: Vec<String>,
    /// Environment problems are errors (exit status 2).
    #[arg(long)]
    pub(crate) strict_env: bool,
    /// Check whether the arena fits a chip with this many bytes of device memory
    /// (exit status 1 if it does not).
    #[arg(long, value_name = "BYTES")]
    pub(crate) device_memory: Option<u64>,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct AdviseArgs {
    /// Scope-stats files, or directories searched for `scope_stats.jsonl` (e.g. the
    /// `--output` directory of `pto run --enable-scope-stats`); runs of one label are merged.
    #[arg(value_name = "PATH", required = true, num_args = 1..)]
    pub(crate) paths: Vec<PathBuf>,
    /// Headroom over the observed peaks: a fraction (0.25) or a percentage (25%).
    #[arg(
        long,
        value_name = "H",
        default_value = "0.25",
        allow_hyphen_values = true
    )]
    pub(crate) headroom: String,
    /// Output format on stdout.
    #[arg(long, value_enum, default_value_t = AdviseFormatArg::Toml)]
    pub(crate) format: AdviseFormatArg,
    /// The scene file of the runs: print (or --write) its case `--case` with the advice, as a
    /// new case `<case>_advised` (per-label `config.tasks.<label>.runtime_env` at level 3).
    #[arg(long, value_name = "FILE", requires = "case")]
    pub(crate) scene: Option<PathBuf>,
    /// The case of `--scene` the runs belong to.
    #[arg(long, value_name = "NAME", requires = "scene")]
    pub(crate) case: Option<String>,
    /// Put the advised case into the scene file (replacing an earlier `<case>_advised`).
    #[arg(long, requires = "scene")]
    pub(crate) write: bool,
}

/// `--format` of `pto advise`.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub(crate) enum AdviseFormatArg {
    /// A `[runtime_env]` block for `pto config resolve --config` or a scene case.
    Toml,
    /// `PTO2_RING_*=a,b,c,d` lines (one sizing: the runs must share one label).
    Env,
    /// One JSON object per label with its `runtime_env` and the per-ring details.
    Json,
}

/// `--war-check`'s value.
fn parse_war_check(text: &str) -> Result<pto_types::WarCheck, String> {
    pto_types::WarCheck::from_name(text).ok_or_else(|| {
        let names: Vec<&str> = pto_types::WarCheck::ALL.iter().map(|w| w.name()).collect();
        format!("{text:?} is not one of {}", names.join(", "))
    })
}
