#!/usr/bin/env bash
# The pace of a UDP `disk2net` in the jive5ab dialect: `vlbiflow serve --dialect jive5ab` on loopback
# records SECONDS of VDIF (8032-byte frames at 64 Mb/s, 996 frames/s, from `vlbiflow gen`), then sends the
# recording with `disk2net` over udps to a receiving socket, once for each `ipd`: -1 (from the mode:
# jive5ab's 10% margin gives 1095.6 datagrams/s), 100 us (10000/s) and 0 (unpaced). Prints the datagrams
# received, the time from the first to the last (taken by the receiving Python process, so its own
# wake-up latency is in them) and the rate.
#
#   bench/jive5ab-disk2net-pace.sh [SECONDS]    (default 3)
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
SECS=${1:-3}
bench_build
SCRATCH=$(mktemp -d /tmp/j5pace.XXXXXX)
mkdir "$SCRATCH/d0" "$SCRATCH/d1"
cat > "$SCRATCH/serve.toml" <<TOML
control = "127.0.0.1:0"
http = "127.0.0.1:0"
dialect = "jive5ab"
open_group = "main"
[groups]
main = ["$SCRATCH/d*"]
TOML
"$BIN" serve --config "$SCRATCH/serve.toml" > "$SCRATCH/serve.out" 2> "$SCRATCH/serve.log" &
SERVE=$!
on_exit_kill SERVE
need_line "$SCRATCH/serve.out" listening 30
CONTROL=$(sed -n 's/^listening control=\([^ ]*\) .*/\1/p' "$SCRATCH/serve.out")
machine_line
BIN=$BIN CONTROL=$CONTROL SECS=$SECS python3 - <<'PY'
import os, socket, subprocess, time
host, port = os.environ["CONTROL"].rsplit(":", 1)
c = socket.create_connection((host, int(port)))
f = c.makefile("rb")
def q(s):
    c.sendall((s + " ;\n").encode())
    return f.readline().decode().rstrip()
data = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
data.bind(("127.0.0.1", 0))
data_port = data.getsockname()[1]
data.close()
for s in ["mode = VDIF_8000-64-16-2", "mtu = 9000", "net_protocol = udps", f"net_port = {data_port}",
          "record = on : pace_st_no0001"]:
    q(s)
subprocess.run([os.environ["BIN"], "gen", "--dest", f"127.0.0.1:{data_port}", "--psn", "--frame-size", "8032",
                "--channels", "16", "--rate", "64Mbps", "--duration", os.environ["SECS"], "--threads", "1", "-q"],
               check=True)
time.sleep(0.5)  # the last datagrams reach the recorder; a measurement, not a test
print("recorded:", q("record?"))
q("record = off")
q("scan_set = pace_st_no0001")
rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
rx.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 << 20)
rx.bind(("127.0.0.1", 0))
q(f"net_port = {rx.getsockname()[1]}")
for ipd in ["-1", "100", "0"]:
    q(f"ipd = {ipd}")
    q("disk2net = connect : 127.0.0.1")
    while "connected" not in q("disk2net?"):
        time.sleep(0.05)
    shown = q("ipd?")
    q("disk2net = on")
    rx.settimeout(10)
    n, t0, t1 = 0, None, None
    try:
        while True:
            rx.recv(9000)
            t1 = time.monotonic()
            t0 = t0 or t1
            n += 1
            rx.settimeout(1.0)
    except socket.timeout:
        pass
    dur = t1 - t0 if n > 1 else 0.0
    rate = f"{(n - 1) / dur:.1f}" if dur else "-"
    print(f"ipd = {ipd:>3} ({shown}): {n} datagrams, first to last {dur * 1000:.1f} ms, {rate} datagrams/s")
    while "inactive" not in q("disk2net?"):
        time.sleep(0.05)
PY
