//! Between sessions: the randomized waits before reconnecting, and what a failure says.
//!
//! The waits are spread (each between half and all of the backoff) so that the agents of a
//! cluster do not all come back in the same instant after a schedd restart; a connection
//! that failed TLS verification is told apart, since its peer is not this cluster's schedd.

use std::time::Duration;

/// A seed for the reconnection jitter, different in every process and at every start.
pub(super) fn jitter_seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u32(std::process::id());
    if let Ok(since) = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
        hasher.write_u128(since.as_nanos());
    }
    hasher.finish() | 1
}

/// `wait` scaled by a random factor in [0.5, 1.0] (xorshift64* on `state`).
pub(super) fn jittered(wait: Duration, state: &mut u64) -> Duration {
    let mut x = *state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *state = x;
    let random = x.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11; // 53 bits
    let fraction = random as f64 / (1u64 << 53) as f64; // [0, 1)
    wait.mul_f64(0.5 + fraction / 2.0)
}

/// Why a connection failed TLS verification, if it did: the peer is not a schedd holding a
/// certificate from the cluster CA.
pub(super) fn tls_refusal(error: &tonic::transport::Error) -> Option<String> {
    let text = with_sources(error);
    let lower = text.to_ascii_lowercase();
    if lower.contains("invalid peer certificate") || lower.contains("unknownissuer") {
        Some(format!(
            "its certificate is not signed by the cluster CA ({text})"
        ))
    } else if lower.contains("corrupt message")
        || lower.contains("invalidcontenttype")
        || lower.contains("wrong version number")
        || lower.contains("invalid message")
    {
        Some(format!("it does not speak TLS ({text})"))
    } else if lower.contains("tls") || lower.contains("handshake") || lower.contains("certificate")
    {
        Some(format!("TLS handshake failed ({text})"))
    } else {
        None
    }
}

/// An error with its chain of causes: tonic's transport errors say little on their own.
pub(super) fn with_sources(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        // Some errors repeat their cause in their own text: say each thing once.
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jitter_spreads_waits_between_half_and_all() {
        let mut state = jitter_seed();
        let wait = Duration::from_millis(1000);
        let waits: Vec<Duration> = (0..1000).map(|_| jittered(wait, &mut state)).collect();
        assert!(
            waits.iter().all(|w| *w >= wait / 2 && *w <= wait),
            "{waits:?}"
        );
        let below = waits.iter().filter(|w| **w < wait * 3 / 4).count();
        assert!(
            (350..650).contains(&below),
            "{below} of 1000 in the lower half"
        );
        // Two agents started together do not wait alike.
        let (mut a, mut b) = (jitter_seed(), jitter_seed());
        assert_ne!(jittered(wait, &mut a), jittered(wait, &mut b));
    }
}
