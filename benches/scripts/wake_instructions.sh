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
#   TLS=1 CELLS="100:0.2" VARIANTS=default benches/scripts/wake_instructions.sh  # HTTPS (TLS 1.3)
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
#
# TLS=1: HTTPS, as `TLS=1 benches/scripts/wrk.sh`: dormant is
# benches/bin/hello_dormant_tls.rs (dormant's TlsListener) and hyper-util
# benches/bin/hello_hyper_tls.rs (hyper-util over tokio-rustls, the same
# rustls configuration), both built with `--features tls` (aws-lc-rs), as
# is the client. Before the first run hello_dormant_tls makes a
# self-signed certificate (rcgen, ECDSA P-256) in the run's temporary
# directory; every server of the run is given that certificate and key,
# and the client (`load_client --tls CERT_PEM`) trusts it alone. Each
# connection makes a full TLS 1.3 handshake when it connects (ALPN
# http/1.1, or h2 with H2=1; no resumption), outside the window; the
# suite is the client's first choice, TLS_AES_256_GCM_SHA384, unless
# TLS_SUITE names another (`TLS_SUITE=TLS13_AES_128_GCM_SHA256`), and the
# first run prints it. A handshake takes the server ~10 ms under valgrind,
# so connections open at TLS_CONNECT_RATE a second (default 50): the
# 300-connection cell takes 6 s to open.
set -eu

ROUNDS=${1:-1}
CELLS=${CELLS:-"100:0.2 300:3"}
VARIANTS=${VARIANTS:-"default park_off dormant_off"}
ADDR=${WAKE_ADDR:-127.0.0.1:3922}
WINDOW=${WINDOW:-20}
PARTS=${PARTS:-0}
# H2=1: the clients speak HTTP/2 (`load_client --h2`; h2c, or h2 by ALPN
# with TLS=1), and dormant's h2 connections sleep.
CLIENT_FLAGS=()
if [ -n "${H2:-}" ]; then
    CLIENT_FLAGS=(--h2)
fi
CONNECT_RATE=200

cd "$(dirname "$0")/../.."
if [ -n "${TLS:-}" ]; then
    DORMANT=hello_dormant_tls
    HYPER=hello_hyper_tls
    CONNECT_RATE=${TLS_CONNECT_RATE:-50}
    cargo build --release --quiet --features tls --example hello_dormant_tls --example hello_hyper_tls \
        --example load_client
else
    DORMANT=hello_dormant
    HYPER=hello_hyper
    cargo build --release --quiet --example hello_dormant --example hello_hyper --example load_client
fi
BIN=${CARGO_TARGET_DIR:-target}/release/examples
OUT=$(mktemp -d)
pid=""
trap 'if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; fi; rm -rf "$OUT"' EXIT
ulimit -n "$(ulimit -Hn)"

# With TLS, one certificate for every server of the run: hello_dormant_tls
# (not under valgrind) writes its self-signed one under $TMPDIR and is
# stopped at once, as in wrk.sh.
SERVER_ARGS=()
if [ -n "${TLS:-}" ]; then
    mkdir "$OUT/cert"
    TMPDIR=$OUT/cert "$BIN/$DORMANT" 127.0.0.1:0 >"$OUT/cert/out" 2>&1 &
    pid=$!
    i=0
    until grep -qs "^listening on" "$OUT/cert/out"; do
        i=$((i + 1))
        if [ "$i" -gt 100 ] || ! kill -0 "$pid" 2>/dev/null; then
            echo "$DORMANT did not start:" >&2
            cat "$OUT/cert/out" >&2
            exit 1
        fi
        sleep 0.05
    done
    kill "$pid"
    wait "$pid" 2>/dev/null || true
    pid=""
    CERT=$OUT/cert/dormant-tls-hello-dormant/cert.pem
    KEY=$OUT/cert/dormant-tls-hello-dormant/key.pem
    if [ ! -s "$CERT" ] || [ ! -s "$KEY" ]; then
        echo "$DORMANT wrote no certificate:" >&2
        cat "$OUT/cert/out" >&2
        exit 1
    fi
    SERVER_ARGS=("$CERT" "$KEY")
    CLIENT_FLAGS+=(--tls "$CERT")
fi

# run VARIANT CONNS THINK: prints the server's instructions per request and
# the requests of the window.
run() {
    case $1 in
    hyper-util) bin=$HYPER park=10 dormant=1000 ;;
    default) bin=$DORMANT park=10 dormant=1000 ;;
    park_off) bin=$DORMANT park=off dormant=1000 ;;
    dormant_off) bin=$DORMANT park=10 dormant=off ;;
    *)
        echo "wake_instructions.sh: unknown variant $1" >&2
        exit 1
        ;;
    esac
    # The previous run's log goes first: the server's shell truncates the
    # file only once it has forked, and a `listening on` still in it would
    # start the client before this server listens (its first connections
    # refused).
    rm -f "$OUT/server.log"
    PARK_AFTER_MS=$park DORMANT_AFTER_MS=$dormant TOKIO_WORKER_THREADS=1 \
        valgrind --tool=callgrind --callgrind-out-file="$OUT/cg.%p" \
        "$BIN/$bin" "$ADDR" "${SERVER_ARGS[@]}" >"$OUT/server.log" 2>&1 &
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
    limit=$((warmup + WINDOW + $2 / CONNECT_RATE + 60))
    timeout -s KILL "$limit" "$BIN/load_client" "${CLIENT_FLAGS[@]}" "$ADDR" "$2" "$3" "$warmup" "$WINDOW" \
        "$CONNECT_RATE" |
        while IFS= read -r line; do
            case $line in
            connected*tls=*)
                if [ ! -e "$OUT/suite" ]; then
                    echo "${line##*tls=}" >"$OUT/suite"
                    echo "TLS 1.3 suite: ${line##*tls=}" >&2
                fi
                ;;
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
if [ -n "${TLS:-}" ]; then
    echo "over TLS: dormant is $DORMANT, hyper-util $HYPER (tokio-rustls), one self-signed certificate"
fi
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
