# Sourced by bench/lib.sh: the CPU the whole machine spends, for comparisons in
# which a process's own CPU time does not tell the whole cost. The kernel does much of TCP's work in
# softirq context, in whichever task the interrupt found running: through `vlbiflow pathemu`, the
# emulator's writes into a TUN device deliver segments and ACKs to the TCP sockets and run their
# transmissions in the emulator's context; and on any host writeback runs in kernel threads.
#
# Busy time is counted as elapsed time on all CPUs less their idle, iowait and steal time. The busy
# columns of /proc/stat cannot be used for it: this kernel samples them with the tick (no
# IRQ_TIME_ACCOUNTING, no VIRT_CPU_ACCOUNTING). For paced loads of short bursts they came out 15% above
# the sum of every process's own CPU time in an 8 s iperf3 test, and at a ninth of the two iperf3
# processes' own figures in a loopback A/B (docs/bench/xfer.md). Idle time is measured on entry to and
# exit from idle, and the busy time derived from it matched that sum within 2% (4.50 against 4.42 s).
#
#   machine_mark          the machine's not-busy jiffies (idle, iowait, steal), the time and the steal
#                         jiffies, for the functions below
#   machine_busy M0 M1    CPU seconds all CPUs were busy between two marks
#   machine_cpu M0 M1 BG  the same less BG busy seconds per second of background: what a run cost
#   machine_steal M0 M1   CPU seconds the hypervisor took from this machine's CPUs between two marks
#                         (time its virtual CPUs were ready to run and did not: a run that lost much of
#                         it says more about the host than about the tool)
#   machine_background N  busy CPU seconds per second over N seconds with nothing of the benchmark
#                         running (what the rest of the machine costs; subtract it from a run)
machine_mark() {
  local s
  s=$(awk '$1 == "cpu" {print $5 + $6 + $9, $9; exit}' /proc/stat)
  echo "${s% *} $(date +%s.%N) ${s#* }"
}
machine_busy() {
  python3 -c "import sys; (i0, t0, _), (i1, t1, _) = (map(float, m.split()) for m in sys.argv[1:3]); print(f'{$(nproc) * (t1 - t0) - (i1 - i0) / 100:.3f}')" "$1" "$2"
}
machine_steal() { python3 -c "import sys; print(f'{(float(sys.argv[2].split()[2]) - float(sys.argv[1].split()[2])) / 100:.1f}')" "$1" "$2"; }
machine_background() {
  local m0 m1
  m0=$(machine_mark)
  sleep "$1"
  m1=$(machine_mark)
  python3 -c "print(f'{$(machine_busy "$m0" "$m1") / $1:.3f}')"
}
machine_cpu() {
  python3 -c "import sys; t0, t1 = float(sys.argv[1].split()[1]), float(sys.argv[2].split()[1]); print(f'{$(machine_busy "$1" "$2") - $3 * (t1 - t0):.3f}')" "$1" "$2"
}
