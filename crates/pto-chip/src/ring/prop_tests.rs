//! Property tests of the ring allocators against small reference models (CHIP_RUNTIME.md
//! §4.1–§4.3 allocation and §3.6 retirement; §7 counters and scope peaks).

use std::collections::VecDeque;

use proptest::prelude::*;

use super::heap::HEAP_ALIGN;
use super::task_ring::{Allocation, RingCounters, TaskRingPeaks};
use super::{AllocFailureKind, DepPool, TaskRing};

#[derive(Clone, Debug)]
enum Op {
    Alloc(u64),
    /// Retire `raw % (live + 1)` of the oldest live tasks, in order (0 re-feeds the watermark).
    Retire(usize),
    BeginScope,
    EndScope,
}

fn sizes(heap: u64) -> impl Strategy<Value = u64> {
    prop_oneof![
        1 => Just(0u64),
        3 => 1..=256u64,
        3 => 0..=heap,
        2 => (heap - 256)..=heap,
    ]
}

fn ops(heap: u64) -> impl Strategy<Value = Vec<Op>> {
    let op = prop_oneof![
        6 => sizes(heap).prop_map(Op::Alloc),
        4 => any::<usize>().prop_map(Op::Retire),
        1 => Just(Op::BeginScope),
        1 => Just(Op::EndScope),
    ];
    proptest::collection::vec(op, 1..300)
}

fn ring_case() -> impl Strategy<Value = (u32, u64, Vec<Op>)> {
    prop_oneof![Just((4u32, 4096u64)), Just((16, 4096)), Just((16, 1024))]
        .prop_flat_map(|(window, heap)| (Just(window), Just(heap), ops(heap)))
}

/// A live task of the model: id and heap interval `[start, end)`.
#[derive(Clone, Copy, Debug)]
struct Live {
    id: u64,
    start: u64,
    end: u64,
}

fn max_peaks(samples: &[TaskRingPeaks]) -> TaskRingPeaks {
    samples
        .iter()
        .fold(TaskRingPeaks::default(), |acc, s| TaskRingPeaks {
            live: acc.live.max(s.live),
            heap_used: acc.heap_used.max(s.heap_used),
            largest_alloc: acc.largest_alloc.max(s.largest_alloc),
        })
}

fn check_counters(ring: &TaskRing, prev: &RingCounters, heap: u64) -> Result<(), TestCaseError> {
    let c = ring.counters();
    prop_assert!(c.heap_start <= c.heap_end && c.heap_end - c.heap_start <= heap);
    prop_assert_eq!(c.heap_end - c.heap_start, ring.heap_used());
    prop_assert!(c.heap_start >= prev.heap_start && c.heap_end >= prev.heap_end);
    prop_assert!(c.task_window_start >= prev.task_window_start);
    prop_assert!(c.task_window_end >= prev.task_window_end);
    prop_assert_eq!(c.task_window_end - c.task_window_start, ring.active());
    Ok(())
}

/// The reference model of a `TaskRing` (window `window`, heap `heap`): what it must hold.
struct RingModel {
    window: u32,
    heap: u64,
    live: VecDeque<Live>,
    next_id: u64,
    last_alive: u64,
    /// Occupancy after every step; a scope's peaks are the maximum from its begin sample on.
    history: Vec<TaskRingPeaks>,
    scopes: Vec<usize>,
    high_water: TaskRingPeaks,
    prev: RingCounters,
}

impl RingModel {
    /// The model of the empty `ring`.
    fn new(ring: &TaskRing, window: u32, heap: u64) -> RingModel {
        RingModel {
            window,
            heap,
            live: VecDeque::new(),
            next_id: 0,
            last_alive: 0,
            history: Vec::new(),
            scopes: Vec::new(),
            high_water: TaskRingPeaks::default(),
            prev: ring.counters(),
        }
    }

    /// Applies `op` to `ring` and to the model, then checks that they agree.
    fn step(&mut self, ring: &mut TaskRing, op: Op) -> Result<(), TestCaseError> {
        match op {
            Op::Alloc(bytes) => self.alloc(ring, bytes)?,
            Op::Retire(raw) => {
                let k = raw % (self.live.len() + 1);
                if k == 0 {
                    ring.retire_to(self.last_alive, self.heap + 1); // stale: ignored
                } else {
                    let mut newest = None;
                    for _ in 0..k {
                        newest = self.live.pop_front();
                    }
                    let newest = newest.unwrap();
                    self.last_alive = newest.id + 1;
                    ring.retire_to(self.last_alive, newest.end);
                }
                prop_assert_eq!(ring.last_alive(), self.last_alive);
            }
            Op::BeginScope => {
                ring.begin_scope_sample();
                self.scopes.push(self.history.len());
                self.history.push(TaskRingPeaks {
                    live: self.live.len() as u64,
                    heap_used: ring.heap_used(),
                    largest_alloc: 0,
                });
            }
            Op::EndScope => {
                if let Some(start) = self.scopes.pop() {
                    prop_assert_eq!(ring.end_scope_sample(), max_peaks(&self.history[start..]));
                }
            }
        }
        prop_assert!(self.live.len() < self.window as usize);
        prop_assert_eq!(ring.active(), self.live.len() as u64);
        prop_assert_eq!(ring.high_water(), self.high_water);
        check_counters(ring, &self.prev, self.heap)?;
        self.prev = ring.counters();
        Ok(())
    }

    /// One `try_alloc(bytes)`: it fits exactly when the model says so, and fails with the
    /// model's reason and no change otherwise.
    fn alloc(&mut self, ring: &mut TaskRing, bytes: u64) -> Result<(), TestCaseError> {
        let n = bytes.next_multiple_of(HEAP_ALIGN);
        let window_full = self.live.len() as u64 + 1 >= u64::from(self.window);
        let fits = ring.heap_fits(bytes);
        let available = ring.heap_available();
        let top = ring.heap_top();
        // `available` is exactly the largest request that fits (§4.2).
        prop_assert_eq!(fits, n <= available, "n {} available {}", n, available);
        if self.live.is_empty() && n <= self.heap {
            prop_assert!(fits, "a completely retired ring refused {} B", n);
        }
        match ring.try_alloc(bytes) {
            Ok(a) => {
                prop_assert!(!window_full && fits);
                self.allocated(ring, &a, n, top)?;
            }
            Err(f) => {
                let kind = if window_full {
                    AllocFailureKind::WindowFull
                } else {
                    prop_assert!(!fits);
                    AllocFailureKind::HeapFull
                };
                prop_assert_eq!(f.kind, kind);
                prop_assert_eq!(f.impossible, n > self.heap);
                prop_assert_eq!(ring.counters(), self.prev, "a failed alloc changed state");
            }
        }
        Ok(())
    }

    /// Checks allocation `a` of `n` aligned bytes (at `top` when empty) and records it.
    fn allocated(
        &mut self,
        ring: &TaskRing,
        a: &Allocation,
        n: u64,
        top: u64,
    ) -> Result<(), TestCaseError> {
        prop_assert_eq!(a.id, self.next_id);
        prop_assert_eq!(a.slot as u64, a.id & u64::from(self.window - 1));
        prop_assert_eq!(a.end - a.offset, n);
        prop_assert!(a.end <= self.heap && a.offset.is_multiple_of(HEAP_ALIGN));
        if n == 0 {
            prop_assert_eq!(a.offset, top);
        } else {
            for other in self.live.iter().filter(|l| l.start < l.end) {
                prop_assert!(
                    a.end <= other.start || other.end <= a.offset,
                    "[{}, {}) overlaps live r:{} [{}, {})",
                    a.offset,
                    a.end,
                    other.id,
                    other.start,
                    other.end
                );
            }
        }
        self.live.push_back(Live {
            id: a.id,
            start: a.offset,
            end: a.end,
        });
        self.next_id += 1;
        let sample = TaskRingPeaks {
            live: self.live.len() as u64,
            heap_used: ring.heap_used(),
            largest_alloc: n,
        };
        self.high_water = max_peaks(&[self.high_water, sample]);
        self.history.push(sample);
        Ok(())
    }
}

fn run_ring_model(window: u32, heap: u64, ops: Vec<Op>) -> Result<(), TestCaseError> {
    let mut ring = TaskRing::new(window, heap);
    let mut model = RingModel::new(&ring, window, heap);
    for op in ops {
        model.step(&mut ring, op)?;
    }

    // Retire everything: the ring is empty and any request up to H fits.
    if let Some(newest) = model.live.back() {
        ring.retire_to(newest.id + 1, newest.end);
    }
    prop_assert_eq!(ring.active(), 0);
    prop_assert_eq!(ring.heap_used(), 0);
    prop_assert_eq!(ring.heap_available(), heap);
    check_counters(&ring, &model.prev, heap)?;
    let a = ring.try_alloc(heap);
    prop_assert!(a.is_ok(), "{:?}", a);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    #[test]
    fn task_ring_matches_interval_model((window, heap, ops) in ring_case()) {
        run_ring_model(window, heap, ops)?;
    }
}

#[derive(Clone, Debug)]
enum PoolOp {
    AllocN(u64),
    /// Free `raw % (reservations + 1)` of the oldest reservations.
    Advance(usize),
}

fn pool_ops() -> impl Strategy<Value = Vec<PoolOp>> {
    let op = prop_oneof![
        3 => (0..=10u64).prop_map(PoolOp::AllocN),
        2 => any::<usize>().prop_map(PoolOp::Advance),
    ];
    proptest::collection::vec(op, 1..200)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    #[test]
    fn dep_pool_matches_reservation_model(ops in pool_ops()) {
        let capacity = 8u64;
        let mut pool = DepPool::<u64>::new(capacity as u32);
        let mut reservations: VecDeque<(u64, u64)> = VecDeque::new();
        let mut high_water = 0;
        for op in ops {
            let used: u64 = reservations.iter().map(|r| r.1).sum();
            match op {
                PoolOp::AllocN(n) => {
                    let top = pool.top();
                    match pool.try_alloc_n(n) {
                        Ok(first) => {
                            prop_assert!(used + n <= capacity);
                            prop_assert_eq!(first, top);
                            prop_assert!(first != super::dep_pool::POOL_SENTINEL);
                            for k in 0..n {
                                *pool.get_mut(first + k) = first + k;
                            }
                            reservations.push_back((first, n));
                            high_water = high_water.max(used + n);
                        }
                        Err(f) => {
                            prop_assert!(used + n > capacity);
                            prop_assert_eq!(f.impossible, n > capacity);
                            prop_assert_eq!(pool.top(), top);
                        }
                    }
                }
                PoolOp::Advance(raw) => {
                    let k = raw % (reservations.len() + 1);
                    let mut newest = None;
                    for _ in 0..k {
                        newest = reservations.pop_front();
                    }
                    if let Some((first, n)) = newest {
                        pool.advance_tail(first + n);
                    }
                }
            }
            let used: u64 = reservations.iter().map(|r| r.1).sum();
            prop_assert_eq!(pool.used(), used);
            prop_assert_eq!(pool.available(), capacity - used);
            prop_assert_eq!(pool.high_water(), high_water);
            // Live entries kept their values: no two live positions share an index.
            for &(first, n) in &reservations {
                let (a, b) = pool.run(first, n);
                let values: Vec<u64> = a.iter().chain(b).copied().collect();
                prop_assert_eq!(values, (first..first + n).collect::<Vec<u64>>());
            }
        }
    }
}
