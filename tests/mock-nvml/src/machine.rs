//! The machine file the mock serves (its format is described in the crate's documentation),
//! with builders of the common shapes for the tests that write it.

use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The environment variable naming the machine file.
pub const MACHINE_ENV: &str = "YSCHED_MOCK_NVML";

/// The file name of the built mock library in cargo's target directory.
pub const LIBRARY_FILE: &str = "libysched_mock_nvml.so";

/// NVML's `nvmlReturn_t` values the mock knows, by the name after `NVML_ERROR_` (`SUCCESS` for
/// 0), with the text `nvmlErrorString` gives for each.
pub const RETURN_CODES: &[(&str, u32, &str)] = &[
    ("SUCCESS", 0, "Success"),
    ("UNINITIALIZED", 1, "Uninitialized"),
    ("INVALID_ARGUMENT", 2, "Invalid Argument"),
    ("NOT_SUPPORTED", 3, "Not Supported"),
    ("NO_PERMISSION", 4, "Insufficient Permissions"),
    ("ALREADY_INITIALIZED", 5, "Already Initialized"),
    ("NOT_FOUND", 6, "Not Found"),
    ("INSUFFICIENT_SIZE", 7, "Insufficient Size"),
    ("INSUFFICIENT_POWER", 8, "Insufficient External Power"),
    ("DRIVER_NOT_LOADED", 9, "Driver Not Loaded"),
    ("TIMEOUT", 10, "Timeout"),
    ("IRQ_ISSUE", 11, "Interrupt Request Issue"),
    ("LIBRARY_NOT_FOUND", 12, "NVML Shared Library Not Found"),
    ("FUNCTION_NOT_FOUND", 13, "Function Not Found"),
    ("CORRUPTED_INFOROM", 14, "Corrupted infoROM"),
    ("GPU_IS_LOST", 15, "GPU is lost"),
    ("RESET_REQUIRED", 16, "GPU requires restart"),
    (
        "OPERATING_SYSTEM",
        17,
        "The operating system has blocked the request.",
    ),
    (
        "LIB_RM_VERSION_MISMATCH",
        18,
        "RM has detected an NVML/RM version mismatch.",
    ),
    ("IN_USE", 19, "In use by another client"),
    ("MEMORY", 20, "Insufficient Memory"),
    ("NO_DATA", 21, "No data"),
    ("ARGUMENT_VERSION_MISMATCH", 25, "Argument version mismatch"),
    ("UNKNOWN", 999, "Unknown Error"),
];

/// The entry points the library exports: the only names a `[[fault]]` may give.
pub const CALLS: &[&str] = &[
    "nvmlInit_v2",
    "nvmlInitWithFlags",
    "nvmlShutdown",
    "nvmlErrorString",
    "nvmlSystemGetDriverVersion",
    "nvmlDeviceGetCount_v2",
    "nvmlDeviceGetHandleByIndex_v2",
    "nvmlDeviceGetHandleByUUID",
    "nvmlDeviceGetIndex",
    "nvmlDeviceGetName",
    "nvmlDeviceGetUUID",
    "nvmlDeviceGetMemoryInfo_v2",
    "nvmlDeviceGetPciInfo_v3",
    "nvmlDeviceGetNumaNodeId",
    "nvmlDeviceGetMigMode",
    "nvmlDeviceGetNvLinkState",
    "nvmlDeviceGetNvLinkRemotePciInfo_v2",
    "nvmlDeviceGetNvLinkRemoteDeviceType",
    "nvmlDeviceGetTopologyCommonAncestor",
    "nvmlDeviceGetTotalEccErrors",
    "nvmlDeviceGetRetiredPagesPendingStatus",
    "nvmlDeviceGetRemappedRows",
    "nvmlDeviceGetSupportedEventTypes",
    "nvmlEventSetCreate",
    "nvmlDeviceRegisterEvents",
    "nvmlEventSetWait_v2",
    "nvmlEventSetFree",
];

/// NVML's `nvmlGpuTopologyLevel_t` values, by the name after `NVML_TOPOLOGY_`.
pub const LEVELS: &[(&str, u32)] = &[
    ("INTERNAL", 0),
    ("SINGLE", 10),
    ("MULTIPLE", 20),
    ("HOSTBRIDGE", 30),
    ("NODE", 40),
    ("SYSTEM", 50),
];

/// A whole machine: its GPUs in NVML's enumeration order (a GPU's position is its NVML index),
/// the bus ids of its NVSwitches, PCIe relations that the rule does not give, and faults.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Machine {
    #[serde(default = "default_driver_version")]
    pub driver_version: String,
    /// PCI bus ids an NVLink may lead to that are NVSwitches.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nvswitches: Vec<String>,
    #[serde(default, rename = "gpu", skip_serializing_if = "Vec::is_empty")]
    pub gpus: Vec<MockGpu>,
    #[serde(default, rename = "pair", skip_serializing_if = "Vec::is_empty")]
    pub pairs: Vec<Pair>,
    #[serde(default, rename = "fault", skip_serializing_if = "Vec::is_empty")]
    pub faults: Vec<Fault>,
}

fn default_driver_version() -> String {
    "550.54.15".into()
}

impl Default for Machine {
    fn default() -> Self {
        Machine {
            driver_version: default_driver_version(),
            nvswitches: Vec::new(),
            gpus: Vec::new(),
            pairs: Vec::new(),
            faults: Vec::new(),
        }
    }
}

/// One GPU. Optional attributes that are absent answer `NOT_SUPPORTED`, as on a GPU without
/// the feature (a consumer GPU has no ECC, a PCIe card no NVLink).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MockGpu {
    pub uuid: String,
    /// What `nvmlDeviceGetName` answers, e.g. `NVIDIA A100-SXM4-80GB`.
    pub name: String,
    pub memory_mib: u64,
    /// As NVML writes it, e.g. `00000000:07:00.0`.
    pub pci_bus_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub numa_node: Option<u32>,
    /// GPUs with the same value sit behind one PCIe switch (`SINGLE`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pcie_switch: Option<u32>,
    /// MIG mode, current and pending alike.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mig: Option<bool>,
    /// One entry per NVLink, in link order: the bus id of the device at its far end (a GPU's
    /// or one of `nvswitches`), or `""` for a link that is down. Empty: no NVLink.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nvlink: Vec<String>,
    /// Volatile count of uncorrectable ECC errors.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ecc_uncorrected: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retired_pages_pending: Option<bool>,
    /// XID errors that happened, oldest first: an event set delivers each one listed after it
    /// registered the GPU, once.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub xid: Vec<u64>,
    /// Every call about this GPU answers `GPU_IS_LOST`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub lost: bool,
    /// Row remapping (A100 and later).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remapped_rows: Option<RemappedRows>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RemappedRows {
    pub correctable: u32,
    pub uncorrectable: u32,
    pub pending: bool,
    pub failed: bool,
}

/// The PCIe common ancestor of two GPUs (by position), overriding the rule.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Pair {
    pub gpus: [u32; 2],
    /// One of [`LEVELS`].
    pub level: String,
}

/// Makes `call` answer `error` instead, for every GPU or only for the GPU at position `gpu`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Fault {
    /// One of [`CALLS`].
    pub call: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<u32>,
    /// One of [`RETURN_CODES`], by name (`GPU_IS_LOST`; the `NVML_ERROR_` prefix may be given).
    pub error: String,
}

/// The code of an NVML return code's name.
pub fn return_code(name: &str) -> Option<u32> {
    let name = name.strip_prefix("NVML_ERROR_").unwrap_or(name);
    RETURN_CODES
        .iter()
        .find(|(known, _, _)| *known == name)
        .map(|&(_, code, _)| code)
}

fn level_code(name: &str) -> Option<u32> {
    LEVELS
        .iter()
        .find(|(known, _)| *known == name)
        .map(|&(_, code)| code)
}

/// A PCI bus id as (domain, bus, device, function), whichever form it is written in
/// (`00000000:07:00.0`, `0000:07:00.0`, `07:00.0`, any case).
pub fn parse_bus_id(text: &str) -> Option<(u32, u32, u32, u32)> {
    let (rest, function) = text.trim().rsplit_once('.')?;
    let mut parts = rest.rsplitn(3, ':');
    let device = u32::from_str_radix(parts.next()?, 16).ok()?;
    let bus = u32::from_str_radix(parts.next()?, 16).ok()?;
    let domain = match parts.next() {
        Some(domain) => u32::from_str_radix(domain, 16).ok()?,
        None => 0,
    };
    Some((domain, bus, device, u32::from_str_radix(function, 16).ok()?))
}

/// Whether two bus ids name the same device.
pub fn same_bus_id(a: &str, b: &str) -> bool {
    match (parse_bus_id(a), parse_bus_id(b)) {
        (Some(a), Some(b)) => a == b,
        _ => a.eq_ignore_ascii_case(b),
    }
}

impl Machine {
    /// Parses and checks a machine file; the error is one line.
    pub fn parse(text: &str) -> Result<Machine, String> {
        let machine: Machine = toml::from_str(text).map_err(|e| e.message().trim().to_string())?;
        machine.check()?;
        Ok(machine)
    }

    fn check(&self) -> Result<(), String> {
        let n = self.gpus.len() as u32;
        let mut uuids = BTreeSet::new();
        for gpu in &self.gpus {
            if gpu.uuid.is_empty() || !uuids.insert(&gpu.uuid) {
                return Err(format!("GPU uuid {:?} is empty or repeated", gpu.uuid));
            }
        }
        for pair in &self.pairs {
            let [a, b] = pair.gpus;
            if a == b || a >= n || b >= n {
                return Err(format!("pair {:?}: not two GPUs of the file", pair.gpus));
            }
            if level_code(&pair.level).is_none() {
                return Err(format!(
                    "pair {:?}: unknown level {:?} (expected INTERNAL, SINGLE, MULTIPLE, \
                     HOSTBRIDGE, NODE or SYSTEM)",
                    pair.gpus, pair.level
                ));
            }
        }
        for fault in &self.faults {
            if !CALLS.contains(&fault.call.as_str()) {
                return Err(format!("fault: unknown call {:?}", fault.call));
            }
            if return_code(&fault.error).is_none() {
                return Err(format!("fault: unknown error {:?}", fault.error));
            }
            if fault.gpu.is_some_and(|gpu| gpu >= n) {
                return Err(format!("fault: no GPU at position {:?}", fault.gpu));
            }
        }
        Ok(())
    }

    pub fn to_toml(&self) -> String {
        toml::to_string(self).expect("a machine is always valid TOML")
    }

    /// Writes the file whole, by rename, so that a library reading it concurrently sees the
    /// old machine or the new one.
    pub fn write(&self, path: &Path) -> std::io::Result<()> {
        let mut temp = path.as_os_str().to_owned();
        temp.push(".new");
        std::fs::write(&temp, self.to_toml())?;
        std::fs::rename(&temp, path)
    }

    /// The error `call` answers for the GPU at `gpu` (`None`: a call about no GPU), if a fault
    /// says so. A fault naming a GPU matches only calls about that GPU.
    pub fn fault(&self, call: &str, gpu: Option<u32>) -> Option<u32> {
        self.faults
            .iter()
            .find(|f| f.call == call && (f.gpu.is_none() || f.gpu == gpu))
            .and_then(|f| return_code(&f.error))
    }

    /// The PCIe common ancestor of the GPUs at positions `a` and `b`, as an
    /// `nvmlGpuTopologyLevel_t`: a `[[pair]]` if one names them, else `SINGLE` behind one PCIe
    /// switch, `NODE` on one NUMA node, `SYSTEM` otherwise.
    pub fn level(&self, a: u32, b: u32) -> u32 {
        if let Some(pair) = self
            .pairs
            .iter()
            .find(|p| p.gpus == [a, b] || p.gpus == [b, a])
        {
            return level_code(&pair.level).unwrap_or(50);
        }
        let (ga, gb) = (&self.gpus[a as usize], &self.gpus[b as usize]);
        if ga.pcie_switch.is_some() && ga.pcie_switch == gb.pcie_switch {
            10
        } else if ga.numa_node.is_some() && ga.numa_node == gb.numa_node {
            40
        } else {
            50
        }
    }

    /// Adds a fault; see [`Fault`].
    pub fn with_fault(mut self, call: &str, gpu: Option<u32>, error: &str) -> Machine {
        self.faults.push(Fault {
            call: call.into(),
            gpu,
            error: error.into(),
        });
        self
    }

    /// `gpus` GPUs, each with `links` NVLinks spread evenly over `switches` NVSwitches (a DGX
    /// A100 is 8 GPUs, 6 switches, 12 links), the first half on NUMA node 0 and the rest on 1,
    /// GPUs in PCIe pairs (0-1, 2-3, …) under two levels of switches (`MULTIPLE`).
    pub fn nvswitch(model: &str, gpus: u32, switches: u32, links: u32) -> Machine {
        let nvswitches: Vec<String> = (0..switches)
            .map(|s| format!("00000000:{:02X}:00.0", 0xC0 + s))
            .collect();
        Machine {
            gpus: (0..gpus)
                .map(|i| MockGpu {
                    numa_node: Some(i / gpus.div_ceil(2).max(1)),
                    nvlink: (0..links)
                        .map(|l| nvswitches[(l * switches / links) as usize].clone())
                        .collect(),
                    ..MockGpu::new(i, model)
                })
                .collect(),
            pairs: (0..gpus / 2)
                .map(|p| Pair {
                    gpus: [2 * p, 2 * p + 1],
                    level: "MULTIPLE".into(),
                })
                .collect(),
            nvswitches,
            ..Machine::default()
        }
    }

    /// Islands of `island` GPUs, each GPU with `links` NVLinks to every other GPU of its island
    /// and none beyond; an island per NUMA node, GPUs in PCIe-switch pairs.
    pub fn islands(model: &str, gpus: u32, island: u32, links: u32) -> Machine {
        Machine {
            gpus: (0..gpus)
                .map(|i| MockGpu {
                    numa_node: Some(i / island),
                    pcie_switch: Some(i / 2),
                    nvlink: (0..gpus)
                        .filter(|&j| j != i && j / island == i / island)
                        .flat_map(|j| std::iter::repeat_n(bus_id(j), links as usize))
                        .collect(),
                    ..MockGpu::new(i, model)
                })
                .collect(),
            ..Machine::default()
        }
    }

    /// PCIe cards without NVLink, in PCIe-switch pairs, spread evenly over `numa_nodes`.
    pub fn pcie_only(model: &str, gpus: u32, numa_nodes: u32) -> Machine {
        let per_node = gpus.div_ceil(numa_nodes.max(1)).max(1);
        Machine {
            gpus: (0..gpus)
                .map(|i| MockGpu {
                    numa_node: Some(i / per_node),
                    pcie_switch: Some(i / 2),
                    ..MockGpu::new(i, model)
                })
                .collect(),
            ..Machine::default()
        }
    }
}

/// The bus id [`MockGpu::new`] gives the GPU at `position`, in NVML's long upper-case form:
/// `00000000:07:00.0`, `00000000:17:00.0`, …
pub fn bus_id(position: u32) -> String {
    format!("00000000:{:02X}:00.0", 0x07 + position * 0x10)
}

/// The UUID [`MockGpu::new`] gives the GPU at `position`.
pub fn uuid(position: u32) -> String {
    format!("GPU-{position:08x}-1d2c-4b3a-8f9e-{position:012x}")
}

impl MockGpu {
    /// A data-centre GPU at `position` with 80 GiB, ECC and nothing failing: no NVLink, MIG
    /// disabled, no NUMA node or PCIe switch (set those as needed).
    pub fn new(position: u32, model: &str) -> MockGpu {
        MockGpu {
            uuid: uuid(position),
            name: model.into(),
            memory_mib: 81920,
            pci_bus_id: bus_id(position),
            numa_node: None,
            pcie_switch: None,
            mig: Some(false),
            nvlink: Vec::new(),
            ecc_uncorrected: Some(0),
            retired_pages_pending: Some(false),
            xid: Vec::new(),
            lost: false,
            remapped_rows: Some(RemappedRows::default()),
        }
    }
}

/// Where cargo put the built mock library: beside the running executable (`target/<profile>/`
/// for binaries, `target/<profile>/deps/` for tests, where cargo builds it as a dependency)
/// or one level up.
pub fn library() -> PathBuf {
    built_library(LIBRARY_FILE, "ysched-mock-nvml")
}

/// A library `file` of the workspace (package `package`) built beside the running test or
/// bench binary; panics saying how to build it when it is not there. Shared with the tests'
/// other preloaded library (the power-loss shim).
pub fn built_library(file: &str, package: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("the test's own path");
    let dir = exe.parent().expect("the test's directory");
    let candidates = [
        dir.join(file),
        dir.join("deps").join(file),
        dir.parent().map_or_else(PathBuf::new, |up| up.join(file)),
    ];
    candidates
        .iter()
        .find(|path| path.is_file())
        .cloned()
        .unwrap_or_else(|| {
            panic!(
                "{file} is not beside {}: build it with `cargo build -p {package}` \
                 (scripts/test.sh builds the whole workspace)",
                exe.display()
            )
        })
}

/// The machine file a copy of the library at `library` reads when `YSCHED_MOCK_NVML` is unset:
/// `<library>.toml`.
pub fn sidecar(library: &Path) -> PathBuf {
    let mut path = library.as_os_str().to_owned();
    path.push(".toml");
    PathBuf::from(path)
}

/// Copies the built library into `dir` as `libnvidia-ml.so.1`, with `machine` as its sidecar
/// file, and returns the copy's path. Each copy loaded in a process is a library of its own,
/// with its own state, so tests in one process can each have a machine.
pub fn install(dir: &Path, machine: &Machine) -> PathBuf {
    let copy = dir.join("libnvidia-ml.so.1");
    std::fs::copy(library(), &copy).expect("copy the mock NVML library");
    machine
        .write(&sidecar(&copy))
        .expect("write the mock machine file");
    copy
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builders_round_trip_through_toml() {
        let mut dgx = Machine::nvswitch("NVIDIA A100-SXM4-80GB", 8, 6, 12).with_fault(
            "nvmlDeviceGetUUID",
            Some(3),
            "GPU_IS_LOST",
        );
        dgx.gpus[1].remapped_rows = Some(RemappedRows {
            pending: true,
            ..Default::default()
        });
        dgx.gpus[2].xid = vec![79];
        dgx.gpus[2].lost = true;
        for machine in [
            dgx,
            Machine::islands("NVIDIA H100 80GB HBM3", 8, 4, 4),
            Machine::pcie_only("NVIDIA L40S", 4, 2),
        ] {
            let text = machine.to_toml();
            assert_eq!(Machine::parse(&text), Ok(machine), "{text}");
        }
    }

    #[test]
    fn shapes() {
        let dgx = Machine::nvswitch("A100", 8, 6, 12);
        assert_eq!(dgx.gpus[0].nvlink.len(), 12);
        assert_eq!(dgx.gpus[0].nvlink[0], dgx.nvswitches[0]);
        assert_eq!(dgx.gpus[0].nvlink[11], dgx.nvswitches[5]);
        assert_eq!(dgx.level(0, 1), 20);
        assert_eq!(dgx.level(1, 2), 40);
        assert_eq!(dgx.level(3, 4), 50);
        let islands = Machine::islands("H100", 8, 4, 2);
        assert_eq!(islands.gpus[5].nvlink.len(), 6);
        assert!(islands.gpus[5].nvlink.contains(&bus_id(4)));
        assert!(!islands.gpus[5].nvlink.contains(&bus_id(3)));
        assert_eq!(islands.level(4, 5), 10);
        assert_eq!(islands.level(4, 6), 40);
        assert_eq!(islands.level(3, 4), 50);
    }

    #[test]
    fn bad_files_say_what_is_wrong() {
        let gpu =
            "[[gpu]]\nuuid = \"GPU-1\"\nname = \"A\"\nmemory_mib = 1\npci_bus_id = \"07:00.0\"\n";
        let cases = [
            (
                format!("{gpu}[[fault]]\ncall = \"nvmlDeviceGetUuid\"\nerror = \"UNKNOWN\"\n"),
                "unknown call",
            ),
            (
                format!("{gpu}[[fault]]\ncall = \"nvmlDeviceGetUUID\"\nerror = \"LOST\"\n"),
                "unknown error",
            ),
            (
                format!(
                    "{gpu}[[fault]]\ncall = \"nvmlDeviceGetUUID\"\ngpu = 1\nerror = \"UNKNOWN\"\n"
                ),
                "no GPU at position",
            ),
            (format!("{gpu}{gpu}"), "repeated"),
            (format!("{gpu}colour = 1\n"), "unknown field"),
            (
                format!("{gpu}[[pair]]\ngpus = [0, 0]\nlevel = \"SINGLE\"\n"),
                "not two GPUs",
            ),
        ];
        for (text, expected) in cases {
            let err = Machine::parse(&text).unwrap_err();
            assert!(err.contains(expected), "{err} (expected {expected})");
            assert!(!err.contains('\n'), "{err}");
        }
    }

    #[test]
    fn faults_match_their_gpu_or_every_gpu() {
        let machine = Machine::pcie_only("L4", 2, 1)
            .with_fault("nvmlDeviceGetName", Some(1), "NVML_ERROR_GPU_IS_LOST")
            .with_fault("nvmlDeviceGetCount_v2", None, "UNKNOWN");
        assert_eq!(machine.fault("nvmlDeviceGetName", Some(0)), None);
        assert_eq!(machine.fault("nvmlDeviceGetName", Some(1)), Some(15));
        assert_eq!(machine.fault("nvmlDeviceGetCount_v2", None), Some(999));
        assert_eq!(machine.fault("nvmlDeviceGetUUID", Some(1)), None);
    }

    #[test]
    fn bus_ids_compare_in_any_form() {
        assert!(same_bus_id("00000000:B7:00.0", "0000:b7:00.0"));
        assert!(same_bus_id("b7:00.0", "0000:B7:00.0"));
        assert!(!same_bus_id("0000:b7:00.0", "0000:b7:00.1"));
    }

    /// Every function the library exports is a call a fault may name, and the other way round.
    #[test]
    fn calls_are_the_exports() {
        // Every file of `api/`, read at run time so that a file added there is counted too.
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/api");
        let mut source = String::new();
        for entry in std::fs::read_dir(&dir).unwrap() {
            source.push_str(&std::fs::read_to_string(entry.unwrap().path()).unwrap());
        }
        let exported: BTreeSet<&str> = source
            .split("pub unsafe extern \"C\" fn ")
            .skip(1)
            .map(|rest| rest.split('(').next().unwrap())
            .collect();
        assert_eq!(exported, CALLS.iter().copied().collect());
    }
}
