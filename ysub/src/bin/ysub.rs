fn main() -> std::process::ExitCode {
    ysub::submit::main()
}
