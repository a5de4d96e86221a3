//! Processes seen through `/proc`: killing those a test cluster started, reading one's memory.

use std::time::Duration;

/// A tag no other harness of any test process uses: the process id and a counter. (A port
/// in it, as before, could come back to a later cluster of the same process once the first
/// had let it go, and the first one's last sweep then killed the second one's processes.)
pub(crate) fn unique_tag(prefix: &str) -> String {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("{prefix}-{}-{n}", std::process::id())
}

/// SIGKILLs every process whose environment carries `YSCHED_TEST_TAG=<tag>`.
pub fn kill_tagged(tag: &str) {
    let needle = format!("YSCHED_TEST_TAG={tag}");
    for _ in 0..3 {
        let mut found = false;
        if let Ok(rd) = std::fs::read_dir("/proc") {
            for e in rd.flatten() {
                let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
                    continue;
                };
                if pid == std::process::id() as i32 {
                    continue;
                }
                let Ok(env) = std::fs::read(e.path().join("environ")) else {
                    continue;
                };
                if env.split(|b| *b == 0).any(|kv| kv == needle.as_bytes()) {
                    found = true;
                    let _ = nix::sys::signal::kill(
                        nix::unistd::Pid::from_raw(pid),
                        nix::sys::signal::Signal::SIGKILL,
                    );
                }
            }
        }
        if !found {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The resident memory of process `pid` in MiB (`VmRSS`), 0 when it is gone.
pub fn rss_mib(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .unwrap_or(0.0)
        / 1024.0
}

/// The CPU time process `pid` has used so far, in ms: its own (user + system), and that of
/// its children it has reaped (`cutime + cstime`: for `noded`, its shepherds and their jobs).
/// `None` when it is gone.
pub fn cpu_ms(pid: u32) -> Option<(f64, f64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces: count the fields after its `)`.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    // After the name: state is field 3; utime, stime, cutime, cstime are fields 14 to 17.
    let tick = |i: usize| fields.get(i - 3)?.parse::<f64>().ok();
    // SAFETY: sysconf only reads a constant of the system.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    let ms = |ticks: f64| ticks * 1e3 / hz;
    Some((ms(tick(14)? + tick(15)?), ms(tick(16)? + tick(17)?)))
}
