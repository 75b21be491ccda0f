//! The scheduler's lane to a remote worker (an `Endpoint`, NODE_RUNTIME.md §4.1, §6.2).
//!
//! Up to the lane depth of tasks in flight, each its own `Submit` call on the session's HTTP/2
//! connection: `dispatch` encodes the task (its `CallConfig` record whole, the args blob with
//! every tensor in space = remote) and spawns the call on the client runtime; outcomes come
//! back on a channel, ring the scheduler's doorbell, and are handed on in dispatch order (the
//! server may finish independent runs in another order; dependent tasks are never in flight
//! together, the L4 engine dispatches a task only after its producers completed).
//! A call that fails in transport, or the end of the session's `Open` stream, makes the lane
//! dead: `health` reports it (code `WORKER_LOST`, naming the address and the task in flight),
//! and the scheduler fails the task and everything aimed at the lane. Nothing here blocks.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::mpsc::{Receiver, Sender, channel};
use std::time::{Duration, Instant};

use pto_types::ErrorCode;
use pto_types::node_wire::args_blob::{TensorLocation, TensorSpace, encode_args};
use pto_types::node_wire::run_report::WireRunReport;
use pto_types::wire::call_config_record::encode_call_config;

use super::client::{describe, is_transport};
use super::proto::{Completion as WireCompletion, SubmitRequest};
use super::{Connection, runtime};
use crate::endpoint::{
    Completion, ControlCmd, ControlReply, Death, Endpoint, EndpointError, Failure, Health,
    ShutdownOutcome, TaskRequest,
};
use crate::engine::SlotId;
use crate::error::FailureKind;
use crate::shm::doorbell::Doorbell;

/// The task on the wire.
struct InFlight {
    seq: u64,
    slot: SlotId,
    member: u32,
    /// ` while running task 3 ('l3') of run 2`.
    during: String,
    started: Instant,
    /// Failed by `task_timeout`: the late reply is dropped.
    abandoned: bool,
}

pub(crate) struct RemoteEndpoint {
    name: String,
    index: u32,
    conn: Arc<Connection>,
    doorbell: Arc<Doorbell>,
    /// Oldest first.
    in_flight: VecDeque<InFlight>,
    /// Outcomes that arrived before an older task's.
    arrived: HashMap<u64, Result<WireCompletion, tonic::Status>>,
    depth: usize,
    next_seq: u64,
    tx: Sender<(u64, Result<WireCompletion, tonic::Status>)>,
    rx: Receiver<(u64, Result<WireCompletion, tonic::Status>)>,
    /// Set by `kill`: the lane is dead for this reason.
    killed: Option<String>,
}

impl RemoteEndpoint {
    /// The lane of remote worker `index` over an open session.
    pub(crate) fn new(
        index: usize,
        conn: Arc<Connection>,
        doorbell: Arc<Doorbell>,
        depth: usize,
    ) -> Self {
        let (tx, rx) = channel();
        RemoteEndpoint {
            name: lane_name(index, &conn.remote.to_string()),
            index: index as u32,
            conn,
            doorbell,
            in_flight: VecDeque::new(),
            arrived: HashMap::new(),
            depth: depth.max(1),
            next_seq: 1,
            tx,
            rx,
            killed: None,
        }
    }

    /// The request of `req`: its config record and its arguments over this session's buffers.
    fn encode(&self, req: &TaskRequest, seq: u64) -> Result<SubmitRequest, String> {
        let config = req.config.clone().unwrap_or_default();
        let record = encode_call_config(&config).map_err(|e| e.to_string())?;
        let mut bad = None;
        let args = encode_args(&req.args, |i, _| {
            match req.buffers.get(i).and_then(|b| b.remote()) {
                Some((worker, handle)) if worker == self.index => TensorLocation {
                    space: TensorSpace::Remote,
                    device_worker: None,
                    segment: handle,
                    segment_offset: 0,
                },
                _ => {
                    bad.get_or_insert(i);
                    TensorLocation {
                        space: TensorSpace::Host,
                        device_worker: None,
                        segment: 0,
                        segment_offset: 0,
                    }
                }
            }
        });
        if let Some(i) = bad {
            return Err(format!(
                "tensor {i} is not a buffer of {} (checked at submit; this is a bug)",
                self.name
            ));
        }
        Ok(SubmitRequest {
            session: self.conn.session,
            seq,
            run_id: req.task.run_id,
            task_id: u64::from(req.task.index),
            callable_name: req.callable.to_string(),
            label: req.label.clone().unwrap_or_default(),
            call_config: record.to_vec(),
            task_args: args,
        })
    }

    fn lost(&self) -> Option<String> {
        self.killed.clone().or_else(|| self.conn.lost())
    }

    /// The completion the scheduler applies for the task's reply.
    fn completion(t: &InFlight, reply: WireCompletion) -> Completion {
        let inner = (!reply.report.is_empty())
            .then(|| WireRunReport::decode(&reply.report).ok())
            .flatten()
            .and_then(|w| crate::report::wire::run_from_wire(&w).ok())
            .map(Box::new);
        let result = match reply.error_code {
            0 => Ok(None),
            code => Err(Failure {
                kind: FailureKind::Task,
                code: ErrorCode::from_code(code),
                message: reply.message,
            }),
        };
        Completion {
            slot: t.slot,
            member: t.member,
            result,
            exec_time: Duration::from_nanos(reply.exec_nanos),
            inner,
        }
    }
}

/// `remote[0] (127.0.0.1:7070)`.
pub(crate) fn lane_name(index: usize, at: &str) -> String {
    format!("remote[{index}] ({at})")
}

impl Endpoint for RemoteEndpoint {
    fn name(&self) -> &str {
        &self.name
    }

    fn lost_code(&self) -> ErrorCode {
        ErrorCode::WorkerLost
    }

    fn is_idle(&self) -> bool {
        self.in_flight.is_empty()
    }

    fn room(&self) -> usize {
        match self.lost() {
            Some(_) => 0,
            None => self.depth.saturating_sub(self.in_flight.len()),
        }
    }

    fn dispatch(&mut self, req: TaskRequest) -> Result<(), EndpointError> {
        if let Some(why) = self.lost() {
            return Err(EndpointError::Dead(why));
        }
        if self.in_flight.len() >= self.depth {
            return Err(EndpointError::Busy);
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        let wire = self.encode(&req, seq).map_err(EndpointError::Failed)?;
        let rt = runtime().map_err(EndpointError::Failed)?;
        let call = self.conn.submit(wire);
        let (tx, doorbell) = (self.tx.clone(), Arc::clone(&self.doorbell));
        rt.spawn(async move {
            let _ = tx.send((seq, call.await));
            doorbell.notify_one();
        });
        let label = req
            .label
            .as_deref()
            .map_or_else(String::new, |l| format!(" ('{l}')"));
        self.in_flight.push_back(InFlight {
            seq,
            slot: req.slot,
            member: req.member,
            during: format!(
                " while running task {}{label} of run {}",
                req.task.index, req.task.run_id
            ),
            started: Instant::now(),
            abandoned: false,
        });
        Ok(())
    }

    fn poll(&mut self, out: &mut Vec<Completion>) {
        while let Ok((seq, result)) = self.rx.try_recv() {
            self.arrived.insert(seq, result);
        }
        while let Some(front) = self.in_flight.front() {
            let Some(result) = self.arrived.remove(&front.seq) else {
                break;
            };
            if let Err(status) = &result
                && is_transport(status)
            {
                // The death (health) fails the tasks in flight and names the lane.
                self.conn.mark_lost(describe(status));
                return;
            }
            let Some(t) = self.in_flight.pop_front() else {
                break;
            };
            match result {
                Ok(reply) if !t.abandoned => out.push(Self::completion(&t, reply)),
                Ok(_) => {}
                Err(status) if !t.abandoned => out.push(Completion {
                    slot: t.slot,
                    member: t.member,
                    result: Err(Failure {
                        kind: FailureKind::Endpoint,
                        code: Some(ErrorCode::WorkerLost),
                        message: format!("EndpointFailure: {}: {}", self.name, describe(&status)),
                    }),
                    exec_time: t.started.elapsed(),
                    inner: None,
                }),
                Err(_) => {}
            }
        }
    }

    fn start_control(&mut self, _cmd: ControlCmd) -> Result<(), EndpointError> {
        Err(EndpointError::Unsupported(
            "chip control (device memory, copies, ping) on a remote worker",
        ))
    }

    fn poll_control(&mut self) -> Option<Result<ControlReply, EndpointError>> {
        None
    }

    fn health(&self) -> Health {
        let Some(why) = self.lost() else {
            return Health::Alive;
        };
        Health::Dead(Death {
            fate: format!("lost: {why}"),
            during: self
                .in_flight
                .front()
                .filter(|t| !t.abandoned)
                .map_or_else(String::new, |t| t.during.clone()),
            code: ErrorCode::WorkerLost,
        })
    }

    fn time_out(&mut self, elapsed: Duration, limit: Duration) -> Option<Failure> {
        let t = self.in_flight.front_mut()?;
        t.abandoned = true;
        Some(Failure {
            kind: FailureKind::Endpoint,
            code: Some(ErrorCode::TaskTimeout),
            message: format!(
                "TaskTimeout: ran {:.2} s, longer than task_timeout {:.2} s; the remote run goes on, its reply will be discarded",
                elapsed.as_secs_f64(),
                limit.as_secs_f64()
            ),
        })
    }

    fn kill(&mut self, why: String) {
        self.killed.get_or_insert(why);
    }

    fn begin_shutdown(&mut self) {}

    fn finish_shutdown(&mut self, _deadline: Instant) -> ShutdownOutcome {
        self.conn.close();
        ShutdownOutcome::Graceful
    }
}
