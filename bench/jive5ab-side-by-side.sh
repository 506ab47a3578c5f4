#!/usr/bin/env bash
# The jive5ab dialect side by side with a real jive5ab: starts jive5ab (FlexBuff mode) and `vlbiflow serve
# --dialect jive5ab` on loopback, each with two tmpfs "disks" under a scratch directory, and runs
# bench/jive5ab-side-by-side.py, which sends both the same Field-System-like session: identification,
# fb_mode set-up (net_protocol = udpsnor), SCANS scans of `record = on`/`off` with record?, evlbi? and
# status? between and scan_check? after each, each scan SECONDS of VDIF at 32000 frames/s (2.056 Gb/s)
# from `vlbiflow gen`; then scan_set, disk2file of one scan and status queries; then a scan with 1000
# garbage datagrams and one 1000-byte datagram sent into the recording port. Replies side by side, each
# line with a verdict:
#   same       same return code and fields
#   expected   same return code and number of fields; the fields that differ are named, with the reason
#              (the machine, the software, or a difference documented in docs/jive5ab-dialect.md); in the
#              garbage run, jive5ab's behaviour
#   DIFFERS    differs without a known reason
# Then every recording of both daemons through `vlbiflow check` (frames against gen's count), and
# jive5ab's scan_check? on its own recordings and on vlbiflow's next to vlbiflow's scan_check?.
#
#   JIVE5AB=/tmp/j5build/src/jive5ab bench/jive5ab-side-by-side.sh [SECONDS [SCANS]]   (default 2 s, 10)
#
# The session uses udpsnor, as the Field System does: with net_protocol = udps, jive5ab 3.1.0 does not
# answer `record = off` (its reader thread counts itself finished without waking the thread that waits
# for it; docs/jive5ab-dialect.md). Two cores cannot send 2 x 2 Gb/s at once, so each scan's frames go to
# jive5ab and then, with the same time stamps, to vlbiflow (both are recording throughout).
# Every wait is bounded (20 s per reply, 120 s for disk2file); about 3 minutes with the defaults, and
# 2 x SCANS x SECONDS x 257 MB of tmpfs (11 GB with the defaults).
#
# Needs root (jive5ab records only onto mount points that are not on the root file system, so the
# scratch disks are tmpfs mounts; they are unmounted at the end). jive5ab 3.1.0 from source:
#   git clone https://github.com/jive-vlbi/jive5ab /tmp/j5src   (tag v3.1.0)
#   mkdir /tmp/j5build && cd /tmp/j5build && cmake -DSSAPI_ROOT=nossapi /tmp/j5src && make -j2
# Exit status: 0 when no line DIFFERS and vlbiflow stored every frame gen sent, 1 otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
SECS=${1:-2}
SCANS=${2:-10}
PPS=${PPS:-32000}
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
    for m in "$SCRATCH"/j5/disk* "$SCRATCH"/vf/disk*; do umount "$m" 2>/dev/null || true; done
    rm -rf "$SCRATCH"
}
trap cleanup EXIT
for i in 0 1; do
    mkdir -p "$SCRATCH/j5/disk$i" "$SCRATCH/vf/disk$i"
    mount -t tmpfs -o size=4g j5sbs "$SCRATCH/j5/disk$i"
    mount -t tmpfs -o size=4g j5sbs "$SCRATCH/vf/disk$i"
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
(cd "$SCRATCH" && exec "$JIVE5AB" -m 0 -p "$J5_PORT") >"$SCRATCH/jive5ab.log" 2>&1 &
echo $! >"$SCRATCH/j5.pid"

python3 bench/jive5ab-side-by-side.py "$BIN" "$SCRATCH" "$J5_PORT" "$VF_PORT" "$J5_DATA" "$VF_DATA" \
    "$SECS" "$SCANS" "$PPS" "$JIVE5AB" "$(cat "$SCRATCH/j5.pid")"
