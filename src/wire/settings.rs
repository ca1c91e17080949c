//! The client's settings as a sleeping connection keeps them: the last
//! value of each one a wake replays ([`Settings`]), shared between the
//! sleeping connections whose clients sent the same ones
//! ([`SettingsCache`]).

use std::sync::{Arc, Mutex};

use super::frame::{self, INITIAL_TABLE_SIZE};

/// The client's settings: the last value it sent of each one dormant
/// replays (identifiers 1 to [`frame::MAX_SETTING`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Settings {
    values: [u32; frame::MAX_SETTING as usize],
    /// Bit `id - 1` is set when the client sent setting `id`.
    sent: u16,
}

impl Settings {
    /// Notes the client's `value` of setting `id`.
    pub(super) fn set(&mut self, id: u16, value: u32) {
        if (1..=frame::MAX_SETTING).contains(&id) {
            self.values[usize::from(id - 1)] = value;
            self.sent |= 1 << (id - 1);
        }
    }

    /// The settings a wake replays: those the client sent, and, if
    /// `table_size`, the header table size whether it sent one or not (see
    /// `Asleep::prelude`).
    pub(super) fn replayed(&self, table_size: bool) -> impl Iterator<Item = (u16, u32)> + '_ {
        (1..=frame::MAX_SETTING)
            .map(|id| (id, self.sent & (1 << (id - 1)) != 0))
            .filter(move |&(id, sent)| sent || (table_size && id == frame::HEADER_TABLE_SIZE))
            .map(|(id, sent)| match sent {
                true => (id, self.values[usize::from(id - 1)]),
                false => (id, INITIAL_TABLE_SIZE),
            })
    }
}

/// How many different sets of client settings a [`SettingsCache`] shares.
const SHARED_SETTINGS: usize = 64;

/// The clients' settings that sleeping connections keep, shared between
/// those with the same ones: a server's clients send a few different sets
/// (one per client library and version), so a sleeping connection keeps a
/// pointer instead of its own 40 bytes. Beyond [`SHARED_SETTINGS`] sets in
/// use at once, a connection keeps its own.
#[derive(Debug, Default)]
pub(crate) struct SettingsCache {
    sets: Mutex<Vec<Arc<Settings>>>,
}

impl SettingsCache {
    /// The shared set equal to `settings`, or a new one.
    pub(super) fn share(&self, settings: &Settings) -> Arc<Settings> {
        let mut sets = self.sets.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(set) = sets.iter().find(|set| ***set == *settings) {
            return set.clone();
        }
        if sets.len() == SHARED_SETTINGS {
            // Sets no sleeping connection keeps any more.
            sets.retain(|set| Arc::strong_count(set) > 1);
        }
        let set = Arc::new(settings.clone());
        if sets.len() < SHARED_SETTINGS {
            sets.push(set.clone());
        }
        set
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sleeping_connections_with_the_same_settings_share_them() {
        let cache = SettingsCache::default();
        let set = |id, value| {
            let mut s = Settings::default();
            s.set(id, value);
            s
        };
        let browser = cache.share(&set(4, 1 << 20));
        assert!(Arc::ptr_eq(&browser, &cache.share(&set(4, 1 << 20))));
        let held: Vec<_> = (1..SHARED_SETTINGS as u32)
            .map(|i| cache.share(&set(3, i)))
            .collect();
        // Full of sets in use: a new one is not shared.
        let new = set(3, 1000);
        assert!(!Arc::ptr_eq(&cache.share(&new), &cache.share(&new)));
        // Sets no connection keeps make room.
        drop(held);
        assert!(Arc::ptr_eq(&cache.share(&new), &cache.share(&new)));
        assert!(Arc::ptr_eq(&browser, &cache.share(&set(4, 1 << 20))));
    }
}
