//! `yslurm install DIR [--prefix P] [--suffix S]`: links named after Slurm's commands, in
//! DIR, to this binary. A name that another program already has on PATH (a real Slurm's
//! `sbatch`) is refused, naming that program, so that these commands never shadow it: choose
//! a prefix or suffix, or a DIR that only the pipelines that want them put on PATH.

use super::TOOLS;
use anyhow::{bail, Context, Result};
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

/// Makes the links, all or none: every name is checked before the first is made. Returns
/// the links made (an existing link to this binary is kept and listed).
pub fn install(cli: &InstallCli, path_var: &OsString) -> Result<Vec<PathBuf>> {
    let me = std::env::current_exe().context("cannot find the yslurm binary")?;
    let me = me.canonicalize().unwrap_or(me);
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
        let link = cli.dir.join(name);
        if std::fs::symlink_metadata(&link).is_ok() && !same_file(&link, &me) {
            bail!(
                "{} exists and is not a link to yslurm; nothing was installed",
                link.display()
            );
        }
    }
    std::fs::create_dir_all(&cli.dir)
        .with_context(|| format!("cannot create {}", cli.dir.display()))?;
    let mut made = Vec::new();
    for name in &names {
        let link = cli.dir.join(name);
        if !same_file(&link, &me) {
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
}
