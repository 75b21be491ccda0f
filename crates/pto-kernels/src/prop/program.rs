//! Random chip programs for property tests: a program is interpreted from a vector of random
//! choices (so proptest shrinks a failing program by shrinking that vector), together with the
//! smallest ring sizing that fits it and a sequential [`Model`] that predicts every buffer
//! element. Used by `tests/prop_chip.rs` (inference on tiny rings), by the replay properties
//! (the same program recorded as a graph and replayed) and by pto-node's tests (both endpoint
//! modes).
//!
//! Hazards the runtime does not track by design (write-after-read, and write-after-write with
//! OUTPUT_EXISTING) get explicit dependencies, as a user must add them (CHIP_RUNTIME.md §3.8);
//! read-after-write edges are never added by hand, so automatic inference is what is tested.
//! A builder with [`Builder::track_war`] leaves write-after-read to the runtime as well (the
//! program must then run with `CallConfig::track_war`).

use std::collections::BTreeSet;
use std::sync::Arc;

use pto_chip::TaskId;
use pto_chip::memory::HostMemory;
use pto_chip::orch::{
    KernelArgs, MixedKernels, OrchResult, OrchTensor, RootScope, Scope, TensorCreateInfo,
};
use pto_chip::replay::{GraphInput, RecordedGraph, Recorder};
use pto_types::{BufferId, DType, RING_COUNT, RuntimeEnv, TaskArgs, Tensor};

use super::{APPLY_AIC, APPLY_AIV, unflatten};

/// External buffers: two 1-D of 64 elements, one 8 × 8, one read-only constant 1-D of 16.
pub const EXT_SHAPES: [&[u32]; 4] = [&[64], &[64], &[8, 8], &[16]];
pub const CONST_BUF: usize = 3;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tag {
    Input,
    InOut,
    OutputExisting,
    NoDep,
}

/// Where a tensor argument lives.
#[derive(Clone, Debug)]
pub enum Target {
    /// A view of external buffer `buf`: shape and offsets.
    Ext {
        buf: usize,
        shape: Vec<u32>,
        offsets: Vec<u32>,
    },
    /// The whole of created tensor `id`.
    Created { id: usize },
}

#[derive(Clone, Debug)]
pub enum Arg {
    Existing { tag: Tag, target: Target },
    Create { id: usize, len: u32 },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Aiv,
    Aic,
    Mix,
    Dummy,
}

#[derive(Clone, Debug)]
pub struct TaskSpec {
    index: usize,
    kind: Kind,
    args: Vec<Arg>,
    /// Explicit dependencies: (earlier task index, RETAIN).
    deps: Vec<(usize, bool)>,
    block_num: u32,
    seed: u32,
}

#[derive(Clone, Debug)]
pub enum Op {
    Task(TaskSpec),
    Scope(Vec<Op>),
}

/// Reads choices; yields 0 once exhausted, so every prefix is a valid program.
pub struct Choices<'a> {
    pub data: &'a [u32],
    pub pos: usize,
}

impl Choices<'_> {
    pub fn next(&mut self, n: u32) -> u32 {
        let v = self.data.get(self.pos).copied().unwrap_or(0);
        self.pos += 1;
        if n == 0 { 0 } else { v % n }
    }

    pub fn done(&self) -> bool {
        self.pos >= self.data.len()
    }
}

/// A memory location: (space, element) where space < 4 is an external buffer and 4 + id a
/// created tensor.
pub type Loc = (usize, u32);

#[derive(Default, Clone)]
struct LocState {
    last_writer: Option<usize>,
    readers: Vec<usize>,
    writers_ever: Vec<usize>,
    /// Every task that read the location (a bound on the write-after-read edges the chip
    /// infers: its reader entries leave only when a write covers them whole, or retire).
    readers_ever: Vec<usize>,
}

/// Per-ring bookkeeping for the sizing.
#[derive(Default, Clone)]
struct RingModel {
    /// Tasks on this ring in order: (bytes, edge bound, scope open).
    tasks: Vec<(u64, u64, usize)>,
    max_count: u64,
    max_bytes: u64,
    max_alloc: u64,
    max_edges: u64,
}

pub struct Builder {
    /// Write-after-read is left to the runtime (`CallConfig::track_war`): no explicit
    /// dependency orders a writer after the readers before it.
    pub track_war: bool,
    /// No MIX task: a recording of the program can replay as one task (`pto_chip::replay`,
    /// "Fused replay"); what would have been a MIX task is an AIV one.
    pub no_mix: bool,
    pub tasks: usize,
    pub created_len: Vec<u32>,
    /// Created tensors visible per open scope.
    visible: Vec<Vec<usize>>,
    locs: std::collections::HashMap<Loc, LocState>,
    rings: [RingModel; RING_COUNT],
    /// Scope ids currently open, innermost last (0 = root).
    open_scopes: Vec<usize>,
    next_scope: usize,
    /// Owner task of each created tensor.
    owner: Vec<usize>,
}

fn ring_of(depth: usize) -> usize {
    depth.min(RING_COUNT - 1)
}

impl Default for Builder {
    fn default() -> Builder {
        Builder::new()
    }
}

impl Builder {
    pub fn new() -> Builder {
        Builder {
            track_war: false,
            no_mix: false,
            tasks: 0,
            created_len: Vec::new(),
            visible: vec![Vec::new()],
            locs: Default::default(),
            rings: Default::default(),
            open_scopes: vec![0],
            next_scope: 1,
            owner: Vec::new(),
        }
    }

    pub fn target_locs(&self, target: &Target) -> Vec<Loc> {
        match target {
            Target::Ext {
                buf,
                shape,
                offsets,
            } => {
                let full = EXT_SHAPES[*buf];
                let mut out = Vec::new();
                let n: u64 = shape.iter().map(|&d| u64::from(d)).product();
                for k in 0..n {
                    let idx = unflatten(k, shape);
                    let elem = if full.len() == 1 {
                        offsets[0] + idx[0]
                    } else {
                        (offsets[0] + idx[0]) * full[1] + offsets[1] + idx[1]
                    };
                    out.push((*buf, elem));
                }
                out
            }
            Target::Created { id } => (0..self.created_len[*id]).map(|e| (4 + id, e)).collect(),
        }
    }

    /// The (space, first, last) element span of some locations of one space.
    fn span(&self, locs: &[Loc]) -> (usize, u32, u32) {
        let space = locs[0].0;
        let first = locs.iter().map(|l| l.1).min().unwrap();
        let last = locs.iter().map(|l| l.1).max().unwrap();
        (space, first, last)
    }

    fn random_target(&self, c: &mut Choices<'_>, allow_const: bool) -> Target {
        let visible: Vec<usize> = self.visible.iter().flatten().copied().collect();
        let kinds = if visible.is_empty() { 3 } else { 4 } + u32::from(allow_const);
        match c.next(kinds) {
            0 | 1 => {
                let buf = c.next(2) as usize;
                let off = c.next(64);
                let len = 1 + c.next(64 - off);
                Target::Ext {
                    buf,
                    shape: vec![len],
                    offsets: vec![off],
                }
            }
            2 => {
                let (r0, c0) = (c.next(8), c.next(8));
                let (h, w) = (1 + c.next(8 - r0), 1 + c.next(8 - c0));
                Target::Ext {
                    buf: 2,
                    shape: vec![h, w],
                    offsets: vec![r0, c0],
                }
            }
            3 if !visible.is_empty() => Target::Created {
                id: visible[c.next(visible.len() as u32) as usize],
            },
            _ => {
                let off = c.next(16);
                let len = 1 + c.next(16 - off);
                Target::Ext {
                    buf: CONST_BUF,
                    shape: vec![len],
                    offsets: vec![off],
                }
            }
        }
    }

    fn task(&mut self, c: &mut Choices<'_>, depth: usize) -> TaskSpec {
        let index = self.tasks;
        self.tasks += 1;
        let kind = match c.next(8) {
            0 => Kind::Aic,
            1 if !self.no_mix => Kind::Mix,
            2 => Kind::Dummy,
            _ => Kind::Aiv,
        };
        let block_num = 1 + c.next(3);
        let multi_part = kind == Kind::Mix || block_num > 1;
        let (mut args, owners) = self.existing_args(c, multi_part);
        let bytes = self.created_args(c, index, &mut args);
        let (merged, edge_bound) = self.explicit_deps(c, index, &args, owners);
        self.record_accesses(index, &args);
        self.account(depth, bytes, edge_bound);
        TaskSpec {
            index,
            kind,
            args,
            deps: merged,
            block_num,
            seed: c.next(1 << 16),
        }
    }

    /// Random tensor arguments over existing memory, none overlapping a written one; returns
    /// them and the owner tasks of the created tensors they name.
    fn existing_args(&self, c: &mut Choices<'_>, multi_part: bool) -> (Vec<Arg>, Vec<usize>) {
        let mut args = Vec::new();
        let mut read_spans: Vec<(usize, u32, u32)> = Vec::new();
        let mut write_spans: Vec<(usize, u32, u32)> = Vec::new();
        let mut owners: Vec<usize> = Vec::new();
        let n_tensors = 1 + c.next(3);
        for _ in 0..n_tensors {
            let target = self.random_target(c, true);
            let is_const = matches!(target, Target::Ext { buf: CONST_BUF, .. });
            let tag = if is_const {
                if c.next(2) == 0 {
                    Tag::NoDep
                } else {
                    Tag::Input
                }
            } else {
                match c.next(if multi_part { 2 } else { 3 }) {
                    0 => Tag::Input,
                    1 => Tag::OutputExisting,
                    _ => Tag::InOut,
                }
            };
            let locs = self.target_locs(&target);
            let writes_it = matches!(tag, Tag::InOut | Tag::OutputExisting);
            // No overlap between a written tensor and any other tensor of the task; kernels
            // check overlap on byte spans, so compare the spans (first..=last element).
            let span = self.span(&locs);
            let clash = spans_overlap(&write_spans, &span)
                || (writes_it && spans_overlap(&read_spans, &span));
            if clash {
                continue;
            }
            if let Target::Created { id } = target {
                owners.push(self.owner[id]);
            }
            if writes_it {
                write_spans.push(span);
            } else {
                read_spans.push(span);
            }
            args.push(Arg::Existing { tag, target });
        }
        (args, owners)
    }

    /// Appends random tensors that task `index` creates; returns their heap bytes.
    fn created_args(&mut self, c: &mut Choices<'_>, index: usize, args: &mut Vec<Arg>) -> u64 {
        let mut bytes = 0u64;
        for _ in 0..c.next(3) {
            let id = self.created_len.len();
            let len = 1 + c.next(16);
            self.created_len.push(len);
            self.owner.push(index);
            bytes += (u64::from(len) * 4).next_multiple_of(1024);
            args.push(Arg::Create { id, len });
        }
        bytes
    }

    /// Explicit dependencies of task `index`: the hazards the runtime does not track, plus
    /// random ones, merged per target; returns them and the task's bound on dependency edges.
    fn explicit_deps(
        &mut self,
        c: &mut Choices<'_>,
        index: usize,
        args: &[Arg],
        owners: Vec<usize>,
    ) -> (Vec<(usize, bool)>, u64) {
        let mut deps: BTreeSet<(usize, bool)> = BTreeSet::new();
        let mut edge_bound: BTreeSet<usize> = owners.iter().copied().collect();
        for arg in args {
            let Arg::Existing { tag, target } = arg else {
                continue;
            };
            for loc in self.target_locs(target) {
                let state = self.locs.entry(loc).or_default();
                if matches!(tag, Tag::Input | Tag::InOut) {
                    edge_bound.extend(state.writers_ever.iter().copied());
                }
                if matches!(tag, Tag::InOut | Tag::OutputExisting) {
                    if self.track_war {
                        // Inferred write-after-read edges: each takes a dep-pool entry.
                        edge_bound.extend(state.readers_ever.iter().copied());
                    } else {
                        for &r in state.readers.iter().filter(|&&r| r != index) {
                            deps.insert((r, false));
                        }
                    }
                    if let (Tag::OutputExisting, Some(w)) = (tag, state.last_writer) {
                        deps.insert((w, false));
                    }
                }
            }
        }
        for _ in 0..c.next(3) {
            if index > 0 {
                deps.insert((c.next(index as u32) as usize, c.next(2) == 0));
            }
        }
        // Merge duplicate targets (RETAIN wins) so the bound counts each producer once.
        let mut merged: Vec<(usize, bool)> = Vec::new();
        for (t, r) in deps {
            match merged.last_mut() {
                Some(last) if last.0 == t => last.1 |= r,
                _ => merged.push((t, r)),
            }
        }
        edge_bound.extend(merged.iter().map(|d| d.0));
        edge_bound.remove(&index);
        (merged, edge_bound.len() as u64)
    }

    /// Updates the hazard state in program order and makes task `index`'s created tensors
    /// visible in its scope.
    fn record_accesses(&mut self, index: usize, args: &[Arg]) {
        for arg in args {
            let Arg::Existing { tag, target } = arg else {
                continue;
            };
            for loc in self.target_locs(target) {
                let state = self.locs.entry(loc).or_default();
                match tag {
                    Tag::Input => {
                        state.readers.push(index);
                        state.readers_ever.push(index);
                    }
                    Tag::NoDep => state.readers.push(index),
                    Tag::InOut | Tag::OutputExisting => {
                        state.readers.clear();
                        state.last_writer = Some(index);
                        state.writers_ever.push(index);
                    }
                }
            }
        }
        for arg in args {
            if let Arg::Create { id, .. } = arg {
                self.visible.last_mut().unwrap().push(*id);
            }
        }
    }

    /// Adds a task to its ring's span model.
    fn account(&mut self, depth: usize, bytes: u64, edges: u64) {
        let ring = ring_of(depth);
        let scope = *self.open_scopes.last().unwrap();
        let open = &self.open_scopes;
        let model = &mut self.rings[ring];
        model.tasks.push((bytes.next_multiple_of(64), edges, scope));
        let first_pinned = model
            .tasks
            .iter()
            .position(|t| open.contains(&t.2))
            .unwrap_or(model.tasks.len() - 1);
        let span = &model.tasks[first_pinned..];
        model.max_count = model.max_count.max(span.len() as u64);
        model.max_bytes = model.max_bytes.max(span.iter().map(|t| t.0).sum());
        model.max_edges = model.max_edges.max(span.iter().map(|t| t.1).sum());
        model.max_alloc = model.max_alloc.max(bytes.next_multiple_of(64));
    }

    pub fn ops(&mut self, c: &mut Choices<'_>, depth: usize, budget: &mut u32) -> Vec<Op> {
        let mut ops = Vec::new();
        while !c.done() && *budget > 0 {
            match c.next(10) {
                0 | 1 if depth < 5 => {
                    *budget -= 1;
                    let id = self.next_scope;
                    self.next_scope += 1;
                    self.open_scopes.push(id);
                    self.visible.push(Vec::new());
                    let inner = self.ops(c, depth + 1, budget);
                    self.visible.pop();
                    self.open_scopes.pop();
                    ops.push(Op::Scope(inner));
                }
                2 if depth > 0 => return ops,
                _ => {
                    *budget -= 1;
                    ops.push(Op::Task(self.task(c, depth)));
                }
            }
        }
        ops
    }

    /// The smallest legal rings that fit the program.
    pub fn sizing(&self, slack: u32) -> RuntimeEnv {
        let mut env = RuntimeEnv::default();
        for (r, m) in self.rings.iter().enumerate() {
            let window = (m.max_count + 1).next_power_of_two().max(4) << (slack % 2);
            let heap = (m.max_bytes + m.max_alloc + 64)
                .next_multiple_of(64)
                .max(1024);
            let dep = m.max_edges.max(4);
            env.ring_task_window[r] = window;
            env.ring_heap[r] = heap;
            env.ring_dep_pool[r] = dep;
        }
        env
    }
}

fn spans_overlap(spans: &[(usize, u32, u32)], s: &(usize, u32, u32)) -> bool {
    spans.iter().any(|o| o.0 == s.0 && o.1 <= s.2 && s.1 <= o.2)
}

/// The sequential model: the same semantics on plain vectors.
pub struct Model {
    pub ext: Vec<Vec<u32>>,
    pub created: Vec<Vec<u32>>,
}

impl Model {
    fn values(&self, b: &Builder, target: &Target) -> Vec<u32> {
        b.target_locs(target)
            .iter()
            .map(|&(s, e)| self.get(s, e))
            .collect()
    }

    fn get(&self, space: usize, elem: u32) -> u32 {
        if space < 4 {
            self.ext[space][elem as usize]
        } else {
            self.created[space - 4][elem as usize]
        }
    }

    fn set(&mut self, space: usize, elem: u32, v: u32) {
        if space < 4 {
            self.ext[space][elem as usize] = v;
        } else {
            self.created[space - 4][elem as usize] = v;
        }
    }

    pub fn run(&mut self, b: &Builder, ops: &[Op]) {
        for op in ops {
            match op {
                Op::Scope(inner) => self.run(b, inner),
                Op::Task(t) => self.task(b, t),
            }
        }
    }

    fn task(&mut self, b: &Builder, t: &TaskSpec) {
        for arg in &t.args {
            if let Arg::Create { id, len } = arg {
                if self.created.len() <= *id {
                    self.created.resize(*id + 1, Vec::new());
                }
                self.created[*id] = vec![0; *len as usize];
            }
        }
        if t.kind == Kind::Dummy {
            return;
        }
        let mut acc = t.seed;
        for arg in &t.args {
            if let Arg::Existing {
                tag: Tag::Input | Tag::InOut | Tag::NoDep,
                target,
            } = arg
            {
                let sum = self
                    .values(b, target)
                    .iter()
                    .fold(0u32, |s, v| s.wrapping_add(*v));
                acc = acc.wrapping_mul(31).wrapping_add(sum);
            }
        }
        for arg in &t.args {
            let (locs, inout) = match arg {
                Arg::Existing {
                    tag: Tag::InOut,
                    target,
                } => (b.target_locs(target), true),
                Arg::Existing {
                    tag: Tag::OutputExisting,
                    target,
                } => (b.target_locs(target), false),
                Arg::Create { id, len } => ((0..*len).map(|e| (4 + id, e)).collect(), false),
                _ => continue,
            };
            for (k, &(s, e)) in locs.iter().enumerate() {
                let v = if inout {
                    self.get(s, e)
                        .wrapping_mul(3)
                        .wrapping_add(acc)
                        .wrapping_add(k as u32)
                } else {
                    acc.wrapping_add(7u32.wrapping_mul(k as u32))
                };
                self.set(s, e, v);
            }
        }
    }
}

pub struct Program {
    pub builder: Builder,
    pub ops: Vec<Op>,
}

/// Interprets a program on a [`Scope`] (`run_ops`: submitted, inference wires it) or on a
/// [`Recorder`] (`record_ops`: recorded as a graph whose inputs are the four external
/// buffers). One body for both, so a replayed program is exactly the submitted one. With a
/// `gate`, every task also waits for it (a program run several times needs one unless the job
/// tracks write-after-read: a later run's writers must wait for an earlier run's readers).
/// With `rerunnable`, every INPUT goes in as a `tracked_input` and every OUTPUT_EXISTING as an
/// INOUT (the kernel still overwrites it, as its scalars say): then the TensorMap alone orders
/// one run of the program after another (write-after-write with OUTPUT_EXISTING is the
/// orchestration's to order, and a recording tracks only the reads tagged so).
macro_rules! interpreter {
    ($name:ident, $scope:ident) => {
        pub fn $name<'s, 'p>(
            s: &mut $scope<'s, 'p>,
            ops: &[Op],
            ext: &[OrchTensor<'s>],
            ids: &mut Vec<TaskId>,
            created: &mut Vec<Option<OrchTensor<'s>>>,
            gate: Option<TaskId>,
            rerunnable: bool,
        ) -> OrchResult<()> {
            for op in ops {
                match op {
                    Op::Scope(inner) => {
                        s.scope(|s| {
                            let ext: Vec<OrchTensor<'_>> = ext.to_vec();
                            // Tensors created inside die with the scope: keep a scope-local table.
                            let mut local: Vec<Option<OrchTensor<'_>>> = created.to_vec();
                            $name(s, inner, &ext, ids, &mut local, gate, rerunnable)
                        })?;
                    }
                    Op::Task(t) => {
                        let mut args = KernelArgs::new();
                        let mut inout = 0u32;
                        let mut write = 0u32;
                        for (i, arg) in t.args.iter().enumerate() {
                            match arg {
                                Arg::Existing { tag, target } => {
                                    let tensor = match target {
                                        Target::Ext {
                                            buf,
                                            shape,
                                            offsets,
                                        } => ext[*buf].view(shape, offsets).expect("valid view"),
                                        Target::Created { id } => created[*id].expect("visible"),
                                    };
                                    args = match tag {
                                        Tag::Input if rerunnable => args.tracked_input(tensor),
                                        Tag::Input => args.input(tensor),
                                        Tag::NoDep => args.no_dep(tensor),
                                        Tag::InOut => {
                                            inout |= 1 << i;
                                            args.inout(tensor)
                                        }
                                        Tag::OutputExisting => {
                                            write |= 1 << i;
                                            if rerunnable {
                                                args.inout(tensor)
                                            } else {
                                                args.output_existing(tensor)
                                            }
                                        }
                                    };
                                }
                                Arg::Create { len, .. } => {
                                    write |= 1 << i;
                                    args = args.output(
                                        TensorCreateInfo::new(&[*len], DType::U32).initial_value(0),
                                    );
                                }
                            }
                        }
                        if let Some(gate) = gate {
                            args = args.dep_wait(gate);
                        }
                        for &(dep, retain) in &t.deps {
                            args = if retain {
                                args.dep(ids[dep])
                            } else {
                                args.dep_wait(ids[dep])
                            };
                        }
                        let parts = if t.kind == Kind::Mix { 3u32 } else { 1 };
                        args = args
                            .scalar(t.seed)
                            .scalar(inout)
                            .scalar(write)
                            .scalar(parts)
                            .block_num(t.block_num);
                        let out = match t.kind {
                            Kind::Aiv => s.submit_aiv(APPLY_AIV, args)?,
                            Kind::Aic => s.submit_aic(APPLY_AIC, args)?,
                            Kind::Mix => s.submit_mix(
                                MixedKernels {
                                    aic: Some(APPLY_AIC),
                                    aiv0: Some(APPLY_AIV),
                                    aiv1: Some(APPLY_AIV),
                                },
                                args,
                            )?,
                            Kind::Dummy => s.submit_dummy(args)?,
                        };
                        debug_assert_eq!(ids.len(), t.index);
                        ids.push(out.task_id());
                        let mut k = 0;
                        for arg in &t.args {
                            if let Arg::Create { id, .. } = arg {
                                if created.len() <= *id {
                                    created.resize(*id + 1, None);
                                }
                                created[*id] = Some(out.tensor(k));
                                k += 1;
                            }
                        }
                    }
                }
            }
            Ok(())
        }
    };
}

interpreter!(run_ops, Scope);
interpreter!(record_ops, Recorder);

pub fn initial_ext() -> Vec<Vec<u32>> {
    EXT_SHAPES
        .iter()
        .enumerate()
        .map(|(b, shape)| {
            let n: u32 = shape.iter().product();
            (0..n).map(|e| (b as u32 + 1) * 1000 + e).collect()
        })
        .collect()
}

/// The program of `choices`, at most 60 tasks and scopes.
pub fn build(choices: &[u32]) -> (Builder, Vec<Op>) {
    build_with(choices, false)
}

/// [`build`] without MIX tasks ([`Builder::no_mix`]).
pub fn build_fusable(choices: &[u32]) -> (Builder, Vec<Op>) {
    let mut builder = Builder::new();
    builder.no_mix = true;
    build_from(builder, choices)
}

/// [`build`], leaving write-after-read to the runtime when `track_war` ([`Builder::track_war`]).
pub fn build_with(choices: &[u32], track_war: bool) -> (Builder, Vec<Op>) {
    let mut builder = Builder::new();
    builder.track_war = track_war;
    build_from(builder, choices)
}

fn build_from(mut builder: Builder, choices: &[u32]) -> (Builder, Vec<Op>) {
    let mut budget = 60;
    let mut c = Choices {
        data: choices,
        pos: 0,
    };
    let ops = builder.ops(&mut c, 0, &mut budget);
    (builder, ops)
}

/// `n` pseudo-random choices from `seed` (xorshift), for callers without proptest.
pub fn seeded_choices(seed: u64, n: usize) -> Vec<u32> {
    let mut x = seed | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u32
        })
        .collect()
}

/// Records a program as a graph with five inputs: the four external buffers and a one-element
/// U32 token that orders replays. The gate (first task) writes the token, so it waits for the
/// previous replay's fence through the TensorMap; every task waits for the gate; the fence
/// (last task) writes the token after every task. Write-after-read across replays, which the
/// runtime does not track, is then ordered too. The root level's created tensors are the
/// graph's outputs, so their buffers are boundary.
pub fn record_program(name: &str, builder: &Builder, ops: &[Op]) -> RecordedGraph {
    let mut inputs: Vec<GraphInput> = EXT_SHAPES
        .iter()
        .map(|shape| GraphInput::new(shape, DType::U32).expect("valid shape"))
        .collect();
    inputs.push(GraphInput::new(&[1], DType::U32).expect("valid shape"));
    let created_len = builder.created_len.len();
    RecordedGraph::record(name, &inputs, |r, ins| {
        let mut ids: Vec<TaskId> = Vec::new();
        let mut created: Vec<Option<OrchTensor<'_>>> = vec![None; created_len];
        let gate = r.submit_dummy(KernelArgs::new().inout(ins[4]))?.task_id();
        record_ops(r, ops, &ins[..4], &mut ids, &mut created, Some(gate), false)?;
        let fence = ids
            .iter()
            .fold(KernelArgs::new().inout(ins[4]), |a, &id| a.dep_wait(id));
        r.submit_dummy(fence)?;
        Ok(created.into_iter().flatten().collect())
    })
    .expect("a generated program is a valid graph")
}

/// Records a program built with [`Builder::track_war`] for a chip job with `track_war` on, as a
/// graph whose inputs are the four external buffers and nothing else, rerunnable (see
/// [`run_ops`]), with no gate or fence: the TensorMap alone orders replays against each other
/// and against submitted runs, through the external buffers (the boundary). The root level's
/// created tensors whose index is set in `exported` (bit `id % 64`) are the graph's outputs:
/// their buffers go through the TensorMap too, the others stay inside, wired from the
/// recording alone.
pub fn record_tracked_program(
    name: &str,
    builder: &Builder,
    ops: &[Op],
    exported: u64,
) -> RecordedGraph {
    assert!(
        builder.track_war,
        "a program that leaves write-after-read to the runtime"
    );
    let inputs: Vec<GraphInput> = EXT_SHAPES
        .iter()
        .map(|shape| GraphInput::new(shape, DType::U32).expect("valid shape"))
        .collect();
    let created_len = builder.created_len.len();
    RecordedGraph::record(name, &inputs, |r, ins| {
        let mut ids: Vec<TaskId> = Vec::new();
        let mut created: Vec<Option<OrchTensor<'_>>> = vec![None; created_len];
        record_ops(r, ops, ins, &mut ids, &mut created, None, true)?;
        let outputs = created.into_iter().enumerate();
        let outputs = outputs.filter(|(id, _)| exported >> (id % 64) & 1 == 1);
        Ok(outputs.filter_map(|(_, t)| t).collect())
    })
    .expect("a generated program is a valid graph")
}

/// Replays `graph` (from [`record_program`]) once per entry of `plan` over the five tensors
/// `ext`: in a nested scope for `true`, at the root for `false`.
pub fn replay_plan<'r>(
    s: &mut RootScope<'r>,
    graph: &RecordedGraph,
    ext: &[OrchTensor<'r>],
    plan: &[bool],
) -> OrchResult<()> {
    for &nested in plan {
        if nested {
            s.scope(|s| s.replay(graph, ext).map(|_| ()))?;
        } else {
            s.replay(graph, ext)?;
        }
    }
    Ok(())
}

/// The external buffers after the program ran `times` times from [`initial_ext`].
pub fn expected(builder: &Builder, ops: &[Op], times: usize) -> Vec<Vec<u32>> {
    let mut model = Model {
        ext: initial_ext(),
        created: Vec::new(),
    };
    for _ in 0..times {
        model.run(builder, ops);
    }
    model.ext
}

/// Host buffers holding [`initial_ext`], each `shift` zero elements in.
pub fn ext_buffers(shift: usize) -> Vec<Arc<HostMemory>> {
    initial_ext()
        .iter()
        .map(|data| {
            let b = HostMemory::new((shift + data.len()) * 4).expect("a host buffer");
            b.write(0, &vec![0u32; shift]);
            b.write(shift, data);
            b
        })
        .collect()
}

/// The four external tensors of a run over `buffers` (from [`ext_buffers`] at shift 0), each
/// INOUT with its [`EXT_SHAPES`] shape, ids under `owner_uid`.
pub fn ext_args(buffers: &[Arc<HostMemory>], owner_uid: u64) -> TaskArgs {
    let mut args = TaskArgs::new();
    for (i, b) in buffers.iter().enumerate() {
        let id = BufferId {
            owner_uid,
            buffer_id: i as u64,
            generation: 0,
        };
        let t = Tensor::contiguous(b.buffer_ref(id), EXT_SHAPES[i], DType::U32).expect("valid");
        args = args.inout(&t);
    }
    args
}

/// Whether `buffers` (from [`ext_buffers`]) hold `want` from `shift` on and zeros before it;
/// the first difference, in words.
pub fn ext_mismatch(
    buffers: &[Arc<HostMemory>],
    want: &[Vec<u32>],
    shift: usize,
) -> Result<(), String> {
    for (i, (b, want)) in buffers.iter().zip(want).enumerate() {
        if b.read::<u32>(0, shift).iter().any(|&v| v != 0) {
            return Err(format!(
                "buffer {i}: an element before the bound view was written"
            ));
        }
        let got: Vec<u32> = b.read(shift, want.len());
        if let Some(first) = got.iter().zip(want).position(|(g, w)| g != w) {
            return Err(format!(
                "buffer {i} differs at element {first}: got {}, sequential {}",
                got[first], want[first]
            ));
        }
    }
    Ok(())
}
