//! The caller's identity on the client socket, from the kernel's peer credentials.

use nix::unistd::{getgrouplist, Gid, Group, Uid, User};
use std::ffi::CString;
use std::path::PathBuf;
use ysched_common::Owner;

/// Maps a uid/gid pair to user and group names; a uid without a passwd entry keeps its number.
pub fn owner_from_cred(uid: u32, gid: u32) -> (Owner, Option<PathBuf>) {
    let user = User::from_uid(Uid::from_raw(uid)).ok().flatten();
    let name = user
        .as_ref()
        .map(|u| u.name.clone())
        .unwrap_or_else(|| uid.to_string());
    let gids: Vec<Gid> = match CString::new(name.clone()) {
        Ok(c) if user.is_some() => {
            getgrouplist(&c, Gid::from_raw(gid)).unwrap_or_else(|_| vec![Gid::from_raw(gid)])
        }
        _ => vec![Gid::from_raw(gid)],
    };
    let mut groups = Vec::with_capacity(gids.len());
    // Primary group first: it is the default account.
    for g in std::iter::once(Gid::from_raw(gid)).chain(gids) {
        let gname = Group::from_gid(g)
            .ok()
            .flatten()
            .map(|g| g.name)
            .unwrap_or_else(|| g.to_string());
        if !groups.contains(&gname) {
            groups.push(gname);
        }
    }
    (
        Owner {
            uid,
            gid,
            user: name,
            groups,
        },
        user.map(|u| u.dir),
    )
}
