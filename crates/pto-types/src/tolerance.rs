//! The one allclose rule: when a result is close enough to its golden (CHIP_RUNTIME.md §9).
//!
//! An element passes when `|actual − expected| ≤ atol + rtol·|expected|` (numpy's `isclose`,
//! asymmetric: the golden scales the tolerance). Non-finite values pass only when equal: an
//! infinity matches the same infinity, and **NaN never matches, not even NaN**. That is §9's
//! rule and the reference system's check (`torch.allclose` with its default
//! `equal_nan=False`); without the special case a finite result would pass against an
//! infinite golden, since the allowance `rtol·∞` is infinite too.
//!
//! [`Tolerance::check`] compares whole slices (f32 or f64; the arithmetic is f64) and reports
//! the first failing element, the worst one and how many failed ([`Mismatch`]). The chip's
//! reference workloads (`pto-kernels`) and the golden check of a scene (`pto-scene`) both use
//! it.

use std::fmt;

/// How close a result must be to its golden: `|actual − expected| ≤ atol + rtol·|expected|`
/// per element; see the module doc for infinities and NaN.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Tolerance {
    /// Relative tolerance, scaled by `|expected|`.
    pub rtol: f64,
    /// Absolute tolerance.
    pub atol: f64,
}

impl Tolerance {
    /// The reference system's default (its golden scripts' `RTOL` and `ATOL`): `1e-5` each.
    pub const DEFAULT: Tolerance = Tolerance::new(1e-5, 1e-5);

    /// A tolerance of `rtol` relative to the golden plus `atol` absolute.
    pub const fn new(rtol: f64, atol: f64) -> Tolerance {
        Tolerance { rtol, atol }
    }

    /// What an element whose golden is `expected` may be off by: `atol + rtol·|expected|`.
    pub fn allowed(self, expected: f64) -> f64 {
        self.atol + self.rtol * expected.abs()
    }

    /// Whether `actual` is close enough to `expected` (the rule of the module doc).
    pub fn is_close(self, actual: f64, expected: f64) -> bool {
        if actual.is_finite() && expected.is_finite() {
            (actual - expected).abs() <= self.allowed(expected)
        } else {
            // Infinities match only themselves; NaN compares unequal to everything.
            actual == expected
        }
    }

    /// Checks every element of `actual` against `expected`; on failure reports the first and
    /// the worst failing element and how many failed.
    ///
    /// ```
    /// use pto_types::tolerance::{Mismatch, Tolerance};
    ///
    /// let tol = Tolerance::new(1e-3, 1e-3);
    /// assert_eq!(tol.check(&[1.0f32, 2.0005], &[1.0, 2.0]), Ok(()));
    /// let Err(Mismatch::Values { first, worst, failures, .. }) =
    ///     tol.check(&[1.1f32, 2.0, f32::NAN], &[1.0, 2.0, 3.0])
    /// else {
    ///     panic!("two elements are off")
    /// };
    /// assert_eq!((first.index, worst.index, failures), (0, 2, 2));
    /// ```
    pub fn check<T: Copy + Into<f64>>(self, actual: &[T], expected: &[T]) -> Result<(), Mismatch> {
        if actual.len() != expected.len() {
            return Err(Mismatch::Length {
                actual: actual.len(),
                expected: expected.len(),
            });
        }
        let mut failures = 0usize;
        let mut first = None;
        // (index, excess over the allowance); ties keep the earlier element.
        let mut worst: Option<(usize, f64)> = None;
        for (index, (&a, &e)) in actual.iter().zip(expected).enumerate() {
            let (a, e) = (a.into(), e.into());
            if self.is_close(a, e) {
                continue;
            }
            failures += 1;
            first.get_or_insert(index);
            let excess = (a - e).abs() - self.allowed(e);
            // A miss involving NaN or an infinity is worse than any finite one.
            let excess = if excess.is_finite() {
                excess
            } else {
                f64::INFINITY
            };
            if worst.is_none_or(|(_, w)| excess > w) {
                worst = Some((index, excess));
            }
        }
        let (Some(first), Some((worst, _))) = (first, worst) else {
            return Ok(());
        };
        let miss = |index: usize| Miss {
            index,
            actual: actual[index].into(),
            expected: expected[index].into(),
        };
        Err(Mismatch::Values {
            first: miss(first),
            worst: miss(worst),
            failures,
            total: actual.len(),
            tolerance: self,
        })
    }
}

impl Default for Tolerance {
    fn default() -> Tolerance {
        Tolerance::DEFAULT
    }
}

/// One element that failed [`Tolerance::check`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Miss {
    /// Its index in the compared slices.
    pub index: usize,
    /// The result's value.
    pub actual: f64,
    /// The golden's value.
    pub expected: f64,
}

impl Miss {
    /// `|actual − expected|` (NaN when either is NaN).
    pub fn error(&self) -> f64 {
        (self.actual - self.expected).abs()
    }
}

/// Why [`Tolerance::check`] failed.
#[derive(Clone, Debug, PartialEq)]
pub enum Mismatch {
    /// The slices have different lengths.
    Length {
        /// Elements of the result.
        actual: usize,
        /// Elements of the golden.
        expected: usize,
    },
    /// Some elements are out of tolerance.
    Values {
        /// The failing element with the lowest index.
        first: Miss,
        /// The failing element with the largest excess `|a − e| − allowed`; a miss involving
        /// NaN or an infinity is worse than any finite one, and the earlier of equals wins.
        worst: Miss,
        /// How many elements failed.
        failures: usize,
        /// Elements compared.
        total: usize,
        /// The tolerance they failed.
        tolerance: Tolerance,
    },
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Mismatch::Length { actual, expected } => {
                write!(f, "result has {actual} elements, the golden {expected}")
            }
            Mismatch::Values {
                first,
                worst,
                failures,
                total,
                tolerance,
            } => {
                write!(
                    f,
                    "{failures} of {total} elements differ beyond rtol {} atol {}; first at \
                     [{}]: got {}, expected {}",
                    tolerance.rtol, tolerance.atol, first.index, first.actual, first.expected
                )?;
                if worst.index != first.index {
                    write!(
                        f,
                        "; worst at [{}]: got {}, expected {} (|error| {}, allowed {})",
                        worst.index,
                        worst.actual,
                        worst.expected,
                        worst.error(),
                        tolerance.allowed(worst.expected)
                    )?;
                }
                Ok(())
            }
        }
    }
}

impl std::error::Error for Mismatch {}

#[cfg(test)]
mod tests {
    use super::*;

    const TOL: Tolerance = Tolerance::new(1e-3, 1e-3);

    #[track_caller]
    fn values(result: Result<(), Mismatch>) -> (usize, usize, usize) {
        match result {
            Err(Mismatch::Values {
                first,
                worst,
                failures,
                ..
            }) => (first.index, worst.index, failures),
            other => panic!("expected a value mismatch, got {other:?}"),
        }
    }

    #[test]
    fn tolerance_edges_are_inclusive_and_scale_with_the_golden() {
        // Allowed at 1000: 1e-3 + 1e-3·1000 = 1.001.
        assert!(TOL.is_close(1001.0, 1000.0));
        assert!(!TOL.is_close(1001.01, 1000.0));
        // Exactly on the edge passes (≤); just beyond fails.
        let edge = Tolerance::new(0.0, 0.5);
        assert!(edge.is_close(1.5, 1.0) && edge.is_close(0.5, 1.0));
        assert!(!edge.is_close(1.5 + 1e-12, 1.0));
        // Asymmetric: the golden scales the allowance, not the result.
        let rel = Tolerance::new(0.1, 0.0);
        assert!(rel.is_close(9.0, 10.0));
        assert!(!rel.is_close(10.0, 9.0));
        // A zero tolerance is exact equality; signed zeros are equal.
        let exact = Tolerance::new(0.0, 0.0);
        assert!(exact.is_close(-0.0, 0.0) && !exact.is_close(1.0, 1.0 + f64::EPSILON));
        assert_eq!(Tolerance::default(), Tolerance::DEFAULT);
        assert_eq!(Tolerance::DEFAULT, Tolerance::new(1e-5, 1e-5));
    }

    #[test]
    fn tolerance_nan_never_matches() {
        assert!(!TOL.is_close(f64::NAN, f64::NAN));
        assert!(!TOL.is_close(f64::NAN, 1.0));
        assert!(!TOL.is_close(1.0, f64::NAN));
        assert!(!Tolerance::new(f64::INFINITY, f64::INFINITY).is_close(f64::NAN, 0.0));
        assert_eq!(values(TOL.check(&[f32::NAN], &[f32::NAN])), (0, 0, 1));
    }

    #[test]
    fn tolerance_infinities_match_only_themselves() {
        assert!(TOL.is_close(f64::INFINITY, f64::INFINITY));
        assert!(TOL.is_close(f64::NEG_INFINITY, f64::NEG_INFINITY));
        assert!(!TOL.is_close(f64::INFINITY, f64::NEG_INFINITY));
        // A finite result against an infinite golden fails although rtol·∞ = ∞.
        assert!(!TOL.is_close(1e300, f64::INFINITY));
        assert!(!TOL.is_close(f64::INFINITY, f64::MAX));
        // Finite operands whose difference overflows fail too.
        assert!(!TOL.is_close(f64::MAX, -f64::MAX));
        // f32 overflow reaches the rule as an infinity.
        assert_eq!(
            TOL.check(&[f32::INFINITY, 1.0], &[f32::INFINITY, 1.0]),
            Ok(())
        );
    }

    #[test]
    fn tolerance_check_reports_first_worst_and_count() {
        let expected = [1.0f32, 2.0, 3.0, 4.0];
        assert_eq!(TOL.check(&expected, &expected), Ok(()));
        let mut actual = expected;
        actual[1] += 0.0025; // allowed 0.003
        assert_eq!(TOL.check(&actual, &expected), Ok(()));
        actual[0] += 0.01;
        actual[3] -= 0.5;
        assert_eq!(values(TOL.check(&actual, &expected)), (0, 3, 2));
        // A NaN miss is worse than any finite one.
        actual[2] = f32::NAN;
        let err = TOL.check(&actual, &expected).unwrap_err();
        assert_eq!(values(Err(err.clone())), (0, 2, 3));
        assert!(err.to_string().contains("worst at [2]"), "{err}");
        // So is an infinite one; of equals, the first wins.
        actual[1] = f32::INFINITY;
        assert_eq!(values(TOL.check(&actual, &expected)), (0, 1, 4));
        assert_eq!(
            TOL.check(&[1.0f64], &[1.0, 2.0]),
            Err(Mismatch::Length {
                actual: 1,
                expected: 2
            })
        );
    }

    #[test]
    fn tolerance_mismatch_message_names_first_and_worst() {
        let err = TOL
            .check(&[1.1f64, 2.0, 9.0], &[1.0, 2.0, 3.0])
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "2 of 3 elements differ beyond rtol 0.001 atol 0.001; first at [0]: got 1.1, \
             expected 1; worst at [2]: got 9, expected 3 (|error| 6, allowed 0.004)"
        );
        let err = TOL.check(&[1.0f64, 47.0], &[1.0, 48.0]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "1 of 2 elements differ beyond rtol 0.001 atol 0.001; first at [1]: got 47, \
             expected 48"
        );
        let err = TOL.check(&[1.0f64], &[]).unwrap_err();
        assert_eq!(err.to_string(), "result has 1 elements, the golden 0");
    }
}
