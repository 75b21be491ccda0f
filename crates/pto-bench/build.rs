//! Builds the OpenMP-tasks peer of `pto bench metg` (`csrc/stencil_omp.c`) with the C
//! compiler's `-fopenmp`, after a probe program that calls the OpenMP runtime compiles and
//! links. Where either fails (no C compiler, no OpenMP header or runtime library), pto still
//! builds: the cfg `pto_openmp` stays unset and the bench reports the peer as not built, with
//! the reason. The runtime linked follows the compiler: GCC's libgomp, or LLVM's libomp under
//! clang; `PTO_OPENMP_RUNTIME` names it for the bench's rows.

use std::path::PathBuf;

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
    let (lib, runtime) = match build.try_get_compiler() {
        Ok(c) if c.is_like_clang() => ("omp", "LLVM libomp"),
        _ => ("gomp", "GCC libgomp"),
    };
    println!("cargo::rustc-env=PTO_OPENMP_RUNTIME={runtime}");
    let built = build
        .try_get_compiler()
        .map_err(|e| e.to_string())
        .and_then(|compiler| link_probe(&compiler))
        .and_then(|()| {
            build
                .try_compile("pto_stencil_omp")
                .map_err(|e| e.to_string())
        });
    match built {
        Ok(()) => {
            println!("cargo::rustc-link-lib={lib}");
            println!("cargo::rustc-cfg=pto_openmp");
        }
        Err(e) => {
            let reason = e.replace('\n', " ");
            println!("cargo::warning=the OpenMP peer of `pto bench metg` is not built: {reason}");
            println!("cargo::rustc-env=PTO_OPENMP_MISSING={reason}");
        }
    }
}

/// Compiles and links a program that calls the OpenMP runtime: a compiler that accepts
/// `-fopenmp` while its runtime library is missing fails here, instead of failing pto's link.
fn link_probe(compiler: &cc::Tool) -> Result<(), String> {
    #[expect(
        clippy::disallowed_methods,
        reason = "a build script's output directory comes from cargo's environment"
    )]
    let out = PathBuf::from(std::env::var("OUT_DIR").map_err(|e| e.to_string())?);
    let src = out.join("omp_probe.c");
    let program =
        "#include <omp.h>\nint main(void) { return omp_get_max_threads() > 0 ? 0 : 1; }\n";
    std::fs::write(&src, program).map_err(|e| e.to_string())?;
    let output = compiler
        .to_command()
        .arg(&src)
        .arg("-o")
        .arg(out.join("omp_probe"))
        .output()
        .map_err(|e| format!("running the C compiler: {e}"))?;
    if output.status.success() {
        Ok(())
    } else {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let first = stderr.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
        Err(format!(
            "an OpenMP program does not link with -fopenmp: {first}"
        ))
    }
}
