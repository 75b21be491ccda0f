//! [`Mailbox`]: one child's 64 KiB frame (NODE_RUNTIME.md §4.5, §4.6), both sides' views.
//!
//! The byte layout and the state values are defined once in `pto_types::node_wire::mailbox`;
//! this module owns the protocol. Its rules, cited by every transition and copy:
//!
//! - **M1 (one owner).** The state word says who owns the frame: `BOOTING`, `TASK_READY` and
//!   `CONTROL_REQUEST` give it to the child; `INIT_READY`, `INIT_FAILED`, `IDLE`, `TASK_DONE`
//!   and `CONTROL_DONE` to the parent; `SHUTDOWN` ends it.
//! - **M2 (only the owner moves the state).** Every store of the state word goes through the
//!   one compare-and-swap helper [`Mailbox::transition`], from a state the caller owns. A failed
//!   swap means the peer broke M2: a protocol violation (the parent kills such a child).
//! - **M3 (publish, then hand over).** The owner copies its regions into the frame, then swaps
//!   the state with `SeqCst` (a release); the other side loads the state with `SeqCst` (an
//!   acquire) before copying those regions out, so it sees every byte written before the swap.
//! - **M4 (regions).** While it owns the frame, the parent writes only
//!   `PARENT_REGIONS` and the payload, the child only `CHILD_REGIONS` and the payload; the
//!   atomic words are never copied.
//! - **M5 (sticky shutdown).** The `shutdown` word is written only by the parent, 0 → 1, at any
//!   time; the child reads it between requests. It is not itself a wake-up (the child sleeps
//!   on the state word): the parent follows it with `→ SHUTDOWN` on the frame the child waits
//!   on when it owns that frame idle (model-checked); a child parked on a frame the parent
//!   cannot move sees the word at its wait's timeout.
//! - **M6 (wake).** An idle child swaps `child_parked` to 1, re-reads the state and parks with
//!   `futex_wait(state, seen)`; the parent, after a swap to `TASK_READY`, `CONTROL_REQUEST` or
//!   `SHUTDOWN`, reads `child_parked` with a read-modify-write and wakes the child if it is 1.
//!   Both accesses of `child_parked` are read-modify-writes (the child's deregistration too), so
//!   the later of the two synchronizes with the earlier: either the parent sees the
//!   registration (it wakes the child) or the child's re-read and the kernel's compare follow
//!   the parent's swap (the child does not sleep). Storing `IDLE` wakes nobody (the child is
//!   not waiting for it). This is the two-word variant of the wait protocol
//!   (`pto_types::wait`'s README), with the state word as the epoch and `child_parked` as the
//!   registration; `loom_tests.rs` model-checks it.
//! - **M7 (liveness, outside ownership).** The `probe` word is written only by the parent (a
//!   counter, bumped by the monitor thread, then a futex wake), the `probe_ack` word only by
//!   the child's liveness thread (it copies `probe` once the child is healthy). Neither moves
//!   with the frame: both sides use them at any time, whatever the state word says. A lost
//!   wake-up only delays an answer until the liveness thread's own timeout.
//! - **M8 (a ring of frames).** A lane's mailbox segment holds `n ≥ 1` frames of 64 KiB
//!   ([`Mailbox::ring`]; the lane depth of `WorkerBuilder::lane_depth`), each with its own
//!   words and the rules above. Frame 0 carries the start-up exchange and the liveness pair;
//!   frames `1..n` are stored `IDLE` before the spawn (nobody else maps the segment yet).
//!   Request `k` (the parent's sequence number, from 1) uses frame `(k − 1) mod n`, tasks and
//!   control alike: the parent writes frames in that order, the child serves them in that
//!   order, the parent reads replies in that order and writes frame `f` again only after it
//!   took `f`'s reply. So the child, parked on the first frame it has not served, is parked on
//!   the frame the parent writes next, and M6 wakes it. Shutdown (M5) sets the sticky word of
//!   every frame.
//!
//! **Model-checked** (`loom_tests.rs`, loom over the real code through [`SharedMem`]): the
//! hand-off of M1–M4 (a copy by one side while the other may copy the same frame is a
//! reported race, so the state swap must order them), the wake-up of M6 with both sides
//! parking at once, M5 followed by the `SHUTDOWN` transition, the probe wake of M7, and M8 with
//! two frames and two requests in flight; every interleaving of these `SeqCst` accesses up to
//! three preemptions. Not covered: timeouts (the model's futex never times out), the children's
//! health rules, and anything about two processes that two threads do not show.

use std::sync::Arc;
use std::time::Duration;

use pto_types::node_wire::mailbox::{
    CHILD_REGIONS, FIXED_BYTES, FRAME_BYTES, MailboxState, OFF_CHILD_PARKED, OFF_PAYLOAD,
    OFF_PROBE, OFF_PROBE_ACK, OFF_REPORT, OFF_SHUTDOWN, OFF_STATE, PARENT_REGIONS,
};

use pto_types::wait::{SpinPolicy, SpinWindow};

use super::segment::Segment;
use super::shared::{SharedMem, SharedWord};

/// A waiting child reads the clock on every 32nd step: a step is one load of the state word
/// and a `spin_loop()` (~35 ns on the reference VM) or, after `PURE_SPIN`, every other step a
/// `yield_now()` (~0.8 µs), and a clock read costs about as much as a spinning step (~45 ns).
/// So the 2 µs pure phase is judged about every µs, and the window overruns by at most ~15 µs
/// of yields.
const CHILD_CLOCK_EVERY: u32 = 32;

/// Regions copied when reading the fixed part: everything but the five atomic words (S3).
const READ_REGIONS: [(usize, usize); 4] = [
    (0, OFF_SHUTDOWN),
    (OFF_SHUTDOWN + 4, OFF_STATE),
    (OFF_CHILD_PARKED + 4, OFF_PROBE),
    (OFF_REPORT, FIXED_BYTES),
];

/// A state swap that did not find the expected state.
#[must_use = "a failed transition is a protocol violation"]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Violation {
    pub(crate) expected: MailboxState,
    /// The raw value found.
    pub(crate) found: u32,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let found = match MailboxState::from_code(self.found) {
            Some(s) => format!("{s:?}"),
            None => format!("unknown state {}", self.found),
        };
        write!(
            f,
            "mailbox protocol violation: expected {:?}, found {found}",
            self.expected
        )
    }
}

/// One frame of a child's mailbox (frame 0 unless made by [`Mailbox::ring`]), in a
/// [`Segment`] (or, under loom, the model memory of `loom_tests.rs`).
#[derive(Debug)]
pub(crate) struct Mailbox<S: SharedMem = Segment> {
    seg: Arc<S>,
    /// Byte offset of this frame in the segment.
    base: usize,
}

impl<S: SharedMem> Clone for Mailbox<S> {
    fn clone(&self) -> Self {
        Mailbox {
            seg: Arc::clone(&self.seg),
            base: self.base,
        }
    }
}

impl<S: SharedMem> Mailbox<S> {
    /// Frame 0 of `seg`.
    pub(crate) fn new(seg: Arc<S>) -> Mailbox<S> {
        assert!(seg.len() >= FRAME_BYTES, "a mailbox needs a full frame");
        Mailbox { seg, base: 0 }
    }

    /// Every frame of `seg` in ring order (M8).
    pub(crate) fn ring(seg: &Arc<S>) -> Vec<Mailbox<S>> {
        let n = (seg.len() / FRAME_BYTES).max(1);
        assert!(seg.len() >= FRAME_BYTES, "a mailbox needs a full frame");
        (0..n)
            .map(|i| Mailbox {
                seg: Arc::clone(seg),
                base: i * FRAME_BYTES,
            })
            .collect()
    }

    /// Before the spawn only (M8): frames `1..n` start `IDLE`, owned by the parent.
    pub(crate) fn init_ring(seg: &Arc<S>) {
        for frame in Mailbox::ring(seg).iter().skip(1) {
            frame.word(OFF_STATE).seq_store(MailboxState::Idle.code());
        }
    }

    fn word(&self, offset: usize) -> &S::Word {
        self.seg.word(self.base + offset)
    }

    pub(crate) fn segment(&self) -> &Arc<S> {
        &self.seg
    }

    /// The state word (M3: an acquire before reading the owner's regions).
    pub(crate) fn state(&self) -> Result<MailboxState, u32> {
        let raw = self.word(OFF_STATE).seq_load();
        MailboxState::from_code(raw).ok_or(raw)
    }

    /// The raw state word (the child's wait loop compares raw values).
    pub(crate) fn raw_state(&self) -> u32 {
        self.word(OFF_STATE).seq_load()
    }

    /// The one CAS helper (M2): `from → to`, `SeqCst`.
    #[must_use = "a failed transition is a protocol violation"]
    fn transition(&self, from: MailboxState, to: MailboxState) -> Result<(), Violation> {
        self.word(OFF_STATE)
            .seq_compare_exchange(from.code(), to.code())
            .map(|_| ())
            .map_err(|found| Violation {
                expected: from,
                found,
            })
    }

    // Parent transitions (M1: the parent owns `from`).

    /// `INIT_READY | TASK_DONE | CONTROL_DONE → IDLE` (wakes nobody, M6).
    pub(crate) fn transition_to_idle(&self, from: MailboxState) -> Result<(), Violation> {
        debug_assert!(matches!(
            from,
            MailboxState::InitReady | MailboxState::TaskDone | MailboxState::ControlDone
        ));
        self.transition(from, MailboxState::Idle)
    }

    /// `IDLE → TASK_READY`, then wake the child if parked (M6).
    pub(crate) fn transition_to_task_ready(&self) -> Result<(), Violation> {
        self.transition(MailboxState::Idle, MailboxState::TaskReady)?;
        self.wake_child();
        Ok(())
    }

    /// `IDLE → CONTROL_REQUEST`, then wake the child if parked (M6).
    pub(crate) fn transition_to_control_request(&self) -> Result<(), Violation> {
        self.transition(MailboxState::Idle, MailboxState::ControlRequest)?;
        self.wake_child();
        Ok(())
    }

    /// `IDLE | INIT_READY → SHUTDOWN`, then wake the child if parked (M6).
    pub(crate) fn transition_to_shutdown(&self, from: MailboxState) -> Result<(), Violation> {
        self.transition(from, MailboxState::Shutdown)?;
        self.wake_child();
        Ok(())
    }

    // Child transitions (M1: the child owns `from`).

    pub(crate) fn transition_to_init_ready(&self) -> Result<(), Violation> {
        self.transition(MailboxState::Booting, MailboxState::InitReady)
    }

    pub(crate) fn transition_to_init_failed(&self) -> Result<(), Violation> {
        self.transition(MailboxState::Booting, MailboxState::InitFailed)
    }

    pub(crate) fn transition_to_task_done(&self) -> Result<(), Violation> {
        self.transition(MailboxState::TaskReady, MailboxState::TaskDone)
    }

    pub(crate) fn transition_to_control_done(&self) -> Result<(), Violation> {
        self.transition(MailboxState::ControlRequest, MailboxState::ControlDone)
    }

    /// The parent's copy-in (M4): its regions of `fixed` and `payload` at offset 8192.
    pub(crate) fn write_parent(&self, fixed: &[u8], payload: &[u8]) {
        for (a, b) in PARENT_REGIONS {
            self.seg.write(self.base + a, &fixed[a..b]);
        }
        self.seg.write(self.base + OFF_PAYLOAD, payload);
    }

    /// The child's copy-in (M4).
    pub(crate) fn write_child(&self, fixed: &[u8], payload: &[u8]) {
        for (a, b) in CHILD_REGIONS {
            self.seg.write(self.base + a, &fixed[a..b]);
        }
        self.seg.write(self.base + OFF_PAYLOAD, payload);
    }

    /// The parent's copy-in of a task request (M4): its regions but the control payload,
    /// which a task does not use.
    pub(crate) fn write_task_request(&self, fixed: &[u8], payload: &[u8]) {
        for &(a, b) in &PARENT_REGIONS[..4] {
            self.seg.write(self.base + a, &fixed[a..b]);
        }
        self.seg.write(self.base + OFF_PAYLOAD, payload);
    }

    /// The child's copy-in of a reply (M4): the reply header, the report area if `report`,
    /// the first `message_bytes` of the message area and the payload — not the whole 4 KiB
    /// message area every time.
    pub(crate) fn write_reply(
        &self,
        fixed: &[u8],
        payload: &[u8],
        message_bytes: usize,
        report: bool,
    ) {
        let (a, b) = CHILD_REGIONS[0];
        self.seg.write(self.base + a, &fixed[a..b]);
        if report {
            let (a, b) = CHILD_REGIONS[1];
            self.seg.write(self.base + a, &fixed[a..b]);
        }
        if message_bytes > 0 {
            let (a, b) = CHILD_REGIONS[2];
            let end = (a + message_bytes).min(b);
            self.seg.write(self.base + a, &fixed[a..end]);
        }
        self.seg.write(self.base + OFF_PAYLOAD, payload);
    }

    /// Copies bytes `[a, b)` of the frame into the same bytes of `out` (a private copy of the
    /// fixed part); the range must not cover an atomic word (S3).
    pub(crate) fn read_range(&self, out: &mut [u8], a: usize, b: usize) {
        debug_assert!(READ_REGIONS.iter().any(|&(x, y)| x <= a && b <= y));
        self.seg.read(self.base + a, &mut out[a..b]);
    }

    /// A private copy of the fixed part, atomic words zeroed (S3, S4).
    pub(crate) fn read_fixed(&self) -> Vec<u8> {
        let mut out = vec![0u8; FIXED_BYTES];
        for (a, b) in READ_REGIONS {
            self.seg.read(self.base + a, &mut out[a..b]);
        }
        out
    }

    /// A private copy of the first `n` payload bytes (`n` is clamped to the payload).
    pub(crate) fn read_payload(&self, n: usize) -> Vec<u8> {
        let n = n.min(FRAME_BYTES - OFF_PAYLOAD);
        let mut out = vec![0u8; n];
        self.seg.read(self.base + OFF_PAYLOAD, &mut out);
        out
    }

    /// M5: the parent asks the child to exit at its next check.
    pub(crate) fn request_shutdown(&self) {
        self.word(OFF_SHUTDOWN).seq_store(1);
        self.wake_child();
    }

    pub(crate) fn shutdown_requested(&self) -> bool {
        self.word(OFF_SHUTDOWN).seq_load() != 0
    }

    /// Liveness, parent side: publishes probe `n` and wakes the child's liveness thread.
    pub(crate) fn send_probe(&self, n: u32) {
        let word = self.word(OFF_PROBE);
        word.seq_store(n);
        word.futex_wake(1);
    }

    /// Liveness, parent side: the number of the latest probe the child answered.
    pub(crate) fn probe_ack(&self) -> u32 {
        self.word(OFF_PROBE_ACK).seq_load()
    }

    /// Liveness, child side: waits until the probe word differs from `answered` or `timeout`
    /// passes; returns the probe word.
    pub(crate) fn wait_probe(&self, answered: u32, timeout: Duration) -> u32 {
        let word = self.word(OFF_PROBE);
        if word.seq_load() == answered {
            word.futex_wait(answered, Some(timeout));
        }
        word.seq_load()
    }

    /// Liveness, child side: answers probe `n`.
    pub(crate) fn ack_probe(&self, n: u32) {
        self.word(OFF_PROBE_ACK).seq_store(n);
    }

    /// M6, parent side.
    fn wake_child(&self) {
        // An RMW, not a load: it and the child's registration (a swap) are ordered in the
        // word's modification order, and the later one synchronizes with the earlier.
        if self.word(OFF_CHILD_PARKED).seq_read_latest() == 1 {
            self.word(OFF_STATE).futex_wake(1);
        }
    }

    /// M6, child side: waits until the state leaves `seen` or `timeout` passes (spinning for
    /// `spin` first); returns the state found (possibly still `seen`).
    pub(crate) fn child_wait(&self, seen: u32, spin: Duration, timeout: Duration) -> u32 {
        let state = self.word(OFF_STATE);
        let mut window =
            SpinWindow::new(SpinPolicy::new(spin)).reading_clock_every(CHILD_CLOCK_EVERY);
        loop {
            let now = state.seq_load();
            if now != seen {
                return now;
            }
            if !window.step().is_spinning() {
                break;
            }
        }
        // The two-word variant of the wait protocol: `seen` is W1's value.
        let parked = self.word(OFF_CHILD_PARKED);
        // W3a (register), an RMW (see `wake_child`).
        parked.seq_swap(1);
        // W2 (re-check), then W4 (sleep while the state still holds `seen`).
        if state.seq_load() == seen {
            state.futex_wait(seen, Some(timeout));
        }
        // W5 (deregister), a swap like every write of the word (see `SharedWord`).
        parked.seq_swap(0);
        state.seq_load()
    }
}

#[cfg(test)]
mod tests {
    use super::super::segment::SegmentKey;
    use super::*;
    use pto_types::node_wire::mailbox::{
        self as frame, Op, ReplyHeader, RequestHeader, decode_header, decode_reply,
    };
    use std::time::Instant;

    fn mailbox() -> Mailbox {
        let seg = Segment::create(
            SegmentKey {
                owner: 1,
                segment: u64::MAX,
            },
            "pto-test-mailbox",
            FRAME_BYTES,
        )
        .unwrap();
        Mailbox::new(Arc::new(seg))
    }

    /// Two threads over two mappings of one frame: the parent sends 2000 requests, the child
    /// echoes each seq; with a zero spin window every round trip parks, so a lost wake-up would
    /// hang (the test has a watchdog).
    #[test]
    fn two_threads_round_trip_over_one_frame() {
        let parent = mailbox();
        let fd = parent
            .segment()
            .with_fd(|fd| fd.try_clone_to_owned().unwrap())
            .unwrap();
        let child = Mailbox::new(Arc::new(
            Segment::from_fd(parent.segment().key(), fd, FRAME_BYTES).unwrap(),
        ));
        const N: u64 = 2000;
        let (tx, rx) = std::sync::mpsc::channel();
        let child_thread = std::thread::spawn(move || {
            child.transition_to_init_ready().unwrap();
            let mut seen = MailboxState::InitReady.code();
            loop {
                let now = child.child_wait(seen, Duration::ZERO, Duration::from_millis(250));
                match MailboxState::from_code(now) {
                    Some(MailboxState::TaskReady) => {
                        let fixed = child.read_fixed();
                        let h = decode_header(&fixed).unwrap();
                        let payload = child.read_payload(h.args_bytes as usize);
                        let mut out = vec![0u8; FIXED_BYTES];
                        frame::encode_reply(
                            &ReplyHeader {
                                reply_seq: h.seq,
                                payload_bytes: payload.len() as u32,
                                ..ReplyHeader::default()
                            },
                            &mut out,
                        );
                        let echo: Vec<u8> = payload.iter().map(|b| b.wrapping_add(1)).collect();
                        child.write_child(&out, &echo);
                        child.transition_to_task_done().unwrap();
                        seen = MailboxState::TaskDone.code();
                    }
                    Some(MailboxState::Shutdown) => return,
                    _ => {
                        if child.shutdown_requested() {
                            return;
                        }
                        seen = now;
                    }
                }
            }
        });
        let body = std::thread::spawn(move || {
            // Wait for INIT_READY.
            let deadline = Instant::now() + Duration::from_secs(5);
            while parent.state() != Ok(MailboxState::InitReady) {
                assert!(Instant::now() < deadline);
                std::thread::yield_now();
            }
            parent.transition_to_idle(MailboxState::InitReady).unwrap();
            for seq in 1..=N {
                let mut fixed = vec![0u8; FIXED_BYTES];
                let payload = seq.to_le_bytes();
                frame::encode_header(
                    &RequestHeader {
                        seq,
                        op: Op::Task,
                        flags: 0,
                        run_id: 1,
                        task_id: seq,
                        group_index: 0,
                        group_size: 1,
                        args_bytes: 8,
                        control_bytes: 0,
                    },
                    &mut fixed,
                );
                parent.write_parent(&fixed, &payload);
                parent.transition_to_task_ready().unwrap();
                // The scheduler parks on the doorbell; here a plain spin-yield is enough.
                while parent.state() != Ok(MailboxState::TaskDone) {
                    std::thread::yield_now();
                }
                let fixed = parent.read_fixed();
                let r = decode_reply(&fixed).unwrap();
                assert_eq!(r.reply_seq, seq);
                let echo = parent.read_payload(r.payload_bytes as usize);
                let expected: Vec<u8> = payload.iter().map(|b| b.wrapping_add(1)).collect();
                assert_eq!(echo, expected);
                parent.transition_to_idle(MailboxState::TaskDone).unwrap();
            }
            parent.transition_to_shutdown(MailboxState::Idle).unwrap();
            tx.send(()).unwrap();
        });
        rx.recv_timeout(Duration::from_secs(20))
            .expect("the round trips finish (no lost wake-up)");
        body.join().unwrap();
        child_thread.join().unwrap();
    }

    /// M8: a ring of 4 frames, up to 4 requests in flight, the child serving them in order
    /// with a zero spin window (every wait parks): 3000 requests, each echoed by the frame
    /// of its sequence number; a lost wake-up or an out-of-order frame fails or hangs.
    #[test]
    fn a_ring_of_frames_keeps_order_with_requests_in_flight() {
        const FRAMES: usize = 4;
        const N: u64 = 3000;
        let seg = Arc::new(
            Segment::create(
                SegmentKey {
                    owner: 1,
                    segment: u64::MAX,
                },
                "pto-test-ring",
                FRAMES * FRAME_BYTES,
            )
            .unwrap(),
        );
        Mailbox::init_ring(&seg);
        let parent = Mailbox::ring(&seg);
        let child = Mailbox::ring(&seg);
        assert_eq!(parent.len(), FRAMES);
        // Frame 0's start-up exchange, both sides' steps in turn.
        child[0].transition_to_init_ready().unwrap();
        parent[0]
            .transition_to_idle(MailboxState::InitReady)
            .unwrap();
        let child_thread = std::thread::spawn(move || {
            let mut cursor = 0;
            let mut served = 0u64;
            while served < N {
                let f = &child[cursor];
                let now = f.child_wait(
                    MailboxState::Idle.code(),
                    Duration::ZERO,
                    Duration::from_millis(250),
                );
                if now != MailboxState::TaskReady.code() {
                    continue;
                }
                let h = decode_header(&f.read_fixed()).unwrap();
                assert_eq!((h.seq - 1) % FRAMES as u64, cursor as u64, "frame of seq");
                let mut out = vec![0u8; FIXED_BYTES];
                frame::encode_reply(
                    &ReplyHeader {
                        reply_seq: h.seq,
                        ..ReplyHeader::default()
                    },
                    &mut out,
                );
                f.write_child(&out, &[]);
                f.transition_to_task_done().unwrap();
                served += 1;
                cursor = (cursor + 1) % FRAMES;
            }
        });
        let (tx, rx) = std::sync::mpsc::channel();
        let body = std::thread::spawn(move || {
            let (mut sent, mut done) = (0u64, 0u64);
            while done < N {
                while sent < N && sent - done < FRAMES as u64 {
                    sent += 1;
                    let f = &parent[((sent - 1) % FRAMES as u64) as usize];
                    let mut fixed = vec![0u8; FIXED_BYTES];
                    frame::encode_header(
                        &RequestHeader {
                            seq: sent,
                            op: Op::Task,
                            flags: 0,
                            run_id: 1,
                            task_id: sent,
                            group_index: 0,
                            group_size: 1,
                            args_bytes: 0,
                            control_bytes: 0,
                        },
                        &mut fixed,
                    );
                    f.write_parent(&fixed, &[]);
                    f.transition_to_task_ready().unwrap();
                }
                let f = &parent[(done % FRAMES as u64) as usize];
                if f.state() == Ok(MailboxState::TaskDone) {
                    let r = decode_reply(&f.read_fixed()).unwrap();
                    assert_eq!(r.reply_seq, done + 1);
                    f.transition_to_idle(MailboxState::TaskDone).unwrap();
                    done += 1;
                } else {
                    std::thread::yield_now();
                }
            }
            tx.send(()).unwrap();
        });
        rx.recv_timeout(Duration::from_secs(30))
            .expect("every request is answered in order (no lost wake-up)");
        body.join().unwrap();
        child_thread.join().unwrap();
    }

    #[test]
    fn transitions_check_the_owner() {
        let m = mailbox();
        assert_eq!(m.state(), Ok(MailboxState::Booting));
        let v = m.transition_to_task_ready().unwrap_err();
        assert_eq!(v.found, MailboxState::Booting.code());
        assert!(v.to_string().contains("protocol violation"), "{v}");
        m.transition_to_init_failed().unwrap();
        assert!(m.transition_to_init_ready().is_err());
        assert!(!m.shutdown_requested());
        m.request_shutdown();
        assert!(m.shutdown_requested());
    }
}
