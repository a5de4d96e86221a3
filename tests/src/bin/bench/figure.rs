//! A measured figure with its target, and the statistics the groups take of their samples.

/// One figure: what was measured, its value, and the target it should meet.
pub struct Figure {
    pub name: &'static str,
    pub value: f64,
    pub unit: &'static str,
    pub target: f64,
    pub higher_is_better: bool,
}

impl Figure {
    pub fn met(&self) -> bool {
        if self.higher_is_better {
            self.value >= self.target
        } else {
            self.value <= self.target
        }
    }
}

/// The median of `v` (sorted in place).
pub fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

/// The `p` quantile of `v` (0.99: p99), sorted in place.
pub fn percentile(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}
