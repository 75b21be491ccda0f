//! The OpenMP-tasks peer of `metg` (`csrc/stencil_omp.c`, built by `build.rs` with
//! `-fopenmp`): the same stencil_1d pattern and spin kernel as `omp task depend` tasks on a
//! team of OpenMP threads (the compiler's runtime: GCC's libgomp, or LLVM's libomp under clang),
//! called in this process so its rows come from the same run.

/// Why the peer cannot run in this build.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum OmpError {
    #[error("the OpenMP peer was not built: {0}")]
    NotBuilt(&'static str),
    #[error(
        "the OpenMP peer refused its arguments: width {width} (1 to 256 cells), team of {threads} (at least 1)"
    )]
    Arguments { width: u32, threads: i32 },
    #[error("OpenMP gave the team fewer than {0} threads")]
    Team(i32),
}

#[cfg(pto_openmp)]
mod ffi {
    unsafe extern "C" {
        /// Wall seconds of `steps` steps, or -1 (width or team size out of range) or -2 (a smaller
        /// team).
        pub(super) fn pto_omp_stencil_1d(
            steps: u32,
            width: u32,
            grain_ns: u64,
            threads: i32,
            taskwait_every: u32,
            kernel: extern "C" fn(u64),
        ) -> f64;
    }
}

/// How the creating thread issues the tasks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Issue {
    /// The whole graph at once, as Task Bench's OpenMP implementation does.
    Graph,
    /// A `taskwait` after every this many steps: the best libgomp does on this pattern, since
    /// its queue then stays under the limit past which the creator runs tasks itself
    /// (`csrc/stencil_omp.c`).
    TaskwaitEvery(u32),
}

/// Wall seconds of `steps` steps of stencil_1d of `width` cells, each task computing for
/// `grain_ns` ([`crate::spin::spin`]), on a team of `threads`.
pub fn stencil_1d_wall(
    steps: u32,
    width: u32,
    grain_ns: u64,
    threads: i32,
    issue: Issue,
) -> Result<f64, OmpError> {
    #[cfg(pto_openmp)]
    {
        // SAFETY: the C function takes plain integers and a pointer to a safe Rust function of
        // the signature it declares, touches only its own stack and the OpenMP runtime, and
        // returns before any task it created is still running (taskwait and the end of its
        // parallel region). The Rust function never unwinds into the C frames: a panic in an
        // `extern "C"` function aborts the process at its boundary.
        let every = match issue {
            Issue::Graph => 0,
            Issue::TaskwaitEvery(n) => n,
        };
        let kernel = crate::spin::pto_bench_spin;
        let wall =
            unsafe { ffi::pto_omp_stencil_1d(steps, width, grain_ns, threads, every, kernel) };
        if wall >= 0.0 {
            Ok(wall)
        } else if wall > -1.5 {
            Err(OmpError::Arguments { width, threads })
        } else {
            Err(OmpError::Team(threads))
        }
    }
    #[cfg(not(pto_openmp))]
    {
        let _ = (steps, width, grain_ns, threads, issue);
        Err(OmpError::NotBuilt(env!("PTO_OPENMP_MISSING")))
    }
}

#[cfg(all(test, pto_openmp))]
mod tests {
    use super::*;

    #[test]
    fn the_peer_runs_every_task_and_checks_its_arguments() {
        // 20 steps x 4 cells x 200 µs of computing on 2 threads: 8 ms of wall, less the few
        // per cent the calibrated kernel may run short; nearly none if the tasks did not run.
        crate::spin::calibrate(2);
        for issue in [Issue::Graph, Issue::TaskwaitEvery(3)] {
            let wall = stencil_1d_wall(20, 4, 200_000, 2, issue).unwrap();
            assert!(wall >= 0.006, "{wall}");
        }
        assert_eq!(
            stencil_1d_wall(1, 0, 1, 2, Issue::Graph),
            Err(OmpError::Arguments {
                width: 0,
                threads: 2
            })
        );
        assert_eq!(
            stencil_1d_wall(1, 257, 1, 2, Issue::Graph),
            Err(OmpError::Arguments {
                width: 257,
                threads: 2
            })
        );
    }
}
