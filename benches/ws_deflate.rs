//! What compressing a message costs `dormant::ws` once per publish, and
//! what inflating it costs each client: ws_broadcast's market-data event
//! (481 bytes of JSON), compressed by flate2 (miniz_oxide) with the
//! settings `src/ws/deflate.rs` uses (`Compression::fast()`, raw deflate,
//! the compressor reset for each message, a sync flush), and inflated as
//! the benches' clients do it (`benches/common/deflate.rs`: a `Decompress`
//! reset for each message). A measure of the dependency at those settings;
//! what the library spends around it shows in ws_broadcast's compressed
//! kind.
//!
//! ```text
//! cargo bench --bench ws_deflate
//! ```

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group};
use flate2::{Compress, Compression, FlushCompress};

#[allow(dead_code, reason = "this bench inflates, and nothing else")]
#[path = "common/deflate.rs"]
mod deflate;

/// ws_broadcast's message (`event(7, …)`).
const EVENT: &str = r#"{"type":"price","channel":"quotes.us-equities","symbol":"ACME","name":"Acme Corporation","exchange":"XNAS","currency":"USD","bid":101.32,"ask":101.34,"bid_size":1200,"ask_size":1000,"last":101.33,"last_size":100,"open":100.12,"high":102.48,"low":99.87,"prev_close":100.05,"change":1.28,"change_pct":1.2794,"volume":18243600,"vwap":101.1834,"trades":48274,"halted":false,"conditions":["@","F","T"],"tape":"C","session":"regular","source":"consolidated","ts":1764408000123456,"seq":7}"#;

/// `payload` compressed with those settings into `out`: its length
/// without the flush's last four bytes.
fn compress(compressor: &mut Compress, out: &mut Vec<u8>, payload: &[u8]) -> usize {
    compressor.reset();
    out.clear();
    out.reserve(payload.len() + 8);
    compressor
        .compress_vec(payload, out, FlushCompress::Sync)
        .expect("deflate");
    out.len() - 4
}

fn ws_deflate(c: &mut Criterion) {
    let mut compressor = Compress::new(Compression::fast(), false);
    let mut out = Vec::new();
    let compressed = compress(&mut compressor, &mut out, EVENT.as_bytes());
    let message = out[..compressed].to_vec();
    println!("the event: {} B, compressed {compressed} B", EVENT.len());
    let mut group = c.benchmark_group("ws_deflate");
    group.throughput(Throughput::Bytes(EVENT.len() as u64));
    group.bench_function("compress (once per publish)", |b| {
        b.iter(|| compress(&mut compressor, &mut out, black_box(EVENT.as_bytes())))
    });
    group.bench_function("reset alone", |b| b.iter(|| compressor.reset()));
    let mut inflater = deflate::Inflater::new();
    let mut text = Vec::new();
    group.bench_function("inflate (each client)", |b| {
        b.iter(|| inflater.inflate(black_box(&message), &mut text))
    });
    group.finish();
    assert_eq!(text, EVENT.as_bytes());
}

criterion_group!(benches, ws_deflate);

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
}
