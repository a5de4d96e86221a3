//! `scripts/gpu-check.sh` needs a real NVIDIA GPU; without one it must say so and exit 2
//! before building anything. (With a GPU, run the script itself.)

use std::path::Path;
use std::process::Command;

fn script() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/gpu-check.sh")
}

#[test]
fn the_script_parses() {
    let out = Command::new("bash")
        .arg("-n")
        .arg(script())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn without_a_gpu_it_says_so_and_exits_2() {
    // A PATH with only what the script needs before it looks for nvidia-smi (dirname), so
    // that the test takes the same path on a GPU host.
    let bin = tempfile::tempdir().unwrap();
    let dirname = ["/usr/bin/dirname", "/bin/dirname"]
        .into_iter()
        .find(|path| Path::new(path).exists())
        .expect("dirname");
    std::os::unix::fs::symlink(dirname, bin.path().join("dirname")).unwrap();
    let bash = ["/usr/bin/bash", "/bin/bash"]
        .into_iter()
        .find(|path| Path::new(path).exists())
        .expect("bash");
    let out = Command::new(bash)
        .arg(script())
        .env("PATH", bin.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(2),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        stdout,
        "gpu-check: no NVIDIA GPU/driver here (nvidia-smi is not installed)\n"
    );
}
