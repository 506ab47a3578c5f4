#!/usr/bin/env bash
# Runs every fuzz target (formats parsers, net protocol decoders) for a while each (default 20 s), seeding each corpus from
# seeds/<target>/. Needs a nightly toolchain and cargo-fuzz (`cargo install cargo-fuzz`).
# Usage: fuzz/run.sh [seconds per target] [target ...]
set -euo pipefail
cd "$(dirname "$0")"
seconds="${1:-20}"
shift || true
if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
    echo "cargo-fuzz is missing: cargo install cargo-fuzz (and rustup toolchain install nightly)" >&2
    exit 2
fi
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    mapfile -t targets < <(cargo +nightly fuzz list)
fi
# One build for all targets (sanitizer-instrumented, release with debug assertions).
cargo +nightly fuzz build
failed=()
for target in "${targets[@]}"; do
    mkdir -p "corpus/$target"
    if [ -d "seeds/$target" ]; then
        cp -n "seeds/$target"/* "corpus/$target/" 2>/dev/null || true
    fi
    echo "== $target: ${seconds}s"
    if cargo +nightly fuzz run "$target" "corpus/$target" -- \
        -max_total_time="$seconds" -rss_limit_mb=2048 -print_final_stats=1 2>"artifacts-$target.log"; then
        grep -E '^(stat::number_of_executed_units|stat::new_units_added|Done)' "artifacts-$target.log" || true
        rm -f "artifacts-$target.log"
    else
        echo "!! $target found a failure; see fuzz/artifacts-$target.log and fuzz/artifacts/$target/" >&2
        failed+=("$target")
    fi
done
if [ ${#failed[@]} -ne 0 ]; then
    echo "failing targets: ${failed[*]}" >&2
    exit 1
fi
echo "all ${#targets[@]} targets ran ${seconds}s without failure"
