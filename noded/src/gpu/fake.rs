//! A fake GPU inventory read from a TOML file, one `[[gpu]]` table per GPU:
//!
//! ```toml
//! [[gpu]]
//! index = 0
//! uuid = "GPU-n1-0000"
//! model = "NVIDIA A100-SXM4-80GB"
//! memory_mib = 81920
//! nvlink = [1, 2, 3]   # indices of GPUs this one reaches over NVLink
//! pci_bus_id = "0000:07:00.0"   # optional
//! numa_node = 0                 # optional
//! ```
//!
//! The format is a public contract (test clusters are described with it), so unknown keys
//! are an error rather than silently ignored.

use super::{GpuInventory, InventoryError};
use serde::Deserialize;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use ysched_common::Gpu;

pub struct FakeInventory {
    path: PathBuf,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FakeFile {
    #[serde(default)]
    gpu: Vec<FakeGpu>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FakeGpu {
    index: u32,
    uuid: String,
    model: String,
    memory_mib: u64,
    #[serde(default)]
    nvlink: Vec<u32>,
    #[serde(default)]
    pci_bus_id: String,
    numa_node: Option<i32>,
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
        let mut gpus = Vec::with_capacity(file.gpu.len());
        for g in file.gpu {
            if let Some(bad) = g.nvlink.iter().find(|peer| !indices.contains(peer)) {
                return Err(invalid(format!(
                    "GPU {} lists NVLink peer {bad}, which is not a GPU in this file",
                    g.index
                )));
            }
            let mut nvlink = g.nvlink;
            nvlink.sort_unstable();
            nvlink.dedup();
            nvlink.retain(|&peer| peer != g.index);
            gpus.push(Gpu {
                index: g.index,
                uuid: g.uuid,
                model: g.model,
                memory_mib: g.memory_mib,
                pci_bus_id: g.pci_bus_id,
                numa_node: g.numa_node,
                nvlink,
                links: Vec::new(),
            });
        }
        gpus.sort_by_key(|g| g.index);
        Ok(gpus)
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

    #[test]
    fn unreadable_file_names_the_path() {
        let err = FakeInventory::new("/nonexistent/gpus.toml")
            .gpus()
            .unwrap_err()
            .to_string();
        assert!(err.contains("/nonexistent/gpus.toml"), "{err}");
    }
}
