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

mod slurm_option_tests {
    use super::*;
    use ysched_common::Owner;

    fn alice() -> Caller {
        Caller::local(Owner {
            uid: 1000,
            gid: 1000,
            user: "alice".into(),
            groups: vec!["alice".into()],
        })
    }

    fn wire() -> SubmitRequest {
        SubmitRequest {
            script: "#!/bin/sh\ntrue\n".into(),
            workdir: "/tmp".into(),
            ..Default::default()
        }
    }

    fn config() -> Config {
        Config::parse(
            "[slurm]\npartitions = { gpu = \"high\", debug = \"low\" }\n\
             qos = { normal = \"medium\", top = \"critical\" }\n",
        )
        .unwrap()
    }

    fn check(wire: SubmitRequest) -> Result<ValidSubmit, String> {
        validate(wire, &alice(), &config()).map_err(|e| e.to_string())
    }

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn tier_then_qos_then_partition_then_the_default() {
        let tier = |tier: &str, qos: &str, partition: &str| {
            check(SubmitRequest {
                tier: tier.into(),
                qos: qos.into(),
                partition: partition.into(),
                ..wire()
            })
            .map(|v| (v.spec.tier, v.spec.partition, v.spec.qos))
        };
        assert_eq!(tier("", "", "").unwrap().0, "medium");
        assert_eq!(
            tier("", "", "gpu").unwrap(),
            ("high".into(), "gpu".into(), String::new())
        );
        assert_eq!(tier("", "normal", "gpu").unwrap().0, "medium");
        assert_eq!(tier("low", "normal", "gpu").unwrap().0, "low");
        // A tier's own name needs no map entry.
        assert_eq!(tier("", "", "High").unwrap().0, "high");
        assert_eq!(
            tier("", "", "cpu").unwrap_err(),
            "unknown partition 'cpu' (tiers: critical, high, medium, low; \
             mapped partition names: debug, gpu)"
        );
        // Given but overridden, a typo is still caught.
        assert!(tier("high", "nromal", "")
            .unwrap_err()
            .contains("unknown qos 'nromal'"));
        // The tier a name maps to is as guarded as the tier itself.
        let err = validate(
            SubmitRequest {
                qos: "top".into(),
                ..wire()
            },
            &alice(),
            &config(),
        )
        .unwrap_err();
        assert!(matches!(err, ApiError::Denied(_)), "{err}");
        assert!(err.to_string().contains("tier 'critical'"), "{err}");
    }

    #[test]
    fn node_lists_are_names_once_each_and_size_the_job() {
        let v = check(SubmitRequest {
            nodelist: names(&["n3", "n1"]),
            exclude: names(&["n2"]),
            gpus: 4,
            ..wire()
        })
        .unwrap();
        assert_eq!(v.spec.nodelist, names(&["n1", "n3"]));
        assert_eq!(v.spec.exclude, names(&["n2"]));
        assert_eq!(v.spec.nodes, 2);
        let refused = |wire: SubmitRequest| check(wire).unwrap_err();
        assert_eq!(
            refused(SubmitRequest {
                nodelist: names(&["n1", "n2"]),
                nodes: 3,
                ..wire()
            }),
            "--nodes 3 differs from the 2 nodes of --nodelist (the job runs on \
             each listed node; drop --nodes or list as many nodes)"
        );
        assert_eq!(
            refused(SubmitRequest {
                nodelist: names(&["n1", "n1"]),
                ..wire()
            }),
            "--nodelist names node 'n1' twice"
        );
        assert_eq!(
            refused(SubmitRequest {
                nodelist: names(&["n1"]),
                exclude: names(&["n1"]),
                ..wire()
            }),
            "node 'n1' is both in --nodelist and in --exclude"
        );
        assert!(refused(SubmitRequest {
            exclude: names(&["n\u{7}1"]),
            ..wire()
        })
        .contains("control character"));
        assert!(refused(SubmitRequest {
            nodelist: names(&["n1,n2"]),
            ..wire()
        })
        .contains("is not a node name"));
        assert_eq!(
            refused(SubmitRequest {
                nodelist: (0..10_001).map(|i| format!("n{i}")).collect(),
                ..wire()
            }),
            "nodes of --nodelist or --exclude: 10001; the limit is 10000 \
             (fixed)"
        );
        assert!(refused(SubmitRequest {
            exclude: vec!["n".repeat(300)],
            ..wire()
        })
        .contains("node name is 300 bytes"));
    }

    #[test]
    fn begin_mail_tasks_and_comment_are_checked_and_kept() {
        let v = check(SubmitRequest {
            begin_unix_secs: 1_900_000_000,
            exclusive: true,
            mail_types: names(&["end", "Fail", "ALL"]),
            mail_user: "alice@example.org".into(),
            ntasks_per_node: 8,
            comment: "wckey=vision".into(),
            slurm_env: true,
            open_append: true,
            ..wire()
        })
        .unwrap();
        let s = &v.spec;
        assert_eq!(s.begin_unix_secs, Some(1_900_000_000));
        assert!(s.exclusive && s.slurm_env && s.open_append);
        assert_eq!(
            s.mail_types,
            names(&["BEGIN", "END", "FAIL", "REQUEUE", "INVALID_DEPEND"])
        );
        assert_eq!(
            (s.mail_user.as_str(), s.ntasks_per_node, s.comment.as_str()),
            ("alice@example.org", 8, "wckey=vision")
        );
        let none = check(SubmitRequest {
            mail_types: names(&["NONE"]),
            ..wire()
        })
        .unwrap();
        assert!(none.spec.mail_types.is_empty());
        let refused = |wire: SubmitRequest| check(wire).unwrap_err();
        assert!(refused(SubmitRequest {
            mail_types: names(&["STAGE_OUT"]),
            ..wire()
        })
        .contains("'STAGE_OUT' is not one of NONE, BEGIN"));
        assert!(refused(SubmitRequest {
            mail_types: names(&["NONE", "END"]),
            ..wire()
        })
        .contains("NONE cannot be combined"));
        assert!(refused(SubmitRequest {
            mail_types: names(&["ARRAY_TASKS"]),
            ..wire()
        })
        .contains("needs the events to mail too"));
        assert!(refused(SubmitRequest {
            begin_unix_secs: u64::MAX,
            ..wire()
        })
        .contains("after the year 9999"));
        assert_eq!(
            refused(SubmitRequest {
                ntasks_per_node: 10_001,
                ..wire()
            }),
            "--ntasks-per-node 10001 exceeds the maximum of 10000"
        );
        assert!(refused(SubmitRequest {
            comment: "x".repeat(1025),
            ..wire()
        })
        .contains("comment is 1025 bytes; the limit is 1024"));
        assert!(refused(SubmitRequest {
            comment: "a\nb".into(),
            ..wire()
        })
        .contains("control character"));
        assert!(refused(SubmitRequest {
            mail_user: "a@b\r\nBcc: c@d".into(),
            ..wire()
        })
        .contains("control character"));
        // A program, a file, an option of sendmail's: refused as ysub refuses them.
        for hostile in ["|/tmp/x", "/etc/passwd", "-oQ/tmp", "a@b -oQ/tmp", " -t"] {
            assert_eq!(
                refused(SubmitRequest {
                    mail_user: hostile.into(),
                    ..wire()
                }),
                ysched_common::mail_address::check_mail_user(hostile.trim()).unwrap_err()
            );
        }
        for fine in ["alice", "alice@example.org", " alice@example.org "] {
            let valid = check(SubmitRequest {
                mail_user: fine.into(),
                ..wire()
            })
            .unwrap();
            assert_eq!(valid.spec.mail_user, fine.trim());
        }
        // Mail turned off: refused at once, without looking for sendmail.
        let mut off = config();
        off.notify.sendmail = Default::default();
        let err = validate(
            SubmitRequest {
                mail_types: names(&["END"]),
                ..wire()
            },
            &alice(),
            &off,
        )
        .unwrap_err();
        assert!(
            err.to_string().contains("notify.sendmail is empty"),
            "{err}"
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
            ntasks_per_node: ysched_common::limits::MAX_NTASKS_PER_NODE + 1,
            ..Default::default()
        })
        .unwrap_err();
        assert!(
            err.to_string()
                .contains("--ntasks-per-node 10001 exceeds the maximum of 10000"),
            "{err}"
        );
    }
}
