//! Generates the gRPC code from `ysched.proto` with the pure-Rust `protox` compiler,
//! so a fresh machine needs no `protoc` binary.
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto_dir = std::path::Path::new("proto");
    let files = [proto_dir.join("ysched.proto")];
    for f in &files {
        println!("cargo:rerun-if-changed={}", f.display());
    }
    let fds = protox::compile(&files, [proto_dir])?;
    tonic_prost_build::configure()
        // A job's spec has some forty fields: inline, it made every `JobInfo` over 1 KiB, and
        // a listing of 10,000 jobs (which carries no spec) moved and held 11 MB of it on
        // each side. Boxed, a listing's entry is a third of that.
        .boxed(".ysched.v1.JobInfo.spec")
        .compile_fds(fds)?;
    Ok(())
}
