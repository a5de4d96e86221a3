//! What this noded offers schedd: its name, CPUs, memory, features and GPUs.
//!
//! All of it after the command-line overrides. The agent registers it; `noded --inventory`
//! prints it, so an admin can compare it with `nvidia-smi -q` and `nvidia-smi topo -m`
//! before the node joins.

use crate::daemon::Options;
use crate::gpu::{ExcludedGpu, InventoryError};
use crate::host;
use crate::launch::{CgroupRoot, Containment};
use serde::Serialize;
use ysched_common::gpu_json::{GpuJson, GpuLinkJson as LinkJson};
use ysched_common::topo_matrix::{align_columns, format_topo_matrix};
use ysched_common::{Config, Gpu};

#[derive(Debug, Clone, PartialEq)]
pub struct Inventory {
    pub name: String,
    pub cpus: u32,
    pub mem_mib: u64,
    /// Configured plus detected, sorted.
    pub features: Vec<String>,
    pub gpus: Vec<Gpu>,
    /// GPUs found but not offered, with why: only for printing, the daemon logs them.
    pub excluded: Vec<ExcludedGpu>,
    /// How jobs would be contained (cgroups or process groups), when looked at: only for
    /// printing, the daemon's launcher finds out for itself.
    pub containment: Option<Containment>,
}

impl Inventory {
    /// The host's facts with the flags' overrides applied, and the GPUs as detected.
    pub fn new(options: &Options, config: &Config, gpus: Vec<Gpu>) -> Inventory {
        Inventory {
            name: options.name.clone().unwrap_or_else(host::hostname),
            cpus: options.cpus.unwrap_or_else(host::cpu_count),
            mem_mib: options.mem_mib.unwrap_or_else(host::memory_mib),
            features: host::features(&config.node.features),
            gpus,
            excluded: Vec::new(),
            containment: None,
        }
    }

    /// Detects the GPUs with the backend the flags choose. Unlike the daemon, which carries on
    /// without GPUs when NVML fails, this is an error: the admin asked what NVML says. Also
    /// sets up job containment as the daemon would (creating the cgroup root), to say what
    /// jobs will get.
    pub fn detect(options: &Options, config: &Config) -> Result<Inventory, InventoryError> {
        let detected = crate::gpu::inventory(
            options.fake_gpus.as_deref(),
            options.nvml_library(config).as_deref(),
        )
        .detect()?;
        let containment = Containment::set_up(
            &CgroupRoot::from_config(&config.node.cgroup_root),
            config.node.job_pids_max,
        );
        Ok(Inventory {
            containment: Some(containment),
            excluded: detected.excluded,
            ..Inventory::new(options, config, detected.gpus)
        })
    }

    /// A summary line, one line per GPU, then the topology matrix.
    pub fn to_text(&self) -> String {
        let features = if self.features.is_empty() {
            "none".to_string()
        } else {
            self.features.join(",")
        };
        let mut out = format!(
            "Node {}: {} CPUs, {} MiB memory, features: {features}\n",
            self.name, self.cpus, self.mem_mib
        );
        if let Some(containment) = &self.containment {
            out.push_str(&format!("Jobs contained by {containment}\n"));
        }
        out.push('\n');
        if self.gpus.is_empty() {
            out.push_str(if self.excluded.is_empty() {
                "No GPUs found.\n"
            } else {
                "No GPUs offered.\n"
            });
            out.push_str(&self.excluded_text());
            return out;
        }
        let header = ["GPU", "MODEL", "MEMORY", "BUS ID", "NUMA", "NVLINK", "UUID"];
        let mut rows = vec![header.map(String::from).to_vec()];
        for gpu in &self.gpus {
            rows.push(vec![
                gpu.index.to_string(),
                gpu.model.clone(),
                format!("{} MiB", gpu.memory_mib),
                or_dash(&gpu.pci_bus_id),
                gpu.numa_node.map_or("N/A".into(), |n| n.to_string()),
                or_dash(&join(&gpu.nvlink)),
                gpu.uuid.clone(),
            ]);
        }
        out.push_str(&align_columns(&rows));
        out.push_str(&self.excluded_text());
        out.push('\n');
        out.push_str(&format_topo_matrix(&self.gpus));
        out
    }

    /// A blank line and one line per GPU not offered; nothing when all are.
    fn excluded_text(&self) -> String {
        let mut out = String::new();
        if !self.excluded.is_empty() {
            out.push('\n');
        }
        for excluded in &self.excluded {
            out.push_str(&format!("{excluded}\n"));
        }
        out
    }

    pub fn to_json(&self) -> InventoryJson<'_> {
        InventoryJson {
            name: &self.name,
            cpus: self.cpus,
            mem_mib: self.mem_mib,
            features: &self.features,
            containment: self.containment.as_ref().map(|c| ContainmentJson {
                mode: match c {
                    Containment::Cgroups(_) => "cgroups",
                    Containment::ProcessGroups { .. } => "process-groups",
                },
                cgroup_root: c.layout().map(|l| l.root.to_string_lossy().into_owned()),
                description: c.to_string(),
            }),
            gpus: self
                .gpus
                .iter()
                .map(|g| GpuJson {
                    index: g.index,
                    uuid: &g.uuid,
                    model: &g.model,
                    memory_mib: g.memory_mib,
                    pci_bus_id: &g.pci_bus_id,
                    numa_node: g.numa_node,
                    nvlink: &g.nvlink,
                    links: g
                        .links
                        .iter()
                        .map(|l| LinkJson {
                            peer: l.peer,
                            pcie: l.pcie.as_str(),
                            nvlinks: l.nvlinks,
                        })
                        .collect(),
                })
                .collect(),
            excluded: self
                .excluded
                .iter()
                .map(|e| ExcludedJson {
                    index: e.index,
                    uuid: &e.uuid,
                    reason: &e.reason,
                    fault: e.fault,
                })
                .collect(),
        }
    }
}

fn or_dash(text: &str) -> String {
    if text.is_empty() {
        "-".into()
    } else {
        text.into()
    }
}

fn join(indices: &[u32]) -> String {
    indices
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// `noded --inventory --json`; the GPU objects match `yctl nodes --json` where they overlap.
#[derive(Debug, Serialize)]
pub struct InventoryJson<'a> {
    pub name: &'a str,
    pub cpus: u32,
    pub mem_mib: u64,
    pub features: &'a [String],
    /// Absent when not looked at.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub containment: Option<ContainmentJson>,
    pub gpus: Vec<GpuJson<'a>>,
    /// GPUs found but not offered.
    pub excluded: Vec<ExcludedJson<'a>>,
}

/// A GPU the node has but does not offer.
#[derive(Debug, Serialize)]
pub struct ExcludedJson<'a> {
    pub index: u32,
    /// Empty when NVML could not tell.
    pub uuid: &'a str,
    pub reason: &'a str,
    /// An NVML error rather than a chosen configuration (MIG).
    pub fault: bool,
}

/// How jobs are contained: `mode` is `cgroups` or `process-groups`.
#[derive(Debug, Serialize)]
pub struct ContainmentJson {
    pub mode: &'static str,
    /// Where the jobs' cgroups go; null without cgroups.
    pub cgroup_root: Option<String>,
    pub description: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::FakeInventory;
    use std::path::Path;

    fn inventory() -> Inventory {
        let gpus = FakeInventory::parse(
            Path::new("gpus.toml"),
            r#"
            [[gpu]]
            index = 0
            uuid = "GPU-0"
            model = "NVIDIA A100-SXM4-80GB"
            memory_mib = 81920
            pci_bus_id = "0000:07:00.0"
            numa_node = 0
            nvlink = [1, 1, 1, 1]
            pcie = ["X", "PXB", "SYS"]

            [[gpu]]
            index = 1
            uuid = "GPU-1"
            model = "NVIDIA A100-SXM4-80GB"
            memory_mib = 81920
            numa_node = 0
            nvlink = [0, 0, 0, 0]

            [[gpu]]
            index = 2
            uuid = "GPU-2"
            model = "NVIDIA A10"
            memory_mib = 24576
            "#,
        )
        .unwrap();
        Inventory {
            name: "n1".into(),
            cpus: 64,
            mem_mib: 524288,
            features: vec!["ib".into(), "nvme".into()],
            gpus,
            excluded: Vec::new(),
            containment: None,
        }
    }

    #[test]
    fn text_lists_gpus_then_the_matrix() {
        let out = inventory().to_text();
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(
            lines[0],
            "Node n1: 64 CPUs, 524288 MiB memory, features: ib,nvme"
        );
        assert_eq!(
            lines[2].split_whitespace().collect::<Vec<_>>(),
            ["GPU", "MODEL", "MEMORY", "BUS", "ID", "NUMA", "NVLINK", "UUID"]
        );
        assert_eq!(
            lines[3],
            "0    NVIDIA A100-SXM4-80GB  81920 MiB  0000:07:00.0  0     1       GPU-0"
        );
        assert_eq!(
            lines[5],
            "2    NVIDIA A10             24576 MiB  -             N/A   -       GPU-2"
        );
        assert_eq!(lines[7], "      GPU0  GPU1  GPU2  NUMA Affinity");
        assert_eq!(lines[8], "GPU0  X     NV4   SYS   0");
        // GPU 2's NUMA node is unknown and it has no pcie row: SYS.
        assert_eq!(lines[9], "GPU1  NV4   X     SYS   0");
        assert_eq!(lines[10], "GPU2  SYS   SYS   X     N/A");
        assert!(out.contains("\nLegend:\n"), "{out}");
    }

    #[test]
    fn no_gpus_says_so() {
        let out = Inventory {
            gpus: Vec::new(),
            features: Vec::new(),
            ..inventory()
        }
        .to_text();
        assert_eq!(
            out,
            "Node n1: 64 CPUs, 524288 MiB memory, features: none\n\nNo GPUs found.\n"
        );
    }

    #[test]
    fn gpus_not_offered_are_listed_with_why() {
        let excluded = vec![
            ExcludedGpu {
                index: 3,
                uuid: "GPU-3".into(),
                reason: "MIG mode is enabled".into(),
                fault: false,
            },
            ExcludedGpu {
                index: 4,
                uuid: String::new(),
                reason: "NVML cannot open it".into(),
                fault: true,
            },
        ];
        let listed = Inventory {
            excluded: excluded.clone(),
            ..inventory()
        };
        let out = listed.to_text();
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines[6], "");
        assert_eq!(
            lines[7],
            "GPU 3 (GPU-3) is not offered: MIG mode is enabled"
        );
        assert_eq!(lines[8], "GPU 4 is not offered: NVML cannot open it");
        assert!(lines[10].starts_with("      GPU0  GPU1  GPU2"), "{out}");
        let value = serde_json::to_value(listed.to_json()).unwrap();
        assert_eq!(
            value["excluded"][1],
            serde_json::json!({"index": 4, "uuid": "", "reason": "NVML cannot open it", "fault": true})
        );

        let none_offered = Inventory {
            gpus: Vec::new(),
            excluded,
            ..inventory()
        }
        .to_text();
        assert!(
            none_offered.ends_with(
                "\nNo GPUs offered.\n\nGPU 3 (GPU-3) is not offered: MIG mode is enabled\n\
                 GPU 4 is not offered: NVML cannot open it\n"
            ),
            "{none_offered}"
        );
    }

    #[test]
    fn json_names_relations_as_nvidia_smi_does() {
        let value = serde_json::to_value(inventory().to_json()).unwrap();
        assert_eq!(value["features"], serde_json::json!(["ib", "nvme"]));
        assert_eq!(
            value["gpus"][0]["links"],
            serde_json::json!([
                {"peer": 1, "pcie": "PXB", "nvlinks": 4},
                {"peer": 2, "pcie": "SYS", "nvlinks": 0},
            ])
        );
        assert_eq!(value["gpus"][2]["numa_node"], serde_json::Value::Null);
        assert_eq!(value["gpus"][1]["nvlink"], serde_json::json!([0]));
    }
}
