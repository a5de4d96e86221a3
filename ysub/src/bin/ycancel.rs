fn main() -> std::process::ExitCode {
    ysub::cancel::main()
}
