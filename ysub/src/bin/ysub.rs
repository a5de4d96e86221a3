//! The `ysub` binary: submits a batch job ([`ysub::submit`]).

fn main() -> std::process::ExitCode {
    ysub::submit::main()
}
