//! Benchmark of the pure scheduling core (no daemons): filled in by the issue-4 work.

/// One measured figure: name, value, unit, target, whether higher is better.
pub type CoreFigure = (&'static str, f64, &'static str, f64, bool);

pub fn run() -> Vec<CoreFigure> {
    Vec::new()
}
