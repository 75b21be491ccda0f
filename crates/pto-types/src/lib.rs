//! Contract types shared by every pto level.
//!
//! This crate is the bottom layer of the workspace (see `ARCHITECTURE.md`): the per-task ring
//! configuration ([`CallConfig`], [`RuntimeEnv`]) with its validation, environment tier and
//! resolver, the data types that describe tensors and task arguments, the tensor geometry both
//! levels' TensorMaps classify overlaps with ([`geometry`]), the binary records that cross
//! process boundaries, and the one allclose rule a result is checked against its golden with
//! ([`tolerance`]).
//!
//! Architecture invariants:
//! - no threads are started here and no process-wide state is read implicitly: the environment
//!   enters only through an explicit [`ring_config::env::EnvSource`];
//! - every binary format is defined once, here, with byte-wise encoders and decoders.
#![forbid(unsafe_code)]

pub mod args;
pub mod dtype;
pub mod error_code;
pub mod geometry;
pub mod node_wire;
pub mod ring_config;
pub mod suggest;
pub mod tolerance;
pub mod wait;
pub mod wire;

pub use args::{BufferId, BufferMemory, BufferRef, TaskArgs, Tensor, TensorTag};
pub use dtype::DType;
pub use error_code::ErrorCode;
pub use ring_config::env::{EnvError, EnvProblem, EnvSnapshot, EnvSource};
pub use ring_config::resolve::{Resolved, ResolvedSizing, SizeSource};
pub use ring_config::{
    CallConfig, ConfigError, RING_COUNT, Resource, RingValue, RuntimeEnv, TaskOverrides, WarCheck,
};
