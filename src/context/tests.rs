//! Unit tests of the context map: keys, slots, generations, recycling.

use super::request::{FREE, FREE_LIST_CAP};
use super::*;
use http::Request;
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering;

/// Counts its drops into a shared counter.
#[derive(Debug)]
struct Tracked(Arc<AtomicUsize>);

impl Drop for Tracked {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// Panics when dropped.
struct Bomb;

impl Drop for Bomb {
    fn drop(&mut self) {
        panic!("boom");
    }
}

fn counter() -> Arc<AtomicUsize> {
    Arc::new(AtomicUsize::new(0))
}

fn drops(c: &Arc<AtomicUsize>) -> usize {
    c.load(Ordering::SeqCst)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Point {
    x: i32,
    y: i32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Sixteen {
    a: u64,
    b: u64,
}

#[test]
fn insert_get_replace_remove() {
    static ID: Key<u64> = Key::new();
    let mut ctx = Context::new();
    assert!(ctx.is_empty());
    assert_eq!(ctx.get(&ID), None);
    assert!(!ctx.contains(&ID));

    assert_eq!(ctx.insert(&ID, 7), None);
    assert_eq!(ctx.get(&ID), Some(&7));
    assert!(ctx.contains(&ID));
    assert_eq!(ctx.len(), 1);

    assert_eq!(ctx.insert(&ID, 8), Some(7));
    assert_eq!(ctx.get(&ID), Some(&8));
    assert_eq!(ctx.len(), 1);

    *ctx.get_mut(&ID).unwrap() += 1;
    assert_eq!(ctx.get(&ID), Some(&9));

    assert_eq!(ctx.remove(&ID), Some(9));
    assert_eq!(ctx.remove(&ID), None);
    assert_eq!(ctx.get(&ID), None);
    assert!(ctx.is_empty());

    assert_eq!(*ctx.get_or_insert_with(&ID, || 1), 1);
    assert_eq!(*ctx.get_or_insert_with(&ID, || 2), 1);
}

#[test]
fn several_types_and_keys_of_one_type() {
    static A: Key<u64> = Key::new();
    static B: Key<u64> = Key::new();
    static NAME: Key<String> = Key::new();
    static POINT: Key<Point> = Key::new();
    static SIXTEEN: Key<Sixteen> = Key::new();
    static TEXT: Key<&'static str> = Key::new();

    let mut ctx = Context::new();
    ctx.insert(&A, 1);
    ctx.insert(&B, 2);
    ctx.insert(&NAME, "ada".to_owned());
    ctx.insert(&POINT, Point { x: 1, y: -1 });
    ctx.insert(&SIXTEEN, Sixteen { a: 3, b: 4 });
    ctx.insert(&TEXT, "static");

    assert_eq!(ctx.get(&A), Some(&1));
    assert_eq!(ctx.get(&B), Some(&2));
    assert_eq!(ctx.get(&NAME).map(String::as_str), Some("ada"));
    assert_eq!(ctx.get(&POINT), Some(&Point { x: 1, y: -1 }));
    assert_eq!(ctx.get(&SIXTEEN), Some(&Sixteen { a: 3, b: 4 }));
    assert_eq!(ctx.get(&TEXT), Some(&"static"));
    assert_eq!(ctx.len(), 6);
    assert!(format!("{ctx:?}").contains("values: 6"));

    ctx.get_mut(&NAME).unwrap().push_str(" lovelace");
    assert_eq!(ctx.get(&NAME).unwrap(), "ada lovelace");

    ctx.clear();
    assert!(ctx.is_empty());
    assert_eq!(ctx.get(&A), None);
    assert_eq!(ctx.get(&NAME), None);
}

#[test]
fn cleared_plain_values_are_gone() {
    // Types without drop glue are cleared by a flag; their stale bytes
    // must never be seen again.
    static N: Key<u64> = Key::new();
    static S: Key<&'static str> = Key::new();
    let mut ctx = Context::new();
    ctx.insert(&N, 1);
    ctx.insert(&S, "old");
    ctx.clear();
    assert!(ctx.is_empty());
    assert_eq!(ctx.get(&N), None);
    assert_eq!(ctx.get_mut(&S), None);
    assert!(!ctx.contains(&N));
    assert_eq!(ctx.remove(&N), None);
    assert_eq!(ctx.insert(&N, 2), None, "no stale value comes back");
    assert_eq!(ctx.insert(&N, 3), Some(2));
    assert_eq!(ctx.remove(&N), Some(3));
    assert_eq!(ctx.insert(&N, 4), None);
    assert_eq!(*ctx.get_or_insert_with(&S, || "new"), "new");
    assert_eq!(ctx.len(), 2);
}

#[test]
fn a_panicking_drop_leaves_the_context_consistent() {
    static BOMB: Key<Bomb> = Key::new();
    static AFTER: Key<Tracked> = Key::new();
    let c = counter();
    let mut ctx = Context::new();
    ctx.insert(&BOMB, Bomb);
    ctx.insert(&AFTER, Tracked(c.clone()));
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| ctx.clear()));
    assert!(caught.is_err());
    assert!(!ctx.contains(&BOMB));
    assert_eq!(ctx.len(), usize::from(ctx.contains(&AFTER)));
    ctx.clear();
    assert!(ctx.is_empty());
    assert_eq!(drops(&c), 1);
}

#[test]
fn unused_key_reads_without_taking_an_index() {
    static NEVER_STORED: Key<u8> = Key::new();
    let mut ctx = Context::new();
    assert_eq!(ctx.get(&NEVER_STORED), None);
    assert_eq!(ctx.get_mut(&NEVER_STORED), None);
    assert_eq!(ctx.remove(&NEVER_STORED), None);
    assert!(!ctx.contains(&NEVER_STORED));
    assert_eq!(NEVER_STORED.assigned(), None);
}

#[test]
fn runtime_keys_are_distinct() {
    let a: &'static Key<u32> = Box::leak(Box::new(Key::new()));
    let b = Key::<u32>::default();
    let mut ctx = Context::new();
    ctx.insert(a, 1);
    ctx.insert(&b, 2);
    assert_eq!(ctx.get(a), Some(&1));
    assert_eq!(ctx.get(&b), Some(&2));
    assert_ne!(a.index(), b.index());
}

#[test]
fn dropped_once_on_replace_remove_and_clear() {
    static T: Key<Tracked> = Key::new();
    let (first, second, third) = (counter(), counter(), counter());
    let mut ctx = Context::new();

    ctx.insert(&T, Tracked(first.clone()));
    let old = ctx.insert(&T, Tracked(second.clone()));
    assert_eq!(
        drops(&first),
        0,
        "the replaced value is returned, not dropped"
    );
    drop(old);
    assert_eq!(drops(&first), 1);

    let removed = ctx.remove(&T);
    assert_eq!(drops(&second), 0);
    drop(removed);
    assert_eq!(drops(&second), 1);

    ctx.insert(&T, Tracked(third.clone()));
    ctx.clear();
    assert_eq!(drops(&third), 1);
    ctx.clear();
    drop(ctx);
    assert_eq!((drops(&first), drops(&second), drops(&third)), (1, 1, 1));
}

#[test]
fn dropped_once_when_context_is_dropped() {
    static T: Key<Tracked> = Key::new();
    let c = counter();
    let mut ctx = Context::new();
    ctx.insert(&T, Tracked(c.clone()));
    drop(ctx);
    assert_eq!(drops(&c), 1);
}

#[test]
fn dropped_once_when_request_ends() {
    static T: Key<Tracked> = Key::new();
    let c = counter();
    let mut req = Request::new(());
    req.context_mut().insert(&T, Tracked(c.clone()));
    assert_eq!(drops(&c), 0);
    drop(req);
    assert_eq!(drops(&c), 1);
    // The recycled context is taken again and dropped again: no second
    // drop of the value.
    drop(RequestContext::new());
    assert_eq!(drops(&c), 1);
}

#[test]
fn no_values_leak_between_requests_on_a_thread() {
    static ID: Key<u64> = Key::new();
    static NAME: Key<String> = Key::new();

    let mut first = RequestContext::new();
    first.insert(&ID, 1);
    first.insert(&NAME, "first".to_owned());
    drop(first);

    let mut second = RequestContext::new();
    assert!(second.is_empty());
    assert_eq!(second.get(&ID), None);
    assert_eq!(second.get(&NAME), None);
    // The recycled slots are reused: same slot array as before.
    assert!(second.slot_count() > ID.index().max(NAME.index()));
    second.insert(&ID, 2);
    assert_eq!(second.get(&ID), Some(&2));
}

#[test]
fn clone_is_a_new_empty_context() {
    static ID: Key<u64> = Key::new();
    let mut rc = RequestContext::new();
    rc.insert(&ID, 5);
    let copy = rc.clone();
    assert!(copy.is_empty());
    assert_eq!(rc.get(&ID), Some(&5));

    let mut req = Request::new(());
    req.context_mut().insert(&ID, 6);
    let cloned_ext = req.extensions().clone();
    assert_eq!(cloned_ext.context().unwrap().get(&ID), None);
}

#[test]
fn ext_trait_on_request_parts_and_extensions() {
    static ID: Key<u64> = Key::new();
    let mut req = Request::new(());
    assert!(req.context().is_none());
    req.context_mut().insert(&ID, 1);
    // One entry, found again rather than replaced.
    req.context_mut().insert(&ID, 2);
    assert_eq!(req.extensions().len(), 1);
    assert_eq!(req.context().unwrap().get(&ID), Some(&2));

    let (mut parts, ()) = req.into_parts();
    assert_eq!(parts.context().unwrap().get(&ID), Some(&2));
    parts.context_mut().remove(&ID);
    assert!(parts.extensions.context().unwrap().is_empty());
}

#[test]
fn free_list_is_bounded() {
    static ID: Key<u64> = Key::new();
    let many: Vec<RequestContext> = (0..FREE_LIST_CAP * 3)
        .map(|i| {
            let mut rc = RequestContext::new();
            rc.insert(&ID, i as u64);
            rc
        })
        .collect();
    drop(many);
    assert!(FREE.with(|f| f.borrow().len()) <= FREE_LIST_CAP);
}

#[test]
fn many_threads_use_contexts_concurrently() {
    static ID: Key<u64> = Key::new();
    static NAME: Key<String> = Key::new();
    static T: Key<Tracked> = Key::new();
    let c = counter();
    let threads: Vec<_> = (0..8u64)
        .map(|t| {
            let c = c.clone();
            std::thread::spawn(move || {
                for i in 0..1_000u64 {
                    let mut req = Request::new(());
                    let ctx = req.context_mut();
                    assert!(ctx.is_empty(), "leak from an earlier request");
                    ctx.insert(&ID, t * 1_000_000 + i);
                    ctx.insert(&NAME, format!("{t}-{i}"));
                    ctx.insert(&T, Tracked(c.clone()));
                    let ctx = req.context().unwrap();
                    assert_eq!(ctx.get(&ID), Some(&(t * 1_000_000 + i)));
                    assert_eq!(ctx.get(&NAME).unwrap(), &format!("{t}-{i}"));
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(drops(&c), 8 * 1_000);
}

#[test]
fn keys_assigned_concurrently_get_distinct_indices() {
    const THREADS: usize = 8;
    const KEYS: usize = 64;
    let keys: &'static [Key<u8>] = Box::leak(
        (0..KEYS)
            .map(|_| Key::new())
            .collect::<Vec<_>>()
            .into_boxed_slice(),
    );
    let barrier = Arc::new(std::sync::Barrier::new(THREADS));
    let seen: Vec<Vec<usize>> = (0..THREADS)
        .map(|_| {
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                barrier.wait();
                keys.iter().map(Key::index).collect::<Vec<_>>()
            })
        })
        .collect::<Vec<_>>()
        .into_iter()
        .map(|t| t.join().unwrap())
        .collect();
    // Every thread saw the same index for each key...
    assert!(seen.iter().all(|s| *s == seen[0]));
    // ...and no two keys share one.
    let mut indices = seen[0].clone();
    indices.sort_unstable();
    indices.dedup();
    assert_eq!(indices.len(), KEYS);
}

#[test]
fn clear_after_remove_drops_nothing_twice() {
    static T: Key<Tracked> = Key::new();
    let (first, second) = (counter(), counter());
    let mut ctx = Context::new();
    ctx.insert(&T, Tracked(first.clone()));
    let removed = ctx.remove(&T);
    ctx.clear();
    assert_eq!(drops(&first), 0, "the removed value belongs to the caller");
    drop(removed);
    assert_eq!(drops(&first), 1);

    // Removed, stored again, then cleared: the second value once.
    ctx.insert(&T, Tracked(second.clone()));
    drop(ctx.remove(&T));
    ctx.insert(&T, Tracked(second.clone()));
    ctx.clear();
    ctx.clear();
    drop(ctx);
    assert_eq!((drops(&first), drops(&second)), (1, 2));
}

#[test]
fn values_larger_than_sixteen_bytes_are_recycled_too() {
    #[derive(Debug, PartialEq)]
    struct Big {
        words: [u64; 8],
        name: String,
    }
    static WORDS: Key<[u64; 8]> = Key::new();
    static BIG: Key<Big> = Key::new();
    for i in 0..3u64 {
        let mut rc = RequestContext::new();
        assert_eq!(rc.get(&WORDS), None, "nothing from request {}", i);
        assert_eq!(rc.get(&BIG), None);
        rc.insert(&WORDS, [i; 8]);
        rc.insert(
            &BIG,
            Big {
                words: [i; 8],
                name: i.to_string(),
            },
        );
        assert_eq!(rc.get(&WORDS), Some(&[i; 8]));
        assert_eq!(
            rc.get(&BIG).map(|b| (b.words[7], b.name.as_str())),
            Some((i, &*i.to_string()))
        );
    }
}

#[test]
fn a_key_beyond_the_slot_array_finds_nothing() {
    // A key that stored a value elsewhere (another context, another
    // server) has an index this context's slot array may not reach.
    let elsewhere: &'static Key<u64> = Box::leak(Box::new(Key::new()));
    let mut other = Context::new();
    other.insert(elsewhere, 1);
    let mut ctx = Context::new();
    assert_eq!(ctx.get(elsewhere), None);
    assert_eq!(ctx.get_mut(elsewhere), None);
    assert_eq!(ctx.remove(elsewhere), None);
    assert!(!ctx.contains(elsewhere));
    assert_eq!(ctx.insert(elsewhere, 2), None);
    assert_eq!(
        (ctx.get(elsewhere), other.get(elsewhere)),
        (Some(&2), Some(&1))
    );
}

#[test]
fn insert_after_an_interrupted_clear_drops_the_leftover_once() {
    static BOMB: Key<Bomb> = Key::new();
    static AFTER: Key<Tracked> = Key::new();
    let (left, next) = (counter(), counter());
    let mut ctx = Context::new();
    // BOMB takes its index first, so the clear reaches it first.
    ctx.insert(&BOMB, Bomb);
    ctx.insert(&AFTER, Tracked(left.clone()));
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| ctx.clear()));
    assert!(caught.is_err());
    assert!(ctx.is_empty());
    assert_eq!(ctx.get(&AFTER).map(|_| ()), None);
    // The value the clear did not reach is dropped when its slot is
    // stored into again, and not by the next clear.
    assert!(ctx.insert(&AFTER, Tracked(next.clone())).is_none());
    assert_eq!(drops(&left), 1);
    ctx.clear();
    assert_eq!((drops(&left), drops(&next)), (1, 1));
}

#[test]
fn drop_glue_values_beyond_one_bitmap_word_are_dropped_once() {
    let keys: Vec<&'static Key<Tracked>> = (0..130)
        .map(|_| &*Box::leak(Box::new(Key::new())))
        .collect();
    let c = counter();
    let mut ctx = Context::new();
    for round in 1..=2 {
        for key in &keys {
            ctx.insert(key, Tracked(c.clone()));
        }
        assert_eq!(ctx.len(), keys.len());
        ctx.clear();
        assert_eq!(drops(&c), round * keys.len());
        assert!(ctx.is_empty());
    }
    drop(ctx);
    assert_eq!(drops(&c), 2 * keys.len());
}

#[test]
fn generations_start_over_after_the_last_one() {
    static N: Key<u64> = Key::new();
    static T: Key<Tracked> = Key::new();
    let c = counter();
    let mut ctx = Context::new();
    ctx.insert(&N, 1);
    ctx.insert(&T, Tracked(c.clone()));
    ctx.generation = u64::MAX;
    // Both slots now look stale; store again in the last generation.
    assert_eq!(ctx.insert(&N, 2), None);
    assert!(ctx.insert(&T, Tracked(c.clone())).is_none());
    assert_eq!(drops(&c), 1);
    ctx.clear();
    assert_eq!(ctx.generation, 1);
    assert_eq!(drops(&c), 2);
    assert!(ctx.is_empty());
    assert_eq!(ctx.get(&N), None, "no stale value after the restart");
    assert_eq!(ctx.insert(&N, 3), None);
    assert_eq!(ctx.get(&N), Some(&3));
}

#[test]
fn context_types_are_send_and_sync() {
    fn assert_send_sync<T: Send + Sync + 'static>() {}
    assert_send_sync::<Context>();
    assert_send_sync::<RequestContext>();
    assert_send_sync::<Key<std::rc::Rc<u8>>>();
}
