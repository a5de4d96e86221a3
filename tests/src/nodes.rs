//! The nodes a test cluster runs: fake GPU inventories and mock-NVML machines.

use crate::mock_nvml::Machine;

/// One fake node: name and GPUs (model per GPU; NVLink given per GPU as peer indices).
#[derive(Clone)]
pub struct FakeNode {
    pub name: String,
    pub gpus: Vec<FakeGpu>,
}

/// One fake GPU: its model, memory and links to the node's other GPUs.
#[derive(Clone)]
pub struct FakeGpu {
    pub model: String,
    pub memory_mib: u64,
    pub nvlink: Vec<u32>,
    /// This GPU's row of `nvidia-smi topo -m` (PCIe relations); empty: not given.
    pub pcie: Vec<&'static str>,
}

impl FakeNode {
    /// `n` GPUs of one model, all NVLinked to each other (DGX-style).
    pub fn uniform(name: &str, n: u32, model: &str) -> FakeNode {
        FakeNode {
            name: name.into(),
            gpus: (0..n)
                .map(|i| FakeGpu {
                    model: model.into(),
                    memory_mib: 81920,
                    nvlink: (0..n).filter(|j| *j != i).collect(),
                    pcie: Vec::new(),
                })
                .collect(),
        }
    }

    /// GPUs in NVLink islands of `island` GPUs (PIX inside an island, SYS across), e.g.
    /// `islands("n1", 8, 4, ..)` is two 4-GPU islands; `island` 1 means no NVLink at all.
    pub fn islands(name: &str, n: u32, island: u32, model: &str) -> FakeNode {
        let same = |a: u32, b: u32| a / island == b / island;
        FakeNode {
            name: name.into(),
            gpus: (0..n)
                .map(|i| FakeGpu {
                    model: model.into(),
                    memory_mib: 81920,
                    nvlink: (0..n)
                        .filter(|j| *j != i && same(i, *j) && island > 1)
                        .collect(),
                    pcie: (0..n)
                        .map(|j| {
                            if i == j {
                                "X"
                            } else if same(i, j) || (island == 1 && i / 2 == j / 2) {
                                "PIX"
                            } else {
                                "SYS"
                            }
                        })
                        .collect(),
                })
                .collect(),
        }
    }

    pub fn inventory_toml(&self) -> String {
        self.inventory_toml_with(&[])
    }

    /// The inventory with extra lines in some GPUs' tables, e.g. `(3, r#"fault = "XID 79""#)`
    /// (the fake GPU faults the agent's health monitor reads, see `noded/src/gpu/fake_health.rs`).
    pub fn inventory_toml_with(&self, extra: &[(u32, &str)]) -> String {
        let mut s = String::new();
        for (i, g) in self.gpus.iter().enumerate() {
            s.push_str(&format!(
                "[[gpu]]\nindex = {i}\nuuid = \"GPU-{}-{i:04}\"\nmodel = \"{}\"\nmemory_mib = {}\nnvlink = {:?}\n",
                self.name, g.model, g.memory_mib, g.nvlink
            ));
            if !g.pcie.is_empty() {
                s.push_str(&format!("pcie = {:?}\n", g.pcie));
            }
            for (_, line) in extra.iter().filter(|(gpu, _)| *gpu as usize == i) {
                s.push_str(line);
                s.push('\n');
            }
            s.push('\n');
        }
        s
    }
}

/// A node whose agent finds its GPUs through NVML, as on a real GPU host: `noded
/// --nvml-library` loads the mock NVML library (`tests/mock-nvml`), which serves `machine`.
#[derive(Clone)]
pub struct NvmlNode {
    pub name: String,
    pub machine: Machine,
}

impl NvmlNode {
    pub fn new(name: &str, machine: Machine) -> NvmlNode {
        NvmlNode {
            name: name.into(),
            machine,
        }
    }
}
