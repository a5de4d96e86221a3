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

/// Answers remembered for [`IDENTITY_TTL`]: at most 4,096 (then forgotten all at once), so
/// that no number of callers grows them.
struct Remembered<K, V>(OnceLock<Mutex<HashMap<K, (Instant, V)>>>);

impl<K: std::hash::Hash + Eq, V: Clone> Remembered<K, V> {
    const fn new() -> Self {
        Remembered(OnceLock::new())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<K, (Instant, V)>> {
        self.0
            .get_or_init(Default::default)
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// `key`'s answer, when it is younger than [`IDENTITY_TTL`].
    fn get<Q: std::hash::Hash + Eq + ?Sized>(&self, key: &Q) -> Option<V>
    where
        K: std::borrow::Borrow<Q>,
    {
        let known = self.lock();
        let (at, value) = known.get(key)?;
        (at.elapsed() < IDENTITY_TTL).then(|| value.clone())
    }

    /// Remembers `value` for `key`, as found at `at`.
    fn insert(&self, key: K, at: Instant, value: V) {
        let mut known = self.lock();
        if known.len() >= 4096 {
            known.clear();
        }
        known.insert(key, (at, value));
    }
}

/// Identities looked up, by uid and gid.
static IDENTITIES: Remembered<(u32, u32), Identity> = Remembered::new();

/// Homes found to be directories.
static HOMES: Remembered<PathBuf, ()> = Remembered::new();

/// Maps a uid/gid pair to user and group names; a uid without a passwd entry keeps its number.
/// Answers are kept for [`IDENTITY_TTL`].
pub fn owner_from_cred(uid: u32, gid: u32) -> Identity {
    if let Some(identity) = known_identity(uid, gid) {
        return identity;
    }
    // Looked up without the lock: a slow name service stalls only this caller.
    let now = Instant::now();
    let identity = look_up(uid, gid);
    IDENTITIES.insert((uid, gid), now, identity.clone());
    identity
}

/// The identity of `uid`/`gid` when [`owner_from_cred`] looked it up less than
/// [`IDENTITY_TTL`] ago: answered from memory, so a caller on an async runtime asks a blocking
/// thread (one more hand-off per request) only when the name service must be asked.
pub fn known_identity(uid: u32, gid: u32) -> Option<Identity> {
    IDENTITIES.get(&(uid, gid))
}

/// Whether `home` is a directory, looked at now; a yes is remembered for [`IDENTITY_TTL`] (see
/// [`known_home_dir`]). May block (a hanging automount): not for an async runtime's workers.
pub fn home_is_dir(home: &std::path::Path) -> bool {
    let found = home.is_dir();
    if found {
        HOMES.insert(home.to_path_buf(), Instant::now(), ());
    }
    found
}

/// Whether [`home_is_dir`] found `home` a directory less than [`IDENTITY_TTL`] ago: answered
/// from memory, without touching the file system.
pub fn known_home_dir(home: &std::path::Path) -> bool {
    HOMES.get(home).is_some()
}

/// [`owner_from_cred`] for a caller on an async runtime: from memory when known, else on a
/// blocking thread (the name service may be slow: LDAP).
pub async fn identity_off_runtime(uid: u32, gid: u32) -> Result<Identity, tonic::Status> {
    match known_identity(uid, gid) {
        Some(identity) => Ok(identity),
        None => tokio::task::spawn_blocking(move || owner_from_cred(uid, gid))
            .await
            .map_err(|e| tonic::Status::internal(format!("identity lookup failed: {e}"))),
    }
}

/// The largest caller identity (the encoded `RelayedCaller`: names, groups, home) a relayed
/// or forwarded request carries. It travels base64-encoded in a header, and schedd takes
/// header lists of at most 16 KiB; a user in so many groups is refused instead, with a
/// message.
pub const MAX_CALLER_BYTES: usize = 8 * 1024;

/// Who hands a caller's request on: a node's agent relaying it to schedd, or a follower
/// replica forwarding it to the leader.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hop {
    Relay,
    Forward,
}

/// Who hands a caller on, and with what (the fields of `RelayedCaller` beside the caller's
/// own).
#[derive(Debug, Clone, Default)]
pub struct Handover {
    /// The relaying agent's node; empty for a replica's forwarding.
    pub node: String,
    /// The agent session's relay token, or the replicas' forwarding token.
    pub relay_token: Vec<u8>,
    /// The forwarding replica's place; 0: relayed by an agent.
    pub forwarded_by_replica: u64,
    /// On a compute node: a job of the caller's running there; 0: none.
    pub job_id: u64,
}

/// The caller `uid`/`gid`, as the kernel named it, with its names looked up (on a blocking
/// thread: the name service may be slow, LDAP), in the `RelayedCaller` that `hop` sends with
/// `handover`, encoded (see [`encode_caller`]).
pub async fn relayed_caller(
    uid: u32,
    gid: u32,
    hop: Hop,
    handover: Handover,
) -> Result<Vec<u8>, tonic::Status> {
    let Handover {
        node,
        relay_token,
        forwarded_by_replica,
        job_id,
    } = handover;
    let (owner, home) = identity_off_runtime(uid, gid).await?;
    let caller = ysched_proto::RelayedCaller {
        node,
        uid,
        gid,
        user: owner.user,
        groups: owner.groups,
        home: home
            .map(|h| h.to_string_lossy().into_owned())
            .unwrap_or_default(),
        relay_token,
        forwarded_by_replica,
        job_id,
    };
    encode_caller(&caller, hop)
}

/// `caller` as `hop`'s header carries it, or a refusal naming its size when it is larger than
/// [`MAX_CALLER_BYTES`].
pub fn encode_caller(
    caller: &ysched_proto::RelayedCaller,
    hop: Hop,
) -> Result<Vec<u8>, tonic::Status> {
    use prost::Message;
    let encoded = caller.encode_to_vec();
    if encoded.len() <= MAX_CALLER_BYTES {
        return Ok(encoded);
    }
    let (action, to, carried, instead) = match hop {
        Hop::Relay => ("relay", "schedd", "relayed", "the schedd host"),
        Hop::Forward => ("forward", "the leader", "forwarded", "the leader's host"),
    };
    Err(tonic::Status::invalid_argument(format!(
        "cannot {action} a request of uid {} to {to}: its identity (user name, {} groups, \
         home) takes {} bytes, more than the {MAX_CALLER_BYTES} a {carried} request may carry; \
         run the command on {instead}",
        caller.uid,
        caller.groups.len(),
        encoded.len()
    )))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_identity_too_large_for_a_header_is_refused_with_its_size_and_hop() {
        let mut caller = ysched_proto::RelayedCaller {
            node: "login1".into(),
            uid: 1234,
            gid: 1234,
            user: "alice".into(),
            groups: (0..100).map(|i| format!("group-{i}")).collect(),
            home: "/home/alice".into(),
            relay_token: vec![7; 32],
            forwarded_by_replica: 0,
            job_id: 0,
        };
        assert!(encode_caller(&caller, Hop::Relay).is_ok());
        caller.groups = (0..2000).map(|i| format!("research-group-{i}")).collect();
        for (hop, start, end) in [
            (
                Hop::Relay,
                "cannot relay a request of uid 1234 to schedd: its identity (user name, 2000 \
                 groups, home) takes ",
                "a relayed request may carry; run the command on the schedd host",
            ),
            (
                Hop::Forward,
                "cannot forward a request of uid 1234 to the leader: its identity (user name, \
                 2000 groups, home) takes ",
                "a forwarded request may carry; run the command on the leader's host",
            ),
        ] {
            let status = encode_caller(&caller, hop).unwrap_err();
            assert_eq!(status.code(), tonic::Code::InvalidArgument);
            assert!(status.message().starts_with(start), "{}", status.message());
            assert!(status.message().ends_with(end), "{}", status.message());
        }
    }

    #[test]
    fn an_identity_and_a_home_looked_up_are_then_known_without_a_look() {
        let (uid, gid) = (
            nix::unistd::getuid().as_raw(),
            nix::unistd::getgid().as_raw(),
        );
        let looked_up = owner_from_cred(uid, gid);
        assert_eq!(known_identity(uid, gid), Some(looked_up));
        // A pair nobody looked up is not known.
        assert_eq!(known_identity(4_000_000_001, 4_000_000_001), None);

        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("home");
        assert!(!known_home_dir(&home));
        // Not a directory: looked at each time, never remembered.
        assert!(!home_is_dir(&home));
        assert!(!known_home_dir(&home));
        std::fs::create_dir(&home).unwrap();
        assert!(home_is_dir(&home));
        assert!(known_home_dir(&home));
    }
}
