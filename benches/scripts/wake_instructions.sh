#!/bin/bash
# User-space instructions per request for keep-alive connections that think
# between requests (the load of benches/scripts/load.sh, smaller): dormant
# (benches/bin/hello_dormant.rs, and its park_after / dormant_after
# ablations) against hyper-util (benches/bin/hello_hyper.rs), each server
# under valgrind's callgrind with one tokio worker thread, the client
# (benches/bin/load_client.rs) in its own process.
#
#   benches/scripts/wake_instructions.sh [ROUNDS]          # default 1 round
#   CELLS="300:3" VARIANTS=default benches/scripts/wake_instructions.sh
#   H2=1 CELLS="100:0.2" VARIANTS=default benches/scripts/wake_instructions.sh   # HTTP/2 (h2c)
#
# Run it from anywhere: it works in the checkout that holds it.
#
# Why: at a few thousand requests/s a server's CPU time on this shared
# virtual machine is mostly the kernel, much of it waking the client over
# loopback, and its ratios swing by 2x from round to round (BENCHMARKS.md,
# "Load"). Instruction counts do not move with other tenants' load: they
# measure the wake path itself (user space only; system calls:
# benches/scripts/syscalls.sh).
#
# CELLS lists CONNS:THINK (THINK in seconds; default "100:0.2 300:3": every
# dormant connection PARKED, then DORMANT, between requests). VARIANTS
# (default "default park_off dormant_off") are run against hyper-util in
# each cell, as in load.sh: `park_off` is PARK_AFTER_MS=off, `dormant_off`
# DORMANT_AFTER_MS=off. Under valgrind a server runs ~50x slower, so the
# cells are small, connections open at 200 a second, and the offered load
# stays well below what the slowed server can take. A run: the client
# connects, warms up for WARMUP seconds (default max(5, 4 THINK): past
# dormant_after's 1 s), then counts the requests completed in a WINDOW
# (default 20 s); the script zeroes callgrind's counters when the client
# prints `window start` and dumps them at `window end`, and divides the
# instructions (Ir) by those requests. Prints each run, the ratio to
# hyper-util of the same round, and the medians. Needs valgrind (with
# callgrind_control) and a free port (WAKE_ADDR, default 127.0.0.1:3922);
# CARGO_TARGET_DIR is honoured.
#
# With PARTS=1, each run also prints (to stderr) the inclusive instructions
# per request of the functions a wake goes through: spawning and ending the
# task, building hyper and taking it apart, the PARKED wait, the lot's park,
# events and deadlines, its epoll, the watchdog, tokio's timer and I/O
# driver. Build with
# CARGO_PROFILE_RELEASE_DEBUG=line-tables-only (and a CARGO_TARGET_DIR of
# its own) so that inlined functions keep their names. With CALLGRIND_KEEP=DIR,
# each run's window profile is kept as DIR/VARIANT-CONNS-THINK-REQUESTS.N
# (for callgrind_annotate; divide by REQUESTS).
set -eu

ROUNDS=${1:-1}
CELLS=${CELLS:-"100:0.2 300:3"}
VARIANTS=${VARIANTS:-"default park_off dormant_off"}
ADDR=${WAKE_ADDR:-127.0.0.1:3922}
WINDOW=${WINDOW:-20}
PARTS=${PARTS:-0}
# H2=1: the clients speak h2c (`load_client --h2`), and dormant's sleep.
CLIENT_FLAGS=()
if [ -n "${H2:-}" ]; then
    CLIENT_FLAGS=(--h2)
fi

cd "$(dirname "$0")/../.."
cargo build --release --quiet --example hello_dormant --example hello_hyper --example load_client
BIN=${CARGO_TARGET_DIR:-target}/release/examples
OUT=$(mktemp -d)
pid=""
trap 'if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; fi; rm -rf "$OUT"' EXIT
ulimit -n "$(ulimit -Hn)"

# run VARIANT CONNS THINK: prints the server's instructions per request and
# the requests of the window.
run() {
    case $1 in
    hyper-util) bin=hello_hyper park=10 dormant=1000 ;;
    default) bin=hello_dormant park=10 dormant=1000 ;;
    park_off) bin=hello_dormant park=off dormant=1000 ;;
    dormant_off) bin=hello_dormant park=10 dormant=off ;;
    *)
        echo "wake_instructions.sh: unknown variant $1" >&2
        exit 1
        ;;
    esac
    PARK_AFTER_MS=$park DORMANT_AFTER_MS=$dormant TOKIO_WORKER_THREADS=1 \
        valgrind --tool=callgrind --callgrind-out-file="$OUT/cg.%p" \
        "$BIN/$bin" "$ADDR" >"$OUT/server.log" 2>&1 &
    pid=$!
    i=0
    until grep -qs "^listening on" "$OUT/server.log"; do
        i=$((i + 1))
        if [ "$i" -gt 600 ] || ! kill -0 "$pid" 2>/dev/null; then
            echo "$bin did not start:" >&2
            cat "$OUT/server.log" >&2
            exit 1
        fi
        sleep 0.1
    done
    warmup=$(echo "$3" | awk '{ w = 4 * $1; printf "%d", (w > 5) ? w + 0.999 : 5 }')
    limit=$((warmup + WINDOW + $2 / 200 + 60))
    timeout -s KILL "$limit" "$BIN/load_client" "${CLIENT_FLAGS[@]}" "$ADDR" "$2" "$3" "$warmup" "$WINDOW" 200 |
        while IFS= read -r line; do
            case $line in
            "window start") callgrind_control -z "$pid" >/dev/null 2>&1 ;;
            "window end") callgrind_control -d "$pid" >/dev/null 2>&1 ;;
            result*) echo "$line" >"$OUT/result" ;;
            esac
        done
    kill "$pid"
    wait "$pid" 2>/dev/null || true
    pid=""
    if [ ! -s "$OUT/result" ]; then
        echo "the client of $1 reported no result" >&2
        exit 1
    fi
    requests=$(sed -n 's/.*requests=\([0-9]*\).*/\1/p' "$OUT/result")
    errors=$(sed -n 's/.*errors=\([0-9]*\).*/\1/p' "$OUT/result")
    if [ "$errors" != 0 ]; then
        echo "$1: the client counted $errors errors" >&2
    fi
    ir=$(cat "$OUT"/cg.*.* 2>/dev/null | awk '/^summary:/ { s += $2 } END { print s + 0 }')
    if [ "$PARTS" = 1 ]; then
        parts "$1" "$requests"
    fi
    if [ -n "${CALLGRIND_KEEP:-}" ]; then
        for f in "$OUT"/cg.*.*; do
            cp "$f" "$CALLGRIND_KEEP/$1-$2-$3-$requests.${f##*.}"
        done
    fi
    rm -f "$OUT"/cg.* "$OUT/result"
    echo "$ir $requests" | awk '{ printf "%.0f %d", ($2 > 0) ? $1 / $2 : 0, $2 }'
}

# parts VARIANT REQUESTS: prints to stderr the inclusive instructions per
# request of the functions a wake goes through (those that ran).
parts() {
    local pattern
    callgrind_annotate --auto=no --inclusive=yes "$OUT"/cg.*.* >"$OUT/annotated" 2>/dev/null
    for pattern in \
        'tokio::task::spawn::spawn ' 'Harness<T,S>::complete ' \
        'dormant::conn::activate ' 'Builder::serve_connection ' \
        'dormant::conn::h1::Driver<T,S,B>::finish ' \
        'hyper::proto::h1::dispatch::Dispatcher<D,Bs,I,T>::poll_catch ' \
        'dormant::conn::parked::ParkedWait<T> as core::future::future::Future>::poll ' \
        'dormant::lot::Lot<T,W>::park ' 'dormant::lot::Lot<T,W>::on_events ' \
        'dormant::lot::Lot<T,W>::expire ' 'mio::poll::Poll::poll ' \
        'dormant::timeout::Watchdog::poll ' 'process_at_time ' \
        'tokio::runtime::io::driver::Driver::turn '; do
        awk -v p="$pattern" -v n="$2" -v v="$1" 'index($0, p) && !done {
                x = $1; gsub(",", "", x); sub(/^ *[0-9,]+ *\([^)]*\) */, ""); sub(/ \[.*/, ""); sub(/^.*\/registry\/src\/[^\/]*\//, "")
                printf "  %-11s %8.0f  %s\n", v, x / n, $0; done = 1 }' "$OUT/annotated" >&2
    done
    rm -f "$OUT/annotated"
}

median() {
    echo "$1" | tr ' ' '\n' | grep . | sort -n |
        awk '{ v[NR] = $1 } END { printf "%.3f", (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

echo "user-space instructions per request (callgrind), $ROUNDS round(s), window ${WINDOW}s"
for cell in $CELLS; do
    conns=${cell%%:*}
    think=${cell#*:}
    echo "cell: $conns connections, think time Exp(mean ${think}s)"
    printf '%-6s %-12s %12s %10s %8s\n' round server "instr/req" requests ratio
    : >"$OUT/ratios"
    r=1
    while [ "$r" -le "$ROUNDS" ]; do
        out=$(run hyper-util "$conns" "$think")
        h=${out% *}
        printf '%-6s %-12s %12s %10s %8s\n' "$r" hyper-util "$h" "${out#* }" -
        for variant in $VARIANTS; do
            out=$(run "$variant" "$conns" "$think")
            ratio=$(echo "${out% *} $h" | awk '{ printf "%.3f", $1 / $2 }')
            echo "$variant $ratio" >>"$OUT/ratios"
            printf '%-6s %-12s %12s %10s %8s\n' "$r" "$variant" "${out% *}" "${out#* }" "$ratio"
        done
        r=$((r + 1))
    done
    for variant in $VARIANTS; do
        echo "median $variant / hyper-util: $(median "$(awk -v v="$variant" '$1 == v { print $2 }' "$OUT/ratios")")"
    done
done
