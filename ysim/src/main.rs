//! The `ysim` binary.

fn main() {
    eprintln!("ysim: not built yet");
    std::process::exit(2);
}
