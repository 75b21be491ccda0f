//! The seeded input generator of the reference workloads (CHIP_RUNTIME.md §9, intro).
//!
//! Workload inputs come from a [`SplitMix64`] stream so runs are reproducible without data
//! files: uniform floats take 24 mantissa bits of one draw, normal floats come from the
//! Box–Muller transform of two draws, bounded integers from a widening multiply. Every method
//! consumes a fixed number of draws, so the same seed always yields the same values in the same
//! order, on every platform.

/// The SplitMix64 generator (Steele, Lea and Flood; the seeding generator of xoshiro).
///
/// Not cryptographic; chosen because it is tiny, fast and has a fixed, well-known output
/// sequence for every seed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SplitMix64 {
    state: u64,
}

/// 2⁻²⁴: the spacing of the 24-bit uniform grid.
const INV_2_24: f64 = 1.0 / (1u64 << 24) as f64;

impl SplitMix64 {
    /// A generator whose stream is fully determined by `seed`.
    pub fn new(seed: u64) -> SplitMix64 {
        SplitMix64 { state: seed }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// The top 24 bits of one draw: an integer in `[0, 2²⁴)`.
    fn mantissa24(&mut self) -> u32 {
        (self.next_u64() >> 40) as u32
    }

    /// A float uniform on `[lo, hi)`, from the top 24 bits of one draw (`lo + (hi − lo)·k/2²⁴`,
    /// computed in f64 and rounded once to f32).
    ///
    /// When the rounding to f32 would give `hi` itself, the largest f32 below `hi` is returned
    /// instead, so the bound is always respected. Panics unless `lo < hi` (both finite).
    pub fn uniform_f32(&mut self, lo: f32, hi: f32) -> f32 {
        assert!(
            lo.is_finite() && hi.is_finite() && lo < hi,
            "uniform_f32 needs finite lo < hi, got [{lo}, {hi})"
        );
        let u = f64::from(self.mantissa24()) * INV_2_24;
        let v = (f64::from(lo) + (f64::from(hi) - f64::from(lo)) * u) as f32;
        if v < hi { v } else { hi.next_down() }
    }

    /// A standard normal float (mean 0, variance 1) by the Box–Muller transform of two draws:
    /// `√(−2 ln u₁)·cos(2π u₂)` with `u₁ ∈ (0, 1]` and `u₂ ∈ [0, 1)` on the 24-bit grid.
    ///
    /// Always consumes exactly two draws (the sine branch is not kept), so positions in the
    /// stream do not depend on call history. The result is finite: `|z| ≤ √(2·24·ln 2) ≈ 5.8`.
    pub fn normal_f32(&mut self) -> f32 {
        let u1 = (f64::from(self.mantissa24()) + 1.0) * INV_2_24;
        let u2 = f64::from(self.mantissa24()) * INV_2_24;
        ((-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()) as f32
    }

    /// An integer uniform on `[0, n)` from one draw (Lemire's widening multiply; the bias is
    /// below `n / 2⁶⁴`, irrelevant for test inputs). Panics when `n == 0`.
    pub fn uniform_u32_below(&mut self, n: u32) -> u32 {
        assert!(n > 0, "uniform_u32_below(0): the range is empty");
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rng_splitmix64_known_sequences() {
        // Reference values of the published SplitMix64 (seed 0 and seed 1234567).
        let mut g = SplitMix64::new(0);
        assert_eq!(g.next_u64(), 0xE220_A839_7B1D_CDAF);
        assert_eq!(g.next_u64(), 0x6E78_9E6A_A1B9_65F4);
        let mut g = SplitMix64::new(1_234_567);
        let first: Vec<u64> = (0..5).map(|_| g.next_u64()).collect();
        assert_eq!(
            first,
            [
                6_457_827_717_110_365_317,
                3_203_168_211_198_807_973,
                9_817_491_932_198_370_423,
                4_593_380_528_125_082_431,
                16_408_922_859_458_223_821,
            ]
        );
    }

    #[test]
    fn rng_same_seed_same_stream() {
        let mut a = SplitMix64::new(42);
        let mut b = SplitMix64::new(42);
        for _ in 0..100 {
            assert_eq!(a.uniform_f32(-1.0, 1.0), b.uniform_f32(-1.0, 1.0));
            assert_eq!(a.normal_f32(), b.normal_f32());
            assert_eq!(a.uniform_u32_below(7), b.uniform_u32_below(7));
        }
        assert_ne!(SplitMix64::new(1).next_u64(), SplitMix64::new(2).next_u64());
    }

    #[test]
    fn rng_uniform_is_on_the_24_bit_grid_and_in_range() {
        // Seed 0's first draw has top 24 bits 0xE220A8.
        let mut g = SplitMix64::new(0);
        assert_eq!(g.uniform_f32(0.0, 1.0), 0xE2_20A8 as f32 / 16_777_216.0);
        let mut g = SplitMix64::new(7);
        let (mut min, mut max, mut sum) = (f32::MAX, f32::MIN, 0.0f64);
        let n = 20_000;
        for _ in 0..n {
            let v = g.uniform_f32(-0.5, 0.5);
            assert!((-0.5..0.5).contains(&v), "{v}");
            min = min.min(v);
            max = max.max(v);
            sum += f64::from(v);
        }
        assert!(min < -0.49 && max > 0.49, "[{min}, {max}]");
        assert!(
            (sum / f64::from(n)).abs() < 0.01,
            "mean {}",
            sum / f64::from(n)
        );
        // A range whose upper end would be reached by rounding stays below it.
        let mut g = SplitMix64::new(3);
        for _ in 0..1000 {
            let v = g.uniform_f32(1.0e8, 1.0e8 + 8.0);
            assert!((1.0e8..1.0e8 + 8.0).contains(&v), "{v}");
        }
    }

    #[test]
    fn rng_normal_moments() {
        let mut g = SplitMix64::new(11);
        let n = 20_000;
        let v: Vec<f64> = (0..n).map(|_| f64::from(g.normal_f32())).collect();
        let mean = v.iter().sum::<f64>() / f64::from(n);
        let var = v.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / f64::from(n);
        assert!(mean.abs() < 0.03, "mean {mean}");
        assert!((var - 1.0).abs() < 0.05, "variance {var}");
        assert!(v.iter().all(|x| x.is_finite() && x.abs() < 6.0));
        // Two draws per value: the stream position is fixed.
        let mut a = SplitMix64::new(5);
        a.normal_f32();
        let mut b = SplitMix64::new(5);
        b.next_u64();
        b.next_u64();
        assert_eq!(a, b);
    }

    #[test]
    fn rng_bounded_integers() {
        let mut g = SplitMix64::new(9);
        let mut seen = [0u32; 5];
        for _ in 0..5000 {
            let v = g.uniform_u32_below(5);
            seen[v as usize] += 1;
        }
        assert!(seen.iter().all(|&c| c > 800), "{seen:?}");
        assert_eq!(SplitMix64::new(1).uniform_u32_below(1), 0);
        let mut g = SplitMix64::new(0);
        // 0xE220A8397B1DCDAF · 1024 >> 64 = the top 10 bits.
        assert_eq!(
            g.uniform_u32_below(1024),
            (0xE220_A839_7B1D_CDAF_u64 >> 54) as u32
        );
    }

    #[test]
    #[should_panic(expected = "empty")]
    fn rng_bounded_integers_reject_an_empty_range() {
        SplitMix64::new(0).uniform_u32_below(0);
    }
}
