//! Facts about this host that the agent reports at registration, besides GPUs.

use std::net::{IpAddr, Ipv4Addr, UdpSocket};
use std::path::Path;

/// CPUs this process may use.
pub fn cpu_count() -> u32 {
    std::thread::available_parallelism()
        .map(|n| u32::try_from(n.get()).unwrap_or(u32::MAX))
        .unwrap_or(1)
}

/// Total memory in MiB from `/proc/meminfo`, 0 when it cannot be read.
pub fn memory_mib() -> u64 {
    match std::fs::read_to_string("/proc/meminfo") {
        Ok(text) => parse_meminfo_total_mib(&text).unwrap_or(0),
        Err(e) => {
            tracing::warn!("cannot read /proc/meminfo: {e}");
            0
        }
    }
}

/// `MemTotal:       16318540 kB` → MiB.
pub fn parse_meminfo_total_mib(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemTotal:"))?;
    let mut words = line["MemTotal:".len()..].split_whitespace();
    let value: u64 = words.next()?.parse().ok()?;
    let per_mib = match words.next().unwrap_or("kB") {
        "kB" => 1024,
        "B" => 1024 * 1024,
        _ => return None,
    };
    Some(value / per_mib)
}

/// Configured features plus the detected ones (`ib` when the host has InfiniBand devices),
/// sorted and without duplicates.
pub fn features(configured: &[String]) -> Vec<String> {
    let mut features = configured.to_vec();
    if dir_has_entries(Path::new("/sys/class/infiniband")) {
        features.push("ib".to_string());
    }
    features.sort();
    features.dedup();
    features
}

fn dir_has_entries(dir: &Path) -> bool {
    std::fs::read_dir(dir).is_ok_and(|mut entries| entries.next().is_some())
}

/// The host name from the kernel, `localhost` if unknown.
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|name| name.trim().to_string())
        .ok()
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "localhost".to_string())
}

/// The local IP address used to reach `schedd` (`host:port`), which is where peers of a
/// multi-node job can reach this host too; 127.0.0.1 when it cannot be found. Connecting a
/// UDP socket only picks a route, it sends nothing.
pub async fn local_address_towards(schedd: &str) -> IpAddr {
    let fallback = IpAddr::V4(Ipv4Addr::LOCALHOST);
    let Ok(mut addrs) = tokio::net::lookup_host(schedd).await else {
        return fallback;
    };
    let Some(target) = addrs.next() else {
        return fallback;
    };
    let bind = if target.is_ipv4() {
        "0.0.0.0:0"
    } else {
        "[::]:0"
    };
    UdpSocket::bind(bind)
        .and_then(|socket| {
            socket.connect(target)?;
            socket.local_addr()
        })
        .map(|local| local.ip())
        .unwrap_or(fallback)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meminfo() {
        let text = "MemTotal:       16318540 kB\nMemFree:         1000 kB\n";
        assert_eq!(parse_meminfo_total_mib(text), Some(15936));
        assert_eq!(parse_meminfo_total_mib("MemFree: 1 kB\n"), None);
        assert!(memory_mib() > 0);
        assert!(cpu_count() >= 1);
    }

    #[tokio::test]
    async fn local_address_of_loopback_is_loopback() {
        let ip = local_address_towards("127.0.0.1:7117").await;
        assert_eq!(ip, IpAddr::V4(Ipv4Addr::LOCALHOST));
        let ip = local_address_towards("no-such-host.invalid:7117").await;
        assert_eq!(ip, IpAddr::V4(Ipv4Addr::LOCALHOST));
    }
}
