//! The generated messages and stubs of `proto/remote.proto` (package `pto.remote.v1`).
#![allow(missing_docs, unreachable_pub, clippy::all, clippy::pedantic)]

tonic::include_proto!("pto.remote.v1");
