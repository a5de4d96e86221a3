//! A fake GPU inventory read from a TOML file, one `[[gpu]]` table per GPU:
//!
//! ```toml
//! [[gpu]]
//! index = 0
//! uuid = "GPU-n1-0000"
//! model = "NVIDIA A100-SXM4-80GB"
//! memory_mib = 81920
//! nvlink = [1, 1, 2, 3]   # optional: GPUs this one reaches over NVLink, once per link
//! pci_bus_id = "0000:07:00.0"   # optional
//! numa_node = 0                 # optional
//! pcie = ["X", "PIX", "SYS", "SYS"]   # optional: this GPU's row of `nvidia-smi topo -m`
//! ```
//!
//! `nvlink` names a peer as often as there are links to it (`[1, 1]`: two links, shown as
//! `NV2`). `pcie` has one entry per GPU of the file in index order, `X` for the GPU itself,
//! else PIX, PXB, PHB, NODE or SYS. A pair takes its PCIe relation from whichever of the two
//! rows gives it (they must agree when both do); without a row it is NODE when both GPUs
//! have the same `numa_node`, else SYS.
//!
//! Two more keys fake GPU faults for the health monitor (see the `fake_health` module).
//!
//! The format is a public contract (test clusters are described with it), so unknown keys
//! and words are an error rather than silently ignored.

use super::topology::{link_gpus, NvlinkCounts};
use super::{GpuInventory, InventoryError};
use serde::Deserialize;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use ysched_common::{Gpu, PcieRelation};

pub struct FakeInventory {
    path: PathBuf,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FakeFile {
    #[serde(default)]
    pub(super) gpu: Vec<FakeGpu>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FakeGpu {
    pub(super) index: u32,
    uuid: String,
    model: String,
    memory_mib: u64,
    #[serde(default)]
    nvlink: Vec<u32>,
    #[serde(default)]
    pci_bus_id: String,
    numa_node: Option<i32>,
    pcie: Option<Vec<String>>,
    /// A fault event (see the `fake_health` module).
    pub(super) fault: Option<String>,
    /// A fault state (see the `fake_health` module).
    pub(super) failing: Option<String>,
}

impl FakeInventory {
    pub fn new(path: impl Into<PathBuf>) -> Self {
        FakeInventory { path: path.into() }
    }

    /// Parses the file's text; `path` only names the file in errors.
    pub fn parse(path: &Path, text: &str) -> Result<Vec<Gpu>, InventoryError> {
        let invalid = |message: String| InventoryError::Invalid {
            path: path.to_owned(),
            message,
        };
        let file: FakeFile = toml::from_str(text).map_err(|e| {
            // One line, with where: toml's own rendering spans several lines.
            let message = e.message().trim().to_string();
            match e.span() {
                Some(span) => {
                    let line = text[..span.start.min(text.len())].lines().count().max(1);
                    invalid(format!("line {line}: {message}"))
                }
                None => invalid(message),
            }
        })?;

        let indices: BTreeSet<u32> = file.gpu.iter().map(|g| g.index).collect();
        if indices.len() != file.gpu.len() {
            return Err(invalid("two GPUs have the same index".into()));
        }
        let mut fake = file.gpu;
        fake.sort_by_key(|g| g.index);
        let order: Vec<u32> = fake.iter().map(|g| g.index).collect();

        let mut nvlinks = NvlinkCounts::new();
        let mut pcie: BTreeMap<(u32, u32), PcieRelation> = BTreeMap::new();
        for g in &fake {
            if let Some(bad) = g.nvlink.iter().find(|peer| !indices.contains(peer)) {
                return Err(invalid(format!(
                    "GPU {} lists NVLink peer {bad}, which is not a GPU in this file",
                    g.index
                )));
            }
            let row = nvlinks.entry(g.index).or_default();
            for &peer in g.nvlink.iter().filter(|&&peer| peer != g.index) {
                *row.entry(peer).or_default() += 1;
            }
            if let Some(words) = &g.pcie {
                for (peer, relation) in pcie_row(g.index, words, &order).map_err(invalid)? {
                    let pair = (g.index.min(peer), g.index.max(peer));
                    match pcie.insert(pair, relation) {
                        Some(other) if other != relation => {
                            return Err(invalid(format!(
                                "GPU {} has {} to GPU {peer}, but GPU {peer} has {} to GPU {}",
                                g.index,
                                relation.as_str(),
                                other.as_str(),
                                g.index
                            )))
                        }
                        _ => {}
                    }
                }
            }
        }

        let mut gpus: Vec<Gpu> = fake
            .into_iter()
            .map(|g| Gpu {
                index: g.index,
                uuid: g.uuid,
                model: g.model,
                memory_mib: g.memory_mib,
                pci_bus_id: g.pci_bus_id,
                numa_node: g.numa_node,
                nvlink: Vec::new(),
                links: Vec::new(),
            })
            .collect();
        link_gpus(&mut gpus, &nvlinks, |gpu, peer| {
            let pair = (gpu.index.min(peer.index), gpu.index.max(peer.index));
            pcie.get(&pair)
                .copied()
                .unwrap_or_else(|| relation_by_numa(gpu.numa_node, peer.numa_node))
        });
        Ok(gpus)
    }
}

/// The (peer, relation) pairs of GPU `index`'s `pcie` row; `order` lists the file's GPU
/// indices in order, one per entry. Errors name the GPU; the caller adds the file.
fn pcie_row(
    index: u32,
    words: &[String],
    order: &[u32],
) -> Result<Vec<(u32, PcieRelation)>, String> {
    if words.len() != order.len() {
        return Err(format!(
            "GPU {index}: pcie has {} entries, but the file has {} GPUs",
            words.len(),
            order.len()
        ));
    }
    let mut row = Vec::with_capacity(words.len());
    for (&peer, word) in order.iter().zip(words) {
        let is_self = word.trim().eq_ignore_ascii_case("X");
        match (peer == index, is_self) {
            (true, true) => {}
            (true, false) => {
                return Err(format!(
                    "GPU {index}: its own pcie entry is {word:?}; write \"X\""
                ))
            }
            (false, true) => {
                return Err(format!(
                    "GPU {index}: pcie entry for GPU {peer} is \"X\", meant for itself"
                ))
            }
            (false, false) => match PcieRelation::parse(word) {
                Some(relation) => row.push((peer, relation)),
                None => {
                    let hint = if word.trim().to_ascii_uppercase().starts_with("NV") {
                        "; NVLinks go in nvlink, this row is the PCIe path"
                    } else {
                        ""
                    };
                    return Err(format!(
                        "GPU {index}: unknown pcie relation {word:?} for GPU {peer} \
                         (expected X, PIX, PXB, PHB, NODE or SYS{hint})"
                    ));
                }
            },
        }
    }
    Ok(row)
}

/// The PCIe relation a file without `pcie` rows implies: GPUs known to share a NUMA node are
/// behind that node's host bridges (NODE); anything else may cross sockets (SYS).
fn relation_by_numa(a: Option<i32>, b: Option<i32>) -> PcieRelation {
    match (a, b) {
        (Some(a), Some(b)) if a == b => PcieRelation::Node,
        _ => PcieRelation::Sys,
    }
}

impl GpuInventory for FakeInventory {
    fn gpus(&self) -> Result<Vec<Gpu>, InventoryError> {
        let text = std::fs::read_to_string(&self.path).map_err(|error| InventoryError::Read {
            path: self.path.clone(),
            error,
        })?;
        Self::parse(&self.path, &text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Vec<Gpu>, InventoryError> {
        FakeInventory::parse(Path::new("gpus.toml"), text)
    }

    #[test]
    fn parses_a_good_file() {
        let gpus = parse(
            r#"
            [[gpu]]
            index = 1
            uuid = "GPU-n1-0001"
            model = "NVIDIA A100-SXM4-80GB"
            memory_mib = 81920
            nvlink = [0]

            [[gpu]]
            index = 0
            uuid = "GPU-n1-0000"
            model = "NVIDIA A100-SXM4-80GB"
            memory_mib = 81920
            nvlink = [1, 1]
            pci_bus_id = "0000:07:00.0"
            numa_node = 1
            "#,
        )
        .unwrap();
        assert_eq!(gpus.len(), 2);
        assert_eq!(gpus[0].index, 0);
        assert_eq!(gpus[0].nvlink, vec![1]);
        assert_eq!(gpus[0].numa_node, Some(1));
        assert_eq!(gpus[0].pci_bus_id, "0000:07:00.0");
        assert_eq!(gpus[1].uuid, "GPU-n1-0001");
        assert_eq!(gpus[1].numa_node, None);
        assert_eq!(gpus[1].memory_mib, 81920);
    }

    #[test]
    fn an_empty_file_has_no_gpus() {
        assert!(parse("").unwrap().is_empty());
    }

    #[test]
    fn unknown_key_is_an_error_naming_file_and_key() {
        let err = parse(
            "[[gpu]]\nindex = 0\nuuid = \"u\"\nmodel = \"m\"\nmemory_mib = 1\nmemory_gb = 1\n",
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("gpus.toml"), "{err}");
        assert!(err.contains("memory_gb"), "{err}");
    }

    #[test]
    fn missing_field_is_an_error() {
        let err = parse("[[gpu]]\nindex = 0\nuuid = \"u\"\nmodel = \"m\"\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("gpus.toml"), "{err}");
        assert!(err.contains("memory_mib"), "{err}");
    }

    #[test]
    fn bad_peers_and_duplicate_indices_are_errors() {
        let gpu = |i: u32, peers: &str| {
            format!("[[gpu]]\nindex = {i}\nuuid = \"u{i}\"\nmodel = \"m\"\nmemory_mib = 1\nnvlink = [{peers}]\n")
        };
        let err = parse(&gpu(0, "5")).unwrap_err().to_string();
        assert!(err.contains("peer 5"), "{err}");
        let err = parse(&(gpu(0, "") + &gpu(0, ""))).unwrap_err().to_string();
        assert!(err.contains("same index"), "{err}");
    }

    /// A `[[gpu]]` table with the given extra lines.
    fn table(index: u32, extra: &str) -> String {
        format!(
            "[[gpu]]\nindex = {index}\nuuid = \"GPU-{index}\"\nmodel = \"NVIDIA A10\"\nmemory_mib = 24576\n{extra}\n"
        )
    }

    fn relations(gpu: &Gpu) -> Vec<&'static str> {
        gpu.links.iter().map(|l| l.pcie.as_str()).collect()
    }

    #[test]
    fn repeated_nvlink_peers_count_links() {
        let text = table(0, "nvlink = [1, 1, 2, 0]") + &table(1, "nvlink = [0, 0]") + &table(2, "");
        let gpus = parse(&text).unwrap();
        assert_eq!(gpus[0].nvlink, [1, 2]);
        let counts: Vec<(u32, u32)> = gpus[0].links.iter().map(|l| (l.peer, l.nvlinks)).collect();
        assert_eq!(counts, [(1, 2), (2, 1)]);
        assert_eq!(gpus[1].links[0].nvlinks, 2);
        // Each GPU's list is its own view: GPU 2 lists no peer, so it shows none.
        assert!(gpus[2].nvlink.is_empty());
        assert!(gpus[2].links.iter().all(|l| l.nvlinks == 0));
    }

    #[test]
    fn pcie_rows_give_the_relations() {
        let text = table(0, r#"pcie = ["X", "PIX", "SYS"]"#)
            + &table(1, r#"pcie = ["pix", "x", "SYS"]"#)
            + &table(2, r#"pcie = ["SYS", "SYS", "X"]"#);
        let gpus = parse(&text).unwrap();
        assert_eq!(relations(&gpus[0]), ["PIX", "SYS"]);
        assert_eq!(relations(&gpus[1]), ["PIX", "SYS"]);
        assert_eq!(relations(&gpus[2]), ["SYS", "SYS"]);
        assert_eq!(gpus[2].links[1].peer, 1);
    }

    #[test]
    fn one_row_describes_both_directions_and_numa_fills_the_rest() {
        // GPUs 0 and 1 on NUMA node 0, GPU 2 on node 1; only GPU 0 has a row.
        let text = table(0, "numa_node = 0\npcie = [\"X\", \"PXB\", \"PHB\"]")
            + &table(1, "numa_node = 0")
            + &table(2, "numa_node = 1");
        let gpus = parse(&text).unwrap();
        assert_eq!(relations(&gpus[0]), ["PXB", "PHB"]);
        assert_eq!(relations(&gpus[1]), ["PXB", "SYS"]);
        assert_eq!(relations(&gpus[2]), ["PHB", "SYS"]);
    }

    #[test]
    fn without_rows_same_numa_is_node_else_sys() {
        let text = table(0, "numa_node = 0")
            + &table(1, "numa_node = 0")
            + &table(2, "numa_node = 1")
            + &table(3, "");
        let gpus = parse(&text).unwrap();
        assert_eq!(relations(&gpus[0]), ["NODE", "SYS", "SYS"]);
        assert_eq!(relations(&gpus[3]), ["SYS", "SYS", "SYS"]);
        assert!(gpus.iter().all(|g| g.links.len() == 3));
    }

    #[test]
    fn bad_pcie_rows_are_errors_naming_file_and_gpu() {
        let two = |row0: &str| table(0, &format!("pcie = [{row0}]")) + &table(1, "");
        let cases = [
            (
                r#""X""#,
                "GPU 0: pcie has 1 entries, but the file has 2 GPUs",
            ),
            (
                r#""X", "PCI""#,
                r#"GPU 0: unknown pcie relation "PCI" for GPU 1"#,
            ),
            (r#""X", "NV12""#, "NVLinks go in nvlink"),
            (r#""PIX", "PIX""#, r#"GPU 0: its own pcie entry is "PIX""#),
            (
                r#""X", "X""#,
                r#"GPU 0: pcie entry for GPU 1 is "X", meant for itself"#,
            ),
        ];
        for (row0, expected) in cases {
            let err = parse(&two(row0)).unwrap_err().to_string();
            assert!(
                err.contains("gpus.toml") && err.contains(expected),
                "{row0}: {err}"
            );
        }
        let text = table(0, r#"pcie = ["X", "PIX"]"#) + &table(1, r#"pcie = ["SYS", "X"]"#);
        let err = parse(&text).unwrap_err().to_string();
        assert!(
            err.contains("GPU 1 has SYS to GPU 0, but GPU 0 has PIX to GPU 1"),
            "{err}"
        );
    }

    #[test]
    fn unreadable_file_names_the_path() {
        let err = FakeInventory::new("/nonexistent/gpus.toml")
            .gpus()
            .unwrap_err()
            .to_string();
        assert!(err.contains("/nonexistent/gpus.toml"), "{err}");
    }
}
