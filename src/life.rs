//! A connection's bounded life: [`Builder::max_connection_age`] and
//! [`Builder::max_requests_per_connection`].
//!
//! A fleet of long-lived connections stays pinned to the instances that
//! accepted them; bounding a connection's life lets a load balancer
//! rebalance it (grpc-go's `MaxConnectionAge`, nginx's `keepalive_time`
//! and `keepalive_requests`). The limits are the connection's, whatever
//! rung it is on, so what a connection has used of them travels with it
//! as a [`Life`]: in its task while it is served or PARKED there, in the
//! parking lot's side table while it waits task-less (`lot`), which
//! closes those whose age passed in a periodic sweep.
//!
//! What ends a connection, by where it is:
//!
//! | rung | age passed | last request |
//! |---|---|---|
//! | ACTIVE HTTP/1.1 | the response in flight, if any, ends with `Connection: close`; then closed (after the grace, at the latest) | its response carries `Connection: close` |
//! | ACTIVE HTTP/2 | GOAWAY; closed when its streams end (after the grace, at the latest) | GOAWAY; streams the client opened before it saw the GOAWAY are refused (`REFUSED_STREAM`: safe to retry) |
//! | PARKED, DORMANT | closed (HTTP/2: after a GOAWAY) | — |
//!
//! Ages are jittered by ±10%, as grpc-go does, so that connections
//! accepted together (a fleet reconnecting after a deploy) do not all
//! reconnect together again.
//!
//! [`Builder::max_connection_age`]: crate::Builder::max_connection_age
//! [`Builder::max_requests_per_connection`]: crate::Builder::max_requests_per_connection

use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use tokio::time::Instant;

use crate::stats::Counters;

/// The limits a server puts on its connections' lives.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Limits {
    pub(crate) max_age: Option<Duration>,
    /// How long a connection past its age may finish what it is doing;
    /// `None`: as long as it takes.
    pub(crate) age_grace: Option<Duration>,
    pub(crate) max_requests: Option<u32>,
}

/// What a connection has used of its [`Limits`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Life {
    /// When its age passes (jittered); `None` without `max_age`.
    pub(crate) ends_at: Option<Instant>,
    /// Requests it has started (HTTP/2: streams), up to the last phase.
    pub(crate) requests: u32,
}

impl Limits {
    /// Whether any limit is set: connections then carry their [`Life`]
    /// through the parking lot.
    pub(crate) fn any(&self) -> bool {
        self.max_age.is_some() || self.max_requests.is_some()
    }

    /// The life of a connection accepted at `at`.
    pub(crate) fn born(&self, at: Instant) -> Life {
        Life {
            ends_at: self.max_age.map(|age| at + jittered(age)),
            requests: 0,
        }
    }

    /// How many more requests a connection that has `life` may start;
    /// `None` without a limit.
    pub(crate) fn requests_left(&self, life: &Life) -> Option<u32> {
        self.max_requests
            .map(|max| max.saturating_sub(life.requests))
    }
}

impl Life {
    /// Counts the `requests` an ACTIVE phase started; a connection that
    /// reached its limit with them is counted in `stats`.
    pub(crate) fn add_requests(&mut self, requests: u64, limits: &Limits, stats: &Counters) {
        if requests == 0 {
            return;
        }
        let before = self.requests;
        let requests = u32::try_from(requests).unwrap_or(u32::MAX);
        self.requests = before.saturating_add(requests);
        if limits
            .max_requests
            .is_some_and(|max| before < max && self.requests >= max)
        {
            stats.request_limit_closes.fetch_add(1, Relaxed);
        }
    }
}

/// `age` moved by up to ±10%, at random.
fn jittered(age: Duration) -> Duration {
    // A `RandomState` is seeded per thread and moves on with every new
    // one: enough randomness to spread a fleet, without a dependency.
    let random = RandomState::new().hash_one(0u8);
    // A fraction in [0, 1) with 24 bits, then a factor in [0.9, 1.1).
    let fraction = (random >> 40) as f64 / (1u64 << 24) as f64;
    age.mul_f64(0.9 + 0.2 * fraction)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_spread_within_ten_percent() {
        let age = Duration::from_secs(1000);
        let ages: Vec<Duration> = (0..200).map(|_| jittered(age)).collect();
        let (min, max) = (ages.iter().min().unwrap(), ages.iter().max().unwrap());
        assert!(*min >= Duration::from_secs(900), "{min:?}");
        assert!(*max < Duration::from_secs(1100), "{max:?}");
        // Spread, not one value: 200 draws cover most of the range.
        assert!(*max - *min > Duration::from_secs(150), "{min:?}..{max:?}");
    }

    #[test]
    fn requests_left_counts_down_to_zero() {
        let limits = Limits {
            max_requests: Some(3),
            ..Limits::default()
        };
        let mut life = limits.born(Instant::now());
        assert_eq!(limits.requests_left(&life), Some(3));
        life.requests = 5;
        assert_eq!(limits.requests_left(&life), Some(0));
        assert_eq!(Limits::default().requests_left(&life), None);
        assert!(!Limits::default().any() && limits.any());
    }
}
