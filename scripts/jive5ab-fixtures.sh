#!/usr/bin/env bash
# Record the jive5ab fixtures in crates/checker/tests/fixtures/jive5ab: scans written by jive5ab itself
# (Mark6 and FlexBuff) from `vlbiflow gen --psn` streams ('udps'), cut to small byte-exact excerpts.
#
# This script only RUNS an already-built jive5ab; build jive5ab 3.1.x from its public source following its
# own instructions first. See docs/jive5ab.md.
#
# Usage (as root: it makes a private network namespace with only loopback, and tmpfs "disks"):
#   JIVE5AB=/path/to/jive5ab [VLBIFLOW=target/release/vlbiflow] scripts/jive5ab-fixtures.sh [OUTDIR]
# OUTDIR defaults to crates/checker/tests/fixtures/jive5ab. Existing fixture directories there are replaced.
#
# Why a namespace: jive5ab listens for commands on 0.0.0.0:2620 (and ROT broadcasts on UDP 7010); inside
# `unshare --net` the only interface is loopback, and the port cannot clash with anything else on the host.
# Why tmpfs: jive5ab never records to a directory on the root file system (set_disks leaves such
# mountpoints out), so every disk is a directory on a tmpfs mounted in a private mount namespace.
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
OUT=${1:-$REPO/crates/checker/tests/fixtures/jive5ab}
VLBIFLOW=${VLBIFLOW:-$REPO/target/release/vlbiflow}
CTRL_PORT=2620
DATA_PORT=46227

# Common stream parameters (see docs/jive5ab.md and EXPECTED.json)
FRAME=1032         # VDIF frame bytes, header included (1000-byte payload)
PPS=250            # frames per second (one thread)
BLOCK_FRAMES=32    # frames per jive5ab block (Mark6 block / FlexBuff chunk)
START=2026-03-01T12:00:00Z
JUMP_FRAME=1000                   # the 'jump' fixture's last frame: generator frame 1000 (PSN FIRST_PSN + 1000)
JUMP_START=2026-03-01T12:00:04Z   # its time stamp, START + JUMP_FRAME / PPS
FIRST_PSN=7000
MODE=VDIF_1000-2-1-2     # jive5ab's mode: payload bytes, Mb/s (250 x 8000 bits), channels, bits per sample

die() { echo "jive5ab-fixtures: $*" >&2; exit 1; }

if [ "${1:-}" != "--inside" ]; then
    [ -n "${JIVE5AB:-}" ] || die "set JIVE5AB=/path/to/an/already/built/jive5ab"
    [ -x "$JIVE5AB" ] || die "JIVE5AB=$JIVE5AB is not an executable"
    [ -x "$VLBIFLOW" ] || die "VLBIFLOW=$VLBIFLOW is not an executable (cargo build --release)"
    [ "$(id -u)" = 0 ] || die "run as root (network + mount namespace, tmpfs disks)"
    command -v python3 >/dev/null || die "python3 is needed to cut the excerpts"
    mkdir -p "$OUT"
    exec env JIVE5AB="$JIVE5AB" VLBIFLOW="$VLBIFLOW" unshare --net --mount --propagation private -- \
        bash "$0" --inside "$(cd "$OUT" && pwd)"
fi

# ---- inside the namespaces ---------------------------------------------------------------------------
OUT=$2
ip link set lo up
WORK=$(mktemp -d /tmp/vf-jive5ab-fixtures-XXXXXX)
mount -t tmpfs -o size=512m vf-jive5ab-fixtures "$WORK"
J5PID=
cleanup() {
    if [ -n "$J5PID" ]; then kill "$J5PID" 2>/dev/null || true; wait "$J5PID" 2>/dev/null || true; fi
    umount "$WORK" 2>/dev/null || true
    rmdir "$WORK" 2>/dev/null || true
}
trap cleanup EXIT

# Large socket buffers so that the kernel drops nothing (the only loss must be the generator's).
if [ "$(sysctl -n net.core.rmem_max)" -lt 67108864 ]; then sysctl -q -w net.core.rmem_max=67108864; fi

LOG=/dev/null
# One command on the control port; prints and logs the reply.
j5() {
    local reply
    exec 3<>"/dev/tcp/127.0.0.1/$CTRL_PORT"
    printf '%s\n' "$1" >&3
    IFS= read -r -t 30 reply <&3 || die "no reply to '$1'"
    exec 3>&-
    printf '> %s\n< %s\n' "$1" "$reply" >>"$LOG"
    # return code 0 (done) or 1 (initiated), or the one asked for; anything else stops the run
    local rc=${2:-01}
    [[ $reply =~ ^![a-z_0-9]+[[:space:]]*[=?][[:space:]]*[$rc][[:space:]]*[:\;] ]] || die "'$1' -> $reply"
    printf '%s\n' "$reply"
}

start_jive5ab() { # FORMAT(mk6|flexbuff) DIR
    "$JIVE5AB" -m 1 -p "$CTRL_PORT" -f "$1" -B $((FRAME * BLOCK_FRAMES)) >"$2/jive5ab.out" 2>&1 &
    J5PID=$!
    for _ in $(seq 100); do
        if (exec 3<>"/dev/tcp/127.0.0.1/$CTRL_PORT") 2>/dev/null; then return 0; fi
        kill -0 "$J5PID" 2>/dev/null || die "jive5ab exited at start: $(tail -3 "$2/jive5ab.out")"
        sleep 0.1
    done
    die "jive5ab does not answer on port $CTRL_PORT"
}

stop_jive5ab() {
    kill "$J5PID"
    wait "$J5PID" 2>/dev/null || true
    J5PID=
}

# record NAME LAYOUT(mark6|flexbuff) NDISKS THREAD DROP_EVERY COUNT KEEP_BLOCKS END(no|stray|jump)
record() {
    local name=$1 layout=$2 ndisks=$3 thread=$4 drop=$5 count=$6 keep=$7 abort=$8
    local dir=$WORK/$name mk6 fmt disks=() i r
    mkdir -p "$dir"
    for i in $(seq 0 $((ndisks - 1))); do mkdir -p "$dir/disk$i"; disks+=("$dir/disk$i"); done
    if [ "$layout" = mark6 ]; then mk6=1 fmt=mk6; else mk6=0 fmt=flexbuff; fi
    LOG=$dir/session.log
    : >"$LOG"
    start_jive5ab "$fmt" "$dir"
    j5 "version?" >/dev/null
    j5 "mode = $MODE" >/dev/null
    j5 "net_protocol = udps : 64M : $((FRAME * BLOCK_FRAMES)) : 4" >/dev/null
    j5 "net_port = $DATA_PORT" >/dev/null
    j5 "mtu = 9000" >/dev/null
    j5 "record = mk6 : $mk6" >/dev/null
    j5 "set_disks = $(IFS=:; echo "${disks[*]}" | sed 's/:/ : /g')" >/dev/null
    j5 "record = on : $name" >/dev/null
    j5 "constraints?" >/dev/null
    local gen_args=(gen --dest "127.0.0.1:$DATA_PORT" --psn --first-psn "$FIRST_PSN" --frame-size "$FRAME"
        --pps "$PPS" --count "$count" --thread-ids "$thread" --station Xx --start "$START"
        --drop-every "$drop" --payload noise --quiet)
    echo "# ${gen_args[*]}" >>"$LOG"
    "$VLBIFLOW" "${gen_args[@]}" >>"$LOG"
    if [ "$abort" = stray ]; then
        # One stray datagram of the wrong size (64 bytes) whose PSN is far ahead: jive5ab pushes the
        # partly filled last block out whole (fill where nothing arrived) and its reader stops.
        local psn=$((FIRST_PSN + count + 1000))
        echo "# stray 64-byte datagram, PSN $psn" >>"$LOG"
        python3 -c 'import socket,struct,sys
s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)
s.sendto(struct.pack("<Q",int(sys.argv[1]))+b"\0"*56,("127.0.0.1",int(sys.argv[2])))' "$psn" "$DATA_PORT"
        sleep 0.5
    elif [ "$abort" = jump ]; then
        # Then one whole frame far ahead, generator frame JUMP_FRAME (PSN and time stamp agree, as when a
        # sender skips): jive5ab pushes the partly filled last block out whole and starts a new block with it.
        local jump_args=(gen --dest "127.0.0.1:$DATA_PORT" --psn --first-psn $((FIRST_PSN + JUMP_FRAME))
            --frame-size "$FRAME" --pps "$PPS" --count 1 --thread-ids "$thread" --station Xx
            --start "$JUMP_START" --payload noise --quiet)
        echo "# ${jump_args[*]}" >>"$LOG"
        "$VLBIFLOW" "${jump_args[@]}" >>"$LOG"
        sleep 0.5
    fi
    j5 "evlbi?" >/dev/null
    if [ "$abort" = stray ]; then
        # the stray datagram has already ended the recording: jive5ab answers 6 "Not doing record"
        j5 "record?" >/dev/null
        j5 "record = off" 6 >/dev/null
    else
        j5 "record = off" >/dev/null
    fi
    for _ in $(seq 100); do
        r=$(j5 "record?")
        case $r in *": off"*) break ;; esac
        sleep 0.1
    done
    case $r in *": off"*) ;; *) die "$name: record? never said off: $r" ;; esac
    stop_jive5ab
    # Loss check: jive5ab counts missing PSNs between the first and the last datagram it saw. With no
    # kernel loss that is exactly the generator's drops before its last sent frame.
    local want=0 k
    if [ "$drop" -gt 0 ]; then for ((k = drop; k < count; k += drop)); do want=$((want + 1)); done; fi
    # (the stray datagram 1000 PSNs past the last frame adds 1000, the jump JUMP_FRAME - count; no drops there)
    if [ "$abort" = stray ]; then want=$((want + 1000)); fi
    if [ "$abort" = jump ]; then want=$((want + JUMP_FRAME - count)); fi
    if ! grep -q "loss : $want (" "$LOG"; then
        die "$name: jive5ab's evlbi? loss is not the $want expected (kernel loss?): $(grep evlbi -A1 "$LOG" | tail -1)"
    fi
    excerpt "$layout" "$dir" "$name" "$keep"
}

# Copy the first KEEP blocks (Mark6: every block numbered below KEEP, a byte-exact prefix of each file;
# FlexBuff: chunks 0..KEEP-1) to OUT/NAME. KEEP=0 keeps everything.
excerpt() {
    local layout=$1 dir=$2 name=$3 keep=$4
    rm -rf "${OUT:?}/$name"
    mkdir -p "$OUT/$name"
    cp "$dir/session.log" "$OUT/$name/session.log"
    cp "$dir/jive5ab.out" "$OUT/$name/jive5ab.log"
    python3 - "$layout" "$dir" "$OUT/$name" "$name" "$keep" <<'PY'
import os, struct, sys, shutil
layout, src, dst, scan, keep = sys.argv[1:6]
keep = int(keep)
for disk in sorted(d for d in os.listdir(src) if d.startswith("disk")):
    os.makedirs(os.path.join(dst, disk), exist_ok=True)
    if layout == "mark6":
        path = os.path.join(src, disk, scan)
        if not os.path.exists(path):
            continue
        data = open(path, "rb").read()
        off, last = 20, -1
        while off < len(data):
            num, size = struct.unpack_from("<ii", data, off)
            assert num > last, f"{path}: block numbers not increasing"
            if keep and num >= keep:
                break
            last, off = num, off + size
        open(os.path.join(dst, disk, scan), "wb").write(data[:off])
    else:
        sdir = os.path.join(src, disk, scan)
        if not os.path.isdir(sdir):
            continue
        os.makedirs(os.path.join(dst, disk, scan), exist_ok=True)
        for chunk in sorted(os.listdir(sdir)):
            if keep == 0 or int(chunk.rsplit(".", 1)[1]) < keep:
                shutil.copyfile(os.path.join(sdir, chunk), os.path.join(dst, disk, scan, chunk))
PY
    echo "jive5ab-fixtures: $name: $(du -sb "$OUT/$name" | cut -f1) bytes"
}

#      NAME            LAYOUT   DISKS THREAD DROP COUNT KEEP END
record j5_mk6_clean    mark6    4     0      0    500   8    no
record j5_mk6_loss     mark6    4     0      50   500   8    no
record j5_mk6_t5_loss  mark6    4     5      37   500   8    no
record j5_fb_loss      flexbuff 2     0      40   500   8    no
record j5_fb_t5        flexbuff 2     5      0    500   8    no
record j5_mk6_abort    mark6    4     0      0    100   0    stray
record j5_fb_abort     flexbuff 2     0      0    100   0    stray
record j5_fb_jump      flexbuff 2     0      0    100   0    jump
