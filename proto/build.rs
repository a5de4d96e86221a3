//! Generates the gRPC code from `ysched.proto` with the pure-Rust `protox` compiler,
//! so a fresh machine needs no `protoc` binary.
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto_dir = std::path::Path::new("proto");
    let files = [proto_dir.join("ysched.proto")];
    for f in &files {
        println!("cargo:rerun-if-changed={}", f.display());
    }
    let fds = protox::compile(&files, [proto_dir])?;
    tonic_prost_build::configure().compile_fds(fds)?;
    Ok(())
}
