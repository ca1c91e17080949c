#!/bin/bash
# System calls per keep-alive request with think time between requests:
# dormant (benches/bin/hello_dormant.rs, defaults) against hyper-util
# (benches/bin/hello_hyper.rs), one after the other in the same run,
# counted by `strace -f -c` on the server process.
#
#   benches/scripts/syscalls.sh [CONNS] [REQUESTS] [THINK]   # default 200 10 0.3
#   benches/scripts/syscalls.sh 1 300 0.3     # one connection: every wake alone
#   benches/scripts/syscalls.sh 200 8 1.6     # long enough to go DORMANT
#   benches/scripts/syscalls.sh 1 300 0.005   # stays ACTIVE
#
# Run it from anywhere: it works in the checkout that holds it.
#
# CONNS clients (bash, /dev/tcp) each open one keep-alive connection and
# send REQUESTS `GET /` requests, reading each response to its end and
# then waiting THINK seconds (±50%, random) before the next. With the
# defaults (`park_after` 10 ms, `dormant_after` 1 s), a think time of
# 0.3 s parks every dormant connection between requests and 1.6 s puts it
# to sleep in the lot. Each server runs on one tokio worker thread.
# The figures count the server's system calls only, accept and close
# included, divided by the requests. One connection alone pays every
# timer registration's wake-up of tokio's driver (an eventfd write and an
# extra epoll_wait); many connections share them, which is the case this
# server is for. Needs strace and bash; CARGO_TARGET_DIR is honoured.
set -eu

CONNS=${1:-200}
REQUESTS=${2:-10}
THINK=${3:-0.3}
PORT=${SYSCALLS_PORT:-3919}

cd "$(dirname "$0")/../.."
cargo build --release --quiet --example hello_dormant --example hello_hyper
BIN=${CARGO_TARGET_DIR:-target}/release/examples
# The length of a hello response: status line, content-length and date
# (fixed width) headers, blank line, 13-byte body.
RESPONSE_LEN=89

# client: one connection, REQUESTS requests with think time.
client() {
    exec 3<>"/dev/tcp/127.0.0.1/$PORT"
    sleep "$(think)"
    for _ in $(seq "$REQUESTS"); do
        printf 'GET / HTTP/1.1\r\nHost: x\r\n\r\n' >&3
        head -c "$RESPONSE_LEN" <&3 >/dev/null
        sleep "$(think)"
    done
    exec 3>&-
}

# think: THINK seconds ±50%.
think() {
    echo "$THINK $RANDOM" | awk '{ printf "%.4f", $1 * (0.5 + $2 / 32768) }'
}

# measure BIN: prints "calls-per-request" for the whole run, then one line
# per system call.
measure() {
    out=$(mktemp)
    TOKIO_WORKER_THREADS=1 "$BIN/$1" "127.0.0.1:$PORT" >"$out" 2>&1 &
    pid=$!
    until grep -qs "^listening on" "$out"; do sleep 0.05; done
    counts=$(mktemp)
    strace -f -c -o "$counts" -p "$pid" 2>/dev/null &
    tracer=$!
    sleep 0.5
    for _ in $(seq "$CONNS"); do
        client &
    done
    wait $(jobs -p | grep -v -e "^$pid\$" -e "^$tracer\$")
    sleep 0.2
    kill -INT "$tracer"
    wait "$tracer" 2>/dev/null || true
    kill "$pid"
    wait "$pid" 2>/dev/null || true
    awk -v n=$((CONNS * REQUESTS)) '
        $NF == "total" { total = $(NF - 2) / n }
        NF >= 5 && $NF != "total" && $NF != "syscall" && $4 ~ /^[0-9]+$/ { lines = lines sprintf("  %-12s %6.2f\n", $NF, $4 / n) }
        END { printf "%.2f\n%s", total, lines }' "$counts"
    rm -f "$out" "$counts"
}

echo "system calls per request: $CONNS connections x $REQUESTS requests, think ${THINK}s, 1 worker thread"
d=$(measure hello_dormant)
h=$(measure hello_hyper)
echo "dormant:    $(echo "$d" | head -1)"
echo "$d" | tail -n +2
echo "hyper-util: $(echo "$h" | head -1)"
echo "$h" | tail -n +2
echo "ratio dormant / hyper-util: $(echo "$(echo "$d" | head -1) $(echo "$h" | head -1)" | awk '{ printf "%.2f", $1 / $2 }')"
