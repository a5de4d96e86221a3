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

/// Removes the job cgroups the agents whose spools are under `spool_root` (one directory per
/// node) left behind: a cluster killed with jobs running has no supervisor left to remove
/// them, and on a long-lived host they pile up (hundreds of them slowed every cpu v1 quota
/// write), with the processes of jobs `kill_tagged` could not find. Call after
/// [`kill_tagged`]. Only this cluster's, by their instance tag (node name and spool path);
/// best effort.
pub fn remove_job_cgroups(spool_root: &std::path::Path) {
    let Ok(nodes) = std::fs::read_dir(spool_root) else {
        return;
    };
    let tags: Vec<String> = nodes
        .flatten()
        .map(|node| {
            ysched_noded::launch::containment::instance_tag(
                &node.file_name().to_string_lossy(),
                &node.path(),
            )
        })
        .collect();
    if tags.is_empty() {
        return;
    }
    let mut roots = vec![std::path::PathBuf::from("/sys/fs/cgroup/ysched")];
    if let Ok(controllers) = std::fs::read_dir("/sys/fs/cgroup") {
        roots.extend(controllers.flatten().map(|c| c.path().join("ysched")));
    }
    let mut ours = Vec::new();
    for root in roots {
        let Ok(entries) = std::fs::read_dir(&root) else {
            continue;
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let matches = tags
                .iter()
                .any(|t| ysched_noded::launch::containment::is_job_cgroup_of(&name, t));
            if matches {
                ours.push(entry.path());
            }
        }
    }
    // A job submitted through the API directly carries no test tag in its environment:
    // `kill_tagged` missed it, and it would outlive the test (a `sleep 300`).
    for dir in &ours {
        if std::fs::write(dir.join("cgroup.kill"), "1").is_err() {
            let procs = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
            for pid in procs.lines().filter_map(|l| l.trim().parse::<i32>().ok()) {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
        }
    }
    for dir in &ours {
        // Processes just killed take a moment to leave it.
        for _ in 0..50 {
            if std::fs::remove_dir(dir).is_ok() || !dir.exists() {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
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
/// its children it has reaped (`cutime + cstime`: for `noded`, its node supervisor and their jobs).
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
