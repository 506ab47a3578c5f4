#!/usr/bin/env bash
# Replays, on loopback, the attacks on the network services that docs/security.md answers, against
# target/release/vlbiflow, and prints one line per row: HELD (the limit holds), BROKEN (the attack still
# works) or SKIPPED. Bounded: every step has a timeout; the whole script takes well under 10 minutes.
# Attackers use the source address 127.0.0.2 (another host, as far as the services can tell).
# Needs python3 (for raw sockets with a chosen source address). Run from the repository root:
#   cargo build --release -p vlbiflow && bench/attack.sh
set -uo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-target/release/vlbiflow}
[ -x "$BIN" ] || { echo "build first: cargo build --release -p vlbiflow" >&2; exit 2; }
command -v python3 >/dev/null || { echo "python3 is needed" >&2; exit 2; }
T=$(mktemp -d)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done; rm -rf "$T"; }
trap cleanup EXIT
row() { printf '%-3s %-7s %s\n' "$1" "$2" "$3"; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
# idle N PORT SECONDS: N connections from 127.0.0.2 that send nothing, held SECONDS (background)
idle() {
    python3 - "$@" <<'PY' &
import socket, sys, time
n, port, hold = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
socks = []
for _ in range(n):
    s = socket.socket(); s.bind(("127.0.0.2", 0))
    try: s.connect(("127.0.0.1", port)); socks.append(s)
    except OSError: pass
time.sleep(hold)
PY
    PIDS+=($!)
}

# --- serve (rows 2, 3, 10) ---
printf 'sesame-0123-attack\n' > "$T/token"; chmod 600 "$T/token"
printf 'control = "127.0.0.1:0"\nhttp = "127.0.0.1:0"\n' > "$T/serve.toml"
"$BIN" serve --config "$T/serve.toml" --token-file "$T/token" --require-token > "$T/serve.out" 2>/dev/null &
PIDS+=($!)
for _ in $(seq 100); do grep -q control= "$T/serve.out" 2>/dev/null && break; sleep 0.1; done
CTL=$(sed -n 's/.*control=\([^ ]*\).*/\1/p' "$T/serve.out")
CPORT=${CTL##*:}
idle 64 "$CPORT" 8
sleep 1
if timeout 20 "$BIN" ctl --host "$CTL" --token-file "$T/token" 'record?' >/dev/null 2>&1; then
    row 2 HELD "serve: 64 idle connections before auth= from another address; ctl with the token answered"
else
    row 2 BROKEN "serve: 64 idle connections before auth= locked out ctl with the token"
fi
reply=$(timeout 10 python3 - "$CPORT" <<'PY'
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
body = b"auth=sesame-0123-attack;record=off;input_stream?;\n"
s.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
out = b""
while True:
    b = s.recv(4096)
    if not b: break
    out += b
print(out.decode(errors="replace").strip())
PY
)
if [ "$(printf '%s\n' "$reply" | grep -c .)" = 1 ] && printf '%s' "$reply" | grep -q 'not HTTP'; then
    row 3 HELD "serve: an HTTP POST with commands as body is closed at its request line, nothing runs"
else
    row 3 BROKEN "serve: an HTTP POST ran commands: $reply"
fi
if timeout 10 "$BIN" serve --token sesame-0123 --config "$T/serve.toml" >/dev/null 2>"$T/tok.err"; then
    row 10 BROKEN "serve accepted --token on the command line"
elif grep -q -- --token-file "$T/tok.err" && ! grep -rqs 'sesame' /proc/$$/cmdline; then
    row 10 HELD "serve/ctl/status refuse --token VALUE (visible in /proc/PID/cmdline); --token-file or VLBIFLOW_TOKEN"
else
    row 10 BROKEN "serve: --token refused without naming --token-file"
fi
row 4 SKIPPED "(not covered by this script yet)"
row 5 SKIPPED "(not covered by this script yet)"

# --- net responder (rows 6, 9) ---
row 6 BROKEN "responder: no authentication by default (--allow ADDR/PREFIX restricts it); budgets still 2 GiB/test, 4 GiB in all"
row 7 SKIPPED "(not covered by this script yet)"
row 8 SKIPPED "(not covered by this script yet)"
row 9 SKIPPED "latency echo only to the control peer: checked by crates/netmeasure responder tests, no replay here yet"
row 11 SKIPPED "(not covered by this script yet)"
row 12 SKIPPED "(not covered by this script yet)"

# --- xfer serve (rows 1, 14, 13) ---
mkdir -p "$T/root" "$T/src"
head -c 1048576 /dev/urandom > "$T/src/a.vdif"
"$BIN" xfer key --key "$T/xfer.key" --create >/dev/null 2>&1
"$BIN" xfer key --key "$T/wrong.key" --create >/dev/null 2>&1
XPORT=$(free_port)
"$BIN" xfer serve --listen "127.0.0.1:$XPORT" --root "data=$T/root" --key "$T/xfer.key" \
    --archive "$T/xfer.sqlite" >/dev/null 2>&1 &
PIDS+=($!)
for _ in $(seq 100); do python3 -c "import socket; socket.create_connection(('127.0.0.1',$XPORT)).close()" 2>/dev/null && break; sleep 0.1; done
idle 40 "$XPORT" 8
sleep 1
if timeout 30 "$BIN" xfer push --key "$T/xfer.key" "$T/src/a.vdif" "127.0.0.1:$XPORT/data/one" >/dev/null 2>&1; then
    row 1 HELD "xfer: 40 idle connections from another address; a push with the key completed"
else
    row 1 BROKEN "xfer: 40 idle connections locked out a push with the key"
fi
for _ in 1 2 3 4 5; do
    timeout 30 "$BIN" xfer push --key "$T/wrong.key" "$T/src/a.vdif" "127.0.0.1:$XPORT/data/w" >/dev/null 2>&1
done
if timeout 30 "$BIN" xfer push --key "$T/xfer.key" "$T/src/a.vdif" "127.0.0.1:$XPORT/data/two" >/dev/null 2>&1; then
    row 14 HELD "xfer: after five wrong keys from an address, the right key from it gets in (delayed, not locked out)"
else
    row 14 BROKEN "xfer: five wrong keys from an address lock out its right key"
fi
# A key holder asks the daemon (started without --relay-to) to copy to a port of its choosing.
out=$(timeout 30 "$BIN" xfer copy --key "$T/xfer.key" "127.0.0.1:$XPORT/data/one" "127.0.0.1:9/data/x" 2>&1)
if [ $? -eq 3 ] && grep -q "relays to no address" <<<"$out"; then
    row 13 BROKEN "xfer: copy targets held (--relay-to; modes follow the umask), but one key still reads and writes every root"
else
    row 13 BROKEN "xfer: a key holder made the daemon connect to 127.0.0.1:9 ($out)"
fi

# --- UDP ingest (row 15) ---
row 15 BROKEN "record/receive/relay: no --from source filter yet"
