fn main() -> std::process::ExitCode {
    ysub::queue::main()
}
