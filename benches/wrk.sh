#!/bin/sh
# Keep-alive hello-world throughput with wrk: dormant (examples/hello.rs)
# against hyper-util (examples/hello_hyper.rs), alternating, same machine,
# same run. Prints every run's Requests/sec and the server's CPU time per
# request (user + system, from /proc/PID/stat: less sensitive than
# throughput to other load on a shared machine), and the median ratios.
#
#   benches/wrk.sh [ROUNDS] [DURATION]        # default 5 rounds of 8s each
#   PARK_AFTER_MS=0 benches/wrk.sh            # dormant with park_after = 0 ms
#   PEER_ADDR=off benches/wrk.sh              # dormant without the PeerAddr extension
#
# Each server gets one tokio worker thread (TOKIO_WORKER_THREADS=1) pinned
# to CPU 0; wrk (-t1 -c64) is pinned to CPU 1. A round runs dormant, then
# hyper-util; the ratio of a round is dormant / hyper-util. Needs wrk
# (Debian: apt-get install wrk), taskset (util-linux) and a free port
# (WRK_ADDR, default 127.0.0.1:3917). PARK_AFTER_MS and PEER_ADDR are
# passed to the dormant example; CARGO_TARGET_DIR is honoured.
set -eu

ROUNDS=${1:-5}
DURATION=${2:-8s}
ADDR=${WRK_ADDR:-127.0.0.1:3917}
SERVER_CPU=${SERVER_CPU:-0}
CLIENT_CPU=${CLIENT_CPU:-1}

cd "$(dirname "$0")/.."
cargo build --release --quiet --example hello --example hello_hyper
TARGET=${CARGO_TARGET_DIR:-target}/release/examples

# cpu PID: the process's user + system time so far, in clock ticks.
cpu() {
    awk '{ print $14 + $15 }' "/proc/$1/stat"
}

# run BIN: starts BIN on ADDR, runs wrk against it, prints Requests/sec and
# the server's CPU microseconds per request.
run() {
    out=$(mktemp)
    TOKIO_WORKER_THREADS=1 taskset -c "$SERVER_CPU" "$TARGET/$1" "$ADDR" >"$out" 2>&1 &
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
    # Warm-up on connections of its own, untimed.
    taskset -c "$CLIENT_CPU" wrk -t1 -c64 -d1s "http://$ADDR/" >/dev/null
    before=$(cpu "$pid")
    report=$(taskset -c "$CLIENT_CPU" wrk -t1 -c64 -d"$DURATION" "http://$ADDR/")
    after=$(cpu "$pid")
    echo "$report" | awk '/Non-2xx|Socket errors/ { print "wrk: " $0 > "/dev/stderr" }'
    echo "$report" | awk -v ticks=$((after - before)) -v hz="$(getconf CLK_TCK)" '
        / requests in / { n = $1 }
        /^Requests\/sec:/ { rps = $2 }
        END { printf "%s %.3f\n", rps, ticks / hz * 1e6 / n }'
    kill "$pid"
    wait "$pid" 2>/dev/null || true
    rm -f "$out"
}

echo "wrk -t1 -c64 -d$DURATION, servers: 1 worker thread on CPU $SERVER_CPU, wrk on CPU $CLIENT_CPU"
echo "dormant park_after: ${PARK_AFTER_MS:-default} ms, PeerAddr extension: ${PEER_ADDR:-on}"
printf '%-6s %12s %12s %8s %12s %12s %8s\n' round "dormant r/s" "hyper r/s" ratio \
    "dormant µs" "hyper µs" "cpu h/d"
ratios=""
cpu_ratios=""
r=1
while [ "$r" -le "$ROUNDS" ]; do
    set -- $(run hello) $(run hello_hyper)
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
echo "median ratio dormant / hyper-util, requests/s: $(echo "$ratios" | median)"
echo "median ratio hyper-util / dormant, CPU per request: $(echo "$cpu_ratios" | median)"
