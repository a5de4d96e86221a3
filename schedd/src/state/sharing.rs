//! One copy of each owner and of each distinct spec among the jobs in memory, which every job
//! that comes into the records is made to share.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use ysched_common::{Job, JobSpec, Owner};

/// Makes `job` share its owner with the other active jobs of the same user (`owners`, by
/// uid); an owner that differs from the one kept (the user's groups changed between two
/// submits) becomes the one kept, for the jobs that come after it.
pub(super) fn share_owner(owners: &mut BTreeMap<u32, Arc<Owner>>, job: &mut Job) {
    match owners.get(&job.owner.uid) {
        Some(kept) if Arc::ptr_eq(kept, &job.owner) => {}
        Some(kept) if **kept == *job.owner => job.owner = Arc::clone(kept),
        _ => {
            owners.insert(job.owner.uid, Arc::clone(&job.owner));
        }
    }
}

/// The specs of the jobs in memory, one `Arc` per distinct spec, which every job that comes
/// into the records is made to share (see [`SharedSpecs::share`]).
///
/// Why: a spec is some 700 bytes inline with its strings besides (the script and environment
/// are not in it: they are the payload, in the store), and every plain submit made its own,
/// while a queue of a hundred thousand jobs typically holds a few distinct ones (a user's
/// loop of `ysub` with the same options): at 100,000 queued jobs, sharing them saves some
/// 85 MB. An array's tasks shared one already. Jobs that share a spec behave as before: a
/// spec is never changed in place where shared (`Arc::make_mut` copies it: `yctl update`),
/// and what the core evaluates once per shared spec (a dependency's status) depends on the
/// spec alone.
#[derive(Debug, Default, Clone)]
pub(super) struct SharedSpecs {
    /// The kept specs by [`spec_hash`]: those of one hash are compared in full.
    by_hash: BTreeMap<u64, Vec<Arc<JobSpec>>>,
    /// The addresses of the kept specs: a job that already shares one (most changes of a
    /// job keep its spec) is known without hashing it. An address here is never reused
    /// while it is here, since the spec it names is kept alive by `by_hash`.
    kept: BTreeSet<usize>,
    /// Kept specs no job uses any more are forgotten when `kept` grows past this.
    sweep_at: usize,
}

impl SharedSpecs {
    /// Makes `job` share the kept spec equal to its own, or keeps its own.
    pub(super) fn share(&mut self, job: &mut Job) {
        if self.kept.contains(&(Arc::as_ptr(&job.spec) as usize)) {
            return;
        }
        let same = self.by_hash.entry(spec_hash(&job.spec)).or_default();
        if let Some(kept) = same.iter().find(|kept| ***kept == *job.spec) {
            job.spec = Arc::clone(kept);
            return;
        }
        same.push(Arc::clone(&job.spec));
        self.kept.insert(Arc::as_ptr(&job.spec) as usize);
        if self.kept.len() > self.sweep_at {
            self.sweep();
        }
    }

    /// Forgets the kept specs that only this holds (their jobs ended or changed spec), and
    /// sets the next sweep at twice what is left: a few visits per kept spec in all.
    fn sweep(&mut self) {
        let kept = &mut self.kept;
        self.by_hash.retain(|_, same| {
            same.retain(|spec| {
                let used = Arc::strong_count(spec) > 1;
                if !used {
                    kept.remove(&(Arc::as_ptr(spec) as usize));
                }
                used
            });
            !same.is_empty()
        });
        self.sweep_at = (2 * self.kept.len()).max(MIN_SPECS_SWEPT);
    }
}

/// The fewest kept specs [`SharedSpecs`] sweeps.
const MIN_SPECS_SWEPT: usize = 1024;

/// A hash of what usually tells two specs apart (the rest is compared in full when the
/// hash is equal). `DefaultHasher::new` has fixed keys: the same spec, the same hash.
fn spec_hash(spec: &JobSpec) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::hash::DefaultHasher::new();
    (
        &spec.name,
        &spec.tier,
        spec.gpus,
        &spec.gpu_types,
        spec.cpus,
        spec.mem_mib,
    )
        .hash(&mut h);
    (
        spec.time_limit_secs,
        spec.grace_secs,
        &spec.checkpoint_dir,
        &spec.account,
    )
        .hash(&mut h);
    (
        &spec.stdout_path,
        &spec.stderr_path,
        &spec.workdir,
        &spec.args,
        spec.nodes,
    )
        .hash(&mut h);
    (
        &spec.constraints,
        &spec.nodelist,
        &spec.exclude,
        spec.begin_unix_secs,
    )
        .hash(&mut h);
    (
        &spec.comment,
        &spec.partition,
        &spec.qos,
        &spec.mail_user,
        &spec.interconnect,
    )
        .hash(&mut h);
    spec.array.as_ref().map(|a| &a.indices).hash(&mut h);
    spec.dependency.as_ref().map(|d| &d.text).hash(&mut h);
    h.finish()
}

#[cfg(test)]
mod tests {
    use crate::core::testkit::JobBuilder;
    use crate::state::Records;
    use std::sync::Arc;
    use ysched_common::JobId;

    #[test]
    fn equal_specs_of_different_submits_are_shared_and_forgotten_once_unused() {
        let mut rec = Records::with_jobs(Vec::new());
        let own_spec = |id: u64, gpus: u32| {
            let mut job = JobBuilder::new(id).name("train").gpus(gpus).build();
            job.spec = Arc::new((*job.spec).clone());
            job
        };
        let jobs = vec![own_spec(1, 1), own_spec(2, 1), own_spec(3, 2)];
        rec.reserve_active(&jobs);
        rec.insert_reserved_jobs(jobs);
        let spec = |rec: &Records, id: u64| Arc::clone(&rec.jobs()[&JobId(id)].spec);
        assert!(Arc::ptr_eq(&spec(&rec, 1), &spec(&rec, 2)));
        assert!(!Arc::ptr_eq(&spec(&rec, 1), &spec(&rec, 3)));
        assert_eq!(spec(&rec, 3).gpus, 2);
        // Jobs 2 and 3 leave; a sweep forgets job 3's spec, not the one job 1 still uses.
        rec.jobs.remove(&JobId(2));
        rec.jobs.remove(&JobId(3));
        rec.specs.sweep();
        assert_eq!(rec.specs.kept.len(), 1);
        let first = Arc::as_ptr(&spec(&rec, 1)) as usize;
        assert!(rec.specs.kept.contains(&first));
    }
}
