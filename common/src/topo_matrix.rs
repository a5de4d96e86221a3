//! The GPU matrix of a node the way `nvidia-smi topo -m` prints it, so an admin can hold the
//! two side by side: `X` on the diagonal, `NV#` for # NVLink links, else the PCIe relation,
//! then each GPU's NUMA node and nvidia-smi's legend.
//!
//! `noded --inventory` and `yctl nodes --topology` both print it.

use crate::types::Gpu;
use std::fmt::Write as _;

/// nvidia-smi's legend, less the NIC lines (the matrix has no NIC rows).
const LEGEND: &str = "\
Legend:

  X    = Self
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)
  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node
  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)
  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)
  PIX  = Connection traversing at most a single PCIe bridge
  NV#  = Connection traversing a bonded set of # NVLinks
";

/// The matrix, a blank line and the legend; rows and columns in the order of `gpus`.
pub fn format_topo_matrix(gpus: &[Gpu]) -> String {
    let mut header = vec![String::new()];
    header.extend(gpus.iter().map(|g| format!("GPU{}", g.index)));
    header.push("NUMA Affinity".into());
    let mut rows = vec![header];
    for gpu in gpus {
        let mut row = vec![format!("GPU{}", gpu.index)];
        row.extend(gpus.iter().map(|peer| topo_cell(gpu, peer)));
        row.push(gpu.numa_node.map_or("N/A".into(), |n| n.to_string()));
        rows.push(row);
    }
    let mut out = align_columns(&rows);
    // An agent that reported no topology leaves `links` empty; the scheduler then assumes
    // SYS, and the matrix shows what the scheduler assumes.
    if gpus.len() > 1 && gpus.iter().any(|g| g.links.is_empty()) {
        out.push_str("\nNo PCIe topology was reported for some GPUs; they are shown as SYS.\n");
    }
    out.push('\n');
    out.push_str(LEGEND);
    out
}

/// One cell: how `gpu` reaches `peer`.
pub fn topo_cell(gpu: &Gpu, peer: &Gpu) -> String {
    if gpu.index == peer.index {
        return "X".into();
    }
    let nvlinks = gpu
        .links
        .iter()
        .find(|l| l.peer == peer.index)
        .map_or(0, |l| l.nvlinks);
    if nvlinks > 0 {
        format!("NV{nvlinks}")
    } else if gpu.has_nvlink_to(peer.index) {
        // A peer without a link count (an agent older than link counts).
        "NV".into()
    } else {
        gpu.pcie_to(peer.index).as_str().into()
    }
}

/// Left-aligned columns two spaces apart, without trailing blanks.
pub fn align_columns(rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = Vec::new();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            let width = cell.chars().count();
            match widths.get_mut(i) {
                Some(w) => *w = (*w).max(width),
                None => widths.push(width),
            }
        }
    }
    let mut out = String::new();
    for row in rows {
        let mut line = String::new();
        for (cell, &width) in row.iter().zip(&widths) {
            // `{:<width$}` pads by characters, as `widths` counts them.
            let _ = write!(line, "{cell:<width$}  ");
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{GpuLink, PcieRelation};

    /// `n` GPUs linked by `rule(gpu, peer) -> (pcie, nvlinks)`, NUMA node from `numa`.
    fn node(
        n: u32,
        numa: impl Fn(u32) -> Option<i32>,
        rule: impl Fn(u32, u32) -> (PcieRelation, u32),
    ) -> Vec<Gpu> {
        (0..n)
            .map(|index| {
                let links: Vec<GpuLink> = (0..n)
                    .filter(|&peer| peer != index)
                    .map(|peer| {
                        let (pcie, nvlinks) = rule(index, peer);
                        GpuLink {
                            peer,
                            pcie,
                            nvlinks,
                        }
                    })
                    .collect();
                Gpu {
                    index,
                    numa_node: numa(index),
                    nvlink: links
                        .iter()
                        .filter(|l| l.nvlinks > 0)
                        .map(|l| l.peer)
                        .collect(),
                    links,
                    ..Default::default()
                }
            })
            .collect()
    }

    fn words(line: &str) -> Vec<&str> {
        line.split_whitespace().collect()
    }

    #[test]
    fn dgx_a100_is_nv12_everywhere() {
        let numa = [3, 3, 1, 1, 7, 7, 5, 5];
        let gpus = node(
            8,
            |i| Some(numa[i as usize]),
            |a, b| {
                let pcie = if a / 2 == b / 2 {
                    PcieRelation::Pxb
                } else {
                    PcieRelation::Sys
                };
                (pcie, 12)
            },
        );
        let out = format_topo_matrix(&gpus);
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(
            lines[0],
            "      GPU0  GPU1  GPU2  GPU3  GPU4  GPU5  GPU6  GPU7  NUMA Affinity"
        );
        assert_eq!(
            lines[1],
            "GPU0  X     NV12  NV12  NV12  NV12  NV12  NV12  NV12  3"
        );
        assert_eq!(
            words(lines[8]),
            ["GPU7", "NV12", "NV12", "NV12", "NV12", "NV12", "NV12", "NV12", "X", "5"]
        );
        assert_eq!(lines[9], "");
        assert_eq!(lines[10], "Legend:");
        assert_eq!(lines[12], "  X    = Self");
        assert_eq!(
            lines.last().copied(),
            Some("  NV#  = Connection traversing a bonded set of # NVLinks")
        );
    }

    #[test]
    fn two_nvlink_islands_show_sys_between_them() {
        let gpus = node(
            8,
            |i| Some((i / 4) as i32),
            |a, b| {
                if a / 4 == b / 4 {
                    (PcieRelation::Node, 4)
                } else {
                    (PcieRelation::Sys, 0)
                }
            },
        );
        let out = format_topo_matrix(&gpus);
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(
            words(lines[1]),
            ["GPU0", "X", "NV4", "NV4", "NV4", "SYS", "SYS", "SYS", "SYS", "0"]
        );
        assert_eq!(
            words(lines[6]),
            ["GPU5", "SYS", "SYS", "SYS", "SYS", "NV4", "X", "NV4", "NV4", "1"]
        );
    }

    #[test]
    fn without_nvlink_the_pcie_relation_shows() {
        // An A10 box: pairs behind one PCIe switch, the pairs on two sockets; NUMA unknown
        // for the last GPU.
        let gpus = node(
            4,
            |i| (i < 3).then_some((i / 2) as i32),
            |a, b| {
                if a / 2 == b / 2 {
                    (PcieRelation::Pix, 0)
                } else {
                    (PcieRelation::Sys, 0)
                }
            },
        );
        let out = format_topo_matrix(&gpus);
        let expected_matrix = "      GPU0  GPU1  GPU2  GPU3  NUMA Affinity\n\
                               GPU0  X     PIX   SYS   SYS   0\n\
                               GPU1  PIX   X     SYS   SYS   0\n\
                               GPU2  SYS   SYS   X     PIX   1\n\
                               GPU3  SYS   SYS   PIX   X     N/A\n\n";
        assert!(out.starts_with(expected_matrix), "{out}");
        assert!(out.ends_with(LEGEND), "{out}");
        assert!(!out.contains("No PCIe topology"), "{out}");
    }

    #[test]
    fn gpus_without_links_show_as_sys_with_a_note() {
        // What an older agent reports: NVLink peers, no links.
        let gpus = vec![
            Gpu {
                index: 0,
                nvlink: vec![1],
                ..Default::default()
            },
            Gpu {
                index: 1,
                nvlink: vec![0],
                ..Default::default()
            },
            Gpu {
                index: 2,
                ..Default::default()
            },
        ];
        let out = format_topo_matrix(&gpus);
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(words(lines[1]), ["GPU0", "X", "NV", "SYS", "N/A"]);
        assert_eq!(words(lines[3]), ["GPU2", "SYS", "SYS", "X", "N/A"]);
        assert!(out.contains("No PCIe topology was reported"), "{out}");
        // A single GPU has nothing to report.
        assert!(!format_topo_matrix(&gpus[..1]).contains("No PCIe topology"));
    }
}
