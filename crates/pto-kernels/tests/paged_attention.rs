//! Paged attention with online softmax end to end (CHIP_RUNTIME.md §9.2): the chip's result
//! matches the host golden within rtol = atol = 1e-3, with default ring sizing (`pa_small`)
//! and under back-pressure with the stress sizing (`ringbuffer_stress`).

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use common::{chip, with_timeout};
use half::bf16;
use pto_chip::memory::HostMemory;
use pto_chip::{ChipRunReport, ChipWorker, RunContext};
use pto_kernels::paged_attention::{
    PA_SMALL, PaCase, PaInputs, RINGBUFFER_STRESS, STRESS_DEP_POOL, STRESS_HEAP,
    STRESS_TASK_WINDOW, TOLERANCE, golden, golden_scaled, make_inputs,
};
use pto_types::tolerance::{Mismatch, Miss};
use pto_types::{BufferId, CallConfig, DType, RuntimeEnv, TaskArgs, Tensor};

/// A host buffer holding `bytes` (native order) and a contiguous tensor of `shape` over it.
fn host_tensor(bytes: &[u8], shape: &[u32], dtype: DType) -> (Arc<HostMemory>, Tensor) {
    // Ids distinct from the common helpers' (owner 7), so buffers never alias in a run.
    static NEXT_ID: AtomicU64 = AtomicU64::new(1);
    let buffer = HostMemory::new(bytes.len()).expect("host buffer");
    buffer.write_bytes(0, bytes);
    let id = BufferId {
        owner_uid: 0x9A,
        buffer_id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
        generation: 0,
    };
    let tensor = Tensor::contiguous(buffer.buffer_ref(id), shape, dtype).expect("tensor");
    (buffer, tensor)
}

fn bf16_bytes(v: &[bf16]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_bits().to_ne_bytes()).collect()
}

fn i32_bytes(v: &[i32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_ne_bytes()).collect()
}

/// Runs `paged_attention` on `inputs` and returns the output and the run report.
fn run_case(
    chip: &ChipWorker,
    case: &PaCase,
    inputs: &PaInputs,
    env: RuntimeEnv,
    scale: Option<f32>,
) -> (Vec<f32>, ChipRunReport) {
    let (_q, q) = host_tensor(&bf16_bytes(&inputs.query), &case.query_shape(), DType::BF16);
    let cache = case.cache_shape();
    let (_k, k) = host_tensor(&bf16_bytes(&inputs.key_cache), &cache, DType::BF16);
    let (_v, v) = host_tensor(&bf16_bytes(&inputs.value_cache), &cache, DType::BF16);
    let bt_shape = case.block_table_shape();
    let (_bt, bt) = host_tensor(&i32_bytes(&inputs.block_table), &bt_shape, DType::I32);
    let (_cl, cl) = host_tensor(&i32_bytes(&inputs.context_lens), &[case.batch], DType::I32);
    let n = case.out_len();
    let (out_buf, out) = host_tensor(&vec![0u8; n * 4], &case.query_shape(), DType::F32);
    let mut args = TaskArgs::new()
        .input(&q)
        .input(&k)
        .input(&v)
        .input(&bt)
        .input(&cl)
        .output_existing(&out);
    if let Some(scale) = scale {
        args = args.scalar(scale);
    }
    let report = chip
        .run(
            "paged_attention",
            &args,
            &CallConfig::with_runtime_env(env),
            &RunContext::default(),
        )
        .unwrap_or_else(|e| panic!("paged_attention run failed: {e}"));
    (out_buf.read_f32(0, n), report)
}

fn stress_env() -> RuntimeEnv {
    RuntimeEnv::default()
        .with_task_window(STRESS_TASK_WINDOW)
        .with_heap(STRESS_HEAP)
        .with_dep_pool(STRESS_DEP_POOL)
}

fn assert_matches(actual: &[f32], expected: &[f32]) {
    let max_diff = actual
        .iter()
        .zip(expected)
        .map(|(a, e)| (a - e).abs())
        .fold(0.0f32, f32::max);
    eprintln!("max |actual - expected| = {max_diff:e}");
    if let Err(m) = TOLERANCE.check(actual, expected) {
        panic!("paged attention differs from the golden: {m}");
    }
}

#[test]
fn pa_small_matches_the_golden() {
    with_timeout(60, || {
        let chip = chip(4, &[]);
        let inputs = make_inputs(&PA_SMALL);
        let t = Instant::now();
        let expected = golden(&PA_SMALL, &inputs);
        let golden_time = t.elapsed();
        let (actual, report) = run_case(&chip, &PA_SMALL, &inputs, RuntimeEnv::default(), None);
        eprintln!(
            "pa_small: run {:?}, golden {golden_time:?}, total {:?}",
            report.wall,
            t.elapsed()
        );
        assert_matches(&actual, &expected);
        assert_eq!(report.tasks, 17);
        assert_eq!(report.tasks, PA_SMALL.expected_tasks());
        // The output is real attention, not zeros: values lie inside the value range.
        assert!(actual.iter().all(|v| v.abs() < 1.0) && actual.iter().any(|&v| v != 0.0));
        // A corrupted copy of the chip's output is caught, at the corrupted element.
        let mut corrupted = actual.clone();
        corrupted[777] += 0.01;
        match TOLERANCE.check(&corrupted, &expected) {
            Err(Mismatch::Values {
                worst: Miss { index, .. },
                failures,
                ..
            }) => assert_eq!((index, failures), (777, 1)),
            other => panic!("the corruption went unnoticed: {other:?}"),
        }
    });
}

/// The full `ringbuffer_stress` case of §9.2 with the stress sizing on all rings (window 64,
/// heap 4 MiB, dep pool 256): 258 tasks, 256 of them through ring 2's 64 slots and 4 MiB.
#[test]
fn ringbuffer_stress_passes_under_backpressure() {
    with_timeout(120, || stress(&RINGBUFFER_STRESS, 258));
}

fn stress(case: &PaCase, tasks: u64) {
    let chip = chip(4, &[]);
    let inputs = make_inputs(case);
    let t = Instant::now();
    let expected = golden(case, &inputs);
    let golden_time = t.elapsed();
    let (actual, report) = run_case(&chip, case, &inputs, stress_env(), None);
    eprintln!(
        "ringbuffer_stress batch {}: run {:?}, golden {golden_time:?}, usage {:?}",
        case.batch, report.wall, report.usage
    );
    assert_matches(&actual, &expected);
    assert_eq!(report.tasks, tasks);
    assert_eq!(report.tasks, case.expected_tasks());
    let ring2 = &report.usage[2];
    assert!(ring2.heap_peak <= STRESS_HEAP, "{ring2:?}");
    assert!(ring2.task_window_peak < STRESS_TASK_WINDOW, "{ring2:?}");
    assert!(ring2.dep_pool_peak <= STRESS_DEP_POOL, "{ring2:?}");
    // 64 iterations of 322 KiB need 20 MiB on ring 2: the heap must have been recycled.
    assert!(
        ring2.heap_peak > STRESS_HEAP / 2,
        "ring 2 was never under pressure: {ring2:?}"
    );
}

/// Context lengths that are not multiples of the block: masking inside a block, and whole
/// blocks past a short sequence's end (which must change nothing); also a non-default scale.
#[test]
fn pa_ragged_context_lens_are_masked() {
    with_timeout(60, || {
        let chip = chip(2, &[]);
        let case = PaCase {
            batch: 5,
            heads: 4,
            d: 64,
            block: 32,
            ctx: 200,
            max_model_len: 512,
            seed: 17,
        };
        let mut inputs = make_inputs(&case);
        inputs.context_lens = vec![200, 1, 33, 96, 150];
        let expected = golden_scaled(&case, &inputs, 0.125);
        let (actual, report) = run_case(&chip, &case, &inputs, RuntimeEnv::default(), Some(0.125));
        assert_matches(&actual, &expected);
        // max_bn = ceil(200 / 32) = 7 for every sequence.
        assert_eq!(report.tasks, 1 + 4 * 7);
        // Sequence 1 sees one position: its output rows are that position's value row.
        let row = (case.heads * case.d) as usize;
        let blk = inputs.block_table[case.blocks_per_seq() as usize] as usize;
        let v0: Vec<f32> = inputs.value_cache[blk * (case.block * case.d) as usize..]
            [..case.d as usize]
            .iter()
            .map(|v| v.to_f32())
            .collect();
        for h in 0..case.heads as usize {
            let got = &actual[row + h * case.d as usize..][..case.d as usize];
            assert_eq!(got, &v0[..], "head {h}");
        }
    });
}

#[test]
fn pa_inputs_and_golden_are_reproducible() {
    with_timeout(60, || {
        let a = make_inputs(&PA_SMALL);
        let b = make_inputs(&PA_SMALL);
        assert_eq!(a, b);
        assert_eq!(a.context_lens, [512; 4]);
        assert!(
            a.block_table
                .iter()
                .all(|&e| (0..PA_SMALL.total_blocks() as i32).contains(&e))
        );
        let (ga, gb) = (golden(&PA_SMALL, &a), golden(&PA_SMALL, &b));
        assert_eq!(ga, gb);
        assert_eq!(ga.len(), 4 * 16 * 128);
        assert!(ga.iter().all(|v| v.is_finite()));
    });
}

#[test]
fn pa_check_detects_corruption() {
    with_timeout(60, || {
        let expected = golden(&PA_SMALL, &make_inputs(&PA_SMALL));
        assert_eq!(TOLERANCE.check(&expected, &expected), Ok(()));
        let mut bad = expected.clone();
        bad[10] += 0.5;
        bad[20] = f32::NAN;
        bad[30] -= 0.01;
        let err = TOLERANCE.check(&bad, &expected).unwrap_err();
        // The NaN is the worst element, the first is 10; all three are counted.
        let Mismatch::Values {
            first,
            worst,
            failures,
            total,
            ..
        } = err
        else {
            panic!("{err}")
        };
        assert_eq!((first.index, worst.index, failures), (10, 20, 3));
        assert_eq!(total, expected.len());
        assert!(TOLERANCE.check(&bad[1..], &expected).is_err());
    });
}

/// More heads than one query tile (128): each chunk is split into two head tiles, whose query
/// and output views are not contiguous.
#[test]
fn pa_more_heads_than_a_q_tile() {
    with_timeout(60, || {
        let chip = chip(2, &[]);
        let case = PaCase {
            batch: 18,
            heads: 130,
            d: 16,
            block: 8,
            ctx: 20,
            max_model_len: 32,
            seed: 5,
        };
        let inputs = make_inputs(&case);
        let (actual, report) = run_case(&chip, &case, &inputs, RuntimeEnv::default(), None);
        assert_matches(&actual, &golden(&case, &inputs));
        // 2 batch chunks (16 + 2) × 2 head tiles (128 + 2), 3 KV blocks each.
        assert_eq!(case.chunks(), 4);
        assert_eq!(report.tasks, 4 * (1 + 4 * 3));
    });
}
