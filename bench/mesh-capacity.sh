#!/usr/bin/env bash
# `vlbiflow net capacity` against paths of known capacity: two network namespaces joined by a veth
# pair, the sender's side shaped by tbf or htb at 100 Mb/s, 500 Mb/s and 2 Gb/s, a `vlbiflow net
# responder` in the far namespace. Prints a table of the estimate (IP layer) against the configured
# rate (acceptance: within 10 %) and against the IP-layer rate that rate allows (tc counts the
# 14-byte Ethernet header: 1500/1514 of it for 1500-byte packets), and writes JSON per case.
# Shaper "tbf" uses BURST (default 32kb); "tbfbig" the same tbf with BIG_BURST (default 256kb);
# "none" (not in the default list) leaves the veth pair unshaped (the rate column is then moot).
#
# Needs root. Usage: bench/mesh-capacity.sh [OUT_DIR]   (default target/bench-mesh-capacity)
# Environment: RATES="100mbit 500mbit 2gbit" SHAPERS="tbf htb tbfbig" PAIRS=60 EXTRA="--train 8192"
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
[ "$(id -u)" = 0 ] || { echo "needs root (network namespaces, tc)" >&2; exit 2; }
out=${1:-target/bench-mesh-capacity}
mkdir -p "$out"
bench_build
bin=$BIN
RATES=${RATES:-"100mbit 500mbit 2gbit"}
SHAPERS=${SHAPERS:-"tbf htb tbfbig"}
PAIRS=${PAIRS:-60}
EXTRA=${EXTRA:-}

tag="vfc$$"
a="${tag}a" b="${tag}b"
sub="10.214.$(( $$ % 250 ))"
resp_pid=""
cleanup() {
  [ -n "$resp_pid" ] && kill "$resp_pid" 2>/dev/null || true
  ip netns del "$a" 2>/dev/null || true
  ip netns del "$b" 2>/dev/null || true
}
trap cleanup EXIT
ip netns add "$a"; ip netns add "$b"
ip link add e0 netns "$a" type veth peer name e0 netns "$b"
ip -n "$a" addr add "$sub.1/24" dev e0; ip -n "$b" addr add "$sub.2/24" dev e0
for n in "$a" "$b"; do ip -n "$n" link set lo up; ip -n "$n" link set e0 up; done
ip netns exec "$b" "$bin" net responder --listen "$sub.2:14233" 2>"$out/responder.log" &
resp_pid=$!
for _ in $(seq 50); do ip netns exec "$a" bash -c "echo > /dev/tcp/$sub.2/14233" 2>/dev/null && break; sleep 0.1; done

to_mbps() { case "$1" in *gbit) echo $(( ${1%gbit} * 1000 ));; *mbit) echo "${1%mbit}";; esac; }
shape() { # shaper rate
  ip netns exec "$a" tc qdisc del dev e0 root 2>/dev/null || true
  case "$1" in
    tbf) ip netns exec "$a" tc qdisc add dev e0 root tbf rate "$2" burst "${BURST:-32kb}" latency 50ms ;;
    none) ;;  # the bare veth pair (no known capacity: what the tool says about a host-bound path)
    tbfbig) ip netns exec "$a" tc qdisc add dev e0 root tbf rate "$2" burst "${BIG_BURST:-256kb}" latency 50ms ;;
    htb) ip netns exec "$a" tc qdisc add dev e0 root handle 1: htb default 10
         ip netns exec "$a" tc class add dev e0 parent 1: classid 1:10 htb rate "$2" ceil "$2" ;;
  esac
}

printf '%-6s %-10s %-14s %-10s %-10s %-8s %-7s %s\n' shaper configured "estimate Mb/s" "error %" "vs IP %" "within" "time s" method | tee "$out/table.txt"
for sh in $SHAPERS; do
  for rate in $RATES; do
    shape "$sh" "$rate"
    json="$out/$sh-$rate.json"
    if ! ip netns exec "$a" "$bin" net capacity "$sub.2" --pairs "$PAIRS" $EXTRA --json >"$json" 2>"$out/$sh-$rate.err"; then
      printf '%-6s %-10s %s\n' "$sh" "$rate" "failed: $(tail -1 "$out/$sh-$rate.err")" | tee -a "$out/table.txt"
      continue
    fi
    python3 - "$json" "$sh" "$rate" "$(to_mbps "$rate")" <<'EOF' | tee -a "$out/table.txt"
import json, sys
j = json.load(open(sys.argv[1]))
est = j.get("estimate", j)
def find(d, keys):
    for k in keys:
        if isinstance(d, dict) and d.get(k) is not None:
            return d[k], k
    return None, None
v, _ = find(est, ["capacity_mbps"])
k = est.get("method", "?") if isinstance(est, dict) else "?"
ref = float(sys.argv[4])
if v is None:
    print(f"{sys.argv[2]:<6} {sys.argv[3]:<10} no estimate in {list(est)[:8]}")
else:
    err = 100 * (v - ref) / ref
    ip = 100 * (v - ref * 1500 / 1514) / (ref * 1500 / 1514)
    t = j.get("duration_s", 0)
    print(f"{sys.argv[2]:<6} {sys.argv[3]:<10} {v:<14.1f} {err:<+10.1f} {ip:<+10.1f} {'yes' if abs(err) <= 10 else 'NO':<8} {t:<7.1f} {k}")
EOF
  done
done
echo "machine: $(nproc) cores, $(uname -r); load: $(cut -d' ' -f1-3 /proc/loadavg); $(date -u +%FT%TZ)" | tee -a "$out/table.txt"
