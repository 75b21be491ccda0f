//! Criterion micro-benchmarks of the chip's hot paths (BENCHMARKS.md, "Micro-benchmarks").
//!
//! `cargo bench -p pto-chip --features bench-internals`. The crate-private types are reached
//! through `pto_chip::bench_support` (feature `bench-internals`).

use std::hint::black_box;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use pto_chip::TaskId;
use pto_chip::bench_support::{DepPool, LockedLane, ReadyLanes, TaskRing, TensorMap};
use pto_chip::tensor::TensorDesc;
use pto_types::{DType, RING_COUNT};

/// Live entries of the TensorMap benches.
const MAP_SIZES: [usize; 3] = [1_000, 10_000, 100_000];
/// f32 elements per TensorMap entry (256 bytes).
const ELEMS: u32 = 64;
const BASE: u64 = 0x1000_0000;

fn config() -> Criterion {
    Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1))
}

/// One slot + heap allocation and one retirement per iteration, with 512 tasks in flight on a
/// window of 1024 (a steady state: the heap wraps, the window never fills).
fn task_ring(c: &mut Criterion) {
    const WINDOW: u32 = 1024;
    const IN_FLIGHT: u64 = 512;
    let mut group = c.benchmark_group("task_ring/alloc_retire");
    group.throughput(Throughput::Elements(1));
    for bytes in [0u64, 64, 1000, 4096] {
        group.bench_with_input(BenchmarkId::from_parameter(bytes), &bytes, |b, &bytes| {
            let mut ring = TaskRing::new(WINDOW, 4 << 20);
            let mut ends = vec![0u64; WINDOW as usize];
            let mask = u64::from(WINDOW) - 1;
            for _ in 0..IN_FLIGHT - 1 {
                let (id, end) = ring.try_alloc(bytes).expect("fits");
                ends[(id & mask) as usize] = end;
            }
            b.iter(|| {
                let (id, end) = ring.try_alloc(black_box(bytes)).expect("fits");
                ends[(id & mask) as usize] = end;
                let last_alive = id + 2 - IN_FLIGHT;
                ring.retire_to(last_alive, ends[((last_alive - 1) & mask) as usize]);
            });
        });
    }
    group.finish();
}

/// Four dep-list entries reserved per task and the tail advanced past the oldest of 256 tasks.
fn dep_pool(c: &mut Criterion) {
    const TASKS: usize = 256;
    let mut group = c.benchmark_group("dep_pool");
    group.throughput(Throughput::Elements(1));
    group.bench_function("alloc4_advance", |b| {
        let mut pool = DepPool::new(4096);
        let mut marks = std::collections::VecDeque::with_capacity(TASKS + 1);
        for _ in 0..TASKS {
            pool.try_alloc_n(4).expect("fits");
            marks.push_back(pool.top());
        }
        b.iter(|| {
            black_box(pool.try_alloc_n(black_box(4)).expect("fits"));
            marks.push_back(pool.top());
            pool.advance_tail(marks.pop_front().expect("a mark"));
        });
    });
    group.finish();
}

/// Entry `i` of a map of `n`: on one buffer, the `i`-th disjoint 256-byte row slice of a
/// buffer of `n + 1` slices; on distinct buffers, a whole 256-byte buffer of its own.
fn entry(n: usize, i: usize, one_buffer: bool) -> TensorDesc {
    if one_buffer {
        let slices = n as u32 + 1;
        let whole = TensorDesc::contiguous(
            BASE,
            u64::from(slices * ELEMS) * 4,
            &[slices * ELEMS],
            DType::F32,
        )
        .expect("valid tensor");
        whole
            .view(&[ELEMS], &[i as u32 * ELEMS])
            .expect("in bounds")
    } else {
        let base = BASE + i as u64 * 4096;
        TensorDesc::contiguous(base, u64::from(ELEMS) * 4, &[ELEMS], DType::F32)
            .expect("valid tensor")
    }
}

fn filled_map(n: usize, one_buffer: bool) -> TensorMap {
    let mut map = TensorMap::new(n + 16, 4096, [1024; RING_COUNT]);
    for i in 0..n {
        map.insert(TaskId::new(0, i as u64), entry(n, i, one_buffer))
            .expect("pool has room");
    }
    map
}

/// The chip TensorMap with `n` live writer entries: `insert` (+ `remove`, to stay at `n`) of one
/// more entry, and `lookup` of a probe that overlaps exactly one entry. On one buffer all `n`
/// entries share the buffer's region index, so both descend `O(log n)` treap nodes (without
/// the index, a lookup classified all `n`); on distinct buffers each walks the base records
/// hashed to its bucket (4096 buckets, about `n / 4096` records).
fn chip_tensormap(c: &mut Criterion) {
    for (layout, one_buffer) in [("one_buffer", true), ("distinct_buffers", false)] {
        let mut group = c.benchmark_group(format!("chip_tensormap/{layout}"));
        group.throughput(Throughput::Elements(1));
        for n in MAP_SIZES {
            let mut map = filled_map(n, one_buffer);
            let extra = entry(n, n, one_buffer);
            let producer = TaskId::new(0, n as u64);
            group.bench_with_input(BenchmarkId::new("insert_remove", n), &n, |b, _| {
                b.iter(|| {
                    let e = map.insert(producer, black_box(extra)).expect("room");
                    map.remove(e);
                });
            });
            let probe = entry(n, n / 2, one_buffer);
            let last_alive = [0; RING_COUNT];
            group.bench_with_input(BenchmarkId::new("lookup", n), &n, |b, _| {
                b.iter(|| {
                    let hits = map.lookup(black_box(&probe), &last_alive);
                    debug_assert_eq!(hits, 1);
                    hits
                });
            });
            assert_eq!(map.live_count(), n);
        }
        group.finish();
    }
}

/// Ready lanes: the bare locked `VecDeque` push + pop, and a ready task's trip through the real
/// graph (publish → AIV lane → dispatch onto a core → completion → scope end), in batches of 1
/// and 16 tasks, on the default 8 clusters (16 AIV cores).
fn ready_lanes(c: &mut Criterion) {
    let mut group = c.benchmark_group("ready_lane");
    group.throughput(Throughput::Elements(1));
    group.bench_function("locked_vecdeque_push_pop", |b| {
        let lane = LockedLane::with_capacity(1024);
        for local in 0..64 {
            lane.push(TaskId::new(0, local));
        }
        let mut local = 64;
        b.iter(|| {
            lane.push(TaskId::new(0, local));
            local += 1;
            black_box(lane.pop())
        });
    });
    for batch in [1usize, 16] {
        group.throughput(Throughput::Elements(batch as u64));
        group.bench_with_input(
            BenchmarkId::new("graph_publish_dispatch_finish", batch),
            &batch,
            |b, &batch| {
                let mut graph = ReadyLanes::new(1024, 8);
                let mut ids = Vec::with_capacity(batch);
                b.iter(|| {
                    graph.publish_ready(batch, &mut ids);
                    let dispatched = graph.dispatch();
                    debug_assert_eq!(dispatched, batch);
                    graph.finish_dispatched(&mut ids);
                });
            },
        );
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = config();
    targets = task_ring, dep_pool, chip_tensormap, ready_lanes
}
criterion_main!(benches);
