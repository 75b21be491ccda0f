//! Recorded graphs in the chip jobs of an L3 run, in both endpoint modes (issue 26): a chip
//! callable records a random program (`pto_kernels::prop::program`) once per process and seed,
//! then replays it several times per job; later jobs on the same chip replay the recording
//! made by an earlier one. Verify mode is on (debug build), and every buffer must hold what
//! the sequential model computes.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use pto_chip::orch::{OrchArgs, OrchResult, OrchTensor, RootScope};
use pto_chip::replay::RecordedGraph;
use pto_kernels::prop::program::{
    Builder, EXT_SHAPES, Op, build, expected, initial_ext, record_program, replay_plan,
    seeded_choices,
};
use pto_node::HostBuffer;
use pto_types::{CallConfig, DType, RuntimeEnv, TaskArgs};

use crate::common::{Mode, both_modes, builder, chip, start, with_timeout};

type Recording = Arc<(Builder, Vec<Op>, RecordedGraph)>;

/// Recordings of this process, by seed, and how many were made.
static RECORDINGS: Mutex<Option<HashMap<u64, Recording>>> = Mutex::new(None);

/// The recording of `seed`, and whether this call made it.
fn recording(seed: u64) -> (Recording, bool) {
    let mut cache = RECORDINGS.lock().unwrap();
    let cache = cache.get_or_insert_with(HashMap::new);
    let fresh = !cache.contains_key(&seed);
    let rec = cache.entry(seed).or_insert_with(|| {
        let (builder, ops) = build(&seeded_choices(seed, 800));
        let graph = record_program(&format!("prop{seed}"), &builder, &ops);
        Arc::new((builder, ops, graph))
    });
    (Arc::clone(rec), fresh)
}

/// L2 orchestration `replay_prop`: tensors = 4 external buffers and the token; scalars =
/// (seed, replays). Replays alternate between the root and a nested scope. Finally writes 1
/// to the token if this job recorded the graph, 0 if it replayed an earlier job's recording.
fn replay_prop<'r>(s: &mut RootScope<'r>, a: &OrchArgs<'r>) -> OrchResult<()> {
    let seed: u64 = a.scalar(0);
    let replays: u64 = a.scalar(1);
    let (rec, fresh) = recording(seed);
    let ext: Vec<OrchTensor<'r>> = (0..5).map(|i| a.tensor(i)).collect();
    let plan: Vec<bool> = (0..replays).map(|i| i % 2 == 1).collect();
    replay_plan(s, &rec.2, &ext, &plan)?;
    s.set_tensor_data::<u32>(ext[4], &[0], u32::from(fresh))
}

pto_chip::register_chip!("replay_prop", replay_prop, expected_args = 7);

fn u32_buffer(w: &pto_node::Worker, data: &[u32]) -> HostBuffer {
    let b = w.create_buffer(data.len() * 4).unwrap();
    b.write_from(0, data).unwrap();
    b
}

fn replayed_programs_match_sequential(mode: Mode) {
    with_timeout(120, move || {
        let w = start(builder(mode, 2, 0));
        let callable = chip(&w, "replay_prop");
        let seeds = [3u64, 17, 99, 4242];
        let replays = 3u64;
        // Two jobs per seed on the same chip: the later one replays the earlier one's
        // recording (in child mode the chip is its own process, with its own recordings).
        let jobs: Vec<(u64, Vec<HostBuffer>)> = seeds
            .iter()
            .flat_map(|&seed| [seed, seed])
            .map(|seed| {
                let mut bufs: Vec<HostBuffer> =
                    initial_ext().iter().map(|d| u32_buffer(&w, d)).collect();
                bufs.push(u32_buffer(&w, &[0]));
                (seed, bufs)
            })
            .collect();
        let env = RuntimeEnv::default()
            .with_task_window(1024)
            .with_heap(4 << 20)
            .with_dep_pool(16384);
        let cfg = CallConfig::with_runtime_env(env);
        let jobs_ref = &jobs;
        w.run(
            move |orch, _, _| {
                for (k, (seed, bufs)) in jobs_ref.iter().enumerate() {
                    let mut args = TaskArgs::new();
                    for (i, b) in bufs.iter().enumerate() {
                        let shape: &[u32] = if i < 4 { EXT_SHAPES[i] } else { &[1] };
                        args = args.inout(&b.tensor(shape, DType::U32).unwrap());
                    }
                    args = args.scalar(*seed).scalar(replays);
                    orch.submit_next_level(&callable, args, &cfg, (k / 2) % 2)?;
                }
                Ok(())
            },
            TaskArgs::new(),
            CallConfig::default(),
        )
        .unwrap();
        for pair in jobs.chunks(2) {
            let tokens: Vec<u32> = pair
                .iter()
                .map(|(_, b)| b[4].read_vec(0, 1).unwrap()[0])
                .collect();
            assert_eq!(
                tokens.iter().sum::<u32>(),
                1,
                "seed {}: recorded once, replayed by the other job",
                pair[0].0
            );
        }
        for (seed, bufs) in &jobs {
            let (builder, ops) = build(&seeded_choices(*seed, 800));
            let want = expected(&builder, &ops, replays as usize);
            for (i, b) in bufs.iter().take(4).enumerate() {
                let got: Vec<u32> = b.read_vec(0, want[i].len()).unwrap();
                assert_eq!(got, want[i], "seed {seed}, buffer {i}");
            }
        }
    });
}

both_modes!(replayed_programs_match_sequential);
