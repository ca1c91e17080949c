#!/bin/bash
# WebSocket conformance: the Autobahn|Testsuite (wstest, fuzzingclient
# mode: cases 1-13, framing, pings, reserved bits, opcodes, fragmentation,
# UTF-8, limits, the closing handshake and permessage-deflate) against a
# dormant::ws echo server (benches/bin/ws_echo.rs), and against
# tokio-tungstenite alone (benches/bin/ws_echo_tungstenite.rs) as the
# reference: the baseline that changes to src/ws must keep, as h2spec is
# for HTTP/2 (BENCHMARKS.md, "WebSocket conformance (Autobahn)"). CI does
# not run it.
#
#   benches/scripts/autobahn.sh                       # every case, both servers
#   CASES="1.* 6.*" benches/scripts/autobahn.sh       # a subset (wstest's patterns)
#   SERVER=dormant benches/scripts/autobahn.sh        # dormant|tungstenite|both
#   SLOW=1 benches/scripts/autobahn.sh                # the client's frames slowed
#   EXCLUDE="9.*" benches/scripts/autobahn.sh         # cases left out
#   FEATURES=ws,FEATURE benches/scripts/autobahn.sh   # the servers' cargo features
#                                                     # (default ws)
#
# Run it from anywhere: it works in the checkout that holds it.
#
# Each server runs alone, on a free port of 127.0.0.1, with its own wstest
# run (one process, the cases one after another). The summary gives, per
# server, how many cases ended with each of Autobahn's verdicts (OK,
# NON-STRICT, INFORMATIONAL, UNIMPLEMENTED, FAILED, and any other), the
# cases that are not OK or INFORMATIONAL (with their closing behaviour and
# the server's close code; a section whose cases all share one verdict is
# given as `12.* (all 90)`), and with both servers the cases whose
# verdicts differ. The reports stay in OUT (default
# $AUTOBAHN_DIR/runs/DATE): SERVER/reports/clients/index.html for a
# browser, index.json, and each server's and wstest's log. Also printed:
# the server's CPU time, the sum of the cases' own durations, and of the
# 9.* cases' (messages up to 16 MiB, 1,000 messages in a row: the only
# ones that measure speed).
# Here (2 cores) a full run takes about 20 s per server (8 s of it the
# four 6.4.* cases, which wait 2 s each), 40 s per server with SLOW=1,
# 10 minutes for dormant with FEATURES=ws,ws-deflate (the compression
# cases 12.* and 13.*, mostly wstest's own time), and the first install
# about a minute more.
#
# SLOW=1: wstest writes each frame in one write, so a socket reads whole
# frames and sleeps only between messages. With SLOW=1 a relay
# (benches/scripts/ws_slow_relay.py, Python 3) sits between wstest and each
# server and forwards what the client sends in pieces, with a pause of
# SLOW_PAUSE_MS (3) after each: the handshake in two halves, each frame's
# first byte alone, the rest of its header, its payload SLOW_PIECE (16)
# bytes at a time; so the HTTP connection and the socket sleep between
# pieces (ws_echo parks after 1 ms and goes to the lot after 2 ms), and a
# frame and a message arrive across sleeps. The pauses of one connection
# add up to SLOW_BUDGET_MS (200) at most, after which its bytes flow at
# full speed: the suite kills a case's connection 0.5 to 1 s after its
# last frame, and the budget keeps each case within that. What the server
# sends comes back unslowed; half-closes are forwarded as such. The
# relay's counts (pieces, pauses, connections over the budget) are
# printed with the summary.
#
# Needs: Python 2.7 for the suite, which runs on nothing newer (PYTHON2,
# default pyenv's 2.7.18 or python2.7 on PATH), Python 3 (the summary,
# the relay, and a virtualenv to create the suite's), a C compiler (the
# suite's wsaccel and ujson build from source), PyPI, and cargo. The
# first run installs the suite into a virtualenv, AUTOBAHN_DIR/venv
# (default ${TMPDIR:-/tmp}/autobahn), with the pins below (about a minute);
# the machine's Pythons are left alone. Later runs reuse it. Exits 1 if
# the harness failed (a server died or wstest wrote no report), 0
# whatever the verdicts. AUTOBAHN_TIMEOUT (s, default 1800) bounds each
# wstest run; CARGO_TARGET_DIR is honoured.
set -eu

CASES=${CASES:-*}
EXCLUDE=${EXCLUDE:-}
SERVER=${SERVER:-both}
SLOW=${SLOW:-0}
FEATURES=${FEATURES:-ws}
AUTOBAHN_DIR=${AUTOBAHN_DIR:-${TMPDIR:-/tmp}/autobahn}
AUTOBAHN_TIMEOUT=${AUTOBAHN_TIMEOUT:-1800}
OUT=${OUT:-$AUTOBAHN_DIR/runs/$(date +%Y%m%d-%H%M%S)}

# autobahntestsuite 25.10.1 and all it needs, installed with --no-deps: the
# versions of the suite's own requirements (those of its Docker image),
# and of theirs that still run on Python 2.7 (Automat, attrs, ...), so
# that pip resolves nothing. wsaccel and ujson are autobahn's
# `accelerate` extra (its UTF-8 validator and masking in C).
PINS="
attrs==21.4.0
autobahn==0.10.9
autobahntestsuite==25.10.1
Automat==22.10.0
cffi==1.15.1
constantly==15.1.0
cryptography==3.3.2
enum34==1.1.10
hyperlink==21.0.0
idna==2.10
incremental==16.10.1
ipaddress==1.0.23
Jinja2==2.11.3
klein==17.10.0
linecache2==1.0.0
MarkupSafe==1.1.1
pyasn1==0.5.1
pyasn1-modules==0.3.0
pycparser==2.21
PyHamcrest==1.10.1
pyOpenSSL==19.1.0
service-identity==18.1.0
six==1.16.0
traceback2==1.4.0
Twisted==19.10.0
txaio==2.1.0
typing==3.10.0.0
ujson==2.0.3
unittest2==1.1.0
Werkzeug==1.0.1
wsaccel==0.6.6
zope.interface==4.6.0
"
# The last virtualenv that creates Python 2.7 environments.
VIRTUALENV=virtualenv==20.15.1

case $SERVER in
dormant) SERVERS="dormant" ;;
tungstenite) SERVERS="tungstenite" ;;
both) SERVERS="dormant tungstenite" ;;
*) echo "SERVER must be dormant, tungstenite or both" >&2; exit 2 ;;
esac

cd "$(dirname "$0")/../.."
ROOT=$PWD
WSTEST=$AUTOBAHN_DIR/venv/bin/wstest

install_suite() {
    if "$WSTEST" -a >/dev/null 2>&1; then
        return
    fi
    local python2=${PYTHON2:-}
    if [ -z "$python2" ]; then
        python2=$HOME/.pyenv/versions/2.7.18/bin/python
        [ -x "$python2" ] || python2=$(command -v python2.7 || true)
    fi
    if [ -z "$python2" ] || ! "$python2" -c 'import sys; assert sys.version_info[:2] == (2, 7)' 2>/dev/null; then
        echo "autobahn.sh: the suite needs Python 2.7: set PYTHON2 (pyenv install 2.7.18)" >&2
        exit 1
    fi
    echo "installing the Autobahn testsuite into $AUTOBAHN_DIR/venv ($python2)"
    mkdir -p "$AUTOBAHN_DIR"
    local log=$AUTOBAHN_DIR/install.log
    rm -rf "$AUTOBAHN_DIR/boot" "$AUTOBAHN_DIR/venv"
    printf '%s\n' $PINS >"$AUTOBAHN_DIR/pins.txt"
    if ! {
        python3 -m venv "$AUTOBAHN_DIR/boot" &&
            "$AUTOBAHN_DIR/boot/bin/pip" install --no-cache-dir "$VIRTUALENV" &&
            VIRTUALENV_OVERRIDE_APP_DATA=$AUTOBAHN_DIR/app-data \
                "$AUTOBAHN_DIR/boot/bin/virtualenv" -p "$python2" "$AUTOBAHN_DIR/venv" &&
            PIP_DISABLE_PIP_VERSION_CHECK=1 "$AUTOBAHN_DIR/venv/bin/pip" install \
                --no-cache-dir --no-deps -r "$AUTOBAHN_DIR/pins.txt" &&
            "$WSTEST" -a
    } >"$log" 2>&1; then
        tail -20 "$log" >&2
        echo "autobahn.sh: the install failed (all of it in $log)" >&2
        exit 1
    fi
}

install_suite
echo "$("$WSTEST" -a 2>/dev/null | tr '\n' ' ')($AUTOBAHN_DIR/venv)"
cargo build --release --quiet --features "$FEATURES" --example ws_echo --example ws_echo_tungstenite
BIN=${CARGO_TARGET_DIR:-$ROOT/target}/release/examples
mkdir -p "$OUT"

PIDS=""
cleanup() {
    for pid in $PIDS; do
        kill "$pid" 2>/dev/null || true
    done
}
trap cleanup EXIT

# start NAME COMMAND...: runs COMMAND in the background (its pid in
# LAST_PID), its output in OUT/NAME.out and OUT/NAME.log, and sets PORT to
# the port it prints (`listening on ADDR`) once it does, within 10 s.
start() {
    local name=$1
    shift
    "$@" >"$OUT/$name.out" 2>"$OUT/$name.log" &
    PIDS="$PIDS $!"
    LAST_PID=$!
    for _ in $(seq 200); do
        if grep -qs "^listening on" "$OUT/$name.out"; then
            PORT=$(sed -n 's/^listening on .*:\([0-9]*\)$/\1/p' "$OUT/$name.out")
            return
        fi
        kill -0 "$LAST_PID" 2>/dev/null || break
        sleep 0.05
    done
    echo "autobahn.sh: $name did not start (see $OUT/$name.log)" >&2
    exit 1
}

json_list() {
    python3 -c 'import json, sys; print(json.dumps(sys.argv[1].split()))' "$1"
}

STATUS=0
for name in $SERVERS; do
    case $name in
    dormant) bin=ws_echo ;;
    tungstenite) bin=ws_echo_tungstenite ;;
    esac
    start "$name" "$BIN/$bin" 127.0.0.1:0
    server_pid=$LAST_PID
    relay_pid=
    if [ "$SLOW" = 1 ]; then
        start "$name-relay" python3 "$ROOT/benches/scripts/ws_slow_relay.py" "127.0.0.1:$PORT"
        relay_pid=$LAST_PID
    fi
    mkdir -p "$OUT/$name"
    cat >"$OUT/$name/spec.json" <<EOF
{
  "outdir": "./reports/clients",
  "servers": [{"agent": "$name", "url": "ws://127.0.0.1:$PORT"}],
  "cases": $(json_list "$CASES"),
  "exclude-cases": $(json_list "$EXCLUDE"),
  "exclude-agent-cases": {},
  "options": {"failByDrop": false}
}
EOF
    echo "$name: $bin on 127.0.0.1:$PORT${relay_pid:+ (through the slow relay)}, cases: $CASES${EXCLUDE:+, excluded: $EXCLUDE}"
    start_time=$(date +%s)
    (cd "$OUT/$name" && timeout "$AUTOBAHN_TIMEOUT" "$WSTEST" -m fuzzingclient -s spec.json >wstest.log 2>&1) ||
        echo "autobahn.sh: wstest exited with $? (see $OUT/$name/wstest.log)" >&2
    echo $(($(date +%s) - start_time)) >"$OUT/$name/seconds"
    if ! kill -0 "$server_pid" 2>/dev/null; then
        echo "autobahn.sh: $name's server died during the run (see $OUT/$name.log)" >&2
        echo "died" >"$OUT/$name/died"
        STATUS=1
    else
        # The server's CPU time (user + system, in clock ticks), to tell
        # its share of a slow run from wstest's.
        awk '{ print $14 + $15 }' "/proc/$server_pid/stat" >"$OUT/$name/cpu_ticks"
    fi
    kill "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
    if [ -n "$relay_pid" ]; then
        kill "$relay_pid" 2>/dev/null || true
        wait "$relay_pid" 2>/dev/null || true
        grep "^relay:" "$OUT/$name-relay.log" >"$OUT/$name/relay" || true
    fi
    [ -f "$OUT/$name/reports/clients/index.json" ] || STATUS=1
done

python3 - "$OUT" $SERVERS <<'EOF' || STATUS=1
import json, os, sys

out, servers = sys.argv[1], sys.argv[2:]
COLUMNS = ["OK", "NON-STRICT", "INFORMATIONAL", "UNIMPLEMENTED", "FAILED"]
GOOD = ("OK", "INFORMATIONAL")


def key(case):
    return tuple(int(p) for p in case.split("."))


def compress(cases, verdict, prefix=()):
    """The ids of `cases` (all of the run's cases under `prefix`) whose
    verdict is `verdict`, a whole section as `S.*` when all of it has it."""
    mine = [c for c in cases if verdict[c] is not None]
    if not mine:
        return []
    if len(prefix) < 2 and len(cases) > 1 and len(set(verdict[c] for c in cases)) == 1:
        # Named by the ids' longest common prefix: 12.* or 6.4.*.
        ids = [key(c) for c in cases]
        common = 0
        while all(len(i) > common + 1 and i[common] == ids[0][common] for i in ids):
            common += 1
        name = ".".join(map(str, ids[0][:common])) + ".*" if common else "*"
        return [(name + " (all %d)" % len(cases), verdict[cases[0]])]
    if len(prefix) >= 2:
        return [(c, verdict[c]) for c in mine]
    groups = {}
    for c in cases:
        groups.setdefault(key(c)[: len(prefix) + 1], []).append(c)
    return [item for g in sorted(groups) for item in compress(groups[g], verdict, g)]


results = {}
failed = False
for name in servers:
    path = os.path.join(out, name, "reports", "clients", "index.json")
    try:
        with open(path) as f:
            results[name] = json.load(f)[name]
    except (OSError, KeyError, ValueError) as e:
        print("\n== %s: no report (%s)" % (name, e))
        failed = True
        continue
    cases = sorted(results[name], key=key)
    with open(os.path.join(out, name, "seconds")) as f:
        seconds = f.read().strip()
    ticks = os.path.join(out, name, "cpu_ticks")
    cpu = ""
    if os.path.exists(ticks):
        with open(ticks) as f:
            cpu = ", server CPU %.1f s" % (int(f.read()) / os.sysconf("SC_CLK_TCK"))
    print("\n== %s: %d cases in %s s%s" % (name, len(cases), seconds, cpu))
    if os.path.exists(os.path.join(out, name, "died")):
        print("   THE SERVER DIED DURING THE RUN")
    relay = os.path.join(out, name, "relay")
    if os.path.exists(relay):
        with open(relay) as f:
            print("   " + f.read().strip())
    counts = {}
    for c in cases:
        b = results[name][c]["behavior"]
        counts[b] = counts.get(b, 0) + 1
    other = sorted(set(counts) - set(COLUMNS))
    header = COLUMNS + other
    total = sum(results[name][c]["duration"] for c in cases)
    perf = sum(results[name][c]["duration"] for c in cases if c.startswith("9."))
    print("   the cases' durations: %d ms, of which 9.*: %d ms" % (total, perf))
    print("   " + "  ".join("%13s" % h for h in header))
    print("   " + "  ".join("%13d" % counts.get(h, 0) for h in header))

    def verdict(c):
        r = results[name][c]
        if r["behavior"] in GOOD and r["behaviorClose"] in GOOD:
            return None
        return "%s, close %s (%s)" % (r["behavior"], r["behaviorClose"], r["remoteCloseCode"])

    bad = compress(cases, {c: verdict(c) for c in cases})
    if bad:
        print("   not OK or INFORMATIONAL (behavior, behaviorClose, the server's close code):")
        for case, v in bad:
            print("     %-18s %s" % (case, v))
    print("   report: %s" % os.path.join(out, name, "reports", "clients", "index.html"))

if len(results) == 2:
    a, b = servers
    differ = [
        c
        for c in sorted(set(results[a]) & set(results[b]), key=key)
        if results[a][c]["behavior"] != results[b][c]["behavior"]
        or results[a][c]["behaviorClose"] != results[b][c]["behaviorClose"]
    ]
    print("\n== verdicts that differ (%s / %s): %d" % (a, b, len(differ)))
    for c in differ:
        ra, rb = results[a][c], results[b][c]
        print(
            "     %-10s %s, close %s / %s, close %s"
            % (c, ra["behavior"], ra["behaviorClose"], rb["behavior"], rb["behaviorClose"])
        )
sys.exit(1 if failed else 0)
EOF
exit $STATUS
