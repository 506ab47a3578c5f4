#!/usr/bin/env bash
# The jive5ab dialect side by side with a real jive5ab: starts jive5ab (FlexBuff mode, two tmpfs "disks"
# under a scratch directory) and `vlbiflow serve --dialect jive5ab` (two plain directories) on loopback,
# sends both the same Field-System-like command sequence (identification, fb_mode set-up, a scan recorded
# from one `vlbiflow gen` sending the same VDIF to both, scan_check, status queries, disk2file) and prints
# the replies side by side, each line with a verdict:
#   same       same return code and fields
#   expected   differs, for the reason given (the machine, the software, or a difference documented in
#              docs/jive5ab-dialect.md)
#   DIFFERS    differs without a known reason
#
#   JIVE5AB=/tmp/j5build/src/jive5ab bench/jive5ab-side-by-side.sh [SECONDS]    (default 3 s of data)
#
# jive5ab 3.1.0 built here hangs in `record = off` (its main thread waits in wait_for_multi_udps_finish
# inside chain::communicate while the chain's threads wait for the chain's mutex; no chunk reaches the
# disks). When it does not answer within 20 s the script says so, restarts it, copies vlbiflow's FlexBuff
# recording of the same data onto jive5ab's disks (the layout is the same) and goes on, so that the
# queries after the recording (scan_set, scan_check, disk2file) compare both on the same recording.
#
# Needs root (jive5ab records only onto mount points that are not on the root file system, so the
# scratch disks are tmpfs mounts; they are unmounted at the end). jive5ab 3.1.0 from source:
#   git clone https://github.com/jive-vlbi/jive5ab /tmp/j5src   (tag v3.1.0)
#   mkdir /tmp/j5build && cd /tmp/j5build && cmake -DSSAPI_ROOT=nossapi /tmp/j5src && make -j2
# Exit status: 0 when no line DIFFERS, 1 otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
SECS=${1:-3}
JIVE5AB=${JIVE5AB:-/tmp/j5build/src/jive5ab}
[ -x "$JIVE5AB" ] || { echo "bench: no jive5ab binary at $JIVE5AB (set JIVE5AB)" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "bench: needs root (tmpfs mounts for jive5ab's disks)" >&2; exit 2; }
bench_build
raise_socket_buffers

SCRATCH=$(mktemp -d /tmp/j5sbs.XXXXXX)
VF=""
cleanup() {
    if [ -s "$SCRATCH/j5.pid" ]; then
        local pid
        pid=$(cat "$SCRATCH/j5.pid")
        kill -9 "$pid" 2>/dev/null || true
        # Its mounts stay busy until it is gone.
        for _ in $(seq 100); do [ -d "/proc/$pid" ] || break; sleep 0.1; done
    fi
    [ -n "$VF" ] && { kill "$VF" 2>/dev/null || true; wait "$VF" 2>/dev/null || true; }
    for m in "$SCRATCH"/j5/disk*; do umount "$m" 2>/dev/null || true; done
    rm -rf "$SCRATCH"
}
trap cleanup EXIT
for i in 0 1; do
    mkdir -p "$SCRATCH/j5/disk$i" "$SCRATCH/vf/disk$i"
    mount -t tmpfs -o size=512m j5sbs "$SCRATCH/j5/disk$i"
done
free_tcp() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
J5_PORT=$(free_tcp)
VF_PORT=$(free_tcp)
VF_HTTP=$(free_tcp)
J5_DATA=$(free_tcp)
VF_DATA=$(free_tcp)
cat >"$SCRATCH/vf.toml" <<EOF
control = "127.0.0.1:$VF_PORT"
http = "127.0.0.1:$VF_HTTP"
dialect = "jive5ab"
[groups]
main = ["$SCRATCH/vf/disk*"]
EOF

"$BIN" serve --config "$SCRATCH/vf.toml" >"$SCRATCH/vlbiflow.log" 2>&1 &
VF=$!

python3 - "$BIN" "$SCRATCH" "$J5_PORT" "$VF_PORT" "$J5_DATA" "$VF_DATA" "$SECS" "$JIVE5AB" <<'PY'
import glob, os, shutil, socket, subprocess, sys, time

BIN, SCRATCH, J5_PORT, VF_PORT, J5_DATA, VF_DATA, SECS, JIVE5AB = sys.argv[1:]
J5_PROC = None

def start_jive5ab():
    global J5_PROC
    log = open(f"{SCRATCH}/jive5ab.log", "ab")
    J5_PROC = subprocess.Popen([JIVE5AB, "-m", "0", "-p", J5_PORT], cwd=SCRATCH, stdout=log, stderr=log)
    with open(f"{SCRATCH}/j5.pid", "w") as f:
        f.write(str(J5_PROC.pid))

start_jive5ab()

def connect(port):
    for _ in range(300):
        try:
            s = socket.create_connection(("127.0.0.1", int(port)), timeout=20)
            return s, s.makefile("rb")
        except OSError:
            time.sleep(0.1)
    sys.exit(f"bench: nothing listens on {port}")

j5, vf = connect(J5_PORT), connect(VF_PORT)
NO_REPLY = "(no reply within 20 s)"

def ask(side, line):
    s, f = side
    s.sendall((line + " ;\n").encode())
    try:
        return f.readline().decode(errors="replace").rstrip("\r\n")
    except TimeoutError:
        return NO_REPLY

def parse(reply):
    # Lenient, as the Field System parses: code after the first '='/'?', fields split on ':' and trimmed.
    body = reply.strip()
    if not body.startswith("!"):
        return None
    body = body[1:].rstrip(";")
    op = min([i for i in (body.find("="), body.find("?")) if i >= 0], default=-1)
    if op < 0:
        return None
    parts = [p.strip() for p in body[op + 1:].split(":")]
    return parts[0], parts[1:]

# Keyword -> why the fields differ by design (the return codes must still agree).
EXPECTED = {
    "version": "different software: program name, version and build",
    "dts_id": "different software and build date",
    "rtime": "the free space of different disks (tmpfs against the scratch file system)",
    "set_disks": "set_disks names each side's own directories",
    "net_port": "each side listens on its own data port",
    "disk2file": "each side writes its own file",
    "dir_info": "different disks",
    "evlbi": "jive5ab counts udps sequence numbers; vlbiflow counts frames by time stamp (see the dialect doc)",
}

rows = []
def both(cmd, j5cmd=None, vfcmd=None, reason=None):
    a = ask(j5, j5cmd or cmd)
    b = ask(vf, vfcmd or cmd)
    pa, pb = parse(a), parse(b)
    kw = cmd.split("=")[0].split("?")[0].strip()
    if a == NO_REPLY:
        verdict = "jive5ab hung (see the script's header); restarted it"
    elif pa is not None and pa == pb:
        verdict = "same"
    elif pa is not None and pb is not None and pa[0] == pb[0] and (reason or kw in EXPECTED):
        verdict = "expected: " + (reason or EXPECTED[kw])
    elif reason:
        verdict = "expected: " + reason
    else:
        verdict = "DIFFERS"
    rows.append((cmd, a, b, verdict))
    return a, b

both("version?")
both("dts_id?")
both("status?")
both("mode = VDIF_8000-2048-16-2")
both("net_protocol = udps : 32000000 : 256000000 : 4")
both("net_port = PORT", f"net_port = {J5_DATA}", f"net_port = {VF_DATA}")
both("mtu = 9000")
both("set_disks = DISKS", f"set_disks = {SCRATCH}/j5/disk*", f"set_disks = {SCRATCH}/vf/disk*")
both("mode?")
both("net_protocol?")
both("rtime?")
both("record = on : no0001 : exp : stn")
both("record?", reason="bytes so far: the same datagrams are in flight to both")
gen = subprocess.run(
    [BIN, "gen", "--dest", f"127.0.0.1:{J5_DATA}", "--dest", f"127.0.0.1:{VF_DATA}", "--psn",
     "--frame-size", "8032", "--channels", "16", "--rate", "128Mbps", "--duration", SECS, "--threads", "1", "-q"],
    capture_output=True, text=True)
if gen.returncode != 0:
    sys.exit(f"bench: gen failed: {gen.stderr}")
time.sleep(0.5)  # the last datagrams reach both sockets; this is a transcript, not a test
both("record?", reason="jive5ab counts the 8-byte udps sequence numbers in the byte count, vlbiflow the frames")
both("evlbi?")
a, _ = both("record = off")
restarted = a == NO_REPLY
if restarted:
    # Restart jive5ab on vlbiflow's recording of the same data, set up as before.
    J5_PROC.kill()
    J5_PROC.wait()
    for i in (0, 1):
        for d in glob.glob(f"{SCRATCH}/j5/disk{i}/*"):
            shutil.rmtree(d)
        for d in glob.glob(f"{SCRATCH}/vf/disk{i}/no0001"):
            shutil.copytree(d, f"{SCRATCH}/j5/disk{i}/no0001")
    start_jive5ab()
    j5 = connect(J5_PORT)
    for c in ["mode = VDIF_8000-2048-16-2", "net_protocol = udps : 32000000 : 256000000 : 4",
              f"net_port = {J5_DATA}", "mtu = 9000", f"set_disks = {SCRATCH}/j5/disk*"]:
        ask(j5, c)
    rows.append(("(jive5ab restarted on a copy of vlbiflow's recording no0001, set up as above)", "", "", ""))
both("record?")
both("scan_check?", reason="jive5ab was restarted: no scan recorded in it yet" if restarted else None)
both("scan_set = no0001")
both("scan_set?", reason="jive5ab was restarted: its session list is empty (-1)" if restarted else None)
both("scan_check?", reason="vlbiflow computes scan_check? from the scan's metadata; jive5ab reads the first "
     "megabyte of data and cannot tell the frame rate from it here (docs/jive5ab-dialect.md)")
both("status?")
both("error?")
both("rtime?")
both("dir_info?")
both("transfermode?")
both("disk2file = FILE : : : w", f"disk2file = {SCRATCH}/j5.out : : : w", f"disk2file = {SCRATCH}/vf.out : : : w")
deadline = time.time() + 60
while time.time() < deadline:
    a, b = ask(j5, "disk2file?"), ask(vf, "disk2file?")
    if "inactive" in a and "inactive" in b:
        break
    time.sleep(0.2)
both("disk2file?", reason="each side writes its own file")
both("record = bogus", reason=None)
both("bank_set?")
both("runtime?")
both("error?")

import os
sizes = [os.path.getsize(f"{SCRATCH}/{n}.out") if os.path.exists(f"{SCRATCH}/{n}.out") else -1 for n in ("j5", "vf")]
print(f"# jive5ab side by side: {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}")
print(f"# jive5ab: {JIVE5AB}; vlbiflow: {BIN}; {SECS} s of VDIF (8032-byte frames, 128 Mb/s, udps) to both")
for cmd, a, b, v in rows:
    print(f"> {cmd}")
    print(f"  jive5ab : {a}")
    print(f"  vlbiflow: {b}")
    if v:
        print(f"  verdict : {v}")
import filecmp
same_bytes = min(sizes) >= 0 and filecmp.cmp(f"{SCRATCH}/j5.out", f"{SCRATCH}/vf.out", shallow=False)
print(f"# disk2file output: jive5ab {sizes[0]} bytes, vlbiflow {sizes[1]} bytes, "
      f"{'identical' if same_bytes else 'DIFFERENT'}")
bad = sum(1 for r in rows if r[3] == "DIFFERS")
print(f"# {len(rows)} commands: {sum(1 for r in rows if r[3] == 'same')} same, "
      f"{sum(1 for r in rows if r[3].startswith('expected'))} expected differences, {bad} DIFFERS")
sys.exit(1 if bad or not same_bytes else 0)
PY
