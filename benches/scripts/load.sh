#!/bin/bash
# Keep-alive connections that think between requests: server CPU time per
# request, latency and RSS per connection of dormant
# (benches/bin/hello_dormant.rs) against hyper-util
# (benches/bin/hello_hyper.rs), interleaved in one run.
#
#   benches/scripts/load.sh [ROUNDS] [WINDOW]   # default 3 rounds, 20 s window: the full matrix (~27 min)
#   CELLS="5000:3" VARIANTS=default benches/scripts/load.sh 1 10
#   CELLS="200:0.2 200:3" benches/scripts/load.sh 1 5   # a smoke run
#   PAIRED=1 CELLS="5000:3" VARIANTS="default park_off" benches/scripts/load.sh 3 20
#   H2=1 PAIRED=1 CELLS="5000:0.2 5000:3" benches/scripts/load.sh 3 20   # HTTP/2 (h2c)
#
# Run it from anywhere: it works in the checkout that holds it.
#
# CELLS lists the cells as CONNS:THINK (THINK in seconds), default
# "5000:0.005 5000:0.2 5000:3 15000:3". VARIANTS lists the dormant servers run
# in each cell against hyper-util, default "default park_off dormant_off":
# `default` is benches/bin/hello_dormant.rs with its defaults, `park_off`
# sets PARK_AFTER_MS=off (park_after(None): connections keep hyper, never
# park), `dormant_off` DORMANT_AFTER_MS=off (dormant_after(None): parked
# connections stay in tokio, never DORMANT); `dormant_10s` (not run by
# default) DORMANT_AFTER_MS=10000, a longer dormant_after than the default
# 1 s;
# `park_0` (not run by default) PARK_AFTER_MS=0, park_after(0): every
# connection parks as soon as it is quiet.
#
# A run: the server starts with one tokio worker thread
# (TOKIO_WORKER_THREADS=1), pinned to CPU SERVER_CPU (default 0); its RSS is
# read (VmRSS, /proc/PID/status). The client (benches/bin/load_client.rs, a
# process of its own, one thread, pinned to CPU CLIENT_CPU, default 1) opens
# CONNS keep-alive connections, CONNECT_RATE a second (default 2,000, so the
# accept queue never overflows); each sends `GET /` after a think time drawn
# from an exponential distribution of mean THINK, reads the response, and
# thinks again. Then the warm-up: WARMUP seconds (default per cell
# max(5, 4 THINK): a few think times, past dormant_after's 1 s). Then the
# window: WINDOW seconds in which the client counts the requests that
# complete and their latency (from before the request's write to the
# response's last byte). The client prints `window start` and `window end`
# at those instants; the script then reads the server's CPU time (user +
# system, /proc/PID/stat, in clock ticks: 10 ms) and, at the start, its RSS.
#
# A round runs hyper-util and each variant once, one after the other, each
# in a fresh server process; the order alternates from round to round
# (variants then hyper-util in odd rounds, hyper-util then the variants in
# reverse in even ones). With PAIRED=1, a round instead runs each variant
# at the same time as a hyper-util of its own: both servers on CPU
# SERVER_CPU (on ports PORT and PORT + 1 of LOAD_ADDR), each loaded by a
# client of its own on CLIENT_CPU. Load from other tenants of the machine
# then falls on both at once: alternating runs of ~35 s saw hyper-util's
# own CPU per request move by 30% from one round to the next at 3 s think
# times, where paired rounds agree within a few percent. It suits the
# cells where both servers together stay well below one core (T = 3 s:
# ~6% each; T = 0.2 s: ~40% each, so their latencies include waiting for
# the other; not T = 5 ms, where each alone saturates the core).
#
# Printed per run: requests in the window, requests/s, the server's and the
# client's CPU use in the window (% of a core: a server at 100 is
# saturated, a client near 100 may not keep up), server CPU µs per request,
# latency p50/p99/p99.9 (µs), RSS per connection ((RSS with the
# connections open - RSS before) / connections, bytes) and
# errors, then the server's context switches per request in the window
# (all threads, /proc/PID/task/*/status: mostly a worker that slept in
# epoll_wait and was woken, which costs more kernel time than most system
# calls); per round the ratios variant / hyper-util of the same round; per
# cell the median of those per-round ratios and their range; at the end a
# summary of every cell's medians. Expect about CONNS x WINDOW / THINK
# requests in a window when THINK is far above the latency (tokio's 1 ms
# timer adds ~0.5 ms to each think time, which counts at THINK = 5 ms; at
# 5,000 connections and 5 ms the server's core saturates instead).
#
# With H2=1, every client connection speaks HTTP/2 with prior knowledge
# (h2c; both servers serve it on their one port) and makes its requests as
# streams of that connection, one at a time, with the same think times
# (load_client --h2: hyper's http2 client, default settings). dormant's
# idle h2 connections sleep where its HTTP/1.1 ones park: hyper's
# connection dropped past park_after (10 ms by default, so at every think
# time of the default cells but 5 ms), DORMANT past dormant_after (1 s);
# park_off keeps them awake, dormant_off keeps them PARKED. The same cells,
# variants and figures; the header lines name the protocol.
#
# With SYSCALLS=1, each run also counts the server's system calls in the
# window (perf's syscall tracepoints; needs `perf` and tracepoint access,
# e.g. root) and prints them per request: all of them, epoll_wait,
# epoll_ctl, recvfrom, writev and write. Counting costs the server a little
# CPU time: take the CPU column from a run without it.
#
# With PROFILE=1, each run also samples the server in its window
# (`perf record -F 2000`, call graphs off) and prints where its CPU time
# went: the kernel, the server's binary, libc (malloc, memcpy) and the rest,
# as shares of the samples. Same caveat. With PROFILE_KEEP=DIR as well, each
# run's perf.data is kept as DIR/CONNS:THINK-VARIANT-ROUND.data, for
# `perf report -i FILE --sort sym`; PROFILE_ARGS replaces perf record's
# options (default `-F 2000`; `-F 2000 -g` adds the kernel's call chains).
#
# Connect errors, slow connects (over 500 ms: a dropped SYN), failed
# requests (malformed response, close, no response in 10 s; never retried)
# and anything a server prints are reported on stderr and in the errors
# column. Every wait is bounded; servers and clients are killed on exit.
# Needs bash, taskset (util-linux) and a free port (LOAD_ADDR, default
# 127.0.0.1:3921, and the next one with PAIRED); raises `ulimit -n` to the
# hard limit (CONNS + 64 must fit); CARGO_TARGET_DIR is honoured.
set -euo pipefail

ROUNDS=${1:-3}
WINDOW=${2:-20}
CELLS=${CELLS:-"5000:0.005 5000:0.2 5000:3 15000:3"}
VARIANTS=${VARIANTS:-"default park_off dormant_off"}
ADDR=${LOAD_ADDR:-127.0.0.1:3921}
HOST=${ADDR%:*}
PORT=${ADDR##*:}
PAIRED=${PAIRED:-0}
H2=${H2:-0}
SERVER_CPU=${SERVER_CPU:-0}
CLIENT_CPU=${CLIENT_CPU:-1}
CONNECT_RATE=${CONNECT_RATE:-2000}
SYSCALLS=${SYSCALLS:-0}
PROFILE=${PROFILE:-0}
SYSCALL_EVENTS=raw_syscalls:sys_enter
for call in epoll_wait epoll_ctl recvfrom writev write; do
    SYSCALL_EVENTS+=",syscalls:sys_enter_$call"
done
HZ=$(getconf CLK_TCK)
# The client's protocol: its flag and its name in the header lines.
protocol="HTTP/1.1"
client_flags=()
if [ "$H2" = 1 ]; then
    protocol="HTTP/2 (h2c, one stream at a time)"
    client_flags=(--h2)
fi

cd "$(dirname "$0")/../.."
cargo build --release --quiet --example hello_dormant --example hello_hyper --example load_client
TARGET=${CARGO_TARGET_DIR:-target}/release/examples

ulimit -n "$(ulimit -Hn)"
for cell in $CELLS; do
    if [ $((${cell%%:*} + 64)) -gt "$(ulimit -n)" ]; then
        echo "load.sh: cell $cell: ${cell%%:*} connections do not fit in ulimit -n $(ulimit -n)" >&2
        exit 1
    fi
done
for variant in $VARIANTS; do
    case $variant in
    default | park_off | dormant_off | dormant_10s | park_0) ;;
    *)
        echo "load.sh: unknown variant $variant (default, park_off, dormant_off, dormant_10s, park_0)" >&2
        exit 1
        ;;
    esac
done

tmp=$(mktemp -d)
servers=""
clients=""
profilers=""
cleanup() {
    for p in $profilers $clients $servers; do
        kill "$p" 2>/dev/null || true
    done
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# cpu PID: sets $ticks to the process's user + system time so far, in
# clock ticks (no subprocess, so that it reads the instant it is called).
cpu() {
    local -a f
    if ! read -r -a f 2>/dev/null <"/proc/$1/stat"; then
        echo "load.sh: a server (pid $1) is gone:" >&2
        cat "$tmp"/server*.log >&2
        exit 1
    fi
    ticks=$((f[13] + f[14]))
}

# switches PID: the context switches of all of PID's threads so far
# (voluntary: a thread blocked, e.g. in epoll_wait, and woke up again).
switches() {
    cat /proc/"$1"/task/*/status 2>/dev/null | awk '/^(non)?voluntary_ctxt_switches:/ { n += $2 } END { print n + 0 }'
}

# rss PID: the process's resident set, in KiB.
rss() {
    awk '/^VmRSS:/ { print $2 }' "/proc/$1/status"
}

# calc EXPR: prints the value of an awk expression.
calc() {
    awk "BEGIN { print $1 }"
}

# stop PID: terminates PID and waits for it, at most 5 s before SIGKILL.
stop() {
    kill "$1" 2>/dev/null || true
    i=0
    while kill -0 "$1" 2>/dev/null && [ "$i" -lt 100 ]; do
        sleep 0.05
        i=$((i + 1))
    done
    kill -KILL "$1" 2>/dev/null || true
    wait "$1" 2>/dev/null || true
}

# start VARIANT ADDR LOG: starts the server of VARIANT (hyper, or a dormant
# variant) on ADDR, pinned, logging to LOG, and waits until it listens;
# sets $server.
start() {
    local bin=hello_dormant
    local -a vars=()
    case $1 in
    hyper) bin=hello_hyper ;;
    park_off) vars=(PARK_AFTER_MS=off) ;;
    dormant_off) vars=(DORMANT_AFTER_MS=off) ;;
    dormant_10s) vars=(DORMANT_AFTER_MS=10000) ;;
    park_0) vars=(PARK_AFTER_MS=0) ;;
    esac
    # A log of an earlier run holds its "listening on" line; the redirection
    # below truncates it only once the background job starts.
    rm -f "$3"
    env -u PARK_AFTER_MS -u DORMANT_AFTER_MS -u PEER_ADDR -u RUST_LOG "${vars[@]}" \
        TOKIO_WORKER_THREADS=1 taskset -c "$SERVER_CPU" "$TARGET/$bin" "$2" >"$3" 2>&1 &
    server=$!
    local i=0
    until grep -qs "^listening on" "$3"; do
        i=$((i + 1))
        if [ "$i" -gt 200 ] || ! kill -0 "$server" 2>/dev/null; then
            echo "load.sh: $bin did not start:" >&2
            cat "$3" >&2
            exit 1
        fi
        sleep 0.05
    done
}

# next_line FD WORD TIMEOUT: reads the next line of the client whose output
# is open on FD into $line, which must start with WORD, within TIMEOUT
# seconds.
next_line() {
    if ! read -r -t "$3" line <&"$1"; then
        echo "load.sh: no '$2' line from a client (it ended, or took over $3 s)" >&2
        exit 1
    fi
    case $line in
    "$2"*) ;;
    *)
        echo "load.sh: expected '$2' from a client, got: $line" >&2
        exit 1
        ;;
    esac
}

# run CONNS THINK WARMUP VARIANT...: one run of each VARIANT, all at the
# same time (one VARIANT unless PAIRED), the I-th on port PORT + I with a
# client of its own. Sets out[I KEY]: the client's result fields, and
# cpu_us, switches, srv_pct, cli_pct, rss_conn, note.
run() {
    local conns=$1 think=$2 warmup=$3 ramp limit kv i n p fd
    shift 3
    n=$#
    local -a vs=("$@") srv=() fds=() rss0=() rss1=() c0=() c1=() s0=() s1=() perfs=()
    declare -gA out=()
    servers=""
    clients=""
    for i in $(seq 0 $((n - 1))); do
        start "${vs[$i]}" "$HOST:$((PORT + i))" "$tmp/server$i.log"
        srv[i]=$server
        servers+=" $server"
    done
    for i in $(seq 0 $((n - 1))); do
        rss0[i]=$(rss "${srv[$i]}")
    done
    ramp=$((conns / CONNECT_RATE + 1))
    limit=$(calc "int($ramp + $warmup + $WINDOW + 60)")
    for i in $(seq 0 $((n - 1))); do
        rm -f "$tmp/client$i"
        mkfifo "$tmp/client$i"
        timeout -s KILL "$limit" taskset -c "$CLIENT_CPU" "$TARGET/load_client" "${client_flags[@]}" \
            "$HOST:$((PORT + i))" "$conns" "$think" "$warmup" "$WINDOW" "$CONNECT_RATE" >"$tmp/client$i" &
        clients+=" $!"
        exec {fd}<"$tmp/client$i"
        fds[i]=$fd
    done
    for i in $(seq 0 $((n - 1))); do
        next_line "${fds[$i]}" connected $((ramp + 15))
        for kv in ${line#connected }; do
            out[$i ${kv%%=*}]=${kv#*=}
        done
    done
    # The clients started together and their windows begin within a few
    # milliseconds of each other; each server's counters are read when its
    # own client's line comes.
    for i in $(seq 0 $((n - 1))); do
        next_line "${fds[$i]}" "window start" "$(calc "int($warmup + 10)")"
        cpu "${srv[$i]}"
        c0[i]=$ticks
        s0[i]=$(switches "${srv[$i]}")
        if [ "$SYSCALLS" = 1 ]; then
            perf stat -x, -o "$tmp/syscalls$i" -e "$SYSCALL_EVENTS" -p "${srv[$i]}" &
            perfs+=("$!")
        fi
        if [ "$PROFILE" = 1 ]; then
            # shellcheck disable=SC2086 # PROFILE_ARGS is a list of options
            perf record -q ${PROFILE_ARGS:--F 2000} -o "$tmp/perf$i.data" -p "${srv[$i]}" 2>/dev/null &
            perfs+=("$!")
        fi
        rss1[i]=$(rss "${srv[$i]}")
    done
    profilers="${perfs[*]}"
    for i in $(seq 0 $((n - 1))); do
        next_line "${fds[$i]}" "window end" $((${WINDOW%.*} + 10))
        cpu "${srv[$i]}"
        c1[i]=$ticks
        s1[i]=$(switches "${srv[$i]}")
    done
    for p in "${perfs[@]}"; do
        kill -INT "$p"
        wait "$p" || true
    done
    profilers=""
    for i in $(seq 0 $((n - 1))); do
        next_line "${fds[$i]}" result 30
        for kv in ${line#result }; do
            out[$i ${kv%%=*}]=${kv#*=}
        done
        fd=${fds[$i]}
        exec {fd}<&-
    done
    for p in $clients; do
        wait "$p" || true
    done
    clients=""
    for i in $(seq 0 $((n - 1))); do
        if ! kill -0 "${srv[$i]}" 2>/dev/null; then
            echo "load.sh: the ${vs[$i]} server died:" >&2
            cat "$tmp/server$i.log" >&2
            exit 1
        fi
    done
    for p in $servers; do
        stop "$p"
    done
    servers=""

    for i in $(seq 0 $((n - 1))); do
        local reqs=${out[$i requests]} v=${vs[$i]} dt=$((c1[i] - c0[i]))
        out[$i cpu_us]=$(calc "$reqs ? $dt / $HZ * 1e6 / $reqs : 0")
        out[$i ticks]=$dt
        out[$i switches]=$(calc "$reqs ? (${s1[$i]} - ${s0[$i]}) / $reqs : 0")
        out[$i srv_pct]=$(printf %.0f "$(calc "$dt / $HZ / $WINDOW * 100")")
        out[$i cli_pct]="?"
        if [ "${out[$i client_ticks]}" != "?" ]; then
            out[$i cli_pct]=$(printf %.0f "$(calc "${out[$i client_ticks]} / $HZ / $WINDOW * 100")")
        fi
        out[$i rss_conn]=$(calc "int((${rss1[$i]} - ${rss0[$i]}) * 1024 / ${out[$i conns]})")
        out[$i note]=""
        if [ "${out[$i errors]}" != 0 ] || [ "${out[$i alive]}" != "$conns" ] || [ "${out[$i slow_connects]}" != 0 ]; then
            out[$i note]="!"
            echo "load.sh: WARNING: $v, $conns connections: ${out[$i connect_errors]} connect errors," \
                "${out[$i slow_connects]} slow connects, ${out[$i errors]} errors, ${out[$i alive]} alive at the end" >&2
        fi
        if grep -qv "^listening on" "$tmp/server$i.log"; then
            out[$i note]="!"
            echo "load.sh: WARNING: the $v server printed:" >&2
            grep -v "^listening on" "$tmp/server$i.log" | head -5 >&2
        fi
    done
}
# median: the median of the numbers on stdin, one a line.
median() {
    sort -g | awk '{ v[NR] = $1 } END { if (NR) print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

# hyper_of VARIANT: the hyper-util run VARIANT is compared with: the
# round's, or with PAIRED the one that ran at the same time.
hyper_of() {
    if [ "$PAIRED" = 1 ]; then echo "hyper@$1"; else echo hyper; fi
}

# name VARIANT: the server's name in the tables.
name() {
    case $1 in
    hyper) echo hyper-util ;;
    hyper@*) echo "hyper-util (${1#hyper@})" ;;
    default) echo dormant ;;
    *) echo "$1" ;;
    esac
}

row='%-6s %-25s %9s %9s %6s %6s %10s %9s %9s %9s %11s %7s\n'
declare -A m=() # m[cell variant round metric]
summary=""
echo "load bench: $protocol, servers with 1 worker thread on CPU $SERVER_CPU, client on CPU $CLIENT_CPU," \
    "$ROUNDS rounds, window ${WINDOW}s, $CONNECT_RATE connects/s"
for cell in $CELLS; do
    conns=${cell%%:*}
    think=${cell#*:}
    warmup=${WARMUP:-$(calc "($think * 4 > 5) ? $think * 4 : 5")}
    echo
    echo "cell: $conns connections, think time Exp(mean ${think}s) (offered ~$(calc "int($conns / $think)") requests/s), warm-up ${warmup}s"
    # shellcheck disable=SC2059
    printf "$row" round server requests req/s "srv %" "cli %" "cpu µs/req" "p50 µs" "p99 µs" "p99.9 µs" "RSS B/conn" errors
    for r in $(seq "$ROUNDS"); do
        if [ $((r % 2)) = 1 ]; then
            order="$VARIANTS hyper"
        else
            order="hyper $(echo "$VARIANTS" | tr ' ' '\n' | grep . | tac | tr '\n' ' ')"
        fi
        # A group is run at once: one server, or with PAIRED a variant and
        # its own hyper-util (the order of the two alternates too).
        groups=()
        if [ "$PAIRED" = 1 ]; then
            for v in $VARIANTS; do
                if [ $((r % 2)) = 1 ]; then groups+=("$v hyper@$v"); else groups+=("hyper@$v $v"); fi
            done
        else
            for v in $order; do groups+=("$v"); done
        fi
        for group in "${groups[@]}"; do
            # shellcheck disable=SC2086 # a group is a list of servers
            run "$conns" "$think" "$warmup" $(echo " $group" | sed 's/ hyper@[a-z0-9_]*/ hyper/g')
            i=0
            for v in $group; do
                k="$cell $v $r"
                m[$k cpu]=${out[$i cpu_us]}
                m[$k p50]=${out[$i p50_us]}
                m[$k p99]=${out[$i p99_us]}
                m[$k p999]=${out[$i p999_us]}
                m[$k rss]=${out[$i rss_conn]}
                m[$k switches]=${out[$i switches]}
                # shellcheck disable=SC2059
                printf "$row" "$r" "$(name "$v")" "${out[$i requests]}" "$(printf %.1f "$(calc "${out[$i requests]} / $WINDOW")")" \
                    "${out[$i srv_pct]}" "${out[$i cli_pct]}" "$(printf %.2f "${out[$i cpu_us]}")" "${out[$i p50_us]}" \
                    "${out[$i p99_us]}" "${out[$i p999_us]}" "${out[$i rss_conn]}" "${out[$i errors]}${out[$i note]}"
                # At a few percent of a core, a window holds few clock ticks
                # of the server's CPU time, and one tick more or less moves
                # the CPU figures by its share: the resolution of this run.
                printf "       context switches per request: %.2f; server CPU %d clock ticks (one is %.1f%%)\n" \
                    "${out[$i switches]}" "${out[$i ticks]}" "$(calc "${out[$i ticks]} ? 100 / ${out[$i ticks]} : 100")"
                if [ "$SYSCALLS" = 1 ]; then
                    # perf's CSV: count,unit,event,...
                    awk -F, -v n="${out[$i requests]}" '
                        $1 ~ /^[0-9]+$/ { sub(/^(raw_)?syscalls:sys_enter_?/, "", $3); out = out sprintf(" %s %.2f", ($3 == "" ? "all" : $3), n ? $1 / n : 0) }
                        END { print "       system calls per request:" out }' "$tmp/syscalls$i"
                fi
                if [ "$PROFILE" = 1 ]; then
                    # Shares of the samples by binary (perf's "dso"), and each
                    # share of the CPU µs per request measured above.
                    perf report -i "$tmp/perf$i.data" --sort dso --stdio -g none 2>/dev/null | awk -v us="${out[$i cpu_us]}" '
                        $1 ~ /%$/ { pct = $1 + 0; name = $2
                                    if (name ~ /kernel/) k += pct; else if (name ~ /^libc/) c += pct
                                    else if (name ~ /^hello/) b += pct; else o += pct }
                        END { printf "       CPU by place: kernel %.1f%% (%.1f µs/req), server binary %.1f%% (%.1f), libc %.1f%% (%.1f), other %.1f%%\n",
                              k, k * us / 100, b, b * us / 100, c, c * us / 100, o }'
                    if [ -n "${PROFILE_KEEP:-}" ]; then
                        cp "$tmp/perf$i.data" "$PROFILE_KEEP/$cell-$v-$r.data"
                    fi
                fi
                i=$((i + 1))
            done
        done
        for v in $VARIANTS; do
            k="$cell $v $r"
            h="$cell $(hyper_of "$v") $r"
            for x in cpu p50 p99 p999 rss; do
                m[$k $x/]=$(calc "${m[$h $x]} ? ${m[$k $x]} / ${m[$h $x]} : 0")
            done
            # shellcheck disable=SC2059
            printf "$row" "$r" "$(name "$v") / hyper-util" - - - - \
                "$(printf %.3f "${m[$k cpu/]}")" "$(printf %.3f "${m[$k p50/]}")" \
                "$(printf %.3f "${m[$k p99/]}")" "$(printf %.3f "${m[$k p999/]}")" \
                "$(printf %.3f "${m[$k rss/]}")" -
        done
    done
    for v in $VARIANTS; do
        declare -A med=()
        for x in cpu p50 p99 p999 rss; do
            med[$x]=$(for r in $(seq "$ROUNDS"); do echo "${m[$cell $v $r $x/]}"; done | median)
            med[$x abs]=$(for r in $(seq "$ROUNDS"); do echo "${m[$cell $v $r $x]}"; done | median)
            med[$x hyper]=$(for r in $(seq "$ROUNDS"); do echo "${m[$cell $(hyper_of "$v") $r $x]}"; done | median)
        done
        cpus=$(for r in $(seq "$ROUNDS"); do printf '%.3f\n' "${m[$cell $v $r cpu/]}"; done | sort -g)
        # shellcheck disable=SC2059
        printf "$row" median "$(name "$v") / hyper-util" - - - - \
            "$(printf %.3f "${med[cpu]}")" "$(printf %.3f "${med[p50]}")" \
            "$(printf %.3f "${med[p99]}")" "$(printf %.3f "${med[p999]}")" \
            "$(printf %.3f "${med[rss]}")" -
        echo "       CPU per request ratio by round: $(echo "$cpus" | paste -sd ' ')"
        summary+=$(printf '%6s %6s %-12s %12s %18s %8s %8s %8s %16s %8s' "$conns" "${think}s" "$(name "$v")" \
            "$(printf '%.3f' "${med[cpu]}")" \
            "$(printf '%.2f / %.2f' "${med[cpu abs]}" "${med[cpu hyper]}")" \
            "$(printf '%.3f' "${med[p50]}")" "$(printf '%.3f' "${med[p99]}")" "$(printf '%.3f' "${med[p999]}")" \
            "$(printf '%s / %s' "${med[rss abs]}" "${med[rss hyper]}")" "$(printf '%.3f' "${med[rss]}")")$'\n'
        unset med
    done
done
echo
echo "summary ($protocol): medians over $ROUNDS rounds; ratios are medians of the per-round ratios variant / hyper-util"
printf '%6s %6s %-12s %12s %18s %8s %8s %8s %16s %8s\n' conns think server "cpu ratio" "cpu µs/req v / h" \
    "p50" "p99" "p99.9" "RSS B/conn v / h" "RSS"
printf '%s' "$summary"
