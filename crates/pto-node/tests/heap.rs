//! `orch.alloc` from the L3 heap rings (NODE_RUNTIME.md §9 rows 38–41; §2.8).

use std::time::{Duration, Instant};

use pto_node::{AllocError, MAX_SCOPE_DEPTH, OrchError, ScopeError, SubmitRunError};
use pto_types::{CallConfig, DType, TaskArgs};

use crate::common::*;

const KIB: u32 = 1024;

fn n38_alloc_writer_then_reader_and_reclaim(mode: Mode) {
    with_timeout(20, move || {
        let w = start(builder(mode, 0, 2).heap_ring_size(2 << 20));
        let fill = filler(&w);
        let copy = copier(&w);
        let (out_buf, out) = buf(&w, 256 * KIB as usize, 0.0);
        let report = w
            .run(
                move |orch, _, _| {
                    let t = orch.alloc(&[256 * KIB], DType::F32)?; // 1 MiB
                    orch.submit_sub(
                        &fill,
                        TaskArgs::new().inout(&t).scalar(4.5f32).scalar(20u64),
                    )?;
                    orch.submit_sub(&copy, TaskArgs::new().input(&t).output_existing(&out))?;
                    Ok(())
                },
                TaskArgs::new(),
                CallConfig::default(),
            )
            .unwrap();
        assert_eq!(
            report.tasks[1].producers.len(),
            1,
            "the reader follows the writer"
        );
        assert!(report.tasks[1].dispatched.unwrap() >= report.tasks[0].finished.unwrap());
        assert!(
            out_buf
                .read_vec::<f32>(0, 256 * KIB as usize)
                .unwrap()
                .iter()
                .all(|&v| v == 4.5)
        );
        assert_eq!(w.stats().heap_in_use, [0; 4], "heap bytes in use back to 0");
        assert_eq!(w.stats().live_tasks, 0);
    });
}

/// Runs `f` and returns the `AllocError` it propagated.
fn alloc_error(
    w: &pto_node::Worker,
    f: impl FnOnce(&mut pto_node::Orchestrator<'_>) -> Result<(), OrchError> + Send + 'static,
) -> AllocError {
    let err = w
        .submit(
            move |orch, _, _| f(orch),
            TaskArgs::new(),
            CallConfig::default(),
        )
        .unwrap_err();
    match err {
        SubmitRunError::Orchestration {
            source: OrchError::Alloc(e),
            ..
        } => e,
        other => panic!("expected an alloc error, got {other:?}"),
    }
}

fn n39_provable_exhaustion_fails_at_once(mode: Mode) {
    with_timeout(20, move || {
        let w = start(builder(mode, 0, 1).heap_alloc_timeout(Duration::from_secs(30)));
        let started = Instant::now();
        let e = alloc_error(&w, |orch| {
            let _a = orch.alloc(&[150 * KIB], DType::F32)?; // 600 KiB
            let _b = orch.alloc(&[150 * KIB], DType::F32)?;
            Ok(())
        });
        assert!(started.elapsed() < Duration::from_secs(1));
        assert_eq!(
            e,
            AllocError::HeapExhausted {
                ring: 0,
                requested: 600 * 1024,
                capacity: 1 << 20,
                in_use: 600 * 1024,
                provable: true
            }
        );
        assert!(e.to_string().contains("heap_ring_size"), "{e}");
        assert!(matches!(
            alloc_error(&w, |orch| orch
                .alloc(&[300 * KIB], DType::F32)
                .map(|_| ())
                .map_err(Into::into)),
            AllocError::TooLarge { .. }
        ));
        assert_eq!(w.stats().heap_in_use, [0; 4]);
    });
}

fn n40_unprovable_exhaustion_times_out(mode: Mode) {
    with_timeout(20, move || {
        let w = start(builder(mode, 0, 1).heap_alloc_timeout(Duration::from_millis(200)));
        let s = sleeper(&w);
        let (tx, rx) = std::sync::mpsc::channel();
        let e = alloc_error(&w, move |orch| {
            orch.scope(|o| {
                let t = o.alloc(&[150 * KIB], DType::F32)?;
                o.submit_sub(&s, TaskArgs::new().input(&t).scalar(2000u64))?;
                Ok(())
            })?;
            let started = Instant::now();
            let r = orch.scope(|o| o.alloc(&[150 * KIB], DType::F32).map_err(Into::into));
            tx.send(started.elapsed()).unwrap();
            r.map(|_| ())
        });
        let waited = rx.recv().unwrap();
        assert!(
            matches!(
                e,
                AllocError::HeapExhausted {
                    ring: 1,
                    provable: false,
                    ..
                }
            ),
            "{e:?}"
        );
        assert!(
            waited >= Duration::from_millis(200) && waited < Duration::from_secs(5),
            "{waited:?}"
        );
    });
}

fn n41_alloc_waits_for_the_reader_to_finish(mode: Mode) {
    with_timeout(20, move || {
        let w = start(builder(mode, 0, 1));
        let s = sleeper(&w);
        let (tx, rx) = std::sync::mpsc::channel();
        let report = w
            .run(
                move |orch, _, _| {
                    orch.scope(|o| {
                        let t = o.alloc(&[150 * KIB], DType::F32)?;
                        o.submit_sub(&s, TaskArgs::new().input(&t).scalar(100u64).label("reader"))?;
                        Ok(())
                    })?;
                    orch.scope(|o| {
                        let _t = o.alloc(&[150 * KIB], DType::F32)?;
                        tx.send(Instant::now()).unwrap();
                        Ok(())
                    })
                },
                TaskArgs::new(),
                CallConfig::default(),
            )
            .expect("the second alloc succeeds once the reader is done");
        let allocated = rx.recv().unwrap();
        let reader = report.task("reader").unwrap();
        assert!(allocated >= report.at(reader.finished.unwrap()));
        assert_eq!(w.stats().heap_in_use, [0; 4]);
    });
}

/// Block scopes (`enter_scope`/`exit_scope`, what Python's `with orch.scope():` uses) allocate
/// from the depth's ring and release like closure scopes; the outer scope cannot be exited.
fn block_scopes_release_like_closure_scopes(mode: Mode) {
    with_timeout(20, move || {
        let w = start(builder(mode, 0, 1).heap_ring_size(2 << 20));
        let fill = filler(&w);
        let (tx, rx) = std::sync::mpsc::channel();
        w.run(
            move |orch, _, _| {
                assert_eq!(orch.exit_scope(), Err(ScopeError::NotOpen));
                orch.enter_scope()?;
                assert_eq!(orch.depth(), 1);
                let t = orch.alloc(&[64 * KIB], DType::F32)?;
                orch.submit_sub(&fill, TaskArgs::new().inout(&t).scalar(1.0f32).scalar(1u64))?;
                orch.exit_scope()?;
                assert_eq!(orch.depth(), 0);
                for _ in 1..MAX_SCOPE_DEPTH {
                    orch.enter_scope()?;
                }
                tx.send(orch.enter_scope()).unwrap();
                Ok(()) // the open scopes end with the function
            },
            TaskArgs::new(),
            CallConfig::default(),
        )
        .unwrap();
        assert_eq!(
            rx.recv().unwrap(),
            Err(ScopeError::TooDeep {
                max: MAX_SCOPE_DEPTH
            })
        );
        assert_eq!(w.stats().heap_in_use, [0; 4], "the ring-1 slab came back");
    });
}

both_modes!(
    n38_alloc_writer_then_reader_and_reclaim,
    block_scopes_release_like_closure_scopes,
    n39_provable_exhaustion_fails_at_once,
    n40_unprovable_exhaustion_times_out,
    n41_alloc_waits_for_the_reader_to_finish,
);
