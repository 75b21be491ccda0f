//! Running a fixed DAG on several threads without a lock: per-node counters of producers not
//! yet finished, and a ready queue each node enters once. A chip's fused replay runs a
//! recorded graph on it (`pto-chip`'s `engine/fused.rs`); the loom models in `loom_tests.rs`
//! run this very code.
//!
//! Rules (the names the models and `engine/fused.rs` use):
//! - **F1** a node enters the ready queue exactly once: [`Countdown::arm`] pushes the nodes
//!   without producers, and [`Countdown::finish`] pushes a successor when its decrement took
//!   the counter to zero. So the queue, as long as the nodes, never wraps.
//! - **F2** a thread that pushed takes again before it stops; a thread stops only when
//!   [`Countdown::take`] finds nothing ([`Take::Empty`], or [`Take::Storing`]: a push that
//!   reserved its slot and has not stored it yet, which its pusher takes). So no ready node is
//!   stranded: when the last thread stops, every node was taken and finished (the graph is a
//!   DAG), whatever the others did. Stopping is always safe; waiting is only for speed.
//! - **F3** a thread counts the nodes it finished when it next takes from the queue (its
//!   [`Cursor`] keeps the count until then), not one shared increment per node: the count
//!   only lags, so [`Take::Done`] is never early, and it is exact once every thread that
//!   finished a node has taken again, which F2 makes every thread do before it stops (a
//!   caller that abandons the run, say on a failure, may leave it short: `Done` then never
//!   comes, and nothing waits for it).

use crossbeam_utils::CachePadded;

use super::sync::{AtomicU32, AtomicUsize, Ordering};

/// What [`Countdown::take`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Take {
    /// A ready node, now the caller's to run and then [`Countdown::finish`].
    Node(u32),
    /// Every node is finished.
    Done,
    /// Nothing ready now; nodes still run elsewhere and may make some ready.
    Empty,
    /// A push has reserved the next slot but not stored it yet; its pusher takes it (F2).
    Storing,
}

/// One thread's place in a run of a [`Countdown`]: the node it holds to run next, and the
/// nodes it finished that [`Countdown::take`] has not counted yet (F3).
#[derive(Debug, Default)]
pub struct Cursor {
    held: Option<u32>,
    uncounted: usize,
}

impl Cursor {
    /// A thread's place before it takes its first node.
    pub fn new() -> Cursor {
        Cursor::default()
    }
}

/// The counters and ready queue of one run of a DAG.
#[derive(Debug, Default)]
pub struct Countdown {
    /// Producers not finished, per node.
    waiting: Vec<AtomicU32>,
    /// The ready queue: node + 1 once stored (0: not yet), taken from `head`, pushed at `tail`.
    slots: Vec<AtomicU32>,
    // Each on a cache line of its own: the blocks of a run update all three per node, and
    // sharing a line made each update a miss on the other CPU's.
    head: CachePadded<AtomicUsize>,
    tail: CachePadded<AtomicUsize>,
    finished: CachePadded<AtomicUsize>,
}

impl Countdown {
    /// An empty countdown; [`Countdown::arm`] it for a DAG.
    pub fn new() -> Countdown {
        Countdown::default()
    }

    /// Ready for a run of the DAG whose node `n` has `fanin[n]` producers, reusing the
    /// buffers of the last run; the nodes without producers are ready.
    pub fn arm(&mut self, fanin: &[u32]) {
        let len = fanin.len();
        self.waiting.clear();
        self.waiting
            .extend(fanin.iter().map(|&f| AtomicU32::new(f)));
        self.slots.clear();
        self.slots.resize_with(len, || AtomicU32::new(0));
        self.head = CachePadded::new(AtomicUsize::new(0));
        self.tail = CachePadded::new(AtomicUsize::new(0));
        self.finished = CachePadded::new(AtomicUsize::new(0));
        for (n, &f) in fanin.iter().enumerate() {
            if f == 0 {
                self.push(n as u32);
            }
        }
    }

    /// The nodes of the armed DAG.
    pub fn len(&self) -> usize {
        self.waiting.len()
    }

    /// Whether the armed DAG has no node.
    pub fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }

    /// The next node to run: the one `cursor` holds (a successor the caller's last
    /// [`Countdown::finish`] made ready) or one from the queue. Before it looks at the queue it
    /// counts the nodes the caller finished (F3).
    pub fn take(&self, cursor: &mut Cursor) -> Take {
        if let Some(n) = cursor.held.take() {
            return Take::Node(n);
        }
        if cursor.uncounted > 0 {
            self.finished
                .fetch_add(std::mem::take(&mut cursor.uncounted), Ordering::AcqRel);
        }
        loop {
            let h = self.head.load(Ordering::Acquire);
            if h >= self.tail.load(Ordering::Acquire) {
                return if self.finished.load(Ordering::Acquire) == self.len() {
                    Take::Done
                } else {
                    Take::Empty
                };
            }
            let v = self.slots[h].load(Ordering::Acquire);
            if v == 0 {
                return Take::Storing;
            }
            if self
                .head
                .compare_exchange(h, h + 1, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                return Take::Node(v - 1);
            }
        }
    }

    /// Node `n` ran: its `successors` lose a producer, and those that became ready are
    /// pushed, but the first, which `cursor` holds for the caller to run next (no queue
    /// round trip, and its inputs are in this CPU's cache). `cursor` must hold nothing.
    pub fn finish(&self, n: u32, successors: &[u32], cursor: &mut Cursor) {
        debug_assert!(cursor.held.is_none(), "node {n} finished while one is held");
        cursor.uncounted += 1;
        for &s in successors {
            if self.waiting[s as usize].fetch_sub(1, Ordering::AcqRel) == 1 {
                match cursor.held {
                    None => cursor.held = Some(s),
                    Some(_) => self.push(s),
                }
            }
        }
    }

    /// F1: each node is pushed once, so `tail` stays within the slots.
    fn push(&self, n: u32) {
        let i = self.tail.fetch_add(1, Ordering::AcqRel);
        self.slots[i].store(n + 1, Ordering::Release);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::{Countdown, Cursor, Take};

    /// Runs `succ` (node → successors) on one thread; returns the order the nodes ran in.
    fn run_alone(succ: &[Vec<u32>]) -> Vec<u32> {
        let mut fanin = vec![0u32; succ.len()];
        for s in succ.iter().flatten() {
            fanin[*s as usize] += 1;
        }
        let mut c = Countdown::new();
        c.arm(&fanin);
        let (mut held, mut order) = (Cursor::new(), Vec::new());
        loop {
            match c.take(&mut held) {
                Take::Node(n) => {
                    order.push(n);
                    c.finish(n, &succ[n as usize], &mut held);
                }
                Take::Done => return order,
                other => panic!("one thread alone found {other:?}"),
            }
        }
    }

    #[test]
    fn a_diamond_runs_each_node_once_after_its_producers() {
        // 0 → 1, 0 → 2, 1 → 3, 2 → 3; 4 alone.
        let succ = vec![vec![1, 2], vec![3], vec![3], vec![], vec![]];
        let order = run_alone(&succ);
        let at = |n: u32| order.iter().position(|&m| m == n).unwrap();
        assert_eq!(order.len(), 5);
        assert!(at(0) < at(1) && at(0) < at(2) && at(1) < at(3) && at(2) < at(3));
        // The first successor made ready runs next, without the queue.
        assert_eq!(order[..2], [0, 1]);
    }

    #[test]
    fn a_rearmed_countdown_runs_the_next_dag_from_scratch() {
        let mut c = Countdown::new();
        c.arm(&[0, 1]);
        let mut held = Cursor::new();
        assert_eq!(c.take(&mut held), Take::Node(0));
        assert_eq!(c.take(&mut held), Take::Empty, "node 1 waits for node 0");
        c.arm(&[0, 0, 0]);
        for n in 0..3 {
            assert_eq!(c.take(&mut held), Take::Node(n));
            c.finish(n, &[], &mut held);
        }
        assert_eq!(c.take(&mut held), Take::Done);
    }
}
