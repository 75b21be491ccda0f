//! The README's level-2 snippet, whole (built by CI with `--all-targets`; run it with
//! `cargo run -p pto-kernels --example readme_l2`): the vector example on one chip, with ring 1
//! sized by the call config and every other value from the environment or the defaults.

use std::sync::Arc;

use pto_chip::memory::HostMemory;
use pto_chip::{ChipSpec, ChipWorker, EnvSource, RunContext};
use pto_types::{BufferId, CallConfig, DType, RuntimeEnv, TaskArgs, Tensor};

/// A host buffer of `n` f32 set to `value`, and a tensor over it.
fn vector(id: u64, n: usize, value: f32) -> std::io::Result<(Arc<HostMemory>, Tensor)> {
    let buf = HostMemory::new(n * 4)?;
    let bytes: Vec<u8> = std::iter::repeat_n(value.to_ne_bytes(), n)
        .flatten()
        .collect();
    buf.write_bytes(0, &bytes);
    let id = BufferId {
        owner_uid: 1,
        buffer_id: id,
        generation: 0,
    };
    let t = Tensor::contiguous(buf.buffer_ref(id), &[n as u32], DType::F32)
        .map_err(|e| std::io::Error::other(e.to_string()))?;
    Ok((buf, t))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    pto_kernels::link(); // keeps the built-in chip callables in this binary
    let chip = ChipWorker::new(ChipSpec::default(), EnvSource::process())?;
    let n = 16384;
    let ((_a, a), (_b, b), (f_buf, f)) =
        (vector(1, n, 2.0)?, vector(2, n, 3.0)?, vector(3, n, 0.0)?);
    let args = TaskArgs::new().input(&a).input(&b).output_existing(&f);
    // Ring 1 (the example's inner scope) gets a 128-task window; 0 leaves a ring unset.
    let cfg = CallConfig::with_runtime_env(RuntimeEnv::default().with_task_window([0, 128, 0, 0]));
    let report = chip.run("vector_example", &args, &cfg, &RunContext::default())?;
    println!("{}", report.sizing); // task_window=[16384(default), 128(call_config), …] heap=[…] …
    let out = f_buf.read_bytes(0, 4);
    let f0 = f32::from_ne_bytes([out[0], out[1], out[2], out[3]]);
    println!("f[0] = {f0}"); // (a+b+1)·(a+b+2) + (a+b) = 47 for a = 2, b = 3
    Ok(())
}
