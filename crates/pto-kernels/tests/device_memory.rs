//! Chip memory control at L2 (NODE_RUNTIME.md §1.6, §8.4 at the chip level): a device
//! allocation outlives the runs that read it and is accounted until it is freed.

mod common;

use common::{chip, f32_tensor, with_timeout};
use pto_chip::RunContext;
use pto_chip::memory::DeviceMemoryError;
use pto_types::{CallConfig, DType, TaskArgs, Tensor};

#[test]
fn a_device_weight_serves_two_runs_and_is_accounted_until_freed() {
    with_timeout(60, || {
        let chip = chip(1, &[]);
        let n = 1024usize;
        let before = chip.committed_device_memory();
        let id = chip.malloc((n * 4) as u64, 64).unwrap();
        assert_eq!(chip.committed_device_memory(), before + (n * 4) as u64);
        let weight: Vec<u8> = (0..n).flat_map(|i| (i as f32).to_le_bytes()).collect();
        chip.copy_to_device(id, 0, &weight).unwrap();
        let w =
            Tensor::contiguous(chip.device_buffer(id).unwrap(), &[n as u32], DType::F32).unwrap();
        let mut outputs = Vec::new();
        for scale in [1.0f32, 2.0] {
            let (_x_buf, x) = f32_tensor(n, scale);
            let (out_buf, out) = f32_tensor(n, 0.0);
            let args = TaskArgs::new().input(&w).input(&x).output_existing(&out);
            chip.run(
                "elementwise_add",
                &args,
                &CallConfig::default(),
                &RunContext::default(),
            )
            .unwrap();
            outputs.push(out_buf.read_f32(0, n));
        }
        for (i, (a, b)) in outputs[0].iter().zip(&outputs[1]).enumerate() {
            assert_eq!((*a, *b), (i as f32 + 1.0, i as f32 + 2.0));
        }
        assert_eq!(
            chip.copy_from_device(id, 4, 4).unwrap(),
            1.0f32.to_le_bytes()
        );
        assert!(matches!(
            chip.copy_to_device(id, (n * 4) as u64 - 2, &[0; 4]),
            Err(DeviceMemoryError::OutOfRange { .. })
        ));
        let with_arena = chip.committed_device_memory();
        assert_eq!(chip.free(id).unwrap(), (n * 4) as u64);
        assert_eq!(chip.committed_device_memory(), with_arena - (n * 4) as u64);
        assert!(matches!(
            chip.free(id),
            Err(DeviceMemoryError::UnknownAllocation { .. })
        ));
    });
}

#[test]
fn malloc_evicts_idle_arenas_before_failing() {
    with_timeout(60, || {
        pto_kernels::link();
        let spec = pto_chip::ChipSpec {
            clusters: 1,
            device_memory_bytes: 2 << 30,
            ..pto_chip::ChipSpec::default()
        };
        let chip = pto_chip::ChipWorker::new(spec, pto_types::ring_config::env::EnvSource::empty())
            .unwrap();
        let (_a, a) = f32_tensor(16, 1.0);
        let (_o, o) = f32_tensor(16, 0.0);
        let args = TaskArgs::new().input(&a).input(&a).output_existing(&o);
        chip.run(
            "elementwise_add",
            &args,
            &CallConfig::default(),
            &RunContext::default(),
        )
        .unwrap();
        // The idle default arena (1.3 GiB) must make way for a 1 GiB allocation.
        let id = chip.malloc(1 << 30, 64).expect("evicts the idle arena");
        assert_eq!(chip.committed_device_memory(), 1 << 30);
        assert!(matches!(
            chip.malloc((1 << 30) + 4096, 64),
            Err(DeviceMemoryError::Exhausted { .. })
        ));
        chip.free(id).unwrap();
    });
}
