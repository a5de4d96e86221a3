//! What the answers a daemon has made and its clients have not read yet may hold: at most
//! [`limits::UNREAD_ANSWERS_PER_CONNECTION`] per client connection,
//! [`limits::UNREAD_ANSWERS_PER_USER`] per user (uid) and [`limits::UNREAD_ANSWERS`] in all.
//! An answer's bytes are reserved ([`AnswerBudget::reserve`]) before it is handed to its
//! connection, and given back when the [`Reservation`] is dropped: with the answer's body, once
//! it is sent or the client is gone. A request past a cap is refused with `RESOURCE_EXHAUSTED`
//! ([`Refusal`]), naming the cap and what to do; a client that asks and never reads so holds
//! its caps' worth, never more, and slows nobody else.
//!
//! The last [`limits::UNREAD_ANSWERS_KEPT_FOR_SMALL`] of the total goes only to users who hold
//! at most [`limits::SMALL_ANSWERS_HOLDER`] (the answer asked for included): however many users
//! fill the rest, another's `yq --me` or `ysub` still gets its answer.
//!
//! Both daemons' client doors use one: schedd for what it answers (its own socket, and the
//! requests agents relay, whose caller is the user they name), noded for what it relays.

use super::peer_log;
use crate::limits;
use crate::parse::format_size;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

/// Metadata a node's relay adds to a request whose answer may be large: the room (bytes) it
/// reserved for the answer, so that schedd makes a page of a listing that fits it rather than
/// one the relay would have to refuse.
pub const ANSWER_ROOM_METADATA: &str = "ysched-answer-room";

/// The caps of one daemon's budget (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caps {
    pub per_connection: u64,
    pub per_user: u64,
    pub total: u64,
    /// The part of `total` only users holding at most `small_holder` may use.
    pub kept_for_small: u64,
    pub small_holder: u64,
}

impl Default for Caps {
    /// The caps of `common::limits`.
    fn default() -> Self {
        Caps {
            per_connection: limits::UNREAD_ANSWERS_PER_CONNECTION.max,
            per_user: limits::UNREAD_ANSWERS_PER_USER.max,
            total: limits::UNREAD_ANSWERS.max,
            kept_for_small: limits::UNREAD_ANSWERS_KEPT_FOR_SMALL,
            small_holder: limits::SMALL_ANSWERS_HOLDER,
        }
    }
}

/// One daemon's budget of answers not yet read, shared by its client doors.
#[derive(Debug, Clone)]
pub struct AnswerBudget(Arc<Shared>);

#[derive(Debug)]
struct Shared {
    caps: Caps,
    /// Who holds the answers, for messages: `schedd`, `node n1's agent`.
    holder_name: String,
    books: Mutex<Books>,
}

#[derive(Debug, Default)]
struct Books {
    total: u64,
    per_user: HashMap<u32, u64>,
}

/// What one client connection's answers hold: shared by its requests, changed only under the
/// budget's lock (read without it for nothing but reports).
#[derive(Debug, Clone, Default)]
pub struct ConnectionAnswers(Arc<AtomicU64>);

impl ConnectionAnswers {
    /// The bytes this connection's answers hold now.
    pub fn held(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// Who an answer is for: its user (uid), and its connection when it has one of its own (a
/// request relayed by an agent shares the agent's connection with every user of its host,
/// and is held to the per-user cap only).
#[derive(Debug, Clone)]
pub struct Holder {
    pub uid: u32,
    pub connection: Option<ConnectionAnswers>,
}

/// Which cap a refused answer would have passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cap {
    Connection,
    User,
    Total,
}

/// A refused reservation: what it would have made the holder hold, and the cap.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub cap: Cap,
    pub uid: u32,
    /// What is held now (of the connection, the user or all, per `cap`).
    pub held: u64,
    /// The answer asked for.
    pub asked: u64,
    pub limit: u64,
    holder_name: String,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (whose, per, row) = match self.cap {
            Cap::Connection => (
                "this connection".to_string(),
                "per connection",
                limits::UNREAD_ANSWERS_PER_CONNECTION,
            ),
            Cap::User => (
                format!("uid {}", self.uid),
                "per user",
                limits::UNREAD_ANSWERS_PER_USER,
            ),
            Cap::Total => (
                "all users".to_string(),
                "for all users together",
                limits::UNREAD_ANSWERS,
            ),
        };
        if self.asked > self.limit {
            return write!(
                f,
                "this answer alone is {}, over the limit {per} of answers not yet read, {} \
                 ({}): ask for less at once (a shorter window, or a --limit)",
                format_size(self.asked),
                format_size(self.limit),
                row.key
            );
        }
        let what = match self.cap {
            Cap::Total => "retry shortly",
            Cap::Connection | Cap::User => {
                "read the answers already asked for (or close the connections that hold them) \
                 before asking for more"
            }
        };
        write!(
            f,
            "{} holds {} of answers {whose} has not read yet; another {} would pass the limit \
             {per}, {} ({}): {what}",
            self.holder_name,
            format_size(self.held),
            format_size(self.asked),
            format_size(self.limit),
            row.key
        )
    }
}

impl From<Refusal> for tonic::Status {
    fn from(r: Refusal) -> Self {
        tonic::Status::resource_exhausted(r.to_string())
    }
}

/// Bytes reserved for an answer not yet read; given back when dropped.
#[derive(Debug)]
pub struct Reservation {
    shared: Arc<Shared>,
    holder: Holder,
    bytes: u64,
}

impl Reservation {
    /// The bytes reserved.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Makes this reservation `bytes`: a smaller one always, a larger one if the caps allow
    /// it (else it stays as it was).
    pub fn resize(&mut self, bytes: u64) -> Result<(), Refusal> {
        let mut books = self.shared.lock();
        if bytes > self.bytes {
            let more = bytes - self.bytes;
            self.shared.check(&books, &self.holder, more)?;
            self.shared.add(&mut books, &self.holder, more);
        } else {
            self.shared
                .remove(&mut books, &self.holder, self.bytes - bytes);
        }
        self.bytes = bytes;
        Ok(())
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if self.bytes > 0 {
            let mut books = self.shared.lock();
            self.shared.remove(&mut books, &self.holder, self.bytes);
        }
    }
}

impl AnswerBudget {
    /// A budget with `caps`, its refusals naming `holder_name` (`schedd`, `node n1's agent`).
    pub fn new(caps: Caps, holder_name: impl Into<String>) -> AnswerBudget {
        AnswerBudget(Arc::new(Shared {
            caps,
            holder_name: holder_name.into(),
            books: Mutex::default(),
        }))
    }

    /// Reserves `bytes` for an answer to `holder`, or refuses (and logs it, rate-limited per
    /// uid) when that would pass a cap.
    pub fn reserve(&self, holder: &Holder, bytes: u64) -> Result<Reservation, Refusal> {
        let mut books = self.0.lock();
        self.0.check(&books, holder, bytes).inspect_err(log)?;
        self.0.add(&mut books, holder, bytes);
        Ok(Reservation {
            shared: Arc::clone(&self.0),
            holder: holder.clone(),
            bytes,
        })
    }

    /// Reserves as much of `most` as the caps leave `holder` room for, and at least `least`
    /// (else refuses, as [`AnswerBudget::reserve`]): the room a page of a listing is built in.
    pub fn reserve_up_to(
        &self,
        holder: &Holder,
        most: u64,
        least: u64,
    ) -> Result<Reservation, Refusal> {
        let mut books = self.0.lock();
        let bytes = self.0.room(&books, holder).min(most).max(least.min(most));
        self.0.check(&books, holder, bytes).inspect_err(log)?;
        self.0.add(&mut books, holder, bytes);
        Ok(Reservation {
            shared: Arc::clone(&self.0),
            holder: holder.clone(),
            bytes,
        })
    }

    /// What all answers not yet read hold now.
    pub fn held(&self) -> u64 {
        self.0.lock().total
    }

    /// What `uid`'s answers not yet read hold now.
    pub fn held_by(&self, uid: u32) -> u64 {
        self.0.lock().per_user.get(&uid).copied().unwrap_or(0)
    }
}

fn log(refusal: &Refusal) {
    peer_log::warn(
        "refused an answer",
        &format!("uid {}", refusal.uid),
        format_args!("refused an answer to uid {}: {refusal}", refusal.uid),
    );
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, Books> {
        self.books.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The most `holder` may reserve now.
    fn room(&self, books: &Books, holder: &Holder) -> u64 {
        let caps = &self.caps;
        let user = books.per_user.get(&holder.uid).copied().unwrap_or(0);
        let connection = holder
            .connection
            .as_ref()
            .map_or(0, |c| c.0.load(Ordering::Relaxed));
        let bulk = caps
            .total
            .saturating_sub(caps.kept_for_small)
            .saturating_sub(books.total);
        let small = caps
            .small_holder
            .saturating_sub(user)
            .min(caps.total.saturating_sub(books.total));
        let connection_room = match holder.connection {
            Some(_) => caps.per_connection.saturating_sub(connection),
            None => u64::MAX,
        };
        connection_room
            .min(caps.per_user.saturating_sub(user))
            .min(bulk.max(small))
    }

    /// `Ok` when `holder` may reserve `bytes` more; else the cap it would pass.
    fn check(&self, books: &Books, holder: &Holder, bytes: u64) -> Result<(), Refusal> {
        if bytes <= self.room(books, holder) {
            return Ok(());
        }
        let caps = &self.caps;
        let user = books.per_user.get(&holder.uid).copied().unwrap_or(0);
        let refusal = |cap, held, limit| Refusal {
            cap,
            uid: holder.uid,
            held,
            asked: bytes,
            limit,
            holder_name: self.holder_name.clone(),
        };
        if let Some(c) = &holder.connection {
            let held = c.0.load(Ordering::Relaxed);
            if held.saturating_add(bytes) > caps.per_connection {
                return Err(refusal(Cap::Connection, held, caps.per_connection));
            }
        }
        if user.saturating_add(bytes) > caps.per_user {
            return Err(refusal(Cap::User, user, caps.per_user));
        }
        Err(refusal(Cap::Total, books.total, caps.total))
    }

    fn add(&self, books: &mut Books, holder: &Holder, bytes: u64) {
        books.total += bytes;
        *books.per_user.entry(holder.uid).or_default() += bytes;
        if let Some(c) = &holder.connection {
            c.0.fetch_add(bytes, Ordering::Relaxed);
        }
    }

    fn remove(&self, books: &mut Books, holder: &Holder, bytes: u64) {
        books.total = books.total.saturating_sub(bytes);
        if let Some(held) = books.per_user.get_mut(&holder.uid) {
            *held = held.saturating_sub(bytes);
            if *held == 0 {
                books.per_user.remove(&holder.uid);
            }
        }
        if let Some(c) = &holder.connection {
            c.0.fetch_sub(bytes.min(c.0.load(Ordering::Relaxed)), Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    fn caps() -> Caps {
        Caps {
            per_connection: 16 * MIB,
            per_user: 32 * MIB,
            total: 96 * MIB,
            kept_for_small: 16 * MIB,
            small_holder: MIB,
        }
    }

    fn on(uid: u32, connection: &ConnectionAnswers) -> Holder {
        Holder {
            uid,
            connection: Some(connection.clone()),
        }
    }

    #[test]
    fn each_cap_refuses_past_it_naming_itself_and_dropping_gives_back() {
        let budget = AnswerBudget::new(caps(), "schedd");
        let (a, b, c) = (
            ConnectionAnswers::default(),
            ConnectionAnswers::default(),
            ConnectionAnswers::default(),
        );
        let first = budget.reserve(&on(7, &a), 10 * MIB).unwrap();
        let refused = budget.reserve(&on(7, &a), 7 * MIB).unwrap_err();
        assert_eq!((refused.cap, refused.held), (Cap::Connection, 10 * MIB));
        let message = tonic::Status::from(refused).message().to_string();
        assert!(
            message.starts_with(
                "schedd holds 10.0 MiB of answers this connection has not read yet; another \
                 7.0 MiB would pass the limit per connection, 16.0 MiB (fixed): read the \
                 answers already asked for"
            ),
            "{message}"
        );
        // Another connection of the same user: the user's cap.
        let second = budget.reserve(&on(7, &b), 16 * MIB).unwrap();
        let refused = budget.reserve(&on(7, &c), 7 * MIB).unwrap_err();
        assert_eq!((refused.cap, refused.held), (Cap::User, 26 * MIB));
        assert!(refused.to_string().contains("uid 7 has not read yet"));
        // A relayed request has no connection of its own: the user's cap only.
        let relayed = Holder {
            uid: 7,
            connection: None,
        };
        assert_eq!(
            budget.reserve(&relayed, 7 * MIB).unwrap_err().cap,
            Cap::User
        );
        drop(first);
        assert_eq!((a.held(), budget.held_by(7)), (0, 16 * MIB));
        let third = budget.reserve(&on(7, &c), 16 * MIB).unwrap();
        drop((second, third));
        assert_eq!((budget.held(), budget.held_by(7), b.held()), (0, 0, 0));
    }

    #[test]
    fn the_rest_kept_for_small_answers_goes_to_users_who_hold_little() {
        let budget = AnswerBudget::new(caps(), "schedd");
        // Five users fill what everyone may use (96 - 16 MiB).
        let held: Vec<Reservation> = (0..5)
            .map(|i| {
                budget
                    .reserve(&on(10 + i, &ConnectionAnswers::default()), 16 * MIB)
                    .unwrap()
            })
            .collect();
        assert_eq!(budget.held(), 80 * MIB);
        // They get nothing more; another user's small answer still fits, a large one not.
        let flooder = on(10, &ConnectionAnswers::default());
        assert_eq!(
            budget.reserve(&flooder, 64 << 10).unwrap_err().cap,
            Cap::Total
        );
        let other = on(99, &ConnectionAnswers::default());
        let small = budget.reserve(&other, 600 << 10).unwrap();
        assert_eq!(
            budget.reserve(&other, 600 << 10).unwrap_err().cap,
            Cap::Total
        );
        assert_eq!(
            budget
                .reserve(&on(98, &ConnectionAnswers::default()), 2 * MIB)
                .unwrap_err()
                .cap,
            Cap::Total
        );
        // A page is built in what room there is.
        let page = budget.reserve_up_to(&other, 8 * MIB, 64 << 10).unwrap();
        assert_eq!(page.bytes(), MIB - (600 << 10));
        drop((small, page, held));
        assert_eq!(budget.held(), 0);
    }

    #[test]
    fn a_reservation_grows_within_the_caps_and_shrinks_always() {
        let budget = AnswerBudget::new(caps(), "node n1's agent");
        let conn = ConnectionAnswers::default();
        let mut r = budget
            .reserve_up_to(&on(3, &conn), 8 * MIB, 64 << 10)
            .unwrap();
        assert_eq!(r.bytes(), 8 * MIB);
        r.resize(MIB).unwrap();
        assert_eq!((conn.held(), budget.held()), (MIB, MIB));
        let refused = r.resize(17 * MIB).unwrap_err();
        assert_eq!(refused.cap, Cap::Connection);
        assert!(refused
            .to_string()
            .starts_with("node n1's agent holds 1.0 MiB"));
        assert_eq!(r.bytes(), MIB, "unchanged when refused");
        r.resize(16 * MIB).unwrap();
        // One answer larger than a cap by itself: the message says to ask for less.
        let alone = budget.reserve(&on(4, &ConnectionAnswers::default()), 20 * MIB);
        assert_eq!(
            alone.unwrap_err().to_string(),
            "this answer alone is 20.0 MiB, over the limit per connection of answers not yet \
             read, 16.0 MiB (fixed): ask for less at once (a shorter window, or a --limit)"
        );
        // Past the least room: refused.
        assert_eq!(
            budget
                .reserve_up_to(&on(3, &conn), 8 * MIB, 64 << 10)
                .unwrap_err()
                .cap,
            Cap::Connection
        );
        drop(r);
        assert_eq!((conn.held(), budget.held()), (0, 0));
    }
}
