//! The kernel context: what one invocation (one block of a task on one core) sees.
//!
//! Implements CHIP_RUNTIME.md §1.4 (`KernelCtx`), the SPMD fields of §2.3 and cooperative
//! cancellation (§5.3, §6.4). The context hands out views of the task's bound tensors and keeps
//! a small ledger of them, so overlapping read/write views within one invocation panic (rule R3
//! in `view.rs`); it also decides which accesses must be atomic because other invocations of
//! the task may run at once (R4).

use std::cell::{Cell, RefCell};
use std::fmt;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};

use pto_types::DType;

use crate::task_id::TaskId;
use crate::tensor::TensorDesc;

use super::{CoreId, Element, Scalar, View, ViewMut};

/// A tensor argument bound to host memory for one task.
///
/// Plain data: it is dereferenced only through a [`KernelCtx`], which the runtime builds under
/// rules R1 and R2 (`view.rs`).
#[derive(Clone, Copy, Debug)]
pub struct BoundTensor {
    pub desc: TensorDesc,
    /// Host address of the buffer's first byte (the byte at device address `desc.base()`).
    pub base_ptr: *mut u8,
    /// OUTPUT, INOUT or OUTPUT_EXISTING: kernels may write it through [`KernelCtx::output`].
    pub writable: bool,
}

// SAFETY: a `BoundTensor` is an address and a descriptor; moving it between threads accesses
// nothing. Accesses happen only through `KernelCtx` views on the core thread, where the buffer
// is alive and fixed (R1) and ordered against other tasks (R2).
unsafe impl Send for BoundTensor {}
// SAFETY: shared references only read the address and descriptor; the bytes behind `base_ptr`
// are accessed under R1–R4 regardless of how many threads hold the `BoundTensor`.
unsafe impl Sync for BoundTensor {}

impl BoundTensor {
    /// The host bytes the tensor spans (`base_ptr + element_range · elem`); empty for an empty
    /// tensor. Address arithmetic only: nothing is dereferenced.
    fn host_span(&self) -> Range<usize> {
        if self.desc.is_empty() {
            return 0..0;
        }
        let elem = self.desc.elem_size();
        let r = self.desc.element_range();
        let base = self.base_ptr as usize;
        let to_addr = |e: u64| base.saturating_add(usize::try_from(e * elem).unwrap_or(usize::MAX));
        to_addr(r.start)..to_addr(r.end)
    }
}

fn overlaps(a: &Range<usize>, b: &Range<usize>) -> bool {
    !a.is_empty() && !b.is_empty() && a.start < b.end && b.start < a.end
}

/// One view handed out by a context (R3 ledger entry).
#[derive(Debug)]
struct Handout {
    id: u64,
    tensor: usize,
    span: Range<usize>,
    mutable: bool,
}

/// The R3 ledger of one invocation: the views handed out so far.
///
/// Input entries stay until the invocation ends (a [`View::as_slice`] slice outlives its
/// view); an output entry is removed when its [`ViewMut`] is dropped ([`Release`]), since
/// everything borrowed from a `ViewMut` borrows the view itself.
#[derive(Debug, Default)]
pub(super) struct Ledger {
    entries: RefCell<Vec<Handout>>,
    next_id: Cell<u64>,
}

/// Held by a [`ViewMut`]: removes its ledger entry when the view is dropped.
pub(super) struct Release<'a> {
    ledger: &'a Ledger,
    id: u64,
}

impl Drop for Release<'_> {
    fn drop(&mut self) {
        let id = self.id;
        self.ledger.entries.borrow_mut().retain(|h| h.id != id);
    }
}

fn kind(mutable: bool) -> &'static str {
    match mutable {
        true => "output",
        false => "input",
    }
}

/// What one kernel invocation sees: its task's tensors and scalars, its block and core, and the
/// run's cancellation flag.
///
/// Views borrow the context. Asking for an output view that overlaps any other live view of
/// this invocation, or for any view that overlaps a live output view, panics naming both
/// tensors; reading a tensor twice is fine. An output view is live until it is dropped, an
/// input view until the invocation ends (its slices may outlive it). The check is by byte
/// span, so it is conservative for interleaved strided views of one buffer.
pub struct KernelCtx<'a> {
    tensors: &'a [BoundTensor],
    scalars: &'a [u64],
    block_idx: u32,
    block_num: u32,
    sub_block_id: u32,
    /// Kernels of the task running per block: 1, or the active lanes of a MIX task.
    lanes: u32,
    core: CoreId,
    task: TaskId,
    cancelled: &'a AtomicBool,
    ledger: Ledger,
}

impl<'a> KernelCtx<'a> {
    /// The context of block `block_idx` of `block_num` on `core`.
    ///
    /// Contract (crate-internal; the views' `unsafe` relies on it): every tensor satisfies R1
    /// for as long as the context exists, the task is ordered against other tasks (R2), and
    /// the concurrency is described truthfully (R4): `block_num` is the task's, and a MIX task
    /// also calls [`KernelCtx::with_mix_lanes`]. Panics when `block_idx >= block_num`.
    #[allow(
        clippy::too_many_arguments,
        reason = "the agreed runtime interface; one call site"
    )]
    pub(crate) fn new(
        tensors: &'a [BoundTensor],
        scalars: &'a [u64],
        block_idx: u32,
        block_num: u32,
        sub_block_id: u32,
        core: CoreId,
        task: TaskId,
        cancelled: &'a AtomicBool,
    ) -> KernelCtx<'a> {
        assert!(
            block_idx < block_num,
            "block_idx {block_idx} is out of range for block_num {block_num}"
        );
        KernelCtx {
            tensors,
            scalars,
            block_idx,
            block_num,
            sub_block_id,
            lanes: 1,
            core,
            task,
            cancelled,
            ledger: Ledger::default(),
        }
    }

    /// Declares that `lanes` kernels of this task run concurrently in every block (the active
    /// cores of a MIX task, §2.3). Required for MIX tasks with more than one lane (R4).
    #[allow(
        dead_code,
        reason = "for the core threads: a MIX task must declare its lanes (R4)"
    )]
    pub(crate) fn with_mix_lanes(mut self, lanes: u32) -> KernelCtx<'a> {
        assert!(lanes >= 1, "a MIX task has at least one lane");
        self.lanes = lanes;
        self
    }

    /// Whether another invocation of this task may run at the same time (R4).
    fn shared(&self) -> bool {
        self.block_num > 1 || self.lanes > 1
    }

    fn bound(&self, i: usize, what: &str) -> &'a BoundTensor {
        match self.tensors.get(i) {
            Some(t) => t,
            None => panic!(
                "{what}({i}): tensor index out of range, the task has {} tensor arguments",
                self.tensors.len()
            ),
        }
    }

    /// Checks a view request and records it in the ledger; returns whether element accesses
    /// must be atomic and the ledger entry's id. Non-generic body of `input` and `output`.
    fn claim(&self, i: usize, mutable: bool, dtype_ok: bool, want: DType) -> (bool, u64) {
        let what = kind(mutable);
        let t = self.bound(i, what);
        if !dtype_ok {
            panic!(
                "{what}({i}): tensor {i} has dtype {}, but the kernel views it as {want}",
                t.desc.dtype()
            );
        }
        if mutable && !t.writable {
            panic!(
                "output({i}): tensor {i} is read-only (INPUT or NO_DEP); only OUTPUT, INOUT and \
                 OUTPUT_EXISTING tensors can be written"
            );
        }
        let elem = t.desc.elem_size() as usize;
        if !t.desc.is_empty() && !(t.base_ptr as usize).is_multiple_of(elem) {
            panic!(
                "{what}({i}): host address {:p} of tensor {i} is not aligned to its {elem}-byte \
                 elements",
                t.base_ptr
            );
        }
        let span = t.host_span();
        let mut ledger = self.ledger.entries.borrow_mut();
        for h in ledger.iter() {
            if (mutable || h.mutable) && overlaps(&h.span, &span) {
                panic!(
                    "{what}({i}): the {what} view of tensor {i} (host bytes {:#x}..{:#x}) \
                     overlaps the {} view of tensor {} (host bytes {:#x}..{:#x}) handed out \
                     earlier in this invocation; a kernel may not write bytes it reads or \
                     writes through another view",
                    span.start,
                    span.end,
                    kind(h.mutable),
                    h.tensor,
                    h.span.start,
                    h.span.end
                );
            }
        }
        let id = self.ledger.next_id.get();
        self.ledger.next_id.set(id + 1);
        ledger.push(Handout {
            id,
            tensor: i,
            span: span.clone(),
            mutable,
        });
        if !self.shared() {
            return (false, id);
        }
        // R4a: with concurrent invocations, writes and reads of tainted tensors (writable, or
        // overlapping a writable argument) are atomic.
        let atomic =
            mutable
                || t.writable
                || self.tensors.iter().enumerate().any(|(k, other)| {
                    k != i && other.writable && overlaps(&other.host_span(), &span)
                });
        (atomic, id)
    }

    /// A read view of tensor `i` (any tag) as elements of `T`.
    ///
    /// Panics when `i` is out of range, the dtype does not match `T`, or the view overlaps an
    /// output view of this invocation.
    pub fn input<T: Element>(&self, i: usize) -> View<'_, T> {
        let t = self.bound(i, "input");
        let (atomic, _) = self.claim(i, false, T::accepts(t.desc.dtype()), T::DTYPE);
        // SAFETY: `claim` checked the dtype, alignment (R5) and the ledger (R3) and chose
        // atomic access for tensors other invocations may write (R4a, R4b); the runtime binds
        // the tensor for the context's lifetime and orders other tasks (R1, R2).
        unsafe { View::from_raw(t.base_ptr, t.desc, atomic) }
    }

    /// A write view of tensor `i` (OUTPUT, INOUT or OUTPUT_EXISTING) as elements of `T`.
    ///
    /// Takes `&self` so a kernel can hold inputs and outputs at once. Panics when `i` is out of
    /// range, the dtype does not match `T`, the tensor is read-only, or the view overlaps any
    /// other live view of this invocation (including a live `output(i)`; a dropped one is
    /// released).
    pub fn output<T: Element>(&self, i: usize) -> ViewMut<'_, T> {
        let t = self.bound(i, "output");
        let (shared, id) = self.claim(i, true, T::accepts(t.desc.dtype()), T::DTYPE);
        let release = Release {
            ledger: &self.ledger,
            id,
        };
        // SAFETY: `claim` checked the dtype, writability, alignment (R5) and that no other live
        // view of this invocation overlaps (R3; the entry stays until the view drops `release`); `shared` and the block/lane counts describe the
        // concurrent invocations (R4); the runtime binds the tensor for the context's lifetime
        // and orders other tasks (R1, R2).
        unsafe {
            ViewMut::from_raw(
                t.base_ptr,
                t.desc,
                shared,
                self.block_idx,
                self.block_num,
                self.lanes,
                release,
            )
        }
    }

    /// Scalar argument `j` decoded as `S` (a `u64` bit pattern, §2.2); panics when out of range.
    pub fn scalar<S: Scalar>(&self, j: usize) -> S {
        match self.scalars.get(j) {
            Some(&bits) => S::from_bits(bits),
            None => panic!(
                "scalar({j}): scalar index out of range, the task has {} scalar arguments",
                self.scalars.len()
            ),
        }
    }

    /// This invocation's block, `0..block_num`.
    pub fn block_idx(&self) -> u32 {
        self.block_idx
    }

    /// Number of blocks of the task (SPMD, §2.3); at least 1.
    pub fn block_num(&self) -> u32 {
        self.block_num
    }

    /// Position of the core within its cluster's AIV pair (0 or 1; 0 for AIC).
    pub fn sub_block_id(&self) -> u32 {
        self.sub_block_id
    }

    pub fn core(&self) -> CoreId {
        self.core
    }

    pub fn task(&self) -> TaskId {
        self.task
    }

    /// Whether the run has failed and kernels should return early (§5.3); poll it in long
    /// loops. A relaxed load: it is a hint, not a synchronization point.
    pub fn cancelled(&self) -> bool {
        self.cancelled.load(Ordering::Relaxed)
    }

    pub fn num_tensors(&self) -> usize {
        self.tensors.len()
    }

    pub fn num_scalars(&self) -> usize {
        self.scalars.len()
    }
}

impl fmt::Debug for KernelCtx<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KernelCtx")
            .field("task", &self.task)
            .field(
                "block",
                &format_args!("{}/{}", self.block_idx, self.block_num),
            )
            .field("sub_block_id", &self.sub_block_id)
            .field("lanes", &self.lanes)
            .field("core", &self.core)
            .field("tensors", &self.tensors.len())
            .field("scalars", &self.scalars.len())
            .finish()
    }
}

/// Test support: bind `Vec`-backed buffers and build contexts.
#[cfg(test)]
pub(crate) mod testing {
    use super::*;

    /// A task's bound tensors and scalars. The buffers are owned by the test; keep them alive
    /// and untouched while a context exists, then inspect them.
    pub(crate) struct Harness {
        pub(crate) tensors: Vec<BoundTensor>,
        pub(crate) scalars: Vec<u64>,
        pub(crate) cancelled: AtomicBool,
    }

    /// Device base used for test descriptors (never used for address arithmetic).
    pub(crate) const DEVICE_BASE: u64 = 0x10_0000;

    impl Harness {
        pub(crate) fn new(tensors: Vec<BoundTensor>, scalars: Vec<u64>) -> Harness {
            Harness {
                tensors,
                scalars,
                cancelled: AtomicBool::new(false),
            }
        }

        pub(crate) fn ctx(&self, block_idx: u32, block_num: u32) -> KernelCtx<'_> {
            KernelCtx::new(
                &self.tensors,
                &self.scalars,
                block_idx,
                block_num,
                block_idx % 2,
                CoreId(8 + block_idx),
                TaskId::new(1, 5),
                &self.cancelled,
            )
        }

        /// `desc` over `buf`, bound as `writable`. `Vec::as_mut_ptr` does not reborrow the
        /// elements, so several tensors may be bound over one buffer.
        pub(crate) fn bind<E>(buf: &mut Vec<E>, desc: TensorDesc, writable: bool) -> BoundTensor {
            assert!(desc.buffer_bytes() as usize <= buf.len() * size_of::<E>());
            BoundTensor {
                desc,
                base_ptr: buf.as_mut_ptr().cast(),
                writable,
            }
        }

        /// A contiguous `u32` tensor of `shape` over all of `buf`.
        pub(crate) fn bind_u32(buf: &mut Vec<u32>, shape: &[u32], writable: bool) -> BoundTensor {
            let bytes = (buf.len() * 4) as u64;
            let desc = TensorDesc::contiguous(DEVICE_BASE, bytes, shape, DType::U32).unwrap();
            Harness::bind(buf, desc, writable)
        }

        /// A contiguous tensor of 8-byte `dtype` and `shape` over all of `buf`.
        pub(crate) fn bind_u64(
            buf: &mut Vec<u64>,
            shape: &[u32],
            dtype: DType,
            writable: bool,
        ) -> BoundTensor {
            let bytes = (buf.len() * 8) as u64;
            let desc = TensorDesc::contiguous(DEVICE_BASE, bytes, shape, dtype).unwrap();
            Harness::bind(buf, desc, writable)
        }
    }

    /// Runs `f`, expecting a panic; returns its message.
    pub(crate) fn panic_message(f: impl FnOnce()) -> String {
        let err = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f))
            .expect_err("expected a panic");
        match (err.downcast_ref::<String>(), err.downcast_ref::<&str>()) {
            (Some(s), _) => s.clone(),
            (None, Some(s)) => (*s).to_owned(),
            (None, None) => "<non-string panic>".to_owned(),
        }
    }
}

#[cfg(test)]
mod tests {
    use half::{bf16, f16};

    use super::testing::{DEVICE_BASE, Harness, panic_message};
    use super::*;
    use crate::tensor::BufferAddr;

    /// A 4×8 f32 buffer holding `i as f32` at element `i`.
    fn f32_buffer(n: usize) -> Vec<u32> {
        (0..n).map(|i| (i as f32).to_bits()).collect()
    }

    fn f32_tensor(buf: &mut Vec<u32>, shape: &[u32], writable: bool) -> BoundTensor {
        let bytes = (buf.len() * 4) as u64;
        let desc = TensorDesc::contiguous(DEVICE_BASE, bytes, shape, DType::F32).unwrap();
        Harness::bind(buf, desc, writable)
    }

    /// The manual model: row-major indices of `shape` and the element offset
    /// `start + Σ idx·stride` of each.
    fn model(shape: &[u32], strides: &[u64], start: u64) -> Vec<(Vec<u32>, u64)> {
        let mut out = Vec::new();
        let n: u64 = shape.iter().map(|&d| u64::from(d)).product();
        for lin in 0..n {
            let mut idx = vec![0u32; shape.len()];
            let mut rest = lin;
            for d in (0..shape.len()).rev() {
                idx[d] = (rest % u64::from(shape[d])) as u32;
                rest /= u64::from(shape[d]);
            }
            let off = start
                + idx
                    .iter()
                    .zip(strides)
                    .map(|(&i, &s)| u64::from(i) * s)
                    .sum::<u64>();
            out.push((idx, off));
        }
        out
    }

    /// Checks a read view of `desc` over a buffer holding `i` at element `i` against the model.
    fn check_view(desc: TensorDesc, shape: &[u32], strides: &[u64], start: u64) {
        let mut buf = f32_buffer(64);
        let h = Harness::new(vec![Harness::bind(&mut buf, desc, false)], vec![]);
        let ctx = h.ctx(0, 1);
        let v = ctx.input::<f32>(0);
        assert_eq!(v.shape(), shape);
        let m = model(shape, strides, start);
        assert_eq!(v.len(), m.len());
        for (idx, off) in &m {
            assert_eq!(v.get(idx), *off as f32, "index {idx:?}");
        }
        let expect: Vec<f32> = m.iter().map(|(_, off)| *off as f32).collect();
        assert_eq!(v.iter().collect::<Vec<_>>(), expect);
        assert_eq!(v.to_vec(), expect);
        assert_eq!(v.iter().size_hint(), (m.len(), Some(m.len())));
        match v.as_slice() {
            Some(s) => {
                assert!(desc.is_contiguous());
                assert_eq!(s, &expect[..]);
            }
            None => assert!(!desc.is_contiguous()),
        }
    }

    fn full(shape: &[u32]) -> TensorDesc {
        TensorDesc::contiguous(DEVICE_BASE, 256, shape, DType::F32).unwrap()
    }

    #[test]
    fn kernel_view_contiguous() {
        check_view(full(&[4, 8]), &[4, 8], &[8, 1], 0);
        check_view(full(&[64]), &[64], &[1], 0);
        check_view(
            full(&[2, 2, 2, 2, 4]),
            &[2, 2, 2, 2, 4],
            &[32, 16, 8, 4, 1],
            0,
        );
        // A row slice is contiguous with a start offset.
        let rows = full(&[4, 8]).slice(0, 1, 2).unwrap();
        check_view(rows, &[2, 8], &[8, 1], 8);
    }

    #[test]
    fn kernel_view_strided() {
        let t = full(&[4, 8]);
        check_view(t.transpose(0, 1).unwrap(), &[8, 4], &[1, 8], 0);
        check_view(t.slice(1, 2, 3).unwrap(), &[4, 3], &[8, 1], 2);
        check_view(t.view(&[2, 3], &[1, 4]).unwrap(), &[2, 3], &[8, 1], 12);
        check_view(
            t.view(&[3, 2], &[1, 5]).unwrap().transpose(0, 1).unwrap(),
            &[2, 3],
            &[1, 8],
            13,
        );
        let cube = full(&[2, 4, 8]);
        check_view(
            cube.permute(&[2, 0, 1]).unwrap(),
            &[8, 2, 4],
            &[1, 32, 8],
            0,
        );
        // Explicit strides: every other element.
        let buf = BufferAddr::device(DEVICE_BASE, 256);
        let evens = TensorDesc::new(buf, 1, &[3, 5], &[20, 2], DType::F32).unwrap();
        check_view(evens, &[3, 5], &[20, 2], 1);
        // Empty views.
        let empty = t.slice(0, 4, 0).unwrap();
        check_view(empty, &[0, 8], &[8, 1], 32);
    }

    #[test]
    fn kernel_view_get_out_of_bounds_panics() {
        let mut buf = f32_buffer(32);
        let h = Harness::new(vec![f32_tensor(&mut buf, &[4, 8], false)], vec![]);
        let ctx = h.ctx(0, 1);
        let v = ctx.input::<f32>(0);
        let msg = panic_message(|| {
            v.get(&[4, 0]);
        });
        assert_eq!(
            msg,
            "index [4, 0] is out of bounds for a tensor of shape [4, 8]"
        );
        let msg = panic_message(|| {
            v.get(&[1]);
        });
        assert!(msg.contains("index [1] is out of bounds"), "{msg}");
    }

    #[test]
    fn kernel_view_mut_writes_strided() {
        let mut buf = vec![0u32; 32];
        let whole = TensorDesc::contiguous(DEVICE_BASE, 128, &[4, 8], DType::F32).unwrap();
        let cols = whole.slice(1, 2, 2).unwrap(); // columns 2 and 3
        let diag = TensorDesc::new(
            BufferAddr::device(DEVICE_BASE, 128),
            4,
            &[4],
            &[9],
            DType::F32,
        )
        .unwrap(); // elements 4, 13, 22, 31
        let h = Harness::new(
            vec![
                Harness::bind(&mut buf, cols, true),
                Harness::bind(&mut buf, diag, true),
            ],
            vec![],
        );
        {
            let ctx = h.ctx(0, 1);
            let mut c = ctx.output::<f32>(0);
            assert!(c.as_mut_slice().is_none());
            c.fill(1.0);
            c.set(&[3, 1], 5.0);
            assert_eq!(c.get(&[3, 1]), 5.0);
            assert_eq!(c.to_vec(), [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 5.0]);
            // The ledger compares byte spans, so it refuses these two element-disjoint views
            // together (conservative); once `c` is dropped the diagonal may be written.
            let msg = panic_message(|| {
                ctx.output::<f32>(1);
            });
            assert!(
                msg.contains("overlaps the output view of tensor 0"),
                "{msg}"
            );
            drop(c);
            let mut d = ctx.output::<f32>(1);
            d.copy_from_slice(&[10.0, 11.0, 12.0, 13.0]);
            assert_eq!(d.to_vec(), [10.0, 11.0, 12.0, 13.0]);
            let msg = panic_message(|| d.copy_from_slice(&[1.0]));
            assert!(msg.contains("source has 1 elements"), "{msg}");
        }
        drop(h);
        let got: Vec<f32> = buf.iter().map(|&b| f32::from_bits(b)).collect();
        let mut expect = vec![0.0f32; 32];
        for r in 0..4 {
            expect[r * 8 + 2] = 1.0;
            expect[r * 8 + 3] = 1.0;
        }
        expect[3 * 8 + 3] = 5.0;
        for (k, i) in [4, 13, 22, 31].into_iter().enumerate() {
            expect[i] = 10.0 + k as f32;
        }
        assert_eq!(got, expect);
    }

    #[test]
    fn kernel_view_mut_contiguous_slices() {
        let mut buf = vec![0u32; 12];
        let h = Harness::new(vec![Harness::bind_u32(&mut buf, &[3, 4], true)], vec![]);
        {
            let ctx = h.ctx(0, 1);
            let mut o = ctx.output::<u32>(0);
            let s = o.as_mut_slice().unwrap();
            for (i, x) in s.iter_mut().enumerate() {
                *x = i as u32;
            }
            assert_eq!(o.block_chunk_range(), 0..12);
            assert_eq!(o.block_chunk_mut().len(), 12);
            assert_eq!(o.get(&[2, 3]), 11);
        }
        drop(h);
        assert_eq!(buf, (0..12).collect::<Vec<u32>>());
    }

    #[test]
    fn kernel_ctx_ledger_overlap_rules() {
        let mut buf = f32_buffer(64);
        let whole = full(&[4, 8]);
        let desc = |rows: Range<u32>| whole.slice(0, rows.start, rows.end - rows.start).unwrap();
        let h = Harness::new(
            vec![
                Harness::bind(&mut buf, desc(0..4), true),  // 0: whole
                Harness::bind(&mut buf, desc(0..2), true),  // 1: top half
                Harness::bind(&mut buf, desc(2..4), true),  // 2: bottom half
                Harness::bind(&mut buf, desc(1..3), false), // 3: middle, read-only
            ],
            vec![],
        );
        // Input and output of overlapping bytes: panic naming both tensors.
        let msg = panic_message(|| {
            let ctx = h.ctx(0, 1);
            let _x = ctx.input::<f32>(0);
            let _y = ctx.output::<f32>(1);
        });
        assert!(
            msg.starts_with("output(1): the output view of tensor 1 (host bytes"),
            "{msg}"
        );
        assert!(
            msg.contains("overlaps the input view of tensor 0 (host bytes"),
            "{msg}"
        );
        // The other order too.
        let msg = panic_message(|| {
            let ctx = h.ctx(0, 1);
            let _y = ctx.output::<f32>(2);
            let _x = ctx.input::<f32>(3);
        });
        assert!(
            msg.contains("input(3): the input view of tensor 3")
                && msg.contains("overlaps the output view of tensor 2"),
            "{msg}"
        );
        // Output twice: panic.
        let msg = panic_message(|| {
            let ctx = h.ctx(0, 1);
            let _a = ctx.output::<f32>(1);
            let _b = ctx.output::<f32>(1);
        });
        assert!(
            msg.contains("output view of tensor 1")
                && msg.contains("overlaps the output view of tensor 1"),
            "{msg}"
        );
        // A dropped output view is released: the same output again, then an input, are fine.
        // An input view is never released (its slices may outlive it).
        let ctx = h.ctx(0, 1);
        ctx.output::<f32>(1).set(&[0, 0], 100.0);
        let again = ctx.output::<f32>(1);
        assert_eq!(again.get(&[0, 0]), 100.0);
        drop(again);
        assert_eq!(ctx.input::<f32>(0).as_slice().unwrap()[0], 100.0);
        let msg = panic_message(|| {
            ctx.output::<f32>(1);
        });
        assert!(msg.contains("overlaps the input view of tensor 0"), "{msg}");
        // Disjoint halves, and reading a tensor twice: fine.
        let ctx = h.ctx(0, 1);
        let top = ctx.output::<f32>(1);
        let bottom = ctx.output::<f32>(2);
        assert_eq!(top.get(&[1, 7]), 15.0);
        assert_eq!(top.get(&[0, 0]), 100.0);
        assert_eq!(bottom.get(&[0, 0]), 16.0);
        let ctx = h.ctx(0, 1);
        let a = ctx.input::<f32>(0);
        let b = ctx.input::<f32>(0);
        let c = ctx.input::<f32>(3);
        assert_eq!(
            (a.get(&[3, 7]), b.get(&[0, 1]), c.get(&[0, 0])),
            (31.0, 1.0, 8.0)
        );
    }

    #[test]
    fn kernel_ctx_bad_requests_panic() {
        let mut buf = f32_buffer(32);
        let mut bytes = vec![0u64; 4];
        let h = Harness::new(
            vec![
                f32_tensor(&mut buf, &[4, 8], false),
                Harness::bind_u64(&mut bytes, &[4], DType::U64, true),
            ],
            vec![7],
        );
        let ctx = h.ctx(0, 1);
        let msg = panic_message(|| {
            ctx.input::<i32>(0);
        });
        assert_eq!(
            msg,
            "input(0): tensor 0 has dtype f32, but the kernel views it as i32"
        );
        let msg = panic_message(|| {
            ctx.input::<f32>(2);
        });
        assert_eq!(
            msg,
            "input(2): tensor index out of range, the task has 2 tensor arguments"
        );
        let msg = panic_message(|| {
            ctx.output::<f32>(0);
        });
        assert!(
            msg.starts_with("output(0): tensor 0 is read-only (INPUT or NO_DEP)"),
            "{msg}"
        );
        let msg = panic_message(|| {
            ctx.scalar::<u64>(1);
        });
        assert_eq!(
            msg,
            "scalar(1): scalar index out of range, the task has 1 scalar arguments"
        );
        let msg = panic_message(|| {
            h.ctx(2, 2);
        });
        assert_eq!(msg, "block_idx 2 is out of range for block_num 2");
        // A host address not aligned to the element size (R5).
        let mut raw = vec![0u64; 4];
        let desc = TensorDesc::contiguous(DEVICE_BASE, 16, &[4], DType::F32).unwrap();
        let misaligned = BoundTensor {
            desc,
            base_ptr: raw.as_mut_ptr().cast::<u8>().wrapping_add(2),
            writable: false,
        };
        let h2 = Harness::new(vec![misaligned], vec![]);
        let msg = panic_message(|| {
            h2.ctx(0, 1).input::<f32>(0);
        });
        assert!(
            msg.contains("is not aligned to its 4-byte elements"),
            "{msg}"
        );
    }

    #[test]
    fn kernel_ctx_scalars_ids_and_cancellation() {
        let h = Harness::new(
            vec![],
            vec![
                u64::from(1.5f32.to_bits()),
                (-3i64) as u64,
                2.25f64.to_bits(),
                0xffff_ffff_0000_0009,
            ],
        );
        let ctx = h.ctx(1, 3);
        assert_eq!(ctx.scalar::<f32>(0), 1.5);
        assert_eq!(ctx.scalar::<i64>(1), -3);
        assert_eq!(ctx.scalar::<i32>(1), -3);
        assert_eq!(ctx.scalar::<f64>(2), 2.25);
        assert_eq!(ctx.scalar::<u32>(3), 9);
        assert_eq!((ctx.num_tensors(), ctx.num_scalars()), (0, 4));
        assert_eq!((ctx.block_idx(), ctx.block_num()), (1, 3));
        assert_eq!(ctx.sub_block_id(), 1);
        assert_eq!(ctx.core(), CoreId(9));
        assert_eq!(ctx.task(), TaskId::new(1, 5));
        assert!(!ctx.cancelled());
        h.cancelled.store(true, Ordering::Relaxed);
        assert!(ctx.cancelled());
        assert!(format!("{ctx:?}").contains("block: 1/3"));
    }

    #[test]
    fn kernel_view_half_and_bool_elements() {
        let mut halves: Vec<u16> = [1.5f32, -2.0, 0.25, 8.0]
            .iter()
            .map(|&x| f16::from_f32(x).to_bits())
            .collect();
        let mut brains: Vec<u16> = vec![bf16::from_f32(3.0).to_bits(); 2];
        let mut bools = vec![0u8, 1, 0, 1, 1, 0, 0, 0];
        let d16 = TensorDesc::contiguous(DEVICE_BASE, 8, &[2, 2], DType::F16).unwrap();
        let dbf = TensorDesc::contiguous(DEVICE_BASE, 4, &[2], DType::BF16).unwrap();
        let dbool = TensorDesc::contiguous(DEVICE_BASE, 8, &[8], DType::Bool).unwrap();
        let h = Harness::new(
            vec![
                Harness::bind(&mut halves, d16.transpose(0, 1).unwrap(), false),
                Harness::bind(&mut brains, dbf, true),
                Harness::bind(&mut bools, dbool, true),
            ],
            vec![],
        );
        {
            let ctx = h.ctx(0, 1);
            let x: Vec<f32> = ctx.input::<f16>(0).iter().map(f16::to_f32).collect();
            assert_eq!(x, [1.5, 0.25, -2.0, 8.0]);
            let mut y = ctx.output::<bf16>(1);
            y.set(&[1], bf16::from_f32(-1.0));
            assert_eq!(y.to_vec(), [bf16::from_f32(3.0), bf16::from_f32(-1.0)]);
            let mut b = ctx.output::<u8>(2);
            assert_eq!(b.get(&[3]), 1);
            b.fill(1);
        }
        drop(h);
        assert_eq!(bools, [1; 8]);
        assert_eq!(brains[1], bf16::from_f32(-1.0).to_bits());
    }

    #[test]
    fn kernel_block_chunks_cover_the_tensor_once() {
        for block_num in 1..=9u32 {
            for n in [0u32, 1, 5, 8, 103] {
                let mut buf = vec![0u32; (n as usize).max(1)];
                let h = Harness::new(vec![Harness::bind_u32(&mut buf, &[n.max(1)], true)], vec![]);
                let mut h = h;
                if n == 0 {
                    // An empty tensor: chunks are empty.
                    let desc = h.tensors[0].desc.slice(0, 0, 0).unwrap();
                    h.tensors[0].desc = desc;
                }
                for block_idx in 0..block_num {
                    let ctx = h.ctx(block_idx, block_num);
                    let mut o = ctx.output::<u32>(0);
                    assert_eq!(o.as_mut_slice().is_some(), block_num == 1);
                    let range = o.block_chunk_range();
                    let chunk = o.block_chunk_mut();
                    assert_eq!(chunk.len(), range.len());
                    for x in chunk {
                        *x += block_idx + 1;
                    }
                }
                drop(h);
                // Every element was written by exactly one block, block k writing k + 1 to a
                // non-decreasing run of elements.
                if n > 0 {
                    assert!(buf.iter().all(|&x| x >= 1 && x <= block_num), "{buf:?}");
                    assert!(buf.windows(2).all(|w| w[0] <= w[1]));
                    let counts: Vec<usize> = (1..=block_num)
                        .map(|k| buf.iter().filter(|&&x| x == k).count())
                        .collect();
                    let lo = n as usize / block_num as usize;
                    assert!(counts.iter().all(|&c| c == lo || c == lo + 1), "{counts:?}");
                } else {
                    assert_eq!(buf, [0]);
                }
            }
        }
    }

    #[test]
    fn kernel_ctx_shared_rules() {
        let mut data = vec![5u32; 8];
        let mut out = vec![0u32; 8];
        let mut strided = vec![0u32; 8];
        let cols = TensorDesc::contiguous(DEVICE_BASE, 32, &[2, 4], DType::U32)
            .unwrap()
            .transpose(0, 1)
            .unwrap();
        let h = Harness::new(
            vec![
                Harness::bind_u32(&mut data, &[8], false), // 0: untainted input
                Harness::bind_u32(&mut out, &[8], true),   // 1: output
                Harness::bind(&mut strided, cols, true),   // 2: strided output
            ],
            vec![],
        );
        let ctx = h.ctx(1, 2);
        // An untainted input still gives a slice; a writable tensor read as input does not.
        assert_eq!(ctx.input::<u32>(0).as_slice(), Some(&[5u32; 8][..]));
        let w = ctx.input::<u32>(2);
        assert_eq!(w.as_slice(), None);
        assert_eq!(w.to_vec(), [0; 8]);
        let mut o = ctx.output::<u32>(1);
        assert!(o.as_mut_slice().is_none());
        assert_eq!(o.block_chunk_range(), 4..8);
        o.set(&[0], 1); // element-wise writes are allowed anywhere (atomic)
        o.block_chunk_mut().fill(2);
        assert_eq!(o.to_vec(), [1, 0, 0, 0, 2, 2, 2, 2]);
        // Strided outputs have no chunk slices.
        let ctx = h.ctx(0, 2);
        let mut s = ctx.output::<u32>(2);
        let msg = panic_message(|| {
            s.block_chunk_mut();
        });
        assert!(
            msg.starts_with("block_chunk_mut needs a contiguous tensor"),
            "{msg}"
        );
        // MIX lanes of one block would share a chunk.
        let ctx = h.ctx(0, 1).with_mix_lanes(2);
        let mut o = ctx.output::<u32>(1);
        assert!(o.as_mut_slice().is_none());
        let msg = panic_message(|| {
            o.block_chunk_mut();
        });
        assert_eq!(
            msg,
            "block_chunk_mut is unavailable when 2 kernels of a MIX task share each block"
        );
    }

    /// Blocks of one SPMD task run on real threads: chunk slices, strided element-wise writes
    /// and reads of a shared input, as a core pool would run them.
    #[test]
    fn kernel_ctx_blocks_on_threads() {
        const BLOCKS: u32 = 4;
        let n = 1000u32;
        let mut input: Vec<u32> = (0..n).collect();
        let mut out = vec![0u32; n as usize];
        let mut cols = vec![0u32; 2 * BLOCKS as usize];
        let col_desc = TensorDesc::contiguous(DEVICE_BASE, 32, &[2, BLOCKS], DType::U32)
            .unwrap()
            .transpose(0, 1)
            .unwrap();
        let h = Harness::new(
            vec![
                Harness::bind_u32(&mut input, &[n], false),
                Harness::bind_u32(&mut out, &[n], true),
                Harness::bind(&mut cols, col_desc, true),
            ],
            vec![3],
        );
        std::thread::scope(|s| {
            for b in 0..BLOCKS {
                let h = &h;
                s.spawn(move || {
                    let ctx = h.ctx(b, BLOCKS);
                    let x = ctx.input::<u32>(0);
                    let x = x.as_slice().unwrap();
                    let mut y = ctx.output::<u32>(1);
                    let mut c = ctx.output::<u32>(2);
                    let k: u32 = ctx.scalar(0);
                    let range = y.block_chunk_range();
                    for (dst, src) in y.block_chunk_mut().iter_mut().zip(&x[range]) {
                        *dst = src * k;
                    }
                    c.set(&[b, 0], b);
                    c.set(&[b, 1], 100 + b);
                });
            }
        });
        drop(h);
        assert_eq!(out, (0..n).map(|i| 3 * i).collect::<Vec<_>>());
        assert_eq!(cols, [0, 1, 2, 3, 100, 101, 102, 103]);
    }
}
