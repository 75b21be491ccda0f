//! Thin public wrappers over crate-private hot paths, for the criterion benches in `benches/`
//! only (cargo feature `bench-internals`, off by default). Not an API: nothing here is stable,
//! and the runtime never uses this module. Each wrapper forwards to the real code path
//! unchanged, so a bench measures what the engine runs.

use std::io;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use pto_types::Tensor;
use pto_types::geometry::Geometry;
use pto_types::node_wire::mailbox::{FRAME_BYTES, MailboxState};

use crate::engine::SlotId;
use crate::engine::tensormap::{BufferKey, Entries, EntryHandle};
use crate::shm::{Mailbox, Segment, SegmentKey};

/// One tensor access as the engine records it: the buffer's full key and the geometry.
#[derive(Clone, Debug)]
pub struct Access {
    key: BufferKey,
    geometry: Geometry,
}

impl Access {
    /// The access of host tensor `t` (`None` for a zero-size tensor, which the map skips).
    pub fn of(t: &Tensor) -> Option<Access> {
        let geometry = t.geometry();
        if geometry.is_empty() {
            return None;
        }
        Some(Access {
            key: BufferKey {
                buffer: t.buffer().id(),
                device_worker: None,
            },
            geometry,
        })
    }
}

/// An entry of the L3 TensorMap, as a task's slot keeps it.
#[derive(Clone, Copy, Debug)]
pub struct Entry(EntryHandle);

/// `engine::tensormap::TensorMap`: one run's L3 TensorMap (NODE_RUNTIME.md §2.3).
#[derive(Default)]
pub struct TensorMap {
    map: crate::engine::tensormap::TensorMap,
    out: Vec<SlotId>,
}

impl TensorMap {
    pub fn new() -> TensorMap {
        TensorMap::default()
    }

    /// `insert_writer(key, geometry, task)`, as submit does for an output.
    pub fn insert_writer(&mut self, access: &Access, task: u32) -> Entry {
        Entry(
            self.map
                .insert_writer(access.key, access.geometry, SlotId::for_bench(task)),
        )
    }

    /// `erase(entry, task)`, as consumption does for each entry of the task.
    pub fn erase(&mut self, entry: Entry, task: u32) {
        self.map.erase(entry.0, SlotId::for_bench(task));
    }

    /// `lookup(key, geometry, writers or both, out)` into a reused vector; returns the hits.
    pub fn lookup(&mut self, access: &Access, readers: bool) -> usize {
        let which = if readers {
            Entries::Both
        } else {
            Entries::Writers
        };
        self.out.clear();
        self.map
            .lookup(&access.key, &access.geometry, which, &mut self.out);
        self.out.len()
    }

    /// Entries.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The bench's parent yields once every 1024 polls (~30-40 µs of polling), far beyond an
/// uncontended round trip, so that what it measures is the spinning hand-off, while on a busy
/// 2-core machine the child thread still gets a CPU. It measures a spin, so it does not step a
/// `SpinWindow` (whose yield phase would yield every other poll).
const YIELD_EVERY: u32 = 1024;

/// A parent's `Mailbox` and a child thread on a second mapping of the same memfd segment, both
/// spinning (no futex park while the bench runs). The child answers every `TASK_READY` with
/// `TASK_DONE` through `Mailbox::child_wait` with a spin window longer than any bench, as a
/// child process's request loop does; dropping the pair shuts the child down.
pub struct MailboxPair {
    parent: Mailbox,
    child: Option<JoinHandle<()>>,
}

impl MailboxPair {
    pub fn new() -> io::Result<MailboxPair> {
        let key = SegmentKey {
            owner: 1,
            segment: u64::MAX,
        };
        let parent = Mailbox::new(Arc::new(Segment::create(
            key,
            "pto-bench-mailbox",
            FRAME_BYTES,
        )?));
        let fd = parent
            .segment()
            .with_fd(|fd| fd.try_clone_to_owned())
            .expect("a fresh segment has its fd")?;
        let child = Mailbox::new(Arc::new(Segment::from_fd(key, fd, FRAME_BYTES)?));
        let thread = std::thread::Builder::new()
            .name("bench-child".into())
            .spawn(move || child_loop(&child))?;
        while parent.state() != Ok(MailboxState::InitReady) {
            std::hint::spin_loop();
        }
        parent
            .transition_to_idle(MailboxState::InitReady)
            .expect("the parent owns INIT_READY");
        Ok(MailboxPair {
            parent,
            child: Some(thread),
        })
    }

    /// Parent: `IDLE → TASK_READY`; spin until the child's `TASK_DONE`; `TASK_DONE → IDLE`.
    /// The spin yields the CPU once every [`YIELD_EVERY`] polls (it never parks).
    pub fn round_trip(&self) {
        self.parent
            .transition_to_task_ready()
            .expect("the parent owns IDLE");
        let mut polls = 0u32;
        while self.parent.state() != Ok(MailboxState::TaskDone) {
            polls = polls.wrapping_add(1);
            if polls.is_multiple_of(YIELD_EVERY) {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
        self.parent
            .transition_to_idle(MailboxState::TaskDone)
            .expect("the parent owns TASK_DONE");
    }
}

fn child_loop(child: &Mailbox) {
    const SPIN: Duration = Duration::from_secs(3600);
    child
        .transition_to_init_ready()
        .expect("the child owns BOOTING");
    let mut seen = MailboxState::InitReady.code();
    loop {
        let now = child.child_wait(seen, SPIN, Duration::from_secs(1));
        match MailboxState::from_code(now) {
            Some(MailboxState::TaskReady) => {
                child
                    .transition_to_task_done()
                    .expect("the child owns TASK_READY");
                seen = MailboxState::TaskDone.code();
            }
            Some(MailboxState::Shutdown) => return,
            _ => seen = now,
        }
    }
}

impl Drop for MailboxPair {
    fn drop(&mut self) {
        let _ = self.parent.transition_to_shutdown(MailboxState::Idle);
        if let Some(child) = self.child.take() {
            let _ = child.join();
        }
    }
}
