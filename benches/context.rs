//! The typed-index context map against `http::Extensions` and a string-keyed
//! map, on one request-shaped workload, in one run.
//!
//! Each "request": 8 inserts of small values (≤ 16 bytes each), 16 gets
//! (every value read twice), then the end-of-request reset.
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
//! Before criterion runs, the binary prints
//!
//! - the heap allocations per request of each (steady state, after a
//!   warm-up), counted by a global allocator (`stats_alloc`: the crate
//!   forbids `unsafe`, and implementing `GlobalAlloc` needs it);
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
        black_box(ctx.get(&ID));
        black_box(ctx.get(&USER));
        black_box(ctx.get(&SPAN));
        black_box(ctx.get(&ROUTE));
        black_box(ctx.get(&SAMPLED));
        black_box(ctx.get(&DEADLINE));
        black_box(ctx.get(&PORT));
        black_box(ctx.get(&WEIGHT));
    }
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
        black_box(ext.get::<Id>().map(|x| x.0));
        black_box(ext.get::<User>().map(|x| x.0));
        black_box(ext.get::<SpanExt>().map(|x| x.0));
        black_box(ext.get::<Route>().map(|x| x.0));
        black_box(ext.get::<Sampled>().map(|x| x.0));
        black_box(ext.get::<Deadline>().map(|x| x.0));
        black_box(ext.get::<Port>().map(|x| x.0));
        black_box(ext.get::<Weight>().map(|x| x.0));
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
        black_box(get::<u64>(&map, "request_id"));
        black_box(get::<u32>(&map, "user"));
        black_box(get::<Span>(&map, "span"));
        black_box(get::<&'static str>(&map, "route"));
        black_box(get::<bool>(&map, "sampled"));
        black_box(get::<u128>(&map, "deadline"));
        black_box(get::<u16>(&map, "port"));
        black_box(get::<f64>(&map, "weight"));
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
    println!(
        "allocations per request: dormant {dormant}, http::Extensions {extensions}, \
         HashMap {hashmap} (dormant inside a fresh http::Extensions: {in_extensions})"
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
    let workloads: [Workload; 4] = [
        ("dormant", dormant_request),
        ("http::Extensions", extensions_request),
        ("HashMap", hashmap_request),
        (
            "dormant inside http::Extensions",
            dormant_in_extensions_request,
        ),
    ];
    let mut best = [f64::INFINITY; 4];
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
         http::Extensions / dormant = {:.1}x",
        line.join(", "),
        best[1] / best[0]
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
