//! The typed-index context map against `http::Extensions` and a string-keyed
//! map, on one request-shaped workload, in one run.
//!
//! Each "request": 8 inserts of small values (≤ 16 bytes each), 16 gets
//! (every value read twice and used: folded into a digest, the same way for
//! all three maps, see `Digest`), then the end-of-request reset.
//!
//! - `dormant`: a `RequestContext` taken from the per-thread free list and
//!   dropped back to it, as a request's extension entry is.
//! - `http_extensions`: a new `http::Extensions` per request, one newtype per
//!   value (its keys are types), dropped at the end.
//! - `hashmap`: a new `HashMap<&'static str, Box<dyn Any + Send + Sync>>`
//!   per request (std's default hasher), dropped at the end.
//! - `dormant_in_extensions`: the `dormant` workload reached the way a server
//!   reaches it: `context_mut()` inserts the `RequestContext` into a fresh
//!   `http::Extensions`. The difference to `dormant` is the cost of hyper's
//!   per-request extensions map itself.
//!
//! The interleaved timing (below) also runs `dormant` the way this bench
//! used to read values: each get's reference passed to `black_box`. On the
//! AMD EPYC this was tuned on, that shape is about 1.7x slower, and not
//! because of the map: `black_box` stores each reference to a stack slot
//! that LLVM reuses for the `TypeId` the next downcast returns (through a
//! pointer, from the `Any::type_id` call), and the reload of that slot
//! stalls (`perf` puts the time there; most likely a memory-dependence
//! misprediction: stored to through the stack pointer, then through
//! another register). Copying the values out (`.copied()`) into
//! `black_box` hit the same stall less often (about 1.25x). It is printed
//! so that the cost of the sink stays visible, not hidden by its choice.
//!
//! Before criterion runs, the binary prints
//!
//! - the heap allocations per request of each (steady state, after a
//!   warm-up), counted by a global allocator (`stats_alloc`: implementing
//!   `GlobalAlloc` needs `unsafe`, which the library forbids and the
//!   benches allow only for one call, `malloc_trim`);
//! - nanoseconds per request of each, timed in interleaved rounds, fastest
//!   round kept, and the ratio `http::Extensions / dormant`. On a shared
//!   machine this is the figure to quote: criterion's groups run one after
//!   another and can each see different load.
//!
//! The counting allocator adds atomic increments to every allocation and
//! free, which could slow the workloads that allocate (measured: within
//! noise, about 1%).
//! To time without it, build the bench with `--cfg dormant_uncounted`:
//!
//! ```text
//! cargo rustc --profile bench --bench context -- --cfg dormant_uncounted
//! target/release/deps/context-<hash> --bench --warm-up-time 1 --measurement-time 3
//! ```

// `dormant_uncounted` is this bench's own switch (see above); cargo does not
// know about it.
#![allow(unexpected_cfgs)]

use std::any::Any;
use std::collections::HashMap;
use std::hint::black_box;
use std::time::Instant;

use criterion::{Criterion, criterion_group};
use dormant::context::{ContextExt, Key, RequestContext};
use http::Extensions;

#[cfg(not(dormant_uncounted))]
#[global_allocator]
static GLOBAL: &stats_alloc::StatsAlloc<std::alloc::System> = &stats_alloc::INSTRUMENTED_SYSTEM;

/// A 16-byte value.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Span {
    trace: u64,
    parent: u64,
}

/// The values of one request.
#[derive(Clone, Copy)]
struct Input {
    id: u64,
    user: u32,
    span: Span,
    route: &'static str,
    sampled: bool,
    deadline: u128,
    port: u16,
    weight: f64,
}

fn input(i: u64) -> Input {
    black_box(Input {
        id: i,
        user: i as u32,
        span: Span {
            trace: i,
            parent: !i,
        },
        route: "/users/:id",
        sampled: i % 2 == 0,
        deadline: u128::from(i) << 64,
        port: 8080,
        weight: 0.5,
    })
}

/// What a handler does with a value it reads: uses it. Every get of every
/// map folds its value into a digest the same way. Each round of 8 gets
/// reaches the map through `black_box` (so the compiler cannot merge the
/// two rounds) and ends by passing its digest to `black_box` (so it cannot
/// drop a get).
trait Digest {
    fn digest(&self) -> u64;
}

impl Digest for u64 {
    fn digest(&self) -> u64 {
        *self
    }
}

impl Digest for u32 {
    fn digest(&self) -> u64 {
        u64::from(*self)
    }
}

impl Digest for u16 {
    fn digest(&self) -> u64 {
        u64::from(*self)
    }
}

impl Digest for u128 {
    fn digest(&self) -> u64 {
        (*self >> 64) as u64 ^ *self as u64
    }
}

impl Digest for bool {
    fn digest(&self) -> u64 {
        u64::from(*self)
    }
}

impl Digest for f64 {
    fn digest(&self) -> u64 {
        self.to_bits()
    }
}

impl Digest for &'static str {
    fn digest(&self) -> u64 {
        self.len() as u64
    }
}

impl Digest for Span {
    fn digest(&self) -> u64 {
        self.trace ^ self.parent
    }
}

// dormant: typed static keys.
static ID: Key<u64> = Key::new();
static USER: Key<u32> = Key::new();
static SPAN: Key<Span> = Key::new();
static ROUTE: Key<&'static str> = Key::new();
static SAMPLED: Key<bool> = Key::new();
static DEADLINE: Key<u128> = Key::new();
static PORT: Key<u16> = Key::new();
static WEIGHT: Key<f64> = Key::new();

fn dormant_request(input: Input) {
    let mut ctx = RequestContext::new();
    dormant_work(&mut ctx, input);
    drop(ctx);
}

fn dormant_in_extensions_request(input: Input) {
    let mut ext = Extensions::new();
    dormant_work(ext.context_mut(), input);
    drop(ext);
}

fn dormant_work(ctx: &mut dormant::context::Context, v: Input) {
    ctx.insert(&ID, v.id);
    ctx.insert(&USER, v.user);
    ctx.insert(&SPAN, v.span);
    ctx.insert(&ROUTE, v.route);
    ctx.insert(&SAMPLED, v.sampled);
    ctx.insert(&DEADLINE, v.deadline);
    ctx.insert(&PORT, v.port);
    ctx.insert(&WEIGHT, v.weight);
    for _ in 0..2 {
        let ctx = black_box(&*ctx);
        let mut sum = 0;
        sum ^= ctx.get(&ID).map_or(0, Digest::digest);
        sum ^= ctx.get(&USER).map_or(0, Digest::digest);
        sum ^= ctx.get(&SPAN).map_or(0, Digest::digest);
        sum ^= ctx.get(&ROUTE).map_or(0, Digest::digest);
        sum ^= ctx.get(&SAMPLED).map_or(0, Digest::digest);
        sum ^= ctx.get(&DEADLINE).map_or(0, Digest::digest);
        sum ^= ctx.get(&PORT).map_or(0, Digest::digest);
        sum ^= ctx.get(&WEIGHT).map_or(0, Digest::digest);
        black_box(sum);
    }
}

/// `dormant_request` with each get's reference, not its value, passed to
/// `black_box` (see the module docs).
fn dormant_ref_sink_request(v: Input) {
    let mut rc = RequestContext::new();
    let ctx: &mut dormant::context::Context = &mut rc;
    ctx.insert(&ID, v.id);
    ctx.insert(&USER, v.user);
    ctx.insert(&SPAN, v.span);
    ctx.insert(&ROUTE, v.route);
    ctx.insert(&SAMPLED, v.sampled);
    ctx.insert(&DEADLINE, v.deadline);
    ctx.insert(&PORT, v.port);
    ctx.insert(&WEIGHT, v.weight);
    for _ in 0..2 {
        black_box(ctx.get(&ID));
        black_box(ctx.get(&USER));
        black_box(ctx.get(&SPAN));
        black_box(ctx.get(&ROUTE));
        black_box(ctx.get(&SAMPLED));
        black_box(ctx.get(&DEADLINE));
        black_box(ctx.get(&PORT));
        black_box(ctx.get(&WEIGHT));
    }
    drop(rc);
}

/// A value well over 16 bytes, and one with drop glue that owns no heap.
#[cfg(not(dormant_uncounted))]
static LARGE: Key<[u64; 8]> = Key::new();
#[cfg(not(dormant_uncounted))]
static GUARD: Key<Guard> = Key::new();

/// Drop glue without allocation.
#[cfg(not(dormant_uncounted))]
struct Guard(u64);

#[cfg(not(dormant_uncounted))]
impl Drop for Guard {
    fn drop(&mut self) {
        black_box(self.0);
    }
}

/// The `dormant` workload plus a 64-byte value and a value with drop glue:
/// steady state allocates nothing whatever the size.
#[cfg(not(dormant_uncounted))]
fn dormant_large_request(v: Input) {
    let mut ctx = RequestContext::new();
    dormant_work(&mut ctx, v);
    ctx.insert(&LARGE, [v.id; 8]);
    ctx.insert(&GUARD, Guard(v.id));
    black_box(ctx.get(&LARGE).map(|a| a[7]));
    drop(ctx);
}

// http::Extensions: one newtype per value, since its keys are types.
#[derive(Clone)]
struct Id(u64);
#[derive(Clone)]
struct User(u32);
#[derive(Clone)]
struct SpanExt(Span);
#[derive(Clone)]
struct Route(&'static str);
#[derive(Clone)]
struct Sampled(bool);
#[derive(Clone)]
struct Deadline(u128);
#[derive(Clone)]
struct Port(u16);
#[derive(Clone)]
struct Weight(f64);

fn extensions_request(v: Input) {
    let mut ext = Extensions::new();
    ext.insert(Id(v.id));
    ext.insert(User(v.user));
    ext.insert(SpanExt(v.span));
    ext.insert(Route(v.route));
    ext.insert(Sampled(v.sampled));
    ext.insert(Deadline(v.deadline));
    ext.insert(Port(v.port));
    ext.insert(Weight(v.weight));
    for _ in 0..2 {
        let ext = black_box(&ext);
        let mut sum = 0;
        sum ^= ext.get::<Id>().map_or(0, |x| x.0.digest());
        sum ^= ext.get::<User>().map_or(0, |x| x.0.digest());
        sum ^= ext.get::<SpanExt>().map_or(0, |x| x.0.digest());
        sum ^= ext.get::<Route>().map_or(0, |x| x.0.digest());
        sum ^= ext.get::<Sampled>().map_or(0, |x| x.0.digest());
        sum ^= ext.get::<Deadline>().map_or(0, |x| x.0.digest());
        sum ^= ext.get::<Port>().map_or(0, |x| x.0.digest());
        sum ^= ext.get::<Weight>().map_or(0, |x| x.0.digest());
        black_box(sum);
    }
    drop(ext);
}

type StringMap = HashMap<&'static str, Box<dyn Any + Send + Sync>>;

fn get<'a, T: 'static>(map: &'a StringMap, key: &str) -> Option<&'a T> {
    map.get(key)?.downcast_ref()
}

fn hashmap_request(v: Input) {
    let mut map = StringMap::new();
    map.insert("request_id", Box::new(v.id));
    map.insert("user", Box::new(v.user));
    map.insert("span", Box::new(v.span));
    map.insert("route", Box::new(v.route));
    map.insert("sampled", Box::new(v.sampled));
    map.insert("deadline", Box::new(v.deadline));
    map.insert("port", Box::new(v.port));
    map.insert("weight", Box::new(v.weight));
    for _ in 0..2 {
        let map = black_box(&map);
        let mut sum = 0;
        sum ^= get::<u64>(map, "request_id").map_or(0, Digest::digest);
        sum ^= get::<u32>(map, "user").map_or(0, Digest::digest);
        sum ^= get::<Span>(map, "span").map_or(0, Digest::digest);
        sum ^= get::<&'static str>(map, "route").map_or(0, Digest::digest);
        sum ^= get::<bool>(map, "sampled").map_or(0, Digest::digest);
        sum ^= get::<u128>(map, "deadline").map_or(0, Digest::digest);
        sum ^= get::<u16>(map, "port").map_or(0, Digest::digest);
        sum ^= get::<f64>(map, "weight").map_or(0, Digest::digest);
        black_box(sum);
    }
    drop(map);
}

/// Heap allocations (including reallocations) per request in steady state.
#[cfg(not(dormant_uncounted))]
fn allocations_per_request(request: fn(Input)) -> f64 {
    const WARM_UP: u64 = 1_000;
    const MEASURED: u64 = 10_000;
    for i in 0..WARM_UP {
        request(input(i));
    }
    let region = stats_alloc::Region::new(GLOBAL);
    for i in 0..MEASURED {
        request(input(i));
    }
    let change = region.change();
    (change.allocations + change.reallocations) as f64 / MEASURED as f64
}

#[cfg(not(dormant_uncounted))]
fn print_allocations() {
    // Check the workloads agree before timing them.
    let mut ctx = RequestContext::new();
    dormant_work(&mut ctx, input(3));
    assert_eq!(
        ctx.get(&SPAN),
        Some(&Span {
            trace: 3,
            parent: !3
        })
    );
    assert_eq!(ctx.len(), 8);
    drop(ctx);

    let dormant = allocations_per_request(dormant_request);
    let extensions = allocations_per_request(extensions_request);
    let hashmap = allocations_per_request(hashmap_request);
    let in_extensions = allocations_per_request(dormant_in_extensions_request);
    let large = allocations_per_request(dormant_large_request);
    println!(
        "allocations per request: dormant {dormant}, http::Extensions {extensions}, \
         HashMap {hashmap} (dormant inside a fresh http::Extensions: {in_extensions}; \
         dormant plus a 64-byte value and a value with drop glue: {large})"
    );
}

#[cfg(dormant_uncounted)]
fn print_allocations() {
    println!("allocations per request: not counted (built with --cfg dormant_uncounted)");
}

/// A named request workload.
type Workload = (&'static str, fn(Input));

/// Nanoseconds per request of each workload, timed in interleaved rounds and
/// taking each one's fastest round: on a shared, noisy machine this keeps the
/// ratio honest where back-to-back criterion groups can see different load.
fn print_interleaved_times() {
    const ROUNDS: usize = 100;
    const PER_ROUND: u64 = 5_000;
    let workloads: [Workload; 5] = [
        ("dormant", dormant_request),
        ("http::Extensions", extensions_request),
        ("HashMap", hashmap_request),
        (
            "dormant inside http::Extensions",
            dormant_in_extensions_request,
        ),
        ("dormant, references to black_box", dormant_ref_sink_request),
    ];
    let mut best = [f64::INFINITY; 5];
    for _ in 0..ROUNDS {
        for (slot, (_, request)) in best.iter_mut().zip(workloads) {
            let start = Instant::now();
            for i in 0..PER_ROUND {
                request(input(i));
            }
            let ns = start.elapsed().as_nanos() as f64 / PER_ROUND as f64;
            *slot = slot.min(ns);
        }
    }
    let line: Vec<String> = workloads
        .iter()
        .zip(best)
        .map(|((name, _), ns)| format!("{name} {ns:.1}"))
        .collect();
    println!(
        "ns per request (fastest of {ROUNDS} interleaved rounds): {}; \
         http::Extensions / dormant = {:.1}x, HashMap / dormant = {:.1}x",
        line.join(", "),
        best[1] / best[0],
        best[2] / best[0]
    );
}

fn request_context(c: &mut Criterion) {
    let mut group = c.benchmark_group("request_context");
    let mut i = 0u64;
    let mut next = move || {
        i = i.wrapping_add(1);
        input(i)
    };
    group.bench_function("dormant", |b| b.iter(|| dormant_request(next())));
    group.bench_function("http_extensions", |b| b.iter(|| extensions_request(next())));
    group.bench_function("hashmap", |b| b.iter(|| hashmap_request(next())));
    group.bench_function("dormant_in_extensions", |b| {
        b.iter(|| dormant_in_extensions_request(next()))
    });
    group.finish();
}

criterion_group!(benches, request_context);

fn main() {
    print_allocations();
    print_interleaved_times();
    benches();
    Criterion::default().configure_from_args().final_summary();
}
