//! The scheduler thread: one per Worker, the only caller of the endpoints (NODE_RUNTIME.md §3).
//!
//! Loop: poll lanes for replies, deaths and finished restarts, and time out tasks past
//! `task_timeout` → under the engine lock, apply completions and deaths, start queued kills and
//! control commands on idle lanes and run one dispatch pass (§3.2) → start restarts of lanes
//! that died and hand the chosen requests to their lanes → if nothing happened, wait on the
//! doorbell (spin for the scheduler's window, then park until the next task deadline or without
//! a timeout; `pto_types::wait`). Everything that creates work notifies the doorbell after
//! publishing it under the engine lock — a READY task at submit or completion, run promotion,
//! a lane reply, a child's death (the monitor), a finished restart, a control request, stop —
//! so the re-check after each wait step sees it and no wake-up is lost. A failed dispatch or a
//! dead lane becomes an `EndpointFailure` completion; this thread never panics on a lane's
//! behalf.
//!
//! Liveness: a lane's death fails its task in flight and, through `EngineState::lane_died`,
//! every unstarted task aimed at it; the lane then restarts in the background and serves again
//! once its new child is ready (`lane_revived`). No wait of this loop depends on a child.

use std::sync::Arc;
use std::time::{Duration, Instant};

use pto_types::wait::SpinPolicy;

use crate::endpoint::{
    Completion, Death, Endpoint, EndpointError, Failure, Health, ShutdownOutcome,
};
use crate::engine::{ControlSlot, Engine, EngineState, Lane, SlotId};
use crate::error::FailureKind;
use crate::shm::doorbell::DoorbellWaiter;

/// Everything the scheduler thread owns.
pub(crate) struct Scheduler {
    pub(crate) engine: Arc<Engine>,
    pub(crate) chips: Vec<Box<dyn Endpoint>>,
    pub(crate) subs: Vec<Box<dyn Endpoint>>,
    pub(crate) spin: SpinPolicy,
    pub(crate) shutdown_grace: Duration,
    pub(crate) task_timeout: Option<Duration>,
}

#[derive(Default)]
struct LaneState {
    in_flight: Option<(SlotId, u32)>,
    /// When the task in flight was handed over.
    since: Option<Instant>,
    /// The task in flight was timed out already.
    timed_out: bool,
    control: Option<Arc<ControlSlot>>,
    dead: bool,
    restarting: bool,
}

/// What one poll of the lanes found.
#[derive(Default)]
struct Polled {
    done: Vec<(Lane, Completion)>,
    died: Vec<(Lane, String, Death)>,
    revived: Vec<(Lane, String)>,
    restart_failed: Vec<(Lane, String)>,
}

impl Polled {
    fn is_empty(&self) -> bool {
        self.done.is_empty()
            && self.died.is_empty()
            && self.revived.is_empty()
            && self.restart_failed.is_empty()
    }
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
        let mut state: Vec<LaneState> = lanes.iter().map(|_| LaneState::default()).collect();
        let engine = Arc::clone(&self.engine);
        let mut waiter = DoorbellWaiter::new(&engine.doorbell, self.spin);
        loop {
            let mut polled = self.poll_lanes(&lanes, &mut state);
            self.time_out_tasks(&lanes, &mut state, &mut polled);
            let mut progress = !polled.is_empty();
            let (dispatches, stop) = {
                let mut st = engine.state.lock();
                self.apply(&mut st, &mut state, polled);
                progress |= self.start_kills_and_controls(&mut st, &mut state);
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
            progress |= !dispatches.is_empty();
            for d in dispatches {
                self.dispatch(d, &mut state);
            }
            if stop {
                break;
            }
            if progress {
                waiter.reset();
                continue;
            }
            waiter.wait(self.next_deadline(&state));
        }
        self.shutdown()
    }

    /// Replies, deaths (a dead lane starts its restart here) and finished restarts.
    fn poll_lanes(&mut self, lanes: &[Lane], state: &mut [LaneState]) -> Polled {
        let mut out = Polled::default();
        for &lane in lanes {
            let i = self.lane_index(lane);
            let ep = self.endpoint(lane);
            if let Some(c) = ep.poll() {
                state[i].in_flight = None;
                out.done.push((lane, c));
            }
            if let Some(r) = ep.poll_control()
                && let Some(slot) = state[i].control.take()
            {
                slot.set(r);
            }
            if state[i].restarting {
                match ep.poll_restart() {
                    Some(Ok(())) => {
                        state[i] = LaneState::default();
                        out.revived.push((lane, ep.name().to_string()));
                    }
                    Some(Err(why)) => {
                        state[i].restarting = ep.restart();
                        out.restart_failed.push((lane, why));
                    }
                    None => {}
                }
            }
            if state[i].dead {
                continue;
            }
            if let Health::Dead(death) = ep.health() {
                state[i].dead = true;
                state[i].restarting = ep.restart();
                out.died.push((lane, ep.name().to_string(), death));
            }
        }
        out
    }

    /// Tasks in flight past `task_timeout`: a child is killed (its death fails the task), an
    /// in-process lane's task fails now.
    fn time_out_tasks(&mut self, lanes: &[Lane], state: &mut [LaneState], out: &mut Polled) {
        let Some(limit) = self.task_timeout else {
            return;
        };
        let now = Instant::now();
        for &lane in lanes {
            let i = self.lane_index(lane);
            let (Some((slot, member)), Some(since)) = (state[i].in_flight, state[i].since) else {
                continue;
            };
            let elapsed = now.saturating_duration_since(since);
            if state[i].timed_out || state[i].dead || elapsed < limit {
                continue;
            }
            state[i].timed_out = true;
            if let Some(failure) = self.endpoint(lane).time_out(elapsed, limit) {
                state[i].in_flight = None;
                out.done.push((lane, failed(slot, member, failure)));
            }
        }
    }

    /// When the scheduler must wake without a doorbell: the earliest task deadline.
    fn next_deadline(&self, state: &[LaneState]) -> Option<Instant> {
        let limit = self.task_timeout?;
        state
            .iter()
            .filter(|l| l.in_flight.is_some() && !l.timed_out && !l.dead)
            .filter_map(|l| l.since)
            .min()
            .map(|t| t + limit)
    }

    /// Applies what `poll_lanes` found to the engine.
    fn apply(&self, st: &mut EngineState, state: &mut [LaneState], polled: Polled) {
        for (lane, c) in polled.done {
            st.complete(lane, c);
        }
        for (lane, name, death) in polled.died {
            let i = self.lane_index(lane);
            if let Some((slot, member)) = state[i].in_flight.take() {
                let message = format!("EndpointFailure: {}", death.describe(&name));
                let f = Failure {
                    kind: FailureKind::Endpoint,
                    code: Some(death.code),
                    message,
                };
                st.complete(lane, failed(slot, member, f));
            }
            if let Some(slot) = state[i].control.take() {
                slot.set(Err(EndpointError::Dead(death.describe(&name))));
            }
            st.lane_died(lane, &name, &death, state[i].restarting);
        }
        for (lane, why) in polled.restart_failed {
            let retrying = state[self.lane_index(lane)].restarting;
            tracing::error!(target: "pto::node", "restart failed: {why}");
            st.lane_restart_failed(lane, &why, retrying);
        }
        for (lane, name) in polled.revived {
            tracing::info!(target: "pto::node", "{name} restarted and ready");
            st.lane_revived(lane, name);
        }
    }

    /// Kills requested by API threads, then control commands on idle lanes (one request in
    /// flight per lane); true if anything started.
    fn start_kills_and_controls(&mut self, st: &mut EngineState, state: &mut [LaneState]) -> bool {
        let mut progress = false;
        for (lane, why) in std::mem::take(&mut st.kills) {
            self.endpoint(lane).kill(why);
            progress = true;
        }
        let mut k = 0;
        while k < st.controls.len() {
            let lane = st.controls[k].lane;
            let i = self.lane_index(lane);
            if st.is_dead(lane) {
                let job = st.controls.remove(k).expect("index in range");
                let name = self.endpoint(lane).name().to_string();
                job.reply.set(Err(EndpointError::Dead(format!(
                    "{name} is unavailable (dead or restarting)"
                ))));
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
        progress
    }

    fn dispatch(&mut self, d: crate::engine::Dispatch, state: &mut [LaneState]) {
        let i = self.lane_index(d.lane);
        state[i].in_flight = Some((d.req.slot, d.req.member));
        state[i].since = Some(Instant::now());
        state[i].timed_out = false;
        let ep = self.endpoint(d.lane);
        if let Err(e) = ep.dispatch(&d.req) {
            let name = ep.name().to_string();
            state[i].in_flight = None;
            let f = Failure {
                kind: FailureKind::Endpoint,
                code: None,
                message: format!("EndpointFailure: dispatch to {name} failed: {e}"),
            };
            self.engine
                .state
                .lock()
                .complete(d.lane, failed(d.req.slot, d.req.member, f));
        }
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

/// A failed completion of member `member` of `slot`.
fn failed(slot: SlotId, member: u32, f: Failure) -> Completion {
    Completion {
        slot,
        member,
        result: Err(f),
        exec_time: Duration::ZERO,
        inner: None,
    }
}
