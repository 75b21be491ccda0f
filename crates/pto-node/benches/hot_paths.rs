//! Criterion micro-benchmarks of the node's hot paths (BENCHMARKS.md, "Micro-benchmarks").
//!
//! `cargo bench -p pto-node --features bench-internals`. The crate-private types are reached
//! through `pto_node::bench_support` (feature `bench-internals`).

use std::hint::black_box;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use pto_node::bench_support::{Access, MailboxPair, TensorMap};
use pto_types::{BufferId, BufferRef, DType, Tensor};

/// Live entries of the TensorMap benches.
const MAP_SIZES: [usize; 3] = [1_000, 10_000, 100_000];
/// f32 elements per TensorMap entry (256 bytes).
const ELEMS: u32 = 64;

fn config() -> Criterion {
    Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1))
}

/// Access `i` of a map of `n`: on one buffer, the `i`-th disjoint 256-byte slice of a buffer
/// of `n + 1` slices; on distinct buffers, a whole 256-byte buffer of its own.
fn access(n: usize, i: usize, one_buffer: bool) -> Access {
    let slice = u64::from(ELEMS) * 4;
    let (buffer_id, bytes, offset) = if one_buffer {
        (1, (n as u64 + 1) * slice, i as u64 * slice)
    } else {
        (i as u64 + 1, slice, 0)
    };
    let id = BufferId {
        owner_uid: 1,
        buffer_id,
        generation: 0,
    };
    let t = Tensor::new(
        BufferRef::detached(id, bytes),
        offset,
        &[ELEMS],
        &[1],
        DType::F32,
    )
    .expect("valid tensor");
    Access::of(&t).expect("not empty")
}

/// The node TensorMap with `n` live writer entries: `insert_writer` (+ `erase` through the
/// returned entry, to stay at `n`) of one more disjoint entry, and `lookup` (writers only) of a
/// probe overlapping exactly one entry. On one buffer all `n` entries share the buffer's tree
/// of the region index, so insert (its search for covered entries) and lookup descend
/// `O(log n)` nodes and erase unlinks one; distinct buffers are separate hash-map keys.
fn node_tensormap(c: &mut Criterion) {
    for (layout, one_buffer) in [("one_buffer", true), ("distinct_buffers", false)] {
        let mut group = c.benchmark_group(format!("node_tensormap/{layout}"));
        group.throughput(Throughput::Elements(1));
        for n in MAP_SIZES {
            let mut map = TensorMap::new();
            for i in 0..n {
                map.insert_writer(&access(n, i, one_buffer), i as u32);
            }
            assert_eq!(map.len(), n);
            let extra = access(n, n, one_buffer);
            let task = n as u32;
            group.bench_with_input(BenchmarkId::new("insert_erase", n), &n, |b, _| {
                b.iter(|| {
                    let entry = map.insert_writer(black_box(&extra), task);
                    map.erase(entry, task);
                });
            });
            let probe = access(n, n / 2, one_buffer);
            group.bench_with_input(BenchmarkId::new("lookup", n), &n, |b, _| {
                b.iter(|| {
                    let hits = map.lookup(black_box(&probe), false);
                    debug_assert_eq!(hits, 1);
                    hits
                });
            });
            assert_eq!(map.len(), n);
        }
        group.finish();
    }
}

/// One mailbox round trip between two threads over one memfd frame, both spinning: the parent
/// swaps IDLE → TASK_READY, the child thread sees it and swaps TASK_READY → TASK_DONE, the
/// parent sees TASK_DONE and swaps back to IDLE. State words only (no frame copies).
fn mailbox(c: &mut Criterion) {
    let mut group = c.benchmark_group("mailbox");
    group.throughput(Throughput::Elements(1));
    let pair = MailboxPair::new().expect("memfd segment");
    group.bench_function("round_trip_spin", |b| b.iter(|| pair.round_trip()));
    group.finish();
    drop(pair);
}

criterion_group! {
    name = benches;
    config = config();
    targets = node_tensormap, mailbox
}
criterion_main!(benches);
