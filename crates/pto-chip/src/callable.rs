//! Chip callables: an L2 orchestration function registered by name (OVERVIEW.md §3).
//!
//! Child processes are fresh images, so what they run is found by name in a static registry
//! linked into the image. `register_chip!("vector_example", vector_example, expected_args = 3)`
//! registers an [`OrchFn`]; [`find_chip_callable`] looks it up.

use std::collections::HashMap;
use std::sync::OnceLock;

use crate::orch::OrchFn;

/// A registered chip callable.
#[derive(Clone, Copy, Debug)]
pub struct ChipCallable {
    pub name: &'static str,
    pub orch: OrchFn,
    /// Fewer entry arguments (tensors + scalars) than this fail the run with INVALID_ARGS.
    pub expected_args: usize,
    /// Shown in lists for users ([`listed_chip_callable_names`]); `false` for the runtime's
    /// own (`bench.empty_chip`), which are still found by name.
    pub listed: bool,
}

#[doc(hidden)]
pub struct __ChipRegistration(pub ChipCallable);

inventory::collect!(__ChipRegistration);

/// Registers an L2 orchestration function under a name.
///
/// ```
/// use pto_chip::orch::{OrchArgs, OrchResult, RootScope};
/// fn nothing<'r>(_s: &mut RootScope<'r>, _a: &OrchArgs<'r>) -> OrchResult<()> {
///     Ok(())
/// }
/// pto_chip::register_chip!("doc.nothing", nothing);
/// assert!(pto_chip::callable::find_chip_callable("doc.nothing").is_some());
/// // One of the runtime's own, found by name but not listed for users:
/// pto_chip::register_chip!("doc.internal", nothing, unlisted);
/// assert!(pto_chip::callable::find_chip_callable("doc.internal").is_some());
/// assert!(!pto_chip::callable::listed_chip_callable_names().contains(&"doc.internal"));
/// ```
#[macro_export]
macro_rules! register_chip {
    ($name:expr, $orch:path, unlisted $(,)?) => {
        $crate::register_chip!(@submit $name, $orch, 0, false);
    };
    ($name:expr, $orch:path $(, expected_args = $n:expr)? $(,)?) => {
        $crate::register_chip!(@submit $name, $orch, 0 $(+ $n)?, true);
    };
    (@submit $name:expr, $orch:path, $n:expr, $listed:expr) => {
        $crate::callable::__inventory::submit! {
            $crate::callable::__ChipRegistration($crate::callable::ChipCallable {
                name: $name,
                orch: $orch,
                expected_args: $n,
                listed: $listed,
            })
        }
    };
}

#[doc(hidden)]
pub use inventory as __inventory;

fn index() -> &'static HashMap<&'static str, ChipCallable> {
    static INDEX: OnceLock<HashMap<&'static str, ChipCallable>> = OnceLock::new();
    INDEX.get_or_init(|| {
        let mut map = HashMap::new();
        for reg in inventory::iter::<__ChipRegistration> {
            let previous = map.insert(reg.0.name, reg.0);
            assert!(
                previous.is_none(),
                "two chip callables are registered as {:?}",
                reg.0.name
            );
        }
        map
    })
}

/// The chip callable registered under `name`.
pub fn find_chip_callable(name: &str) -> Option<ChipCallable> {
    index().get(name).copied()
}

/// Every registered chip callable name, sorted (a remote session registers them all).
pub fn chip_callable_names() -> Vec<&'static str> {
    let mut names: Vec<&'static str> = index().keys().copied().collect();
    names.sort_unstable();
    names
}

/// The names to show users, sorted: every chip callable but the runtime's own (registered
/// `unlisted`).
pub fn listed_chip_callable_names() -> Vec<&'static str> {
    let mut names = chip_callable_names();
    names.retain(|n| index()[n].listed);
    names
}
