//! Level 4 over remote L3 workers (issue 16, NODE_RUNTIME.md §6.2): an L4 Worker submits one
//! L3 run to each remote worker (`pto serve`), each with its own `config.tasks.remote<N>`
//! sizing; inside, the node callable `remote_fanout.l3` sends one element-wise chip job to
//! every chip of the server's session with the config the L4 task carried, whole — so every
//! remote chip must bind exactly that sizing (source `call_config`), and the rows show it.
//!
//! With `--remote ADDR` (repeatable) the runner's addresses are used; without, the scene
//! starts `device_count` servers itself on loopback ports of this process (real gRPC over
//! TCP; their sessions' chips follow the runner's mode).

use std::net::{Ipv4Addr, SocketAddr};

use anyhow::Context as _;
use pto_node::remote::{RemoteBuffer, RemoteWorker, ServeLimits, ServeOptions, Server, serve};
use pto_node::{
    Callable, CallableKind, EndpointMode, FailureKind, OrchError, Orchestrator, RunReport,
    TaskOutcome, Worker, WorkerRunError,
};
use pto_types::{CallConfig, DType, TaskArgs, Tensor};

use crate::config_block::{CaseConfig, SceneLevel};
use crate::l3::{check_task_sizing, rows_of, small_chip};
use crate::labels::Label;
use crate::params::Param;
use crate::scene::{CaseResult, CaseRun, Scene, TaskErrorInfo, TaskRow, TaskSizing, WorkerBounds};

/// Node callable `remote_fanout.l3`: tensors `a`, `out0`…`out{k-1}`, scalar 0 = delay (ms);
/// job `c` computes `out_c = a + a` (after the delay) on chip `c mod chips` with the config of
/// this L3 task, so a server with fewer chips than outputs still runs every job.
fn l3_job(orch: &mut Orchestrator<'_>, args: &TaskArgs, cfg: &CallConfig) -> Result<(), OrchError> {
    let add = orch.callable(CallableKind::Chip, "elementwise_add_after")?;
    let t = args.tensors();
    let Some(&delay) = args.scalars().first() else {
        return Err(OrchError::msg("remote_fanout.l3 takes a delay scalar"));
    };
    if t.len() < 2 {
        return Err(OrchError::msg(
            "remote_fanout.l3 takes a and at least one output",
        ));
    }
    let chips = orch.next_level_workers().max(1);
    for c in 0..t.len() - 1 {
        let job = TaskArgs::new()
            .input(&t[0].1)
            .input(&t[0].1)
            .output_existing(&t[1 + c].1)
            .scalar(delay)
            .label(&format!("add{c}"));
        orch.submit_next_level(&add, job, cfg, c % chips)?;
    }
    Ok(())
}

pto_node::register_node!("remote_fanout.l3", l3_job);

pub(crate) struct RemoteFanout;

static PARAMS: &[Param] = &[
    Param::new("n", 1, 1 << 22, 4096, "elements of each f32 vector"),
    Param::new(
        "chips_per_worker",
        1,
        8,
        2,
        "chips used on each remote worker",
    ),
    Param::new(
        "chip_delay_ms",
        0,
        600_000,
        0,
        "each chip job waits this long first (for liveness tests)",
    ),
];

static LABELS: &[Label] = &[Label::family(
    "remote",
    "the L3 run on remote worker N is remoteN",
)];

impl Scene for RemoteFanout {
    fn name(&self) -> &'static str {
        "remote_fanout"
    }

    fn level(&self) -> SceneLevel {
        SceneLevel::L4
    }

    fn params(&self) -> &'static [Param] {
        PARAMS
    }

    fn labels(&self) -> &'static [Label] {
        LABELS
    }

    fn worker_bounds(&self) -> WorkerBounds {
        // device_count: the remote workers (servers started here without --remote).
        WorkerBounds {
            device_count: (1, 8),
            num_sub_workers: (0, 0),
        }
    }

    fn remote_workers(&self, config: &CaseConfig) -> Option<usize> {
        Some(
            config
                .device_count
                .map_or(DEFAULT_REMOTE_WORKERS, |n| n as usize),
        )
    }

    fn run(&self, case: &CaseRun<'_>) -> anyhow::Result<CaseResult> {
        let n: usize = case.param("n")?;
        let chips: usize = case.param("chips_per_worker")?;
        let delay: u64 = case.param("chip_delay_ms")?;
        let (remotes, _servers) = remote_workers(case, chips)?;
        let mut builder = Worker::builder(4)
            .endpoint_mode(EndpointMode::ChildProcess)
            .heap_ring_size(1 << 20)
            .task_timeout(case.env.task_timeout);
        for r in &remotes {
            builder = builder.remote(r.clone());
        }
        let w = builder.build()?;
        let h = w.register(Callable::node("remote_fanout.l3"))?;
        w.init().context("opening the remote workers' sessions")?;
        let jobs = (0..remotes.len())
            .map(|i| Job::new(&w, i, n, chips, case))
            .collect::<anyhow::Result<Vec<Job>>>()?;
        let outcome = w.run(
            |orch, _, _| {
                for (i, job) in jobs.iter().enumerate() {
                    let mut args = TaskArgs::new().input(&job.a.1);
                    for (_, out) in &job.outs {
                        args = args.output_existing(out);
                    }
                    let args = args.scalar(delay).label(&job.label);
                    orch.submit_next_level(&h, args, &job.config, i)?;
                }
                Ok(())
            },
            TaskArgs::new(),
            case.base.clone(),
        );
        let mut result = match outcome {
            Ok(report) => {
                let mut r = CaseResult::new(rows(&report, &jobs, case));
                r.check = jobs.iter().try_for_each(|j| j.check(&report, n));
                r
            }
            Err(WorkerRunError::Failed(e)) => {
                let mut r = CaseResult::new(rows(&e.report, &jobs, case));
                r.check = Err(e.to_string());
                r
            }
            Err(e) => return Err(e.into()),
        };
        let at: Vec<String> = remotes.iter().map(|r| r.to_string()).collect();
        result
            .notes
            .push(format!("remote workers: {}", at.join(", ")));
        w.close();
        Ok(result)
    }
}

/// Remote workers of a case without `config.device_count`.
const DEFAULT_REMOTE_WORKERS: usize = 2;

/// The remote workers' addresses: the runner's, or those of servers started here (returned
/// with them, so they live as long as the case).
fn remote_workers(
    case: &CaseRun<'_>,
    chips: usize,
) -> anyhow::Result<(Vec<RemoteWorker>, Vec<Server>)> {
    let count = RemoteFanout
        .remote_workers(case.config)
        .unwrap_or(DEFAULT_REMOTE_WORKERS);
    if !case.env.remote.is_empty() {
        // `check_options` made sure there are enough (MPI ranks may be more).
        return Ok((
            case.env.remote.iter().take(count).cloned().collect(),
            Vec::new(),
        ));
    }
    let mut servers = Vec::with_capacity(count);
    for _ in 0..count {
        let options = ServeOptions {
            listen: SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
            chips,
            sub_workers: 0,
            mode: case.env.mode,
            chip_spec: small_chip(4 << 30),
            heap_ring_size: 1 << 20,
            token: None,
            tls: None,
            limits: ServeLimits::default(),
        };
        servers.push(serve(options).context("starting a loopback server")?);
    }
    let remotes = servers
        .iter()
        .map(|s| RemoteWorker::new(&format!("http://{}", s.local_addr())))
        .collect();
    Ok((remotes, servers))
}

/// One remote worker's L3 task: its label, config and buffers there.
struct Job {
    label: String,
    config: CallConfig,
    value: f32,
    a: (RemoteBuffer, Tensor),
    outs: Vec<(RemoteBuffer, Tensor)>,
}

impl Job {
    fn new(
        w: &Worker,
        i: usize,
        n: usize,
        chips: usize,
        case: &CaseRun<'_>,
    ) -> anyhow::Result<Job> {
        let label = format!("remote{i}");
        let value = i as f32 + 1.0;
        let make = |fill: f32| -> anyhow::Result<(RemoteBuffer, Tensor)> {
            let buf = w.create_remote_buffer(i, n * 4)?;
            if fill != 0.0 {
                buf.write_from(0, &vec![fill; n])?;
            }
            let t = buf.tensor(&[u32::try_from(n)?], DType::F32)?;
            Ok((buf, t))
        };
        Ok(Job {
            config: case.for_label(&label),
            label,
            value,
            a: make(value)?,
            outs: (0..chips)
                .map(|_| make(0.0))
                .collect::<anyhow::Result<_>>()?,
        })
    }

    /// Every chip of the remote run bound this task's sizing and wrote `2 · value`.
    fn check(&self, report: &RunReport, n: usize) -> Result<(), String> {
        let task = report
            .task(&self.label)
            .ok_or_else(|| format!("no task {}", self.label))?;
        let inner = task
            .members
            .first()
            .and_then(|m| m.inner.as_deref())
            .ok_or_else(|| format!("{}: no report of the remote run", self.label))?;
        for (c, (buf, _)) in self.outs.iter().enumerate() {
            check_task_sizing(inner, &format!("add{c}"), &self.config)
                .map_err(|e| format!("{}: {e}", self.label))?;
            let got = buf.read_vec::<f32>(0, n).map_err(|e| e.to_string())?;
            if got.iter().any(|&v| v != 2.0 * self.value) {
                return Err(format!("{}/add{c}: wrong output", self.label));
            }
        }
        Ok(())
    }
}

/// One row per remote chip task (`remote0/add1`), from each L3 task's inner report.
fn rows(report: &RunReport, jobs: &[Job], case: &CaseRun<'_>) -> Vec<TaskRow> {
    let mut out = Vec::new();
    for job in jobs {
        let Some(task) = report.task(&job.label) else {
            continue;
        };
        let Some(inner) = task.members.first().and_then(|m| m.inner.as_deref()) else {
            // Failed before or without a remote run (e.g. the worker was lost): the row shows
            // the sizing the task carried and why it failed.
            if let TaskOutcome::Failed(f) = &task.outcome {
                let sizing = TaskSizing::resolve(&job.config, &case.chip_env());
                let mut error = TaskErrorInfo::new(f.code, f.message.clone());
                error.skipped = f.kind == FailureKind::Skipped;
                out.push(TaskRow::failed(&job.label, 0, sizing, error));
            }
            continue;
        };
        let config_of = |_: &str| job.config.clone();
        for mut row in rows_of(inner, case, &config_of) {
            row.task = format!("{}/{}", job.label, row.task);
            out.push(row);
        }
    }
    out
}
