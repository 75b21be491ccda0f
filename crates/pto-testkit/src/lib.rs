//! Helpers for the tests of the pto crates, and nothing else: a dev-dependency only, never
//! linked into a library or binary, depending on no pto crate (so even pto-types' own unit
//! tests can use it).
//!
//! - [`with_timeout`]: runs a test body under a watchdog, so a hang (a lost wake-up, a child
//!   that never answers) fails that test instead of blocking the suite.
#![forbid(unsafe_code)]

use std::sync::mpsc::{self, RecvTimeoutError};
use std::thread;
use std::time::Duration;

/// Runs `f` on its own thread and panics if it does not finish within `secs` seconds; returns
/// what `f` returns, and re-raises a panic of `f` with its original payload.
///
/// A hung body cannot be killed: its thread is left behind, but the test fails instead of
/// blocking the suite. The body thread takes the caller's name (libtest names each test's
/// thread after the test), so a panic inside it names the test.
///
/// ```
/// let sum = pto_testkit::with_timeout(10, || 2 + 2);
/// assert_eq!(sum, 4);
/// ```
pub fn with_timeout<T: Send + 'static>(secs: u64, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (done_tx, done_rx) = mpsc::channel();
    let mut body = thread::Builder::new();
    if let Some(name) = thread::current().name() {
        body = body.name(name.to_string());
    }
    let body = body
        .spawn(move || {
            let value = f();
            // The receiver is gone only if the watchdog already fired.
            let _ = done_tx.send(());
            value
        })
        .expect("spawning the test body's thread");
    match done_rx.recv_timeout(Duration::from_secs(secs)) {
        // Disconnected: the body panicked before it could report.
        Ok(()) | Err(RecvTimeoutError::Disconnected) => match body.join() {
            Ok(value) => value,
            Err(payload) => std::panic::resume_unwind(payload),
        },
        Err(RecvTimeoutError::Timeout) => {
            panic!("the test did not finish within {secs} s (a wait hung?)")
        }
    }
}

#[cfg(test)]
mod tests {
    use std::panic::catch_unwind;

    use super::*;

    fn message(payload: &(dyn std::any::Any + Send)) -> String {
        match payload.downcast_ref::<String>() {
            Some(s) => s.clone(),
            None => payload
                .downcast_ref::<&str>()
                .map_or_else(String::new, |s| s.to_string()),
        }
    }

    #[test]
    fn with_timeout_returns_the_value() {
        assert_eq!(with_timeout(10, || "done"), "done");
    }

    #[test]
    fn with_timeout_reraises_the_body_panic() {
        let payload = catch_unwind(|| with_timeout(10, || panic!("boom {}", 7))).unwrap_err();
        assert_eq!(message(payload.as_ref()), "boom 7");
    }

    #[test]
    fn with_timeout_fails_a_hung_body() {
        let payload = catch_unwind(|| {
            with_timeout(1, || thread::sleep(Duration::from_secs(3)));
        })
        .unwrap_err();
        assert!(
            message(payload.as_ref()).contains("did not finish within 1 s"),
            "{}",
            message(payload.as_ref())
        );
    }

    #[test]
    fn with_timeout_names_the_body_after_the_caller() {
        let caller = thread::current().name().map(str::to_string);
        let body = with_timeout(10, || thread::current().name().map(str::to_string));
        assert_eq!(body, caller);
    }
}
