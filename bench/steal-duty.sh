#!/usr/bin/env bash
# Does a CPU pattern alone draw the hypervisor's steal? (docs/bench/xfer.md, "Hypervisor
# steal".) Compiles a small C program that spins ON us and sleeps OFF us on
# one pinned CPU for SECONDS, and runs each pattern on CPU 1 and then on both CPUs at once, ROUNDS times;
# each run prints its CPU seconds and the steal of its CPU (/proc/stat) over the run. Needs cc.
#
#   bench/steal-duty.sh [SECONDS] [ROUNDS]
set -euo pipefail
. "$(dirname "$(realpath "$0")")/lib.sh"
SECS=${1:-8}
ROUNDS=${2:-3}
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
cat >"$D/duty.c" <<'C'
#define _GNU_SOURCE
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/resource.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
static long long steal_of(int cpu) {
  FILE *f = fopen("/proc/stat", "r"); char l[512], name[16]; long long v[8] = {0};
  snprintf(name, sizeof name, "cpu%d ", cpu);
  while (fgets(l, sizeof l, f))
    if (!strncmp(l, name, strlen(name)))
      sscanf(l + strlen(name), "%lld %lld %lld %lld %lld %lld %lld %lld", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7]);
  fclose(f); return v[7];
}
int main(int c, char **v) {
  long on = atol(v[1]), off = atol(v[2]); double secs = atof(v[3]); int cpu = atoi(v[4]);
  cpu_set_t s; CPU_ZERO(&s); CPU_SET(cpu, &s); sched_setaffinity(0, sizeof s, &s);
  long long s0 = steal_of(cpu); double t0 = now();
  while (now() - t0 < secs) {
    double a = now(); while ((now() - a) * 1e6 < on) {}
    if (off > 0) { struct timespec ts = {off / 1000000, (off % 1000000) * 1000}; clock_nanosleep(CLOCK_MONOTONIC, 0, &ts, NULL); }
  }
  long long s1 = steal_of(cpu); struct rusage ru; getrusage(RUSAGE_SELF, &ru);
  double cpus = ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 + ru.ru_stime.tv_sec + ru.ru_stime.tv_usec * 1e-6;
  printf("cpu %d, on %ld us off %ld us: %.2f CPU s, steal %.2f s\n", cpu, on, off, cpus, (s1 - s0) / 100.0);
  return 0;
}
C
cc -O2 -o "$D/duty" "$D/duty.c"
echo "# steal by CPU pattern, $(machine_line), ${SECS} s per run (steal in ticks of 10 ms)"
for _ in $(seq "$ROUNDS"); do
  for p in "1000000 0" "50000 50000" "500 500" "250 250" "100 100" "2000 500"; do
    "$D/duty" $p "$SECS" 1
    "$D/duty" $p "$SECS" 0 & "$D/duty" $p "$SECS" 1; wait
  done
done
