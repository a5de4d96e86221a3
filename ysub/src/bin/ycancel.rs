//! The `ycancel` binary: cancels jobs ([`ysub::cancel`]).

fn main() -> std::process::ExitCode {
    ysub::cancel::main()
}
