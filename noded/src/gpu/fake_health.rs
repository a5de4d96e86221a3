//! The health monitor of a fake GPU inventory file: the faults the file says, per GPU.
//!
//! It reads the file of the `fake` module, in which two optional keys of a `[[gpu]]` table
//! fake its faults. The file is read again at each poll, so a test makes a GPU fail by
//! rewriting it (write a new file, then rename it over the old one):
//!
//! ```toml
//! fault = "XID 79: GPU has fallen off the bus"   # an event: reported until forgotten
//! failing = "pages pending retirement"          # a state: reported while the file says it
//! ```
//!
//! `fault` is an event, as an XID error is: once the file says it, the GPU is reported failing
//! until an administrator returns it (`yctl resume NODE --gpu N`, which makes the agent
//! forget it), even after the line is gone. A `fault` the file still says after the forget is
//! the same event, not a new one; a different text (or the line removed, then written again)
//! is a new one. `failing` is a state, as pages pending retirement are: reported as long as
//! the file says it, forget or not. Faults of GPUs the agent did not register (added to the
//! file since it started) are ignored.

use super::fake::{FakeFile, FakeInventory};
use super::{GpuFault, GpuHealth, InventoryError};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use ysched_common::Gpu;

/// The faults a fake inventory file gives its GPUs (`fault` and `failing`, see the module
/// docs), by index, as the file says them now.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FakeFaults {
    pub events: BTreeMap<u32, String>,
    pub states: BTreeMap<u32, String>,
}

impl FakeFaults {
    /// The faults of the file's text; `path` only names the file in errors.
    pub fn parse(path: &Path, text: &str) -> Result<FakeFaults, InventoryError> {
        // The whole file is checked, as at start: a broken rewrite is said, not half-read.
        FakeInventory::parse(path, text)?;
        let file: FakeFile = toml::from_str(text).map_err(|e| InventoryError::Invalid {
            path: path.to_owned(),
            message: e.message().trim().to_string(),
        })?;
        let mut faults = FakeFaults::default();
        for gpu in file.gpu {
            let said = |text: Option<String>| text.map(|t| t.trim().to_string());
            if let Some(fault) = said(gpu.fault) {
                faults.events.insert(gpu.index, fault);
            }
            if let Some(failing) = said(gpu.failing) {
                faults.states.insert(gpu.index, failing);
            }
        }
        Ok(faults)
    }
}

/// The health monitor of a fake inventory file: the file's `fault` (an event, kept until
/// forgotten) and `failing` (a state) keys, read again at each poll, for the GPUs registered at
/// start. A file that cannot be read or parsed costs nothing: the events already seen stay,
/// no state is reported, and the trouble is logged once until it changes.
pub struct FakeHealth {
    path: PathBuf,
    /// The registered GPUs' indices: faults of others are ignored.
    indices: BTreeSet<u32>,
    /// Events taken and not forgotten, by GPU.
    events: BTreeMap<u32, String>,
    /// The `fault` text last read for each GPU, taken or forgotten: the same text is the same
    /// event, so it is not taken again after a forget.
    seen: BTreeMap<u32, String>,
    /// The last trouble logged, so that a broken file is said once, not at every poll.
    trouble: Option<String>,
}

impl FakeHealth {
    pub fn new(path: impl Into<PathBuf>, gpus: &[Gpu]) -> Self {
        FakeHealth {
            path: path.into(),
            indices: gpus.iter().map(|g| g.index).collect(),
            events: BTreeMap::new(),
            seen: BTreeMap::new(),
            trouble: None,
        }
    }

    fn read(&self) -> Result<FakeFaults, InventoryError> {
        let text = std::fs::read_to_string(&self.path).map_err(|error| InventoryError::Read {
            path: self.path.clone(),
            error,
        })?;
        FakeFaults::parse(&self.path, &text)
    }
}

impl GpuHealth for FakeHealth {
    fn poll(&mut self) -> Vec<GpuFault> {
        let states = match self.read() {
            Ok(file) => {
                if self.trouble.take().is_some() {
                    tracing::warn!("GPU health: {} reads again", self.path.display());
                }
                let indices = &self.indices;
                let events = file.events.into_iter().filter(|(i, _)| indices.contains(i));
                let events: BTreeMap<u32, String> = events.collect();
                for (index, fault) in &events {
                    if self.seen.get(index) != Some(fault) {
                        self.events.insert(*index, fault.clone());
                    }
                }
                self.seen = events;
                file.states
            }
            Err(e) => {
                let trouble = e.to_string();
                if self.trouble.as_ref() != Some(&trouble) {
                    tracing::warn!("GPU health: {trouble}; keeping the faults known");
                    self.trouble = Some(trouble);
                }
                BTreeMap::new()
            }
        };
        let mut faults: BTreeMap<u32, String> = states
            .into_iter()
            .filter(|(i, _)| self.indices.contains(i))
            .collect();
        // An event outlasts a state: it stays until forgotten.
        faults.extend(self.events.iter().map(|(i, f)| (*i, f.clone())));
        faults
            .into_iter()
            .map(|(index, reason)| GpuFault { index, reason })
            .collect()
    }

    fn forget(&mut self, index: u32) {
        self.events.remove(&index);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::GpuInventory;

    /// A `[[gpu]]` table with the given extra lines.
    fn table(index: u32, extra: &str) -> String {
        format!(
            "[[gpu]]\nindex = {index}\nuuid = \"GPU-{index}\"\nmodel = \"NVIDIA A10\"\nmemory_mib = 24576\n{extra}\n"
        )
    }

    fn fault_file(dir: &Path, extra: &[(u32, &str)]) -> PathBuf {
        let text: String = (0..4)
            .map(|i| {
                let lines: Vec<&str> = extra
                    .iter()
                    .filter(|(g, _)| *g == i)
                    .map(|(_, l)| *l)
                    .collect();
                table(i, &lines.join("\n"))
            })
            .collect();
        let path = dir.join("gpus.toml");
        let new = dir.join("gpus.toml.new");
        std::fs::write(&new, text).unwrap();
        std::fs::rename(&new, &path).unwrap();
        path
    }

    fn polled(health: &mut FakeHealth) -> Vec<(u32, String)> {
        health
            .poll()
            .into_iter()
            .map(|f| (f.index, f.reason))
            .collect()
    }

    #[test]
    fn a_fault_is_an_event_kept_until_forgotten() {
        let dir = tempfile::tempdir().unwrap();
        let path = fault_file(dir.path(), &[]);
        let gpus = FakeInventory::new(&path).gpus().unwrap();
        let mut health = FakeHealth::new(&path, &gpus);
        assert!(polled(&mut health).is_empty());
        let xid = r#"fault = "XID 79: GPU has fallen off the bus""#;
        fault_file(dir.path(), &[(2, xid)]);
        let want = vec![(2, "XID 79: GPU has fallen off the bus".to_string())];
        assert_eq!(polled(&mut health), want);
        // Repaired in the file: still reported, until forgotten.
        fault_file(dir.path(), &[]);
        assert_eq!(polled(&mut health), want);
        health.forget(2);
        assert!(polled(&mut health).is_empty());
        // A forget while the file still says it: the same event, not taken again.
        fault_file(dir.path(), &[(2, xid)]);
        assert_eq!(polled(&mut health), want);
        health.forget(2);
        assert!(polled(&mut health).is_empty());
        // A different one is a new event.
        fault_file(
            dir.path(),
            &[(2, r#"fault = "XID 48: double-bit ECC error""#)],
        );
        assert_eq!(polled(&mut health)[0].1, "XID 48: double-bit ECC error");
    }

    #[test]
    fn failing_is_a_state_reported_while_the_file_says_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = fault_file(
            dir.path(),
            &[(1, r#"failing = "pages pending retirement""#)],
        );
        let gpus = FakeInventory::new(&path).gpus().unwrap();
        let mut health = FakeHealth::new(&path, &gpus);
        let want = vec![(1, "pages pending retirement".to_string())];
        assert_eq!(polled(&mut health), want);
        health.forget(1);
        assert_eq!(polled(&mut health), want, "a state outlasts a forget");
        fault_file(dir.path(), &[]);
        assert!(polled(&mut health).is_empty());
    }

    #[test]
    fn a_broken_rewrite_keeps_the_events_and_unregistered_gpus_are_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let path = fault_file(
            dir.path(),
            &[(0, r#"fault = "XID 94: contained ECC error""#)],
        );
        // Only GPUs 0 and 1 were registered.
        let gpus: Vec<Gpu> = FakeInventory::new(&path).gpus().unwrap()[..2].to_vec();
        let mut health = FakeHealth::new(&path, &gpus);
        assert_eq!(polled(&mut health).len(), 1);
        std::fs::write(&path, "[[gpu]]\nindex = \"zero\"\n").unwrap();
        assert_eq!(
            polled(&mut health),
            [(0, "XID 94: contained ECC error".to_string())]
        );
        fault_file(
            dir.path(),
            &[(3, r#"fault = "XID 79""#), (1, r#"failing = "lost""#)],
        );
        assert_eq!(
            polled(&mut health),
            [
                (0, "XID 94: contained ECC error".to_string()),
                (1, "lost".to_string())
            ]
        );
    }
}
