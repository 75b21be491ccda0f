//! Paged attention with online softmax (CHIP_RUNTIME.md §9.2).
//!
//! Decode-style attention of one query token per sequence over a paged KV cache: sequence `b`
//! keeps its keys and values in the cache blocks listed in row `b` of `block_table`, and only
//! its first `context_lens[b]` positions count. The chip walks the KV blocks one at a time and
//! keeps a running softmax (max `mi`, sum `li`, weighted values `oi`), as flash attention does.
//!
//! * Kernels: `pa.qk` (AIC, scores), `pa.sf` (AIV, masked softmax of one block), `pa.pv` (AIC,
//!   probabilities × values) and `pa.up` (AIV, the online update and the final `oi / li`).
//! * Orchestration `paged_attention`: entry tensors `query, key_cache, value_cache,
//!   block_table, context_lens, out` and an optional scalar `scale` (see [`paged_attention`]).
//!   Batches go in chunks of [`BATCH_CHUNK`]; per chunk (and query tile of at most
//!   [`MAX_Q_TILE`] heads) one scope allocates `oi`, `li`, `mi`; per KV block one nested scope
//!   submits QK → SF → PV → UP. Tasks = `chunks·(1 + 4·max_bn)`.
//! * Host side: [`PaCase`] with the table's cases [`PA_SMALL`] and [`RINGBUFFER_STRESS`],
//!   seeded inputs ([`make_inputs`]), the reference result ([`golden`]) and §9's tolerance
//!   ([`TOLERANCE`], checked by the workspace's one allclose rule, `pto_types::tolerance`).
//!
//! The kernels and [`golden`] share the per-row arithmetic (same operations in the same order),
//! so a correct run matches the reference to the last bit; the check still uses the spec's
//! tolerance (rtol = atol = 1e-3).

use std::borrow::Cow;

use half::bf16;
use pto_chip::kernel::{CoreType, Element, KernelCtx, View};
use pto_chip::orch::{
    KernelArgs, OrchArgs, OrchResult, OrchTensor, RootScope, Scope, TensorCreateInfo,
};
use pto_types::DType;
use pto_types::tolerance::Tolerance;

use crate::rng::SplitMix64;

/// Batches per chunk: each chunk is one scope (ring 1) of the orchestration.
pub const BATCH_CHUNK: u32 = 16;

/// Largest query tile: `q_tile = min(heads, MAX_Q_TILE)` heads of a batch share one task.
pub const MAX_Q_TILE: u32 = 128;

/// The softmax max never goes below this, so a fully masked block gives `p = 0`, not NaN.
pub const MASK_FLOOR: f32 = -1e30;

/// Tolerance of the paged-attention check (§9.2): rtol = atol = 1e-3. Check a result with
/// `TOLERANCE.check(&actual, &golden)`; the rule itself is `pto_types::tolerance`'s.
pub const TOLERANCE: Tolerance = Tolerance::new(1e-3, 1e-3);

// ----- cases and inputs ---------------------------------------------------------------------

/// The sizes of one paged-attention workload (§9.2's table).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PaCase {
    /// Sequences (one query token each).
    pub batch: u32,
    /// Query heads (the KV cache has one head, shared by all query heads).
    pub heads: u32,
    /// Head dimension.
    pub d: u32,
    /// Positions per KV cache block.
    pub block: u32,
    /// Context length of every sequence ([`make_inputs`] sets all `context_lens` to it).
    pub ctx: u32,
    /// Longest supported context: `block_table` has `max_model_len / block` columns.
    pub max_model_len: u32,
    /// Seed of the input stream.
    pub seed: u64,
}

/// The CI case: 4 sequences of 512 positions, 17 tasks.
pub const PA_SMALL: PaCase = PaCase {
    batch: 4,
    heads: 16,
    d: 128,
    block: 128,
    ctx: 512,
    max_model_len: 4096,
    seed: 0x5041_0001,
};

/// The back-pressure case: 32 sequences of 4096 positions, 258 tasks (run it with
/// [`STRESS_TASK_WINDOW`], [`STRESS_HEAP`] and [`STRESS_DEP_POOL`] on all rings).
pub const RINGBUFFER_STRESS: PaCase = PaCase {
    batch: 32,
    heads: 16,
    d: 128,
    block: 128,
    ctx: 4096,
    max_model_len: 32768,
    seed: 0x5041_0002,
};

/// Stress sizing (§9.2): task window of every ring.
pub const STRESS_TASK_WINDOW: u64 = 64;
/// Stress sizing (§9.2): heap bytes of every ring (4 MiB).
pub const STRESS_HEAP: u64 = 4 << 20;
/// Stress sizing (§9.2): dep-pool entries of every ring.
pub const STRESS_DEP_POOL: u64 = 256;

impl PaCase {
    /// Columns of `block_table`: `max_model_len / block`.
    pub fn blocks_per_seq(&self) -> u32 {
        self.max_model_len / self.block
    }

    /// KV cache blocks: `batch · ceil(ctx / block)`.
    pub fn total_blocks(&self) -> u32 {
        self.batch * self.ctx.div_ceil(self.block)
    }

    /// Heads per task: `min(heads, MAX_Q_TILE)`.
    pub fn q_tile(&self) -> u32 {
        self.heads.min(MAX_Q_TILE)
    }

    /// KV blocks walked per chunk when every context length is `ctx`: `ceil(ctx / block)`.
    pub fn max_bn(&self) -> u32 {
        self.ctx.div_ceil(self.block)
    }

    /// Chunk scopes: `ceil(batch / BATCH_CHUNK) · ceil(heads / q_tile)` (the second factor is
    /// 1 for the table's cases).
    pub fn chunks(&self) -> u32 {
        self.batch.div_ceil(BATCH_CHUNK) * self.heads.div_ceil(self.q_tile())
    }

    /// Tasks the orchestration submits, hidden alloc tasks included: `chunks·(1 + 4·max_bn)`.
    pub fn expected_tasks(&self) -> u64 {
        u64::from(self.chunks()) * (1 + 4 * u64::from(self.max_bn()))
    }

    /// Shape of `query` and `out`: `[batch, heads, d]`.
    pub fn query_shape(&self) -> [u32; 3] {
        [self.batch, self.heads, self.d]
    }

    /// Shape of `key_cache` and `value_cache`: `[total_blocks, block, 1, d]`.
    pub fn cache_shape(&self) -> [u32; 4] {
        [self.total_blocks(), self.block, 1, self.d]
    }

    /// Shape of `block_table`: `[batch, blocks_per_seq]`.
    pub fn block_table_shape(&self) -> [u32; 2] {
        [self.batch, self.blocks_per_seq()]
    }

    /// Elements of `out`.
    pub fn out_len(&self) -> usize {
        self.query_shape().iter().map(|&n| n as usize).product()
    }

    fn validate(&self) {
        assert!(
            self.batch > 0 && self.heads > 0 && self.d > 0 && self.block > 0 && self.ctx > 0,
            "paged attention needs non-zero sizes: {self:?}"
        );
        assert!(
            self.max_model_len.is_multiple_of(self.block) && self.ctx <= self.max_model_len,
            "max_model_len must be a multiple of block and at least ctx: {self:?}"
        );
    }
}

/// The host-side inputs of one case, in the layouts of §9.2 (row-major).
#[derive(Clone, Debug, PartialEq)]
pub struct PaInputs {
    /// `[batch, heads, d]`, ~ U(−0.5, 0.5).
    pub query: Vec<bf16>,
    /// `[total_blocks, block, 1, d]`, ~ U(−0.5, 0.5).
    pub key_cache: Vec<bf16>,
    /// `[total_blocks, block, 1, d]`, ~ U(−1, 1).
    pub value_cache: Vec<bf16>,
    /// `[batch, max_model_len / block]`, uniform in `[0, total_blocks)`.
    pub block_table: Vec<i32>,
    /// `[batch]`; [`make_inputs`] sets every entry to `ctx`. Tests may lower entries (down to
    /// 1) to exercise masking; a length ≤ 0 gives NaN rows (`0 / 0`) on chip and in [`golden`].
    pub context_lens: Vec<i32>,
}

/// The inputs of `case`, drawn from one [`SplitMix64`] stream seeded with `case.seed`, in the
/// order query, key cache, value cache, block table (values rounded to nearest BF16).
pub fn make_inputs(case: &PaCase) -> PaInputs {
    case.validate();
    let mut rng = SplitMix64::new(case.seed);
    let numel = |shape: &[u32]| shape.iter().map(|&n| n as usize).product::<usize>();
    let mut draw = |n: usize, lo: f32, hi: f32| -> Vec<bf16> {
        (0..n)
            .map(|_| bf16::from_f32(rng.uniform_f32(lo, hi)))
            .collect()
    };
    let query = draw(numel(&case.query_shape()), -0.5, 0.5);
    let key_cache = draw(numel(&case.cache_shape()), -0.5, 0.5);
    let value_cache = draw(numel(&case.cache_shape()), -1.0, 1.0);
    let total = case.total_blocks();
    let block_table = (0..numel(&case.block_table_shape()))
        .map(|_| rng.uniform_u32_below(total) as i32)
        .collect();
    let context_lens = vec![case.ctx as i32; case.batch as usize];
    PaInputs {
        query,
        key_cache,
        value_cache,
        block_table,
        context_lens,
    }
}

/// KV blocks to walk: `ceil(max(context_lens) / block)` (0 when no length is positive).
fn max_bn_of(context_lens: &[i32], block: u32) -> u32 {
    let max = context_lens.iter().copied().max().unwrap_or(0).max(0) as u32;
    max.div_ceil(block)
}

/// The reference output `[batch, heads, d]` (f32): the chip's loop on the host, with the same
/// f32 arithmetic and `pij` rounded to BF16 (§9.2), using `inputs.context_lens` and scale 1.
///
/// Every sequence walks `ceil(max(context_lens) / block)` blocks, as on chip; blocks past a
/// sequence's length are fully masked and leave its state unchanged.
pub fn golden(case: &PaCase, inputs: &PaInputs) -> Vec<f32> {
    golden_scaled(case, inputs, 1.0)
}

/// [`golden`] with an explicit softmax scale (the orchestration's optional scalar).
pub fn golden_scaled(case: &PaCase, inputs: &PaInputs, scale: f32) -> Vec<f32> {
    case.validate();
    let (heads, d, block) = (case.heads as usize, case.d as usize, case.block as usize);
    let bps = case.blocks_per_seq() as usize;
    let total = case.total_blocks();
    let max_bn = max_bn_of(&inputs.context_lens, case.block);
    let mut out = vec![0.0f32; case.out_len()];
    let (mut kf, mut vf) = (Vec::new(), Vec::new());
    let mut q = Vec::new();
    let mut s = vec![0.0f32; block];
    let mut p = vec![bf16::ZERO; block];
    let mut o_new = vec![0.0f32; d];
    let (mut mi, mut li, mut oi) = (
        vec![0.0f32; heads],
        vec![0.0f32; heads],
        vec![0.0; heads * d],
    );
    for b in 0..case.batch as usize {
        widen(&inputs.query[b * heads * d..][..heads * d], &mut q);
        let ctx = inputs.context_lens[b];
        for bn in 0..max_bn as usize {
            let blk = block_id(inputs.block_table[b * bps + bn], total, "golden");
            widen(&inputs.key_cache[blk * block * d..][..block * d], &mut kf);
            widen(&inputs.value_cache[blk * block * d..][..block * d], &mut vf);
            let valid = i64::from(ctx) - (bn * block) as i64;
            for h in 0..heads {
                qk_row(&q[h * d..][..d], &kf, &mut s);
                let (mij, lij) = softmax_row(&s, scale, valid, &mut p);
                pv_row(&p, &vf, &mut o_new);
                let oi_h = &mut oi[h * d..][..d];
                if bn == 0 {
                    (mi[h], li[h]) = (mij, lij);
                    oi_h.copy_from_slice(&o_new);
                } else {
                    update_row(&mut mi[h], &mut li[h], oi_h, mij, lij, &o_new);
                }
            }
        }
        for h in 0..heads {
            finish_row(
                &oi[h * d..][..d],
                li[h],
                &mut out[(b * heads + h) * d..][..d],
            );
        }
    }
    out
}

// ----- per-row arithmetic shared by the kernels and the golden ------------------------------

/// `dst = src` widened to f32 (reuses `dst`'s allocation).
fn widen(src: &[bf16], dst: &mut Vec<f32>) {
    dst.clear();
    dst.extend(src.iter().map(|x| x.to_f32()));
}

/// The cache block named by a block-table entry; panics when it is out of range.
fn block_id(entry: i32, total_blocks: u32, who: &str) -> usize {
    assert!(
        entry >= 0 && (entry as u32) < total_blocks,
        "{who}: block_table entry {entry} is outside [0, {total_blocks})"
    );
    entry as usize
}

/// `Σ a_i·b_i` in f32 with 8 interleaved partial sums (a fixed order, so kernels and golden
/// agree bit for bit).
fn dot(a: &[f32], b: &[f32]) -> f32 {
    debug_assert_eq!(a.len(), b.len());
    let mut acc = [0.0f32; 8];
    let (ac, bc) = (a.chunks_exact(8), b.chunks_exact(8));
    let (ar, br) = (ac.remainder(), bc.remainder());
    for (x, y) in ac.zip(bc) {
        for k in 0..8 {
            acc[k] += x[k] * y[k];
        }
    }
    for (k, (x, y)) in ar.iter().zip(br).enumerate() {
        acc[k] += x * y;
    }
    ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]))
}

/// QK of one row: `s[t] = q · K[t]` for the positions of one block (`k` is `[block, d]`).
fn qk_row(q: &[f32], k: &[f32], s: &mut [f32]) {
    let d = q.len();
    for (t, st) in s.iter_mut().enumerate() {
        *st = dot(q, &k[t * d..][..d]);
    }
}

/// SF of one row: scale, mask positions `≥ valid` to −∞, `m = max(rowmax, MASK_FLOOR)`,
/// `p = exp(s − m)` rounded to BF16 (masked → 0), `l = Σ p` of the rounded values.
fn softmax_row(s: &[f32], scale: f32, valid: i64, p: &mut [bf16]) -> (f32, f32) {
    let n = valid.clamp(0, s.len() as i64) as usize;
    let rowmax = s[..n]
        .iter()
        .fold(f32::NEG_INFINITY, |m, &x| m.max(x * scale));
    let m = rowmax.max(MASK_FLOOR);
    let mut l = 0.0f32;
    for (pt, &st) in p[..n].iter_mut().zip(&s[..n]) {
        *pt = bf16::from_f32((st * scale - m).exp());
        l += pt.to_f32();
    }
    p[n..].fill(bf16::ZERO);
    (m, l)
}

/// PV of one row: `o = Σ_t p[t]·V[t]` (`v` is `[block, d]`, f32 accumulate).
fn pv_row(p: &[bf16], v: &[f32], o: &mut [f32]) {
    let d = o.len();
    o.fill(0.0);
    for (t, pt) in p.iter().enumerate() {
        let pt = pt.to_f32();
        for (ot, &x) in o.iter_mut().zip(&v[t * d..][..d]) {
            *ot += pt * x;
        }
    }
}

/// UP of one row (not the first block): the online-softmax rescale.
fn update_row(mi: &mut f32, li: &mut f32, oi: &mut [f32], mij: f32, lij: f32, o_new: &[f32]) {
    let m = mi.max(mij);
    let alpha = (*mi - m).exp();
    let beta = (mij - m).exp();
    *li = alpha * *li + beta * lij;
    for (o, &n) in oi.iter_mut().zip(o_new) {
        *o = alpha * *o + beta * n;
    }
    *mi = m;
}

/// The last block's UP of one row: `out = oi / li`.
fn finish_row(oi: &[f32], li: f32, out: &mut [f32]) {
    for (o, &x) in out.iter_mut().zip(oi) {
        *o = x / li;
    }
}

// ----- kernels ------------------------------------------------------------------------------

/// The elements of a view, borrowed when contiguous, copied otherwise.
fn elems<'a, T: Element>(v: &View<'a, T>) -> Cow<'a, [T]> {
    match v.as_slice() {
        Some(s) => Cow::Borrowed(s),
        None => Cow::Owned(v.to_vec()),
    }
}

/// `(chunk, q_tile, d)` of a query view `[chunk, q_tile, d]`.
fn query_dims(shape: &[u32]) -> (usize, usize, usize) {
    assert_eq!(
        shape.len(),
        3,
        "query view must be [chunk, q_tile, d], got {shape:?}"
    );
    (shape[0] as usize, shape[1] as usize, shape[2] as usize)
}

/// `(total_blocks, block, d)` of a cache `[total_blocks, block, 1, d]`.
fn cache_dims(shape: &[u32]) -> (u32, usize, usize) {
    assert!(
        shape.len() == 4 && shape[2] == 1,
        "KV cache must be [total_blocks, block, 1, d], got {shape:?}"
    );
    (shape[0], shape[1] as usize, shape[3] as usize)
}

/// Tensors: 0 query view `[chunk, q_tile, d]` BF16, 1 key cache, 2 block-table column
/// `[chunk, 1]` I32, 3 OUTPUT `sij [chunk·q_tile, block]` F32.
fn kernel_qk(ctx: &mut KernelCtx<'_>) {
    let q = ctx.input::<bf16>(0);
    let k = ctx.input::<bf16>(1);
    let table = ctx.input::<i32>(2).to_vec();
    let mut sij = ctx.output::<f32>(3);
    let (chunk, q_tile, d) = query_dims(q.shape());
    let (total, block, kd) = cache_dims(k.shape());
    assert_eq!(
        kd, d,
        "pa.qk: key dimension {kd} differs from query dimension {d}"
    );
    let (q, k) = (elems(&q), elems(&k));
    let mut qf = Vec::new();
    widen(&q, &mut qf);
    let s = sij
        .as_mut_slice()
        .expect("pa.qk: sij is a contiguous, unshared OUTPUT");
    assert_eq!(
        table.len(),
        chunk,
        "pa.qk: one block-table entry per sequence"
    );
    let mut kf = Vec::new();
    for (b, &entry) in table.iter().enumerate() {
        let blk = block_id(entry, total, "pa.qk");
        widen(&k[blk * block * d..][..block * d], &mut kf);
        for h in 0..q_tile {
            let r = b * q_tile + h;
            qk_row(&qf[r * d..][..d], &kf, &mut s[r * block..][..block]);
        }
    }
}

/// Tensors: 0 `sij [rows, block]` F32, 1 context lengths of the chunk `[chunk]` I32, OUTPUTs
/// 2 `pij [rows, block]` BF16, 3 `mij [rows]` F32, 4 `lij [rows]` F32. Scalars: 0 scale (f32),
/// 1 KV block index `bn` (u32).
fn kernel_sf(ctx: &mut KernelCtx<'_>) {
    let scale: f32 = ctx.scalar(0);
    let bn: u32 = ctx.scalar(1);
    let sij = ctx.input::<f32>(0);
    let lens = ctx.input::<i32>(1).to_vec();
    let mut pij = ctx.output::<bf16>(2);
    let mut mij = ctx.output::<f32>(3);
    let mut lij = ctx.output::<f32>(4);
    let block = sij.shape()[1] as usize;
    let rows = sij.shape()[0] as usize;
    let q_tile = rows / lens.len();
    let s = elems(&sij);
    let p = pij
        .as_mut_slice()
        .expect("pa.sf: pij is a contiguous OUTPUT");
    let m = mij
        .as_mut_slice()
        .expect("pa.sf: mij is a contiguous OUTPUT");
    let l = lij
        .as_mut_slice()
        .expect("pa.sf: lij is a contiguous OUTPUT");
    for r in 0..rows {
        let valid = i64::from(lens[r / q_tile]) - i64::from(bn) * block as i64;
        (m[r], l[r]) = softmax_row(
            &s[r * block..][..block],
            scale,
            valid,
            &mut p[r * block..][..block],
        );
    }
}

/// Tensors: 0 `pij [rows, block]` BF16, 1 value cache, 2 block-table column `[chunk, 1]` I32,
/// 3 OUTPUT `oi_new [rows, d]` F32.
fn kernel_pv(ctx: &mut KernelCtx<'_>) {
    let pij = ctx.input::<bf16>(0);
    let v = ctx.input::<bf16>(1);
    let table = ctx.input::<i32>(2).to_vec();
    let mut oi_new = ctx.output::<f32>(3);
    let (total, block, d) = cache_dims(v.shape());
    let rows = pij.shape()[0] as usize;
    let q_tile = rows / table.len();
    let (p, v) = (elems(&pij), elems(&v));
    let o = oi_new
        .as_mut_slice()
        .expect("pa.pv: oi_new is a contiguous OUTPUT");
    let mut vf = Vec::new();
    for (b, &entry) in table.iter().enumerate() {
        let blk = block_id(entry, total, "pa.pv");
        widen(&v[blk * block * d..][..block * d], &mut vf);
        for h in 0..q_tile {
            let r = b * q_tile + h;
            pv_row(&p[r * block..][..block], &vf, &mut o[r * d..][..d]);
        }
    }
}

/// Tensors: 0 `mij`, 1 `lij` `[rows]`, 2 `oi_new [rows, d]` (inputs), 3 `mi`, 4 `li`
/// `[rows]`, 5 `oi [rows, d]` (INOUT), and on the last block 6 the output view
/// `[chunk, q_tile, d]` F32. Scalars: 0 first block (u32 0/1), 1 last block (u32 0/1).
fn kernel_up(ctx: &mut KernelCtx<'_>) {
    let first = ctx.scalar::<u32>(0) != 0;
    let last = ctx.scalar::<u32>(1) != 0;
    let (mij, lij, o_new) = (
        ctx.input::<f32>(0),
        ctx.input::<f32>(1),
        ctx.input::<f32>(2),
    );
    let (mij, lij, o_new) = (elems(&mij), elems(&lij), elems(&o_new));
    let (mut mi_v, mut li_v, mut oi_v) = (
        ctx.output::<f32>(3),
        ctx.output::<f32>(4),
        ctx.output::<f32>(5),
    );
    let mi = mi_v.as_mut_slice().expect("pa.up: mi is contiguous");
    let li = li_v.as_mut_slice().expect("pa.up: li is contiguous");
    let oi = oi_v.as_mut_slice().expect("pa.up: oi is contiguous");
    let rows = mi.len();
    let d = oi.len() / rows;
    if first {
        mi.copy_from_slice(&mij);
        li.copy_from_slice(&lij);
        oi.copy_from_slice(&o_new);
    } else {
        for r in 0..rows {
            update_row(
                &mut mi[r],
                &mut li[r],
                &mut oi[r * d..][..d],
                mij[r],
                lij[r],
                &o_new[r * d..][..d],
            );
        }
    }
    if last {
        let mut out = ctx.output::<f32>(6);
        assert_eq!(out.len(), rows * d, "pa.up: output view has the wrong size");
        let mut result = vec![0.0f32; rows * d];
        for r in 0..rows {
            finish_row(&oi[r * d..][..d], li[r], &mut result[r * d..][..d]);
        }
        out.copy_from_slice(&result);
    }
}

pto_chip::register_kernel!(
    /// QK (AIC): `sij = q·K_jᵀ` per row of a chunk, `K_j` the block `block_table[b, bn]`.
    PA_QK = "pa.qk", CoreType::Aic, kernel_qk
);
pto_chip::register_kernel!(
    /// SF (AIV): masked, scaled softmax numerators of one KV block (`pij` BF16, `mij`, `lij`).
    PA_SF = "pa.sf", CoreType::Aiv, kernel_sf
);
pto_chip::register_kernel!(
    /// PV (AIC): `oi_new = pij·V_j` (BF16 in, f32 accumulate).
    PA_PV = "pa.pv", CoreType::Aic, kernel_pv
);
pto_chip::register_kernel!(
    /// UP (AIV): online-softmax update of `mi`, `li`, `oi`; on the last block `out = oi / li`.
    PA_UP = "pa.up", CoreType::Aiv, kernel_up
);

// ----- orchestration ------------------------------------------------------------------------

/// A view of `t`, or EXPLICIT_ORCH_FATAL (latched) naming `what`.
fn view_of<'s>(
    s: &mut Scope<'s, '_>,
    t: OrchTensor<'s>,
    shape: &[u32],
    offsets: &[u32],
    what: &str,
) -> OrchResult<OrchTensor<'s>> {
    match t.view(shape, offsets) {
        Ok(v) => Ok(v),
        Err(e) => Err(s.report_fatal(format!("paged_attention: view of {what}: {e}"))),
    }
}

/// Checks the entry tensors' ranks and dtypes; returns `(batch, heads, d, block, bps)`.
fn entry_dims(ts: &[OrchTensor<'_>; 6]) -> Result<(u32, u32, u32, u32, u32), String> {
    let [q, k, v, bt, cl, out] = ts;
    let want = |t: &OrchTensor<'_>, name: &str, rank: usize, dtype: DType| {
        if t.shape().len() != rank || t.dtype() != dtype {
            Err(format!(
                "{name} must be a rank-{rank} {dtype} tensor, got {:?} {}",
                t.shape(),
                t.dtype()
            ))
        } else {
            Ok(())
        }
    };
    want(q, "query", 3, DType::BF16)?;
    want(k, "key_cache", 4, DType::BF16)?;
    want(v, "value_cache", 4, DType::BF16)?;
    want(bt, "block_table", 2, DType::I32)?;
    want(cl, "context_lens", 1, DType::I32)?;
    want(out, "out", 3, DType::F32)?;
    let (batch, heads, d) = (q.shape()[0], q.shape()[1], q.shape()[2]);
    let block = k.shape()[1];
    if k.shape() != v.shape() || k.shape()[2] != 1 || k.shape()[3] != d {
        return Err(format!(
            "key_cache {:?} and value_cache {:?} must both be [total_blocks, block, 1, {d}]",
            k.shape(),
            v.shape()
        ));
    }
    if bt.shape()[0] != batch || cl.shape()[0] != batch || out.shape() != q.shape() {
        return Err(format!(
            "block_table {:?}, context_lens {:?} and out {:?} must match query {:?}",
            bt.shape(),
            cl.shape(),
            out.shape(),
            q.shape()
        ));
    }
    if batch == 0 || heads == 0 || d == 0 || block == 0 || k.shape()[0] == 0 {
        return Err(format!(
            "empty dimension in query {:?} or cache {:?}",
            q.shape(),
            k.shape()
        ));
    }
    Ok((batch, heads, d, block, bt.shape()[1]))
}

/// The paged-attention orchestration (§9.2), registered as `paged_attention`.
///
/// Entry tensors, in order: `query [batch, heads, d]` BF16, `key_cache` and `value_cache`
/// `[total_blocks, block, 1, d]` BF16, `block_table [batch, blocks_per_seq]` I32,
/// `context_lens [batch]` I32 (inputs), and `out [batch, heads, d]` F32, written through
/// OUTPUT_EXISTING views by the last UP of each chunk (pass it as OUTPUT_EXISTING or INOUT).
/// Optional scalar 0: the softmax scale as f32 bits (default 1.0).
///
/// `max_bn = ceil(max(context_lens) / block)` is read with `get_tensor_data`; it must be at
/// least 1 and at most `blocks_per_seq`, and ranks, dtypes and shapes must agree, else the run
/// fails with EXPLICIT_ORCH_FATAL. Block-table entries outside `[0, total_blocks)` make the
/// kernels panic (KERNEL_PANIC).
///
/// `out` is not `manual_dep` as §9.2 asks: an entry tensor's flags come from the caller's
/// descriptor, which has no such flag. Only the last UP of a chunk gets `out` (a disjoint view
/// per chunk), so the cost is one TensorMap entry per chunk and no extra edges.
pub fn paged_attention<'r>(s: &mut RootScope<'r>, a: &OrchArgs<'r>) -> OrchResult<()> {
    let entry: [OrchTensor<'r>; 6] = std::array::from_fn(|i| a.tensor(i));
    let [
        query,
        key_cache,
        value_cache,
        block_table,
        context_lens,
        out,
    ] = entry;
    let scale = if a.num_scalars() > 0 {
        a.scalar::<f32>(0)
    } else {
        1.0
    };
    let (batch, heads, d, block, bps) = match entry_dims(&entry) {
        Ok(dims) => dims,
        Err(e) => return Err(s.report_fatal(format!("paged_attention: {e}"))),
    };
    let mut max_ctx = 0i32;
    for b in 0..batch {
        max_ctx = max_ctx.max(s.get_tensor_data::<i32>(context_lens, &[b])?);
    }
    let max_bn = (max_ctx.max(0) as u32).div_ceil(block);
    if max_bn == 0 || max_bn > bps {
        return Err(s.report_fatal(format!(
            "paged_attention: max(context_lens) = {max_ctx} needs {max_bn} KV blocks, \
             but there must be between 1 and {bps} (block_table columns)"
        )));
    }
    let q_tile = heads.min(MAX_Q_TILE);
    for b0 in (0..batch).step_by(BATCH_CHUNK as usize) {
        let chunk = BATCH_CHUNK.min(batch - b0);
        for h0 in (0..heads).step_by(q_tile as usize) {
            let qt = q_tile.min(heads - h0);
            let rows = chunk * qt;
            s.scope(|s| {
                let f32_of = |shape: &[u32]| TensorCreateInfo::new(shape, DType::F32);
                let acc =
                    s.alloc_tensors(&[f32_of(&[rows, d]), f32_of(&[rows]), f32_of(&[rows])])?;
                let (oi, li, mi) = (acc.tensor(0), acc.tensor(1), acc.tensor(2));
                let q = view_of(s, query, &[chunk, qt, d], &[b0, h0, 0], "query")?;
                let o = view_of(s, out, &[chunk, qt, d], &[b0, h0, 0], "out")?;
                let lens = view_of(s, context_lens, &[chunk], &[b0], "context_lens")?;
                for bn in 0..max_bn {
                    let table = view_of(s, block_table, &[chunk, 1], &[b0, bn], "block_table")?;
                    s.scope(|s| {
                        let sij = s
                            .submit_aic(
                                PA_QK,
                                KernelArgs::new()
                                    .input(q)
                                    .input(key_cache)
                                    .input(table)
                                    .output(f32_of(&[rows, block])),
                            )?
                            .tensor(0);
                        let sf = s.submit_aiv(
                            PA_SF,
                            KernelArgs::new()
                                .input(sij)
                                .input(lens)
                                .output(TensorCreateInfo::new(&[rows, block], DType::BF16))
                                .output(f32_of(&[rows]))
                                .output(f32_of(&[rows]))
                                .scalar(scale)
                                .scalar(bn),
                        )?;
                        let (pij, mij, lij) = (sf.tensor(0), sf.tensor(1), sf.tensor(2));
                        let oi_new = s
                            .submit_aic(
                                PA_PV,
                                KernelArgs::new()
                                    .input(pij)
                                    .input(value_cache)
                                    .input(table)
                                    .output(f32_of(&[rows, d])),
                            )?
                            .tensor(0);
                        let last = bn + 1 == max_bn;
                        let mut up = KernelArgs::new()
                            .input(mij)
                            .input(lij)
                            .input(oi_new)
                            .inout(mi)
                            .inout(li)
                            .inout(oi);
                        if last {
                            up = up.output_existing(o);
                        }
                        s.submit_aiv(PA_UP, up.scalar(u32::from(bn == 0)).scalar(u32::from(last)))?;
                        Ok(())
                    })?;
                }
                Ok(())
            })?;
        }
    }
    Ok(())
}

pto_chip::register_chip!("paged_attention", paged_attention, expected_args = 6);

pub(crate) fn link() {}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tiny case for host-only tests.
    const TINY: PaCase = PaCase {
        batch: 3,
        heads: 2,
        d: 12,
        block: 4,
        ctx: 10,
        max_model_len: 16,
        seed: 99,
    };

    /// Plain softmax attention in f64 (no paging tricks, no BF16 rounding of p).
    fn naive(case: &PaCase, x: &PaInputs, scale: f64) -> Vec<f64> {
        let (heads, d, block) = (case.heads as usize, case.d as usize, case.block as usize);
        let bps = case.blocks_per_seq() as usize;
        let mut out = vec![0.0; case.out_len()];
        for b in 0..case.batch as usize {
            let n = x.context_lens[b].max(0) as usize;
            let pos = |t: usize| -> usize {
                let blk = x.block_table[b * bps + t / block] as usize;
                (blk * block + t % block) * d
            };
            for h in 0..heads {
                let q = &x.query[(b * heads + h) * d..][..d];
                let s: Vec<f64> = (0..n)
                    .map(|t| {
                        let k = &x.key_cache[pos(t)..][..d];
                        scale
                            * q.iter()
                                .zip(k)
                                .map(|(a, b)| a.to_f64() * b.to_f64())
                                .sum::<f64>()
                    })
                    .collect();
                let m = s.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let w: Vec<f64> = s.iter().map(|v| (v - m).exp()).collect();
                let z: f64 = w.iter().sum();
                for (t, wt) in w.iter().enumerate() {
                    let v = &x.value_cache[pos(t)..][..d];
                    for k in 0..d {
                        out[(b * heads + h) * d + k] += wt / z * v[k].to_f64();
                    }
                }
            }
        }
        out
    }

    #[test]
    fn pa_case_table() {
        assert_eq!(PA_SMALL.expected_tasks(), 17);
        assert_eq!(RINGBUFFER_STRESS.expected_tasks(), 258);
        assert_eq!(PA_SMALL.total_blocks(), 16);
        assert_eq!(PA_SMALL.block_table_shape(), [4, 32]);
        assert_eq!(RINGBUFFER_STRESS.total_blocks(), 1024);
        assert_eq!(RINGBUFFER_STRESS.cache_shape(), [1024, 128, 1, 128]);
        assert_eq!(RINGBUFFER_STRESS.q_tile(), 16);
        assert_eq!(
            (STRESS_TASK_WINDOW, STRESS_HEAP, STRESS_DEP_POOL),
            (64, 4_194_304, 256)
        );
    }

    #[test]
    fn pa_inputs_are_seeded_and_in_range() {
        let x = make_inputs(&TINY);
        assert_eq!(x, make_inputs(&TINY));
        assert_ne!(x, make_inputs(&PaCase { seed: 100, ..TINY }));
        let total = TINY.total_blocks() as i32;
        assert_eq!(x.query.len(), 3 * 2 * 12);
        assert_eq!(x.key_cache.len(), 9 * 4 * 12);
        assert_eq!(x.block_table.len(), 3 * 4);
        assert!(
            x.query
                .iter()
                .chain(&x.key_cache)
                .all(|v| v.to_f32().abs() <= 0.5)
        );
        assert!(x.value_cache.iter().all(|v| v.to_f32().abs() <= 1.0));
        assert!(x.value_cache.iter().any(|v| v.to_f32().abs() > 0.5));
        assert!(x.block_table.iter().all(|&e| (0..total).contains(&e)));
        assert_eq!(x.context_lens, [10, 10, 10]);
        // The first query value is seed 99's first uniform draw, rounded to BF16.
        let first = SplitMix64::new(99).uniform_f32(-0.5, 0.5);
        assert_eq!(x.query[0], bf16::from_f32(first));
    }

    #[test]
    fn pa_golden_matches_plain_softmax_attention() {
        let mut x = make_inputs(&TINY);
        x.context_lens = vec![10, 3, 16];
        for scale in [1.0f32, 0.25] {
            let got = golden_scaled(&TINY, &x, scale);
            let want = naive(&TINY, &x, f64::from(scale));
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                // p is rounded to BF16 (8 bits): a relative error of a few 2⁻⁹.
                assert!((f64::from(*g) - w).abs() < 1e-2, "index {i}: {g} vs {w}");
            }
        }
    }

    #[test]
    fn pa_fully_masked_blocks_change_nothing() {
        // Sequence 1 has 3 positions: blocks 1..3 are fully masked and must leave it as is.
        let mut x = make_inputs(&TINY);
        x.context_lens = vec![16, 3, 10];
        let walked = golden(&TINY, &x);
        let mut short = x.clone();
        short.context_lens = vec![3, 3, 3];
        let alone = golden(&TINY, &short);
        let row = (TINY.heads * TINY.d) as usize;
        assert_eq!(walked[row..2 * row], alone[row..2 * row]);
    }

    #[test]
    fn pa_softmax_row_masks_and_floors() {
        let s = [1.0f32, 2.0, 3.0, 100.0];
        let mut p = [bf16::ONE; 4];
        let (m, l) = softmax_row(&s, 1.0, 3, &mut p);
        assert_eq!(m, 3.0);
        assert_eq!(p[2], bf16::ONE);
        assert_eq!(p[3], bf16::ZERO);
        assert_eq!(l, p.iter().map(|v| v.to_f32()).sum::<f32>());
        let (m, l) = softmax_row(&s, 1.0, -5, &mut p);
        assert_eq!((m, l), (MASK_FLOOR, 0.0));
        assert!(p.iter().all(|v| *v == bf16::ZERO));
    }

    #[test]
    fn pa_dot_handles_remainders() {
        let a: Vec<f32> = (0..11).map(|i| i as f32).collect();
        assert_eq!(dot(&a, &a), (0..11).map(|i| (i * i) as f32).sum::<f32>());
    }
}
