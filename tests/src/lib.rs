//! The harness for end-to-end tests: a real `schedd` and real `noded` agents on loopback, in a
//! temp dir, with fake GPU inventories (or GPUs found through NVML: the mock NVML library
//! serving a machine file, see [`NvmlNode`]), driven through the real CLIs.
//!
//! Every process the harness starts carries `YSCHED_TEST_TAG` in its environment (jobs inherit
//! it through `--export=ALL`), so dropping the harness kills all of them, supervisors and jobs
//! included, even after an agent was killed.

pub mod core_bench;
pub mod fleet;
pub mod fuzz;
pub mod host_link;
pub mod neighbour;
pub mod power_loss;
pub mod slow_readers;
pub mod unread;

mod as_user;
mod cluster;
mod connections;
mod disk;
mod history;
mod nodes;
mod output;
mod process;
mod replicas;
mod skip;
mod wait;

pub use as_user::{call_as, connect_as, on_thread_as};
pub use cluster::{bin_dir, TestCluster};
pub use connections::{count_closed, NonBlocking};
pub use disk::{fill, fill_leaving, free_bytes, mount_tmpfs, Mounted};
pub use history::{job_detail, runs_in_history, seed_finished_jobs};
pub use nodes::{FakeGpu, FakeNode, NvmlNode};
pub use output::{job_gpus, stderr, stdout};
pub use process::{cpu_ms, kill_tagged, rss_mib};
pub use replicas::{Clients, Replicas};
pub use skip::skipped;
pub use wait::{read_when_exists, wait_until};
pub use ysched_mock_nvml::machine as mock_nvml;
