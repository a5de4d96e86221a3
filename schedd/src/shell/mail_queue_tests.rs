//! Tests of the mail queue: one user's share, the queue's whole, the rate, the turns, and the
//! summaries of what was dropped.

use super::*;

fn mail(user: &str, n: usize) -> Mail {
    Mail {
        user: user.into(),
        to: format!("{user}@example.org"),
        subject: format!("{user} {n}"),
        body: String::new(),
    }
}

fn bounds(total: usize, per_user: usize, per_minute: u32) -> Bounds {
    Bounds {
        total,
        per_user,
        per_minute,
    }
}

#[test]
fn a_users_flood_drops_only_their_mail_and_others_go_in_turn() {
    let t0 = Instant::now();
    let mut queue = MailQueue::new(bounds(10, 3, 1000));
    let refused: Vec<Refusal> = (0..2000)
        .filter_map(|n| queue.offer(mail("alice", n), t0).err())
        .collect();
    assert_eq!(refused.len(), 1997);
    assert!(refused.iter().all(|r| *r == Refusal::Share));
    // Another user's mail still goes in, and out before alice's last two.
    queue.offer(mail("bob", 0), t0).unwrap();
    assert_eq!(queue.len(), 4);
    let order: Vec<String> = std::iter::from_fn(|| queue.next())
        .map(|m| m.subject)
        .collect();
    assert_eq!(order, ["alice 0", "bob 0", "alice 1", "alice 2"]);
    assert_eq!(queue.len(), 0);
    // Room again for alice.
    queue.offer(mail("alice", 2000), t0).unwrap();

    // One line for the flood, once it stopped.
    assert!(queue.take_summaries(t0 + Duration::from_secs(1)).is_empty());
    assert_eq!(
        queue.take_summaries(t0 + QUIET),
        [
            "dropped 1997 mails of user alice (their share of the mail queue, 3 mails, was full: \
          notify.max_queued_per_user)"
        ]
    );
    assert!(queue.take_summaries(t0 + QUIET * 2).is_empty());
    assert!(!queue.has_drops());
}

#[test]
fn a_full_queue_drops_the_newcomers_mail() {
    let t0 = Instant::now();
    let mut queue = MailQueue::new(bounds(3, 3, 1000));
    for user in ["a", "b", "c"] {
        queue.offer(mail(user, 0), t0).unwrap();
    }
    assert_eq!(queue.offer(mail("d", 0), t0), Err(Refusal::Full));
    // Over their share is said first.
    let mut shared = MailQueue::new(bounds(3, 1, 1000));
    shared.offer(mail("a", 0), t0).unwrap();
    assert_eq!(shared.offer(mail("a", 1), t0), Err(Refusal::Share));
    assert_eq!(
        queue.take_summaries(t0 + QUIET),
        [
            "dropped 1 mail of user d (the mail queue, 3 mails of all users, was full: \
          notify.max_queued)"
        ]
    );
}

#[test]
fn a_user_over_their_rate_is_refused_until_it_refills() {
    let t0 = Instant::now();
    let at = |ms: u64| t0 + Duration::from_millis(ms);
    let mut queue = MailQueue::new(bounds(1000, 100, 6));
    // A burst of 6, sent as they come: the share never fills.
    for n in 0..6 {
        queue.offer(mail("alice", n), t0).unwrap();
        queue.next().unwrap();
    }
    assert_eq!(queue.offer(mail("alice", 6), at(1)), Err(Refusal::Rate));
    // Others have their own rate.
    queue.offer(mail("bob", 0), at(1)).unwrap();
    // One a minute / 6: one more every 10 s.
    assert_eq!(queue.offer(mail("alice", 7), at(9_000)), Err(Refusal::Rate));
    queue.offer(mail("alice", 8), at(10_001)).unwrap();
    assert_eq!(
        queue.offer(mail("alice", 9), at(10_002)),
        Err(Refusal::Rate)
    );
    assert_eq!(
        queue.take_summaries(at(20_000)),
        [
            "dropped 3 mails of user alice (over their rate of 6 mails a minute: \
          notify.max_per_user_per_minute)"
        ]
    );
}

#[test]
fn a_flood_that_goes_on_is_summed_up_every_minute() {
    let t0 = Instant::now();
    let mut queue = MailQueue::new(bounds(10, 1, 1000));
    queue.offer(mail("alice", 0), t0).unwrap();
    let mut lines = Vec::new();
    for s in 0..150 {
        let now = t0 + Duration::from_secs(s);
        assert_eq!(queue.offer(mail("alice", 1), now), Err(Refusal::Share));
        lines.extend(queue.take_summaries(now));
    }
    lines.extend(queue.take_summaries(t0 + Duration::from_secs(200)));
    let counts: Vec<&str> = lines.iter().map(|l| l.split(' ').nth(1).unwrap()).collect();
    assert_eq!(counts, ["61", "61", "28"], "{lines:?}");
}
