//! Builds the OpenMP-tasks peer of `pto bench metg` (`csrc/stencil_omp.c`) with the C
//! compiler's `-fopenmp`. Where that fails (no C compiler, no OpenMP runtime), pto still builds:
//! the cfg `pto_openmp` stays unset and the bench reports the peer as not built, with the reason.

fn main() {
    println!("cargo::rerun-if-changed=csrc/stencil_omp.c");
    println!("cargo::rustc-check-cfg=cfg(pto_openmp)");
    let mut build = cc::Build::new();
    build
        .file("csrc/stencil_omp.c")
        .flag("-fopenmp")
        .opt_level(2)
        .warnings(true)
        .cargo_warnings(false);
    match build.try_compile("pto_stencil_omp") {
        Ok(()) => {
            println!("cargo::rustc-link-lib=gomp");
            println!("cargo::rustc-cfg=pto_openmp");
        }
        Err(e) => {
            let reason = e.to_string().replace('\n', " ");
            println!("cargo::warning=the OpenMP peer of `pto bench metg` is not built: {reason}");
            println!("cargo::rustc-env=PTO_OPENMP_MISSING={reason}");
        }
    }
}
