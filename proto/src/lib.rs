//! The wire format of ysched: the only crate that defines messages exchanged between
//! `schedd`, `noded` and the CLIs. Generated from `proto/ysched.proto`.
#![allow(clippy::all)]
tonic::include_proto!("ysched.v1");
