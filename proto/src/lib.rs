//! The wire format of ysched: the only crate that defines messages exchanged between
//! `schedd`, `noded` and the CLIs. Generated from `proto/ysched.proto`.
#![allow(clippy::all)]
tonic::include_proto!("ysched.v1");

/// `NodeInfo.gpu_holders`' value for a GPU held by a job whose usage the caller may not see
/// (`scheduler.reports_public = false`): the GPU is in use, by whom is not said.
pub const PRIVATE_HOLDER: u64 = u64::MAX;

pub mod listing;
