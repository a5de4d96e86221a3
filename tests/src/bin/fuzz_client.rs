//! `fuzz-client --socket PATH [--seconds N] [--seed N] [--workers N] [--max-message BYTES]`:
//! sends arbitrary and adversarial requests to every RPC of schedd's client service (see
//! `ysched_tests::fuzz`) for N seconds, then prints what it sent and got as one JSON object.
//! The fuzz test runs it as `nobody`; run longer by hand or from the `fuzz` benchmark group.

use clap::Parser;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Parser)]
struct Args {
    #[arg(long)]
    socket: PathBuf,
    #[arg(long, default_value_t = 8.0)]
    seconds: f64,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    #[arg(long, default_value_t = 3)]
    workers: usize,
    /// The largest request: schedd's message limit (16 MiB with the default config)
    #[arg(long, default_value_t = 16 << 20)]
    max_message: usize,
    /// Percent of texts that are megabytes long
    #[arg(long, default_value_t = 3)]
    huge_percent: u64,
    /// Print each request to stderr
    #[arg(long)]
    verbose: bool,
}

fn main() {
    let args = Args::parse();
    // What is measured is schedd's answers, not this generator's share of the CPU.
    // SAFETY: nice(2) has no memory effects.
    unsafe {
        libc::nice(10);
    }
    let config = ysched_tests::fuzz::FuzzConfig {
        duration: Duration::from_secs_f64(args.seconds),
        seed: args.seed,
        workers: args.workers,
        max_message: args.max_message,
        huge_percent: args.huge_percent,
        verbose: args.verbose,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let stats = runtime.block_on(ysched_tests::fuzz::run(&args.socket, &config));
    println!("{}", serde_json::to_string(&stats).expect("stats"));
}
