//! Byte-level mutations (AFL's classic set, without coverage): bit flips, random bytes,
//! "interesting" values over aligned little-endian fields (0, 1, maxima, 2^31, 2^40, the input's
//! own length), truncation, extension, copies inside the input and splices with another input.
//! Half the positional mutations land in the first 1 KiB, where every format keeps its header.

use fastrand::Rng;

const INTERESTING: [u64; 10] = [
    0,
    1,
    0x7f,
    0xff,
    0xffff,
    0x7fff_ffff,
    0xffff_ffff,
    1 << 31,
    1 << 40,
    u64::MAX,
];

fn position(r: &mut Rng, len: usize) -> usize {
    if r.bool() {
        r.usize(..len.min(1024))
    } else {
        r.usize(..len)
    }
}

/// Applies 1–4 mutations to `input`, splicing with `other` sometimes; the result is at most
/// `max_len` bytes.
pub fn mutate(r: &mut Rng, input: &[u8], other: &[u8], max_len: usize) -> Vec<u8> {
    let mut out = input.to_vec();
    for _ in 0..r.usize(1..=4) {
        if out.is_empty() {
            out.extend((0..r.usize(1..64)).map(|_| r.u8(..)));
            continue;
        }
        let len = out.len();
        match r.u8(..9) {
            0 => {
                let at = position(r, len);
                out[at] ^= 1 << r.u8(..8);
            }
            1 => {
                let at = position(r, len);
                out[at] = r.u8(..);
            }
            2 | 3 => {
                let width = [1, 2, 4, 8][r.usize(..4)];
                let value = if r.u8(..4) == 0 {
                    len as u64 + r.u64(..3) - 1
                } else {
                    INTERESTING[r.usize(..INTERESTING.len())]
                };
                let at = position(r, len) & !(width - 1);
                let end = (at + width).min(len);
                out[at..end].copy_from_slice(&value.to_le_bytes()[..end - at]);
            }
            4 => out.truncate(r.usize(..len)),
            5 => out.extend((0..r.usize(1..256)).map(|_| r.u8(..))),
            6 => {
                let (from, to) = (r.usize(..len), position(r, len));
                let n = r.usize(1..=64).min(len - from).min(len - to);
                out.copy_within(from..from + n, to);
            }
            7 if !other.is_empty() => {
                let cut = r.usize(..=len);
                let from = r.usize(..other.len());
                out.truncate(cut);
                out.extend_from_slice(&other[from..]);
            }
            _ => {
                let at = position(r, len);
                let n = r.usize(1..=16).min(len - at);
                out.drain(at..at + n);
            }
        }
    }
    out.truncate(max_len);
    out
}
