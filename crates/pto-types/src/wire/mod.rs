//! Binary records that cross process boundaries (RING_CONFIG.md §9, NODE_RUNTIME.md §4.5).
//!
//! Every record is defined once, here, as named layout constants with a byte-wise encoder and
//! decoder: fields are read and written with `to_le_bytes` / `from_le_bytes` at their offsets,
//! never by casting a buffer to a struct, so a record may sit at any alignment in any buffer.
//! Each record starts with a magic and a version number, and its tests round-trip it and pin
//! its bytes (STYLE.md habit 17): once a format has been used it is stable, and a change gets a
//! new version constant.
//!
//! Records:
//! - [`call_config_record`]: the `CallConfig` record, version 1 (RING_CONFIG.md §9.1), carried
//!   by the mailbox task frame, the L4 → L3 path and the remote task request.

pub mod call_config_record;

pub use call_config_record::{WireError, decode_call_config, encode_call_config, encode_into};
