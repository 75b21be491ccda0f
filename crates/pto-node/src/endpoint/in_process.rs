//! In-process endpoints: each chip and sub worker is one thread of this process
//! (NODE_RUNTIME.md §4.1, `InProcess{Chip,Sub}`).
//!
//! Hand-off protocol, the mailbox's states as Rust values in one slot:
//!
//! 1. The scheduler (only caller of the [`Endpoint`] methods) stores a request into the empty
//!    slot under its mutex and notifies the lane's event count (`wake`).
//! 2. The lane thread waits on `wake` (spin, then park; `pto_types::wait`) until the slot holds
//!    a request or `shutdown`, takes it, runs it without holding the mutex, stores the reply,
//!    and notifies the scheduler's doorbell.
//! 3. The scheduler's `poll` takes the reply; the lane is idle again.
//!
//! Every change to the slot happens under its mutex before the matching notify, so by the
//! event-count protocol no wake-up is lost. A chip lane owns its `ChipWorker` (created at
//! `init` from the Worker's environment source, so the snapshot is taken then); a bind failure
//! is an ordinary task failure and leaves the lane usable (RING_CONFIG.md T88).

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use pto_chip::memory::{AllocId, DeviceMemoryError};
use pto_chip::{ChipRunError, ChipWorker, RunContext};
use pto_types::wait::{EventCount, SpinPolicy, wait_until};
use pto_types::{CallConfig, ErrorCode, TaskArgs, Tensor};

use super::{
    Completion, ControlCmd, ControlReply, Death, Endpoint, EndpointError, Failure, Health,
    ShutdownOutcome, TaskRequest,
};
use crate::callable::{CallableKind, CallableTable};
use crate::error::FailureKind;
use crate::shm::doorbell::Doorbell;
use crate::sub::{MappedArgs, SubContext};

enum LaneRequest {
    Task(Box<TaskRequest>),
    Control(ControlCmd),
}

enum LaneReply {
    Task(Box<Completion>),
    Control(Result<ControlReply, EndpointError>),
}

#[derive(Default)]
struct Slot {
    request: Option<LaneRequest>,
    reply: Option<LaneReply>,
    shutdown: bool,
}

struct LaneShared {
    slot: Mutex<Slot>,
    /// The lane waits here for a request.
    wake: EventCount,
    /// The scheduler's doorbell, notified with every reply.
    doorbell: Arc<Doorbell>,
}

/// What a lane runs.
pub(crate) enum LaneWork {
    Chip {
        index: usize,
        chip: Box<ChipWorker>,
    },
    Sub {
        index: usize,
        callables: Arc<CallableTable>,
    },
}

/// The scheduler's side of one in-process lane.
pub(crate) struct InProcessEndpoint {
    name: String,
    shared: Arc<LaneShared>,
    thread: Option<JoinHandle<()>>,
    /// The kind and name of the callable of the task in flight (for timeout messages).
    task_in_flight: Option<(CallableKind, Arc<str>)>,
    /// The task in flight was failed for its timeout: its late reply is discarded.
    abandoned: bool,
    /// A control command in flight.
    control_in_flight: bool,
    shutting_down: bool,
}

impl InProcessEndpoint {
    /// Starts the lane thread.
    pub(crate) fn start(
        name: String,
        work: LaneWork,
        doorbell: Arc<Doorbell>,
        spin: SpinPolicy,
    ) -> std::io::Result<InProcessEndpoint> {
        let shared = Arc::new(LaneShared {
            slot: Mutex::new(Slot::default()),
            wake: EventCount::new(),
            doorbell,
        });
        let lane = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name(format!("pto-{name}"))
            .spawn(move || lane_main(lane, work, spin))?;
        Ok(InProcessEndpoint {
            name,
            shared,
            thread: Some(thread),
            task_in_flight: None,
            abandoned: false,
            control_in_flight: false,
            shutting_down: false,
        })
    }

    fn hand_over(&mut self, request: LaneRequest) -> Result<(), EndpointError> {
        if let Health::Dead(d) = self.health() {
            return Err(EndpointError::Dead(d.describe(&self.name)));
        }
        {
            let mut slot = self.shared.slot.lock();
            if slot.request.is_some() || slot.reply.is_some() {
                return Err(EndpointError::Busy);
            }
            slot.request = Some(request);
        }
        self.shared.wake.notify_one();
        Ok(())
    }
}

impl Endpoint for InProcessEndpoint {
    fn name(&self) -> &str {
        &self.name
    }

    fn is_idle(&self) -> bool {
        self.task_in_flight.is_none() && !self.control_in_flight
    }

    fn dispatch(&mut self, req: &TaskRequest) -> Result<(), EndpointError> {
        if !self.is_idle() {
            return Err(EndpointError::Busy);
        }
        self.hand_over(LaneRequest::Task(Box::new(req.clone())))?;
        self.task_in_flight = Some((req.kind, Arc::clone(&req.callable)));
        Ok(())
    }

    fn poll(&mut self) -> Option<Completion> {
        self.task_in_flight.as_ref()?;
        let mut slot = self.shared.slot.lock();
        match slot.reply.take() {
            Some(LaneReply::Task(c)) => {
                self.task_in_flight = None;
                // A timed-out task's failure was recorded already.
                (!std::mem::take(&mut self.abandoned)).then_some(*c)
            }
            other => {
                slot.reply = other;
                None
            }
        }
    }

    fn start_control(&mut self, cmd: ControlCmd) -> Result<(), EndpointError> {
        if !self.is_idle() {
            return Err(EndpointError::Busy);
        }
        self.hand_over(LaneRequest::Control(cmd))?;
        self.control_in_flight = true;
        Ok(())
    }

    fn poll_control(&mut self) -> Option<Result<ControlReply, EndpointError>> {
        if !self.control_in_flight {
            return None;
        }
        let mut slot = self.shared.slot.lock();
        match slot.reply.take() {
            Some(LaneReply::Control(r)) => {
                self.control_in_flight = false;
                Some(r)
            }
            other => {
                slot.reply = other;
                None
            }
        }
    }

    fn health(&self) -> Health {
        match &self.thread {
            Some(t) if t.is_finished() && !self.shutting_down => Health::Dead(Death {
                fate: "lost its thread".to_string(),
                during: String::new(),
                code: ErrorCode::InternalError,
            }),
            _ => Health::Alive,
        }
    }

    fn time_out(&mut self, elapsed: Duration, limit: Duration) -> Option<Failure> {
        let (kind, callable) = self.task_in_flight.as_ref()?;
        if self.abandoned {
            return None;
        }
        self.abandoned = true;
        let code = ErrorCode::SchedulerTimeout;
        Some(Failure {
            kind: FailureKind::Endpoint,
            code: Some(code),
            message: format!(
                "{code}: task timeout: {} callable '{}' ran for {:.2} s, longer than task_timeout {:.2} s; {} stays busy until the callable returns (an in-process lane cannot be killed)",
                kind,
                callable,
                elapsed.as_secs_f64(),
                limit.as_secs_f64(),
                self.name
            ),
        })
    }

    fn kill(&mut self, why: String) {
        tracing::error!(target: "pto::node", "{}: {why}; an in-process lane cannot be killed", self.name);
    }

    fn begin_shutdown(&mut self) {
        self.shutting_down = true;
        self.shared.slot.lock().shutdown = true;
        self.shared.wake.notify_all();
    }

    fn finish_shutdown(&mut self, deadline: Instant) -> ShutdownOutcome {
        let Some(thread) = self.thread.take() else {
            return ShutdownOutcome::Graceful;
        };
        // The lane exits between requests; a kernel or sub function that never returns keeps
        // it busy, and then the thread is left detached at the deadline.
        let mut pause = Duration::from_micros(50);
        while !thread.is_finished() {
            let now = Instant::now();
            if now >= deadline {
                return ShutdownOutcome::Detached;
            }
            std::thread::sleep(pause.min(deadline - now));
            pause = (pause * 2).min(Duration::from_millis(5));
        }
        let _ = thread.join();
        ShutdownOutcome::Graceful
    }
}

fn lane_main(lane: Arc<LaneShared>, work: LaneWork, spin: SpinPolicy) {
    loop {
        let next = wait_until(&lane.wake, spin, None, || {
            let mut slot = lane.slot.lock();
            if let Some(request) = slot.request.take() {
                return Some(Some(request));
            }
            slot.shutdown.then_some(None)
        });
        let Ok(Some(request)) = next else {
            return;
        };
        let reply = match request {
            LaneRequest::Task(req) => LaneReply::Task(Box::new(run_task(&work, &req))),
            LaneRequest::Control(cmd) => LaneReply::Control(run_control(&work, cmd)),
        };
        lane.slot.lock().reply = Some(reply);
        lane.doorbell.notify_one();
    }
}

fn run_control(work: &LaneWork, cmd: ControlCmd) -> Result<ControlReply, EndpointError> {
    let chip = match (&cmd, work) {
        (ControlCmd::Ping(data), _) => return Ok(ControlReply::Echo(data.clone())),
        (_, LaneWork::Chip { chip, .. }) => chip,
        (cmd, LaneWork::Sub { .. }) => return Err(EndpointError::Unsupported(cmd_name(cmd))),
    };
    let device = |e: DeviceMemoryError| EndpointError::Failed(e.to_string());
    match cmd {
        ControlCmd::Ping(_) => unreachable!("answered above"),
        ControlCmd::CommittedDeviceMemory => {
            Ok(ControlReply::Bytes(chip.committed_device_memory()))
        }
        ControlCmd::Malloc { bytes, align } => {
            let id = chip.malloc(bytes, align).map_err(device)?;
            let address = chip.device_buffer(id).map_err(device)?.id().buffer_id;
            Ok(ControlReply::Alloc {
                alloc: id.0,
                address,
            })
        }
        ControlCmd::Free { alloc } => Ok(ControlReply::Bytes(
            chip.free(AllocId(alloc)).map_err(device)?,
        )),
        ControlCmd::CopyTo {
            alloc,
            offset,
            host,
        } => {
            let bytes = host
                .read_raw::<u8>(0, host.bytes())
                .map_err(|e| EndpointError::Failed(e.to_string()))?;
            chip.copy_to_device(AllocId(alloc), offset, &bytes)
                .map_err(device)?;
            Ok(ControlReply::Done)
        }
        ControlCmd::CopyFrom {
            alloc,
            offset,
            host,
        } => {
            let bytes = chip
                .copy_from_device(AllocId(alloc), offset, host.bytes() as u64)
                .map_err(device)?;
            host.write_raw::<u8>(0, &bytes)
                .map_err(|e| EndpointError::Failed(e.to_string()))?;
            Ok(ControlReply::Done)
        }
    }
}

/// The wire name of a control command.
pub(crate) fn cmd_name(cmd: &ControlCmd) -> &'static str {
    match cmd {
        ControlCmd::CommittedDeviceMemory => "COMMITTED_DEVICE_MEMORY",
        ControlCmd::Ping(_) => "PING",
        ControlCmd::Malloc { .. } => "MALLOC",
        ControlCmd::Free { .. } => "FREE",
        ControlCmd::CopyTo { .. } => "COPY_TO",
        ControlCmd::CopyFrom { .. } => "COPY_FROM",
    }
}

/// The task's arguments with every device tensor re-pointed at the chip's own allocation
/// (`ChipWorker::device_buffer`), keeping the view.
fn chip_args(chip: &ChipWorker, req: &TaskRequest) -> Result<Option<TaskArgs>, Failure> {
    if !req.buffers.iter().any(|b| b.device().is_some()) {
        return Ok(None);
    }
    let unavailable = |reason: String| Failure {
        kind: FailureKind::Bind,
        code: Some(ErrorCode::BufferUnavailable),
        message: format!("L2 bind failed: {}: {reason}", ErrorCode::BufferUnavailable),
    };
    let mut args = TaskArgs::new();
    for ((tag, t), b) in req.args.tensors().iter().zip(&req.buffers) {
        let t = match b.device() {
            Some((_, alloc)) => {
                let buffer = chip
                    .device_buffer(AllocId(alloc))
                    .map_err(|e| unavailable(e.to_string()))?;
                Tensor::new(buffer, t.byte_offset(), t.shape(), t.strides(), t.dtype())
                    .map_err(|e| unavailable(e.to_string()))?
            }
            None => t.clone(),
        };
        args = args.tensor(*tag, &t);
    }
    for &s in req.args.scalars() {
        args = args.scalar(s);
    }
    if let Some(label) = req.args.label_str() {
        args = args.label(label);
    }
    Ok(Some(args))
}

fn run_task(work: &LaneWork, req: &TaskRequest) -> Completion {
    let started = Instant::now();
    let outcome = catch_unwind(AssertUnwindSafe(|| match (work, req.kind) {
        (LaneWork::Chip { index, chip }, CallableKind::Chip) => run_chip(*index, chip, req),
        (LaneWork::Sub { index, callables }, CallableKind::Sub) => run_sub(*index, callables, req),
        (_, kind) => Err(Failure {
            kind: FailureKind::Endpoint,
            code: Some(ErrorCode::UnsupportedOp),
            message: format!("a {kind} task cannot run on this worker"),
        }),
    }));
    let result = match outcome {
        Ok(result) => result,
        Err(panic) => Err(Failure {
            kind: FailureKind::Endpoint,
            code: None,
            message: format!("worker thread panicked: {}", panic_message(panic.as_ref())),
        }),
    };
    Completion {
        slot: req.slot,
        member: req.member,
        result,
        exec_time: started.elapsed(),
        inner: None,
    }
}

fn run_chip(
    index: usize,
    chip: &ChipWorker,
    req: &TaskRequest,
) -> Result<Option<pto_chip::ChipRunReport>, Failure> {
    let ctx = RunContext {
        chip: index as u32,
        label: req.label.clone(),
        l3: Some((req.task.run_id, u64::from(req.task.index))),
    };
    let default = CallConfig::default();
    let cfg = req.config.as_ref().unwrap_or(&default);
    let device_args = chip_args(chip, req)?;
    chip.run(
        &req.callable,
        device_args.as_ref().unwrap_or(&req.args),
        cfg,
        &ctx,
    )
    .map(Some)
    .map_err(|e| chip_failure(&e))
}

/// Maps a chip error to a failure with the reply code of NODE_RUNTIME.md §4.8.
pub(crate) fn chip_failure(e: &ChipRunError) -> Failure {
    match e {
        ChipRunError::Run(err) => Failure {
            kind: FailureKind::Task,
            code: Some(err.code),
            message: format!(
                "L2 run failed: {}: {}; hint: {}",
                err.code,
                err.detail,
                err.hint()
            ),
        },
        ChipRunError::Bind(bind) => {
            let code = bind.code();
            Failure {
                kind: FailureKind::Bind,
                code: Some(code),
                message: format!("L2 bind failed: {code}: {bind}"),
            }
        }
    }
}

fn run_sub(
    index: usize,
    callables: &CallableTable,
    req: &TaskRequest,
) -> Result<Option<pto_chip::ChipRunReport>, Failure> {
    let Some(f) = callables.sub_fn(req.callable_id) else {
        return Err(Failure {
            kind: FailureKind::Task,
            code: Some(ErrorCode::UnknownCallable),
            message: format!("no sub callable {:?} on this worker", req.callable),
        });
    };
    let tensors = req
        .args
        .tensors()
        .iter()
        .zip(&req.buffers)
        .map(|((tag, t), b)| (*tag, t.clone(), Arc::clone(b)))
        .collect();
    let mapped = MappedArgs::new(tensors, req.args.scalars().to_vec());
    let ctx = SubContext {
        worker: index,
        task: req.task,
        label: req.label.clone(),
        member: (req.member, req.group_size),
    };
    match catch_unwind(AssertUnwindSafe(|| f(&ctx, &mapped))) {
        Ok(Ok(())) => Ok(None),
        Ok(Err(e)) => Err(Failure {
            kind: FailureKind::Task,
            code: Some(ErrorCode::CallableFailed),
            message: e.to_string(),
        }),
        Err(panic) => Err(Failure {
            kind: FailureKind::Task,
            code: Some(ErrorCode::CallablePanicked),
            message: format!("panicked: {}", panic_message(panic.as_ref())),
        }),
    }
}

/// The text of a panic payload.
pub(crate) fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        return (*s).to_string();
    }
    if let Some(s) = payload.downcast_ref::<String>() {
        return s.clone();
    }
    "non-string panic payload".to_string()
}

impl Drop for InProcessEndpoint {
    /// An endpoint dropped without a shutdown (e.g. a failed `init`) still stops its thread.
    fn drop(&mut self) {
        if !self.shutting_down {
            self.begin_shutdown();
        }
    }
}
