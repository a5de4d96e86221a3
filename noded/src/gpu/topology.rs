//! GPU topology (NVLink peers, PCIe relations) from what NVML reports, as pure functions.
//!
//! Pure functions over plain data, so that they can be tested on recorded answers without a
//! GPU: NVLink peers and link counts from the per-link answers, PCIe relations from
//! `topology_common_ancestor`, and both merged into `Gpu::links`.

use nvml_wrapper::enum_wrappers::device::TopologyLevel;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use ysched_common::{Gpu, GpuLink, PcieRelation};

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

/// Number of NVLink links from each GPU to each peer it reaches: `counts[gpu][peer]`.
pub type NvlinkCounts = BTreeMap<u32, BTreeMap<u32, u32>>;

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

/// NVLink links between local GPUs.
///
/// `gpus` are the local GPUs as (index, PCI bus id); `links` are the active links as (index
/// of the GPU the link belongs to, its remote end). A link whose remote bus id is a local GPU
/// counts for that pair. Both ends normally report each link; when only one does (one side
/// answers with an unknown device type, or not at all) its count stands for both.
///
/// GPUs with a link to an NVSwitch form one domain where every GPU reaches every other: NVML
/// shows only GPU-to-switch links, not how switches are trunked, and on one host the
/// switches form a single fabric (DGX/HGX). Such a pair counts the GPU's own links into the
/// fabric, which is what `nvidia-smi topo -m` shows (NV12 on a DGX A100, NV18 on an H100).
///
/// Every GPU in `gpus` gets an entry, empty when it has no NVLink peer.
pub fn nvlink_counts(gpus: &[(u32, String)], links: &[(u32, RemoteEndpoint)]) -> NvlinkCounts {
    let index_by_bus: HashMap<String, u32> = gpus
        .iter()
        .map(|(index, bus)| (normalize_bus_id(bus), *index))
        .collect();
    let mut counts: NvlinkCounts = gpus
        .iter()
        .map(|(index, _)| (*index, BTreeMap::new()))
        .collect();
    // Links as each GPU reported them: (from, to) → links.
    let mut reported: BTreeMap<(u32, u32), u32> = BTreeMap::new();
    let mut into_fabric: BTreeMap<u32, u32> = BTreeMap::new();

    for (gpu, remote) in links {
        if !counts.contains_key(gpu) {
            continue;
        }
        let remote_gpu = index_by_bus.get(&normalize_bus_id(&remote.bus_id)).copied();
        match (remote.kind, remote_gpu) {
            (LinkKind::Switch, _) => *into_fabric.entry(*gpu).or_default() += 1,
            // An unknown device that has a local GPU's bus id is that GPU.
            (LinkKind::Gpu | LinkKind::Unknown, Some(other)) if other != *gpu => {
                *reported.entry((*gpu, other)).or_default() += 1;
            }
            _ => {}
        }
    }
    for (&(gpu, other), &n) in &reported {
        let n = n.max(reported.get(&(other, gpu)).copied().unwrap_or(0));
        counts.entry(gpu).or_default().insert(other, n);
        counts.entry(other).or_default().insert(gpu, n);
    }
    let on_fabric: BTreeSet<u32> = into_fabric.keys().copied().collect();
    for (gpu, n) in into_fabric {
        let row = counts.entry(gpu).or_default();
        for &other in on_fabric.iter().filter(|&&other| other != gpu) {
            *row.entry(other).or_default() += n;
        }
    }
    counts
}

/// nvidia-smi's name for an NVML common-ancestor level. Two GPUs on one board (`Internal`,
/// a K80 or an A16) share a PCIe switch on that board, so they are PIX.
pub fn pcie_relation(level: TopologyLevel) -> PcieRelation {
    match level {
        TopologyLevel::Internal | TopologyLevel::Single => PcieRelation::Pix,
        TopologyLevel::Multiple => PcieRelation::Pxb,
        TopologyLevel::HostBridge => PcieRelation::Phb,
        TopologyLevel::Node => PcieRelation::Node,
        TopologyLevel::System => PcieRelation::Sys,
    }
}

/// Fills `nvlink` and `links` of every GPU: one link per other GPU, in index order, with its
/// NVLink count from `nvlinks` (none when absent) and the PCIe relation `pcie(gpu, peer)`.
pub fn link_gpus(
    gpus: &mut [Gpu],
    nvlinks: &NvlinkCounts,
    pcie: impl Fn(&Gpu, &Gpu) -> PcieRelation,
) {
    let mut order: Vec<usize> = (0..gpus.len()).collect();
    order.sort_by_key(|&i| gpus[i].index);
    let all_links: Vec<Vec<GpuLink>> = gpus
        .iter()
        .map(|gpu| {
            let counts = nvlinks.get(&gpu.index);
            order
                .iter()
                .map(|&i| &gpus[i])
                .filter(|peer| peer.index != gpu.index)
                .map(|peer| GpuLink {
                    peer: peer.index,
                    pcie: pcie(gpu, peer),
                    nvlinks: counts
                        .and_then(|c| c.get(&peer.index))
                        .copied()
                        .unwrap_or(0),
                })
                .collect()
        })
        .collect();
    for (gpu, links) in gpus.iter_mut().zip(all_links) {
        gpu.nvlink = links
            .iter()
            .filter(|l| l.nvlinks > 0)
            .map(|l| l.peer)
            .collect();
        gpu.links = links;
    }
}

/// What NVML answered about how a host's GPUs are connected, as plain data.
#[derive(Debug, Clone, Default)]
pub struct NvmlTopology {
    /// Active NVLinks as (index of the GPU the link belongs to, its remote end).
    pub nvlinks: Vec<(u32, RemoteEndpoint)>,
    /// `topology_common_ancestor` per pair of GPU indices, each pair once in either order.
    /// A pair the driver did not answer is missing and counts as SYS, the relation that
    /// promises least.
    pub common_ancestors: BTreeMap<(u32, u32), TopologyLevel>,
}

impl NvmlTopology {
    /// Fills `nvlink` and `links` of the GPUs NVML listed (their `pci_bus_id` already set).
    pub fn apply(&self, gpus: &mut [Gpu]) {
        let bus_ids: Vec<(u32, String)> = gpus
            .iter()
            .map(|g| (g.index, g.pci_bus_id.clone()))
            .collect();
        let counts = nvlink_counts(&bus_ids, &self.nvlinks);
        link_gpus(gpus, &counts, |gpu, peer| self.pcie(gpu.index, peer.index));
    }

    fn pcie(&self, a: u32, b: u32) -> PcieRelation {
        self.common_ancestors
            .get(&(a, b))
            .or_else(|| self.common_ancestors.get(&(b, a)))
            .map_or(PcieRelation::Sys, |&level| pcie_relation(level))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bus(i: u32) -> String {
        // NVML's long form, with upper-case hex as some drivers print it.
        format!("00000000:{:02X}:00.0", 0x07 + i * 0x10)
    }

    fn bus_ids(n: u32) -> Vec<(u32, String)> {
        (0..n).map(|i| (i, bus(i))).collect()
    }

    /// GPUs as the NVML backend has them before the topology is applied.
    fn gpus(n: u32) -> Vec<Gpu> {
        (0..n)
            .map(|index| Gpu {
                index,
                pci_bus_id: normalize_bus_id(&bus(index)),
                ..Default::default()
            })
            .collect()
    }

    fn endpoint(bus_id: String, kind: LinkKind) -> RemoteEndpoint {
        RemoteEndpoint { bus_id, kind }
    }

    fn to_gpu(gpu: u32, other: u32) -> (u32, RemoteEndpoint) {
        // remote_pci_info answers in the short, lower-case form on some drivers.
        (gpu, endpoint(normalize_bus_id(&bus(other)), LinkKind::Gpu))
    }

    /// `count` links from `gpu` to `other`.
    fn links_to(gpu: u32, other: u32, count: usize) -> Vec<(u32, RemoteEndpoint)> {
        vec![to_gpu(gpu, other); count]
    }

    /// The common ancestor of every pair, from a rule.
    fn ancestors(
        n: u32,
        rule: impl Fn(u32, u32) -> TopologyLevel,
    ) -> BTreeMap<(u32, u32), TopologyLevel> {
        (0..n)
            .flat_map(|a| (a + 1..n).map(move |b| (a, b)))
            .map(|(a, b)| ((a, b), rule(a, b)))
            .collect()
    }

    /// Each GPU's row as `nvidia-smi topo -m` would show it: `NV#` or the PCIe relation.
    fn matrix(gpus: &[Gpu]) -> Vec<Vec<String>> {
        gpus.iter()
            .map(|gpu| {
                gpus.iter()
                    .map(|peer| {
                        if peer.index == gpu.index {
                            return "X".to_string();
                        }
                        let link = gpu.links.iter().find(|l| l.peer == peer.index).unwrap();
                        if link.nvlinks > 0 {
                            format!("NV{}", link.nvlinks)
                        } else {
                            link.pcie.as_str().to_string()
                        }
                    })
                    .collect()
            })
            .collect()
    }

    fn row(cells: &str) -> Vec<String> {
        cells.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn bus_ids_normalize() {
        assert_eq!(normalize_bus_id("00000000:07:00.0"), "0000:07:00.0");
        assert_eq!(normalize_bus_id("0000:B7:00.0"), "0000:b7:00.0");
        assert_eq!(normalize_bus_id("b7:00.0"), "0000:b7:00.0");
        assert_eq!(normalize_bus_id("00010000:07:00.0"), "00010000:07:00.0");
        assert_eq!(normalize_bus_id(" Not-A-Bus "), "not-a-bus");
    }

    #[test]
    fn common_ancestor_levels_map_to_nvidia_smi_names() {
        use PcieRelation::*;
        let mapped: Vec<PcieRelation> = [
            TopologyLevel::Internal,
            TopologyLevel::Single,
            TopologyLevel::Multiple,
            TopologyLevel::HostBridge,
            TopologyLevel::Node,
            TopologyLevel::System,
        ]
        .into_iter()
        .map(pcie_relation)
        .collect();
        assert_eq!(mapped, [Pix, Pix, Pxb, Phb, Node, Sys]);
    }

    /// DGX A100: each of 8 GPUs has 12 links, 2 to each of 6 NVSwitches; GPUs sit in PCIe
    /// pairs (0-1, 2-3, ...), each pair on its own NUMA node.
    #[test]
    fn dgx_nvswitch_is_one_domain_of_nv12() {
        let switches: Vec<String> = (0..6)
            .map(|s| format!("00000000:{:02X}:00.0", 0xC0 + s))
            .collect();
        let nvlinks = (0..8)
            .flat_map(|gpu| (0..12).map(move |link| (gpu, link / 2)))
            .map(|(gpu, switch)| (gpu, endpoint(switches[switch].clone(), LinkKind::Switch)))
            .collect();
        let topology = NvmlTopology {
            nvlinks,
            common_ancestors: ancestors(8, |a, b| {
                if a / 2 == b / 2 {
                    TopologyLevel::Multiple
                } else {
                    TopologyLevel::System
                }
            }),
        };
        let mut gpus = gpus(8);
        topology.apply(&mut gpus);
        for gpu in &gpus {
            let others: Vec<u32> = (0..8).filter(|&o| o != gpu.index).collect();
            assert_eq!(gpu.nvlink, others, "GPU {}", gpu.index);
            assert_eq!(gpu.links.len(), 7);
            assert!(gpu.links.iter().all(|l| l.nvlinks == 12));
        }
        assert_eq!(
            matrix(&gpus)[0],
            row("X NV12 NV12 NV12 NV12 NV12 NV12 NV12")
        );
        // The PCIe relation is kept under the NVLink one.
        assert_eq!(gpus[0].pcie_to(1), PcieRelation::Pxb);
        assert_eq!(gpus[0].pcie_to(2), PcieRelation::Sys);
        assert_eq!(gpus[3].pcie_to(2), PcieRelation::Pxb);
    }

    /// Two islands of 4 fully connected GPUs (0-3 and 4-7, one per socket), four links per
    /// pair; nothing between the islands.
    #[test]
    fn two_islands_of_four() {
        let mut nvlinks = Vec::new();
        for island in [0..4u32, 4..8u32] {
            for a in island.clone() {
                for b in island.clone().filter(|&b| b != a) {
                    nvlinks.extend(links_to(a, b, 4));
                }
            }
        }
        let topology = NvmlTopology {
            nvlinks,
            common_ancestors: ancestors(8, |a, b| match (a / 4 == b / 4, a / 2 == b / 2) {
                (true, true) => TopologyLevel::Single,
                (true, false) => TopologyLevel::Node,
                (false, _) => TopologyLevel::System,
            }),
        };
        let mut gpus = gpus(8);
        topology.apply(&mut gpus);
        assert_eq!(gpus[0].nvlink, [1, 2, 3]);
        assert_eq!(gpus[7].nvlink, [4, 5, 6]);
        let m = matrix(&gpus);
        assert_eq!(m[0], row("X NV4 NV4 NV4 SYS SYS SYS SYS"));
        assert_eq!(m[5], row("SYS SYS SYS SYS NV4 X NV4 NV4"));
        assert_eq!(gpus[0].pcie_to(1), PcieRelation::Pix);
        assert_eq!(gpus[0].pcie_to(2), PcieRelation::Node);
    }

    /// NVLink bridges join pairs (0-1 with four links, 2-3 with two). GPU 3's driver answers
    /// with an unknown device type, and GPU 2 reports one link fewer than GPU 3 (a link
    /// that is down on one side): the larger count stands for both.
    #[test]
    fn bridged_pairs() {
        let unknown = |gpu, other| (gpu, endpoint(bus(other), LinkKind::Unknown));
        let mut nvlinks = links_to(0, 1, 4);
        nvlinks.extend(links_to(1, 0, 4));
        nvlinks.push(to_gpu(2, 3));
        nvlinks.extend([unknown(3, 2), unknown(3, 2)]);
        let topology = NvmlTopology {
            nvlinks,
            common_ancestors: ancestors(4, |a, b| {
                if a / 2 == b / 2 {
                    TopologyLevel::HostBridge
                } else {
                    TopologyLevel::System
                }
            }),
        };
        let mut gpus = gpus(4);
        topology.apply(&mut gpus);
        assert_eq!(gpus[2].nvlink, [3]);
        assert_eq!(gpus[3].nvlink, [2]);
        let m = matrix(&gpus);
        assert_eq!(m[0], row("X NV4 SYS SYS"));
        assert_eq!(m[2], row("SYS SYS X NV2"));
        assert_eq!(m[3], row("SYS SYS NV2 X"));
        assert_eq!(gpus[0].pcie_to(1), PcieRelation::Phb);
    }

    /// An A10 box: no NVLink (the link queries answer NotSupported, so nothing is recorded),
    /// GPU pairs behind one PCIe switch, the pairs on different sockets.
    #[test]
    fn a10_box_without_nvlink() {
        let topology = NvmlTopology {
            nvlinks: Vec::new(),
            common_ancestors: ancestors(4, |a, b| {
                if a / 2 == b / 2 {
                    TopologyLevel::Single
                } else {
                    TopologyLevel::System
                }
            }),
        };
        let mut gpus = gpus(4);
        topology.apply(&mut gpus);
        assert!(gpus.iter().all(|g| g.nvlink.is_empty()));
        let m = matrix(&gpus);
        assert_eq!(m[0], row("X PIX SYS SYS"));
        assert_eq!(m[1], row("PIX X SYS SYS"));
        assert_eq!(m[2], row("SYS SYS X PIX"));
    }

    /// A driver without `nvmlDeviceGetTopologyCommonAncestor` answers nothing: every pair is
    /// SYS, and every other GPU still gets a link.
    #[test]
    fn unanswered_pairs_are_sys() {
        let topology = NvmlTopology {
            nvlinks: [links_to(0, 1, 2), links_to(1, 0, 2)].concat(),
            common_ancestors: BTreeMap::from([((1, 2), TopologyLevel::Single)]),
        };
        let mut gpus = gpus(3);
        topology.apply(&mut gpus);
        let m = matrix(&gpus);
        assert_eq!(m[0], row("X NV2 SYS"));
        // Either order of the recorded pair answers for both directions.
        assert_eq!(m[2], row("SYS PIX X"));
        assert_eq!(gpus[0].pcie_to(1), PcieRelation::Sys);
    }

    #[test]
    fn counts_with_no_links_and_foreign_ends() {
        let empty = || BTreeMap::from([(0, BTreeMap::new()), (1, BTreeMap::new())]);
        assert_eq!(nvlink_counts(&bus_ids(2), &[]), empty());
        // A link to a device that is no local GPU and no switch (an IBM NPU) adds nothing,
        // and a link reported for an unknown local index is ignored.
        let npu = endpoint("0007:00:00.0".into(), LinkKind::Unknown);
        assert_eq!(
            nvlink_counts(&bus_ids(2), &[(0, npu.clone()), (9, npu)]),
            empty()
        );
    }

    #[test]
    fn gpus_out_of_index_order_link_in_index_order() {
        let mut gpus = gpus(3);
        gpus.reverse();
        NvmlTopology::default().apply(&mut gpus);
        assert_eq!(gpus[0].index, 2);
        let peers: Vec<u32> = gpus[0].links.iter().map(|l| l.peer).collect();
        assert_eq!(peers, [0, 1]);
    }
}
