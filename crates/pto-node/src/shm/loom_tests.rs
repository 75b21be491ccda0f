//! Loom models of the shared-memory protocols: the mailbox frame (M1–M8) and the scheduler's
//! doorbell in its shared form (the two-word variant of the wait protocol).
//!
//! The code under test is the real [`Mailbox`] and [`Doorbell`]: both are generic over
//! [`SharedMem`], and [`ModelMem`] implements it with loom's atomics (the words, S3), loom's
//! `UnsafeCell` (the bytes, S4: a copy by one side while the other copies the same frame is a
//! reported race, which is how M1, M3 and M4 are checked) and a futex made of a loom mutex and
//! condition variable. The model futex never times out, so a wake-up the protocol relies on a
//! timeout to recover shows up as a loom deadlock; spin windows are zero, so every wait parks.
//!
//! Orderings covered: every access of these protocols is `SeqCst`, and loom explores the
//! interleavings of those accesses (it models `SeqCst` as `AcqRel` plus a total order per
//! location, which is all the proofs use: each argument is about the order of accesses to one
//! word, or to two words both read after both are written by the two sides, as in M6).
//!
//! pto-node cannot build under `--cfg loom` (tokio drops its `net` module there), so these
//! run under `--cfg pto_loom`; the command is in `.ci/run`.

use loom::cell::UnsafeCell;
use loom::sync::atomic::{AtomicBool, AtomicU32, Ordering::SeqCst};
use std::sync::Arc;
use std::time::Duration;

use loom::sync::{Condvar, Mutex};
use loom::thread;
use pto_types::node_wire::control_segment::{
    OFF_DOORBELL, OFF_SCHED_PARKED, OFF_SHUTDOWN_ALL, SEGMENT_BYTES,
};
use pto_types::node_wire::mailbox::{
    self as frame, FIXED_BYTES, FRAME_BYTES, MailboxState, OFF_CHILD_PARKED, OFF_PROBE,
    OFF_PROBE_ACK, OFF_SHUTDOWN, OFF_STATE, Op, ReplyHeader, RequestHeader,
};
use pto_types::wait::SpinPolicy;

use super::doorbell::{Doorbell, SharedDoorbell, wait_on};
use super::mailbox::Mailbox;
use super::shared::{SharedMem, SharedWord};

/// Bound the search like the wait protocol's models: two preemptions per execution, unless
/// `LOOM_MAX_PREEMPTIONS` says otherwise.
fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(2);
    }
    builder.check(f);
}

/// A futex word: the kernel compares the value and sleeps in one step under its bucket lock;
/// here the lock is a loom mutex and the sleep a loom condition variable.
struct ModelWord {
    offset: usize,
    value: AtomicU32,
    bucket: Mutex<()>,
    sleepers: Condvar,
}

impl SharedWord for ModelWord {
    fn seq_load(&self) -> u32 {
        self.value.load(SeqCst)
    }

    fn seq_store(&self, v: u32) {
        self.value.store(v, SeqCst);
    }

    fn seq_fetch_add(&self, v: u32) -> u32 {
        self.value.fetch_add(v, SeqCst)
    }

    fn seq_swap(&self, v: u32) -> u32 {
        self.value.swap(v, SeqCst)
    }

    fn seq_compare_exchange(&self, from: u32, to: u32) -> Result<u32, u32> {
        self.value.compare_exchange(from, to, SeqCst, SeqCst)
    }

    /// The timeout is ignored: a model that needs it to make progress deadlocks.
    fn futex_wait(&self, expected: u32, _timeout: Option<Duration>) {
        let guard = self.bucket.lock().unwrap();
        if self.value.load(SeqCst) == expected {
            drop(self.sleepers.wait(guard).unwrap());
        }
    }

    /// Wakes every sleeper (a futex may wake more than asked: a spurious return).
    fn futex_wake(&self, _n: u32) {
        drop(self.bucket.lock().unwrap());
        self.sleepers.notify_all();
    }
}

/// Shared memory of `len` bytes: the declared atomic words, and the plain bytes as one loom
/// cell per 64 KiB frame.
struct ModelMem {
    len: usize,
    words: Vec<ModelWord>,
    frames: Vec<UnsafeCell<Vec<u8>>>,
}

// SAFETY: the frames are reached only through loom's `with` / `with_mut`, which track every
// access and fail the model on a concurrent write, rather than letting it race.
unsafe impl Sync for ModelMem {}

impl std::fmt::Debug for ModelMem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelMem").field("len", &self.len).finish()
    }
}

impl ModelMem {
    /// `len` bytes whose words at `word_offsets` (relative to each frame) are atomic.
    fn new(len: usize, word_offsets: &[usize]) -> ModelMem {
        let frame_len = len.min(FRAME_BYTES);
        let n = len.div_ceil(frame_len);
        let words = (0..n)
            .flat_map(|f| word_offsets.iter().map(move |&o| f * frame_len + o))
            .map(|offset| ModelWord {
                offset,
                value: AtomicU32::new(0),
                bucket: Mutex::new(()),
                sleepers: Condvar::new(),
            })
            .collect();
        let frames = (0..n)
            .map(|_| UnsafeCell::new(vec![0; frame_len]))
            .collect();
        ModelMem { len, words, frames }
    }

    fn mailbox(frames: usize) -> Arc<ModelMem> {
        let words = [
            OFF_SHUTDOWN,
            OFF_STATE,
            OFF_CHILD_PARKED,
            OFF_PROBE,
            OFF_PROBE_ACK,
        ];
        Arc::new(ModelMem::new(frames * FRAME_BYTES, &words))
    }

    fn control() -> Arc<ModelMem> {
        let words = [OFF_SHUTDOWN_ALL, OFF_DOORBELL, OFF_SCHED_PARKED];
        Arc::new(ModelMem::new(SEGMENT_BYTES, &words))
    }

    /// The frame cell and the range inside it; S3: plain copies never touch an atomic word.
    fn locate(&self, offset: usize, len: usize) -> (&UnsafeCell<Vec<u8>>, usize) {
        let frame_len = self.len.min(FRAME_BYTES);
        let (f, at) = (offset / frame_len, offset % frame_len);
        assert!(at + len <= frame_len, "a copy crosses a frame");
        let touches_word = self
            .words
            .iter()
            .any(|w| w.offset < offset + len && offset < w.offset + 4);
        assert!(
            !touches_word,
            "S3: a copy of [{offset}, +{len}) covers an atomic word"
        );
        (&self.frames[f], at)
    }
}

impl SharedMem for ModelMem {
    type Word = ModelWord;

    fn len(&self) -> usize {
        self.len
    }

    fn word(&self, offset: usize) -> &ModelWord {
        self.words
            .iter()
            .find(|w| w.offset == offset)
            .unwrap_or_else(|| panic!("S3: no atomic word at {offset}"))
    }

    fn read(&self, offset: usize, dst: &mut [u8]) {
        let (cell, at) = self.locate(offset, dst.len());
        cell.with(|bytes| {
            // SAFETY: loom's cell hands out the pointer for this closure only and reports a
            // concurrent `with_mut` of the same frame as a race; the range was checked.
            let bytes = unsafe { &*bytes };
            dst.copy_from_slice(&bytes[at..at + dst.len()]);
        });
    }

    fn write(&self, offset: usize, src: &[u8]) {
        let (cell, at) = self.locate(offset, src.len());
        cell.with_mut(|bytes| {
            // SAFETY: as in `read`; loom reports any concurrent access of this frame.
            let bytes = unsafe { &mut *bytes };
            bytes[at..at + src.len()].copy_from_slice(src);
        });
    }
}

/// The parent's request `seq` with an 8-byte payload, written and handed over (M3, M6).
fn send_request(f: &Mailbox<ModelMem>, seq: u64) {
    let mut fixed = vec![0u8; FIXED_BYTES];
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
    f.write_task_request(&fixed, &seq.to_le_bytes());
    f.transition_to_task_ready().unwrap();
}

/// The child's side of one request on `f`, as `Child::serve_loop` does it: wait on the frame
/// (parking at once), read the request, reply with its seq and payload + 1, hand the frame back
/// and ring the parent's doorbell.
fn serve_one(f: &Mailbox<ModelMem>, bell: &SharedDoorbell<ModelMem>) {
    let mut seen = f.raw_state();
    while seen != MailboxState::TaskReady.code() {
        seen = f.child_wait(seen, Duration::ZERO, Duration::from_secs(1));
    }
    let h = frame::decode_header(&f.read_fixed()).unwrap();
    let payload = f.read_payload(h.args_bytes as usize);
    let reply: Vec<u8> = payload.iter().map(|b| b.wrapping_add(1)).collect();
    let mut out = vec![0u8; FIXED_BYTES];
    frame::encode_reply(
        &ReplyHeader {
            reply_seq: h.seq,
            payload_bytes: reply.len() as u32,
            ..ReplyHeader::default()
        },
        &mut out,
    );
    f.write_reply(&out, &reply, 0, false);
    f.transition_to_task_done().unwrap();
    bell.ring();
}

/// The parent's side of a reply on `f`: park on the doorbell until the frame is `TASK_DONE`,
/// check it answers `seq`, take the frame back (M3, M1).
fn take_reply(f: &Mailbox<ModelMem>, bell: &Doorbell<ModelMem>, seq: u64) {
    wait_on(bell, SpinPolicy::PARK_IMMEDIATELY, None, || {
        (f.state() == Ok(MailboxState::TaskDone)).then_some(())
    })
    .expect("no deadline");
    let r = frame::decode_reply(&f.read_fixed()).unwrap();
    assert_eq!(r.reply_seq, seq);
    let payload = f.read_payload(r.payload_bytes as usize);
    let expected: Vec<u8> = seq.to_le_bytes().iter().map(|b| b + 1).collect();
    assert_eq!(payload, expected);
    f.transition_to_idle(MailboxState::TaskDone).unwrap();
}

/// Both sides of a node and one child: the frame past its start-up exchange, and the parent's
/// doorbell attached to the control words.
fn node_and_child(
    frames: usize,
) -> (
    Vec<Mailbox<ModelMem>>,
    Arc<Doorbell<ModelMem>>,
    SharedDoorbell<ModelMem>,
) {
    let mem = ModelMem::mailbox(frames);
    Mailbox::init_ring(&mem);
    let ring = Mailbox::ring(&mem);
    ring[0].transition_to_init_ready().unwrap();
    ring[0].transition_to_idle(MailboxState::InitReady).unwrap();
    let ctl = ModelMem::control();
    let bell = Arc::new(Doorbell::unattached());
    bell.attach(SharedDoorbell::new(Arc::clone(&ctl)));
    (ring, bell, SharedDoorbell::new(ctl))
}

/// M1, M3, M4, M6 and the doorbell: one task request and its reply, both sides parking at once.
/// A lost wake-up of either side is a deadlock; a copy by one side while the other owns the
/// frame is a race.
#[test]
fn loom_mailbox_round_trip_wakes_both_sides() {
    model(|| {
        let (ring, bell, child_bell) = node_and_child(1);
        let child_frame = ring[0].clone();
        let child = thread::spawn(move || serve_one(&child_frame, &child_bell));
        send_request(&ring[0], 1);
        take_reply(&ring[0], &bell, 1);
        child.join().unwrap();
        assert_eq!(ring[0].state(), Ok(MailboxState::Idle));
    });
}

/// M8: a ring of two frames with both requests in flight; the child serves them in order,
/// parking on the frame of the next request, and the parent takes the replies in order.
#[test]
fn loom_mailbox_ring_of_two_frames_with_two_requests_in_flight() {
    model(|| {
        let (ring, bell, child_bell) = node_and_child(2);
        let child_ring = ring.clone();
        let child = thread::spawn(move || {
            for f in &child_ring {
                serve_one(f, &child_bell);
            }
        });
        send_request(&ring[0], 1);
        send_request(&ring[1], 2);
        take_reply(&ring[0], &bell, 1);
        take_reply(&ring[1], &bell, 2);
        child.join().unwrap();
    });
}

/// M5 with M6: a shutdown reaches a child parked on the frame of its next request. The parent
/// does what `begin_shutdown` does: the sticky word, then `IDLE → SHUTDOWN` on the frame it
/// owns.
#[test]
fn loom_shutdown_reaches_a_parked_child() {
    model(|| {
        let (ring, _bell, _child_bell) = node_and_child(1);
        let child_frame = ring[0].clone();
        let child = thread::spawn(move || {
            // `Child::serve_loop`: check the sticky word, wait on the state, until told.
            loop {
                if child_frame.shutdown_requested() {
                    return;
                }
                let seen = child_frame.raw_state();
                if seen == MailboxState::Shutdown.code() {
                    return;
                }
                child_frame.child_wait(seen, Duration::ZERO, Duration::from_secs(1));
            }
        });
        ring[0].request_shutdown();
        ring[0].transition_to_shutdown(MailboxState::Idle).unwrap();
        child.join().unwrap();
    });
}

/// M7: a probe wakes the child's liveness thread, which answers it.
#[test]
fn loom_probe_wakes_the_liveness_thread() {
    model(|| {
        let (ring, _bell, _child_bell) = node_and_child(1);
        let child_frame = ring[0].clone();
        let liveness = thread::spawn(move || {
            let mut probe = 0;
            while probe == 0 {
                probe = child_frame.wait_probe(0, Duration::from_secs(1));
            }
            child_frame.ack_probe(probe);
        });
        ring[0].send_probe(1);
        liveness.join().unwrap();
        assert_eq!(ring[0].probe_ack(), 1);
    });
}

/// The shared doorbell with two ringers (two children's replies) and one waiter that needs
/// both: no ring is lost, and the waiter deregisters (`sched_parked` back to 0).
#[test]
fn loom_doorbell_two_ringers_one_waiter() {
    model(|| {
        let ctl = ModelMem::control();
        let bell = Arc::new(Doorbell::unattached());
        bell.attach(SharedDoorbell::new(Arc::clone(&ctl)));
        let flags = Arc::new([AtomicBool::new(false), AtomicBool::new(false)]);
        let ringers: Vec<_> = (0..2)
            .map(|i| {
                let (ctl, flags) = (Arc::clone(&ctl), Arc::clone(&flags));
                thread::spawn(move || {
                    flags[i].store(true, SeqCst);
                    SharedDoorbell::new(ctl).ring();
                })
            })
            .collect();
        wait_on(&bell, SpinPolicy::PARK_IMMEDIATELY, None, || {
            (flags[0].load(SeqCst) && flags[1].load(SeqCst)).then_some(())
        })
        .expect("no deadline");
        for r in ringers {
            r.join().unwrap();
        }
        assert_eq!(ctl.word(OFF_SCHED_PARKED).seq_load(), 0);
    });
}
