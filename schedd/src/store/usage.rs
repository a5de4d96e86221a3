//! The `usage` tree's keys and values. A report reads every run of its window (a million in
//! a busy week), so a run is a compact binary record rather than JSON: about 50 bytes,
//! decoded with a few loads and no copy of its strings.
//!
//! Key: end time (i64, sign bit flipped so that the bytes sort as the numbers do) ++ job id
//! (u64) ++ restart count (u32), all big-endian: 20 bytes. The value does not repeat them.
//!
//! Value, version 1: `1u8`, then as LEB128 varints: uid, gpus, cpus, end − start, start −
//! queued_at, preempted_by (0: none), lost_gpu_secs; then flags u8 (bit 0: checkpoint saved;
//! bit 1: a preemptor account follows); then account, user, tier, outcome and (with bit 1)
//! the preemptor account, each a varint length and UTF-8. A later version bumps the first
//! byte; this one reads only 1.

use super::{Error, Result};
use ysched_common::{JobId, RunRecord, RunView};

pub type RunKey = [u8; 20];

const VERSION: u8 = 1;
const SAVED: u8 = 1;
const HAS_PREEMPTOR_ACCOUNT: u8 = 2;

/// `ms` as bytes that sort as the numbers do (the sign bit flipped, big-endian).
pub(super) fn time_bytes(ms: i64) -> [u8; 8] {
    ((ms as u64) ^ (1 << 63)).to_be_bytes()
}

/// The key of `run`: end, job, restart.
pub fn key(run: &RunRecord) -> RunKey {
    let mut k = [0u8; 20];
    k[..8].copy_from_slice(&time_bytes(run.end));
    k[8..16].copy_from_slice(&run.job_id.0.to_be_bytes());
    k[16..].copy_from_slice(&run.restart_count.to_be_bytes());
    k
}

/// The first key of runs ending at `ms` or later.
pub fn first_key(ms: i64) -> RunKey {
    let mut k = [0u8; 20];
    k[..8].copy_from_slice(&time_bytes(ms));
    k
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    put_varint(out, s.len() as u64);
    out.extend_from_slice(s.as_bytes());
}

pub fn encode(run: &RunRecord) -> Vec<u8> {
    let mut out = Vec::with_capacity(32 + run.account.len() + run.user.len() + run.tier.len());
    out.push(VERSION);
    put_varint(&mut out, u64::from(run.uid));
    put_varint(&mut out, u64::from(run.gpus));
    put_varint(&mut out, u64::from(run.cpus));
    // Differences, as the key has the end: schedd records end >= start >= queued_at; an
    // import is checked to be so.
    put_varint(&mut out, run.end.wrapping_sub(run.start) as u64);
    put_varint(&mut out, run.start.wrapping_sub(run.queued_at) as u64);
    put_varint(&mut out, run.preempted_by.map_or(0, |j| j.0));
    put_varint(&mut out, run.lost_gpu_secs);
    let mut flags = 0;
    if run.checkpoint_saved {
        flags |= SAVED;
    }
    if run.preemptor_account.is_some() {
        flags |= HAS_PREEMPTOR_ACCOUNT;
    }
    out.push(flags);
    put_str(&mut out, &run.account);
    put_str(&mut out, &run.user);
    put_str(&mut out, &run.tier);
    put_str(&mut out, &run.outcome);
    if let Some(a) = &run.preemptor_account {
        put_str(&mut out, a);
    }
    out
}

struct Reader<'a> {
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.bytes.len() < n {
            return None;
        }
        let (head, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        Some(head)
    }

    fn u8(&mut self) -> Option<u8> {
        self.take(1).map(|b| b[0])
    }

    fn varint(&mut self) -> Option<u64> {
        let mut v: u64 = 0;
        for shift in (0..64).step_by(7) {
            let b = self.u8()?;
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Some(v);
            }
        }
        None
    }

    fn u32(&mut self) -> Option<u32> {
        self.varint().and_then(|v| u32::try_from(v).ok())
    }

    fn string(&mut self) -> Option<&'a str> {
        let n = usize::try_from(self.varint()?).ok()?;
        std::str::from_utf8(self.take(n)?).ok()
    }
}

fn read<'v>(key: &[u8], bytes: &'v [u8]) -> std::result::Result<RunView<'v>, &'static str> {
    let key: &[u8; 20] = key.try_into().map_err(|_| "key is not 20 bytes")?;
    let end = (u64::from_be_bytes(key[..8].try_into().unwrap()) ^ (1 << 63)) as i64;
    let job_id = JobId(u64::from_be_bytes(key[8..16].try_into().unwrap()));
    let restart_count = u32::from_be_bytes(key[16..].try_into().unwrap());
    let mut r = Reader { bytes };
    let short = "record cut short";
    match r.u8() {
        Some(VERSION) => {}
        Some(_) => return Err("written by a newer schedd (unknown version)"),
        None => return Err("empty record"),
    }
    let uid = r.u32().ok_or(short)?;
    let gpus = r.u32().ok_or(short)?;
    let cpus = r.u32().ok_or(short)?;
    let start = end.wrapping_sub(r.varint().ok_or(short)? as i64);
    let queued_at = start.wrapping_sub(r.varint().ok_or(short)? as i64);
    let preempted_by = r.varint().ok_or(short)?;
    let lost_gpu_secs = r.varint().ok_or(short)?;
    let flags = r.u8().ok_or(short)?;
    let text = "a name is cut short or not UTF-8";
    let account = r.string().ok_or(text)?;
    let user = r.string().ok_or(text)?;
    let tier = r.string().ok_or(text)?;
    let outcome = r.string().ok_or(text)?;
    let preemptor_account = if flags & HAS_PREEMPTOR_ACCOUNT != 0 {
        Some(r.string().ok_or(text)?)
    } else {
        None
    };
    Ok(RunView {
        job_id,
        restart_count,
        account,
        user,
        uid,
        tier,
        gpus,
        cpus,
        queued_at,
        start,
        end,
        outcome,
        preempted_by: (preempted_by != 0).then_some(JobId(preempted_by)),
        preemptor_account,
        checkpoint_saved: flags & SAVED != 0,
        lost_gpu_secs,
    })
}

/// The run stored under `key` as `value`, borrowed from `value`.
pub fn decode<'v>(key: &[u8], value: &'v [u8]) -> Result<RunView<'v>> {
    read(key, value).map_err(|why| Error::CorruptRun {
        key: key.iter().map(|b| format!("{b:02x}")).collect(),
        why: why.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(end: i64, job: u64, restart: u32) -> RunRecord {
        RunRecord {
            job_id: JobId(job),
            restart_count: restart,
            account: "vision".into(),
            user: "alice".into(),
            uid: 1000,
            tier: "high".into(),
            gpus: 8,
            cpus: 16,
            queued_at: end.wrapping_sub(5000),
            start: end.wrapping_sub(4000),
            end,
            outcome: "COMPLETED".into(),
            preempted_by: None,
            preemptor_account: None,
            checkpoint_saved: false,
            lost_gpu_secs: 0,
        }
    }

    #[test]
    fn records_round_trip() {
        let plain = run(1_767_225_600_000, 12, 0);
        assert_eq!(
            read(&key(&plain), &encode(&plain)).unwrap().to_record(),
            plain
        );
        let preempted = RunRecord {
            outcome: "REQUEUED".into(),
            preempted_by: Some(JobId(99)),
            preemptor_account: Some("nlp-ünï".into()),
            checkpoint_saved: true,
            lost_gpu_secs: 123,
            ..run(-7, u64::MAX, u32::MAX)
        };
        assert_eq!(
            read(&key(&preempted), &encode(&preempted))
                .unwrap()
                .to_record(),
            preempted
        );
        let bytes = encode(&preempted);
        let k = key(&preempted);
        for cut in 0..bytes.len() {
            assert!(read(&k, &bytes[..cut]).is_err(), "cut at {cut}");
        }
        let mut newer = bytes.clone();
        newer[0] = 2;
        assert!(read(&k, &newer).is_err());
        assert!(encode(&plain).len() < 48, "{} bytes", encode(&plain).len());
        let e = decode(&k, &bytes[..5]).unwrap_err();
        assert!(e.to_string().contains("record cut short"), "{e}");
    }

    #[test]
    fn keys_sort_by_end_then_job_then_restart() {
        let mut keys: Vec<RunKey> = [
            run(5, 1, 0),
            run(-3, 9, 0),
            run(5, 1, 1),
            run(4, 7, 3),
            run(5, 0, 9),
            run(i64::MIN, 1, 0),
            run(i64::MAX, 1, 0),
        ]
        .iter()
        .map(key)
        .collect();
        keys.sort();
        let order: Vec<(i64, u64)> = keys
            .iter()
            .map(|k| {
                let end = (u64::from_be_bytes(k[..8].try_into().unwrap()) ^ (1 << 63)) as i64;
                (end, u64::from_be_bytes(k[8..16].try_into().unwrap()))
            })
            .collect();
        assert_eq!(
            order,
            [
                (i64::MIN, 1),
                (-3, 9),
                (4, 7),
                (5, 0),
                (5, 1),
                (5, 1),
                (i64::MAX, 1)
            ]
        );
        assert!(first_key(5) <= key(&run(5, 0, 0)) && first_key(6) > key(&run(5, u64::MAX, 9)));
    }
}
