//! The kernel registry: kernels by name, registered statically or at run time.
//!
//! Implements the naming half of CHIP_RUNTIME.md §1.4. A [`KernelRef`] is a `&'static`
//! [`KernelDef`] (name, core type, implementation); chips bind kernels **by name**, so ids never
//! cross a process boundary.
//!
//! * [`register_kernel!`](crate::register_kernel) defines a `pub static` [`KernelRef`] and
//!   submits it to an `inventory` collection. The name is checked at compile time; the
//!   name → kernel index is built once, lazily, on the first lookup.
//! * [`register_kernel_closure`] registers a closure at run time (in-process tests and
//!   endpoints). It leaks one boxed definition and its name per call, so it is meant for a
//!   bounded number of registrations per process.
//!
//! Duplicate policy: two static registrations with the same name (or an invalid static name,
//! which only a hand-built [`KernelDef`] can have) make the registry inconsistent.
//! [`kernel_registry_problems`] lists such problems without failing; [`find_kernel`] panics
//! with that list, on every call, because a binary that links two kernels under one name
//! cannot bind either reliably. A closure whose name is taken is refused with
//! [`KernelNameError::Duplicate`].

use std::cell::Cell;
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{OnceLock, PoisonError, RwLock};

use pto_types::args::is_valid_name;

use super::{CoreType, KernelCtx, KernelFn};

/// A boxed closure kernel.
type KernelClosure = Box<dyn Fn(&mut KernelCtx<'_>) + Send + Sync>;

enum KernelImpl {
    Fn(KernelFn),
    Closure(KernelClosure),
}

/// A registered kernel: name, core type and implementation.
pub struct KernelDef {
    name: &'static str,
    core: CoreType,
    imp: KernelImpl,
    /// How its last run in this process returned ([`KernelRef::record_run`]): `NOT_RETURNED`,
    /// `RETURNED_LONG` or `RETURNED_QUICK`. A waiting orchestrator runs only kernels seen to
    /// return itself (`engine/orchestrator/help.rs`, H1): one never seen to return never runs
    /// there.
    last_run: AtomicU8,
}

/// [`KernelDef::last_run`]: no run of the kernel has returned in this process yet.
const NOT_RETURNED: u8 = 0;
/// [`KernelDef::last_run`]: the last run returned, but not quickly.
const RETURNED_LONG: u8 = 1;
/// [`KernelDef::last_run`]: the last run returned quickly.
const RETURNED_QUICK: u8 = 2;

/// `is_valid_name` as a `const fn`, so the macro rejects bad names at compile time.
const fn is_valid_name_const(name: &str) -> bool {
    let bytes = name.as_bytes();
    if bytes.is_empty() || bytes.len() > 64 {
        return false;
    }
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if !(b.is_ascii_alphanumeric() || b == b'_' || b == b'.' || b == b'-') {
            return false;
        }
        i += 1;
    }
    true
}

impl KernelDef {
    /// A function kernel definition; used by [`register_kernel!`](crate::register_kernel).
    ///
    /// Fails const evaluation (a compile error at the macro call) when `name` is not 1–64 bytes
    /// of `[A-Za-z0-9_.-]`.
    #[doc(hidden)]
    pub const fn from_fn(name: &'static str, core: CoreType, f: KernelFn) -> KernelDef {
        assert!(
            is_valid_name_const(name),
            "kernel names must be 1-64 bytes of [A-Za-z0-9_.-]"
        );
        KernelDef {
            name,
            core,
            imp: KernelImpl::Fn(f),
            last_run: AtomicU8::new(NOT_RETURNED),
        }
    }

    pub fn name(&self) -> &'static str {
        self.name
    }

    pub fn core_type(&self) -> CoreType {
        self.core
    }
}

impl fmt::Debug for KernelDef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let imp = match self.imp {
            KernelImpl::Fn(_) => "fn",
            KernelImpl::Closure(_) => "closure",
        };
        f.debug_struct("KernelDef")
            .field("name", &self.name)
            .field("core", &self.core)
            .field("impl", &imp)
            .finish()
    }
}

/// A handle to a registered kernel. Equality and hashing are by address: two refs are equal
/// when they name the same registration.
#[derive(Clone, Copy)]
pub struct KernelRef(&'static KernelDef);

impl KernelRef {
    /// The ref of a static definition; used by [`register_kernel!`](crate::register_kernel),
    /// which also registers it.
    #[doc(hidden)]
    pub const fn from_static(def: &'static KernelDef) -> KernelRef {
        KernelRef(def)
    }

    pub fn name(&self) -> &'static str {
        self.0.name
    }

    pub fn core_type(&self) -> CoreType {
        self.0.core
    }

    /// Runs the kernel for one invocation (the caller catches panics, §6.4), with
    /// [`in_kernel`] true on this thread meanwhile.
    pub(crate) fn call(&self, ctx: &mut KernelCtx<'_>) {
        let _inside = InKernel::enter();
        match &self.0.imp {
            KernelImpl::Fn(f) => f(ctx),
            KernelImpl::Closure(f) => f(ctx),
        }
    }

    /// Records that a run of the kernel returned after `ns`: quick when under `quick_ns`.
    /// Written only when it changes, so that executors running one kernel do not bounce its
    /// cache line on every block.
    pub(crate) fn record_run(&self, ns: u64, quick_ns: u64) {
        let state = if ns < quick_ns {
            RETURNED_QUICK
        } else {
            RETURNED_LONG
        };
        if self.0.last_run.load(Ordering::Relaxed) != state {
            self.0.last_run.store(state, Ordering::Relaxed);
        }
    }

    /// Whether the kernel's last run returned quickly ([`KernelRef::record_run`]).
    pub(crate) fn was_quick(&self) -> bool {
        self.0.last_run.load(Ordering::Relaxed) == RETURNED_QUICK
    }

    /// Whether a run of the kernel has returned in this process ([`KernelRef::record_run`]).
    pub(crate) fn has_returned(&self) -> bool {
        self.0.last_run.load(Ordering::Relaxed) != NOT_RETURNED
    }
}

thread_local! {
    /// The calling thread is inside [`KernelRef::call`].
    static IN_KERNEL: Cell<bool> = const { Cell::new(false) };
}

/// Whether the calling thread is running a kernel right now, on whichever thread runs it
/// (an executor, a gang thread, the stand-in, or the orchestrator helping). The chip catches a
/// kernel's panic and reports it in the run's error (KERNEL_PANIC, with the message), so a
/// panic hook can use this to keep those panics off stderr and print every other one: the
/// hook runs before the unwinding, while this is still true.
pub fn in_kernel() -> bool {
    IN_KERNEL.with(Cell::get)
}

/// Sets [`in_kernel`] for its lifetime; restores it when dropped, on an unwind too.
struct InKernel(bool);

impl InKernel {
    fn enter() -> InKernel {
        InKernel(IN_KERNEL.with(|c| c.replace(true)))
    }
}

impl Drop for InKernel {
    fn drop(&mut self) {
        IN_KERNEL.with(|c| c.set(self.0));
    }
}

impl PartialEq for KernelRef {
    fn eq(&self, other: &KernelRef) -> bool {
        std::ptr::eq(self.0, other.0)
    }
}

impl Eq for KernelRef {}

impl Hash for KernelRef {
    fn hash<H: Hasher>(&self, state: &mut H) {
        std::ptr::hash(self.0, state);
    }
}

impl fmt::Debug for KernelRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("KernelRef").field(&self.0.name).finish()
    }
}

impl fmt::Display for KernelRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0.name)
    }
}

/// One static registration, collected by `inventory`; only [`register_kernel!`] creates these.
///
/// [`register_kernel!`]: crate::register_kernel
#[doc(hidden)]
pub struct __KernelRegistration(pub &'static KernelDef);

inventory::collect!(__KernelRegistration);

/// Registers a kernel function under a name and defines `pub static $STATIC: KernelRef`.
///
/// `register_kernel!(ADD = "vector.add", CoreType::Aiv, kernel_add);` where `kernel_add` is a
/// [`KernelFn`]. Attributes (doc comments, `#[allow]`) may precede the
/// static's name. A name that is not 1–64 bytes of `[A-Za-z0-9_.-]` is a compile error; two
/// registrations with one name make [`find_kernel`] panic.
///
/// ```
/// use pto_chip::kernel::{CoreType, KernelCtx, find_kernel};
///
/// fn kernel_add(ctx: &mut KernelCtx<'_>) {
///     let (x, y) = (ctx.input::<f32>(0), ctx.input::<f32>(1));
///     let mut z = ctx.output::<f32>(2);
///     let sum: Vec<f32> = x.iter().zip(y.iter()).map(|(a, b)| a + b).collect();
///     z.copy_from_slice(&sum);
/// }
///
/// pto_chip::register_kernel!(ADD = "doc.vector.add", CoreType::Aiv, kernel_add);
///
/// assert_eq!(find_kernel("doc.vector.add"), Some(ADD));
/// assert_eq!(ADD.core_type(), CoreType::Aiv);
/// ```
#[macro_export]
macro_rules! register_kernel {
    ($(#[$meta:meta])* $static_name:ident = $name:expr, $core:expr, $kernel:expr $(,)?) => {
        $(#[$meta])*
        pub static $static_name: $crate::kernel::KernelRef = {
            static DEF: $crate::kernel::KernelDef =
                $crate::kernel::KernelDef::from_fn($name, $core, $kernel);
            $crate::kernel::__inventory::submit! {
                $crate::kernel::__KernelRegistration(&DEF)
            }
            $crate::kernel::KernelRef::from_static(&DEF)
        };
    };
}

/// The name index of the static registrations, built once.
struct StaticIndex {
    by_name: HashMap<&'static str, KernelRef>,
    /// Invalid and duplicate names, sorted (link order is not stable).
    problems: Vec<String>,
}

fn build_index(defs: impl IntoIterator<Item = &'static KernelDef>) -> StaticIndex {
    let mut by_name = HashMap::new();
    let mut invalid = Vec::new();
    let mut duplicates = Vec::new();
    for def in defs {
        if !is_valid_name(def.name) {
            invalid.push(format!(
                "kernel name {:?} must be 1-64 bytes of [A-Za-z0-9_.-]",
                def.name
            ));
            continue;
        }
        let new = KernelRef(def);
        match by_name.insert(def.name, new) {
            None => {}
            Some(old) if old == new => {}
            Some(_) => duplicates.push(def.name),
        }
    }
    duplicates.sort_unstable();
    duplicates.dedup();
    let mut problems = invalid;
    problems.extend(
        duplicates
            .into_iter()
            .map(|name| format!("kernel name {name:?} is registered more than once")),
    );
    problems.sort();
    StaticIndex { by_name, problems }
}

fn static_index() -> &'static StaticIndex {
    static INDEX: OnceLock<StaticIndex> = OnceLock::new();
    INDEX.get_or_init(|| build_index(inventory::iter::<__KernelRegistration>().map(|r| r.0)))
}

/// Closure kernels registered at run time.
static DYNAMIC: RwLock<BTreeMap<&'static str, KernelRef>> = RwLock::new(BTreeMap::new());

/// Problems of the static registrations (invalid or duplicate names), empty when the registry
/// is consistent. Never panics; a non-empty list makes [`find_kernel`] panic.
pub fn kernel_registry_problems() -> Vec<String> {
    static_index().problems.clone()
}

/// The kernel registered under `name`, statically or as a closure.
///
/// Panics, naming every problem, when the static registrations are inconsistent (see
/// [`kernel_registry_problems`]).
pub fn find_kernel(name: &str) -> Option<KernelRef> {
    let index = static_index();
    if !index.problems.is_empty() {
        panic!(
            "the kernel registry is inconsistent: {}",
            index.problems.join("; ")
        );
    }
    if let Some(&k) = index.by_name.get(name) {
        return Some(k);
    }
    let dynamic = DYNAMIC.read().unwrap_or_else(PoisonError::into_inner);
    dynamic.get(name).copied()
}

/// Why a closure kernel could not be registered.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum KernelNameError {
    #[error("kernel name {0:?} must be 1-64 bytes of [A-Za-z0-9_.-]")]
    Invalid(String),
    #[error("kernel name {0:?} is already registered")]
    Duplicate(String),
}

/// Registers a closure kernel at run time; [`find_kernel`] finds it from then on.
///
/// Meant for in-process tests and endpoints: every call leaks one boxed definition and its
/// name (registrations live as long as the process, like static ones), so keep the number of
/// registrations bounded. Names are global to the process: a name already registered,
/// statically or as a closure, is refused.
pub fn register_kernel_closure(
    name: &str,
    core: CoreType,
    f: impl Fn(&mut KernelCtx<'_>) + Send + Sync + 'static,
) -> Result<KernelRef, KernelNameError> {
    register_boxed(name, core, Box::new(f))
}

fn register_boxed(
    name: &str,
    core: CoreType,
    f: KernelClosure,
) -> Result<KernelRef, KernelNameError> {
    if !is_valid_name(name) {
        return Err(KernelNameError::Invalid(name.to_owned()));
    }
    let index = static_index();
    let mut dynamic = DYNAMIC.write().unwrap_or_else(PoisonError::into_inner);
    if index.by_name.contains_key(name) || dynamic.contains_key(name) {
        return Err(KernelNameError::Duplicate(name.to_owned()));
    }
    let name: &'static str = Box::leak(name.to_owned().into_boxed_str());
    let def: &'static KernelDef = Box::leak(Box::new(KernelDef {
        name,
        core,
        imp: KernelImpl::Closure(f),
        last_run: AtomicU8::new(NOT_RETURNED),
    }));
    let k = KernelRef(def);
    dynamic.insert(name, k);
    Ok(k)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::*;
    use crate::kernel::ctx::testing::Harness;

    fn kernel_noop(_ctx: &mut KernelCtx<'_>) {}

    fn kernel_write_block(ctx: &mut KernelCtx<'_>) {
        let v = ctx.block_idx() + 7;
        ctx.output::<u32>(0).set(&[0], v);
    }

    crate::register_kernel!(
        /// A kernel registered by the test module.
        #[allow(unreachable_pub)]
        TEST_WRITE = "test.registry.write_block",
        CoreType::Aiv,
        kernel_write_block
    );

    crate::register_kernel!(
        #[allow(unreachable_pub)]
        TEST_NOOP = "test.registry.noop",
        CoreType::Aic,
        kernel_noop,
    );

    #[test]
    fn kernel_registry_macro_registration_is_found() {
        assert!(kernel_registry_problems().is_empty());
        let k = find_kernel("test.registry.write_block").unwrap();
        assert_eq!(k, TEST_WRITE);
        assert_ne!(k, TEST_NOOP);
        assert_eq!(k.name(), "test.registry.write_block");
        assert_eq!(k.core_type(), CoreType::Aiv);
        assert_eq!(format!("{k:?}"), "KernelRef(\"test.registry.write_block\")");
        assert_eq!(k.to_string(), "test.registry.write_block");
        assert_eq!(find_kernel("test.registry.noop"), Some(TEST_NOOP));
        assert_eq!(TEST_NOOP.core_type(), CoreType::Aic);
        assert_eq!(find_kernel("test.registry.missing"), None);

        let mut buf = vec![0u32; 1];
        let h = Harness::new(vec![Harness::bind_u32(&mut buf, &[1], true)], vec![]);
        k.call(&mut h.ctx(3, 4));
        drop(h);
        assert_eq!(buf, [10]);
    }

    #[test]
    fn kernel_registry_closure_is_found_and_callable() {
        let calls = Arc::new(AtomicU32::new(0));
        let seen = Arc::clone(&calls);
        let k = register_kernel_closure("test.registry.closure", CoreType::Aiv, move |ctx| {
            seen.fetch_add(1, Ordering::Relaxed);
            let s: i64 = ctx.scalar(0);
            ctx.output::<i64>(0).fill(s);
        })
        .unwrap();
        assert_eq!(find_kernel("test.registry.closure"), Some(k));
        assert_eq!(k.core_type(), CoreType::Aiv);
        assert!(format!("{:?}", k.0).contains("closure"));

        let mut buf = vec![0u64; 3];
        let h = Harness::new(
            vec![Harness::bind_u64(
                &mut buf,
                &[3],
                pto_types::DType::I64,
                true,
            )],
            vec![(-4i64) as u64],
        );
        find_kernel("test.registry.closure")
            .unwrap()
            .call(&mut h.ctx(0, 1));
        drop(h);
        assert_eq!(calls.load(Ordering::Relaxed), 1);
        assert_eq!(buf, [(-4i64) as u64; 3]);

        // Names are unique across closures and static registrations.
        let dup = register_kernel_closure("test.registry.closure", CoreType::Aic, |_| {});
        assert_eq!(
            dup,
            Err(KernelNameError::Duplicate("test.registry.closure".into()))
        );
        let dup = register_kernel_closure("test.registry.noop", CoreType::Aic, |_| {});
        assert_eq!(
            dup.unwrap_err().to_string(),
            "kernel name \"test.registry.noop\" is already registered"
        );
    }

    #[test]
    fn kernel_registry_rejects_bad_names() {
        let long = "a".repeat(65);
        for bad in ["", "has space", "slash/name", "ünï", long.as_str()] {
            let err = register_kernel_closure(bad, CoreType::Aiv, |_| {}).unwrap_err();
            assert_eq!(err, KernelNameError::Invalid(bad.to_owned()));
            assert_eq!(find_kernel(bad), None);
        }
        assert_eq!(
            KernelNameError::Invalid("a b".into()).to_string(),
            "kernel name \"a b\" must be 1-64 bytes of [A-Za-z0-9_.-]"
        );
        // The const check agrees with `is_valid_name`.
        let max = "z".repeat(64);
        for name in [
            "a",
            "attn.0-x_y",
            max.as_str(),
            "",
            "a b",
            long.as_str(),
            "é",
        ] {
            assert_eq!(is_valid_name_const(name), is_valid_name(name), "{name:?}");
        }
    }

    #[test]
    fn kernel_registry_index_reports_duplicates_and_invalid_names() {
        static A1: KernelDef = KernelDef::from_fn("dup.a", CoreType::Aiv, kernel_noop);
        static A2: KernelDef = KernelDef::from_fn("dup.a", CoreType::Aic, kernel_noop);
        static A3: KernelDef = KernelDef::from_fn("dup.a", CoreType::Aic, kernel_noop);
        static B: KernelDef = KernelDef::from_fn("ok.b", CoreType::Aiv, kernel_noop);
        // Only a hand-built definition can carry an invalid name; the macro rejects it at
        // compile time.
        static BAD: KernelDef = KernelDef {
            name: "bad name",
            core: CoreType::Aiv,
            imp: KernelImpl::Fn(kernel_noop),
            last_run: AtomicU8::new(NOT_RETURNED),
        };
        let index = build_index([&A1, &B, &A2, &BAD, &A3, &B]);
        assert_eq!(
            index.problems,
            [
                "kernel name \"bad name\" must be 1-64 bytes of [A-Za-z0-9_.-]",
                "kernel name \"dup.a\" is registered more than once",
            ]
        );
        assert_eq!(index.by_name.get("ok.b"), Some(&KernelRef(&B)));
        let clean = build_index([&A1, &B]);
        assert!(clean.problems.is_empty());
        assert_eq!(clean.by_name.len(), 2);
    }
}
