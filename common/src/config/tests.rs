//! Tests of the config: defaults, overrides, and what a config must satisfy.

use super::*;

#[test]
fn defaults_and_overrides() {
    let c = Config::parse("").unwrap();
    assert_eq!(c, Config::default());
    assert_eq!(c.tier_names(), ["critical", "high", "medium", "low"]);
    let c =
        Config::parse("[scheduler]\nlisten = \"127.0.0.1:9\"\n[node]\nspool_dir = \"/tmp/s\"\n")
            .unwrap();
    assert_eq!(c.scheduler.listen, "127.0.0.1:9");
    assert_eq!(c.node.spool_dir, PathBuf::from("/tmp/s"));
    assert_eq!(c.tiers.len(), 4);
}

#[test]
fn the_shipped_example_is_the_defaults() {
    let example = include_str!("../../../docs/ysched.toml.example");
    assert_eq!(Config::parse(example).unwrap(), Config::default());
}

#[test]
fn ca_paths_sit_beside_the_cluster_key_unless_given() {
    let c = Config::default();
    assert_eq!(
        c.ca_cert_path(),
        PathBuf::from("/etc/ysched/cluster-ca.crt")
    );
    assert_eq!(c.ca_key_path(), PathBuf::from("/etc/ysched/cluster-ca.key"));
    let c = Config::parse("[scheduler]\nca_file = \"/x/ca.pem\"\n").unwrap();
    assert_eq!(c.ca_key_path(), PathBuf::from("/x/ca.key"));
    assert!(Config::parse("[scheduler]\nmax_script_mib = 0\n").is_err());
    assert!(Config::parse("[scheduler]\nmax_launch_attempts = 0\n").is_err());
}

#[test]
fn cgroup_root_is_detect_none_or_an_absolute_path() {
    for ok in ["", "none", "/sys/fs/cgroup/ysched"] {
        let c = Config::parse(&format!("[node]\ncgroup_root = {ok:?}\n")).unwrap();
        assert_eq!(c.node.cgroup_root, ok);
    }
    let err = Config::parse("[node]\ncgroup_root = \"ysched\"\n").unwrap_err();
    assert!(err.contains("absolute path"), "{err}");
}

#[test]
fn administrators_are_local_root_the_admin_group_and_root_of_admin_hosts() {
    let c = Config::parse("[scheduler]\nadmin_group = \"hpcadmin\"\nadmin_hosts = [\"login1\"]\n")
        .unwrap();
    let who = |uid, groups: &[&str]| crate::Owner {
        uid,
        gid: uid,
        user: if uid == 0 {
            "root".into()
        } else {
            "alice".into()
        },
        groups: groups.iter().map(|g| g.to_string()).collect(),
    };
    assert!(c.is_admin(&who(0, &["root"]), None));
    assert!(c.is_admin(&who(0, &["root"]), Some("login1")));
    assert!(!c.is_admin(&who(0, &["root"]), Some("n7")));
    assert!(!c.is_admin(&who(1000, &["alice"]), None));
    assert!(c.is_admin(&who(1000, &["alice", "hpcadmin"]), Some("n7")));
    assert!(c.is_admin(&who(1000, &["hpcadmin"]), None));
    // Without an admin group, no group makes an administrator.
    let plain = Config::default();
    assert!(!plain.is_admin(&who(1000, &[""]), None));
    assert!(!plain.is_admin(&who(0, &["root"]), Some("login1")));
}

#[test]
fn node_role_fence_and_nvml_library_are_checked() {
    assert!(Config::parse("[node]\nrole = \"login\"\n").is_ok());
    let err = Config::parse("[node]\nrole = \"gpu\"\n").unwrap_err();
    assert!(err.contains("node.role"), "{err}");
    assert!(Config::parse("[node]\nfence_after_secs = 0\n").is_ok());
    for ok in ["", "libnvidia-ml.so.1", "/opt/nvidia/lib/libnvidia-ml.so.1"] {
        let c = Config::parse(&format!("[node]\nnvml_library = {ok:?}\n")).unwrap();
        assert_eq!(c.node.nvml_library, PathBuf::from(ok));
    }
    let err = Config::parse("[node]\nnvml_library = \"lib/libnvidia-ml.so.1\"\n").unwrap_err();
    assert!(err.contains("node.nvml_library"), "{err}");
    let err = Config::parse("[node]\nfence_after_secs = 10\n").unwrap_err();
    assert!(err.contains("heartbeat_secs"), "{err}");
}

#[test]
fn gpu_health_interval_defaults_and_is_bounded() {
    assert_eq!(
        Config::default().node.gpu_health_secs,
        DEFAULT_GPU_HEALTH_SECS
    );
    let off = Config::parse("[node]\ngpu_health_secs = 0\n").unwrap();
    assert_eq!(off.node.gpu_health_secs, 0);
    let err = Config::parse("[node]\ngpu_health_secs = 86401\n").unwrap_err();
    assert!(err.contains("node.gpu_health_secs = 86401"), "{err}");
}

#[test]
fn connection_limits_are_at_least_one() {
    let c = Config::default();
    assert_eq!(c.scheduler.max_connections_per_user, 64);
    assert_eq!(c.node.max_client_connections, 1024);
    let err = Config::parse("[scheduler]\nmax_connections_per_user = 0\n").unwrap_err();
    assert!(err.contains("scheduler.max_connections_per_user"), "{err}");
    let err = Config::parse("[node]\nmax_client_connections = 0\n").unwrap_err();
    assert!(err.contains("node.max_client_connections"), "{err}");
}

#[test]
fn heartbeats_and_timeouts_must_make_sense() {
    for (toml, wanted) in [
        (
            "heartbeat_secs = 0",
            "scheduler.heartbeat_secs = 0 is out of range",
        ),
        (
            "node_timeout_secs = 0",
            "scheduler.node_timeout_secs = 0 must be at least",
        ),
        (
            "heartbeat_secs = 20\nnode_timeout_secs = 10",
            "scheduler.node_timeout_secs = 10 must be at least scheduler.heartbeat_secs = 20",
        ),
        (
            "max_jobs_per_user = 0",
            "max_jobs_per_user must be at least 1",
        ),
    ] {
        let err = Config::parse(&format!(
            "[scheduler]\n{toml}\n[node]\nfence_after_secs = 0\n"
        ))
        .unwrap_err();
        assert!(err.contains(wanted), "{toml}: {err}");
    }
    assert!(Config::parse("[scheduler]\nheartbeat_secs = 2\nnode_timeout_secs = 2\n").is_ok());
}

#[test]
fn names_in_the_config_are_bounded_like_names_in_requests() {
    let long = "a".repeat(200);
    let err = Config::parse(&format!("[accounts.{long}]\n")).unwrap_err();
    assert!(
        err.contains("account is 200 bytes; the limit is 128 (fixed)"),
        "{err}"
    );
    assert!(err.len() < 200, "{err}");
}

#[test]
fn rejects_typos_and_bad_tiers() {
    assert!(Config::parse("[scheduler]\nlisten_addr = \"x\"\n").is_err());
    assert!(Config::parse("[tiers.a]\nvalue = 1\n").is_err()); // default tier missing
    assert!(Config::parse(
        "[scheduler]\ndefault_tier = \"a\"\n[tiers.a]\nvalue = 1\ndefault_grace = 400\n"
    )
    .is_err());
}

#[test]
fn slurm_names_map_to_configured_tiers_only() {
    let c = Config::parse(
        "[slurm]\npartitions = { gpu = \"high\", debug = \"low\" }\nqos = { normal = \"medium\" }\n",
    )
    .unwrap();
    assert_eq!(c.slurm.partitions["gpu"], "high");
    assert_eq!(
        c.tier_of_slurm_name(SlurmName::Partition, "gpu").unwrap(),
        "high"
    );
    // A tier's own name needs no entry, in any case.
    assert_eq!(c.tier_of_slurm_name(SlurmName::Qos, "LOW").unwrap(), "low");
    let err = c
        .tier_of_slurm_name(SlurmName::Partition, "cpu")
        .unwrap_err();
    assert_eq!(
        err,
        "unknown partition 'cpu' (tiers: critical, high, medium, low; mapped partition \
         names: debug, gpu)"
    );
    let err = Config::default()
        .tier_of_slurm_name(SlurmName::Qos, "normal")
        .unwrap_err();
    assert!(err.contains("none in slurm.qos"), "{err}");
    let err = Config::parse("[slurm]\npartitions = { gpu = \"huge\" }\n").unwrap_err();
    assert!(
        err.contains("slurm.partitions.gpu = \"huge\" is not a defined tier"),
        "{err}"
    );
    let err = Config::parse("[slurm]\nqos = { \"a\\u0007\" = \"low\" }\n").unwrap_err();
    assert!(err.contains("slurm.qos"), "{err}");
    assert!(Config::parse("[slurm]\nfoo = 1\n").is_err());
}

#[test]
fn sendmail_defaults_to_the_usual_path_and_may_be_turned_off() {
    let c = Config::default();
    assert_eq!(
        c.notify.sendmail(),
        Some(std::path::Path::new("/usr/sbin/sendmail"))
    );
    let c = Config::parse("[notify]\nsendmail = \"\"\n").unwrap();
    assert_eq!(c.notify.sendmail(), None);
    let err = Config::parse("[notify]\nsendmail = \"sendmail\"\n").unwrap_err();
    assert!(err.contains("absolute path"), "{err}");
}

#[test]
fn the_mail_queue_is_bounded_in_all_and_per_user() {
    let c = Config::default();
    assert_eq!(
        (
            c.notify.max_queued,
            c.notify.max_queued_per_user,
            c.notify.max_per_user_per_minute
        ),
        (1000, 100, 60)
    );
    let c = Config::parse("[notify]\nmax_queued = 50\nmax_queued_per_user = 50\n").unwrap();
    assert_eq!(c.notify.max_queued_per_user, 50);
    assert_eq!(
        Config::parse("[notify]\nmax_queued_per_user = 1001\n").unwrap_err(),
        "notify.max_queued_per_user = 1001 must be at most notify.max_queued = 1000 (one \
         user's share of the queue)"
    );
    assert_eq!(
        Config::parse("[notify]\nmax_per_user_per_minute = 0\n").unwrap_err(),
        "notify.max_per_user_per_minute must be at least 1"
    );
}

#[test]
fn replicas_are_none_or_three_five_or_seven_distinct_addresses() {
    let three = "replicas = [\"h1:7400\", \"h2:7400\", \"10.0.0.3:7400\"]\n";
    let c = Config::parse(&format!("[scheduler]\n{three}")).unwrap();
    assert_eq!(c.replica_place(2).unwrap(), Some("h2:7400"));
    let err = c.replica_place(0).unwrap_err();
    assert!(err.contains("--replica"), "{err}");
    let err = c.replica_place(4).unwrap_err();
    assert!(err.contains("1 to 3"), "{err}");
    assert_eq!(Config::default().replica_place(0).unwrap(), None);
    let c = Config::parse(&format!("[scheduler]\n{three}replica = 3\n")).unwrap();
    assert_eq!(c.scheduler.replica, 3);
    for (bad, why) in [
        ("replicas = [\"h1:1\", \"h2:1\"]\n", "3, 5 or 7"),
        ("replicas = [\"h1:1\", \"h2:1\", \"h1:1\"]\n", "twice"),
        ("replicas = [\"h1:1\", \"h2:1\", \"h3\"]\n", "host:port"),
        ("replicas = [\"h1:1\", \"h2:1\", \":7\"]\n", "host:port"),
        ("replicas = [\"h1:1\", \"h2:1\", \"h3:0\"]\n", "host:port"),
        ("replica = 2\n", "needs scheduler.replicas"),
    ] {
        let err = Config::parse(&format!("[scheduler]\n{bad}")).unwrap_err();
        assert!(err.contains(why), "{bad}: {err}");
    }
    let err = Config::parse(&format!("[scheduler]\n{three}replica = 4\n")).unwrap_err();
    assert!(err.contains("not among"), "{err}");
}
