#!/bin/sh
# Hello-world throughput with wrk: dormant (benches/bin/hello_dormant.rs)
# against hyper-util (benches/bin/hello_hyper.rs), same machine, same run,
# in one of two ways:
#
#   benches/scripts/wrk.sh [ROUNDS] [DURATION]          # alternating, default 5 rounds of 8s
#   PAIRED=1 benches/scripts/wrk.sh [ROUNDS] [DURATION] # both at once on one core
#   PARK_AFTER_MS=0 benches/scripts/wrk.sh              # dormant with park_after = 0 ms
#   PEER_ADDR=on benches/scripts/wrk.sh                 # dormant with the PeerAddr extension
#   TLS=1 PAIRED=1 benches/scripts/wrk.sh               # over TLS: hello_dormant_tls against
#                                                       # hello_hyper_tls (benches/bin/)
#   CLOSE=1 TLS=1 PAIRED=1 benches/scripts/wrk.sh       # a new connection (and TLS
#                                                       # handshake) per request
#   H2=1 PAIRED=1 benches/scripts/wrk.sh                # HTTP/2: h2load instead of wrk
#   H2=1 TLS=1 PAIRED=1 benches/scripts/wrk.sh          # HTTP/2 over TLS (ALPN h2)
#   AGAINST=PATH PAIRED=1 benches/scripts/wrk.sh        # dormant against another server
#                                                       # binary (another build of
#                                                       # hello_dormant) instead of hyper-util
#   HOOKS=on AGAINST_ENV=HOOKS=off AGAINST=PATH ...     # AGAINST_ENV: environment of the
#                                                       # second server only
#
# Run it from anywhere: it works in the checkout that holds it.
#
# Each server gets one tokio worker thread (TOKIO_WORKER_THREADS=1) pinned
# to CPU 0; wrk (-t1 -c64) is pinned to CPU 1. Requests are keep-alive
# unless CLOSE is set.
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
# request in the round. That holds only while the servers' core is the
# bottleneck. When wrk's core is (CLOSE=1: a wrk spends more CPU time per
# request than its server, with TLS almost twice as much), both servers
# get what their wrk can send and the requests ratio says little about
# them; read the CPU-per-request column then.
#
# TLS=1: HTTPS, with benches/bin/hello_dormant_tls.rs (dormant's
# TlsListener, the configuration of TlsConfig::from_pem_files) as dormant
# and benches/bin/hello_hyper_tls.rs (hyper-util over tokio-rustls, the same
# rustls configuration) as hyper-util, both built with `--features tls`
# (aws-lc-rs). Before the first round hello_dormant_tls makes a self-signed
# certificate (rcgen, ECDSA P-256) in a temporary directory; every server
# of the run is then given that certificate and key. wrk speaks TLS through
# OpenSSL without ALPN, so both serve HTTP/1.1 (TLS 1.3, X25519,
# TLS_AES_256_GCM_SHA384, OpenSSL's first choice).
#
# CLOSE=1: every request carries `Connection: close`, so the server closes
# the connection after its response and wrk opens a new one (a new TCP
# connection, and with TLS=1 a new handshake; wrk's OpenSSL offers the
# session of its connection's previous use, so all but each connection's
# first are TLS 1.3 resumptions, with a fresh X25519 exchange but no
# certificate signature). When `perf stat` can count the kernel's
# sock:inet_sock_set_state tracepoint (root, or perf_event_paranoid -1),
# each run also reports, for its timed part: the connections the server
# accepted, how many it closed first (ESTABLISHED -> FIN_WAIT1), how many
# wrk closed first (-> CLOSE_WAIT) and how many ended in a reset
# (ESTABLISHED -> CLOSE; wrk's connections open when it stops); the CPU
# time per request of the server and of its wrk (which one is the
# bottleneck); and the server's CPU time over the wall time. It warns when
# a server accepted fewer connections than wrk counted requests.
#
# H2=1: HTTP/2, loaded by h2load (nghttp2) instead of wrk: -t1 -c64 with
# 10 streams at a time on each connection (-m10), h2c with prior knowledge,
# or with TLS=1 h2 chosen by ALPN. The busy connections never sleep (they
# are never quiet for park_after), so this measures what the frame
# watcher and dormant's reads through a pool buffer cost per request.
# CLOSE does not apply.
#
# Needs wrk (Debian: apt-get install wrk), h2load for H2 (nghttp2-client), taskset (util-linux) and two
# free ports (WRK_ADDR, default 127.0.0.1:3917, and WRK_ADDR2, default
# 127.0.0.1:3918, for hyper-util when paired); perf for CLOSE=1's
# connection counts. PARK_AFTER_MS and PEER_ADDR are passed to dormant's
# server (hello_dormant, or hello_dormant_tls with TLS=1; see
# benches/common/server.rs); SERVER_CPU and CLIENT_CPU move the servers
# and wrk; CARGO_TARGET_DIR is honoured. wrk's non-2xx responses and socket errors
# are printed as they come.
set -eu

ROUNDS=${1:-5}
DURATION=${2:-8s}
ADDR=${WRK_ADDR:-127.0.0.1:3917}
ADDR2=${WRK_ADDR2:-127.0.0.1:3918}
SERVER_CPU=${SERVER_CPU:-0}
CLIENT_CPU=${CLIENT_CPU:-1}

cd "$(dirname "$0")/../.."
if [ -n "${TLS:-}" ]; then
    DORMANT=hello_dormant_tls
    HYPER=hello_hyper_tls
    SCHEME=https
    cargo build --release --quiet --features tls --example hello_dormant_tls --example hello_hyper_tls
else
    DORMANT=hello_dormant
    HYPER=hello_hyper
    SCHEME=http
    cargo build --release --quiet --example hello_dormant --example hello_hyper
fi
TARGET=${CARGO_TARGET_DIR:-target}/release/examples
if [ -n "${AGAINST:-}" ]; then
    HYPER=$AGAINST
fi

# cpu PID: the process's user + system time so far, in clock ticks.
cpu() {
    awk '{ print $14 + $15 }' "/proc/$1/stat"
}

# listening NAME PID OUT: waits until process PID, running NAME with its
# output going to the file OUT, prints `listening on`.
listening() {
    i=0
    until grep -q "^listening on" "$3"; do
        i=$((i + 1))
        if [ "$i" -gt 100 ] || ! kill -0 "$2" 2>/dev/null; then
            echo "$1 did not start:" >&2
            cat "$3" >&2
            exit 1
        fi
        sleep 0.05
    done
}

# With TLS, one certificate for every server of the run: hello_dormant_tls
# writes its self-signed one under $TMPDIR and is stopped at once.
CERT=""
KEY=""
if [ -n "${TLS:-}" ]; then
    certdir=$(mktemp -d)
    trap 'rm -rf "$certdir"' EXIT
    TMPDIR=$certdir "$TARGET/$DORMANT" 127.0.0.1:0 >"$certdir/out" 2>&1 &
    pid=$!
    listening "$DORMANT" "$pid" "$certdir/out"
    kill "$pid"
    wait "$pid" 2>/dev/null || true
    CERT=$certdir/dormant-tls-hello-dormant/cert.pem
    KEY=$certdir/dormant-tls-hello-dormant/key.pem
    if [ ! -s "$CERT" ] || [ ! -s "$KEY" ]; then
        echo "$DORMANT wrote no certificate:" >&2
        cat "$certdir/out" >&2
        exit 1
    fi
fi

# start BIN ADDR [ENV]: starts BIN (a bench binary's name, or a path) on
# ADDR (with the certificate, if TLS) with the environment ENV added,
# pinned, and waits until it listens; sets $pid.
start() {
    out=$(mktemp)
    case $1 in
        */*) bin=$1 ;;
        *) bin=$TARGET/$1 ;;
    esac
    # shellcheck disable=SC2086
    if [ -n "$CERT" ]; then
        env ${3:-} TOKIO_WORKER_THREADS=1 taskset -c "$SERVER_CPU" "$bin" "$2" "$CERT" "$KEY" >"$out" 2>&1 &
    else
        env ${3:-} TOKIO_WORKER_THREADS=1 taskset -c "$SERVER_CPU" "$bin" "$2" >"$out" 2>&1 &
    fi
    pid=$!
    listening "$1" "$pid" "$out"
    rm -f "$out"
}

# load ADDR DURATION: wrk against ADDR, pinned; prints its report, then
# `wrk cpu TICKS`, the CPU time wrk used (user + system: the children's
# times of the shell that waited for it, from /proc/PID/stat).
load() {
    url="$SCHEME://$1/"
    duration=$2
    if [ -n "${CLOSE:-}" ]; then
        set -- -H "Connection: close"
    else
        set --
    fi
    if [ -n "${H2:-}" ]; then
        report=$(taskset -c "$CLIENT_CPU" h2load -t1 -c64 -m10 -D"$duration" "$url")
        echo "$report" | awk '/^requests:/ && $(NF - 5) != 0 { print "h2load: " $0 > "/dev/stderr" }'
        echo "$report"
        return
    fi
    report=$(taskset -c "$CLIENT_CPU" sh -c '
        wrk "$@" && awk "{ print \"wrk cpu\", \$16 + \$17 }" /proc/$$/stat
    ' sh -t1 -c64 -d"$duration" "$@" "$url")
    echo "$report" | awk '/Non-2xx|Socket errors/ { print "wrk: " $0 > "/dev/stderr" }'
    echo "$report"
}

# per_request REPORT TICKS: prints the requests wrk (or h2load) completed
# and the server's CPU microseconds per request.
per_request() {
    echo "$1" | awk -v ticks="$2" -v hz="$(getconf CLK_TCK)" '
        / requests in / { n = $1 }
        /^requests:/ { for (i = 1; i < NF; i++) if ($(i + 1) == "succeeded,") n = $i }
        END { printf "%s %.3f\n", n, ticks / hz * 1e6 / n }'
}

# CLOSE=1's connection counts, when perf can count the tracepoint.
COUNT=""
if [ -n "${CLOSE:-}" ]; then
    if perf stat -a -e sock:inet_sock_set_state -- true >/dev/null 2>&1; then
        COUNT=1
    else
        echo "perf stat cannot count sock:inet_sock_set_state here: no connection counts" >&2
    fi
fi
notes=$(mktemp)

# count_start PORT...: counts, in the background until count_end, the
# servers' TCP state changes on PORT... (4 counters a port: accepted,
# closed first by the server, by the client, reset); sets $counter.
count_start() {
    counted=$(mktemp)
    events=""
    for port in "$@"; do
        for change in 'oldstate==3&&newstate==1' 'oldstate==1&&newstate==4' \
            'oldstate==1&&newstate==8' 'oldstate==1&&newstate==7'; do
            events="$events -e sock:inet_sock_set_state --filter sport==$port&&$change"
        done
    done
    # Counts until the timed load is over; nothing else uses the ports.
    # shellcheck disable=SC2086
    perf stat -x, -o "$counted" -a $events -- sleep "$DURATION" 2 &
    counter=$!
    sleep 0.3
}

# count_end: waits for the counter; sets $counts to its numbers.
count_end() {
    wait "$counter"
    counts=$(awk -F, '/^[0-9]/ { printf "%s ", $1 }' "$counted")
    rm -f "$counted"
}

# note NAME REPORT TICKS SECONDS ACCEPTED BY_SERVER BY_CLIENT RESET: one
# server's connection counts, its and its wrk's CPU time per request and
# its share of the wall time, into $notes; warns when it accepted fewer
# connections than wrk counted requests.
note() {
    n=$(echo "$2" | awk '/ requests in / { print $1 }')
    client=$(echo "$2" | awk -v hz="$(getconf CLK_TCK)" -v n="$n" '
        /^wrk cpu / { printf "%.0f", $3 / hz * 1e6 / n }')
    share=$(echo "$3 $4" | awk -v hz="$(getconf CLK_TCK)" '{ printf "%.0f", $1 / hz / $2 * 100 }')
    echo "       $1: $n requests, $5 connections accepted, closed first by the server $6, by wrk $7, reset $8; CPU per request: server $(echo "$3 $n" | awk -v hz="$(getconf CLK_TCK)" '{ printf "%.0f", $1 / hz * 1e6 / $2 }') µs, its wrk $client µs; server CPU $share% of the wall time" >>"$notes"
    if [ "$5" -lt "$n" ]; then
        echo "       $1: fewer connections than requests: wrk did not reconnect for each" >>"$notes"
    fi
}

# now: seconds since the epoch, with nanoseconds.
now() {
    date +%s.%N
}

# run BIN [ENV]: BIN alone (with the environment ENV added); prints its
# requests and CPU microseconds per request.
run() {
    start "$1" "$ADDR" "${2:-}"
    # Warm-up on connections of its own, untimed.
    load "$ADDR" 1s >/dev/null
    if [ -n "$COUNT" ]; then
        count_start "${ADDR##*:}"
    fi
    before=$(cpu "$pid")
    t0=$(now)
    report=$(load "$ADDR" "$DURATION")
    ticks=$(($(cpu "$pid") - before))
    seconds=$(echo "$t0 $(now)" | awk '{ print $2 - $1 }')
    per_request "$report" "$ticks"
    if [ -n "$COUNT" ]; then
        count_end
        # shellcheck disable=SC2086
        note "$1" "$report" "$ticks" "$seconds" $counts
    fi
    kill "$pid"
    wait "$pid" 2>/dev/null || true
}

# pair: both servers at once; prints what `run` prints, dormant's first.
pair() {
    start "$DORMANT" "$ADDR"
    d=$pid
    start "$HYPER" "$ADDR2" "${AGAINST_ENV:-}"
    h=$pid
    load "$ADDR" 1s >/dev/null &
    w=$!
    load "$ADDR2" 1s >/dev/null
    wait "$w"
    if [ -n "$COUNT" ]; then
        count_start "${ADDR##*:}" "${ADDR2##*:}"
    fi
    d0=$(cpu "$d")
    h0=$(cpu "$h")
    t0=$(now)
    dout=$(mktemp)
    load "$ADDR" "$DURATION" >"$dout" &
    w=$!
    hreport=$(load "$ADDR2" "$DURATION")
    wait "$w"
    d1=$(cpu "$d")
    h1=$(cpu "$h")
    seconds=$(echo "$t0 $(now)" | awk '{ print $2 - $1 }')
    per_request "$(cat "$dout")" $((d1 - d0))
    per_request "$hreport" $((h1 - h0))
    if [ -n "$COUNT" ]; then
        count_end
        # shellcheck disable=SC2086
        set -- $counts
        note "$DORMANT" "$(cat "$dout")" $((d1 - d0)) "$seconds" "$1" "$2" "$3" "$4"
        note "$HYPER" "$hreport" $((h1 - h0)) "$seconds" "$5" "$6" "$7" "$8"
    fi
    kill "$d" "$h"
    wait "$d" "$h" 2>/dev/null || true
    rm -f "$dout"
}

mode=alternating
if [ -n "${PAIRED:-}" ]; then
    mode="paired (both servers at once)"
fi
connections=keep-alive
if [ -n "${CLOSE:-}" ]; then
    connections="Connection: close (a new connection per request)"
fi
client="wrk -t1 -c64 -d$DURATION"
if [ -n "${H2:-}" ]; then
    client="h2load -t1 -c64 -m10 -D$DURATION (HTTP/2)"
fi
echo "$client $SCHEME, $connections, $mode, servers: 1 worker thread on CPU $SERVER_CPU, the client on CPU $CLIENT_CPU"
if [ -n "${TLS:-}" ]; then
    echo "dormant: hello_dormant_tls, hyper-util: hello_hyper_tls (tokio-rustls), one self-signed certificate"
fi
echo "dormant park_after: ${PARK_AFTER_MS:-default} ms, PeerAddr extension: ${PEER_ADDR:-off}, hooks: ${HOOKS:-off}"
if [ -n "${AGAINST:-}" ]; then
    echo "against: $AGAINST ${AGAINST_ENV:-} (in the hyper-util columns)"
fi
printf '%-6s %12s %12s %8s %12s %12s %8s\n' round "dormant req" "hyper req" ratio \
    "dormant µs" "hyper µs" "cpu h/d"
ratios=""
cpu_ratios=""
r=1
while [ "$r" -le "$ROUNDS" ]; do
    if [ -n "${PAIRED:-}" ]; then
        set -- $(pair)
    else
        set -- $(run "$DORMANT") $(run "$HYPER" "${AGAINST_ENV:-}")
    fi
    ratio=$(echo "$1 $3" | awk '{ printf "%.3f", $1 / $2 }')
    # hyper's CPU per request over dormant's: above 1 means dormant is
    # cheaper.
    cpu_ratio=$(echo "$2 $4" | awk '{ printf "%.3f", $2 / $1 }')
    ratios="$ratios $ratio"
    cpu_ratios="$cpu_ratios $cpu_ratio"
    printf '%-6s %12s %12s %8s %12s %12s %8s\n' "$r" "$1" "$3" "$ratio" "$2" "$4" "$cpu_ratio"
    cat "$notes"
    : >"$notes"
    r=$((r + 1))
done
rm -f "$notes"
median() {
    tr ' ' '\n' | grep . | sort -n |
        awk '{ v[NR] = $1 } END { m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; printf "%.3f", m }'
}
echo "median ratio dormant / hyper-util, requests: $(echo "$ratios" | median)"
echo "median ratio hyper-util / dormant, CPU per request: $(echo "$cpu_ratios" | median)"
