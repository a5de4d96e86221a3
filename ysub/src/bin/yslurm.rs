//! The `yslurm` binary: Slurm's commands on ysched ([`ysub::compat`]).

fn main() -> std::process::ExitCode {
    ysub::compat::main()
}
