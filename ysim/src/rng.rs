//! The simulator's own pseudo-random numbers: splitmix64, seeded, with the few distributions
//! the generators draw from. No crate and no global state: the same seed gives the same
//! numbers on every run.

/// splitmix64 (Steele, Lea and Flood, 2014): one 64-bit state, advanced by a constant and
/// mixed. Good enough for workload generation, and trivially reproducible.
#[derive(Debug, Clone)]
pub struct Rng {
    state: u64,
}

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng { state: seed }
    }

    /// An independent stream for `what` (a generator, a job's attributes), so that adding a
    /// draw in one place does not shift every number drawn after it elsewhere.
    pub fn fork(&self, what: u64) -> Rng {
        let mut r = Rng::new(self.state ^ what.wrapping_mul(0xA076_1D64_78BD_642F));
        r.next_u64();
        r
    }

    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1), 53 bits.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in [lo, hi).
    pub fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.unit()
    }

    /// Uniform integer in [0, n); 0 when `n` is 0.
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next_u64() % n
        }
    }

    /// True with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        self.unit() < p
    }

    /// Exponential with this mean.
    pub fn exp(&mut self, mean: f64) -> f64 {
        // 1 - unit() is in (0, 1]: ln never sees 0.
        -mean * (1.0 - self.unit()).ln()
    }

    /// Standard normal (Box–Muller).
    pub fn normal(&mut self) -> f64 {
        let u1 = 1.0 - self.unit();
        let u2 = self.unit();
        (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    }

    /// Log-normal with this median and log-space standard deviation `sigma`.
    pub fn lognormal(&mut self, median: f64, sigma: f64) -> f64 {
        median * (sigma * self.normal()).exp()
    }

    /// One of `items` with probability proportional to its weight.
    pub fn weighted<'a, T>(&mut self, items: &'a [(T, f64)]) -> &'a T {
        let total: f64 = items.iter().map(|(_, w)| w).sum();
        let mut x = self.unit() * total;
        for (item, w) in items {
            if x < *w {
                return item;
            }
            x -= w;
        }
        &items[items.len() - 1].0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_numbers() {
        let a: Vec<u64> = (0..5)
            .scan(Rng::new(7), |r, _| Some(r.next_u64()))
            .collect();
        let b: Vec<u64> = (0..5)
            .scan(Rng::new(7), |r, _| Some(r.next_u64()))
            .collect();
        assert_eq!(a, b);
        assert_ne!(Rng::new(7).next_u64(), Rng::new(8).next_u64());
    }

    #[test]
    fn distributions_are_roughly_right() {
        let mut r = Rng::new(1);
        let n = 20_000;
        let mean = (0..n).map(|_| r.exp(10.0)).sum::<f64>() / n as f64;
        assert!((mean - 10.0).abs() < 0.5, "{mean}");
        let mut v: Vec<f64> = (0..n).map(|_| r.lognormal(40.0, 0.8)).collect();
        v.sort_by(f64::total_cmp);
        let median = v[n / 2];
        assert!((median - 40.0).abs() < 2.0, "{median}");
        assert!((0..1000).all(|_| {
            let u = r.unit();
            (0.0..1.0).contains(&u)
        }));
    }
}
