fn main() -> std::process::ExitCode {
    ysub::admin::main()
}
