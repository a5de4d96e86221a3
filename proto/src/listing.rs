//! A client's decoding of a `JobList` that knows how many jobs it holds before it decodes
//! them: prost's decoding of `repeated JobInfo` grows its vector one job at a time, and for a
//! listing of 10,000 jobs (416 bytes each) that was 14 MB allocated, half of it copied, and
//! most of it fresh pages the kernel had to zero: about a sixth of `yq`'s CPU.

use crate::{JobInfo, ListJobsRequest};
use prost::bytes::{Buf, BufMut};
use prost::encoding::{decode_key, decode_varint, skip_field, DecodeContext, WireType};
use prost::{DecodeError, Message};
use tonic::transport::Channel;

/// `JobList` (same fields, same wire format), decoded in two looks: its entries counted,
/// then each decoded into a vector made that size.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PresizedJobList {
    pub jobs: Vec<JobInfo>,
    pub next_after_id: u64,
}

/// `JobList.jobs` and `JobList.next_after_id`.
const JOBS: u32 = 1;
const NEXT_AFTER_ID: u32 = 2;

impl Message for PresizedJobList {
    fn encode_raw(&self, buf: &mut impl BufMut) {
        prost::encoding::message::encode_repeated(JOBS, &self.jobs, buf);
        if self.next_after_id != 0 {
            prost::encoding::uint64::encode(NEXT_AFTER_ID, &self.next_after_id, buf);
        }
    }

    fn merge_field(
        &mut self,
        tag: u32,
        wire_type: WireType,
        buf: &mut impl Buf,
        ctx: DecodeContext,
    ) -> Result<(), DecodeError> {
        match tag {
            JOBS => prost::encoding::message::merge_repeated(wire_type, &mut self.jobs, buf, ctx),
            NEXT_AFTER_ID => {
                prost::encoding::uint64::merge(wire_type, &mut self.next_after_id, buf, ctx)
            }
            _ => skip_field(wire_type, tag, buf, ctx),
        }
    }

    /// The whole message at once: its jobs counted first (a walk over the keys and lengths
    /// of its top-level fields), then decoded.
    fn merge(&mut self, mut buf: impl Buf) -> Result<(), DecodeError> {
        // Zero-copy from tonic's buffer (a `BytesMut` split off).
        let bytes = buf.copy_to_bytes(buf.remaining());
        self.jobs.reserve_exact(count_jobs(&bytes)?);
        let mut rest: &[u8] = &bytes;
        while rest.has_remaining() {
            let (tag, wire_type) = decode_key(&mut rest)?;
            if tag == JOBS && wire_type == WireType::LengthDelimited {
                let job = length_delimited(&mut rest)?;
                self.jobs.push(JobInfo::decode(job)?);
            } else {
                self.merge_field(tag, wire_type, &mut rest, DecodeContext::default())?;
            }
        }
        Ok(())
    }

    fn encoded_len(&self) -> usize {
        prost::encoding::message::encoded_len_repeated(JOBS, &self.jobs)
            + if self.next_after_id != 0 {
                prost::encoding::uint64::encoded_len(NEXT_AFTER_ID, &self.next_after_id)
            } else {
                0
            }
    }

    fn clear(&mut self) {
        self.jobs.clear();
        self.next_after_id = 0;
    }
}

/// A length-delimited field's bytes (after its key), `rest` moved past them; prost's own
/// checks (and errors) for a length beyond the end.
fn length_delimited<'a>(rest: &mut &'a [u8]) -> Result<&'a [u8], DecodeError> {
    let field = *rest;
    skip_field(
        WireType::LengthDelimited,
        JOBS,
        rest,
        DecodeContext::default(),
    )?;
    let mut value = &field[..field.len() - rest.len()];
    let len = decode_varint(&mut value)?;
    debug_assert_eq!(len as usize, value.len());
    Ok(value)
}

/// How many `jobs` entries a `JobList`'s bytes hold (O(fields), nothing decoded).
fn count_jobs(bytes: &[u8]) -> Result<usize, DecodeError> {
    let mut rest = bytes;
    let mut jobs = 0;
    while rest.has_remaining() {
        let (tag, wire_type) = decode_key(&mut rest)?;
        skip_field(wire_type, tag, &mut rest, DecodeContext::default())?;
        jobs += usize::from(tag == JOBS && wire_type == WireType::LengthDelimited);
    }
    Ok(jobs)
}

/// `ListJobs` over `channel`, its reply decoded as a [`PresizedJobList`].
pub async fn list_jobs(
    channel: Channel,
    request: ListJobsRequest,
) -> Result<tonic::Response<PresizedJobList>, tonic::Status> {
    let mut grpc = tonic::client::Grpc::new(channel).max_decoding_message_size(usize::MAX);
    grpc.ready()
        .await
        .map_err(|e| tonic::Status::unknown(format!("Service was not ready: {e}")))?;
    let codec = tonic_prost::ProstCodec::<ListJobsRequest, PresizedJobList>::default();
    let path = tonic::codegen::http::uri::PathAndQuery::from_static("/ysched.v1.Ysched/ListJobs");
    let mut request = tonic::Request::new(request);
    request
        .extensions_mut()
        .insert(tonic::GrpcMethod::new("ysched.v1.Ysched", "ListJobs"));
    grpc.unary(request, path, codec).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{JobList, NodeAlloc};

    fn job(id: u64) -> JobInfo {
        JobInfo {
            id,
            name: format!("job-{id}"),
            user: "ana".into(),
            state: "PENDING".into(),
            alloc: vec![NodeAlloc {
                node: "n1".into(),
                gpus: vec![0, 1],
                ..Default::default()
            }],
            exit_code: Some(3),
            ..Default::default()
        }
    }

    #[test]
    fn decodes_what_prost_decodes() {
        for (jobs, next) in [(0, 0), (1, 0), (3, 17), (1000, 0), (0, 5)] {
            let list = JobList {
                jobs: (1..=jobs).map(job).collect(),
                next_after_id: next,
            };
            let bytes = list.encode_to_vec();
            let presized = PresizedJobList::decode(bytes.as_slice()).unwrap();
            assert_eq!(presized.jobs, list.jobs);
            assert_eq!(presized.next_after_id, list.next_after_id);
            assert_eq!(presized.jobs.capacity(), list.jobs.len());
            assert_eq!(presized.encode_to_vec(), bytes, "and encodes the same");
            assert_eq!(count_jobs(&bytes).unwrap(), jobs as usize);
        }
    }

    #[test]
    fn a_cut_or_bad_message_is_an_error_not_a_panic() {
        let list = JobList {
            jobs: (1..=5).map(job).collect(),
            next_after_id: 9,
        };
        let bytes = list.encode_to_vec();
        for cut in 0..bytes.len() {
            let head = &bytes[..cut];
            // What prost says of the same bytes, this says too.
            let theirs = JobList::decode(head).is_ok();
            let ours = PresizedJobList::decode(head).is_ok();
            assert_eq!(ours, theirs, "cut at {cut}");
        }
        // A length beyond the end.
        assert!(PresizedJobList::decode(&[0x0a, 0xff, 0x01][..]).is_err());
        // An unknown field is skipped.
        let mut with_unknown = bytes.clone();
        prost::encoding::string::encode(99, &"x".to_string(), &mut with_unknown);
        assert_eq!(
            PresizedJobList::decode(with_unknown.as_slice())
                .unwrap()
                .jobs,
            list.jobs
        );
    }
}
