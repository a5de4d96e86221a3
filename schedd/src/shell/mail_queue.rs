//! The queue of job mail waiting for a sendmail, shared by every user but bounded per user
//! (the job's owner, whatever address the mail goes to): at most `notify.max_queued_per_user`
//! of one user's mails wait (their share of the queue), at most
//! `notify.max_per_user_per_minute` a minute are queued (a token bucket: a burst of that many,
//! then as many a minute), and at most `notify.max_queued` wait in all. A mail over a bound
//! is dropped, and only its own user's mail is: another user's still finds room, and is taken
//! in turn (users round-robin, each user's mail in order), so one user's flood delays it by
//! at most one mail per flooding user.
//!
//! Drops are counted per user and reason, not logged one by one: [`MailQueue::take_summaries`]
//! gives one line per user and reason once their drops stop for [`QUIET`] (or every
//! [`SUMMARY_EVERY`] while they go on), e.g. `dropped 2000 mails of user alice (their share
//! of the mail queue, 100 mails, was full: notify.max_queued_per_user)`. Pure: time is
//! passed in.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::{Duration, Instant};

use ysched_common::config::NotifyConfig;

use super::mail::Mail;

/// A user's drops are summed up once none came for this long...
pub const QUIET: Duration = Duration::from_secs(2);
/// ...or at least this often while they go on.
pub const SUMMARY_EVERY: Duration = Duration::from_secs(60);

/// The queue's bounds (`[notify]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// Mails waiting, all users together.
    pub total: usize,
    /// Mails of one user waiting.
    pub per_user: usize,
    /// Mails of one user queued per minute (and the burst).
    pub per_minute: u32,
}

impl Bounds {
    pub fn of(notify: &NotifyConfig) -> Bounds {
        Bounds {
            total: notify.max_queued as usize,
            per_user: notify.max_queued_per_user as usize,
            per_minute: notify.max_per_user_per_minute,
        }
    }
}

/// Why a mail was dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Refusal {
    /// Its user had their share of the queue waiting.
    Share,
    /// The whole queue was full.
    Full,
    /// Its user was over their rate.
    Rate,
}

/// A user's token bucket: how many mails they may queue now, as of `at`.
#[derive(Debug)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

/// The drops of one user for one reason since their last summary.
#[derive(Debug)]
struct Dropped {
    count: u64,
    first: Instant,
    last: Instant,
}

/// The mail queue (see the module docs).
#[derive(Debug)]
pub struct MailQueue {
    bounds: Bounds,
    /// Each user's waiting mail, in order; a user with none has no entry.
    waiting: HashMap<String, VecDeque<Mail>>,
    /// The users with mail waiting, in the order of their turns.
    turns: VecDeque<String>,
    len: usize,
    buckets: HashMap<String, Bucket>,
    dropped: BTreeMap<(String, Refusal), Dropped>,
}

impl MailQueue {
    pub fn new(bounds: Bounds) -> MailQueue {
        MailQueue {
            bounds,
            waiting: HashMap::new(),
            turns: VecDeque::new(),
            len: 0,
            buckets: HashMap::new(),
            dropped: BTreeMap::new(),
        }
    }

    /// Mails waiting.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.len
    }

    /// Queues `mail` at `now`, or drops it (counted for its user's summary) when its user
    /// has their share waiting, the queue is full, or its user is over their rate.
    pub fn offer(&mut self, mail: Mail, now: Instant) -> Result<(), Refusal> {
        let theirs = self.waiting.get(&mail.user).map_or(0, VecDeque::len);
        let refused = if theirs >= self.bounds.per_user {
            Some(Refusal::Share)
        } else if self.len >= self.bounds.total {
            Some(Refusal::Full)
        } else if !self.take_token(&mail.user, now) {
            Some(Refusal::Rate)
        } else {
            None
        };
        if let Some(why) = refused {
            let dropped = self.dropped.entry((mail.user, why)).or_insert(Dropped {
                count: 0,
                first: now,
                last: now,
            });
            dropped.count += 1;
            dropped.last = now;
            return Err(why);
        }
        if theirs == 0 {
            self.turns.push_back(mail.user.clone());
        }
        self.waiting
            .entry(mail.user.clone())
            .or_default()
            .push_back(mail);
        self.len += 1;
        Ok(())
    }

    /// The next mail to send: the first of the user whose turn it is.
    pub fn next(&mut self) -> Option<Mail> {
        let user = self.turns.pop_front()?;
        let mails = self.waiting.get_mut(&user)?;
        let mail = mails.pop_front();
        if mails.is_empty() {
            self.waiting.remove(&user);
        } else {
            self.turns.push_back(user);
        }
        self.len -= usize::from(mail.is_some());
        mail
    }

    /// Takes one of `user`'s tokens at `now`, if they have one: the bucket holds up to
    /// `per_minute` and refills `per_minute` a minute.
    fn take_token(&mut self, user: &str, now: Instant) -> bool {
        let per_minute = f64::from(self.bounds.per_minute);
        let bucket = self.buckets.entry(user.to_string()).or_insert(Bucket {
            tokens: per_minute,
            at: now,
        });
        let refill = now.saturating_duration_since(bucket.at).as_secs_f64() * per_minute / 60.0;
        bucket.tokens = (bucket.tokens + refill).min(per_minute);
        bucket.at = now;
        if bucket.tokens < 1.0 {
            return false;
        }
        bucket.tokens -= 1.0;
        true
    }

    /// Whether drops wait to be summed up.
    pub fn has_drops(&self) -> bool {
        !self.dropped.is_empty()
    }

    /// The summary lines of the drops that stopped ([`QUIET`]) or have gone on for
    /// [`SUMMARY_EVERY`], by `now`; those are forgotten (a later drop starts a new count).
    /// Also forgets the buckets that filled up again (their users are as new).
    pub fn take_summaries(&mut self, now: Instant) -> Vec<String> {
        let bounds = self.bounds;
        let mut lines = Vec::new();
        self.dropped.retain(|(user, why), dropped| {
            let due = now.saturating_duration_since(dropped.last) >= QUIET
                || now.saturating_duration_since(dropped.first) >= SUMMARY_EVERY;
            if due {
                lines.push(summary(user, *why, dropped.count, bounds));
            }
            !due
        });
        let per_minute = f64::from(bounds.per_minute);
        self.buckets.retain(|_, bucket| {
            let refill = now.saturating_duration_since(bucket.at).as_secs_f64() * per_minute / 60.0;
            bucket.tokens + refill < per_minute
        });
        lines
    }
}

/// `dropped 2000 mails of user alice (their share of the mail queue, 100 mails, was full:
/// notify.max_queued_per_user)`.
fn summary(user: &str, why: Refusal, count: u64, bounds: Bounds) -> String {
    let mails = if count == 1 { "mail" } else { "mails" };
    let why = match why {
        Refusal::Share => format!(
            "their share of the mail queue, {} mails, was full: notify.max_queued_per_user",
            bounds.per_user
        ),
        Refusal::Full => format!(
            "the mail queue, {} mails of all users, was full: notify.max_queued",
            bounds.total
        ),
        Refusal::Rate => format!(
            "over their rate of {} mails a minute: notify.max_per_user_per_minute",
            bounds.per_minute
        ),
    };
    format!("dropped {count} {mails} of user {user} ({why})")
}

#[cfg(test)]
#[path = "mail_queue_tests.rs"]
mod tests;
