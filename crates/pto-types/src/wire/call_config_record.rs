//! The `CallConfig` record, version 1: implements RING_CONFIG.md §9.1.
//!
//! A fixed-size, little-endian record that carries a [`CallConfig`] by value from a submitting
//! level to the chip (mailbox task frame, L4 → L3 child, remote task request). The layout is the
//! set of `*_OFFSET` / `*_LEN` constants below; the tests pin them against the table of §9.1, so
//! the table and these constants are the only places where offsets are written down.
//!
//! Encoding ([`encode_into`], [`encode_call_config`]) writes every byte of the record, zeros
//! included, so a longer prefix left in a reused frame by a previous task can never leak into
//! the next one. Decoding ([`decode_call_config`]) reads each field with `from_le_bytes` from a
//! byte slice at its offset (any alignment), checks the record's structure in the order of the
//! table, and finally runs [`CallConfig::validate`] (checkpoint C5 of RING_CONFIG.md §3.1).
//! A record that decodes successfully is canonical: encoding the decoded value gives back the
//! same bytes.

use std::fmt;

use crate::ring_config::{
    CallConfig, ConfigError, MAX_OUTPUT_PREFIX_BYTES, RING_COUNT, RuntimeEnv,
};

/// The record's magic, ASCII `PCFG`.
pub const MAGIC: [u8; 4] = *b"PCFG";
/// The record version this codec writes and the only one it reads.
///
/// Version history: 1 = the initial layout of RING_CONFIG.md §9.1.
pub const VERSION: u16 = 1;
/// Size of a version-1 record in bytes; also the value of its `record_len` field.
pub const RECORD_LEN: usize = 1144;

/// Offset of the magic ([`MAGIC`]).
pub const MAGIC_OFFSET: usize = 0;
/// Offset of the `u16` version.
pub const VERSION_OFFSET: usize = 4;
/// Offset of the `u16` record length.
pub const RECORD_LEN_OFFSET: usize = 6;
/// Offset of the `u32` `aicpu_thread_num`.
pub const AICPU_THREAD_NUM_OFFSET: usize = 8;
/// Offset of the `u8` `enable_chip_swimlane`.
pub const SWIMLANE_OFFSET: usize = 12;
/// Offset of the flags byte ([`FLAG_DEP_GEN`], [`FLAG_SCOPE_STATS`]).
pub const FLAGS_OFFSET: usize = 13;
/// Offset of the first reserved area (must be zero).
pub const RESERVED_FLAGS_OFFSET: usize = 14;
/// Length of the first reserved area.
pub const RESERVED_FLAGS_LEN: usize = 2;
/// Offset of `runtime_env.ring_task_window`: [`RING_COUNT`] `u64`s, ring `i` at
/// `RING_TASK_WINDOW_OFFSET + RING_ENTRY_LEN * i`.
pub const RING_TASK_WINDOW_OFFSET: usize = 16;
/// Offset of `runtime_env.ring_heap`, laid out like the task window.
pub const RING_HEAP_OFFSET: usize = 48;
/// Offset of `runtime_env.ring_dep_pool`, laid out like the task window.
pub const RING_DEP_POOL_OFFSET: usize = 80;
/// Size of one per-ring `u64` entry.
pub const RING_ENTRY_LEN: usize = 8;
/// Size of one per-ring array (all rings of one resource).
pub const RING_ARRAY_LEN: usize = RING_ENTRY_LEN * RING_COUNT;
/// Offset of the `u16` output prefix length (0 = no prefix).
pub const OUTPUT_PREFIX_LEN_OFFSET: usize = 112;
/// Offset of the second reserved area (must be zero).
pub const RESERVED_PREFIX_OFFSET: usize = 114;
/// Length of the second reserved area.
pub const RESERVED_PREFIX_LEN: usize = 6;
/// Offset of the output prefix bytes; the bytes after the prefix's length are zero padding.
pub const OUTPUT_PREFIX_OFFSET: usize = 120;
/// Room for the output prefix, equal to the longest legal prefix.
pub const OUTPUT_PREFIX_CAPACITY: usize = 1024;

/// Flags bit: `enable_dep_gen`.
pub const FLAG_DEP_GEN: u8 = 1 << 0;
/// Flags bit: `enable_scope_stats`.
pub const FLAG_SCOPE_STATS: u8 = 1 << 1;
/// Flags bit: `track_war`.
pub const FLAG_TRACK_WAR: u8 = 1 << 2;
/// Flags bits 3-4: `war_check` ([`crate::WarCheck::code`]).
pub const WAR_CHECK_SHIFT: u32 = 3;
/// The `war_check` bits of the flags byte.
pub const WAR_CHECK_MASK: u8 = 0b11 << WAR_CHECK_SHIFT;
/// Every flags bit version 1 defines; any other bit set is [`WireError::UnknownFlags`]. Bits
/// 2-4 came after the first layout: a decoder that predates them rejects a record that sets
/// them, so a setting is never silently dropped.
pub const KNOWN_FLAGS: u8 = FLAG_DEP_GEN | FLAG_SCOPE_STATS | FLAG_TRACK_WAR | WAR_CHECK_MASK;

/// [`RECORD_LEN`] as stored in the `u16` record length field.
const RECORD_LEN_FIELD: u16 = RECORD_LEN as u16;

// The layout is contiguous, ends exactly at RECORD_LEN, and agrees with the config rules.
const _: () = {
    assert!(RECORD_LEN <= u16::MAX as usize);
    assert!(MAGIC_OFFSET + MAGIC.len() == VERSION_OFFSET);
    assert!(VERSION_OFFSET + size_of::<u16>() == RECORD_LEN_OFFSET);
    assert!(RECORD_LEN_OFFSET + size_of::<u16>() == AICPU_THREAD_NUM_OFFSET);
    assert!(AICPU_THREAD_NUM_OFFSET + size_of::<u32>() == SWIMLANE_OFFSET);
    assert!(SWIMLANE_OFFSET + 1 == FLAGS_OFFSET);
    assert!(FLAGS_OFFSET + 1 == RESERVED_FLAGS_OFFSET);
    assert!(RESERVED_FLAGS_OFFSET + RESERVED_FLAGS_LEN == RING_TASK_WINDOW_OFFSET);
    assert!(RING_TASK_WINDOW_OFFSET + RING_ARRAY_LEN == RING_HEAP_OFFSET);
    assert!(RING_HEAP_OFFSET + RING_ARRAY_LEN == RING_DEP_POOL_OFFSET);
    assert!(RING_DEP_POOL_OFFSET + RING_ARRAY_LEN == OUTPUT_PREFIX_LEN_OFFSET);
    assert!(OUTPUT_PREFIX_LEN_OFFSET + size_of::<u16>() == RESERVED_PREFIX_OFFSET);
    assert!(RESERVED_PREFIX_OFFSET + RESERVED_PREFIX_LEN == OUTPUT_PREFIX_OFFSET);
    assert!(OUTPUT_PREFIX_OFFSET + OUTPUT_PREFIX_CAPACITY == RECORD_LEN);
    assert!(OUTPUT_PREFIX_CAPACITY == MAX_OUTPUT_PREFIX_BYTES);
    assert!(RING_ENTRY_LEN == size_of::<u64>());
};

/// Why a `CallConfig` record could not be encoded or decoded.
///
/// Every variant but [`WireError::Invalid`] is a structural problem of the record (reply code
/// 1001 `BAD_FRAME` at a chip child); `Invalid` is a well-formed record holding a config that
/// breaks a rule of RING_CONFIG.md §3 (reply code 1003 `INVALID_CONFIG`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WireError {
    /// Encoding: the output buffer is shorter than a record.
    OutputTooShort {
        /// Bytes a record needs ([`RECORD_LEN`]).
        need: usize,
        /// Bytes the buffer has.
        got: usize,
    },
    /// Decoding: the input is shorter than a record.
    Truncated {
        /// Bytes a record needs ([`RECORD_LEN`]).
        need: usize,
        /// Bytes the input has.
        got: usize,
    },
    /// The magic is not [`MAGIC`].
    BadMagic {
        /// The four bytes found instead.
        found: [u8; 4],
    },
    /// The version is not [`VERSION`].
    UnsupportedVersion {
        /// The version in the record.
        found: u16,
        /// The version this codec reads.
        supported: u16,
    },
    /// The record length field is not [`RECORD_LEN`].
    BadLength {
        /// The length in the record.
        found: u16,
    },
    /// The flags byte has bits outside [`KNOWN_FLAGS`].
    UnknownFlags {
        /// The whole flags byte.
        flags: u8,
    },
    /// A reserved byte is not zero.
    NonZeroReserved {
        /// Offset of the first non-zero reserved byte within the record.
        offset: usize,
    },
    /// The output prefix is longer than [`OUTPUT_PREFIX_CAPACITY`]: when decoding, the length
    /// field says so; when encoding, the config's prefix is too long to be carried.
    PrefixTooLong {
        /// The prefix length in bytes.
        len: usize,
    },
    /// Encoding: the config's prefix is `Some("")`, which the record cannot carry (a length
    /// of 0 means `None`).
    EmptyPrefix,
    /// The output prefix bytes are not UTF-8.
    PrefixNotUtf8 {
        /// Offset within the record of the first byte that is not part of valid UTF-8.
        offset: usize,
    },
    /// The output prefix contains a NUL byte.
    PrefixHasNul {
        /// Offset within the record of the first NUL byte.
        offset: usize,
    },
    /// A byte of the output prefix area after the prefix is not zero.
    NonZeroPadding {
        /// Offset within the record of the first non-zero padding byte.
        offset: usize,
    },
    /// The record is well formed but its config breaks a rule (`CallConfig::validate`).
    Invalid(ConfigError),
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WireError::OutputTooShort { need, got } => write!(
                f,
                "CallConfig record: the output buffer is {got} bytes; a record needs {need}"
            ),
            WireError::Truncated { need, got } => write!(
                f,
                "CallConfig record truncated: got {got} bytes, a record needs {need}"
            ),
            WireError::BadMagic { found } => write!(
                f,
                "CallConfig record: magic at offset {MAGIC_OFFSET} is {}, expected {} (\"PCFG\")",
                hex(found),
                hex(&MAGIC)
            ),
            WireError::UnsupportedVersion { found, supported } => write!(
                f,
                "CallConfig record: version {found} at offset {VERSION_OFFSET} is not supported \
                 (supported: {supported})"
            ),
            WireError::BadLength { found } => write!(
                f,
                "CallConfig record: record_len at offset {RECORD_LEN_OFFSET} is {found}, \
                 expected {RECORD_LEN} for version {VERSION}"
            ),
            WireError::UnknownFlags { flags } => write!(
                f,
                "CallConfig record: flags at offset {FLAGS_OFFSET} are {flags:#04x}; unknown bits \
                 {:#04x} (known: {FLAG_DEP_GEN:#04x} enable_dep_gen, {FLAG_SCOPE_STATS:#04x} \
                 enable_scope_stats, {FLAG_TRACK_WAR:#04x} track_war, {WAR_CHECK_MASK:#04x} \
                 war_check)",
                flags & !KNOWN_FLAGS
            ),
            WireError::NonZeroReserved { offset } => write!(
                f,
                "CallConfig record: reserved byte at offset {offset} is not zero"
            ),
            WireError::PrefixTooLong { len } => write!(
                f,
                "CallConfig record: output_prefix is {len} bytes (length field at offset \
                 {OUTPUT_PREFIX_LEN_OFFSET}); the limit is {OUTPUT_PREFIX_CAPACITY}"
            ),
            WireError::EmptyPrefix => f.write_str(
                "CallConfig record: output_prefix is empty, which the record cannot carry \
                 (length 0 means no prefix); use None",
            ),
            WireError::PrefixNotUtf8 { offset } => write!(
                f,
                "CallConfig record: output_prefix is not UTF-8 (invalid byte at offset {offset})"
            ),
            WireError::PrefixHasNul { offset } => write!(
                f,
                "CallConfig record: output_prefix contains a NUL byte at offset {offset}"
            ),
            WireError::NonZeroPadding { offset } => write!(
                f,
                "CallConfig record: output_prefix padding byte at offset {offset} is not zero"
            ),
            WireError::Invalid(err) => {
                write!(f, "CallConfig record holds an invalid config: {err}")
            }
        }
    }
}

impl std::error::Error for WireError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            WireError::Invalid(err) => Some(err),
            _ => None,
        }
    }
}

/// Bytes as space-separated hex, for messages.
fn hex(bytes: &[u8]) -> String {
    let parts: Vec<String> = bytes.iter().map(|b| format!("{b:02x}")).collect();
    parts.join(" ")
}

/// Encodes `cfg` into the first [`RECORD_LEN`] bytes of `out`.
///
/// All [`RECORD_LEN`] bytes are written, zeros included; bytes of `out` after the record are
/// left untouched. The fields are encoded as they are, without validation, so a config that
/// breaks a rule of `CallConfig::validate` still encodes (and its decode then fails with
/// [`WireError::Invalid`]). Only values the layout cannot hold are refused, and then nothing
/// is written:
/// - `out` shorter than a record: [`WireError::OutputTooShort`];
/// - an `output_prefix` longer than [`OUTPUT_PREFIX_CAPACITY`] bytes: [`WireError::PrefixTooLong`];
/// - `output_prefix == Some("")` (a length of 0 means `None`): [`WireError::EmptyPrefix`].
pub fn encode_into(cfg: &CallConfig, out: &mut [u8]) -> Result<(), WireError> {
    let got = out.len();
    let Some(record) = out.first_chunk_mut::<RECORD_LEN>() else {
        return Err(WireError::OutputTooShort {
            need: RECORD_LEN,
            got,
        });
    };
    let prefix = match cfg.output_prefix.as_deref() {
        None => &[][..],
        Some("") => return Err(WireError::EmptyPrefix),
        Some(prefix) => prefix.as_bytes(),
    };
    if prefix.len() > OUTPUT_PREFIX_CAPACITY {
        return Err(WireError::PrefixTooLong { len: prefix.len() });
    }
    let Ok(prefix_len) = u16::try_from(prefix.len()) else {
        return Err(WireError::PrefixTooLong { len: prefix.len() });
    };

    let mut flags = 0;
    if cfg.enable_dep_gen {
        flags |= FLAG_DEP_GEN;
    }
    if cfg.enable_scope_stats {
        flags |= FLAG_SCOPE_STATS;
    }
    if cfg.track_war {
        flags |= FLAG_TRACK_WAR;
    }
    flags |= cfg.war_check.code() << WAR_CHECK_SHIFT;

    record.fill(0);
    put(record, MAGIC_OFFSET, &MAGIC);
    put(record, VERSION_OFFSET, &VERSION.to_le_bytes());
    put(record, RECORD_LEN_OFFSET, &RECORD_LEN_FIELD.to_le_bytes());
    put(
        record,
        AICPU_THREAD_NUM_OFFSET,
        &cfg.aicpu_thread_num.to_le_bytes(),
    );
    put(record, SWIMLANE_OFFSET, &[cfg.enable_chip_swimlane]);
    put(record, FLAGS_OFFSET, &[flags]);
    let env = &cfg.runtime_env;
    put_rings(record, RING_TASK_WINDOW_OFFSET, &env.ring_task_window);
    put_rings(record, RING_HEAP_OFFSET, &env.ring_heap);
    put_rings(record, RING_DEP_POOL_OFFSET, &env.ring_dep_pool);
    put(record, OUTPUT_PREFIX_LEN_OFFSET, &prefix_len.to_le_bytes());
    put(record, OUTPUT_PREFIX_OFFSET, prefix);
    Ok(())
}

/// Encodes `cfg` as a new record; see [`encode_into`] for what is written and what is refused
/// ([`WireError::PrefixTooLong`], [`WireError::EmptyPrefix`]).
pub fn encode_call_config(cfg: &CallConfig) -> Result<[u8; RECORD_LEN], WireError> {
    let mut record = [0; RECORD_LEN];
    encode_into(cfg, &mut record)?;
    Ok(record)
}

/// Decodes the record in the first [`RECORD_LEN`] bytes of `bytes` (any further bytes are
/// ignored; `bytes` may start at any alignment) and validates the config.
///
/// Checks run in this order and the first failure is returned: the input length
/// ([`WireError::Truncated`]), then the fields in offset order — magic, version, record length,
/// flags, first reserved area, prefix length, second reserved area, prefix bytes (UTF-8, then
/// NUL), prefix padding — and finally `CallConfig::validate` ([`WireError::Invalid`]).
pub fn decode_call_config(bytes: &[u8]) -> Result<CallConfig, WireError> {
    let Some(record) = bytes.first_chunk::<RECORD_LEN>() else {
        return Err(WireError::Truncated {
            need: RECORD_LEN,
            got: bytes.len(),
        });
    };

    let magic: [u8; 4] = read(record, MAGIC_OFFSET);
    if magic != MAGIC {
        return Err(WireError::BadMagic { found: magic });
    }
    let version = u16::from_le_bytes(read(record, VERSION_OFFSET));
    if version != VERSION {
        return Err(WireError::UnsupportedVersion {
            found: version,
            supported: VERSION,
        });
    }
    let record_len = u16::from_le_bytes(read(record, RECORD_LEN_OFFSET));
    if record_len != RECORD_LEN_FIELD {
        return Err(WireError::BadLength { found: record_len });
    }
    let aicpu_thread_num = u32::from_le_bytes(read(record, AICPU_THREAD_NUM_OFFSET));
    let [enable_chip_swimlane] = read(record, SWIMLANE_OFFSET);
    let [flags] = read(record, FLAGS_OFFSET);
    if flags & !KNOWN_FLAGS != 0 {
        return Err(WireError::UnknownFlags { flags });
    }
    if let Some(offset) = first_non_zero(record, RESERVED_FLAGS_OFFSET, RESERVED_FLAGS_LEN) {
        return Err(WireError::NonZeroReserved { offset });
    }
    let runtime_env = RuntimeEnv {
        ring_task_window: read_rings(record, RING_TASK_WINDOW_OFFSET),
        ring_heap: read_rings(record, RING_HEAP_OFFSET),
        ring_dep_pool: read_rings(record, RING_DEP_POOL_OFFSET),
    };
    let prefix_len = usize::from(u16::from_le_bytes(read(record, OUTPUT_PREFIX_LEN_OFFSET)));
    if prefix_len > OUTPUT_PREFIX_CAPACITY {
        return Err(WireError::PrefixTooLong { len: prefix_len });
    }
    if let Some(offset) = first_non_zero(record, RESERVED_PREFIX_OFFSET, RESERVED_PREFIX_LEN) {
        return Err(WireError::NonZeroReserved { offset });
    }
    let prefix_bytes = &record[OUTPUT_PREFIX_OFFSET..OUTPUT_PREFIX_OFFSET + prefix_len];
    let prefix = match std::str::from_utf8(prefix_bytes) {
        Ok(prefix) => prefix,
        Err(err) => {
            return Err(WireError::PrefixNotUtf8 {
                offset: OUTPUT_PREFIX_OFFSET + err.valid_up_to(),
            });
        }
    };
    if let Some(index) = prefix_bytes.iter().position(|&b| b == 0) {
        return Err(WireError::PrefixHasNul {
            offset: OUTPUT_PREFIX_OFFSET + index,
        });
    }
    let padding_offset = OUTPUT_PREFIX_OFFSET + prefix_len;
    if let Some(offset) = first_non_zero(record, padding_offset, RECORD_LEN - padding_offset) {
        return Err(WireError::NonZeroPadding { offset });
    }

    let cfg = CallConfig {
        aicpu_thread_num,
        enable_chip_swimlane,
        enable_dep_gen: flags & FLAG_DEP_GEN != 0,
        enable_scope_stats: flags & FLAG_SCOPE_STATS != 0,
        output_prefix: if prefix.is_empty() {
            None
        } else {
            Some(prefix.to_owned())
        },
        runtime_env,
        track_war: flags & FLAG_TRACK_WAR != 0,
        war_check: crate::WarCheck::from_code((flags & WAR_CHECK_MASK) >> WAR_CHECK_SHIFT)
            .expect("two bits hold every war_check code"),
    };
    if let Err(err) = cfg.validate() {
        return Err(WireError::Invalid(err));
    }
    Ok(cfg)
}

/// Copies `bytes` into `record` at `offset`.
fn put(record: &mut [u8; RECORD_LEN], offset: usize, bytes: &[u8]) {
    record[offset..offset + bytes.len()].copy_from_slice(bytes);
}

/// Writes one per-ring array, ring `i` at `offset + RING_ENTRY_LEN * i`.
fn put_rings(record: &mut [u8; RECORD_LEN], offset: usize, values: &[u64; RING_COUNT]) {
    for (ring, value) in values.iter().enumerate() {
        put(record, offset + RING_ENTRY_LEN * ring, &value.to_le_bytes());
    }
}

/// The `N` bytes of `record` at `offset`, copied out (no alignment assumed).
fn read<const N: usize>(record: &[u8; RECORD_LEN], offset: usize) -> [u8; N] {
    let mut out = [0; N];
    out.copy_from_slice(&record[offset..offset + N]);
    out
}

/// Reads one per-ring array, ring `i` at `offset + RING_ENTRY_LEN * i`.
fn read_rings(record: &[u8; RECORD_LEN], offset: usize) -> [u64; RING_COUNT] {
    std::array::from_fn(|ring| u64::from_le_bytes(read(record, offset + RING_ENTRY_LEN * ring)))
}

/// Offset of the first non-zero byte in `record[offset..offset + len]`.
fn first_non_zero(record: &[u8; RECORD_LEN], offset: usize, len: usize) -> Option<usize> {
    let index = record[offset..offset + len].iter().position(|&b| b != 0)?;
    Some(offset + index)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ring_config::{PLATFORM_MAX_AICPU_THREADS, Resource};
    use proptest::prelude::*;

    /// T64's config: every field set.
    fn t64_config() -> CallConfig {
        CallConfig {
            aicpu_thread_num: 2,
            enable_chip_swimlane: 3,
            enable_dep_gen: true,
            enable_scope_stats: true,
            output_prefix: Some("out/run1".into()),
            runtime_env: RuntimeEnv::default()
                .with_task_window([16, 32, 128, 256])
                .with_heap([10485760, 67108864, 1610612736, 4294967296])
                .with_dep_pool([64, 128, 256, 512]),
            track_war: false,
            war_check: crate::WarCheck::Auto,
        }
    }

    /// T65's config, whose record is the golden bytes and the base of the corruption table.
    fn t65_config() -> CallConfig {
        CallConfig {
            aicpu_thread_num: 2,
            enable_chip_swimlane: 3,
            enable_dep_gen: true,
            output_prefix: Some("/o".into()),
            runtime_env: RuntimeEnv::default().with_task_window([4, 8, 16, 32]),
            ..CallConfig::default()
        }
    }

    fn encode(cfg: &CallConfig) -> [u8; RECORD_LEN] {
        encode_call_config(cfg).unwrap()
    }

    /// Applies `corrupt` to T65's record and checks the decode error and that its message
    /// contains `text`.
    #[track_caller]
    fn check_corruption(corrupt: impl FnOnce(&mut Vec<u8>), expected: WireError, text: &str) {
        let mut bytes = encode(&t65_config()).to_vec();
        corrupt(&mut bytes);
        let err = decode_call_config(&bytes).unwrap_err();
        assert_eq!(err, expected);
        let shown = err.to_string();
        assert!(shown.contains(text), "{shown:?} does not contain {text:?}");
    }

    fn set_u16(bytes: &mut [u8], offset: usize, value: u16) {
        bytes[offset..offset + 2].copy_from_slice(&value.to_le_bytes());
    }

    #[test]
    fn layout_constants_match_the_table() {
        assert_eq!(MAGIC, [0x50, 0x43, 0x46, 0x47]);
        assert_eq!(VERSION, 1);
        assert_eq!(RECORD_LEN, 1144);
        assert_eq!(RECORD_LEN_FIELD.to_le_bytes(), [0x78, 0x04]);
        let table = [
            (MAGIC_OFFSET, 0),
            (VERSION_OFFSET, 4),
            (RECORD_LEN_OFFSET, 6),
            (AICPU_THREAD_NUM_OFFSET, 8),
            (SWIMLANE_OFFSET, 12),
            (FLAGS_OFFSET, 13),
            (RESERVED_FLAGS_OFFSET, 14),
            (RESERVED_FLAGS_LEN, 2),
            (RING_TASK_WINDOW_OFFSET, 16),
            (RING_HEAP_OFFSET, 48),
            (RING_DEP_POOL_OFFSET, 80),
            (RING_ENTRY_LEN, 8),
            (RING_ARRAY_LEN, 32),
            (OUTPUT_PREFIX_LEN_OFFSET, 112),
            (RESERVED_PREFIX_OFFSET, 114),
            (RESERVED_PREFIX_LEN, 6),
            (OUTPUT_PREFIX_OFFSET, 120),
            (OUTPUT_PREFIX_CAPACITY, 1024),
        ];
        for (i, (constant, spec)) in table.into_iter().enumerate() {
            assert_eq!(constant, spec, "row {i}");
        }
        assert_eq!((FLAG_DEP_GEN, FLAG_SCOPE_STATS, KNOWN_FLAGS), (1, 2, 0x1f));
        assert_eq!((FLAG_TRACK_WAR, WAR_CHECK_MASK), (4, 0x18));
    }

    #[test]
    fn t64_round_trip_full_config() {
        let cfg = t64_config();
        assert_eq!(cfg.validate(), Ok(()));
        let bytes = encode(&cfg);
        assert_eq!(decode_call_config(&bytes), Ok(cfg));
    }

    #[test]
    fn t65_golden_bytes() {
        let bytes = encode(&t65_config());
        assert_eq!(bytes.len(), 1144);
        let mut expected = [0u8; 1144];
        expected[0..16].copy_from_slice(&[
            0x50, 0x43, 0x46, 0x47, 0x01, 0x00, 0x78, 0x04, 0x02, 0x00, 0x00, 0x00, 0x03, 0x01,
            0x00, 0x00,
        ]);
        for (i, window) in [4u8, 8, 16, 32].into_iter().enumerate() {
            expected[16 + 8 * i] = window;
        }
        assert_eq!(expected[40..48], [0x20, 0, 0, 0, 0, 0, 0, 0]);
        expected[112..114].copy_from_slice(&[0x02, 0x00]);
        expected[120..122].copy_from_slice(&[0x2f, 0x6f]);
        for (offset, (got, want)) in bytes.iter().zip(expected).enumerate() {
            assert_eq!(*got, want, "byte {offset}");
        }
    }

    #[test]
    fn t66_decode_at_unaligned_offset() {
        let bytes = encode(&t64_config());
        // Junk after the record shows that only the first RECORD_LEN bytes are read.
        let mut buffer = vec![0xa5u8; RECORD_LEN + 9];
        buffer[1..1 + RECORD_LEN].copy_from_slice(&bytes);
        assert_eq!(decode_call_config(&buffer[1..]), Ok(t64_config()));
    }

    #[test]
    fn t67_each_corruption_gives_its_error() {
        assert_eq!(decode_call_config(&encode(&t65_config())), Ok(t65_config()));
        check_corruption(
            |b| b[0..4].copy_from_slice(b"PCFX"),
            WireError::BadMagic { found: *b"PCFX" },
            "magic at offset 0 is 50 43 46 58",
        );
        check_corruption(
            |b| set_u16(b, 4, 2),
            WireError::UnsupportedVersion {
                found: 2,
                supported: 1,
            },
            "version 2 at offset 4 is not supported (supported: 1)",
        );
        check_corruption(
            |b| set_u16(b, 6, 1143),
            WireError::BadLength { found: 1143 },
            "record_len at offset 6 is 1143, expected 1144",
        );
        check_corruption(
            |b| b[14] = 1,
            WireError::NonZeroReserved { offset: 14 },
            "reserved byte at offset 14 is not zero",
        );
        check_corruption(
            |b| b[13] |= 1 << 5,
            WireError::UnknownFlags { flags: 0x21 },
            "unknown bits 0x20",
        );
        check_corruption(
            |b| set_u16(b, 112, 1025),
            WireError::PrefixTooLong { len: 1025 },
            "output_prefix is 1025 bytes (length field at offset 112); the limit is 1024",
        );
        check_corruption(
            |b| b.truncate(1000),
            WireError::Truncated {
                need: 1144,
                got: 1000,
            },
            "got 1000 bytes, a record needs 1144",
        );
        check_corruption(
            |b| b[120..122].copy_from_slice(&[0xff, 0xfe]),
            WireError::PrefixNotUtf8 { offset: 120 },
            "not UTF-8 (invalid byte at offset 120)",
        );
        check_corruption(
            |b| {
                set_u16(b, 112, 2);
                b[200] = 1;
            },
            WireError::NonZeroPadding { offset: 200 },
            "padding byte at offset 200 is not zero",
        );
    }

    #[test]
    fn more_corruptions_name_their_offset() {
        check_corruption(
            |b| b[117] = 9,
            WireError::NonZeroReserved { offset: 117 },
            "offset 117",
        );
        check_corruption(
            |b| b[15] = 1,
            WireError::NonZeroReserved { offset: 15 },
            "offset 15",
        );
        check_corruption(
            |b| b[121] = 0,
            WireError::PrefixHasNul { offset: 121 },
            "NUL byte at offset 121",
        );
        // "/" followed by the first byte of a two-byte character cut by the length.
        check_corruption(
            |b| b[121] = 0xc3,
            WireError::PrefixNotUtf8 { offset: 121 },
            "offset 121",
        );
        // No prefix: the whole prefix area is padding.
        check_corruption(
            |b| set_u16(b, 112, 0),
            WireError::NonZeroPadding { offset: 120 },
            "offset 120",
        );
        check_corruption(
            |b| b[RECORD_LEN - 1] = 1,
            WireError::NonZeroPadding { offset: 1143 },
            "offset 1143",
        );
        check_corruption(
            |b| b.clear(),
            WireError::Truncated { need: 1144, got: 0 },
            "got 0 bytes",
        );
    }

    #[test]
    fn checks_run_in_offset_order() {
        // Each corruption pair: the earlier field's error wins.
        check_corruption(
            |b| {
                b[0] = b'X';
                set_u16(b, 4, 7);
            },
            WireError::BadMagic { found: *b"XCFG" },
            "magic",
        );
        check_corruption(
            |b| {
                set_u16(b, 4, 0);
                set_u16(b, 6, 0);
            },
            WireError::UnsupportedVersion {
                found: 0,
                supported: 1,
            },
            "version 0",
        );
        check_corruption(
            |b| {
                set_u16(b, 6, 0);
                b[13] = 0xff;
            },
            WireError::BadLength { found: 0 },
            "record_len",
        );
        check_corruption(
            |b| {
                b[13] = 0x80;
                b[14] = 1;
            },
            WireError::UnknownFlags { flags: 0x80 },
            "flags",
        );
        check_corruption(
            |b| {
                b[15] = 1;
                set_u16(b, 112, 5000);
            },
            WireError::NonZeroReserved { offset: 15 },
            "reserved",
        );
        check_corruption(
            |b| {
                set_u16(b, 112, 1025);
                b[114] = 1;
            },
            WireError::PrefixTooLong { len: 1025 },
            "1025 bytes",
        );
        check_corruption(
            |b| {
                b[119] = 1;
                b[120] = 0xff;
            },
            WireError::NonZeroReserved { offset: 119 },
            "reserved",
        );
        check_corruption(
            |b| {
                b[120] = 0xff;
                b[121] = 0;
            },
            WireError::PrefixNotUtf8 { offset: 120 },
            "UTF-8",
        );
        check_corruption(
            |b| {
                b[120] = 0;
                b[130] = 1;
            },
            WireError::PrefixHasNul { offset: 120 },
            "NUL",
        );
        // Structure before validation: an out-of-range swimlane level does not hide padding.
        check_corruption(
            |b| {
                b[12] = 9;
                b[300] = 1;
            },
            WireError::NonZeroPadding { offset: 300 },
            "padding",
        );
    }

    #[test]
    fn t68_hand_built_invalid_window_is_invalid() {
        let mut record = [0u8; 1144];
        record[0..4].copy_from_slice(b"PCFG");
        record[4..6].copy_from_slice(&[0x01, 0x00]);
        record[6..8].copy_from_slice(&[0x78, 0x04]);
        record[16] = 48;
        let err = decode_call_config(&record).unwrap_err();
        assert_eq!(
            err,
            WireError::Invalid(ConfigError::TaskWindow { ring: 0, value: 48 })
        );
        assert!(
            err.to_string()
                .contains("runtime_env.ring_task_window[0]=48: must be a power of two")
        );
        let source = std::error::Error::source(&err).map(ToString::to_string);
        assert_eq!(
            source,
            Some(ConfigError::TaskWindow { ring: 0, value: 48 }.to_string())
        );
        // The encoder writes invalid values as they are: it produces the same record.
        let cfg =
            CallConfig::with_runtime_env(RuntimeEnv::default().with_task_window([48, 0, 0, 0]));
        assert_eq!(encode(&cfg), record);
    }

    #[test]
    fn decode_runs_every_validation_rule() {
        let invalid = [
            (
                CallConfig {
                    aicpu_thread_num: 1,
                    ..CallConfig::default()
                },
                ConfigError::AicpuThreadNum {
                    value: 1,
                    max: PLATFORM_MAX_AICPU_THREADS,
                },
            ),
            (
                CallConfig {
                    enable_chip_swimlane: 5,
                    output_prefix: Some("o".into()),
                    ..CallConfig::default()
                },
                ConfigError::SwimlaneLevel { value: 5 },
            ),
            (
                CallConfig {
                    enable_scope_stats: true,
                    ..CallConfig::default()
                },
                ConfigError::MissingOutputPrefix {
                    enabled: vec!["enable_scope_stats"],
                },
            ),
            (
                CallConfig::with_runtime_env(RuntimeEnv::default().with_heap([0, 0, 0, 1030])),
                ConfigError::Heap {
                    ring: 3,
                    value: 1030,
                },
            ),
        ];
        for (cfg, expected) in invalid {
            let decoded = decode_call_config(&encode(&cfg));
            assert_eq!(decoded, Err(WireError::Invalid(expected)));
        }
    }

    #[test]
    fn t69_shorter_prefix_after_longer_in_same_frame() {
        let long = CallConfig {
            output_prefix: Some("x".repeat(40)),
            ..t65_config()
        };
        assert_eq!(long.output_prefix.as_ref().map(String::len), Some(40));
        // A frame with the record at an 8-aligned offset, as in the mailbox.
        let record_at = 256;
        let mut frame = vec![0u8; 2048];
        frame[record_at + RECORD_LEN..].fill(0x77);
        encode_into(&long, &mut frame[record_at..]).unwrap();
        assert_eq!(decode_call_config(&frame[record_at..]), Ok(long));
        encode_into(&t65_config(), &mut frame[record_at..]).unwrap();
        let decoded = decode_call_config(&frame[record_at..]).unwrap();
        assert_eq!(decoded.output_prefix.as_deref(), Some("/o"));
        let padding = &frame[record_at + OUTPUT_PREFIX_OFFSET + 2..record_at + RECORD_LEN];
        assert!(padding.iter().all(|&b| b == 0));
        assert_eq!(
            &frame[record_at..record_at + RECORD_LEN],
            encode(&t65_config())
        );
        // Bytes after the record are not the encoder's.
        assert!(frame[record_at + RECORD_LEN..].iter().all(|&b| b == 0x77));
    }

    #[test]
    fn encode_refuses_what_the_layout_cannot_hold() {
        let mut short = [0xeeu8; RECORD_LEN - 1];
        assert_eq!(
            encode_into(&t65_config(), &mut short),
            Err(WireError::OutputTooShort {
                need: 1144,
                got: 1143
            })
        );
        assert!(short.iter().all(|&b| b == 0xee), "nothing written on error");

        let too_long = CallConfig {
            output_prefix: Some("p".repeat(1025)),
            ..CallConfig::default()
        };
        let mut frame = [0xeeu8; RECORD_LEN];
        let err = encode_into(&too_long, &mut frame).unwrap_err();
        assert_eq!(err, WireError::PrefixTooLong { len: 1025 });
        assert!(err.to_string().contains("output_prefix is 1025 bytes"));
        assert!(frame.iter().all(|&b| b == 0xee), "nothing written on error");

        let empty = CallConfig {
            output_prefix: Some(String::new()),
            ..CallConfig::default()
        };
        let err = encode_call_config(&empty).unwrap_err();
        assert_eq!(err, WireError::EmptyPrefix);
        assert!(err.to_string().contains("use None"));
    }

    #[test]
    fn prefix_at_the_limit_round_trips() {
        for prefix in [
            "a".repeat(1024),
            "a".repeat(1022) + "é",
            "a".repeat(1020) + "😀",
            "中".repeat(340) + "😀",
        ] {
            assert_eq!(prefix.len(), 1024);
            let cfg = CallConfig {
                output_prefix: Some(prefix),
                ..CallConfig::default()
            };
            assert_eq!(decode_call_config(&encode(&cfg)), Ok(cfg));
        }
    }

    #[test]
    fn default_config_round_trips_with_no_prefix() {
        let bytes = encode(&CallConfig::default());
        assert_eq!(
            bytes[OUTPUT_PREFIX_LEN_OFFSET..OUTPUT_PREFIX_LEN_OFFSET + 2],
            [0, 0]
        );
        assert_eq!(decode_call_config(&bytes), Ok(CallConfig::default()));
    }

    #[test]
    fn errors_are_std_errors_with_messages() {
        let err: Box<dyn std::error::Error> = Box::new(WireError::EmptyPrefix);
        assert!(err.source().is_none());
        let shown = WireError::UnknownFlags { flags: 0x84 }.to_string();
        assert!(
            shown.contains("flags at offset 13 are 0x84; unknown bits 0x80"),
            "{shown}"
        );
        let shown = WireError::OutputTooShort { need: 1144, got: 8 }.to_string();
        assert!(
            shown.contains("output buffer is 8 bytes; a record needs 1144"),
            "{shown}"
        );
    }

    /// A printable, non-NUL character: mostly ASCII, some multi-byte.
    fn prefix_char() -> impl Strategy<Value = char> {
        prop_oneof![
            6 => prop::char::range(' ', '~'),
            2 => prop::sample::select(vec!['é', 'ß', 'Ж', '中', '€', '😀', '𝄞']),
            1 => any::<char>().prop_filter("printable", |c| !c.is_control()),
        ]
    }

    /// A legal output prefix: 1 to 1024 bytes of printable, non-NUL UTF-8.
    fn prefix() -> impl Strategy<Value = String> {
        prop::collection::vec(prefix_char(), 1..=MAX_OUTPUT_PREFIX_BYTES).prop_map(|chars| {
            let mut prefix = String::new();
            for c in chars {
                if prefix.len() + c.len_utf8() > MAX_OUTPUT_PREFIX_BYTES {
                    break;
                }
                prefix.push(c);
            }
            prefix
        })
    }

    /// Four per-ring entries, each 0 (unset) or legal for `resource`.
    fn ring_values(resource: Resource) -> impl Strategy<Value = [u64; RING_COUNT]> {
        let legal = match resource {
            Resource::TaskWindow => (2u32..=30).prop_map(|shift| 1u64 << shift).boxed(),
            Resource::Heap => prop_oneof![
                (16u64..=1 << 24).prop_map(|k| k * 64),
                (16u64..=u64::MAX / 64).prop_map(|k| k * 64),
            ]
            .boxed(),
            Resource::DepPool => (4u64..=(1 << 31) - 1).boxed(),
        };
        prop::array::uniform4(prop_oneof![Just(0u64), legal])
    }

    /// Any valid `CallConfig`.
    fn valid_config() -> impl Strategy<Value = CallConfig> {
        let env = (
            ring_values(Resource::TaskWindow),
            ring_values(Resource::Heap),
            ring_values(Resource::DepPool),
        )
            .prop_map(|(ring_task_window, ring_heap, ring_dep_pool)| RuntimeEnv {
                ring_task_window,
                ring_heap,
                ring_dep_pool,
            });
        (
            prop::sample::select(vec![0u32, 2, 3, 4]),
            0u8..=4,
            any::<bool>(),
            any::<bool>(),
            prop::option::of(prefix()),
            env,
            (any::<bool>(), 0u8..4),
        )
            .prop_map(
                |(
                    aicpu_thread_num,
                    swimlane,
                    dep_gen,
                    scope_stats,
                    output_prefix,
                    runtime_env,
                    (track_war, war_check),
                )| {
                    // Diagnostics need a prefix.
                    let diagnostics = output_prefix.is_some();
                    CallConfig {
                        aicpu_thread_num,
                        enable_chip_swimlane: if diagnostics { swimlane } else { 0 },
                        enable_dep_gen: diagnostics && dep_gen,
                        enable_scope_stats: diagnostics && scope_stats,
                        output_prefix,
                        runtime_env,
                        track_war,
                        war_check: crate::WarCheck::from_code(war_check).expect("0..4"),
                    }
                },
            )
    }

    /// Decoding never panics, and whatever it accepts is canonical: it encodes back to the
    /// same bytes.
    fn check_decode_is_total(bytes: &[u8]) -> Result<(), TestCaseError> {
        if let Ok(cfg) = decode_call_config(bytes) {
            prop_assert_eq!(cfg.validate(), Ok(()));
            let again = encode_call_config(&cfg);
            prop_assert_eq!(again.as_ref().map(|r| &r[..]), Ok(&bytes[..RECORD_LEN]));
        }
        Ok(())
    }

    /// Cases per property: few under Miri (which also runs these tests), and no regression
    /// files there because Miri isolates the file system.
    fn proptest_config() -> ProptestConfig {
        if cfg!(miri) {
            return ProptestConfig {
                cases: 4,
                failure_persistence: None,
                ..ProptestConfig::default()
            };
        }
        ProptestConfig::with_cases(256)
    }

    proptest! {
        #![proptest_config(proptest_config())]

        #[test]
        fn prop_valid_config_round_trips(cfg in valid_config()) {
            prop_assert_eq!(cfg.validate(), Ok(()));
            let bytes = encode_call_config(&cfg).unwrap();
            prop_assert_eq!(decode_call_config(&bytes), Ok(cfg));
        }

        #[test]
        fn prop_arbitrary_bytes_never_panic(
            mut bytes in prop::collection::vec(any::<u8>(), 0..2000),
            fix_header in any::<bool>(),
        ) {
            // Half the cases get a valid header so that the later checks are reached too.
            if fix_header && bytes.len() >= RECORD_LEN {
                bytes[..8].copy_from_slice(&encode(&CallConfig::default())[..8]);
            }
            check_decode_is_total(&bytes)?;
        }

        #[test]
        fn prop_mutated_record_never_panics(
            cfg in valid_config(),
            mutations in prop::collection::vec((0..RECORD_LEN, any::<u8>()), 1..=8),
        ) {
            let mut bytes = encode_call_config(&cfg).unwrap();
            for (offset, value) in mutations {
                bytes[offset] = value;
            }
            check_decode_is_total(&bytes)?;
        }
    }
}
