//! Tests of submit validation: checkpoint directories, `--signal`, and the limits of a request.

use crate::error::ApiError;
use crate::submit::*;
use std::path::Path;
use ysched_common::{Caller, Config, JobSpec, SubmitRequest, WarnSignal};

mod checkpoint_dir_tests {
    use super::*;

    fn spec(dir: Option<&str>) -> JobSpec {
        JobSpec {
            checkpoint_dir: dir.map(str::to_string),
            ..JobSpec::default()
        }
    }

    #[test]
    fn home_root_falls_back_when_the_home_is_missing() {
        let exists = |home: &Path| home == Path::new("/home/alice");
        let dir = |root, home: Option<&str>| {
            checkpoint_dir_with(&spec(None), 7, root, home.map(Path::new), exists)
        };
        let root = "~/.ysched/checkpoints";
        assert_eq!(
            dir(root, Some("/home/alice")),
            "/home/alice/.ysched/checkpoints/7"
        );
        // nobody's home on Debian, on RHEL, and a uid unknown to schedd's host.
        for home in [Some("/nonexistent"), Some("/"), None] {
            assert_eq!(dir(root, home), "/var/tmp/ysched-checkpoints/7", "{home:?}");
        }
        // A root outside the home is taken as it is, home or not.
        assert_eq!(dir("/shared/ck/", None), "/shared/ck/7");
        // The job's own --checkpoint-dir always wins.
        assert_eq!(
            checkpoint_dir_with(&spec(Some("/x/ck")), 7, root, None, exists),
            "/x/ck"
        );
    }

    #[test]
    fn the_real_home_test_sees_existing_directories() {
        let tmp = std::env::temp_dir();
        let root = "~/ck";
        assert_eq!(
            checkpoint_dir(&spec(None), 3, root, Some(&tmp)),
            format!("{}/ck/3", tmp.display())
        );
        assert_eq!(
            checkpoint_dir(&spec(None), 3, root, Some(Path::new("/nonexistent/x"))),
            "/var/tmp/ysched-checkpoints/3"
        );
    }
}

mod warn_signal_tests {
    use super::*;
    use ysched_common::Owner;

    fn submit(warn: Option<WarnSignal>) -> Result<ValidSubmit, ApiError> {
        let owner = Owner {
            uid: 1000,
            gid: 1000,
            user: "alice".into(),
            groups: vec!["alice".into()],
        };
        let wire = SubmitRequest {
            script: "#!/bin/sh\ntrue\n".into(),
            workdir: "/tmp".into(),
            warn_signal: warn,
            ..Default::default()
        };
        validate(wire, &Caller::local(owner), &Config::default())
    }

    #[test]
    fn a_warning_signal_is_kept_and_bad_ones_are_named() {
        assert_eq!(submit(None).unwrap().spec.warn_signal, None);
        let w = WarnSignal {
            signal: 10,
            secs: 2,
            batch_only: true,
        };
        let spec = submit(Some(w)).unwrap().spec;
        assert_eq!(spec.warn_signal.unwrap().to_string(), "B:USR1@2");
        let err = submit(Some(WarnSignal { signal: 99, ..w })).unwrap_err();
        assert!(
            matches!(&err, ApiError::Invalid(m) if m.contains("unknown signal '99'")),
            "{err:?}"
        );
        let err = submit(Some(WarnSignal { secs: 65_536, ..w })).unwrap_err();
        assert!(
            matches!(&err, ApiError::Invalid(m) if m.contains("65536 seconds is out of range")),
            "{err:?}"
        );
    }
}

mod account_tests {
    use super::*;
    use ysched_common::Owner;

    fn alice() -> Owner {
        Owner {
            uid: 1000,
            gid: 1000,
            user: "alice".into(),
            groups: vec!["alice".into(), "ml".into()],
        }
    }

    fn config() -> Config {
        Config::parse(
            "[tiers.high]\nvalue = 10\nmax_gpus_per_account = 16\n\
             [tiers.medium]\nvalue = 5\nmax_gpus_per_user = 4\n\
             [accounts.vision]\nusers = [\"alice\"]\n\
             [accounts.nlp]\ngroups = [\"ml\"]\n\
             [accounts.infra]\n",
        )
        .unwrap()
    }

    fn submit(
        caller: Caller,
        account: &str,
        tier: &str,
        gpus: u32,
    ) -> Result<ValidSubmit, ApiError> {
        let wire = SubmitRequest {
            script: "#!/bin/sh\ntrue\n".into(),
            workdir: "/tmp".into(),
            account: account.into(),
            tier: tier.into(),
            gpus,
            ..Default::default()
        };
        validate(wire, &caller, &config())
    }

    #[test]
    fn a_user_charges_only_accounts_they_belong_to() {
        let me = || Caller::local(alice());
        // The primary group by default, a group of the same name, the account's users, groups.
        assert_eq!(submit(me(), "", "high", 1).unwrap().spec.account, "alice");
        for ok in ["alice", "ml", "vision", "nlp"] {
            assert_eq!(submit(me(), ok, "high", 1).unwrap().spec.account, ok);
        }
        let err = submit(me(), "infra", "high", 1).unwrap_err();
        assert!(
            matches!(&err, ApiError::Denied(m) if m.contains("may not charge account 'infra'")
                && m.contains("members of the Unix group 'infra'")),
            "{err:?}"
        );
        // Administrators charge any account.
        let root = Caller::local(Owner {
            uid: 0,
            gid: 0,
            user: "root".into(),
            groups: vec!["root".into()],
        });
        assert_eq!(
            submit(root, "infra", "high", 1).unwrap().spec.account,
            "infra"
        );
    }

    #[test]
    fn root_relayed_from_an_untrusted_node_may_not_submit() {
        let root = Owner {
            uid: 0,
            gid: 0,
            user: "root".into(),
            groups: vec!["root".into(), "hpcadmin".into()],
        };
        let mut config = config();
        config.scheduler.admin_hosts = vec!["login1".into()];
        config.scheduler.admin_group = "hpcadmin".into();
        let relayed = |host: &str| {
            let caller = Caller {
                owner: root.clone(),
                host: Some(host.into()),
                admin: config.is_admin(&root, Some(host)),
            };
            let wire = SubmitRequest {
                script: "#!/bin/sh\ntrue\n".into(),
                workdir: "/tmp".into(),
                ..Default::default()
            };
            validate(wire, &caller, &config)
        };
        // From a compute node, even when its root claims the admin group there.
        let err = relayed("n7").unwrap_err();
        assert!(
            matches!(&err, ApiError::Denied(m) if m == "root relayed from node n7 may not \
                submit jobs: jobs run as root only when submitted on the schedd host or on a \
                node of scheduler.admin_hosts"),
            "{err:?}"
        );
        // From an admin host, and on schedd's own socket, root submits as before.
        assert!(relayed("login1").is_ok());
        let local = Caller::local(root.clone());
        assert!(submit(local, "", "high", 1).is_ok());
        // Other users relayed from that node are not concerned.
        let alice = Caller {
            owner: alice(),
            host: Some("n7".into()),
            admin: false,
        };
        assert!(submit(alice, "", "high", 1).is_ok());
    }

    #[test]
    fn a_job_larger_than_its_tiers_quota_is_refused() {
        let me = || Caller::local(alice());
        assert!(submit(me(), "", "high", 16).is_ok());
        let err = submit(me(), "", "high", 17).unwrap_err();
        assert!(
            matches!(&err, ApiError::Invalid(m) if m.contains("17 GPUs")
                && m.contains("tiers.high.max_gpus_per_account")),
            "{err:?}"
        );
        assert!(submit(me(), "", "medium", 4).is_ok());
        let err = submit(me(), "", "medium", 5).unwrap_err();
        assert!(
            matches!(&err, ApiError::Invalid(m) if m.contains("tiers.medium.max_gpus_per_user")),
            "{err:?}"
        );
    }
}

mod array_tests {
    use super::*;
    use ysched_common::Owner;

    fn submit(array: &str, dependency: &str, config: &Config) -> Result<ValidSubmit, ApiError> {
        let owner = Owner {
            uid: 1000,
            gid: 1000,
            user: "alice".into(),
            groups: vec!["alice".into()],
        };
        let wire = SubmitRequest {
            script: "#!/bin/sh\ntrue\n".into(),
            workdir: "/tmp".into(),
            array: array.into(),
            dependency: dependency.into(),
            ..Default::default()
        };
        validate(wire, &Caller::local(owner), config)
    }

    #[test]
    fn arrays_are_parsed_and_bad_ones_named() {
        let config = Config::default();
        let ok = submit("0-99:4%16", "", &config).unwrap();
        let array = ok.spec.array.unwrap();
        assert_eq!((array.count, array.max_running), (25, 16));
        assert_eq!(submit("", "", &config).unwrap().spec.array, None);
        for (bad, wanted) in [
            ("5-1", "--array '5-1': range '5-1' goes backwards"),
            ("x", "'x' is not a task index"),
            ("0-9%0", "%0 would never run a task"),
        ] {
            let err = submit(bad, "", &config).unwrap_err();
            assert!(
                matches!(&err, ApiError::Invalid(m) if m.contains(wanted)),
                "{bad}: {err:?}"
            );
        }
        // scheduler.max_array_size bounds the indices.
        let mut small = Config::default();
        small.scheduler.max_array_size = 100;
        assert!(submit("0-99", "", &small).is_ok());
        let err = submit("0-100", "", &small).unwrap_err();
        assert!(
            matches!(&err, ApiError::Invalid(m) if m.contains("scheduler.max_array_size = 100")),
            "{err:?}"
        );
    }

    #[test]
    fn dependencies_are_parsed_and_resolved_later() {
        let config = Config::default();
        let ok = submit("", "afterok:12:13_[1-2],afterany:14", &config).unwrap();
        assert_eq!(
            ok.spec.dependency, None,
            "resolved at submit, under the lock"
        );
        let request = ok.dependency.unwrap();
        assert_eq!(request.clauses.len(), 2);
        assert_eq!(request.text, "afterok:12:13_[1-2],afterany:14");
        assert!(submit("", "", &config).unwrap().dependency.is_none());
        let err = submit("", "before:3", &config).unwrap_err();
        assert!(
            matches!(&err, ApiError::Invalid(m) if m.contains("unknown type 'before'")),
            "{err:?}"
        );
    }
}

mod slurm_flag_tests {
    use super::*;
    use ysched_common::Owner;

    fn submit(wire: SubmitRequest) -> Result<ValidSubmit, ApiError> {
        let owner = Owner {
            uid: 1000,
            gid: 1000,
            user: "alice".into(),
            groups: vec!["alice".into()],
        };
        let wire = SubmitRequest {
            script: "#!/bin/sh\ntrue\n".into(),
            workdir: "/tmp".into(),
            ..wire
        };
        validate(wire, &Caller::local(owner), &Config::default())
    }

    #[test]
    fn slurm_env_open_mode_and_tasks_per_node_are_kept() {
        let spec = submit(SubmitRequest {
            slurm_env: true,
            open_append: true,
            ntasks_per_node: 8,
            ..Default::default()
        })
        .unwrap()
        .spec;
        assert!(spec.slurm_env && spec.open_append);
        assert_eq!(spec.ntasks_per_node, 8);
        let plain = submit(SubmitRequest::default()).unwrap().spec;
        assert!(!plain.slurm_env && !plain.open_append);
        assert_eq!(plain.ntasks_per_node, 0);
        let err = submit(SubmitRequest {
            ntasks_per_node: MAX_NTASKS_PER_NODE + 1,
            ..Default::default()
        })
        .unwrap_err();
        assert!(
            err.to_string()
                .contains("--ntasks-per-node 10001 is out of range (1 to 10000)"),
            "{err}"
        );
    }
}
