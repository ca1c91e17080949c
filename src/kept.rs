//! What a connection keeps from one phase to the next, whatever its rung:
//! [`Kept`] in its task, [`Stowed`] while it waits task-less in the
//! parking lot.
//!
//! Three things outlive a phase: what the connection used of its limits
//! (`life`), an HTTP/2 connection's facts while it sleeps (`wire`), and
//! its link to the state hook (`hooks`). Most connections keep none of
//! them; the lot then keeps no box at all, only the connection's slot. A
//! sleeping HTTP/2 connection of a server without hooks and limits, the
//! common case that is asleep most of the time, keeps its facts inline in
//! the lot's box. The rest is boxed once more:
//!
//! | what a connection keeps | [`Stowed`] |
//! |---|---|
//! | nothing | none |
//! | HTTP/2 facts | `Asleep`, inline (24 B) |
//! | a state hook, HTTP/2 facts or not | `Watched`: two pointers |
//! | any of it with connection limits | `Limited`: one box of [`Kept`] |
//!
//! The lot sees only what it asks of a [`Carry`]: a goodbye, a keep-alive
//! ping and what answers it, the move to DORMANT, the connection's end.

use tokio::time::Instant;

use crate::hooks::{ConnState, Watched};
use crate::ladder::Rung;
use crate::life::Life;
use crate::lot::{Answered, Carry};
use crate::wire::Asleep;

/// What a connection keeps across its phases, in its task.
#[derive(Debug)]
pub(crate) struct Kept<A> {
    /// What it used of its limits; default without limits.
    pub(crate) life: Life,
    /// An HTTP/2 connection's facts while it sleeps.
    pub(crate) asleep: Option<Box<Asleep>>,
    /// Its link to the state hook, if there is one.
    pub(crate) watched: Option<Box<Watched<A>>>,
}

impl<A> Kept<A> {
    /// A new connection's: its `life` from accept, its link to the state
    /// hook.
    pub(crate) fn new(life: Life, watched: Option<Box<Watched<A>>>) -> Self {
        Kept {
            life,
            asleep: None,
            watched,
        }
    }

    /// Reports `state` to the state hook, if there is one; `false` if the
    /// hook panicked: the connection is then closed.
    pub(crate) fn report(&self, state: ConnState) -> bool {
        self.watched.as_ref().is_none_or(|w| w.report(state))
    }

    /// As the lot stores it; `limited`: the server has connection limits,
    /// and the life goes along.
    pub(crate) fn stow(self, limited: bool) -> Option<Stowed<A>> {
        if limited {
            return Some(Stowed::Limited(Box::new(self)));
        }
        match (self.asleep, self.watched) {
            (asleep, Some(watched)) => Some(Stowed::Watched { asleep, watched }),
            (Some(asleep), None) => Some(Stowed::Asleep(*asleep)),
            (None, None) => None,
        }
    }

    /// Back from the lot.
    pub(crate) fn unstow(stowed: Option<Stowed<A>>) -> Self {
        match stowed {
            None => Kept::new(Life::default(), None),
            Some(Stowed::Asleep(asleep)) => Kept {
                asleep: Some(Box::new(asleep)),
                ..Kept::new(Life::default(), None)
            },
            Some(Stowed::Watched { asleep, watched }) => Kept {
                asleep,
                ..Kept::new(Life::default(), Some(watched))
            },
            Some(Stowed::Limited(kept)) => *kept,
        }
    }
}

/// A [`Kept`] as the lot stores it: 24 bytes, inline in the lot's box (see
/// the module docs).
#[derive(Debug)]
pub(crate) enum Stowed<A> {
    /// An HTTP/2 connection asleep, on a server without a state hook or
    /// connection limits.
    Asleep(Asleep),
    /// A connection with a state hook, asleep if HTTP/2, on a server
    /// without connection limits.
    Watched {
        asleep: Option<Box<Asleep>>,
        watched: Box<Watched<A>>,
    },
    /// A connection of a server with connection limits.
    Limited(Box<Kept<A>>),
}

impl<A> Stowed<A> {
    fn asleep(&self) -> Option<&Asleep> {
        match self {
            Stowed::Asleep(asleep) => Some(asleep),
            Stowed::Watched { asleep, .. } => asleep.as_deref(),
            Stowed::Limited(kept) => kept.asleep.as_deref(),
        }
    }

    fn asleep_mut(&mut self) -> Option<&mut Asleep> {
        match self {
            Stowed::Asleep(asleep) => Some(asleep),
            Stowed::Watched { asleep, .. } => asleep.as_deref_mut(),
            Stowed::Limited(kept) => kept.asleep.as_deref_mut(),
        }
    }
}

impl<A: Send + 'static> Carry for Stowed<A> {
    fn goodbye(&self) -> Vec<u8> {
        self.asleep().map(Asleep::goaway).unwrap_or_default()
    }

    fn ping(&mut self) -> Vec<u8> {
        self.asleep_mut()
            .map(Asleep::keep_alive_ping)
            .unwrap_or_default()
    }

    fn went_dormant(&mut self) -> bool {
        match self {
            Stowed::Asleep(_) => true,
            Stowed::Watched { watched, .. } => watched.report(ConnState::On(Rung::Dormant)),
            Stowed::Limited(kept) => kept.report(ConnState::On(Rung::Dormant)),
        }
    }

    fn answer(&self, read: &[u8], reply: &mut Vec<u8>) -> Option<Answered> {
        let pongs = self.asleep()?.answer(read, reply)?;
        Some(Answered { pongs })
    }

    fn answers(&self) -> bool {
        self.asleep().is_some()
    }

    fn answered(&mut self, answered: Answered) {
        if let Some(asleep) = self.asleep_mut() {
            asleep.answered(answered.pongs);
        }
    }

    fn ends_at(&self) -> Option<Instant> {
        match self {
            Stowed::Limited(kept) => kept.life.ends_at,
            Stowed::Asleep(_) | Stowed::Watched { .. } => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sleeping_connection_stows_24_bytes_with_or_without_a_hook() {
        // The lot boxes it with 8 bytes of its own (`lot`'s size test):
        // a DORMANT HTTP/2 connection's box is 32 bytes.
        let stowed = std::mem::size_of::<Stowed<std::net::SocketAddr>>();
        assert_eq!(stowed, std::mem::size_of::<Asleep>());
        assert_eq!(stowed, 24);
    }

    #[test]
    fn a_limited_connection_boxes_40_bytes_more() {
        // With connection limits, a task-less connection carries its life
        // in a box of its own, beside the lot's box (`lot`'s size test):
        // what a server with limits pays per idle connection.
        assert_eq!(std::mem::size_of::<Kept<std::net::SocketAddr>>(), 40);
    }

    #[test]
    fn only_a_limited_connection_stows_its_life() {
        let life = Life {
            ends_at: Some(Instant::now()),
            requests: 3,
        };
        let kept = Kept::<()>::new(life, None);
        assert!(
            Kept::new(life, None::<Box<Watched<()>>>)
                .stow(false)
                .is_none()
        );
        let stowed = kept.stow(true).expect("a limited connection stows");
        assert_eq!(stowed.ends_at(), life.ends_at);
        assert_eq!(Kept::unstow(Some(stowed)).life, life);
    }
}
