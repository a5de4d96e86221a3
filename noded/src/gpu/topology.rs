//! NVLink topology from what NVML reports per link, as a pure function over plain data so it
//! can be tested on recorded answers without a GPU.

use std::collections::{BTreeMap, BTreeSet, HashMap};

/// What sits at the far end of an active NVLink.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkKind {
    Gpu,
    /// An NVSwitch: the GPU is part of the switch fabric.
    Switch,
    /// The driver could not say (old driver, or an IBM NPU).
    Unknown,
}

/// The remote end of one active link, as `remote_pci_info` and `remote_device_type` report it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteEndpoint {
    pub bus_id: String,
    pub kind: LinkKind,
}

/// Canonical PCI bus id: lower case, 4-digit domain when it fits (`0000:07:00.0`), so that
/// NVML's `00000000:07:00.0` and sysfs's `0000:07:00.0` compare equal. Text that is not a
/// bus id is returned trimmed and lower-cased.
pub fn normalize_bus_id(bus_id: &str) -> String {
    let text = bus_id.trim().trim_end_matches('\0').to_ascii_lowercase();
    let parse = || -> Option<String> {
        let (rest, function) = text.rsplit_once('.')?;
        let mut parts = rest.rsplitn(3, ':');
        let device = u32::from_str_radix(parts.next()?, 16).ok()?;
        let bus = u32::from_str_radix(parts.next()?, 16).ok()?;
        let domain = match parts.next() {
            Some(d) => u32::from_str_radix(d, 16).ok()?,
            None => 0,
        };
        let function = u32::from_str_radix(function, 16).ok()?;
        Some(if domain > 0xffff {
            format!("{domain:08x}:{bus:02x}:{device:02x}.{function:x}")
        } else {
            format!("{domain:04x}:{bus:02x}:{device:02x}.{function:x}")
        })
    };
    parse().unwrap_or(text)
}

/// NVLink peers of each local GPU.
///
/// `gpus` are the local GPUs as (index, PCI bus id); `links` are the active links as
/// (index of the GPU the link belongs to, its remote end). A link whose remote bus id is a
/// local GPU makes the two GPUs peers. GPUs with a link to an NVSwitch form one domain where
/// every GPU reaches every other: NVML shows only GPU-to-switch links, not how switches are
/// trunked, and on one host the switches form a single fabric (DGX/HGX). Every GPU in `gpus`
/// gets an entry, empty when it has no NVLink peer.
pub fn nvlink_peers(
    gpus: &[(u32, String)],
    links: &[(u32, RemoteEndpoint)],
) -> BTreeMap<u32, Vec<u32>> {
    let index_by_bus: HashMap<String, u32> = gpus
        .iter()
        .map(|(index, bus)| (normalize_bus_id(bus), *index))
        .collect();
    let mut peers: BTreeMap<u32, BTreeSet<u32>> = gpus
        .iter()
        .map(|(index, _)| (*index, BTreeSet::new()))
        .collect();
    let mut on_switch_fabric = BTreeSet::new();

    for (gpu, remote) in links {
        if !peers.contains_key(gpu) {
            continue;
        }
        let remote_gpu = index_by_bus.get(&normalize_bus_id(&remote.bus_id)).copied();
        match (remote.kind, remote_gpu) {
            (LinkKind::Switch, _) => {
                on_switch_fabric.insert(*gpu);
            }
            // An unknown device that has a local GPU's bus id is that GPU.
            (LinkKind::Gpu | LinkKind::Unknown, Some(other)) if other != *gpu => {
                peers.entry(*gpu).or_default().insert(other);
                peers.entry(other).or_default().insert(*gpu);
            }
            _ => {}
        }
    }
    for gpu in &on_switch_fabric {
        let others = on_switch_fabric.iter().filter(|&other| other != gpu);
        peers.entry(*gpu).or_default().extend(others);
    }
    peers
        .into_iter()
        .map(|(gpu, set)| (gpu, set.into_iter().collect()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bus(i: u32) -> String {
        // NVML's long form, with upper-case hex as some drivers print it.
        format!("00000000:{:02X}:00.0", 0x07 + i * 0x10)
    }

    fn gpus(n: u32) -> Vec<(u32, String)> {
        (0..n).map(|i| (i, bus(i))).collect()
    }

    fn to_gpu(gpu: u32, other: u32) -> (u32, RemoteEndpoint) {
        // remote_pci_info answers in the short, lower-case form on some drivers.
        let bus_id = normalize_bus_id(&bus(other));
        (
            gpu,
            RemoteEndpoint {
                bus_id,
                kind: LinkKind::Gpu,
            },
        )
    }

    #[test]
    fn bus_ids_normalize() {
        assert_eq!(normalize_bus_id("00000000:07:00.0"), "0000:07:00.0");
        assert_eq!(normalize_bus_id("0000:B7:00.0"), "0000:b7:00.0");
        assert_eq!(normalize_bus_id("b7:00.0"), "0000:b7:00.0");
        assert_eq!(normalize_bus_id("00010000:07:00.0"), "00010000:07:00.0");
        assert_eq!(normalize_bus_id(" Not-A-Bus "), "not-a-bus");
    }

    /// DGX A100: each of 8 GPUs has 12 links, 2 to each of 6 NVSwitches.
    #[test]
    fn dgx_nvswitch_is_one_domain() {
        let switches: Vec<String> = (0..6)
            .map(|s| format!("00000000:{:02X}:00.0", 0xC0 + s))
            .collect();
        let mut links = Vec::new();
        for gpu in 0..8 {
            for link in 0..12 {
                let bus_id = switches[link / 2].clone();
                links.push((
                    gpu,
                    RemoteEndpoint {
                        bus_id,
                        kind: LinkKind::Switch,
                    },
                ));
            }
        }
        let peers = nvlink_peers(&gpus(8), &links);
        assert_eq!(peers.len(), 8);
        for (gpu, p) in &peers {
            let expected: Vec<u32> = (0..8).filter(|o| o != gpu).collect();
            assert_eq!(p, &expected, "GPU {gpu}");
        }
    }

    /// Two islands of 4 fully connected GPUs (0-3 and 4-7), two links per pair.
    #[test]
    fn two_islands_of_four() {
        let mut links = Vec::new();
        for island in [0..4u32, 4..8u32] {
            for a in island.clone() {
                for b in island.clone().filter(|&b| b != a) {
                    links.push(to_gpu(a, b));
                    links.push(to_gpu(a, b));
                }
            }
        }
        let peers = nvlink_peers(&gpus(8), &links);
        assert_eq!(peers[&0], vec![1, 2, 3]);
        assert_eq!(peers[&3], vec![0, 1, 2]);
        assert_eq!(peers[&4], vec![5, 6, 7]);
        assert_eq!(peers[&7], vec![4, 5, 6]);
    }

    /// NVLink bridges join pairs (0-1, 2-3); one side reports the link with an unknown type.
    #[test]
    fn bridged_pairs() {
        let unknown = |gpu, other| {
            let bus_id = bus(other);
            (
                gpu,
                RemoteEndpoint {
                    bus_id,
                    kind: LinkKind::Unknown,
                },
            )
        };
        let links = vec![to_gpu(0, 1), to_gpu(1, 0), unknown(2, 3)];
        let peers = nvlink_peers(&gpus(4), &links);
        assert_eq!(peers[&0], vec![1]);
        assert_eq!(peers[&1], vec![0]);
        assert_eq!(peers[&2], vec![3]);
        assert_eq!(peers[&3], vec![2]);
    }

    #[test]
    fn no_links_and_foreign_ends() {
        let peers = nvlink_peers(&gpus(2), &[]);
        assert_eq!(peers, BTreeMap::from([(0, vec![]), (1, vec![])]));
        // A link to a device that is no local GPU and no switch (an IBM NPU) adds nothing,
        // and a link reported for an unknown local index is ignored.
        let npu = RemoteEndpoint {
            bus_id: "0007:00:00.0".into(),
            kind: LinkKind::Unknown,
        };
        let peers = nvlink_peers(&gpus(2), &[(0, npu.clone()), (9, npu)]);
        assert_eq!(peers, BTreeMap::from([(0, vec![]), (1, vec![])]));
    }
}
