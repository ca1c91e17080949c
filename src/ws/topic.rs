//! Topics: sets of sockets that a message is published to, whether they
//! sleep or not.
//!
//! A broadcast is what a server with many idle sockets mostly does, and
//! the app that writes its own gets it wrong in the same ways: a member map
//! it keeps by hand, members removed in two places (a close, a failed
//! send), and one lock held across every send of a broadcast, so that a
//! join, a leave or another room's broadcast waits behind thousands of
//! sends. A [`Topic`] keeps its members in a slab behind a lock that is
//! held for a few instructions:
//!
//! - a join or a leave takes a slot or frees one, and forgets the list a
//!   publish last sent to;
//! - a publish takes that list (an `Arc`: made again, once, after joins
//!   and leaves) and sends outside the lock, so a join made during a
//!   publish to 10,000 sockets waits for no send, and two topics publish
//!   at once;
//! - a socket that closes leaves every topic it joined (its link keeps
//!   where it is in each), so no topic keeps a closed socket; a member
//!   whose send fails because its client stopped reading leaves too when
//!   its socket is let go ([`WhenFull::Close`](super::WhenFull)).
//!
//! A message is encoded once for every member ([`Frame`]), and compressed
//! once for those that negotiated compression.

use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};

use super::frame::Frame;
use super::link::{Group, Sender};

/// A set of sockets a message is published to: clone it to share it (a
/// reference count). Sockets join from their handlers, or from wherever
/// their [`Sender`] is; [`publish`](Self::publish) sends to every member
/// from any thread, and never waits for a send.
///
/// ```no_run
/// use dormant::ws::{Message, Topic, WebSocketUpgrade};
///
/// # fn f(ws: WebSocketUpgrade, room: Topic) -> dormant::ws::Accepted {
/// room.subscribe(&ws.sender());
/// ws.on_message(room, |room, message, _sender| async move {
///     if let Message::Text(text) = message {
///         room.publish(text);
///     }
///     // A socket that closes leaves its topics by itself.
///     room
/// })
/// # }
/// ```
#[derive(Clone, Default)]
pub struct Topic(Arc<Members>);

/// A topic's members, behind a lock held for a few instructions.
#[derive(Default)]
pub(crate) struct Members(Mutex<Slots>);

#[derive(Default)]
struct Slots {
    slots: Vec<Option<Sender>>,
    /// Free slots, reused first.
    free: Vec<u32>,
    len: usize,
    /// The members as the last publish sent to them, until a join or a
    /// leave.
    list: Option<Arc<[Sender]>>,
}

impl Members {
    fn lock(&self) -> MutexGuard<'_, Slots> {
        // Every step under the lock leaves the slots whole.
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Group for Members {
    fn leave(&self, slot: u32, id: u64) {
        let mut slots = self.lock();
        let Some(at) = slots.slots.get_mut(slot as usize) else {
            return;
        };
        if at.as_ref().is_some_and(|member| member.id() == id) {
            *at = None;
            slots.free.push(slot);
            slots.len -= 1;
            slots.list = None;
        }
    }
}

/// What a [`Topic::publish`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Published {
    /// Members the message was sent to (written where they sleep, or
    /// queued).
    pub sent: usize,
    /// Members that could not take it: closed or closing, or with a full
    /// queue (see [`SendError`](super::SendError)).
    pub failed: usize,
}

impl Topic {
    /// An empty topic.
    pub fn new() -> Topic {
        Topic::default()
    }

    /// Adds the socket of `sender` to the topic; it stays a member until
    /// it [leaves](Self::unsubscribe) or closes. Returns `false` if it
    /// already is one, or is closed.
    pub fn subscribe(&self, sender: &Sender) -> bool {
        sender.join(&self.0, || {
            let mut slots = self.0.lock();
            let slot = match slots.free.pop() {
                Some(slot) => {
                    slots.slots[slot as usize] = Some(sender.clone());
                    slot
                }
                None => {
                    slots.slots.push(Some(sender.clone()));
                    u32::try_from(slots.slots.len() - 1).unwrap_or(u32::MAX)
                }
            };
            slots.len += 1;
            slots.list = None;
            slot
        })
    }

    /// Removes the socket of `sender` from the topic. Returns `false` if
    /// it was not a member.
    pub fn unsubscribe(&self, sender: &Sender) -> bool {
        match sender.leave(&self.0) {
            Some(slot) => {
                Group::leave(&*self.0, slot, sender.id());
                true
            }
            None => false,
        }
    }

    /// Sends `frame` to every member ([`Sender::send`]: a sleeping socket
    /// is written to where it sleeps, an awake one queues it). The message
    /// is encoded once, and compressed once for the members that
    /// negotiated compression. Joins, leaves and other topics' publishes
    /// do not wait for these sends.
    pub fn publish(&self, frame: impl Into<Frame>) -> Published {
        let frame = frame.into();
        let members = self.list();
        let mut published = Published::default();
        for member in members.iter() {
            match member.send(&frame) {
                Ok(()) => published.sent += 1,
                Err(_) => published.failed += 1,
            }
        }
        published
    }

    /// Returns the topic's members now.
    pub fn members(&self) -> Vec<Sender> {
        self.list().to_vec()
    }

    /// Returns how many sockets the topic has.
    pub fn len(&self) -> usize {
        self.0.lock().len
    }

    /// Whether the topic has no socket.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The members, as a list made again only after a join or a leave.
    fn list(&self) -> Arc<[Sender]> {
        let mut slots = self.0.lock();
        if let Some(list) = &slots.list {
            return list.clone();
        }
        let list: Arc<[Sender]> = slots.slots.iter().flatten().cloned().collect();
        slots.list = Some(list.clone());
        list
    }
}

impl fmt::Debug for Topic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Topic").field("len", &self.len()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::super::link::{Link, SocketSettings};
    use super::super::reader::Rules;
    use super::super::{Frame, WhenFull};
    use super::*;

    /// A socket's sender that is not upgraded: what is sent to it queues.
    fn socket() -> Sender {
        Sender::new(Link::new(SocketSettings {
            rules: Rules {
                frame: 1 << 20,
                message: 1 << 20,
                inflate: false,
            },
            max_queued: 1 << 20,
            close_timeout: 1000,
            when_full: WhenFull::Close,
        }))
    }

    #[test]
    fn members_join_leave_and_get_what_is_published() {
        let topic = Topic::new();
        let (a, b, c) = (socket(), socket(), socket());
        assert!(topic.subscribe(&a));
        assert!(topic.subscribe(&b));
        assert!(!topic.subscribe(&a.clone()), "a member already");
        assert_eq!(topic.len(), 2);
        let published = topic.publish(Frame::text("one"));
        assert_eq!((published.sent, published.failed), (2, 0));
        assert!(topic.subscribe(&c));
        assert!(topic.unsubscribe(&a));
        assert!(!topic.unsubscribe(&a), "not a member any more");
        let published = topic.publish("two");
        assert_eq!(published.sent, 2);
        // Each got what was published while it was a member.
        let frame = |text: &str| Frame::text(text).len();
        assert_eq!(a.queued(), frame("one"));
        assert_eq!(b.queued(), frame("one") + frame("two"));
        assert_eq!(c.queued(), frame("two"));
        let members = topic.members();
        assert_eq!(members.len(), 2);
        assert!(members.contains(&b) && members.contains(&c));
    }

    #[test]
    fn a_closed_socket_leaves_its_topics_and_joins_none() {
        let (topic, other) = (Topic::new(), Topic::new());
        let (a, b) = (socket(), socket());
        for member in [&a, &b] {
            assert!(topic.subscribe(member));
            assert!(other.subscribe(member));
        }
        a.close_link();
        assert_eq!((topic.len(), other.len()), (1, 1));
        assert_eq!(topic.members(), std::slice::from_ref(&b));
        assert!(!topic.subscribe(&a), "closed");
        // Its slot is taken again; the closed socket's leaving later does
        // not free a newer member's.
        let c = socket();
        assert!(topic.subscribe(&c));
        assert_eq!(topic.publish("x").sent, 2);
        // A topic dropped before its members: they close without it.
        drop(other);
        b.close_link();
        assert_eq!(topic.members(), [c]);
    }

    #[test]
    #[allow(
        clippy::mutable_key_type,
        reason = "a sender hashes its socket's number, which never changes"
    )]
    fn senders_of_one_socket_are_equal_and_hash_alike() {
        use std::collections::HashSet;
        let (a, b) = (socket(), socket());
        assert_eq!(a, a.clone());
        assert_ne!(a, b);
        assert_ne!(a.id(), b.id());
        let set: HashSet<Sender> = [a.clone(), a.clone(), b].into_iter().collect();
        assert_eq!(set.len(), 2);
    }
}
