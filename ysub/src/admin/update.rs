//! `yctl update JOB ...`: a queued job's tier, time limit, name, dependency or held state,
//! from flags or from `scontrol update`'s `KEY=VALUE` words (`TimeLimit=1:00:00`), into one
//! `UpdateJobRequest`; and what the reply prints.

use anyhow::{anyhow, bail, Result};
use clap::Args;
use serde::Serialize;
use ysched_common::text::{escape_for_terminal, excerpt};
use ysched_common::JobTarget;
use ysched_proto::{UpdateJobReply, UpdateJobRequest};

/// The arguments of `yctl update`.
#[derive(Args, Debug, Clone, PartialEq, Eq)]
pub struct UpdateArgs {
    /// The job: `12` (a job, or every pending task of array 12), `12_7` (one task),
    /// `12_[1-5]` (some tasks); `jobid=12` as scontrol writes it is read too
    #[arg(value_name = "JOBID")]
    pub job: String,
    /// scontrol's forms, keys in any case: `TimeLimit=1:00:00`, `JobName=x` (or `Name=`),
    /// `Dependency=afterok:12`, `Partition=TIER`, `QOS=TIER`, `Tier=TIER`
    #[arg(value_name = "KEY=VALUE")]
    pub settings: Vec<String>,
    /// Move the job to this tier (only a tier you may submit to)
    #[arg(short = 'p', long = "priority", value_name = "TIER")]
    pub tier: Option<String>,
    /// The new time limit, in sbatch's forms (`90`, `1:00:00`, `2-00:00:00`, `UNLIMITED`);
    /// only an administrator may raise it
    #[arg(short = 't', long = "time", value_name = "LIMIT")]
    pub time: Option<String>,
    /// The new job name
    #[arg(short = 'J', long = "name", value_name = "NAME")]
    pub name: Option<String>,
    /// The new dependency, as `ysub --dependency`; `""` removes it
    #[arg(short = 'd', long, value_name = "DEP")]
    pub dependency: Option<String>,
    /// Hold the job
    #[arg(long, conflicts_with = "release")]
    pub hold: bool,
    /// Release the held job
    #[arg(long)]
    pub release: bool,
    /// Print what changed as JSON: `{"job": "12", "changed": [...]}`
    #[arg(long)]
    pub json: bool,
}

/// The keys `yctl update` takes in `KEY=VALUE` form, for the message naming an unknown one.
const KEYS: &str = "TimeLimit, JobName (or Name), Dependency, Partition, QOS, Tier";

/// The job named: `12`, `12_7`, `12_[1-5]`, or scontrol's `jobid=12`.
pub fn update_target(text: &str) -> Result<JobTarget> {
    let text = text.trim();
    let bare = match text.split_once('=') {
        Some((key, value)) if key.eq_ignore_ascii_case("jobid") => value,
        Some(_) => bail!(
            "'{}' is not a job id: give the job first (yctl update 12 TimeLimit=1:00:00)",
            excerpt(text, 40)
        ),
        None => text,
    };
    JobTarget::parse(bare).map_err(|e| anyhow!(e))
}

/// The request for `args`. Flags and keys may not both set one thing; of a tier, a QOS and a
/// partition the tier wins, then the QOS (as at submit).
pub fn update_request(args: &UpdateArgs) -> Result<UpdateJobRequest> {
    let target = update_target(&args.job)?;
    let mut tier = args.tier.clone();
    let mut time = args.time.clone();
    let mut name = args.name.clone();
    let mut dependency = args.dependency.clone();
    let (mut qos, mut partition) = (None, None);
    for word in &args.settings {
        let Some((key, value)) = word.split_once('=') else {
            bail!("'{}' is not KEY=VALUE (keys: {KEYS})", excerpt(word, 40));
        };
        let slot = match key.trim().to_ascii_lowercase().as_str() {
            "timelimit" | "time" => &mut time,
            "jobname" | "name" => &mut name,
            "dependency" => &mut dependency,
            "partition" => &mut partition,
            "qos" => &mut qos,
            "tier" => &mut tier,
            "priority" => bail!(
                "Priority={}: ysched orders jobs by tier, not by a number; give the tier \
                 (yctl update JOB --priority TIER, or Partition=TIER)",
                excerpt(value, 20)
            ),
            _ => bail!("unknown key '{}' (keys: {KEYS})", excerpt(key, 40)),
        };
        if slot.is_some() {
            bail!("{} is given twice", excerpt(key, 40));
        }
        *slot = Some(value.to_string());
    }
    let time_limit_secs = match &time {
        Some(text) => Some(
            ysched_common::parse::parse_time_limit(text)
                .map_err(|e| anyhow!(e))?
                .unwrap_or(0),
        ),
        None => None,
    };
    if let Some(name) = &name {
        ysched_common::limits::JOB_NAME
            .check_len(name)
            .map_err(anyhow::Error::msg)?;
    }
    if let Some(dependency) = &dependency {
        ysched_common::limits::DEPENDENCY
            .check_len(dependency)
            .map_err(anyhow::Error::msg)?;
    }
    let tier = tier.or(qos).or(partition);
    if let Some(tier) = &tier {
        ysched_common::limits::TIER
            .check_len(tier)
            .map_err(anyhow::Error::msg)?;
    }
    let hold = match (args.hold, args.release) {
        (true, _) => Some(true),
        (_, true) => Some(false),
        _ => None,
    };
    let request = UpdateJobRequest {
        job: Some(crate::jobs::job_ref(&target)),
        tier,
        time_limit_secs,
        name,
        dependency,
        hold,
    };
    if request.tier.is_none()
        && request.time_limit_secs.is_none()
        && request.name.is_none()
        && request.dependency.is_none()
        && request.hold.is_none()
    {
        bail!(
            "nothing to update: give --priority, --time, --name, --dependency, --hold or \
             --release (or {KEYS}=VALUE)"
        );
    }
    Ok(request)
}

/// `yctl update --json`.
#[derive(Debug, Serialize)]
pub struct UpdateJson<'a> {
    pub job: &'a str,
    pub changed: &'a [String],
}

/// What `yctl update` prints: `Updated job 12: time limit 1:00:00 (was 2:00:00); name x (was
/// y)`, or that nothing changed.
pub fn updated_line(job: &str, reply: &UpdateJobReply) -> String {
    let job = escape_for_terminal(job);
    if reply.changed.is_empty() {
        return format!("Job {job}: nothing changed (it already is as asked)\n");
    }
    let changes: Vec<String> = reply
        .changed
        .iter()
        .map(|c| escape_for_terminal(c).into_owned())
        .collect();
    format!("Updated job {job}: {}\n", changes.join("; "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser, Debug)]
    struct Cli {
        #[command(flatten)]
        args: UpdateArgs,
    }

    fn request(words: &[&str]) -> Result<UpdateJobRequest> {
        let cli = Cli::try_parse_from(std::iter::once("update").chain(words.iter().copied()))?;
        update_request(&cli.args)
    }

    #[test]
    fn flags_become_the_request() {
        let r = request(&["12", "-p", "high", "--time", "1:00:00", "-J", "x", "--hold"]).unwrap();
        assert_eq!(r.job.as_ref().unwrap().target, "12");
        assert_eq!(r.tier.as_deref(), Some("high"));
        assert_eq!(r.time_limit_secs, Some(3600));
        assert_eq!(r.name.as_deref(), Some("x"));
        assert_eq!(r.hold, Some(true));
        let r = request(&["12_7", "--release", "--dependency", ""]).unwrap();
        assert_eq!(r.job.as_ref().unwrap().target, "12_7");
        assert_eq!(r.hold, Some(false));
        assert_eq!(r.dependency.as_deref(), Some(""));
        let r = request(&["12", "-t", "UNLIMITED"]).unwrap();
        assert_eq!(r.time_limit_secs, Some(0), "0: no limit");
        assert!(request(&["12", "--hold", "--release"]).is_err());
        let err = request(&["12"]).unwrap_err().to_string();
        assert!(err.contains("nothing to update"), "{err}");
    }

    #[test]
    fn scontrols_key_value_forms_are_read_in_any_case() {
        let r = request(&[
            "jobid=12",
            "TimeLimit=30",
            "jobname=y",
            "DEPENDENCY=afterok:3",
            "Partition=gpu",
        ])
        .unwrap();
        assert_eq!(r.job.as_ref().unwrap().target, "12");
        assert_eq!(r.time_limit_secs, Some(1800));
        assert_eq!(r.name.as_deref(), Some("y"));
        assert_eq!(r.dependency.as_deref(), Some("afterok:3"));
        assert_eq!(r.tier.as_deref(), Some("gpu"));
        // The tier wins over a QOS, which wins over a partition.
        let r = request(&["12", "Partition=a", "QOS=b"]).unwrap();
        assert_eq!(r.tier.as_deref(), Some("b"));
        let r = request(&["12", "Partition=a", "-p", "c"]).unwrap();
        assert_eq!(r.tier.as_deref(), Some("c"));
        for (words, wanted) in [
            (&["12", "Nodes=2"][..], "unknown key 'Nodes'"),
            (&["12", "Priority=100"][..], "by tier, not by a number"),
            (&["12", "TimeLimit"][..], "is not KEY=VALUE"),
            (&["12", "-J", "a", "Name=b"][..], "Name is given twice"),
            (&["12", "TimeLimit=1:99"][..], "time limit"),
            (&["Name=x", "12"][..], "is not a job id"),
        ] {
            let err = request(words).unwrap_err().to_string();
            assert!(err.contains(wanted), "{words:?}: {err}");
        }
    }

    #[test]
    fn the_reply_is_printed_as_what_changed() {
        let reply = UpdateJobReply {
            changed: vec!["time limit 1:00:00 (was 2:00:00)".into(), "held".into()],
        };
        assert_eq!(
            updated_line("12", &reply),
            "Updated job 12: time limit 1:00:00 (was 2:00:00); held\n"
        );
        assert_eq!(
            updated_line("12", &UpdateJobReply::default()),
            "Job 12: nothing changed (it already is as asked)\n"
        );
    }
}
