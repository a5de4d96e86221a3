//! The `yq` binary: lists the queue ([`ysub::queue`]).

// Decoding a 10,000-job listing is allocation-bound (a dozen small strings per job): mimalloc
// makes `yq` markedly faster there. The other tools, short-lived and allocation-light, keep the
// system allocator, which starts faster.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    ysub::queue::main()
}
