//! Power loss for tests: a directory tree rebuilt from only what its daemon fsynced.
//!
//! A [`PowerLoss`] records the tree as it is (the state before the daemon starts counts as
//! durable), gives the environment that loads the shim (tests/powerloss, an `LD_PRELOAD`
//! library recording each `fsync`/`fdatasync`/`syncfs` of a file or directory under the
//! tree), and after the daemon was killed with SIGKILL, [`PowerLoss::cut`] replaces the tree
//! with what a power loss would leave under the strict model: each directory with the entries
//! it had at its last fsync, each file with the contents of its last fsync (a file never
//! synced is empty). Modes and owners are kept from the files as they were.

#[path = "../powerloss/src/record.rs"]
mod record;

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fs;
use std::os::unix::ffi::OsStringExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

const LIBRARY_FILE: &str = "libysched_powerloss.so";

/// The shim, built by `cargo build --workspace` beside the tests.
pub fn library() -> PathBuf {
    ysched_mock_nvml::machine::built_library(LIBRARY_FILE, "ysched-powerloss")
}

/// One tree under simulated power loss.
pub struct PowerLoss {
    root: PathBuf,
    record: PathBuf,
}

/// What [`PowerLoss::cut`] took away, for failure messages.
#[derive(Debug, Default)]
pub struct Cut {
    /// Files and directories that were there and are gone.
    pub gone: Vec<PathBuf>,
    /// Files whose contents went back to an older sync (or to nothing).
    pub rolled_back: Vec<PathBuf>,
}

impl PowerLoss {
    /// Starts recording `root` (created if missing; its contents now count as durable) into
    /// `record`, which must be outside it.
    pub fn new(root: &Path, record: &Path) -> PowerLoss {
        fs::create_dir_all(root).unwrap();
        let root = fs::canonicalize(root).unwrap();
        fs::create_dir_all(record.join("files")).unwrap();
        fs::create_dir_all(record.join("dirs")).unwrap();
        let record = fs::canonicalize(record).unwrap();
        assert!(
            !record.starts_with(&root),
            "the record must be outside the tree"
        );
        record::record_tree(&record, &root).unwrap();
        PowerLoss { root, record }
    }

    /// The environment that makes a daemon record its syncs of the tree.
    pub fn env(&self) -> Vec<(OsString, OsString)> {
        vec![
            ("LD_PRELOAD".into(), library().into_os_string()),
            (record::ROOT_ENV.into(), self.root.clone().into_os_string()),
            (
                record::RECORD_ENV.into(),
                self.record.clone().into_os_string(),
            ),
        ]
    }

    /// Replaces the tree with what was made durable (every process writing it must be dead).
    pub fn cut(&self) -> Cut {
        let rebuilt = self.root.with_extension("after-power-loss");
        let _ = fs::remove_dir_all(&rebuilt);
        let mut cut = Cut::default();
        self.rebuild(&self.root, &rebuilt);
        compare(&self.root, &rebuilt, &mut cut);
        fs::remove_dir_all(&self.root).unwrap();
        fs::rename(&rebuilt, &self.root).unwrap();
        // The rebuilt tree is the new durable state.
        record::record_tree(&self.record, &self.root).unwrap();
        cut
    }

    /// Builds at `out` the durable state of directory `dir`.
    fn rebuild(&self, dir: &Path, out: &Path) {
        fs::create_dir(out).unwrap();
        copy_owner_and_mode(dir, out, 0o755);
        let listing = fs::read_to_string(record::dir_record(&self.record, dir)).unwrap_or_default();
        for line in listing.lines() {
            let mut parts = line.split(' ');
            let (Some(kind), Some(key), Some(name)) = (parts.next(), parts.next(), parts.next())
            else {
                panic!("bad power-loss record line {line:?}");
            };
            let name = PathBuf::from(OsString::from_vec(record::unhex(name).expect("hex name")));
            let (was, now) = (dir.join(&name), out.join(&name));
            match kind {
                "d" => self.rebuild(&was, &now),
                _ => {
                    let contents =
                        fs::read(record::file_record(&self.record, key)).unwrap_or_default();
                    fs::write(&now, contents).unwrap();
                    copy_owner_and_mode(&was, &now, 0o600);
                }
            }
        }
    }
}

fn copy_owner_and_mode(from: &Path, to: &Path, default_mode: u32) {
    match fs::symlink_metadata(from) {
        Ok(meta) => {
            fs::set_permissions(to, fs::Permissions::from_mode(meta.mode() & 0o7777)).unwrap();
            let _ = std::os::unix::fs::lchown(to, Some(meta.uid()), Some(meta.gid()));
        }
        Err(_) => fs::set_permissions(to, fs::Permissions::from_mode(default_mode)).unwrap(),
    }
}

/// Lists what the rebuilt tree lost against the tree as the daemon left it.
fn compare(was: &Path, now: &Path, cut: &mut Cut) {
    let entries = |dir: &Path| -> BTreeMap<OsString, fs::Metadata> {
        fs::read_dir(dir)
            .map(|rd| {
                rd.flatten()
                    .filter_map(|e| Some((e.file_name(), fs::symlink_metadata(e.path()).ok()?)))
                    .collect()
            })
            .unwrap_or_default()
    };
    let after = entries(now);
    for (name, meta) in entries(was) {
        let (w, n) = (was.join(&name), now.join(&name));
        match after.get(&name) {
            None => cut.gone.push(w),
            Some(_) if meta.is_dir() => compare(&w, &n, cut),
            Some(_) if meta.is_file() => {
                if fs::read(&w).ok() != fs::read(&n).ok() {
                    cut.rolled_back.push(w);
                }
            }
            Some(_) => {}
        }
    }
}
