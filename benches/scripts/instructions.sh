#!/bin/sh
# User-space instructions per keep-alive request: dormant
# (benches/bin/hello_dormant.rs, with its defaults and with the PeerAddr
# extension on) against hyper-util (benches/bin/hello_hyper.rs), same run,
# under valgrind's callgrind. Instruction counts do not move with other
# tenants' load, so on a shared machine they resolve differences of a few
# percent that requests/s cannot (see benches/scripts/wrk.sh for those).
# They count the server process's user space only: the kernel's share of a
# request (about 80% of its CPU time here, under perf) is not in them.
#
#   benches/scripts/instructions.sh [ROUNDS] [DURATION]   # default 2 rounds of 5s
#   CALLGRIND_KEEP=1 benches/scripts/instructions.sh      # keep the profiles in target/
#   BASELINE=/path/to/hello_dormant benches/scripts/instructions.sh   # and another build
#
# Run it from anywhere: it works in the checkout that holds it.
#
# BASELINE compares a change with the build before it in the same run:
# build the earlier commit's bench server elsewhere (git worktree add
# /tmp/before REV; cd /tmp/before; cargo build --release --example
# hello_dormant, or --example hello before the bench server had a binary of
# its own) and pass its binary; each round then runs it too and prints
# dormant / baseline. hyper-util's own count moves by about 1% from one run
# to the next, so comparing two runs' ratios cannot resolve a 1% change;
# interleaving the builds can.
#
# Each round starts a server under callgrind with one tokio worker thread,
# warms it up with `wrk -t1 -c64` for 2 s, zeroes the counters, runs wrk for
# DURATION, dumps the counters and divides the instructions (Ir) by the
# requests wrk completed. Under valgrind the server runs ~50x slower, so
# dormant's `park_after` is raised to 100 ms (PARK_AFTER_MS): its timer then
# fires about as often per request (once per ~15 requests on a connection)
# as with the 10 ms default at native speed. Needs valgrind (with
# callgrind_control) and wrk (Debian: apt-get install valgrind wrk) and a
# free port (WRK_ADDR, default 127.0.0.1:3918). CARGO_TARGET_DIR is honoured.
# To see where the instructions go, keep the profiles and read them with
# callgrind_annotate (build with CARGO_PROFILE_RELEASE_DEBUG=line-tables-only
# for file names).
set -eu

ROUNDS=${1:-2}
DURATION=${2:-5s}
ADDR=${WRK_ADDR:-127.0.0.1:3918}

cd "$(dirname "$0")/../.."
cargo build --release --quiet --example hello_dormant --example hello_hyper
TARGET=${CARGO_TARGET_DIR:-target}
BIN=$TARGET/release/examples
OUT=$(mktemp -d)

# bin NAME: the example NAME, or BASELINE for the name "baseline".
bin() {
    if [ "$1" = baseline ]; then echo "$BASELINE"; else echo "$BIN/$1"; fi
}

# run NAME [PEER_ADDR]: prints the server's instructions per request.
run() {
    # A log of an earlier run holds its "listening on" line; the redirection
    # below truncates it only once the background job starts.
    rm -f "$OUT/$1.log"
    PEER_ADDR=${2:-off} PARK_AFTER_MS=100 TOKIO_WORKER_THREADS=1 valgrind --tool=callgrind \
        --callgrind-out-file="$OUT/$1.%p" "$(bin "$1")" "$ADDR" >"$OUT/$1.log" 2>&1 &
    pid=$!
    i=0
    until grep -qs "^listening on" "$OUT/$1.log"; do
        i=$((i + 1))
        if [ "$i" -gt 600 ]; then
            echo "$1 did not start" >&2
            kill "$pid" 2>/dev/null
            exit 1
        fi
        sleep 0.1
    done
    wrk -t1 -c64 -d2s "http://$ADDR/" >/dev/null
    callgrind_control -z "$pid" >/dev/null 2>&1
    requests=$(wrk -t1 -c64 -d"$DURATION" "http://$ADDR/" | awk '/requests in/ { print $1 }')
    callgrind_control -d "$pid" >/dev/null 2>&1
    kill "$pid"
    wait "$pid" 2>/dev/null || true
    ir=$(awk '/^summary:/ { print $2 }' "$OUT/$1.$pid".*)
    if [ -n "${CALLGRIND_KEEP:-}" ]; then
        mv "$OUT/$1.$pid".* "$TARGET/"
    fi
    rm -f "$OUT/$1".*
    echo "$ir $requests" | awk '{ printf "%.0f", $1 / $2 }'
}

echo "user-space instructions per request (callgrind, wrk -t1 -c64 -d$DURATION, 1 worker thread)"
printf '%-6s %10s %14s %12s %8s %8s\n' round dormant "with PeerAddr" hyper-util ratio "ratio'"
ratios=""
ratios_on=""
baselines=""
r=1
while [ "$r" -le "$ROUNDS" ]; do
    d=$(run hello_dormant)
    o=$(run hello_dormant on)
    h=$(run hello_hyper)
    ratio=$(echo "$d $h" | awk '{ printf "%.3f", $1 / $2 }')
    ratio_on=$(echo "$o $h" | awk '{ printf "%.3f", $1 / $2 }')
    ratios="$ratios $ratio"
    ratios_on="$ratios_on $ratio_on"
    printf '%-6s %10s %14s %12s %8s %8s\n' "$r" "$d" "$o" "$h" "$ratio" "$ratio_on"
    if [ -n "${BASELINE:-}" ]; then
        b=$(run baseline)
        vs=$(echo "$d $b" | awk '{ printf "%.4f", $1 / $2 }')
        baselines="$baselines $vs"
        echo "       baseline $b, dormant / baseline $vs"
    fi
    r=$((r + 1))
done
rmdir "$OUT" 2>/dev/null || true

median() {
    echo "$1" | tr ' ' '\n' | grep . | sort -n |
        awk '{ v[NR] = $1 } END { printf "%.3f", (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
echo "median ratio dormant / hyper-util, instructions per request: $(median "$ratios")"
echo "the same with PEER_ADDR=on (ratio'): $(median "$ratios_on")"
if [ -n "${BASELINE:-}" ]; then
    echo "median ratio dormant / baseline: $(median "$baselines")"
fi
