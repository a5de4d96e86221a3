//! Tests of the job and node records.

use super::*;

#[test]
fn gpu_types() {
    assert!(gpu_type_matches("A100", "NVIDIA A100-SXM4-80GB"));
    assert!(gpu_type_matches("a100", "NVIDIA A100-PCIE-40GB"));
    assert!(gpu_type_matches("A10", "NVIDIA A10"));
    assert!(!gpu_type_matches("A10", "NVIDIA A100-SXM4-80GB"));
    assert!(gpu_type_matches("H100", "NVIDIA H100 80GB HBM3"));
    assert!(!gpu_type_matches("", "NVIDIA A10"));
}

#[test]
fn states_parse() {
    assert_eq!(JobState::parse("pd"), Some(JobState::Pending));
    assert_eq!(JobState::parse("node_fail"), Some(JobState::NodeFail));
    assert_eq!(JobState::parse("bogus"), None);
    assert_eq!(JobState::parse("oom"), Some(JobState::OutOfMemory));
    assert_eq!(
        JobState::parse("OUT_OF_MEMORY"),
        Some(JobState::OutOfMemory)
    );
    assert!(JobState::OutOfMemory.is_terminal());
    assert!(JobState::Timeout.is_terminal());
    assert!(!JobState::Held.is_terminal());
}
