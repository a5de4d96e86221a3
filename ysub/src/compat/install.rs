//! `yslurm install DIR [--prefix P] [--suffix S]`: links named after Slurm's commands, in
//! DIR, to this binary. A name that another program already has on PATH (a real Slurm's
//! `sbatch`) is refused, naming that program, so that these commands never shadow it: choose
//! a prefix or suffix, or a DIR that only the pipelines that want them put on PATH.
//!
//! Whoever may change DIR may swap the links for programs of their own, which the next
//! pipeline (root's, maybe) runs: DIR is refused when it is a symbolic link, when it or a
//! directory above it belongs to another user than the caller or root, or when group or
//! others may write it (unless it is root's and sticky, as /tmp); an entry already there is
//! kept only when it is a link to this binary, and refused otherwise, never replaced.

use super::TOOLS;
use anyhow::{anyhow, bail, Context, Result};
use clap::Parser;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Parser, Debug)]
#[command(
    name = "yslurm install",
    about = "Make links named after Slurm's commands (sbatch, squeue, scancel, sinfo, sacct, srun) to yslurm in DIR",
    disable_version_flag = true
)]
pub struct InstallCli {
    /// The directory to make the links in (created if missing)
    #[arg(value_name = "DIR")]
    pub dir: PathBuf,
    /// Put this before each name (`--prefix ys-` makes `ys-sbatch`...)
    #[arg(long, value_name = "P", default_value = "")]
    pub prefix: String,
    /// Put this after each name
    #[arg(long, value_name = "S", default_value = "")]
    pub suffix: String,
}

/// The `yslurm install` command.
pub fn main(args: Vec<OsString>) -> ExitCode {
    match crate::args::parse_args_from::<InstallCli>("yslurm install", args) {
        Ok(cli) => match install(&cli, &std::env::var_os("PATH").unwrap_or_default()) {
            Ok(made) => {
                for path in made {
                    println!("{}", path.display());
                }
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("yslurm install: error: {e:#}");
                ExitCode::FAILURE
            }
        },
        Err(code) => code,
    }
}

/// The same file, links followed; a path that cannot be resolved is no match.
fn same_file(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

/// An executable file named `name` in a PATH directory other than `dir`, which is not this
/// binary: what a link of that name would shadow, or be shadowed by.
pub fn other_program(name: &str, path_var: &OsString, dir: &Path, me: &Path) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    std::env::split_paths(path_var)
        .filter(|entry| !entry.as_os_str().is_empty() && !same_file(entry, dir))
        .map(|entry| entry.join(name))
        .find(|candidate| {
            let executable = std::fs::metadata(candidate)
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0);
            executable && !same_file(candidate, me)
        })
}

/// Why `dir` (or a directory above it) would let another user change what is installed in
/// it, for a caller of uid `me`: a symbolic link (only for `dir` itself: `link`), another
/// user's, or writable by group or others without being root's and sticky.
fn unsafe_dir(dir: &Path, meta: &std::fs::Metadata, me: u32, link: bool) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let shown = dir.display();
    if link && meta.file_type().is_symlink() {
        return Some(format!(
            "{shown} is a symbolic link: give the directory itself (links in a directory others \
             may write can be swapped)"
        ));
    }
    if !meta.is_dir() {
        return Some(format!("{shown} is not a directory"));
    }
    if meta.uid() != me && meta.uid() != 0 {
        return Some(format!(
            "{shown} belongs to uid {}: it must be yours or root's, or its owner could swap the \
             links",
            meta.uid()
        ));
    }
    let mode = meta.mode() & 0o7777;
    let sticky_roots = meta.uid() == 0 && mode & 0o1000 != 0;
    if mode & 0o022 != 0 && !sticky_roots {
        return Some(format!(
            "{shown} is mode {mode:04o}: others may write it (and swap the links); make it \
             writable by its owner only (chmod go-w {shown}) or choose another directory"
        ));
    }
    None
}

/// Refuses `dir` when another user could change what is installed there (see the module
/// docs): `dir` itself if it exists, and every directory above it that exists.
fn check_dir(dir: &Path, me: u32) -> Result<()> {
    let refuse = |why: String| anyhow!("{why}; nothing was installed");
    if let Ok(meta) = std::fs::symlink_metadata(dir) {
        if let Some(why) = unsafe_dir(dir, &meta, me, true) {
            return Err(refuse(why));
        }
    }
    let absolute = std::path::absolute(dir).with_context(|| format!("{}", dir.display()))?;
    // The directories above, as they really are (links in the path resolved).
    let mut above = absolute.parent();
    while let Some(parent) = above {
        if let Ok(real) = parent.canonicalize() {
            for ancestor in real.ancestors() {
                let meta = std::fs::metadata(ancestor)
                    .with_context(|| format!("cannot look at {}", ancestor.display()))?;
                if let Some(why) = unsafe_dir(ancestor, &meta, me, false) {
                    return Err(refuse(why));
                }
            }
            break;
        }
        above = parent.parent();
    }
    Ok(())
}

/// Whether the existing entry `link` may be kept: a symbolic link whose target is this
/// binary, `me`, exactly (a target through other directories could be swapped); refused,
/// with why, otherwise.
fn kept_entry(link: &Path, me: &Path) -> Result<bool> {
    let Ok(meta) = std::fs::symlink_metadata(link) else {
        return Ok(false);
    };
    if !meta.file_type().is_symlink() {
        bail!(
            "{} exists and is not a link to yslurm; nothing was installed",
            link.display()
        );
    }
    let target = std::fs::read_link(link).with_context(|| format!("{}", link.display()))?;
    if target != me {
        bail!(
            "{} is a symbolic link to {}, not to yslurm; nothing was installed",
            link.display(),
            target.display()
        );
    }
    Ok(true)
}

/// Makes the links, all or none: every name is checked before the first is made. Returns
/// the links made (an existing link to this binary is kept and listed).
pub fn install(cli: &InstallCli, path_var: &OsString) -> Result<Vec<PathBuf>> {
    let me = std::env::current_exe().context("cannot find the yslurm binary")?;
    let me = me.canonicalize().unwrap_or(me);
    let uid = nix::unistd::geteuid().as_raw();
    check_dir(&cli.dir, uid)?;
    for part in [&cli.prefix, &cli.suffix] {
        if part.contains('/') || part.contains('\0') {
            bail!("--prefix and --suffix may not contain '/': got '{part}'");
        }
    }
    let names: Vec<String> = TOOLS
        .iter()
        .map(|tool| format!("{}{tool}{}", cli.prefix, cli.suffix))
        .collect();
    for name in &names {
        if super::tool_for_program_name(name).is_none() {
            bail!(
                "'{name}' would not be recognised as a Slurm command: set the prefix or suffix \
                 off with a character that is not a letter or digit (e.g. --prefix ys-)"
            );
        }
        if let Some(other) = other_program(name, path_var, &cli.dir, &me) {
            bail!(
                "{} is on PATH (a real Slurm?): a '{name}' from yslurm would shadow it or be \
                 shadowed by it; nothing was installed. Choose a prefix or suffix, e.g. \
                 `yslurm install {} --prefix ys-`",
                other.display(),
                cli.dir.display()
            );
        }
        kept_entry(&cli.dir.join(name), &me)?;
    }
    // 0755 whatever the umask (one that left it group-writable would be refused next time).
    ysched_common::durable::create_dir_all_with_mode(&cli.dir, 0o755)
        .with_context(|| format!("cannot create {}", cli.dir.display()))?;
    // Again, as made: a link planted meanwhile where the directory was missing is refused.
    check_dir(&cli.dir, uid)?;
    let mut made = Vec::new();
    for name in &names {
        let link = cli.dir.join(name);
        if !kept_entry(&link, &me)? {
            // Never replaces anything: an entry made meanwhile fails it (EEXIST).
            std::os::unix::fs::symlink(&me, &link)
                .with_context(|| format!("cannot make {}", link.display()))?;
        }
        made.push(link);
    }
    Ok(made)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn cli(dir: &Path, prefix: &str) -> InstallCli {
        InstallCli {
            dir: dir.to_path_buf(),
            prefix: prefix.into(),
            suffix: String::new(),
        }
    }

    #[test]
    fn installs_links_and_refuses_to_shadow_another_program() {
        let tmp = tempfile::tempdir().unwrap();
        let bin = tmp.path().join("bin");
        let slurm = tmp.path().join("slurm");
        std::fs::create_dir_all(&slurm).unwrap();
        let path_var: OsString = std::env::join_paths([&bin, &slurm]).unwrap();

        let made = install(&cli(&bin, ""), &path_var).unwrap();
        assert_eq!(made.len(), TOOLS.len());
        assert!(same_file(
            &bin.join("sbatch"),
            &std::env::current_exe().unwrap()
        ));
        // Again: the links are there already, nothing changes.
        assert_eq!(install(&cli(&bin, ""), &path_var).unwrap(), made);

        // A real sbatch elsewhere on PATH: refused, naming it, nothing made.
        let real = slurm.join("sbatch");
        std::fs::write(&real, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o755)).unwrap();
        let other = tmp.path().join("other");
        let err = install(&cli(&other, ""), &path_var)
            .unwrap_err()
            .to_string();
        assert!(err.contains(&real.display().to_string()), "{err}");
        assert!(err.contains("--prefix ys-"), "{err}");
        assert!(!other.exists());
        // With a prefix it goes in.
        let made = install(&cli(&other, "ys-"), &path_var).unwrap();
        assert!(made[0].ends_with("ys-sbatch"));

        // A file of that name that is not ours is left alone.
        let taken = tmp.path().join("taken");
        std::fs::create_dir_all(&taken).unwrap();
        std::fs::write(taken.join("squeue"), "x").unwrap();
        let err = install(&cli(&taken, ""), &OsString::new())
            .unwrap_err()
            .to_string();
        assert!(err.contains("is not a link to yslurm"), "{err}");
        assert!(install(&cli(&taken, "ys"), &OsString::new()).is_err());
    }

    #[test]
    fn refuses_a_link_an_open_directory_and_a_foreign_entry() {
        let tmp = tempfile::tempdir().unwrap();
        let set = |p: &Path, mode: u32| {
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap()
        };
        let none = OsString::new();
        let real = tmp.path().join("real");
        std::fs::create_dir(&real).unwrap();
        let link = tmp.path().join("link");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let err = install(&cli(&link, ""), &none).unwrap_err().to_string();
        assert_eq!(
            err,
            format!(
                "{} is a symbolic link: give the directory itself (links in a directory others \
                 may write can be swapped); nothing was installed",
                link.display()
            )
        );
        assert_eq!(std::fs::read_dir(&real).unwrap().count(), 0);

        // Writable by group or others: refused, itself or above the directory made.
        for mode in [0o777, 0o775, 0o757] {
            set(&real, mode);
            let err = install(&cli(&real, ""), &none).unwrap_err().to_string();
            assert!(
                err.starts_with(&format!(
                    "{} is mode {mode:04o}: others may write",
                    real.display()
                )),
                "{err}"
            );
            let below = real.join("bin");
            let err = install(&cli(&below, ""), &none).unwrap_err().to_string();
            assert!(
                err.contains(&format!("{} is mode", real.display())),
                "{err}"
            );
            assert!(!below.exists());
        }
        set(&real, 0o755);
        // Made where it was missing: 0755, whatever the umask.
        let below = real.join("a/bin");
        install(&cli(&below, ""), &none).unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode(&below), 0o755);

        // An entry that links elsewhere is refused, never replaced.
        let entries = tmp.path().join("entries");
        std::fs::create_dir(&entries).unwrap();
        std::os::unix::fs::symlink("/bin/true", entries.join("sinfo")).unwrap();
        let err = install(&cli(&entries, ""), &none).unwrap_err().to_string();
        assert_eq!(
            err,
            format!(
                "{} is a symbolic link to /bin/true, not to yslurm; nothing was installed",
                entries.join("sinfo").display()
            )
        );
        assert_eq!(std::fs::read_dir(&entries).unwrap().count(), 1);
    }
}
