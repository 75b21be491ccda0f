//! The fuzzer finds what it is meant to find (planted bugs, one per check), and the real
//! decoders pass a short run of every target with a fixed seed.

use std::time::Duration;

use pto_fuzz::{Corpus, Limits, Outcome, Probe, Problem, TARGETS, Target};

#[global_allocator]
static PROBE: Probe = Probe;

fn seed(r: &mut fastrand::Rng) -> Vec<u8> {
    (0..r.usize(8..64)).map(|_| r.u8(..16)).collect()
}

fn len_field(bytes: &[u8]) -> usize {
    bytes
        .get(..4)
        .map_or(0, |b| u32::from_le_bytes(b.try_into().unwrap()) as usize)
}

/// Sizes a buffer from an unchecked length field.
static TRUSTS_LENGTH: Target = Target {
    name: "trusts_length",
    from: "a test",
    decode: |b| {
        let v: Vec<u64> = Vec::with_capacity(len_field(b).min(1 << 28));
        Outcome::Rejected(format!("kept {} slots", v.capacity()))
    },
    seed,
    max_len: 4096,
};

/// Indexes with a field it did not check.
static INDEXES_BLINDLY: Target = Target {
    name: "indexes_blindly",
    from: "a test",
    decode: |b| {
        let at = b.first().map_or(0, |&x| usize::from(x));
        Outcome::Rejected(format!("byte {}", b[at]))
    },
    seed,
    max_len: 4096,
};

/// Loops forever on one tag.
static LOOPS: Target = Target {
    name: "loops",
    from: "a test",
    decode: |b| {
        if b.get(2) == Some(&0xff) {
            loop {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        Outcome::Accepted
    },
    seed,
    max_len: 4096,
};

/// Rejects with nothing to say.
static MUMBLES: Target = Target {
    name: "mumbles",
    from: "a test",
    decode: |b| {
        if b.len() > 70 {
            Outcome::Rejected(String::new())
        } else {
            Outcome::Accepted
        }
    },
    seed,
    max_len: 4096,
};

fn empty() -> Corpus {
    Corpus::load(None, "none", false).unwrap()
}

fn finds(target: &'static Target) -> Problem {
    let limits = Limits {
        per_input: Duration::from_millis(200),
        ..Limits::default()
    };
    let finding = pto_fuzz::fuzz(target, empty(), Duration::from_secs(20), 7, limits)
        .expect_err("the planted bug is found");
    assert_eq!(finding.target, target.name);
    // The reported input reproduces it (but a hang, which `check` cannot time).
    if !matches!(finding.problem, Problem::Hang(_)) {
        assert_eq!(
            pto_fuzz::check(target, &finding.input, &limits).unwrap_err(),
            finding.problem
        );
    }
    finding.problem
}

#[test]
fn an_allocation_sized_by_an_unchecked_length_is_found() {
    assert!(matches!(finds(&TRUSTS_LENGTH), Problem::Allocation(n) if n > 1 << 20));
}

#[test]
fn a_panic_is_found() {
    assert!(matches!(finds(&INDEXES_BLINDLY), Problem::Panic(m) if m.contains("out of bounds")));
}

#[test]
fn a_hang_is_found() {
    assert!(matches!(finds(&LOOPS), Problem::Hang(d) if d >= Duration::from_millis(200)));
}

#[test]
fn an_empty_rejection_is_found() {
    assert_eq!(finds(&MUMBLES), Problem::UnclearError(String::new()));
}

#[test]
fn every_decoder_survives_a_short_run() {
    for t in TARGETS {
        let stats = pto_fuzz::fuzz(
            t,
            empty(),
            Duration::from_millis(300),
            11,
            Limits::default(),
        )
        .unwrap_or_else(|f| panic!("{f}"));
        assert!(stats.execs > 100, "{}: {stats:?}", t.name);
        assert!(
            stats.accepted > 0 && stats.rejected > 0,
            "{}: {stats:?}",
            t.name
        );
    }
}

#[test]
fn every_seed_decodes_and_a_length_of_2_pow_40_is_rejected_without_allocating() {
    let mut r = fastrand::Rng::with_seed(3);
    for t in TARGETS {
        for _ in 0..50 {
            let input = (t.seed)(&mut r);
            assert_eq!(
                pto_fuzz::check(t, &input, &Limits::default()),
                Ok(Outcome::Accepted),
                "{}: a valid record",
                t.name
            );
            // Every aligned u64 in the first 256 bytes set to 2^40 in turn.
            for at in (0..input.len().min(256)).step_by(8) {
                let mut bad = input.clone();
                let end = (at + 8).min(bad.len());
                bad[at..end].copy_from_slice(&(1u64 << 40).to_le_bytes()[..end - at]);
                if let Err(p) = pto_fuzz::check(t, &bad, &Limits::default()) {
                    panic!("{} with 2^40 at byte {at}: {p}", t.name);
                }
            }
        }
    }
}

#[test]
fn the_corpus_keeps_inputs_with_new_outcomes_and_replays_them_first() {
    let dir = tempfile::tempdir().unwrap();
    let t = pto_fuzz::target("call_config").unwrap();
    let corpus = Corpus::load(Some(dir.path()), t.name, true).unwrap();
    let first =
        pto_fuzz::fuzz(t, corpus, Duration::from_millis(300), 5, Limits::default()).unwrap();
    assert!(first.added > 1, "{first:?}");
    let kept = std::fs::read_dir(dir.path().join(t.name)).unwrap().count();
    assert_eq!(kept, first.added);
    let again = Corpus::load(Some(dir.path()), t.name, false).unwrap();
    assert_eq!(again.len(), kept);
    let second = pto_fuzz::fuzz(t, again, Duration::ZERO, 6, Limits::default()).unwrap();
    assert!(second.execs >= kept as u64);
    assert_eq!(second.added, 0, "replaying the corpus adds nothing");
}
