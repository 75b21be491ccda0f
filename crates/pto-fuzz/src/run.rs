//! The fuzz loop of one target: inputs from the kept corpus, structured seeds and their
//! mutations, each decoded under the checks (no panic, no hang, no allocation out of
//! proportion to the input, every rejection a clear one-line message). An input whose outcome
//! is new (acceptance, or a rejection message not seen before with its numbers blanked) joins
//! the corpus: the rejection points stand in for the coverage a stable toolchain cannot
//! measure.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fastrand::Rng;

use crate::alloc::largest_allocation;
use crate::mutate::mutate;
use crate::targets::{Outcome, Target};

/// What the checks allow.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// One decode longer than this is a hang.
    pub per_input: Duration,
    /// A single allocation may be this large whatever the input...
    pub alloc_floor: usize,
    /// ...or this many times the input's length.
    pub alloc_per_input_byte: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            per_input: Duration::from_secs(2),
            alloc_floor: 1 << 20,
            alloc_per_input_byte: 16,
        }
    }
}

/// A broken check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Problem {
    Panic(String),
    Hang(Duration),
    /// The largest single allocation, in bytes.
    Allocation(usize),
    UnclearError(String),
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Problem::Panic(m) => write!(f, "panicked: {m}"),
            Problem::Hang(d) => write!(f, "still decoding after {} ms", d.as_millis()),
            Problem::Allocation(b) => write!(f, "allocated {b} bytes at once"),
            Problem::UnclearError(m) => write!(f, "rejected with an unclear message: {m:?}"),
        }
    }
}

/// A problem and the input that shows it.
#[derive(Clone, Debug)]
pub struct Finding {
    pub target: &'static str,
    pub problem: Problem,
    pub input: Vec<u8>,
}

impl std::fmt::Display for Finding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: an input of {} bytes {}",
            self.target,
            self.input.len(),
            self.problem
        )
    }
}

/// What a run of one target did.
#[derive(Clone, Debug, Default)]
pub struct Stats {
    pub execs: u64,
    pub accepted: u64,
    pub rejected: u64,
    /// Distinct outcomes seen.
    pub outcomes: usize,
    /// Corpus entries at the end, and how many this run added.
    pub corpus: usize,
    pub added: usize,
    pub elapsed: Duration,
}

/// A target's kept inputs, one file each under `dir/<target>/`.
pub struct Corpus {
    dir: Option<PathBuf>,
    save: bool,
    entries: Vec<Vec<u8>>,
    added: usize,
}

impl Corpus {
    /// The entries under `dir/<target>` (none if it does not exist); new ones are written
    /// there only with `save`.
    pub fn load(dir: Option<&Path>, target: &str, save: bool) -> std::io::Result<Corpus> {
        let dir = dir.map(|d| d.join(target));
        let mut entries = Vec::new();
        if let Some(d) = &dir
            && d.is_dir()
        {
            let mut paths: Vec<_> = std::fs::read_dir(d)?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .collect();
            paths.sort();
            for p in paths {
                entries.push(std::fs::read(p)?);
            }
        }
        Ok(Corpus {
            dir,
            save,
            entries,
            added: 0,
        })
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    fn add(&mut self, input: &[u8]) -> std::io::Result<()> {
        self.entries.push(input.to_vec());
        self.added += 1;
        if let (true, Some(d)) = (self.save, &self.dir) {
            std::fs::create_dir_all(d)?;
            std::fs::write(d.join(format!("{:016x}", fnv1a(input))), input)?;
        }
        Ok(())
    }
}

/// FNV-1a: a stable file name for a corpus entry.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The class of an outcome: acceptance, or the rejection message with what varies blanked —
/// quoted text, every word made of hex digits (byte dumps) and every run of digits in the
/// others (`ring_heap[#]=#`) — so that two inputs
/// rejected by the same check share it.
fn signature(outcome: &Outcome) -> String {
    let Outcome::Rejected(m) = outcome else {
        return "accepted".to_string();
    };
    let mut unquoted = String::with_capacity(m.len());
    let mut quoted = false;
    let mut escaped = false;
    for c in m.chars() {
        match (quoted, escaped, c) {
            (true, false, '\\') => escaped = true,
            (true, true, _) => escaped = false,
            (_, _, '"') => {
                quoted = !quoted;
                if quoted {
                    unquoted.push('_');
                }
            }
            (false, _, c) => unquoted.push(c),
            (true, false, _) => {}
        }
    }
    unquoted
        .split_whitespace()
        .map(|w| {
            let core = w.trim_matches(|c: char| !c.is_ascii_alphanumeric());
            if !core.is_empty() && core.chars().all(|c| c.is_ascii_hexdigit()) {
                return "#".to_string();
            }
            let mut out = String::with_capacity(w.len());
            for c in w.chars() {
                if !c.is_ascii_digit() {
                    out.push(c);
                } else if !out.ends_with('#') {
                    out.push('#');
                }
            }
            out
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// A clear rejection: one printable line that says something.
fn clear(message: &str) -> bool {
    !message.trim().is_empty()
        && message.len() <= 512
        && !message.contains('\n')
        && message.chars().all(|c| !c.is_control())
}

/// Decodes one input under the panic, allocation and message checks (the hang check is the
/// caller's: it watches the clock from another thread).
pub fn check(target: &Target, input: &[u8], limits: &Limits) -> Result<Outcome, Problem> {
    let decode = target.decode;
    let (result, largest) = largest_allocation(|| {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| decode(input)))
    });
    let outcome = result.map_err(|p| {
        Problem::Panic(
            p.downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a non-string panic".to_string()),
        )
    })?;
    let allowed = limits
        .alloc_floor
        .max(input.len().saturating_mul(limits.alloc_per_input_byte));
    if largest > allowed {
        return Err(Problem::Allocation(largest));
    }
    if let Outcome::Rejected(m) = &outcome
        && !clear(m)
    {
        return Err(Problem::UnclearError(m.clone()));
    }
    Ok(outcome)
}

/// Where the worker is: the input being decoded and since when.
type Current = Arc<Mutex<Option<(Instant, Arc<Vec<u8>>)>>>;

/// Fuzzes `target` for `budget` (at least the corpus and one seed are run), from `seed`.
pub fn fuzz(
    target: &'static Target,
    mut corpus: Corpus,
    budget: Duration,
    seed: u64,
    limits: Limits,
) -> Result<Stats, Finding> {
    let current: Current = Arc::new(Mutex::new(None));
    let (tx, rx) = mpsc::channel();
    let worker_current = Arc::clone(&current);
    std::thread::Builder::new()
        .name(format!("fuzz-{}", target.name))
        .spawn(move || {
            let result = work(target, &mut corpus, budget, seed, &limits, &worker_current);
            let _ = tx.send(result);
        })
        .expect("spawn the fuzz worker");
    // The hang check: the worker reports, or its current input outlives the limit.
    let poll = limits.per_input.min(Duration::from_millis(50));
    loop {
        match rx.recv_timeout(poll) {
            Ok(result) => return result,
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                unreachable!("the worker sends before it ends")
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                let guard = current.lock().unwrap_or_else(|e| e.into_inner());
                if let Some((since, input)) = guard.as_ref()
                    && since.elapsed() > limits.per_input
                {
                    // The worker is stuck in the decoder; it is left behind (the process
                    // reports and exits).
                    return Err(Finding {
                        target: target.name,
                        problem: Problem::Hang(since.elapsed()),
                        input: input.to_vec(),
                    });
                }
            }
        }
    }
}

fn work(
    target: &'static Target,
    corpus: &mut Corpus,
    budget: Duration,
    seed: u64,
    limits: &Limits,
    current: &Current,
) -> Result<Stats, Finding> {
    let started = Instant::now();
    let mut rng = Rng::with_seed(seed);
    let mut stats = Stats::default();
    let mut seen = HashSet::new();
    // `keep`: whether an input with a new outcome joins the corpus (kept ones are in it).
    let mut run = |input: Vec<u8>, keep: bool, corpus: &mut Corpus, stats: &mut Stats| {
        let input = Arc::new(input);
        *current.lock().unwrap_or_else(|e| e.into_inner()) =
            Some((Instant::now(), Arc::clone(&input)));
        let outcome = check(target, &input, limits).map_err(|problem| Finding {
            target: target.name,
            problem,
            input: input.to_vec(),
        })?;
        stats.execs += 1;
        match outcome {
            Outcome::Accepted => stats.accepted += 1,
            Outcome::Rejected(_) => stats.rejected += 1,
        }
        if seen.insert(signature(&outcome)) && keep && input.len() <= 16 * 1024 {
            // Failing to keep an entry loses nothing but the entry.
            let _ = corpus.add(&input);
        }
        Ok::<(), Finding>(())
    };
    // The kept corpus first (it is also what the mutations start from).
    for i in 0..corpus.len() {
        let input = corpus.entries[i].clone();
        run(input, false, corpus, &mut stats)?;
    }
    loop {
        let input = if corpus.is_empty() || rng.u8(..8) == 0 {
            (target.seed)(&mut rng)
        } else {
            let a = &corpus.entries[rng.usize(..corpus.len())];
            let b = &corpus.entries[rng.usize(..corpus.len())];
            mutate(&mut rng, a, b, target.max_len)
        };
        run(input, true, corpus, &mut stats)?;
        if stats.execs.is_multiple_of(64) && started.elapsed() >= budget {
            break;
        }
    }
    *current.lock().unwrap_or_else(|e| e.into_inner()) = None;
    stats.outcomes = seen.len();
    stats.corpus = corpus.len();
    stats.added = corpus.added;
    stats.elapsed = started.elapsed();
    Ok(stats)
}
