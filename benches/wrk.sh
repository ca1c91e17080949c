#!/bin/sh
# Keep-alive hello-world throughput with wrk: dormant (examples/hello.rs)
# against hyper-util (benches/bin/hello_hyper.rs), same machine, same run,
# in one of two ways:
#
#   benches/wrk.sh [ROUNDS] [DURATION]          # alternating, default 5 rounds of 8s
#   PAIRED=1 benches/wrk.sh [ROUNDS] [DURATION] # both at once on one core
#   PARK_AFTER_MS=0 benches/wrk.sh              # dormant with park_after = 0 ms
#   PEER_ADDR=on benches/wrk.sh                 # dormant with the PeerAddr extension
#
# Each server gets one tokio worker thread (TOKIO_WORKER_THREADS=1) pinned
# to CPU 0; wrk (-t1 -c64) is pinned to CPU 1.
#
# Alternating: a round runs dormant, then hyper-util, each alone; the ratio
# of a round is dormant / hyper-util. Prints every run's requests (wrk's count) and
# the server's CPU time per request (user + system, from /proc/PID/stat).
# On a shared machine other tenants' load changes from one run to the next,
# and 10-round medians of the same build have differed by 16%.
#
# Paired: a round runs both servers at the same time on the same core, each
# loaded by its own wrk (both on CPU 1). The scheduler gives the two
# servers equal shares of the core, so the ratio of requests served is the
# inverse ratio of their costs per request, and load from other tenants
# falls on both at once. Prints each server's requests and CPU time per
# request in the round.
#
# Needs wrk (Debian: apt-get install wrk), taskset (util-linux) and two
# free ports (WRK_ADDR, default 127.0.0.1:3917, and WRK_ADDR2, default
# 127.0.0.1:3918, for hyper-util when paired). PARK_AFTER_MS and PEER_ADDR
# are passed to the dormant example; CARGO_TARGET_DIR is honoured.
set -eu

ROUNDS=${1:-5}
DURATION=${2:-8s}
ADDR=${WRK_ADDR:-127.0.0.1:3917}
ADDR2=${WRK_ADDR2:-127.0.0.1:3918}
SERVER_CPU=${SERVER_CPU:-0}
CLIENT_CPU=${CLIENT_CPU:-1}

cd "$(dirname "$0")/.."
cargo build --release --quiet --example hello --example hello_hyper
TARGET=${CARGO_TARGET_DIR:-target}/release/examples

# cpu PID: the process's user + system time so far, in clock ticks.
cpu() {
    awk '{ print $14 + $15 }' "/proc/$1/stat"
}

# start BIN ADDR: starts BIN on ADDR, pinned, and waits until it listens;
# sets $pid.
start() {
    out=$(mktemp)
    TOKIO_WORKER_THREADS=1 taskset -c "$SERVER_CPU" "$TARGET/$1" "$2" >"$out" 2>&1 &
    pid=$!
    i=0
    until grep -q "^listening on" "$out"; do
        i=$((i + 1))
        if [ "$i" -gt 100 ] || ! kill -0 "$pid" 2>/dev/null; then
            echo "$1 did not start:" >&2
            cat "$out" >&2
            exit 1
        fi
        sleep 0.05
    done
    rm -f "$out"
}

# load ADDR DURATION: wrk against ADDR, pinned; prints its report.
load() {
    report=$(taskset -c "$CLIENT_CPU" wrk -t1 -c64 -d"$2" "http://$1/")
    echo "$report" | awk '/Non-2xx|Socket errors/ { print "wrk: " $0 > "/dev/stderr" }'
    echo "$report"
}

# per_request REPORT TICKS: prints the requests wrk completed and the
# server's CPU microseconds per request.
per_request() {
    echo "$1" | awk -v ticks="$2" -v hz="$(getconf CLK_TCK)" '
        / requests in / { n = $1 }
        END { printf "%s %.3f\n", n, ticks / hz * 1e6 / n }'
}

# run BIN: BIN alone; prints its requests and CPU microseconds per request.
run() {
    start "$1" "$ADDR"
    # Warm-up on connections of its own, untimed.
    load "$ADDR" 1s >/dev/null
    before=$(cpu "$pid")
    report=$(load "$ADDR" "$DURATION")
    per_request "$report" $(($(cpu "$pid") - before))
    kill "$pid"
    wait "$pid" 2>/dev/null || true
}

# pair: both servers at once; prints what `run` prints, dormant's first.
pair() {
    start hello "$ADDR"
    d=$pid
    start hello_hyper "$ADDR2"
    h=$pid
    load "$ADDR" 1s >/dev/null &
    w=$!
    load "$ADDR2" 1s >/dev/null
    wait "$w"
    d0=$(cpu "$d")
    h0=$(cpu "$h")
    dout=$(mktemp)
    load "$ADDR" "$DURATION" >"$dout" &
    w=$!
    hreport=$(load "$ADDR2" "$DURATION")
    wait "$w"
    d1=$(cpu "$d")
    h1=$(cpu "$h")
    per_request "$(cat "$dout")" $((d1 - d0))
    per_request "$hreport" $((h1 - h0))
    kill "$d" "$h"
    wait "$d" "$h" 2>/dev/null || true
    rm -f "$dout"
}

mode=alternating
if [ -n "${PAIRED:-}" ]; then
    mode="paired (both servers at once)"
fi
echo "wrk -t1 -c64 -d$DURATION, $mode, servers: 1 worker thread on CPU $SERVER_CPU, wrk on CPU $CLIENT_CPU"
echo "dormant park_after: ${PARK_AFTER_MS:-default} ms, PeerAddr extension: ${PEER_ADDR:-off}"
printf '%-6s %12s %12s %8s %12s %12s %8s\n' round "dormant req" "hyper req" ratio \
    "dormant µs" "hyper µs" "cpu h/d"
ratios=""
cpu_ratios=""
r=1
while [ "$r" -le "$ROUNDS" ]; do
    if [ -n "${PAIRED:-}" ]; then
        set -- $(pair)
    else
        set -- $(run hello) $(run hello_hyper)
    fi
    ratio=$(echo "$1 $3" | awk '{ printf "%.3f", $1 / $2 }')
    # hyper's CPU per request over dormant's: above 1 means dormant is
    # cheaper.
    cpu_ratio=$(echo "$2 $4" | awk '{ printf "%.3f", $2 / $1 }')
    ratios="$ratios $ratio"
    cpu_ratios="$cpu_ratios $cpu_ratio"
    printf '%-6s %12s %12s %8s %12s %12s %8s\n' "$r" "$1" "$3" "$ratio" "$2" "$4" "$cpu_ratio"
    r=$((r + 1))
done
median() {
    tr ' ' '\n' | grep . | sort -n |
        awk '{ v[NR] = $1 } END { m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; printf "%.3f", m }'
}
echo "median ratio dormant / hyper-util, requests: $(echo "$ratios" | median)"
echo "median ratio hyper-util / dormant, CPU per request: $(echo "$cpu_ratios" | median)"
