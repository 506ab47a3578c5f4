#!/usr/bin/env bash
# Record the jive5ab fixtures in crates/checker/tests/fixtures/jive5ab: scans written by jive5ab itself
# (Mark6 and FlexBuff) from `vlbiflow gen --psn` streams ('udps'), cut to small byte-exact excerpts.
#
# This script only RUNS an already-built jive5ab; build jive5ab 3.1.x from its public source following its
# own instructions first. See docs/jive5ab.md.
#
# Usage (as root: it makes a private network namespace with only loopback, and tmpfs "disks"):
#   JIVE5AB=/path/to/jive5ab [VLBIFLOW=target/release/vlbiflow] scripts/jive5ab-fixtures.sh [OUTDIR]
#   JIVE5AB=/path/to/jive5ab [VLBIFLOW=...] scripts/jive5ab-fixtures.sh --full OUTDIR
# OUTDIR defaults to crates/checker/tests/fixtures/jive5ab. Existing fixture directories there are replaced.
#
# --full: the issue-10 acceptance run at full scale instead of the fixtures. 8224-byte frames at 15625
# frames/s (1.024 Gb/s of payload) for 10 s, every 1000th frame left out, jive5ab's default block sizes
# (Mark6 8 MB, FlexBuff 128 MB), whole scans kept (about 1.3 GB each, six scans: put OUTDIR on a disk with
# 8 GB free, outside the repository). Per scan it writes truth.json (every frame of the recorded stream
# compared with `vlbiflow gen --output` of the same stream: where jive5ab put fill, and that every other
# frame is the generator's byte for byte), then runs `vlbiflow check` (with and without --frame-rate),
# `vlbiflow ls` and `vlbiflow gather` and prints truth against check (OUTDIR/SUMMARY.md).
#
# Why a namespace: jive5ab listens for commands on 0.0.0.0:2620 (and ROT broadcasts on UDP 7010); inside
# `unshare --net` the only interface is loopback, and the port cannot clash with anything else on the host.
# Why tmpfs: jive5ab never records to a directory on the root file system (set_disks leaves such
# mountpoints out), so every disk is a directory on a tmpfs mounted in a private mount namespace.
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
FULL=${FULL:-0}
if [ "${1:-}" = "--full" ]; then
    FULL=1
    shift
    [ -n "${1:-}" ] || { echo "jive5ab-fixtures: --full needs an OUTDIR (about 8 GB, outside the repository)" >&2; exit 1; }
fi
OUT=${1:-$REPO/crates/checker/tests/fixtures/jive5ab}
VLBIFLOW=${VLBIFLOW:-$REPO/target/release/vlbiflow}
CTRL_PORT=2620
DATA_PORT=46227

# Common stream parameters (see docs/jive5ab.md and EXPECTED.json)
if [ "$FULL" = 1 ]; then
    FRAME=8224         # vlbiflow gen's default frame size (8192-byte payload)
    PPS=15625          # 1.024 Gb/s of payload
    BLOCK_FRAMES=      # jive5ab's own block sizes: Mark6 8388480 bytes (1020 frames), FlexBuff 134215680 (16320)
    FULL_COUNT=156250  # 10 s
    FULL_DROP=1000     # 0.1 % loss
    TMPFS_SIZE=3g      # one whole scan at a time (copied out, then removed)
else
    FRAME=1032         # VDIF frame bytes, header included (1000-byte payload)
    PPS=250            # frames per second (one thread)
    BLOCK_FRAMES=32    # frames per jive5ab block (Mark6 block / FlexBuff chunk)
    TMPFS_SIZE=512m
fi
START=2026-03-01T12:00:00Z
JUMP_FRAME=1000                   # the 'jump' fixture's last frame: generator frame 1000 (PSN FIRST_PSN + 1000)
JUMP_START=2026-03-01T12:00:04Z   # its time stamp, START + JUMP_FRAME / PPS
FIRST_PSN=7000
# jive5ab's mode: payload bytes, Mb/s (a whole number: 250 x 8000 bits = 2, 15625 x 65536 bits = 1024),
# channels, bits per sample
MODE=VDIF_$((FRAME - 32))-$((PPS * (FRAME - 32) * 8 / 1000000))-1-2
[ $((PPS * (FRAME - 32) * 8 % 1000000)) = 0 ] || { echo "jive5ab-fixtures: the data rate is not a whole Mb/s" >&2; exit 1; }

die() { echo "jive5ab-fixtures: $*" >&2; exit 1; }

if [ "${1:-}" != "--inside" ]; then
    [ -n "${JIVE5AB:-}" ] || die "set JIVE5AB=/path/to/an/already/built/jive5ab"
    [ -x "$JIVE5AB" ] || die "JIVE5AB=$JIVE5AB is not an executable"
    [ -x "$VLBIFLOW" ] || die "VLBIFLOW=$VLBIFLOW is not an executable (cargo build --release)"
    [ "$(id -u)" = 0 ] || die "run as root (network + mount namespace, tmpfs disks)"
    command -v python3 >/dev/null || die "python3 is needed to cut the excerpts"
    mkdir -p "$OUT"
    exec env JIVE5AB="$JIVE5AB" VLBIFLOW="$VLBIFLOW" FULL="$FULL" unshare --net --mount --propagation private -- \
        bash "$0" --inside "$(cd "$OUT" && pwd)"
fi

# ---- inside the namespaces ---------------------------------------------------------------------------
OUT=$2
ip link set lo up
WORK=$(mktemp -d /tmp/vf-jive5ab-fixtures-XXXXXX)
mount -t tmpfs -o size=$TMPFS_SIZE vf-jive5ab-fixtures "$WORK"
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
    local minblock=()
    if [ -n "$BLOCK_FRAMES" ]; then minblock=(-B $((FRAME * BLOCK_FRAMES))); fi
    "$JIVE5AB" -m 1 -p "$CTRL_PORT" -f "$1" "${minblock[@]}" >"$2/jive5ab.out" 2>&1 &
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
    if [ -n "$BLOCK_FRAMES" ]; then
        j5 "net_protocol = udps : 64M : $((FRAME * BLOCK_FRAMES)) : 4" >/dev/null
    else
        j5 "net_protocol = udps : 64M" >/dev/null
    fi
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
    if [ "$FULL" = 1 ]; then
        rm -rf "$dir"
        truth "$name" "$layout" "$thread" "$drop" "$count" "$abort"
    fi
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

# --full only: the ground truth of OUT/NAME, from the files themselves and the generator. Reads the recorded
# stream in order (Mark6 blocks by block number, FlexBuff chunks by chunk number), tells jive5ab's fill
# frames (invalid bit, fill words from byte 16 on) from data frames, and compares the data frames byte for
# byte with `vlbiflow gen --output` of the same stream (the same frames, less those left out). Writes
# OUT/NAME/truth.json.
truth() { # NAME LAYOUT THREAD DROP COUNT END
    local name=$1 layout=$2 thread=$3 drop=$4 count=$5 abort=$6
    local ref=$OUT/$name/reference.vdif
    "$VLBIFLOW" gen --output "$ref" --frame-size "$FRAME" --pps "$PPS" --count "$count" --thread-ids "$thread" \
        --station Xx --start "$START" --drop-every "$drop" --payload noise --quiet >/dev/null 2>&1
    python3 - "$layout" "$OUT/$name" "$name" "$FRAME" "$PPS" "$count" "$drop" "$thread" "$abort" "$ref" <<'PY'
import datetime, hashlib, json, os, struct, sys
layout, d, scan = sys.argv[1:4]
frame, pps, count, drop, thread = map(int, sys.argv[4:9])
abort, ref = sys.argv[9:11]
pieces = []  # (block or chunk number, path, offset, length)
for disk in sorted(x for x in os.listdir(d) if x.startswith("disk")):
    if layout == "mark6":
        path = os.path.join(d, disk, scan)
        if not os.path.exists(path):
            continue
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            off = 20
            while off < size:
                f.seek(off)
                num, wb = struct.unpack("<ii", f.read(8))
                pieces.append((num, path, off + 8, wb - 8))
                off += wb
    else:
        sdir = os.path.join(d, disk, scan)
        if os.path.isdir(sdir):
            for c in os.listdir(sdir):
                p = os.path.join(sdir, c)
                pieces.append((int(c.rsplit(".", 1)[1]), p, 0, os.path.getsize(p)))
pieces.sort()
nums = [p[0] for p in pieces]
assert len(set(nums)) == len(nums), "block numbers repeat"
fill_tail = struct.pack("<I", 0x11223344) * ((frame - 16) // 4)
jive5ab_fill_header = struct.pack("<IIII", 0x80000000, 0, frame // 8, 0)
sha = hashlib.sha256()
fill_at, data_at, mismatch, threads, odd, other_fill = [], [], 0, set(), 0, 0
first = last = None
index = 0
rf = open(ref, "rb")
for num, path, off, length in pieces:
    with open(path, "rb") as f:
        f.seek(off)
        buf = f.read(length)
    sha.update(buf)
    if length % frame:
        odd += 1
    for p in range(0, length - length % frame, frame):
        fr = buf[p:p + frame]
        if fr[3] & 0x80 and fr[16:] == fill_tail:
            fill_at.append(index)
            if fr[:16] != jive5ab_fill_header:
                other_fill += 1
        else:
            data_at.append(index)
            w0, w1, w2, w3 = struct.unpack_from("<IIII", fr)
            threads.add((w3 >> 16) & 0x3FF)
            last = ((w1 >> 24) & 0x3F, w0 & 0x3FFFFFFF, w1 & 0xFFFFFF)
            first = first or last
            if rf.read(frame) != fr:
                mismatch += 1
        index += 1
ref_left = len(rf.read(frame))


def iso(st):
    epoch, sec, fno = st
    t0 = datetime.datetime(2000 + epoch // 2, 1 + 6 * (epoch % 2), 1, tzinfo=datetime.timezone.utc)
    t = t0 + datetime.timedelta(seconds=sec, microseconds=round(fno * 1e6 / pps))
    return t.strftime("%Y-%m-%dT%H:%M:%S.%f").rstrip("0").rstrip(".") + "Z"


first_data, last_data = data_at[0], data_at[-1]
between = [i for i in fill_at if first_data < i < last_data]
dropped = [k for k in range(count) if drop and (k + 1) % drop == 0]
# Every frame the generator left out lies before its last frame, so each is missing data.
assert all(k < count - 1 for k in dropped)
missing = len(dropped)
data = len(data_at)
truth = {
    "scan": scan, "layout": layout, "thread": thread, "frame_size": frame, "frame_rate": pps,
    "end": abort, "generator_frames": count, "generator_dropped": len(dropped),
    "blocks": len(pieces), "block_numbers": [min(nums), max(nums)], "blocks_with_partial_frame": odd,
    "slots": index, "data_frames": data, "fill_frames": len(fill_at),
    "leading_fill": len([i for i in fill_at if i < first_data]),
    "fill_between_data": len(between),
    "tail_fill": len([i for i in fill_at if i > last_data]),
    "fill_with_other_header": other_fill,
    # jive5ab put the datagram with PSN first + k at slot k: fill stands exactly where frames were left out
    "fill_between_data_at_dropped_frames": between == dropped,
    "data_frames_equal_generator": mismatch == 0 and ref_left == 0 and data == count - len(dropped),
    "data_threads": sorted(threads),
    "first": iso(first), "last": iso(last),
    "missing": missing, "loss_fraction": missing / (data + missing),
    "stream_sha256": sha.hexdigest(),
}
json.dump(truth, open(os.path.join(d, "truth.json"), "w"), indent=1)
print(f"jive5ab-fixtures: {scan}: truth: {data} data frames, {len(fill_at)} fill ({len(between)} between data, "
      f"{truth['tail_fill']} at the tail), fill where the generator dropped: "
      f"{truth['fill_between_data_at_dropped_frames']}, data = generator's: {truth['data_frames_equal_generator']}")
PY
    rm -f "$ref"
}

# --full only: vlbiflow check (with and without --frame-rate), ls and gather on every scan in OUT, and a
# table of truth against check in OUT/SUMMARY.md.
summarise() {
    local name dir rc
    for dir in "$OUT"/full_*/; do
        dir=${dir%/}
        name=$(basename "$dir")
        [ -f "$dir/truth.json" ] || continue
        rc=0; "$VLBIFLOW" check "$name" --disk "$dir/disk*" -q >"$dir/check.txt" 2>&1 || rc=$?
        echo "exit=$rc" >>"$dir/check.txt"
        rc=0; "$VLBIFLOW" check "$name" --disk "$dir/disk*" -q --frame-rate "$PPS" >"$dir/check-rate.txt" 2>&1 || rc=$?
        echo "exit=$rc" >>"$dir/check-rate.txt"
        rc=0; "$VLBIFLOW" check "$name" --disk "$dir/disk*" -q --json >"$dir/check.json" || rc=$?
        echo "$rc" >"$dir/check.json.exit"
        rc=0; "$VLBIFLOW" check "$name" --disk "$dir/disk*" -q --json --frame-rate "$PPS" >"$dir/check-rate.json" || rc=$?
        echo "$rc" >"$dir/check-rate.json.exit"
        "$VLBIFLOW" ls "$dir/disk*" >"$dir/ls.txt" 2>&1 || true
        "$VLBIFLOW" ls "$dir/disk*" --json >"$dir/ls.json" || true
        rc=0; "$VLBIFLOW" gather "$name" --disk "$dir/disk*" -q --force -o "$dir/gathered.vdif" || rc=$?
        { echo "exit=$rc"; sha256sum "$dir/gathered.vdif" | cut -d' ' -f1; } >"$dir/gather.txt"
        rm -f "$dir/gathered.vdif"
    done
    python3 - "$OUT" <<'PY' | tee "$OUT/SUMMARY.md"
import glob, json, os, sys
print("| scan | | exit | data frames | missing | fill between data | tail fill | loss fraction | dup | ooo "
      "| threads | start | frame rate |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
ok, notes = True, []
for d in sorted(glob.glob(os.path.join(sys.argv[1], "full_*/"))):
    t = json.load(open(os.path.join(d, "truth.json")))
    name = t["scan"]
    want = [1 if t["missing"] else 0, t["data_frames"], t["missing"], t["fill_between_data"], t["tail_fill"],
            t["loss_fraction"], 0, 0, t["data_threads"], t["first"]]
    print(f"| {name} | truth | {want[0]} | {want[1]} | {want[2]} | {want[3]} | {want[4]} | {want[5]:.4e} | 0 | 0 "
          f"| {want[8]} | {want[9]} | {t['frame_rate']} |")
    for label, f in (("check", "check.json"), ("check --frame-rate", "check-rate.json")):
        c = json.load(open(os.path.join(d, f)))
        rc = int(open(os.path.join(d, f + ".exit")).read())
        got = [rc, c["frames"], c["missing"], c["fill"], c["tail_fill"], c["loss_fraction"], c["duplicates"],
               c["out_of_order"], [x["thread"] for x in c["threads"]], c["start_utc"]]
        diff = [i for i in range(10) if (abs(got[i] - want[i]) > 1e-12 if i == 5 else got[i] != want[i])]
        ok &= not diff
        print(f"| {name} | {label} | {got[0]} | {got[1]} | {got[2]} | {got[3]} | {got[4]} | {got[5]:.4e} | {got[6]} "
              f"| {got[7]} | {got[8]} | {got[9]} | {c['frame_rate']} |" + (" **differs** |" if diff else ""))
    g = open(os.path.join(d, "gather.txt")).read().split()
    ls = json.load(open(os.path.join(d, "ls.json")))
    ls = next((x for x in ls if x.get("name") == name), {}) if isinstance(ls, list) else ls
    same = g[1] == t["stream_sha256"]
    ok &= same and t["data_frames_equal_generator"] and t["fill_between_data_at_dropped_frames"]
    notes.append(f"- {name}: gather {g[0]}, output = the recorded stream byte for byte: {same}; data frames = "
                 f"the generator's: {t['data_frames_equal_generator']}; fill exactly where the generator dropped: "
                 f"{t['fill_between_data_at_dropped_frames']}; ls: start {ls.get('start_utc')}, duration "
                 f"{ls.get('duration_s')} s, {ls.get('streams')}")
print()
print("\n".join(notes))
print()
print("all as the truth:", ok)
PY
}

if [ "$FULL" = 1 ]; then
    #      NAME              LAYOUT   DISKS THREAD DROP       COUNT       KEEP END
    record full_mk6_t0_loss  mark6    4     0      $FULL_DROP $FULL_COUNT 0    no
    record full_mk6_t5_loss  mark6    4     5      $FULL_DROP $FULL_COUNT 0    no
    record full_fb_t0_loss   flexbuff 2     0      $FULL_DROP $FULL_COUNT 0    no
    record full_fb_t5_loss   flexbuff 2     5      $FULL_DROP $FULL_COUNT 0    no
    record full_mk6_t0_abort mark6    4     0      $FULL_DROP $FULL_COUNT 0    stray
    record full_fb_t5_abort  flexbuff 2     5      $FULL_DROP $FULL_COUNT 0    stray
    summarise
    exit 0
fi

#      NAME            LAYOUT   DISKS THREAD DROP COUNT KEEP END
record j5_mk6_clean    mark6    4     0      0    500   8    no
record j5_mk6_loss     mark6    4     0      50   500   8    no
record j5_mk6_t5_loss  mark6    4     5      37   500   8    no
record j5_fb_loss      flexbuff 2     0      40   500   8    no
record j5_fb_t5        flexbuff 2     5      0    500   8    no
record j5_mk6_abort    mark6    4     0      0    100   0    stray
record j5_fb_abort     flexbuff 2     0      0    100   0    stray
record j5_fb_jump      flexbuff 2     0      0    100   0    jump
record j5_fb_t5_loss_abort flexbuff 2   5      37   100   0    stray
