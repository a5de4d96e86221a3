//! The `yctl` binary: inspects and administers the cluster ([`ysub::admin`]).

fn main() -> std::process::ExitCode {
    ysub::admin::main()
}
