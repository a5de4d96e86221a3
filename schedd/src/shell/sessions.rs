//! The agents' live sessions, one per node name (the first connected keeps it): how each
//! reaches its agent, its relay token, and what relaying a request needs to know of it.

use crate::error::{ApiError, ApiResult};
use crate::state::commands::AgentCommand;
use std::collections::BTreeMap;
use tokio::sync::mpsc;

/// Messages to one agent's session, in the order they must arrive.
pub type AgentTx = mpsc::UnboundedSender<AgentCommand>;

pub(super) struct Session {
    id: u64,
    /// The address the agent's connection comes from: its relayed client requests come on
    /// that connection or carry `relay_token` (see `server::relay`).
    peer: String,
    /// The session's secret, sent to the agent only in its `Registered`: a relayed request
    /// carrying it comes from this agent, on whatever connection (see `server::relay`).
    relay_token: RelayToken,
    tx: AgentTx,
    /// A login agent: it relays clients and runs nothing; its name is no node.
    pub(super) login: bool,
}

/// What relaying a request needs to know of the session that relays it.
#[derive(Debug, Clone, Copy)]
pub struct RelaySession {
    /// A login agent's: it relays every user of its host (a compute node's, only those with
    /// a job running there).
    pub login: bool,
}

/// A session's relay token: 32 random bytes from the kernel (`getrandom`, which needs no file
/// descriptor: it works when a flood has taken them all).
#[derive(Clone, PartialEq, Eq)]
struct RelayToken([u8; 32]);

impl RelayToken {
    fn new() -> ApiResult<RelayToken> {
        let mut bytes = [0u8; 32];
        let mut filled = 0;
        while filled < bytes.len() {
            let rest = &mut bytes[filled..];
            // SAFETY: getrandom writes at most `rest.len()` bytes into `rest`.
            let n = unsafe { libc::getrandom(rest.as_mut_ptr().cast(), rest.len(), 0) };
            match n {
                n if n > 0 => filled += n as usize,
                _ if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted => {}
                _ => {
                    return Err(ApiError::Unavailable(format!(
                        "cannot make a session token: {}",
                        std::io::Error::last_os_error()
                    )))
                }
            }
        }
        Ok(RelayToken(bytes))
    }

    /// Whether `given` is this token, in time independent of where they differ.
    fn matches(&self, given: &[u8]) -> bool {
        given.len() == self.0.len()
            && given
                .iter()
                .zip(&self.0)
                .fold(0u8, |acc, (a, b)| acc | (a ^ b))
                == 0
    }
}

impl std::fmt::Debug for RelayToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RelayToken(..)")
    }
}

/// The live sessions, by node name.
#[derive(Default)]
pub(super) struct Sessions {
    by_name: BTreeMap<String, Session>,
    next_id: u64,
}

impl Sessions {
    /// Two agents under one name would take turns replacing each other's inventory and
    /// failing each other's jobs: the first one connected keeps the name.
    pub(super) fn name_free(&self, name: &str, peer: &str) -> ApiResult<()> {
        match self.live(name) {
            Some(current) => {
                let msg = format!(
                    "node name '{name}' is already in use by the agent connected from {}: \
                     refusing the agent from {peer} (give it another --name)",
                    current.peer
                );
                tracing::error!("{msg}");
                Err(ApiError::AlreadyExists(msg))
            }
            None => Ok(()),
        }
    }

    /// A new session for `name` (its agent at `peer`, reached by `tx`; a login agent with
    /// `login`): its id, and its relay token for the agent's `Registered`.
    pub(super) fn open(
        &mut self,
        name: &str,
        peer: &str,
        tx: AgentTx,
        login: bool,
    ) -> ApiResult<(u64, Vec<u8>)> {
        let relay_token = RelayToken::new()?;
        let token = relay_token.0.to_vec();
        self.next_id += 1;
        let id = self.next_id;
        self.by_name.insert(
            name.to_string(),
            Session {
                id,
                peer: peer.to_string(),
                relay_token,
                tx,
                login,
            },
        );
        Ok((id, token))
    }

    /// Ends every session (a leader stepping down): each agent's stream of commands ends,
    /// and it looks for the leader again.
    pub(super) fn close_all(&mut self) {
        self.by_name.clear();
    }

    /// `name`'s session while its agent is still there.
    fn live(&self, name: &str) -> Option<&Session> {
        self.by_name.get(name).filter(|s| !s.tx.is_closed())
    }

    /// Whether `name`'s agent has a live session.
    pub(super) fn connected(&self, name: &str) -> bool {
        self.live(name).is_some()
    }

    /// The id of `name`'s session, if it has one.
    pub(super) fn id_of(&self, name: &str) -> Option<u64> {
        self.by_name.get(name).map(|s| s.id)
    }

    /// Whether session `id` is `name`'s current one.
    pub(super) fn is_current(&self, name: &str, id: u64) -> bool {
        self.by_name.get(name).is_some_and(|s| s.id == id)
    }

    /// Ends `name`'s session, if it is session `id` (`None`: whichever it is); the ended
    /// session, so that its sender is dropped and its agent sees its stream end.
    pub(super) fn close(&mut self, name: &str, id: Option<u64>) -> Option<Session> {
        if id.is_some_and(|id| !self.is_current(name, id)) {
            return None;
        }
        self.by_name.remove(name)
    }

    /// Sends `message` to `node`'s agent, if it has a session.
    pub(super) fn send(&self, node: &str, message: AgentCommand) {
        if let Some(s) = self.by_name.get(node) {
            let _ = s.tx.send(message);
        }
    }

    /// `node`'s live session, if `peer` is its connection.
    pub(super) fn on_peer(&self, node: &str, peer: &str) -> Option<RelaySession> {
        self.live(node)
            .filter(|s| s.peer == peer)
            .map(|s| RelaySession { login: s.login })
    }

    /// `node`'s live session, if `token` is its relay token.
    pub(super) fn with_token(&self, node: &str, token: &[u8]) -> Option<RelaySession> {
        self.live(node)
            .filter(|s| s.relay_token.matches(token))
            .map(|s| RelaySession { login: s.login })
    }

    /// Whether each live session is a login agent's.
    pub(super) fn live_logins(&self) -> impl Iterator<Item = bool> + '_ {
        self.by_name
            .values()
            .filter(|s| !s.tx.is_closed())
            .map(|s| s.login)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_has_one_live_session_found_by_its_token_or_its_connection() {
        let mut sessions = Sessions::default();
        let (tx, _rx) = mpsc::unbounded_channel();
        let (id, token) = sessions.open("n1", "10.0.0.5:4000", tx, false).unwrap();
        assert_eq!(token.len(), 32);
        assert!(sessions.connected("n1"));
        assert!(sessions.name_free("n1", "10.0.0.6:4000").is_err());
        assert!(sessions.with_token("n1", &token).is_some_and(|s| !s.login));
        assert!(sessions.with_token("n1", &[0; 32]).is_none());
        assert!(sessions.with_token("n2", &token).is_none());
        assert!(sessions.on_peer("n1", "10.0.0.5:4000").is_some());
        assert!(sessions.on_peer("n1", "10.0.0.6:4000").is_none());
        // An older session's end does not end the current one.
        assert!(sessions.close("n1", Some(id + 1)).is_none());
        assert!(sessions.is_current("n1", id));
        assert!(sessions.close("n1", Some(id)).is_some());
        assert!(!sessions.connected("n1"));
        sessions.name_free("n1", "10.0.0.6:4000").unwrap();
        // A session whose agent is gone frees its name.
        let (tx, rx) = mpsc::unbounded_channel();
        let (second, _) = sessions.open("n1", "p", tx, true).unwrap();
        assert!(second > id);
        drop(rx);
        sessions.name_free("n1", "q").unwrap();
        assert!(sessions.with_token("n1", &[0; 32]).is_none());
    }
}
