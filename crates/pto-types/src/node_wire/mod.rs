//! Binary records between a node and its child processes (NODE_RUNTIME.md §4.2–§4.8).
//!
//! Every record here is defined once, as named layout constants with byte-wise encoders and
//! decoders (`to_le_bytes` / `from_le_bytes` at fixed offsets, never a cast of a buffer to a
//! struct), like the `CallConfig` record of [`crate::wire`], which the mailbox frame embeds byte
//! for byte:
//!
//! - [`args_blob`]: the task arguments blob and its 112-byte wire tensor (§4.5);
//! - [`mailbox`]: the 64 KiB mailbox frame — request header, state word values, reply header,
//!   report area, callable section, message, payload — and the chip reply extension (§4.5–§4.8);
//! - [`control_segment`]: the 4 KiB node control segment with the doorbell (§4.4);
//! - [`segment_msg`]: `SEGMENT_ADD` / `SEGMENT_DROP` on the descriptor socket (§4.3);
//! - [`boot`]: the boot block a child reads at start-up (§4.6);
//! - [`worker_spec`]: an L3 Worker child's options and registrations (§6.1);
//! - [`run_report`]: an inner run's report in a node child's reply payload (§6.1).
//!
//! Decoders check every magic, version, count, length, enum code, reserved area, string and view
//! bound; a violation is a [`FrameError`] (reply code `BAD_FRAME`), never a panic — the
//! property tests feed them arbitrary bytes. Nothing here touches shared memory: the node copies
//! regions of a mapping into and out of plain buffers and calls these codecs on them.

pub mod args_blob;
pub mod boot;
pub mod control_segment;
pub mod mailbox;
pub mod run_report;
pub mod segment_msg;
pub mod worker_spec;

use std::fmt;

use crate::wire::WireError;

/// Why a node record could not be decoded (or, for a few size limits, encoded).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FrameError {
    /// The input ends before the record does.
    Truncated {
        what: &'static str,
        need: usize,
        got: usize,
    },
    /// The magic is wrong.
    BadMagic { what: &'static str, found: [u8; 4] },
    /// The protocol version is not the one this build speaks.
    UnsupportedVersion {
        what: &'static str,
        found: u16,
        expected: u16,
    },
    /// A field holds a value outside its legal set (enum code, count, size).
    BadValue { field: &'static str, value: u64 },
    /// A reserved area is not zero.
    NonZeroReserved { what: &'static str, offset: usize },
    /// A name or label is not 1–64 bytes of `[A-Za-z0-9_.-]` (or a string is not UTF-8).
    BadName { field: &'static str },
    /// A wire tensor describes an impossible view.
    BadTensor { index: usize, reason: String },
    /// The embedded `CallConfig` record failed to decode.
    Config(WireError),
}

impl fmt::Display for FrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FrameError::Truncated { what, need, got } => {
                write!(f, "{what}: truncated, need {need} bytes, got {got}")
            }
            FrameError::BadMagic { what, found } => {
                write!(f, "{what}: bad magic {:?}", String::from_utf8_lossy(found))
            }
            FrameError::UnsupportedVersion {
                what,
                found,
                expected,
            } => write!(
                f,
                "{what}: protocol version {found} not supported (expected {expected})"
            ),
            FrameError::BadValue { field, value } => write!(f, "{field}: illegal value {value}"),
            FrameError::NonZeroReserved { what, offset } => {
                write!(f, "{what}: reserved byte at offset {offset} is not zero")
            }
            FrameError::BadName { field } => {
                write!(f, "{field}: not 1-64 bytes of [A-Za-z0-9_.-]")
            }
            FrameError::BadTensor { index, reason } => write!(f, "wire tensor {index}: {reason}"),
            FrameError::Config(e) => write!(f, "CallConfig record: {e}"),
        }
    }
}

impl std::error::Error for FrameError {}

/// Little-endian reads at fixed offsets of a slice already checked to be long enough.
pub(crate) fn get<const N: usize>(bytes: &[u8], offset: usize) -> [u8; N] {
    let mut out = [0u8; N];
    out.copy_from_slice(&bytes[offset..offset + N]);
    out
}

pub(crate) fn get_u16(bytes: &[u8], offset: usize) -> u16 {
    u16::from_le_bytes(get(bytes, offset))
}

pub(crate) fn get_u32(bytes: &[u8], offset: usize) -> u32 {
    u32::from_le_bytes(get(bytes, offset))
}

pub(crate) fn get_u64(bytes: &[u8], offset: usize) -> u64 {
    u64::from_le_bytes(get(bytes, offset))
}

pub(crate) fn put(bytes: &mut [u8], offset: usize, value: &[u8]) {
    bytes[offset..offset + value.len()].copy_from_slice(value);
}

/// Checks that `bytes` has at least `need` bytes.
pub(crate) fn need(what: &'static str, bytes: &[u8], need: usize) -> Result<(), FrameError> {
    if bytes.len() < need {
        return Err(FrameError::Truncated {
            what,
            need,
            got: bytes.len(),
        });
    }
    Ok(())
}

/// Checks that `bytes[from..to]` is zero.
pub(crate) fn zero(
    what: &'static str,
    bytes: &[u8],
    from: usize,
    to: usize,
) -> Result<(), FrameError> {
    match bytes[from..to].iter().position(|&b| b != 0) {
        Some(i) => Err(FrameError::NonZeroReserved {
            what,
            offset: from + i,
        }),
        None => Ok(()),
    }
}

/// A sequential little-endian writer for variable-length records.
#[derive(Default)]
pub(crate) struct Writer {
    pub(crate) bytes: Vec<u8>,
}

impl Writer {
    pub(crate) fn u8(&mut self, v: u8) {
        self.bytes.push(v);
    }
    pub(crate) fn u16(&mut self, v: u16) {
        self.bytes.extend_from_slice(&v.to_le_bytes());
    }
    pub(crate) fn u32(&mut self, v: u32) {
        self.bytes.extend_from_slice(&v.to_le_bytes());
    }
    pub(crate) fn u64(&mut self, v: u64) {
        self.bytes.extend_from_slice(&v.to_le_bytes());
    }
    pub(crate) fn raw(&mut self, v: &[u8]) {
        self.bytes.extend_from_slice(v);
    }
    /// A string of at most `u16::MAX` bytes (longer ones are cut at a character boundary).
    pub(crate) fn str16(&mut self, s: &str) {
        let mut end = s.len().min(usize::from(u16::MAX));
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        self.u16(end as u16);
        self.raw(&s.as_bytes()[..end]);
    }
}

/// A sequential little-endian reader that never panics: every read is bounds-checked.
pub(crate) struct Reader<'a> {
    what: &'static str,
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(what: &'static str, bytes: &'a [u8]) -> Reader<'a> {
        Reader { what, bytes, at: 0 }
    }
    pub(crate) fn take(&mut self, n: usize) -> Result<&'a [u8], FrameError> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.bytes.len());
        let Some(end) = end else {
            return Err(FrameError::Truncated {
                what: self.what,
                need: self.at.saturating_add(n),
                got: self.bytes.len(),
            });
        };
        let out = &self.bytes[self.at..end];
        self.at = end;
        Ok(out)
    }
    pub(crate) fn u8(&mut self) -> Result<u8, FrameError> {
        Ok(self.take(1)?[0])
    }
    pub(crate) fn u16(&mut self) -> Result<u16, FrameError> {
        Ok(get_u16(self.take(2)?, 0))
    }
    pub(crate) fn u32(&mut self) -> Result<u32, FrameError> {
        Ok(get_u32(self.take(4)?, 0))
    }
    pub(crate) fn u64(&mut self) -> Result<u64, FrameError> {
        Ok(get_u64(self.take(8)?, 0))
    }
    pub(crate) fn bool(&mut self, field: &'static str) -> Result<bool, FrameError> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            v => Err(FrameError::BadValue {
                field,
                value: u64::from(v),
            }),
        }
    }
    pub(crate) fn str16(&mut self, field: &'static str) -> Result<String, FrameError> {
        let n = usize::from(self.u16()?);
        let raw = self.take(n)?;
        String::from_utf8(raw.to_vec()).map_err(|_| FrameError::BadName { field })
    }
    /// Fails unless every byte was consumed.
    pub(crate) fn finish(&self) -> Result<(), FrameError> {
        if self.at != self.bytes.len() {
            return Err(FrameError::BadValue {
                field: "trailing bytes",
                value: (self.bytes.len() - self.at) as u64,
            });
        }
        Ok(())
    }
}

/// Checks a name field: 1–64 bytes of `[A-Za-z0-9_.-]`.
pub(crate) fn name_from(raw: &[u8], field: &'static str) -> Result<String, FrameError> {
    match std::str::from_utf8(raw) {
        Ok(s) if crate::args::is_valid_name(s) => Ok(s.to_string()),
        _ => Err(FrameError::BadName { field }),
    }
}
