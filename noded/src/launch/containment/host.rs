//! What noded finds of the host's cgroups at start: the hierarchies mounted and its own
//! cgroups in them, then the root its jobs' cgroups go under (set, or where systemd delegated
//! one) with the controllers their limits need.

use super::mountinfo::{parse_mount, Mount};
use super::{CgroupLayout, CgroupRoot, LimitSource};
use crate::launch::cgroup;
use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// The directory created at the top of the v2 hierarchy (and under noded's v1 cgroups) when
/// no delegated subtree is found.
const DEFAULT_ROOT_NAME: &str = "ysched";

/// This process's cgroup hierarchies.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct HostCgroups {
    pub(super) mounts: Vec<Mount>,
    /// The v2 line of `/proc/self/cgroup`.
    pub(super) own_v2: Option<String>,
    /// The v1 lines: controllers and path.
    pub(super) own_v1: Vec<(Vec<String>, String)>,
}

impl HostCgroups {
    pub(super) fn read() -> io::Result<HostCgroups> {
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo")?;
        let own = std::fs::read_to_string("/proc/self/cgroup")?;
        Ok(HostCgroups::parse(&mountinfo, &own))
    }

    pub(super) fn parse(mountinfo: &str, proc_cgroup: &str) -> HostCgroups {
        let mounts = mountinfo
            .lines()
            .filter_map(parse_mount)
            .filter(|m| m.fstype == "cgroup2" || m.fstype == "cgroup")
            .collect();
        let own_v2 = cgroup::v2_path(proc_cgroup).map(str::to_string);
        let own_v1 = proc_cgroup
            .lines()
            .filter_map(|line| {
                let mut parts = line.splitn(3, ':');
                let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
                (!controllers.is_empty()).then(|| {
                    let controllers = controllers.split(',').map(str::to_string).collect();
                    (controllers, path.to_string())
                })
            })
            .collect();
        HostCgroups {
            mounts,
            own_v2,
            own_v1,
        }
    }

    /// The v2 hierarchy: at `/sys/fs/cgroup` or `/sys/fs/cgroup/unified` if mounted there.
    pub(super) fn v2_mount(&self) -> Option<&Mount> {
        let v2 = || self.mounts.iter().filter(|m| m.fstype == "cgroup2");
        ["/sys/fs/cgroup", "/sys/fs/cgroup/unified"]
            .iter()
            .find_map(|preferred| v2().find(|m| m.point == Path::new(preferred)))
            .or_else(|| v2().next())
    }

    pub(super) fn set_up(
        &self,
        setting: &CgroupRoot,
        pids_max: u64,
    ) -> Result<CgroupLayout, String> {
        let v2 = self
            .v2_mount()
            .ok_or("no cgroup v2 hierarchy is mounted (a cgroup v1-only host)")?;
        if v2.read_only {
            return Err(format!(
                "the cgroup v2 hierarchy at {} is mounted read-only",
                v2.point.display()
            ));
        }
        self.check_own_cgroup_is_visible(v2)?;
        let root = match setting {
            CgroupRoot::At(path) => {
                if !path.starts_with(&v2.point) || path == &v2.point {
                    return Err(format!(
                        "node.cgroup_root {} is not below the cgroup v2 hierarchy at {}",
                        path.display(),
                        v2.point.display()
                    ));
                }
                path.clone()
            }
            _ => detected_root(&v2.point, self.own_v2.as_deref(), has_delegate_mark),
        };
        std::fs::create_dir_all(&root)
            .map_err(|e| format!("cannot create {}: {e}", root.display()))?;
        if !root.join("cgroup.procs").exists() {
            return Err(format!("{} is not a cgroup", root.display()));
        }
        nix::unistd::access(&root, nix::unistd::AccessFlags::W_OK)
            .map_err(|e| format!("cannot write {}: {e}", root.display()))?;
        let relative = root.strip_prefix(&v2.point).unwrap_or(Path::new(""));
        let root_name = Path::new(&v2.root)
            .join(relative)
            .to_string_lossy()
            .into_owned();

        let source = |controller: &str| -> LimitSource {
            let v2_error = match enable_v2_controller(&v2.point, &root, controller) {
                Ok(()) => return LimitSource::V2,
                Err(e) => e,
            };
            match self.v1_base(controller) {
                Ok(base) => LimitSource::V1(base),
                Err(v1_error) => LimitSource::Unavailable(format!("{v2_error}; {v1_error}")),
            }
        };
        Ok(CgroupLayout {
            memory: source("memory"),
            cpu: source("cpu"),
            pids: if pids_max > 0 {
                source("pids")
            } else {
                LimitSource::Unavailable("node.job_pids_max is 0".into())
            },
            root,
            root_name,
            pids_max,
        })
    }

    /// Jobs' processes are recognised by the cgroup `/proc/<pid>/cgroup` names; that name must
    /// lead to the same directory under the mount, or stops would miss them. It does not when
    /// the mount shows another part of the hierarchy than this process's cgroup namespace.
    fn check_own_cgroup_is_visible(&self, v2: &Mount) -> Result<(), String> {
        let own = self.own_v2.as_deref().unwrap_or("");
        let relative = Path::new(own)
            .strip_prefix(&v2.root)
            .unwrap_or(Path::new(own));
        let procs = v2.point.join(relative).join("cgroup.procs");
        let me = std::process::id().to_string();
        let listed = std::fs::read_to_string(&procs)
            .is_ok_and(|pids| pids.lines().any(|pid| pid.trim() == me));
        if listed {
            Ok(())
        } else {
            Err(format!(
                "this process's cgroup {own:?} is not at {} (is the cgroup v2 hierarchy mounted \
                 from another cgroup namespace?)",
                procs.display()
            ))
        }
    }

    /// The directory jobs' cgroups go under in the v1 hierarchy of `controller`: `ysched`
    /// in noded's own cgroup there (created).
    fn v1_base(&self, controller: &str) -> Result<PathBuf, String> {
        let mount = self
            .mounts
            .iter()
            .find(|m| m.fstype == "cgroup" && m.super_options.iter().any(|o| o == controller))
            .ok_or_else(|| format!("no cgroup v1 {controller} hierarchy"))?;
        if mount.read_only {
            return Err(format!("{} is mounted read-only", mount.point.display()));
        }
        let own = self
            .own_v1
            .iter()
            .find(|(controllers, _)| controllers.iter().any(|c| c == controller))
            .map_or("/", |(_, path)| path.as_str());
        // The path is relative to the hierarchy's root, of which the mount may show a subtree.
        let own = Path::new(own)
            .strip_prefix(&mount.root)
            .unwrap_or(Path::new(own));
        let base = mount
            .point
            .join(own.strip_prefix("/").unwrap_or(own))
            .join(DEFAULT_ROOT_NAME);
        std::fs::create_dir_all(&base)
            .map_err(|e| format!("cannot create {}: {e}", base.display()))?;
        Ok(base)
    }
}

/// The root when `node.cgroup_root` is empty: the cgroup systemd delegated to noded's unit
/// when noded runs in a subgroup of it (jobs' cgroups become siblings of noded's), else
/// `ysched` at the top of the hierarchy.
pub(super) fn detected_root(
    mount: &Path,
    own: Option<&str>,
    is_delegated: impl Fn(&Path) -> bool,
) -> PathBuf {
    let own = own.map(|own| own.trim_start_matches('/')).unwrap_or("");
    if !own.is_empty() {
        if let Some(parent) = mount.join(own).parent() {
            if parent != mount && is_delegated(parent) {
                return parent.to_owned();
            }
        }
    }
    mount.join(DEFAULT_ROOT_NAME)
}

/// Whether systemd delegated the cgroup `dir` (`Delegate=yes`): it marks such cgroups with the
/// extended attribute `trusted.delegate` (and, since v253, `user.delegate`) set to "1".
fn has_delegate_mark(dir: &Path) -> bool {
    let Ok(path) = CString::new(dir.as_os_str().as_bytes()) else {
        return false;
    };
    [c"trusted.delegate", c"user.delegate"].iter().any(|name| {
        let mut value = [0u8; 4];
        // SAFETY: getxattr writes at most `value.len()` bytes into the live local buffer.
        let len = unsafe {
            libc::getxattr(
                path.as_ptr(),
                name.as_ptr(),
                value.as_mut_ptr().cast(),
                value.len(),
            )
        };
        len == 1 && value[0] == b'1'
    })
}

/// Makes `controller` available to the children of `root`: enabled in `cgroup.subtree_control`
/// of every cgroup from the top of the hierarchy down to `root`.
fn enable_v2_controller(mount: &Path, root: &Path, controller: &str) -> Result<(), String> {
    let available = std::fs::read_to_string(mount.join("cgroup.controllers")).unwrap_or_default();
    if !available.split_whitespace().any(|c| c == controller) {
        return Err(format!(
            "the cgroup v2 hierarchy at {} has no {controller} controller",
            mount.display()
        ));
    }
    let relative = root.strip_prefix(mount).unwrap_or(Path::new(""));
    let mut dir = mount.to_path_buf();
    let mut levels = vec![dir.clone()];
    for part in relative.components() {
        dir.push(part);
        levels.push(dir.clone());
    }
    for level in levels {
        let control = level.join("cgroup.subtree_control");
        let enabled = std::fs::read_to_string(&control).unwrap_or_default();
        if enabled.split_whitespace().any(|c| c == controller) {
            continue;
        }
        std::fs::write(&control, format!("+{controller}")).map_err(|e| {
            format!(
                "cannot enable the {controller} controller in {}: {e}",
                control.display()
            )
        })?;
    }
    Ok(())
}
