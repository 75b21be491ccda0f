//! The README's replay example (`cargo run -p pto-kernels --example readme_replay`): a step of
//! two vector additions recorded once as a graph, then replayed ten times in one chip job,
//! each replay's input the previous one's output.

use std::sync::{Arc, OnceLock};

use pto_chip::memory::HostMemory;
use pto_chip::orch::{KernelArgs, OrchArgs, OrchResult, RootScope, TensorCreateInfo};
use pto_chip::replay::{GraphInput, RecordedGraph};
use pto_chip::{ChipSpec, ChipWorker, EnvSource, RunContext};
use pto_kernels::vector::ADD;
use pto_sizing::advise::{AdviseFormat, Headroom, advise_graph};
use pto_types::{BufferId, CallConfig, DType, TaskArgs, Tensor};

const N: u32 = 1024;

/// One step, recorded once (no chip needed): y = x + x, z = y + y; y stays inside the graph.
fn step() -> &'static RecordedGraph {
    static STEP: OnceLock<RecordedGraph> = OnceLock::new();
    STEP.get_or_init(|| {
        let x = GraphInput::new(&[N], DType::F32).expect("a valid shape");
        RecordedGraph::record("step", &[x], |r, ins| {
            let ci = TensorCreateInfo::new(&[N], DType::F32);
            let double = |t| KernelArgs::new().input(t).input(t).output(ci);
            let y = r.submit_aiv(ADD, double(ins[0]))?.tensor(0);
            let z = r.submit_aiv(ADD, double(y))?.tensor(0);
            Ok(vec![z])
        })
        .expect("a valid graph")
    })
}

/// The chip job: ten replays chained through their outputs, then out = x + 0.
fn ten_steps<'r>(s: &mut RootScope<'r>, a: &OrchArgs<'r>) -> OrchResult<()> {
    let mut x = a.tensor(0);
    for _ in 0..10 {
        x = s.replay(step(), &[x])?[0];
    }
    let args = KernelArgs::new().input(x).input(a.tensor(1));
    s.submit_aiv(ADD, args.output_existing(a.tensor(2)))?;
    Ok(())
}

/// A host buffer of N f32 set to `value`, and a tensor over it.
fn vector(id: u64, value: f32) -> Result<(Arc<HostMemory>, Tensor), Box<dyn std::error::Error>> {
    let buf = HostMemory::new(N as usize * 4)?;
    buf.write_f32(0, &vec![value; N as usize]);
    let id = BufferId {
        owner_uid: 2,
        buffer_id: id,
        generation: 0,
    };
    let t = Tensor::contiguous(buf.buffer_ref(id), &[N], DType::F32)?;
    Ok((buf, t))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    pto_kernels::link(); // keeps the built-in kernels in this binary
    // Sized before it runs: ten replays' needs through the advice formulas.
    let advice = advise_graph(step(), 0, 10, Headroom::DEFAULT);
    print!("{}", advice.render(AdviseFormat::Env));
    let chip = ChipWorker::new(ChipSpec::default(), EnvSource::process())?;
    let ((_x, x), (_z, zero), (out_buf, out)) = (vector(1, 1.0)?, vector(2, 0.0)?, vector(3, 0.0)?);
    let args = TaskArgs::new().input(&x).input(&zero).output_existing(&out);
    let report = chip.run_fn(
        ten_steps,
        &args,
        &CallConfig::default(),
        &RunContext::default(),
    )?;
    let out0 = out_buf.read_f32(0, 1)[0];
    println!("{} tasks, out[0] = {out0}", report.tasks); // 21 tasks, 4^10 = 1048576
    assert_eq!(out0, 1_048_576.0);
    Ok(())
}
