//! A client's identity from the kernel's peer credentials (uid and gid on a Unix socket):
//! user and group names from the name service, as schedd and every agent's client socket
//! see it.

use crate::Owner;

/// The gRPC metadata key (binary: its value is an encoded `RelayedCaller`) in which a node
/// agent names the caller of a client request it relays to schedd.
pub const RELAYED_CALLER_METADATA: &str = "ysched-caller-bin";
use nix::unistd::{getgrouplist, Gid, Group, Uid, User};
use std::collections::HashMap;
use std::ffi::CString;
use std::path::PathBuf;
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

/// How long a looked-up identity is reused: the name service (passwd, group, perhaps LDAP
/// through NSS) is asked at most this often per uid/gid pair, not on every request, and a
/// change of groups applies within this time (as behind nscd or sssd, which cache longer).
const IDENTITY_TTL: Duration = Duration::from_secs(5);

type Identity = (Owner, Option<PathBuf>);

/// Identities looked up, by uid and gid, with when.
type Known = Mutex<HashMap<(u32, u32), (Instant, Identity)>>;

/// Maps a uid/gid pair to user and group names; a uid without a passwd entry keeps its number.
/// Answers are kept for [`IDENTITY_TTL`].
pub fn owner_from_cred(uid: u32, gid: u32) -> Identity {
    static KNOWN: OnceLock<Known> = OnceLock::new();
    let known = KNOWN.get_or_init(Default::default);
    let now = Instant::now();
    let lock = || known.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some((at, identity)) = lock().get(&(uid, gid)) {
        if now.duration_since(*at) < IDENTITY_TTL {
            return identity.clone();
        }
    }
    // Looked up without the lock: a slow name service stalls only this caller.
    let identity = look_up(uid, gid);
    let mut known = lock();
    if known.len() >= 4096 {
        known.clear();
    }
    known.insert((uid, gid), (now, identity.clone()));
    identity
}

fn look_up(uid: u32, gid: u32) -> Identity {
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
