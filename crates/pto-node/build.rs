//! Compiles `proto/remote.proto` (the remote L3 service) with protox, a protobuf compiler in
//! Rust, so building needs no system `protoc`; tonic-prost-build writes the messages and the
//! client and server stubs to OUT_DIR (included by `src/remote/proto.rs`).

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/remote.proto");
    let descriptors = protox::compile(["remote.proto"], ["proto"])?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_fds(descriptors)?;
    Ok(())
}
