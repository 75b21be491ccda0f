//! The scheduler thread: one per Worker, the only caller of the endpoints (NODE_RUNTIME.md §3).
//!
//! Loop: poll busy lanes for replies and health → under the engine lock, apply completions,
//! start queued control commands on idle lanes and run one dispatch pass (§3.2) → hand the
//! chosen requests to their lanes → if nothing happened, wait on the doorbell (spin for the
//! scheduler's window, then park without a timeout; `pto_types::wait`). Everything that creates
//! work notifies the doorbell after publishing it under the engine lock — a READY task at submit
//! or completion, run promotion, a lane reply, a control request, stop — so the re-check after
//! each wait step sees it and no wake-up is lost. A failed dispatch or a dead lane becomes an
//! `EndpointFailure` completion; this thread never panics on a lane's behalf.

use std::sync::Arc;
use std::time::{Duration, Instant};

use pto_types::wait::SpinPolicy;

use crate::endpoint::{Completion, Endpoint, EndpointError, Failure, Health, ShutdownOutcome};
use crate::engine::{ControlSlot, Engine, Lane, SlotId};
use crate::error::FailureKind;
use crate::shm::doorbell::DoorbellWaiter;

/// Everything the scheduler thread owns.
pub(crate) struct Scheduler {
    pub(crate) engine: Arc<Engine>,
    pub(crate) chips: Vec<Box<dyn Endpoint>>,
    pub(crate) subs: Vec<Box<dyn Endpoint>>,
    pub(crate) spin: SpinPolicy,
    pub(crate) shutdown_grace: Duration,
}

struct LaneState {
    in_flight: Option<(SlotId, u32)>,
    control: Option<Arc<ControlSlot>>,
    dead: bool,
}

impl Scheduler {
    fn lane_index(&self, lane: Lane) -> usize {
        match lane {
            Lane::Chip(w) => w,
            Lane::Sub(s) => self.chips.len() + s,
        }
    }

    fn endpoint(&mut self, lane: Lane) -> &mut dyn Endpoint {
        match lane {
            Lane::Chip(w) => self.chips[w].as_mut(),
            Lane::Sub(s) => self.subs[s].as_mut(),
        }
    }

    fn lanes(&self) -> Vec<Lane> {
        (0..self.chips.len())
            .map(Lane::Chip)
            .chain((0..self.subs.len()).map(Lane::Sub))
            .collect()
    }

    /// Runs until `close` sets `stop`; returns the number of lane threads left detached and of
    /// child processes killed at shutdown.
    pub(crate) fn run(mut self) -> (usize, usize) {
        let lanes = self.lanes();
        let mut state: Vec<LaneState> = lanes
            .iter()
            .map(|_| LaneState {
                in_flight: None,
                control: None,
                dead: false,
            })
            .collect();
        let engine = Arc::clone(&self.engine);
        let mut waiter = DoorbellWaiter::new(&engine.doorbell, self.spin);
        loop {
            let mut progress = false;
            let mut done: Vec<(Lane, Completion)> = Vec::new();
            let mut died: Vec<(Lane, String)> = Vec::new();
            for &lane in &lanes {
                let i = self.lane_index(lane);
                let ep = self.endpoint(lane);
                if let Some(c) = ep.poll() {
                    state[i].in_flight = None;
                    done.push((lane, c));
                    progress = true;
                }
                if let Some(r) = ep.poll_control() {
                    if let Some(slot) = state[i].control.take() {
                        slot.set(r);
                    }
                    progress = true;
                }
                if state[i].dead {
                    continue;
                }
                if let Health::Dead { cause } = ep.health() {
                    state[i].dead = true;
                    died.push((lane, cause));
                    progress = true;
                }
            }
            let (dispatches, stop) = {
                let mut st = engine.state.lock();
                for (lane, c) in done {
                    st.complete(lane, c);
                }
                for (lane, cause) in died {
                    let i = self.lane_index(lane);
                    if let Some((slot, member)) = state[i].in_flight.take() {
                        st.complete(
                            lane,
                            Completion {
                                slot,
                                member,
                                result: Err(Failure {
                                    kind: FailureKind::Endpoint,
                                    code: None,
                                    message: format!("EndpointFailure: {cause}"),
                                }),
                                exec_time: Duration::ZERO,
                                inner: None,
                            },
                        );
                    }
                    if let Some(slot) = state[i].control.take() {
                        slot.set(Err(EndpointError::Dead(cause.clone())));
                    }
                    st.lane_died(lane, &cause);
                }
                // Control commands run only on idle lanes (one request in flight per lane).
                let mut k = 0;
                while k < st.controls.len() {
                    let lane = st.controls[k].lane;
                    let i = self.lane_index(lane);
                    if st.is_dead(lane) {
                        let job = st.controls.remove(k).expect("index in range");
                        job.reply
                            .set(Err(EndpointError::Dead("the worker is dead".to_string())));
                        continue;
                    }
                    let ep = self.endpoint(lane);
                    if !ep.is_idle() {
                        k += 1;
                        continue;
                    }
                    let job = st.controls.remove(k).expect("index in range");
                    match ep.start_control(job.cmd) {
                        Ok(()) => state[i].control = Some(job.reply),
                        Err(e) => job.reply.set(Err(e)),
                    }
                    progress = true;
                }
                let mut chip_idle: Vec<bool> = (0..self.chips.len())
                    .map(|w| self.chips[w].is_idle() && !state[w].dead)
                    .collect();
                let n = self.chips.len();
                let mut sub_idle: Vec<bool> = (0..self.subs.len())
                    .map(|s| self.subs[s].is_idle() && !state[n + s].dead)
                    .collect();
                let dispatches = st.dispatch_pass(&mut chip_idle, &mut sub_idle);
                (dispatches, st.stop)
            };
            for d in dispatches {
                progress = true;
                let i = self.lane_index(d.lane);
                state[i].in_flight = Some((d.req.slot, d.req.member));
                let ep = self.endpoint(d.lane);
                if let Err(e) = ep.dispatch(&d.req) {
                    let name = ep.name().to_string();
                    state[i].in_flight = None;
                    let c = Completion {
                        slot: d.req.slot,
                        member: d.req.member,
                        result: Err(Failure {
                            kind: FailureKind::Endpoint,
                            code: None,
                            message: format!("EndpointFailure: dispatch to {name} failed: {e}"),
                        }),
                        exec_time: Duration::ZERO,
                        inner: None,
                    };
                    engine.state.lock().complete(d.lane, c);
                }
            }
            if stop {
                break;
            }
            if progress {
                waiter.reset();
                continue;
            }
            waiter.wait(None);
        }
        self.shutdown()
    }

    fn shutdown(mut self) -> (usize, usize) {
        for ep in self.chips.iter_mut().chain(self.subs.iter_mut()) {
            ep.begin_shutdown();
        }
        let deadline = Instant::now() + self.shutdown_grace;
        let outcomes: Vec<ShutdownOutcome> = self
            .chips
            .iter_mut()
            .chain(self.subs.iter_mut())
            .map(|ep| ep.finish_shutdown(deadline))
            .collect();
        let count = |o: ShutdownOutcome| outcomes.iter().filter(|x| **x == o).count();
        (
            count(ShutdownOutcome::Detached),
            count(ShutdownOutcome::Killed),
        )
    }
}
