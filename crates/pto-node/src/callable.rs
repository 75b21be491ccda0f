//! Callables: what children run, registered by name (NODE_RUNTIME.md §1.2).
//!
//! Chip callables are `pto_chip::register_chip!` registrations; sub callables are
//! [`register_sub!`](crate::register_sub) registrations (`fn(&SubContext, &MappedArgs) ->
//! Result<(), TaskError>`), or closures ([`Callable::sub_closure`], in-process endpoints only).
//! `Worker::register` turns a [`Callable`] into a [`CallableHandle`]: same kind and name, same
//! handle. The orchestration function given to `submit` is not registered; it runs on the
//! caller's thread.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, OnceLock};

use parking_lot::RwLock;

use crate::error::{RegisterError, SubmitError};
use crate::sub::{MappedArgs, SubContext, TaskError};

/// The kind of worker a callable runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CallableKind {
    /// An L2 orchestration run by a chip (`submit_next_level`).
    Chip,
    /// A host function run by a sub worker (`submit_sub`).
    Sub,
    /// An L3 orchestration run by an L3 Worker child of an L4 (`register_node!`).
    Node,
}

impl fmt::Display for CallableKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CallableKind::Chip => "chip",
            CallableKind::Sub => "sub",
            CallableKind::Node => "node",
        })
    }
}

/// A registered sub function.
pub type SubFn = fn(&SubContext, &MappedArgs) -> Result<(), TaskError>;

/// A registered node function: an L3 orchestration an L4 runs on its Worker children.
pub type NodeFn = fn(
    &mut crate::Orchestrator<'_>,
    &pto_types::TaskArgs,
    &pto_types::CallConfig,
) -> Result<(), crate::OrchError>;

/// A sub closure (in-process endpoints only).
pub(crate) type SubClosure =
    Arc<dyn Fn(&SubContext, &MappedArgs) -> Result<(), TaskError> + Send + Sync>;

/// What to register on a Worker.
#[derive(Clone)]
pub struct Callable {
    kind: CallableKind,
    name: String,
    closure: Option<SubClosure>,
}

impl fmt::Debug for Callable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Callable")
            .field("kind", &self.kind)
            .field("name", &self.name)
            .field("closure", &self.closure.is_some())
            .finish()
    }
}

impl Callable {
    /// A chip callable registered with `pto_chip::register_chip!`.
    pub fn chip(name: &str) -> Callable {
        Callable {
            kind: CallableKind::Chip,
            name: name.to_string(),
            closure: None,
        }
    }

    /// A sub callable registered with [`register_sub!`](crate::register_sub).
    pub fn sub(name: &str) -> Callable {
        Callable {
            kind: CallableKind::Sub,
            name: name.to_string(),
            closure: None,
        }
    }

    /// A node callable registered with [`register_node!`](crate::register_node): an L3
    /// orchestration function an L4 Worker runs on its L3 Worker children.
    pub fn node(name: &str) -> Callable {
        Callable {
            kind: CallableKind::Node,
            name: name.to_string(),
            closure: None,
        }
    }

    /// A sub callable given as a closure; for sub workers that are threads of this process
    /// (`EndpointMode::InProcess`, or `WorkerBuilder::subs_in_process`).
    pub fn sub_closure(
        name: &str,
        f: impl Fn(&SubContext, &MappedArgs) -> Result<(), TaskError> + Send + Sync + 'static,
    ) -> Callable {
        Callable {
            kind: CallableKind::Sub,
            name: name.to_string(),
            closure: Some(Arc::new(f)),
        }
    }

    pub fn kind(&self) -> CallableKind {
        self.kind
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub(crate) fn is_closure(&self) -> bool {
        self.closure.is_some()
    }
}

/// A callable registered on one Worker.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CallableHandle {
    worker_uid: u64,
    id: u32,
    kind: CallableKind,
}

impl CallableHandle {
    pub fn worker_uid(&self) -> u64 {
        self.worker_uid
    }

    pub fn id(&self) -> u32 {
        self.id
    }

    pub fn kind(&self) -> CallableKind {
        self.kind
    }
}

#[doc(hidden)]
pub struct __SubRegistration {
    pub name: &'static str,
    pub f: SubFn,
}

inventory::collect!(__SubRegistration);

#[doc(hidden)]
pub use inventory as __inventory;

/// Registers a sub function under a name, for `Callable::sub(name)`.
///
/// ```
/// use pto_node::{MappedArgs, SubContext, TaskError};
/// fn noop(_ctx: &SubContext, _args: &MappedArgs) -> Result<(), TaskError> {
///     Ok(())
/// }
/// pto_node::register_sub!("doc.noop", noop);
/// assert!(pto_node::callable::find_sub_callable("doc.noop").is_some());
/// ```
#[macro_export]
macro_rules! register_sub {
    ($name:expr, $f:path $(,)?) => {
        $crate::callable::__inventory::submit! {
            $crate::callable::__SubRegistration { name: $name, f: $f }
        }
    };
}

#[doc(hidden)]
pub struct __NodeRegistration {
    pub name: &'static str,
    pub f: NodeFn,
}

inventory::collect!(__NodeRegistration);

/// Registers an L3 orchestration function under a name, for `Callable::node(name)` on an L4
/// Worker. `fn(&mut Orchestrator, &TaskArgs, &CallConfig) -> Result<(), OrchError>`; the
/// `CallConfig` is the one the L4 task was submitted with (derive per-task configs from it).
#[macro_export]
macro_rules! register_node {
    ($name:expr, $f:path $(,)?) => {
        $crate::callable::__inventory::submit! {
            $crate::callable::__NodeRegistration { name: $name, f: $f }
        }
    };
}

/// The names of every sub function registered in this image, sorted.
pub fn sub_callable_names() -> Vec<&'static str> {
    let mut names: Vec<&'static str> = sub_index().keys().copied().collect();
    names.sort_unstable();
    names
}

/// ` (did you mean X?) (registered: A, B)`: what a user could have meant by an unknown
/// callable name of `kind` (chip callables the runtime registers for itself are not listed).
pub(crate) fn known_hint(kind: CallableKind, name: &str) -> String {
    let known: Vec<&'static str> = match kind {
        CallableKind::Chip => pto_chip::callable::listed_chip_callable_names(),
        CallableKind::Sub => sub_callable_names(),
        CallableKind::Node => {
            let mut names: Vec<&'static str> = inventory::iter::<__NodeRegistration>
                .into_iter()
                .map(|r| r.name)
                .collect();
            names.sort_unstable();
            names
        }
    };
    if known.is_empty() {
        return " (none is)".to_string();
    }
    format!(
        "{} (registered: {})",
        pto_types::suggest::did_you_mean(name, known.iter().copied()),
        known.join(", ")
    )
}

/// The node function registered under `name`.
pub fn find_node_callable(name: &str) -> Option<NodeFn> {
    inventory::iter::<__NodeRegistration>
        .into_iter()
        .find(|r| r.name == name)
        .map(|r| r.f)
}

fn sub_index() -> &'static HashMap<&'static str, SubFn> {
    static INDEX: OnceLock<HashMap<&'static str, SubFn>> = OnceLock::new();
    INDEX.get_or_init(|| {
        let mut map = HashMap::new();
        for reg in inventory::iter::<__SubRegistration> {
            let previous = map.insert(reg.name, reg.f);
            assert!(
                previous.is_none(),
                "two sub callables are registered as {:?}",
                reg.name
            );
        }
        map
    })
}

/// The sub function registered under `name`.
pub fn find_sub_callable(name: &str) -> Option<SubFn> {
    sub_index().get(name).copied()
}

/// One registered callable of a Worker.
pub(crate) struct CallableEntry {
    pub(crate) name: Arc<str>,
    pub(crate) kind: CallableKind,
    /// Sub callables: the function (registered or closure).
    pub(crate) sub: Option<SubClosure>,
    pub(crate) is_closure: bool,
}

/// A Worker's callables; shared with its in-process sub lanes (registrations after `init` are
/// visible to them at once).
pub(crate) struct CallableTable {
    uid: u64,
    entries: RwLock<Vec<CallableEntry>>,
}

impl CallableTable {
    pub(crate) fn new(uid: u64) -> CallableTable {
        CallableTable {
            uid,
            entries: RwLock::new(Vec::new()),
        }
    }

    /// Registers `c` (already checked for mode and level).
    pub(crate) fn register(&self, c: Callable) -> Result<CallableHandle, RegisterError> {
        if !pto_types::args::is_valid_name(&c.name) {
            return Err(RegisterError::BadName { name: c.name });
        }
        let mut entries = self.entries.write();
        if let Some(id) = entries
            .iter()
            .position(|e| e.kind == c.kind && *e.name == *c.name)
        {
            if c.closure.is_some() {
                return Err(RegisterError::DuplicateName {
                    kind: c.kind,
                    name: c.name,
                });
            }
            return Ok(self.handle(id, c.kind));
        }
        let is_closure = c.closure.is_some();
        let sub: Option<SubClosure> = match c.kind {
            CallableKind::Chip => {
                if pto_chip::callable::find_chip_callable(&c.name).is_none() {
                    return Err(RegisterError::UnknownCallable {
                        kind: c.kind,
                        name: c.name,
                    });
                }
                None
            }
            CallableKind::Sub => match c.closure {
                Some(f) => Some(f),
                None => match find_sub_callable(&c.name) {
                    Some(f) => Some(Arc::new(f)),
                    None => {
                        return Err(RegisterError::UnknownCallable {
                            kind: c.kind,
                            name: c.name,
                        });
                    }
                },
            },
            CallableKind::Node => {
                if find_node_callable(&c.name).is_none() {
                    return Err(RegisterError::UnknownCallable {
                        kind: c.kind,
                        name: c.name,
                    });
                }
                None
            }
        };
        entries.push(CallableEntry {
            name: Arc::from(c.name.as_str()),
            kind: c.kind,
            sub,
            is_closure,
        });
        Ok(self.handle(entries.len() - 1, c.kind))
    }

    fn handle(&self, id: usize, kind: CallableKind) -> CallableHandle {
        CallableHandle {
            worker_uid: self.uid,
            id: id as u32,
            kind,
        }
    }

    /// Checks a handle at submit: this Worker's, registered, of the `expected` kind.
    pub(crate) fn check(
        &self,
        h: &CallableHandle,
        expected: CallableKind,
    ) -> Result<Arc<str>, SubmitError> {
        if h.worker_uid != self.uid {
            return Err(SubmitError::ForeignHandle);
        }
        let entries = self.entries.read();
        let Some(entry) = entries.get(h.id as usize) else {
            return Err(SubmitError::StaleHandle);
        };
        if entry.kind != expected {
            return Err(SubmitError::WrongCallableKind {
                expected,
                got: entry.kind,
            });
        }
        Ok(Arc::clone(&entry.name))
    }

    /// Whether a closure is registered (such a Worker cannot become a child process).
    pub(crate) fn has_closures(&self) -> bool {
        self.entries.read().iter().any(|e| e.is_closure)
    }

    /// The handle of a registered callable, by kind and name.
    pub(crate) fn lookup(&self, kind: CallableKind, name: &str) -> Option<CallableHandle> {
        self.entries
            .read()
            .iter()
            .position(|e| e.kind == kind && *e.name == *name)
            .map(|id| self.handle(id, kind))
    }

    /// Every registration: `(id, kind, name)`, in id order (the boot block's callable table).
    pub(crate) fn entries(&self) -> Vec<(u32, CallableKind, Arc<str>)> {
        self.entries
            .read()
            .iter()
            .enumerate()
            .map(|(i, e)| (i as u32, e.kind, Arc::clone(&e.name)))
            .collect()
    }

    /// The sub function of callable `id`.
    pub(crate) fn sub_fn(&self, id: u32) -> Option<SubClosure> {
        self.entries
            .read()
            .get(id as usize)
            .and_then(|e| e.sub.clone())
    }
}
