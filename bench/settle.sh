# Sourced by bench/xfer.sh and bench/xfer-path-ab.sh (needs $SCRATCH). The scratch file system may be
# mounted with `discard` (this machine's is): deleting the last run's output (3 GB) makes the kernel send
# that much in discards to the disk after the next journal commit, and a run that starts while they are
# still going stalls on its reads and writes (0.1-0.5 s at a time measured on xfer's sender). settle:
# sync, then wait (at most 60 s) until the disk's count of discards stops moving, before each run.
DISK=$(basename "$(df --output=source "$SCRATCH" | tail -1)")
settle() {
  sync
  local prev=x cur
  for _ in $(seq 120); do
    cur=$(awk -v d="$DISK" '$3 == d {print $15}' /proc/diskstats)
    [ "$cur" = "$prev" ] && return
    prev=$cur
    sleep 0.5
  done
}
