//! In-process endpoints: each chip and sub worker is one thread of this process
//! (NODE_RUNTIME.md §4.1, `InProcess{Chip,Sub}`).
//!
//! Hand-off protocol, the mailbox's ring of frames as a queue of Rust values:
//!
//! 1. The scheduler (the only caller of the [`Endpoint`] methods, whichever thread makes the
//!    pass) pushes a request onto the lane's
//!    queue under its mutex (at most the lane depth of tasks, or one control command on an idle
//!    lane) and notifies the lane's event count (`wake`).
//! 2. The lane thread waits on `wake` (spin, then park; `pto_types::wait`) until the queue
//!    holds a request or `shutdown`, pops the oldest — from then on it has *started* — runs it
//!    without holding the mutex, appends the reply and notifies the scheduler's doorbell, then
//!    takes the next request at once if one is queued.
//! 3. The scheduler's `poll` drains every reply in one lock hold.
//!
//! Every change to the queue happens under its mutex before the matching notify, so by the
//! event-count protocol no wake-up is lost. A request still in the queue has not started, so
//! after a timeout the queued tasks can be handed back ([`Endpoint::take_back`]). A chip lane
//! owns its `ChipWorker` (created at `init` from the Worker's environment source, so the
//! snapshot is taken then); a bind failure is an ordinary task failure and leaves the lane
//! usable (RING_CONFIG.md T88).

use std::collections::VecDeque;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use pto_chip::memory::{AllocId, DeviceMemoryError};
use pto_chip::{ChipRunError, ChipWorker, RunContext};
use pto_types::wait::{EventCount, SpinPolicy, wait_until};
use pto_types::{CallConfig, ErrorCode, TaskArgs, Tensor};

use super::{
    Completion, ControlCmd, ControlReply, Death, Endpoint, EndpointError, Failure, Health,
    ShutdownOutcome, TaskRequest, lane_capacity,
};
use crate::callable::{CallableKind, CallableTable};
use crate::engine::SlotId;
use crate::error::FailureKind;
use crate::scheduler::PumpSlot;
use crate::shm::doorbell::Doorbell;
use crate::sub::{MappedArgs, SubContext};

// Unboxed on purpose: a box made by one thread and freed by the other costs an allocator
// arena lock each way; control variants are rare.
#[allow(clippy::large_enum_variant)]
enum LaneRequest {
    Task(TaskRequest),
    Control(ControlCmd),
}

/// A reply carries its request back: the request's heap parts (args, label, buffer list)
/// were allocated by the scheduler thread and are freed there too, so the two threads do
/// not contend on each other's allocator arenas (measured: glibc arena locks were the
/// largest cost of a no-op task).
#[allow(clippy::large_enum_variant)]
enum LaneReply {
    Task(Completion, TaskRequest),
    Control(Result<ControlReply, EndpointError>),
}

#[derive(Default)]
struct Queue {
    requests: VecDeque<LaneRequest>,
    replies: Vec<LaneReply>,
    shutdown: bool,
}

struct LaneShared {
    queue: Mutex<Queue>,
    /// Requests queued plus 1 once shutdown is asked: the lane's spin reads this word and
    /// takes the mutex only when there is something to take, so it does not contend with
    /// the scheduler's hand-overs (changed under the mutex, read without it).
    pending: AtomicUsize,
    /// Replies queued (same rule): the scheduler's poll skips the mutex while it is 0.
    replies: AtomicUsize,
    /// The lane waits here for a request.
    wake: EventCount,
    /// The scheduler's doorbell, notified with a reply this lane could not apply itself.
    doorbell: Arc<Doorbell>,
    /// The scheduler's pump: after a task the lane makes a pass itself when none is running.
    pump: PumpSlot,
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

/// A task handed to the lane whose reply the scheduler has not taken yet.
struct Sent {
    slot: SlotId,
    member: u32,
    kind: CallableKind,
    callable: Arc<str>,
}

/// The scheduler's side of one in-process lane.
pub(crate) struct InProcessEndpoint {
    name: String,
    shared: Arc<LaneShared>,
    thread: Option<JoinHandle<()>>,
    depth: usize,
    /// A sub lane (its queue shrinks for long tasks, `lane_capacity`).
    sub: bool,
    /// How long the latest task it finished ran.
    last_exec: Duration,
    /// Tasks in flight, oldest first.
    sent: VecDeque<Sent>,
    /// Replies taken from the queue but not yet returned by `poll` / `poll_control`.
    done: Vec<Completion>,
    /// The reply vector swapped into the queue at each drain (no allocation per drain).
    spare: Vec<LaneReply>,
    control_reply: Option<Result<ControlReply, EndpointError>>,
    /// The oldest task in flight was failed for its timeout: its late reply is discarded.
    abandoned: bool,
    /// A control command in flight.
    control_in_flight: bool,
    shutting_down: bool,
}

impl InProcessEndpoint {
    /// Starts the lane thread; it holds up to `depth` tasks.
    pub(crate) fn start(
        name: String,
        work: LaneWork,
        doorbell: Arc<Doorbell>,
        spin: SpinPolicy,
        depth: usize,
        pump: PumpSlot,
    ) -> std::io::Result<InProcessEndpoint> {
        let depth = depth.max(1);
        let shared = Arc::new(LaneShared {
            queue: Mutex::new(Queue {
                requests: VecDeque::with_capacity(depth),
                replies: Vec::with_capacity(depth),
                shutdown: false,
            }),
            pending: AtomicUsize::new(0),
            replies: AtomicUsize::new(0),
            wake: EventCount::new(),
            doorbell,
            pump,
        });
        let lane = Arc::clone(&shared);
        let sub = matches!(work, LaneWork::Sub { .. });
        let thread = std::thread::Builder::new()
            .name(format!("pto-{name}"))
            .spawn(move || lane_main(lane, work, spin))?;
        Ok(InProcessEndpoint {
            name,
            shared,
            thread: Some(thread),
            depth,
            sub,
            last_exec: Duration::ZERO,
            sent: VecDeque::with_capacity(depth),
            done: Vec::with_capacity(depth),
            spare: Vec::with_capacity(depth),
            control_reply: None,
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
            let mut q = self.shared.queue.lock();
            q.requests.push_back(request);
            self.shared.pending.fetch_add(1, Ordering::Release);
        }
        self.shared.wake.notify_one();
        Ok(())
    }

    /// Moves every reply out of the shared queue, in one lock hold.
    fn drain(&mut self) {
        if self.shared.replies.load(Ordering::Acquire) == 0 {
            return;
        }
        let mut replies = std::mem::take(&mut self.spare);
        {
            let mut q = self.shared.queue.lock();
            std::mem::swap(&mut replies, &mut q.replies);
            self.shared.replies.store(0, Ordering::Release);
        }
        for r in replies.drain(..) {
            match r {
                LaneReply::Task(c, request) => {
                    drop(request);
                    self.sent.pop_front();
                    self.last_exec = c.exec_time;
                    // A timed-out task's failure was recorded already.
                    if !std::mem::take(&mut self.abandoned) {
                        self.done.push(c);
                    }
                }
                LaneReply::Control(r) => {
                    self.control_in_flight = false;
                    self.control_reply = Some(r);
                }
            }
        }
        self.spare = replies;
    }
}

impl Endpoint for InProcessEndpoint {
    fn name(&self) -> &str {
        &self.name
    }

    fn is_idle(&self) -> bool {
        self.sent.is_empty() && !self.control_in_flight
    }

    fn room(&self) -> usize {
        if self.control_in_flight || self.abandoned {
            0
        } else {
            lane_capacity(self.depth, self.sub, self.last_exec).saturating_sub(self.sent.len())
        }
    }

    fn dispatch(&mut self, req: TaskRequest) -> Result<(), EndpointError> {
        if self.room() == 0 {
            return Err(EndpointError::Busy);
        }
        let sent = Sent {
            slot: req.slot,
            member: req.member,
            kind: req.kind,
            callable: Arc::clone(&req.callable),
        };
        self.hand_over(LaneRequest::Task(req))?;
        self.sent.push_back(sent);
        Ok(())
    }

    fn poll(&mut self, out: &mut Vec<Completion>) {
        if !self.sent.is_empty() {
            self.drain();
        }
        out.append(&mut self.done);
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
        if self.control_in_flight {
            self.drain();
        }
        self.control_reply.take()
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
        if self.abandoned {
            return None;
        }
        let oldest = self.sent.front()?;
        self.abandoned = true;
        let code = ErrorCode::SchedulerTimeout;
        Some(Failure {
            kind: FailureKind::Endpoint,
            code: Some(code),
            message: format!(
                "{code}: task timeout: {} callable '{}' ran for {:.2} s, longer than task_timeout {:.2} s; {} stays busy until the callable returns (an in-process lane cannot be killed)",
                oldest.kind,
                oldest.callable,
                elapsed.as_secs_f64(),
                limit.as_secs_f64(),
                self.name
            ),
        })
    }

    fn take_back(&mut self) -> Vec<(SlotId, u32)> {
        let queued = {
            let mut q = self.shared.queue.lock();
            let queued = std::mem::take(&mut q.requests);
            self.shared
                .pending
                .fetch_sub(queued.len(), Ordering::Release);
            queued
        };
        let n = queued
            .iter()
            .filter(|r| matches!(r, LaneRequest::Task(_)))
            .count();
        let keep = self.sent.len().saturating_sub(n);
        self.sent
            .drain(keep..)
            .map(|s| (s.slot, s.member))
            .collect()
    }

    fn kill(&mut self, why: String) {
        tracing::error!(target: "pto::node", "{}: {why}; an in-process lane cannot be killed", self.name);
    }

    fn begin_shutdown(&mut self) {
        self.shutting_down = true;
        {
            let mut q = self.shared.queue.lock();
            q.shutdown = true;
            self.shared.pending.fetch_add(1, Ordering::Release);
        }
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

/// A task shorter than this may leave its reply for a later pass while more tasks wait in the
/// lane's queue (at most [`MAX_DEFERRED`] in a row): one pass then applies a batch. Longer
/// tasks pass at once, so what their completion makes ready elsewhere starts without delay.
const SHORT_TASK: Duration = Duration::from_micros(5);
/// Replies one lane may leave unapplied while it runs short queued tasks.
const MAX_DEFERRED: u32 = 16;

fn lane_main(lane: Arc<LaneShared>, work: LaneWork, spin: SpinPolicy) {
    let mut deferred = 0u32;
    loop {
        let next = wait_until(&lane.wake, spin, None, || {
            if lane.pending.load(Ordering::Acquire) == 0 {
                return None;
            }
            let mut q = lane.queue.lock();
            if let Some(request) = q.requests.pop_front() {
                lane.pending.fetch_sub(1, Ordering::Release);
                return Some(Some(request));
            }
            q.shutdown.then_some(None)
        });
        let Ok(Some(request)) = next else {
            return;
        };
        let (reply, short) = match request {
            LaneRequest::Task(req) => {
                let c = run_task(&work, &req);
                let short = c.exec_time < SHORT_TASK;
                (LaneReply::Task(c, req), short)
            }
            LaneRequest::Control(cmd) => (LaneReply::Control(run_control(&work, cmd)), false),
        };
        {
            let mut q = lane.queue.lock();
            q.replies.push(reply);
            lane.replies.fetch_add(1, Ordering::Release);
        }
        if short && deferred < MAX_DEFERRED && lane.pending.load(Ordering::Acquire) > 0 {
            deferred += 1;
            continue;
        }
        deferred = 0;
        // Apply the reply and refill the queues now if no pass is running; else whoever makes
        // passes sees the ring.
        let passed = lane
            .pump
            .get()
            .and_then(std::sync::Weak::upgrade)
            .is_some_and(|p| p.try_pass());
        if !passed {
            lane.doorbell.notify_one();
        }
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
    if req.cancelled.load(Ordering::Acquire) {
        // Queued here before its run was cancelled: skipped like the run's unstarted tasks.
        return Completion {
            slot: req.slot,
            member: req.member,
            result: Err(Failure {
                kind: FailureKind::Skipped,
                code: None,
                message: "cancelled: the run was cancelled while the task was queued".into(),
            }),
            exec_time: Duration::ZERO,
            inner: None,
        };
    }
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
) -> Result<Option<Box<pto_chip::ChipRunReport>>, Failure> {
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
    .map(|r| Some(Box::new(r)))
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
) -> Result<Option<Box<pto_chip::ChipRunReport>>, Failure> {
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
