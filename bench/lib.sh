# Sourced by every bench script: the parts they share. It changes no directory and starts nothing;
# each function says what it needs.
#
#   bench_build           BIN: the binary to measure. Kept when set (BIN=path benchmarks that build, e.g.
#                         one kept from before a change); else the release build of this checkout, built
#                         once per run (`cargo build --release --locked -p vlbiflow`) with the same flags
#                         for every script
#   raise_socket_buffers [BYTES]
#                         net.core.rmem_max and wmem_max raised to at least BYTES (default 256 MiB), so
#                         that the tools' --recv-buffer and their defaults are granted; a note if not root
#   ns_tcp_buffers NS...  TCP autotuning up to 128 MiB in each network namespace, for a bandwidth-delay
#                         product of 2 Gb/s x 100 ms
#   on_exit_kill VAR...   at the script's exit, the processes whose pids the variables VAR then hold are
#                         killed and waited for, and the directory SCRATCH (if set) is removed
#   ns_pair TAG BASE      NA and NB, the names of two network namespaces for this run (vf-TAG-PID-a, -b),
#                         and NET, a /24 prefix for them from 10.BASE.0 to 10.(BASE+29).249 by the pid
#   emu_start OUT ERR ARGS...
#                         `$EMU_BIN pathemu ARGS...` (EMU_BIN defaults to BIN) in the background, its
#                         stdout to OUT and stderr to ERR; returns when it is ready, with its pid in EMU;
#                         exits the script with the emulator's error output if it is not ready in 20 s
#   emu_stop              stops the emulator emu_start started (if any)
#   path_queue RTT_MS     the emulator's queue for a 2 Gb/s bottleneck: one bandwidth-delay product but at
#                         least 4 MB (bytes)
#   wait_line FILE TEXT [TENTHS]
#                         waits until FILE has a line matching TEXT (grep), at most TENTHS tenths of a
#                         second (default 300); returns 1 if it did not come
#   need_line FILE TEXT [TENTHS]
#                         the same, and exits the script with FILE's contents if it did not come
#   scratch_dirs NAME     SCRATCH (default /var/tmp/NAME-PID, on disk) with src, dst and state in it, and
#                         XDG_STATE_HOME pointed at the last (the xfer daemon's and client's state stay
#                         inside the run)
#   source_file MB FILE   FILE filled with MB megabytes (10^6 bytes) of random data and synced
#   settle                sync, then wait (at most 60 s) until the disk holding SCRATCH stops counting
#                         discards (below)
#   cpu_of PID            user + system CPU seconds of process PID so far (0 once it is gone)
#   json_get FILE EXPR    EXPR evaluated in Python with d = the JSON document in FILE
#   record_scan DISKS SCAN PORT RATE SECS OUT
#                         `vlbiflow record` of one VDIF stream with PSN (127.0.0.1:PORT) as SCAN onto the
#                         directories DISKS0 to DISKS3, fed by `vlbiflow gen` at RATE for SECS; writes
#                         OUT/record.json, OUT/record.log and OUT/gen.json
#   machine_line          the date (UTC), the number of CPUs and the load average, for a run's header
#   machine_* (bench/cpu.sh, sourced here): the CPU the whole machine spends over a run
#
# settle: the scratch file system may be mounted with `discard` (this machine's is): deleting the last
# run's output (3 GB) makes the kernel send that much in discards to the disk after the next journal
# commit, and a run that starts while they are still going stalls on its reads and writes (0.1-0.5 s at
# a time measured on xfer's sender).

BENCH_DIR=$(dirname "$(realpath "${BASH_SOURCE[0]}")")
REPO_DIR=$(dirname "$BENCH_DIR")

bench_build() {
  if [ -n "${BIN:-}" ]; then
    [ -x "$BIN" ] || { echo "bench: BIN=$BIN is not an executable" >&2; exit 2; }
    return 0
  fi
  if [ "${VLBIFLOW_BENCH_BUILT:-}" != "$REPO_DIR" ]; then
    (cd "$REPO_DIR" && cargo build --release --locked -q -p vlbiflow)
    export VLBIFLOW_BENCH_BUILT=$REPO_DIR
  fi
  BIN=$REPO_DIR/target/release/vlbiflow
}

raise_socket_buffers() {
  local want=${1:-268435456} k
  for k in net.core.rmem_max net.core.wmem_max; do
    [ "$(sysctl -n "$k")" -ge "$want" ] && continue
    sysctl -qw "$k=$want" 2>/dev/null || echo "bench: cannot raise $k to $want (not root?)" >&2
  done
}

ns_tcp_buffers() {
  local ns
  for ns in "$@"; do
    ip netns exec "$ns" sysctl -qw net.ipv4.tcp_rmem="4096 131072 134217728" \
      net.ipv4.tcp_wmem="4096 131072 134217728" || true
  done
}

ns_pair() {
  PID=$$
  NA=vf-$1-$PID-a
  NB=vf-$1-$PID-b
  NET=10.$(($2 + PID % 30)).$(((PID / 30) % 250))
}

on_exit_kill() {
  BENCH_KILL_VARS="$*"
  trap bench_cleanup EXIT
}

bench_cleanup() {
  local v p
  for v in $BENCH_KILL_VARS; do
    for p in ${!v:-}; do kill "$p" 2>/dev/null && wait "$p" 2>/dev/null || true; done
  done
  if [ -n "${SCRATCH:-}" ]; then rm -rf "$SCRATCH"; fi
}

wait_line() {
  local _
  for _ in $(seq "${3:-300}"); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done
  return 1
}

need_line() {
  wait_line "$@" && return 0
  echo "bench: no '$2' in $1:" >&2
  cat "$1" >&2
  exit 1
}

emu_start() {
  local out=$1 err=$2
  shift 2
  "${EMU_BIN:-$BIN}" pathemu "$@" >"$out" 2>"$err" &
  EMU=$!
  need_line "$err" '^pathemu: ready' 200
}

emu_stop() {
  [ -n "${EMU:-}" ] || return 0
  kill "$EMU" 2>/dev/null || true
  wait "$EMU" 2>/dev/null || true
  EMU=
}

path_queue() { awk -v r="$1" 'BEGIN { q = int(2e9 / 8 * r / 1000); print (q > 4000000 ? q : 4000000) }'; }

scratch_dirs() {
  SCRATCH=${SCRATCH:-/var/tmp/$1-$$}
  mkdir -p "$SCRATCH"/src "$SCRATCH"/dst "$SCRATCH"/state
  export XDG_STATE_HOME=$SCRATCH/state
}

source_file() {
  head -c $(($1 * 1000000)) /dev/urandom >"$2"
  sync
}

settle() {
  local disk prev=x cur
  disk=$(basename "$(df --output=source "$SCRATCH" | tail -1)")
  sync
  for _ in $(seq 120); do
    cur=$(awk -v d="$disk" '$3 == d {print $15}' /proc/diskstats)
    [ "$cur" = "$prev" ] && return
    prev=$cur
    sleep 0.5
  done
}

cpu_of() { awk '{print ($14 + $15) / 100}' "/proc/$1/stat" 2>/dev/null || echo 0; }

json_get() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))" "$@"; }

record_scan() {
  local d=$1 scan=$2 port=$3 rate=$4 secs=$5 out=$6 rec
  "$BIN" record --stream "a=vdif@127.0.0.1:$port,psn" --disk "${d}0" --disk "${d}1" --disk "${d}2" --disk "${d}3" \
    --scan "$scan" --json >"$out/record.json" 2>"$out/record.log" &
  rec=$!
  for _ in $(seq 100); do [ -e "${d}0/$scan.vlbiflow.json" ] && break; sleep 0.1; done
  "$BIN" gen --dest "127.0.0.1:$port" --rate "$rate" --duration "$secs" --psn --json >"$out/gen.json" 2>/dev/null
  sleep 1
  kill -INT $rec
  wait $rec || true
}

machine_line() { echo "$(date -u +%FT%TZ), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"; }

. "$BENCH_DIR/cpu.sh"
