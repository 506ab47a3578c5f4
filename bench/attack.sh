#!/usr/bin/env bash
# Replays, on loopback, the attacks on the network services that docs/security.md answers, against
# target/release/vlbiflow, and prints one line per row: HELD (the limit holds), BROKEN (the attack still
# works) or SKIPPED. Bounded: every step has a timeout; the whole script takes well under 10 minutes.
# Attackers use the source address 127.0.0.2 (another host, as far as the services can tell).
# Needs python3 (for raw sockets with a chosen source address) and curl. Run from the repository root:
#   cargo build --release -p vlbiflow && bench/attack.sh
set -uo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-target/release/vlbiflow}
[ -x "$BIN" ] || { echo "build first: cargo build --release -p vlbiflow" >&2; exit 2; }
command -v python3 >/dev/null || { echo "python3 is needed" >&2; exit 2; }
command -v curl >/dev/null || { echo "curl is needed" >&2; exit 2; }
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
mesh_rows() {
# --- net hub and agents (rows 4, 5, 7, 8, 11) ---
# A mesh of two hosts on loopback ports; the webhook's URL carries a secret path and points at a closed
# port, and a 1 s no-data alert makes the hub try (and log) its delivery at once.
AP=$(free_port); BP=$(free_port); HP=$(free_port); NP=$(free_port); PP=$(free_port)
cat > "$T/mesh.toml" <<EOF
[mesh]
name = "attack"
[[host]]
name = "A"
address = "127.0.0.1"
port = $AP
[[host]]
name = "B"
address = "127.0.0.1"
port = $BP
[[test]]
name = "lat"
kind = "latency"
interval = "1h"
[[alert]]
name = "quiet"
metric = "rtt_ms"
above = 1000
no_data = "1s"
[webhook]
url = "http://127.0.0.1:9/services/T0/B0/webhook-secret-path"
EOF
printf 'mesh-shared-token-0123456789\n' > "$T/mesh.token"
printf 'host-a-key-0123456789abcdef\n' > "$T/a.key"
printf 'A host-a-key-0123456789abcdef\nB host-b-key-0123456789abcdef\n' > "$T/keys"
chmod 600 "$T/mesh.token" "$T/a.key" "$T/keys"
"$BIN" net hub --config "$T/mesh.toml" --listen "127.0.0.1:$HP" --archive "$T/hub.sqlite" \
    --token-file "$T/mesh.token" --keys-file "$T/keys" >/dev/null 2>"$T/hub.log" &
PIDS+=($!)
"$BIN" net hub --config "$T/mesh.toml" --listen "127.0.0.1:$NP" --archive "$T/open.sqlite" \
    >/dev/null 2>"$T/open.log" &
PIDS+=($!)
wait_http() { for _ in $(seq 100); do curl -s -o /dev/null "http://127.0.0.1:$1/" && return 0; sleep 0.1; done; return 1; }
wait_http "$HP"; wait_http "$NP"
code() { curl -s -o /dev/null -w '%{http_code}' --max-time 10 "$@"; }
c_root=$(code "http://127.0.0.1:$HP/"); c_api=$(code "http://127.0.0.1:$HP/api/v1/status")
c_tok=$(code -H "Authorization: Bearer mesh-shared-token-0123456789" "http://127.0.0.1:$HP/api/v1/status")
c_dns=$(code -H "Host: attacker.example.org" "http://127.0.0.1:$NP/api/v1/status")
if [ "$c_root$c_api" = 401401 ] && [ "$c_tok" = 200 ] && [ "$c_dns" = 401 ]; then
    row 4 HELD "net hub: with a token, / and /api/v1/* answer 401 on loopback too (200 with it); without one, a foreign Host gets 401"
else
    row 4 BROKEN "net hub: loopback reads without the token: / $c_root, /api/v1/status $c_api (with it $c_tok); foreign Host $c_dns"
fi
sync_body='{"host":"A","software":"x","config_hash":"","reports":[],"counters":[]}'
c_plain=$(code -X POST -H 'Content-Type: text/plain' --data "$sync_body" "http://127.0.0.1:$NP/api/v1/agent/sync")
c_origin=$(code -X POST -H 'Content-Type: application/json' -H 'Origin: http://attacker.example.org' \
    --data "$sync_body" "http://127.0.0.1:$NP/api/v1/agent/sync")
c_json=$(code -X POST -H 'Content-Type: application/json' --data "$sync_body" "http://127.0.0.1:$NP/api/v1/agent/sync")
if [ "$c_plain" != 200 ] && [ "$c_origin" != 200 ] && [ "$c_json" = 200 ]; then
    row 5 HELD "net hub without a token: text/plain ($c_plain) and Origin-carrying ($c_origin) POSTs to the agent exchange refused; an agent's JSON answered"
else
    row 5 BROKEN "net hub without a token: text/plain POST $c_plain, with Origin $c_origin, JSON $c_json"
fi
# Row 7: agent A talks to the hub through a proxy that records every exchange; the recorded request
# is replayed to the hub, and the recorded answer is replayed to the agent (a fake hub answering only that).
python3 - "$PP" "$HP" "$T" <<'PY' &
import http.server, http.client, sys, os
pp, hp, d = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
class H(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length", 0)))
        c = http.client.HTTPConnection("127.0.0.1", hp, timeout=10)
        hdrs = {k: v for k, v in self.headers.items() if k.lower().startswith("x-vlbiflow") or k.lower() == "content-type"}
        c.request("POST", self.path, body, hdrs)
        r = c.getresponse(); rb = r.read()
        rh = {k: v for k, v in r.getheaders() if k.lower().startswith("x-vlbiflow") or k.lower() == "content-type"}
        if not os.path.exists(d + "/rec.req"):
            with open(d + "/rec.req", "w") as f: f.write(repr((hdrs, body, rh, rb, r.status)))
        self.send_response(r.status)
        for k, v in rh.items(): self.send_header(k, v)
        self.send_header("content-length", str(len(rb))); self.end_headers(); self.wfile.write(rb)
    def log_message(self, *a): pass
http.server.HTTPServer(("127.0.0.1", pp), H).serve_forever()
PY
PIDS+=($!)
sleep 0.5
timeout 20 "$BIN" net agent --name A --hub "http://127.0.0.1:$PP" --token-file "$T/a.key" \
    --state-dir "$T/agent-a" --sync-every 0.2 >/dev/null 2>"$T/agent-a.log" &
AG=$!
for _ in $(seq 100); do [ -s "$T/rec.req" ] && break; sleep 0.1; done
sleep 0.5; kill "$AG" 2>/dev/null; wait "$AG" 2>/dev/null
replay=$(timeout 20 python3 - "$HP" "$T" <<'PY'
import http.client, sys, ast, socket, threading
hp, d = int(sys.argv[1]), sys.argv[2]
hdrs, body, rh, rb, status = ast.literal_eval(open(d + "/rec.req").read())
c = http.client.HTTPConnection("127.0.0.1", hp, timeout=10)
c.request("POST", "/api/v1/agent/sync", body, hdrs)
r = c.getresponse(); r.read()
print("recorded=%d replayed=%d webhook_in_answer=%s" % (status, r.status, b"webhook-secret" in rb))
PY
)
# The fake hub: every request gets the recorded answer.
FP=$(free_port)
python3 - "$FP" "$T" <<'PY' &
import http.server, sys, ast
fp, d = int(sys.argv[1]), sys.argv[2]
hdrs, body, rh, rb, status = ast.literal_eval(open(d + "/rec.req").read())
class H(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers.get("content-length", 0)))
        self.send_response(status)
        for k, v in rh.items(): self.send_header(k, v)
        self.send_header("content-length", str(len(rb))); self.end_headers(); self.wfile.write(rb)
    def log_message(self, *a): pass
http.server.HTTPServer(("127.0.0.1", fp), H).serve_forever()
PY
PIDS+=($!)
sleep 0.5
timeout 5 "$BIN" net agent --name A --hub "http://127.0.0.1:$FP" --token-file "$T/a.key" \
    --state-dir "$T/agent-a" --sync-every 0.2 >/dev/null 2>"$T/agent-fake.log"
if [ "$replay" = "recorded=200 replayed=401 webhook_in_answer=False" ] && grep -q "answer refused" "$T/agent-fake.log"; then
    row 7 HELD "mesh auth: a recorded agent request replayed to the hub gets 401; its recorded answer replayed to the agent is refused; no webhook URL in answers"
else
    row 7 BROKEN "mesh auth: $replay; agent on a replayed answer: $(grep -c 'answer refused' "$T/agent-fake.log") refusals"
fi
# Row 8: host A's key used to report as B.
timeout 5 "$BIN" net agent --name B --hub "http://127.0.0.1:$HP" --token-file "$T/a.key" \
    --state-dir "$T/agent-b" --sync-every 0.2 >/dev/null 2>"$T/agent-b.log"
seen_b=$(python3 -c 'import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute("SELECT COUNT(*) FROM agents WHERE name = ?", ("B",)).fetchone()[0])' "$T/hub.sqlite" 2>/dev/null || echo "unknown: no archive")
if grep -q "answered 401" "$T/agent-b.log" && [ "$seen_b" = 0 ]; then
    row 8 HELD "mesh auth: per-host keys (--keys-file): host A's key cannot report as B (401, B never seen)"
else
    row 8 BROKEN "mesh auth: A's key reported as B (agents rows for B: $seen_b)"
fi
for _ in $(seq 50); do grep -q "webhook" "$T/hub.log" && break; sleep 0.1; done
if ! grep -q "webhook" "$T/hub.log"; then
    row 11 BROKEN "net hub: no webhook delivery attempt logged (the check needs one)"
elif grep -q "webhook-secret-path" "$T/hub.log" "$T/open.log"; then
    row 11 BROKEN "net hub: the webhook URL's secret path is in the log"
else
    row 11 HELD "net hub: failed webhook deliveries logged as $(grep -o 'webhook http[^ ]*' "$T/hub.log" | head -1 | cut -d' ' -f2 | sed 's/:$//')"
fi
}
mesh_rows

# --- net responder (rows 6, 9) ---
rss_kb() { awk '/^VmRSS/ {print $2}' "/proc/$1/status" 2>/dev/null || echo 0; }
# bw_start PORT TOKEN-or-empty: an anonymous (or token-carrying) session from 127.0.0.2 asking for a bw
# test of 8 million packets; prints the responder's replies
bw_start() {
    timeout 15 python3 - "$@" <<'PY'
import json, socket, sys
port, token = int(sys.argv[1]), (sys.argv[2] if len(sys.argv) > 2 else "")
s = socket.socket(); s.bind(("127.0.0.2", 0)); s.settimeout(10)
s.connect(("127.0.0.1", port))
hello = {"type": "hello", "version": 1, "software": "attack"}
if token: hello["token"] = token
bw = {"type": "bw_start", "test_id": 1, "count": 8000000, "size": 1472, "recv_buffer": None,
      "max_duration_ms": 60000}
s.sendall((json.dumps(hello) + "\n" + json.dumps(bw) + "\n").encode())
f = s.makefile()
for _ in range(2):
    line = f.readline()
    if not line: break
    print(line.strip())
PY
}
row6() {
    local port port2 pid pid2 before after refused=0 anon_refused=0 legit=0 r
    printf 'responder-token-0123\n' > "$T/net.token"; chmod 600 "$T/net.token"
    port=$(free_port)
    "$BIN" net responder --listen "127.0.0.1:$port" --token-file "$T/net.token" 2>/dev/null &
    pid=$!; PIDS+=($pid)
    port2=$(free_port)
    "$BIN" net responder --listen "127.0.0.1:$port2" 2>/dev/null &
    pid2=$!; PIDS+=($pid2)
    for _ in $(seq 100); do
        python3 -c "import socket; [socket.create_connection(('127.0.0.1',p)).close() for p in ($port,$port2)]" 2>/dev/null && break
        sleep 0.1
    done
    before=$(( $(rss_kb $pid) + $(rss_kb $pid2) ))
    r=$(bw_start "$port")
    grep -q 'unauthorized (no token)' <<<"$r" && ! grep -q '"ready"' <<<"$r" && refused=1
    r=$(bw_start "$port2")
    grep -q 'more than the 256.0 MiB' <<<"$r" && ! grep -q '"ready"' <<<"$r" && anon_refused=1
    after=$(( $(rss_kb $pid) + $(rss_kb $pid2) ))
    VLBIFLOW_TOKEN=responder-token-0123 timeout 30 "$BIN" net bw 127.0.0.1:$port --count 2000 --no-archive \
        >/dev/null 2>&1 && legit=1
    if [ $refused = 1 ] && [ $anon_refused = 1 ] && [ $legit = 1 ] && [ $((after - before)) -lt 20000 ]; then
        row 6 HELD "responder: --token-file refuses an anonymous bw_start of 8M packets at the hello; without a token the 256 MiB/test limit refuses it; RSS ${before} -> ${after} kB; net bw with the token ran"
    else
        row 6 BROKEN "responder: token refusal $refused, per-test limit $anon_refused, legit $legit, RSS ${before} -> ${after} kB"
    fi
}
row6
# Row 9: a control session from 127.0.0.1 (the control peer) starts a latency test; probes to its echo
# port from 127.0.0.3 get no echo, a probe from the control peer does (sent after them on the same socket).
# Then the probes from 127.0.0.3 go on as a flood while net bw with the token runs against the responder.
row9() {
    local port r bw_ok=0
    port=$(free_port)
    "$BIN" net responder --listen "127.0.0.1:$port" --token-file "$T/net.token" 2>/dev/null &
    PIDS+=($!)
    timeout 90 python3 - "$port" "$T/row9.done" > "$T/row9.out" <<'PY' &
import json, os, socket, struct, sys, time
port, done = int(sys.argv[1]), sys.argv[2]
for _ in range(100):
    try:
        c = socket.create_connection(("127.0.0.1", port), timeout=10); break
    except OSError:
        time.sleep(0.1)
f = c.makefile()
def ask(m):
    c.sendall((json.dumps(m) + "\n").encode()); return json.loads(f.readline())
ask({"type": "hello", "version": 1, "software": "attack", "token": "responder-token-0123"})
ready = ask({"type": "lat_start", "test_id": 77, "max_size": 64})
def probe(seq):
    return (b"VFNT" + bytes([1, 2, 0, 0]) + struct.pack(">I", 77) + bytes(4)
            + struct.pack(">QQ", seq, time.time_ns()) + bytes(32))
to = ("127.0.0.1", ready["port"])
other = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); other.bind(("127.0.0.3", 0))
for seq in range(10):
    other.sendto(probe(seq), to)
peer = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); peer.bind(("127.0.0.1", 0)); peer.settimeout(10)
peer.sendto(probe(99), to)
got_peer = len(peer.recv(2048)) > 0
other.setblocking(False)
def drain():
    n = 0
    while True:
        try: other.recv(2048); n += 1
        except BlockingIOError: return n
got_other = drain()
print("peer_echo=%d other_echoes=%d" % (got_peer, got_other), flush=True)
# the flood, until the legitimate test is done
seq, until = 100, time.time() + 60
while not os.path.exists(done) and time.time() < until:
    for _ in range(200):
        other.sendto(probe(seq), to); seq += 1
    time.sleep(0.001)
got_other += drain()
res = ask({"type": "lat_finish"})
print("flood=%d other_echoes=%d foreign=%s" % (seq - 100, got_other, res.get("foreign")), flush=True)
PY
    local lpid=$!
    for _ in $(seq 300); do [ -s "$T/row9.out" ] && break; sleep 0.1; done
    r=$(sed -n 1p "$T/row9.out")
    VLBIFLOW_TOKEN=responder-token-0123 timeout 30 "$BIN" net bw "127.0.0.1:$port" --count 2000 --no-archive \
        >/dev/null 2>&1 && bw_ok=1
    touch "$T/row9.done"
    wait "$lpid"
    local flood
    flood=$(sed -n 2p "$T/row9.out")
    local n="${flood#flood=}"; n="${n%% *}"
    if [ "$r" = "peer_echo=1 other_echoes=0" ] && grep -q "other_echoes=0 foreign=$((n + 10))\$" <<<"$flood" \
        && [ $bw_ok = 1 ]; then
        row 9 HELD "responder: latency probes from 127.0.0.3 to a test the control peer 127.0.0.1 started: none of 10, then of a flood of $n, echoed (all counted foreign); the peer's probe echoed; net bw with the token ran during the flood"
    else
        row 9 BROKEN "responder: latency echo to another source: ${r:-no answer}; ${flood:-no flood result}; net bw during the flood $bw_ok"
    fi
}
row9

# Row 12: 30 half-sent HTTP requests (headers never finished) from 127.0.0.2 to the hub and to serve's HTTP
# port: each is closed by the server (header-read timeout 5 s; waited for up to 60 s) while a legitimate
# GET is served by each and an agent syncs with the hub.
# half_open PORT: opens 30 half-sent requests, prints "open" once they are sent, then how many the server
# closed before the deadline
half_open() {
    python3 - "$1" <<'PY'
import socket, sys, time
port = int(sys.argv[1])
socks = []
for _ in range(30):
    s = socket.socket(); s.bind(("127.0.0.2", 0)); s.connect(("127.0.0.1", port))
    s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nX-Slow: "); socks.append(s)
print("open", flush=True)
closed, deadline = 0, time.time() + 60
for s in socks:
    s.settimeout(max(0.1, deadline - time.time()))
    try:
        while s.recv(4096): pass
        closed += 1
    except ConnectionResetError: closed += 1
    except OSError: pass
print(closed, flush=True)
PY
}
row12() {
    local shttp hub_closed serve_closed c_hub c_serve agent_ok=0
    shttp=$(sed -n 's/.*http=\([^ ]*\).*/\1/p' "$T/serve.out")
    half_open "$HP" > "$T/hub.half" &
    local hpid=$!
    for _ in $(seq 100); do grep -q open "$T/hub.half" && break; sleep 0.1; done
    c_hub=$(code -H "Authorization: Bearer mesh-shared-token-0123456789" "http://127.0.0.1:$HP/api/v1/status")
    # an agent (fresh state, no configuration of its own) runs only if its first sync succeeds
    timeout 4 "$BIN" net agent --name A --hub "http://127.0.0.1:$HP" --token-file "$T/a.key" \
        --state-dir "$T/agent-a12" --sync-every 0.2 >/dev/null 2>"$T/agent-a12.log"
    [ $? = 124 ] && ! grep -q "no configuration\|buffering" "$T/agent-a12.log" && agent_ok=1
    wait "$hpid"
    hub_closed=$(sed -n 2p "$T/hub.half")
    half_open "${shttp##*:}" > "$T/serve.half" &
    local spid=$!
    for _ in $(seq 100); do grep -q open "$T/serve.half" && break; sleep 0.1; done
    c_serve=$(code -H "Authorization: Bearer sesame-0123-attack" "http://$shttp/status")
    wait "$spid"
    serve_closed=$(sed -n 2p "$T/serve.half")
    if [ "$hub_closed" = 30 ] && [ "$serve_closed" = 30 ] && [ "$c_hub" = 200 ] && [ "$c_serve" = 200 ] \
        && [ $agent_ok = 1 ]; then
        row 12 HELD "net hub and serve: 30 half-sent requests from another address each closed by the header timeout, while a GET got 200 from each and an agent synced with the hub"
    else
        row 12 BROKEN "half-sent closed: hub ${hub_closed:-?}/30, serve ${serve_closed:-?}/30; GET hub $c_hub, serve $c_serve; agent sync $agent_ok"
    fi
}
row12

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
copy_rc=$?
row13() {
    local port ok=1 why="" out rc
    mkdir -p "$T/rec" "$T/inbox" "$T/pulled"
    cp "$T/src/a.vdif" "$T/rec/old.vdif"
    "$BIN" xfer key --key "$T/client.key" --create >/dev/null 2>&1
    port=$(free_port)
    "$BIN" xfer serve --listen "127.0.0.1:$port" --root "rec=$T/rec:ro" --root "inbox=$T/inbox:wo" \
        --key "$T/xfer.key" --client-key "$T/client.key=inbox" --archive "$T/xfer2.sqlite" >/dev/null 2>&1 &
    PIDS+=($!)
    for _ in $(seq 100); do python3 -c "import socket; socket.create_connection(('127.0.0.1',$port)).close()" 2>/dev/null && break; sleep 0.1; done
    # check KEY EXPECTED-RC PATTERN -- xfer ARGS...
    check() {
        local key=$1 want=$2 pat=$3; shift 4
        out=$(timeout 30 "$BIN" xfer "$1" --key "$key" "${@:2}" 2>&1); rc=$?
        if [ "$rc" != "$want" ] || ! grep -q -- "$pat" <<<"$out"; then ok=0; why="$why; $* -> $rc ($out)"; fi
    }
    check "$T/xfer.key" 3 'is read-only' -- push "$T/src/a.vdif" "127.0.0.1:$port/rec/x"
    check "$T/xfer.key" 3 'is write-only' -- pull "127.0.0.1:$port/inbox" "$T/pulled"
    check "$T/client.key" 3 'may not use root "rec"' -- pull "127.0.0.1:$port/rec/old.vdif" "$T/pulled"
    check "$T/client.key" 0 '' -- push "$T/src/a.vdif" "127.0.0.1:$port/inbox/in"
    [ -e "$T/rec/x" ] && { ok=0; why="$why; a file landed in the read-only root"; }
    [ "$copy_rc" = 3 ] || { ok=0; why="$why; copy to 127.0.0.1:9 not refused"; }
    if [ $ok = 1 ]; then
        row 13 HELD "xfer: :ro/:wo roots and a key scoped to its roots refuse the rest (exit 3, naming the rule); copy targets only from --relay-to"
    else
        row 13 BROKEN "xfer:$why"
    fi
}
row13

# --- UDP ingest (row 15) ---
# send_frames FROM PORT N FIRST: N VDIF frames of 1032 bytes (thread 0) numbered from FIRST, from address FROM
send_frames() {
    python3 - "$@" <<'PY'
import socket, struct, sys
src, port, n, first = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind((src, 0))
for i in range(first, first + n):
    hdr = struct.pack("<IIII", 800000000 + i // 1000, (48 << 24) | (i % 1000), 1032 // 8, 1 << 26)
    s.sendto(hdr + bytes(16) + struct.pack("<Q", i) + bytes(1032 - 40), ("127.0.0.1", port))
PY
}
row15() {
    local port json
    mkdir -p "$T/disk"
    port=$(free_port)
    "$BIN" record --stream "a=vdif@127.0.0.1:$port,frame-size=1032" --from 127.0.0.1 --disk "$T/disk" \
        --scan attack_xx_001 --duration 4 --json > "$T/record.json" 2>"$T/record.err" &
    local rec=$!
    sleep 1
    send_frames 127.0.0.2 "$port" 500 0
    send_frames 127.0.0.1 "$port" 300 500
    wait $rec
    json=$(cat "$T/record.json")
    local packets wrong
    packets=$(python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["streams"][0]["counters"]["packets"])' <<<"$json" 2>/dev/null)
    wrong=$(python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["streams"][0]["counters"]["wrong_source"])' <<<"$json" 2>/dev/null)
    if [ "$packets" = 300 ] && [ "$wrong" = 500 ]; then
        row 15 HELD "record --from 127.0.0.1: 500 frames from 127.0.0.2 dropped and counted as wrong_source, 300 from 127.0.0.1 recorded (receive/relay --from, serve from= alike)"
    else
        row 15 BROKEN "record --from: packets ${packets:-?} (want 300), wrong_source ${wrong:-?} (want 500)"
    fi
}
row15
