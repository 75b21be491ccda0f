//! The scheduler (NODE_RUNTIME.md §3): the endpoints and what is known of each lane, behind one
//! mutex ([`Pump`]); whoever holds it is the only caller of the endpoints. The scheduler
//! thread (one per Worker) makes passes; so does an in-process lane that just finished a task,
//! and a thread waiting for its run (`RunHandle`), whenever the mutex is free — a try-lock, so
//! nobody waits for another's pass: every producer of work rings the doorbell, and the
//! scheduler thread, which re-checks after every ring, is the backstop.
//!
//! A pass: poll lanes for replies, deaths and finished restarts, and time out tasks past
//! `task_timeout` → under the engine lock, apply completions and deaths, start queued kills and
//! control commands on idle lanes and run one dispatch pass (§3.2) → start restarts of lanes
//! that died and hand the chosen requests to their lanes. The scheduler thread, when nothing
//! happened, waits on the doorbell (spin for the scheduler's window, then park until the next task deadline or without
//! a timeout; `pto_types::wait`). Everything that creates work notifies the doorbell after
//! publishing it under the engine lock — a READY task at submit or completion, run promotion,
//! a lane reply, a child's death (the monitor), a finished restart, a control request, stop —
//! so the re-check after each wait step sees it and no wake-up is lost. A failed dispatch or a
//! dead lane becomes an `EndpointFailure` completion; this thread never panics on a lane's
//! behalf.
//!
//! Pipelining: each lane holds up to its depth of tasks (`Endpoint::room`), so the dispatch
//! pass tops every lane up and a busy lane never waits for this thread; replies are drained
//! in batches, all of them applied in one engine lock hold.
//!
//! Liveness: a lane's death fails its task in flight (the oldest one: only it can have
//! started) and, through `EngineState::lane_died`, every unstarted task aimed at it — the
//! tasks queued on a dead chip fail "before the task could start", the sub tasks queued on a
//! dead sub lane go back to the sub queue (they were aimed at no lane in particular); the
//! lane then restarts in the background and serves again once its new child is ready
//! (`lane_revived`). No wait of this loop depends on a child.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use pto_types::wait::SpinPolicy;

use crate::endpoint::{
    Completion, Death, Endpoint, EndpointError, Failure, Health, ShutdownOutcome,
};
use crate::engine::{ControlSlot, Engine, EngineState, Lane, LaneRoom, SlotId};
use crate::error::FailureKind;
use crate::shm::doorbell::DoorbellWaiter;

/// Idle steps after which the scheduler makes a full pass although the doorbell did not ring.
/// Every producer of work rings, so this pass is a backstop, not the wake-up path; what it must
/// not do is take the engine lock often while the scheduler spins, since the submitting thread
/// needs that lock. A spin step costs ~0.1 µs (a yield ~1 µs), so 256 steps make such a pass at
/// most about once per default spin window (`DEFAULT_SPIN`, 50 µs) rather than on every step.
const IDLE_PASS: u32 = 256;

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
    /// Tasks handed to the lane whose reply has not arrived, oldest first.
    in_flight: VecDeque<(SlotId, u32)>,
    /// When the oldest task in flight started, as far as this thread can tell: when it was
    /// handed over or when the reply before it arrived, whichever is later.
    since: Option<Instant>,
    /// The oldest task in flight was timed out already.
    timed_out: bool,
    control: Option<Arc<ControlSlot>>,
    dead: bool,
    restarting: bool,
}

/// What one poll of the lanes found.
#[derive(Default)]
struct Polled {
    done: Vec<(Lane, Completion)>,
    /// Tasks queued on a lane that cannot run them any more, to route again.
    returned: Vec<(SlotId, u32)>,
    died: Vec<(Lane, String, Death)>,
    revived: Vec<(Lane, String)>,
    restart_failed: Vec<(Lane, String)>,
}

impl Polled {
    fn is_empty(&self) -> bool {
        self.done.is_empty()
            && self.returned.is_empty()
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

    /// Starts the pump: the scheduler behind its mutex, with a fresh state per lane.
    pub(crate) fn into_pump(self) -> Arc<Pump> {
        let lanes = self.lanes();
        let state = lanes.iter().map(|_| LaneState::default()).collect();
        Arc::new(Pump {
            engine: Arc::clone(&self.engine),
            held: Mutex::new(Held {
                sched: self,
                lanes,
                state,
                replies: Vec::new(),
                chip_room: Vec::new(),
                sub_room: Vec::new(),
            }),
        })
    }
    /// Replies, deaths (a dead lane starts its restart here) and finished restarts.
    fn poll_lanes(
        &mut self,
        lanes: &[Lane],
        state: &mut [LaneState],
        replies: &mut Vec<Completion>,
    ) -> Polled {
        let mut out = Polled::default();
        for &lane in lanes {
            let i = self.lane_index(lane);
            let ep = self.endpoint(lane);
            ep.poll(replies);
            if !replies.is_empty() {
                let now = Instant::now();
                for c in replies.drain(..) {
                    state[i].in_flight.pop_front();
                    out.done.push((lane, c));
                }
                state[i].since = Some(now);
                state[i].timed_out = false;
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
            let (Some(&(slot, member)), Some(since)) = (state[i].in_flight.front(), state[i].since)
            else {
                continue;
            };
            let elapsed = now.saturating_duration_since(since);
            if state[i].timed_out || state[i].dead || elapsed < limit {
                continue;
            }
            state[i].timed_out = true;
            let ep = self.endpoint(lane);
            if let Some(failure) = ep.time_out(elapsed, limit) {
                // The lane stays busy with the callable: what is queued behind it goes back.
                let back = ep.take_back();
                let keep = state[i].in_flight.len().saturating_sub(back.len());
                state[i].in_flight.truncate(keep);
                state[i].in_flight.pop_front();
                out.done.push((lane, failed(slot, member, failure)));
                out.returned.extend(back);
            }
        }
    }

    /// When the scheduler must wake without a doorbell: the earliest task deadline.
    fn next_deadline(&self, state: &[LaneState]) -> Option<Instant> {
        let limit = self.task_timeout?;
        state
            .iter()
            .filter(|l| !l.in_flight.is_empty() && !l.timed_out && !l.dead)
            .filter_map(|l| l.since)
            .min()
            .map(|t| t + limit)
    }

    /// Applies what `poll_lanes` found to the engine.
    fn apply(&self, st: &mut EngineState, state: &mut [LaneState], polled: Polled) {
        for (lane, c) in polled.done {
            st.complete(lane, c);
        }
        for (slot, member) in polled.returned.into_iter().rev() {
            st.requeue(slot, member);
        }
        for (lane, name, death) in polled.died {
            let i = self.lane_index(lane);
            let mut in_flight = std::mem::take(&mut state[i].in_flight);
            if let Some((slot, member)) = in_flight.pop_front() {
                let message = format!("EndpointFailure: {}", death.describe(&name));
                let f = Failure {
                    kind: FailureKind::Endpoint,
                    code: Some(death.code),
                    message,
                };
                st.complete(lane, failed(slot, member, f));
            }
            // Queued behind it, never started: sub tasks run elsewhere, chip tasks fail.
            for (slot, member) in in_flight.into_iter().rev() {
                match lane {
                    Lane::Sub(_) => st.requeue(slot, member),
                    Lane::Chip(_) => st.fail_unstarted(slot, &name, &death),
                }
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
        let (slot, member) = (d.req.slot, d.req.member);
        let ep = self.endpoint(d.lane);
        if let Err(e) = ep.dispatch(d.req) {
            let name = ep.name().to_string();
            // A dead lane fails the task with the code of a lost worker, as if it had been in
            // flight when the worker died (the message names the worker and why).
            let code = matches!(e, EndpointError::Dead(_)).then(|| ep.lost_code());
            let f = Failure {
                kind: FailureKind::Endpoint,
                code,
                message: format!("EndpointFailure: dispatch to {name} failed: {e}"),
            };
            self.engine
                .lock_state()
                .complete(d.lane, failed(slot, member, f));
            return;
        }
        if state[i].in_flight.is_empty() {
            state[i].since = Some(Instant::now());
            state[i].timed_out = false;
        }
        state[i].in_flight.push_back((slot, member));
    }

    fn shutdown(&mut self) -> (usize, usize) {
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

/// The scheduler's state behind a mutex: whoever holds it is the only caller of the
/// endpoints. The scheduler thread holds it for each of its passes; an in-process lane thread
/// that just finished a task takes it too if it is free ([`Pump::try_pass`]), so a busy lane
/// completes its task and gets its next one without waiting for the scheduler thread (one
/// thread hop less per task; on 2 cores the hop, not the work, was the cost).
pub(crate) struct Pump {
    engine: Arc<Engine>,
    held: Mutex<Held>,
}

struct Held {
    sched: Scheduler,
    lanes: Vec<Lane>,
    state: Vec<LaneState>,
    /// Reused by every pass (no allocation per pass).
    replies: Vec<Completion>,
    chip_room: Vec<LaneRoom>,
    sub_room: Vec<LaneRoom>,
}

/// Where in-process lanes find the pump once the scheduler starts (it is made after them).
pub(crate) type PumpSlot = Arc<std::sync::OnceLock<std::sync::Weak<Pump>>>;

/// What one pass did.
struct Pass {
    progress: bool,
    stop: bool,
}

impl Pump {
    /// One pass if no other thread is making one; false if one is (the caller then rings the
    /// doorbell, and the thread making the pass or the scheduler thread, which re-checks after
    /// every ring, takes the work).
    pub(crate) fn try_pass(&self) -> bool {
        match self.held.try_lock() {
            Some(mut held) => {
                let pass = held.pass();
                // The scheduler thread keeps the task deadlines: let it see new ones.
                if pass.progress && held.sched.task_timeout.is_some() {
                    self.engine.doorbell.notify_one();
                }
                true
            }
            None => false,
        }
    }

    /// The scheduler thread: a pass whenever the doorbell moved since the last one (every
    /// producer of work rings it after publishing; the epoch is read before the pass, so a
    /// ring during a pass makes the next pass happen), when the earliest task deadline is
    /// due, and every IDLE_PASS idle steps; an idle spin touches no lock the submitting
    /// thread or the lanes need. Runs until `close`
    /// sets `stop`; returns the number of lane threads left detached and of child processes
    /// killed at shutdown.
    pub(crate) fn run(self: Arc<Self>) -> (usize, usize) {
        let engine = Arc::clone(&self.engine);
        let spin = self.held.lock().sched.spin;
        let mut waiter = DoorbellWaiter::new(&engine.doorbell, spin);
        let mut seen = None;
        let mut idle_steps = 0u32;
        let mut deadline = None;
        loop {
            let epoch = engine.doorbell.epoch();
            let due = deadline.is_some_and(|d| Instant::now() >= d);
            if seen != Some(epoch) || idle_steps >= IDLE_PASS || due {
                // A lane making a pass holds the lock for a moment: retry without parking,
                // as its pass may have started before the ring this thread saw.
                let Some(mut held) = self.held.try_lock() else {
                    std::thread::yield_now();
                    continue;
                };
                seen = Some(epoch);
                idle_steps = 0;
                let pass = held.pass();
                if pass.stop {
                    return held.sched.shutdown();
                }
                deadline = held.sched.next_deadline(&held.state);
                drop(held);
                if pass.progress {
                    waiter.reset();
                    continue;
                }
            }
            idle_steps += 1;
            waiter.wait(deadline);
        }
    }
}

impl Held {
    /// Poll lanes, time out tasks, apply, start kills and controls, dispatch (§3.2).
    fn pass(&mut self) -> Pass {
        let Held {
            sched,
            lanes,
            state,
            replies,
            chip_room,
            sub_room,
        } = self;
        let mut polled = sched.poll_lanes(lanes, state, replies);
        sched.time_out_tasks(lanes, state, &mut polled);
        let mut progress = !polled.is_empty();
        let engine = Arc::clone(&sched.engine);
        let (dispatches, stop) = {
            let mut st = engine.lock_state();
            sched.apply(&mut st, state, polled);
            progress |= sched.start_kills_and_controls(&mut st, state);
            let n = sched.chips.len();
            let room = |ep: &dyn Endpoint, dead: bool| LaneRoom {
                room: if dead { 0 } else { ep.room() },
                idle: !dead && ep.is_idle() && ep.room() > 0,
            };
            chip_room.clear();
            chip_room.extend((0..n).map(|w| room(sched.chips[w].as_ref(), state[w].dead)));
            sub_room.clear();
            sub_room.extend(
                (0..sched.subs.len()).map(|s| room(sched.subs[s].as_ref(), state[n + s].dead)),
            );
            let dispatches = st.dispatch_pass(chip_room, sub_room);
            (dispatches, st.stop)
        };
        progress |= !dispatches.is_empty();
        for d in dispatches {
            sched.dispatch(d, state);
        }
        Pass { progress, stop }
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
