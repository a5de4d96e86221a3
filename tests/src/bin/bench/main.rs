//! `bench`: measures ysched on this machine and prints the figures (see docs/benchmarks.md).
//! Run with `cargo run --release -p ysched-tests --bin bench` after `cargo build --release --bins`.
//! It starts a real cluster (schedd + agents with fake GPUs) in a temp dir, like the e2e tests.

mod array;
mod cluster;
mod figure;
mod fleet;
mod fuzz;
mod history;
mod hyperqueue;
mod loaded;
mod neighbour;
mod power_loss;
mod preempt;
mod replicas;
mod replicas_catch_up;
mod report;
mod restart;
mod setup;
mod throughput;

use figure::Figure;

/// `bench [cluster|preempt|core|fleet|loaded|throughput|restart|report|history|array|neighbour|power_loss|hq|fuzz|replicas|replicas_catch_up]...`: the named groups of
/// figures; `cluster`, `preempt` and `core` by default.
fn main() {
    let groups: Vec<String> = std::env::args().skip(1).collect();
    if groups.first().map(String::as_str) == Some(ysched_tests::neighbour::ATTACKER_FLAG) {
        return ysched_tests::neighbour::attacker_main(&groups[1..]);
    }
    println!("  (temp dirs: {})", setup::temp_dir_mount());
    let want = |g: &str| groups.is_empty() || groups.iter().any(|x| x == g);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut figures = Vec::new();
    if want("cluster") {
        figures.extend(cluster::cluster(&rt));
    }
    if want("preempt") {
        figures.extend(preempt::preemption());
    }
    if groups.iter().any(|g| g == "fleet") {
        figures.extend(fleet::fleet(&rt));
    }
    if groups.iter().any(|g| g == "throughput") {
        figures.extend(throughput::throughput(&rt));
    }
    if groups.iter().any(|g| g == "loaded") {
        figures.extend(loaded::loaded(&rt));
    }
    if groups.iter().any(|g| g == "restart") {
        figures.extend(restart::restart(&rt));
    }
    if groups.iter().any(|g| g == "report") {
        figures.extend(report::report());
    }
    if groups.iter().any(|g| g == "history") {
        figures.extend(history::history(&rt));
    }
    if groups.iter().any(|g| g == "array") {
        figures.extend(array::array(&rt));
    }
    if groups.iter().any(|g| g == "neighbour") {
        figures.extend(neighbour::noisy_neighbour());
    }
    if groups.iter().any(|g| g == "hq") {
        figures.extend(hyperqueue::hyperqueue());
    }
    if groups.iter().any(|g| g == "power_loss") {
        figures.extend(power_loss::power_loss(&rt));
    }
    if groups.iter().any(|g| g == "replicas_catch_up") {
        figures.extend(replicas_catch_up::replicas_catch_up(&rt));
    }
    if groups.iter().any(|g| g == "fuzz") {
        figures.extend(fuzz::fuzz(&rt));
    }
    if groups.iter().any(|g| g == "replicas") {
        figures.extend(replicas::replicas());
    }
    if want("core") {
        for (name, value, unit, target, higher_is_better) in ysched_tests::core_bench::run() {
            figures.push(Figure {
                name,
                value,
                unit,
                target,
                higher_is_better,
            });
        }
    }
    println!("\n{:<52} {:>10} {:>8}  ", "figure", "value", "target");
    for f in &figures {
        println!(
            "{:<52} {:>8.1}{:<4} {}{:<6} {}",
            f.name,
            f.value,
            f.unit,
            if f.higher_is_better { ">=" } else { "<=" },
            f.target,
            if f.met() { "met" } else { "MISSED" }
        );
    }
}
