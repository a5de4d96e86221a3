//! A mock NVML: a shared library (`libysched_mock_nvml.so`) that exports NVIDIA's NVML entry
//! points with their exact names and C ABI (as `nvml.h` declares them) and answers them for a
//! machine described in a TOML file, so that `noded`'s NVML code runs in tests without a GPU
//! (`noded --nvml-library target/debug/libysched_mock_nvml.so`, or `node.nvml_library`).
//!
//! It exports only what `noded` calls (see [`machine::CALLS`]); nvml-wrapper reports any other
//! function as missing (`FailedToLoadSymbol`) when it is called, as with an old driver.
//!
//! # The machine file
//!
//! Its path is `$YSCHED_MOCK_NVML`, else the library's own path with `.toml` appended (so each
//! copy of the library, loaded in one process, serves a machine of its own: see
//! [`machine::install`]). The file is read at every call, and the machine taken anew whenever
//! its text changed, so a test changes a running machine by rewriting the file (replace it by
//! rename, as [`machine::Machine::write`] does, so that no call reads half a file). A file that
//! does not parse makes every call answer `NVML_ERROR_UNKNOWN`, with one line on stderr saying
//! why.
//!
//! ```toml
//! driver_version = "550.54.15"             # optional
//! nvswitches = ["00000000:C0:00.0"]        # bus ids of NVSwitches that NVLinks lead to
//!
//! [[gpu]]                                  # one per GPU, in NVML index order
//! uuid = "GPU-00000000-1d2c-4b3a-8f9e-000000000000"
//! name = "NVIDIA A100-SXM4-80GB"
//! memory_mib = 81920
//! pci_bus_id = "00000000:07:00.0"
//! numa_node = 0                 # optional; absent: NOT_SUPPORTED
//! pcie_switch = 0               # optional; GPUs with the same value share a PCIe switch
//! mig = false                   # optional; absent: NOT_SUPPORTED (no MIG on this GPU)
//! nvlink = ["00000000:C0:00.0", "00000000:17:00.0", ""]
//!                               # per link, the far end's bus id ("" a link that is down);
//!                               # empty: no NVLink (NOT_SUPPORTED)
//! ecc_uncorrected = 0           # optional: volatile uncorrectable ECC errors; absent: no ECC
//! retired_pages_pending = false # optional; absent: NOT_SUPPORTED
//! xid = [79]                    # XID errors so far; each listed after an event set
//!                               # registered the GPU is delivered to it once
//! lost = false                  # true: every call about this GPU answers GPU_IS_LOST
//! [gpu.remapped_rows]           # optional; absent: NOT_SUPPORTED
//! correctable = 0
//! uncorrectable = 0
//! pending = false
//! failed = false
//!
//! [[pair]]                      # optional: a PCIe common ancestor the rule does not give
//! gpus = [0, 1]
//! level = "MULTIPLE"            # INTERNAL, SINGLE, MULTIPLE, HOSTBRIDGE, NODE or SYSTEM
//!
//! [[fault]]                     # optional: make a call answer an error
//! call = "nvmlDeviceGetUUID"    # an exported function
//! gpu = 3                       # optional: only for the GPU at this position
//! error = "GPU_IS_LOST"         # an NVML_ERROR_ name, without the prefix
//! ```
//!
//! The PCIe common ancestor of two GPUs is the `[[pair]]` naming them, else `SINGLE` when they
//! share a `pcie_switch`, `NODE` when they share a `numa_node`, `SYSTEM` otherwise. A GPU
//! removed from the file is gone: NVML no longer finds it by UUID, and its handles answer
//! `GPU_IS_LOST`. An event set's wait never blocks: it answers the next undelivered XID of its
//! GPUs, else `GPU_IS_LOST` when one of them is lost or gone, else `TIMEOUT`. Event sets support
//! only XID events (`nvmlEventTypeXidCriticalError`).
//!
//! The rlib half of the crate ([`machine`]) holds the file's types, builders of common
//! machines, and [`machine::library`], which finds the built library for tests.

pub mod machine;

// The functions' contract is NVML's (`nvml.h`): raw pointers from C callers.
#[allow(clippy::missing_safety_doc)]
pub mod api;
