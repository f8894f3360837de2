#!/bin/sh
# gpu-check.sh: runs megatron-train-sim on this machine's NVIDIA GPUs and
# reports what it saw. Made by `cargo xtask gpu-check --build`, which puts
# this script next to a megatron-train-sim binary built with the `cuda`
# feature (x86-64 Linux, glibc 2.36 or newer). Needs the NVIDIA driver
# (libcuda.so.1, libnvidia-ml.so.1, nvidia-smi); no CUDA toolkit, no Rust,
# no network. See docs/gpu.md.
#
# Usage: sh gpu-check.sh [WORK_DIR]
#   WORK_DIR (default: a new directory under ${TMPDIR:-/tmp}) receives each
#   run's summary, telemetry files and log; it is kept for inspection.
#
# Two runs with --device cuda: one rank, then one rank per GPU (at most 2),
# 60 iterations each, telemetry to the file exporter. For each it prints the
# GPU identity attributes of the telemetry resource (dl.gpu.*), the peak
# device memory and the throughput of the summary, and the MFU: the peak the
# simulator chose (the row of known GPUs for the driver's GPU name, its
# precision, TFLOP/s and source, or why there is none) and the MFU of the
# last log interval. Exits 1 on the first failure, 0 when every check
# passed. Takes well under 5 minutes.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
bin="$here/megatron-train-sim"
iters=60
limit=150 # seconds per run
# Big enough for the GPU to do real work, small enough for the CPU side.
size="--hidden-size 512 --seq-length 128 --num-layers 4 --num-attention-heads 8 --micro-batch-size 4 --global-batch-size 16"

fail() {
    echo "gpu-check: FAIL: $*" >&2
    exit 1
}

# A top-level scalar of the (pretty-printed) summary JSON.
field() {
    sed -n "s/^  \"$2\": *\"\{0,1\}\([^\",]*\)\"\{0,1\},\{0,1\}\$/\1/p" "$1"
}

# A member of the summary's goodput object (indented one level deeper).
goodput_field() {
    sed -n "s/^    \"$2\": *\([^,]*\),\{0,1\}\$/\1/p" "$1"
}

# The dl.gpu.*, host.gpu.count (and rank) attributes of the resource of a
# telemetry file.
identity() {
    head -n 1 "$1" |
        grep -o '{"key":"\(dl\.\(gpu\.[a-z_]*\|rank\|local_rank\)\|host\.gpu\.count\)","value":{"[a-zA-Z]*":[^}]*}}' |
        sed 's/^{"key":"\([^"]*\)","value":{"[a-zA-Z]*":"\{0,1\}\([^"}]*\)"\{0,1\}}}$/    \1 = \2/' |
        sort -u
}

[ -x "$bin" ] || fail "$bin is missing or not executable (copy the whole gpu-check directory)"
command -v nvidia-smi >/dev/null 2>&1 || fail "nvidia-smi not found: this machine has no NVIDIA driver"
command -v timeout >/dev/null 2>&1 || fail "the 'timeout' command (coreutils) is needed"

echo "== GPUs (nvidia-smi -L)"
nvidia-smi -L || fail "nvidia-smi -L failed"
if [ -n "${CUDA_VISIBLE_DEVICES+x}" ]; then
    gpus=$(printf '%s\n' "$CUDA_VISIBLE_DEVICES" | tr ',' '\n' | grep -c . || true)
    echo "CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES: $gpus visible"
else
    gpus=$(nvidia-smi -L | grep -c '^GPU ' || true)
fi
[ "$gpus" -ge 1 ] || fail "no GPU visible"
ranks=$gpus
[ "$ranks" -le 2 ] || ranks=2

work=${1:-$(mktemp -d "${TMPDIR:-/tmp}/gpu-check.XXXXXX")}
mkdir -p "$work"
echo "== work directory: $work"
"$bin" --version || fail "the binary does not start (glibc too old? see docs/gpu.md)"

check_run() { # NAME NPROC
    name=$1
    nproc=$2
    dir="$work/$name"
    mkdir -p "$dir"
    launcher=""
    [ "$nproc" -le 1 ] || launcher="--nproc-per-node $nproc"
    echo
    echo "== $name: --device cuda ${launcher:-(one rank)}, $iters iterations"
    started=$(date +%s)
    # shellcheck disable=SC2086 # $size and $launcher are lists of flags
    if ! (cd "$dir" && MEGATRON_OTEL_EXPORTER=file MEGATRON_OTEL_FILE_DIR="$dir/telemetry" \
        MEGATRON_OTEL_RANK_STRATEGY=all_ranks \
        timeout "$limit" "$bin" --device cuda $launcher $size --train-iters "$iters" --log-interval 10 \
        --otel-enabled --summary-json "$dir/summary.json" >"$dir/log.txt" 2>&1); then
        tail -n 20 "$dir/log.txt" >&2
        fail "$name: the simulator failed (exit status above; full log: $dir/log.txt)"
    fi
    elapsed=$(($(date +%s) - started))
    summary="$dir/summary.json"
    [ -s "$summary" ] || fail "$name: no summary at $summary"
    device=$(field "$summary" device)
    case "$device" in
        cuda:[0-9]*) case "$device" in *failed*) fail "$name: device '$device': the GPU failed mid-run (log: $dir/log.txt)" ;; esac ;;
        *) fail "$name: the summary says device '$device', not a GPU" ;;
    esac
    # The summary is the last rank's: local rank N uses CUDA device N.
    [ "$device" = "cuda:$((nproc - 1))" ] || fail "$name: the last rank ran on $device, expected cuda:$((nproc - 1))"
    final=$(field "$summary" final_iteration)
    [ "$final" = "$iters" ] || fail "$name: final iteration $final, expected $iters"
    peak=$(field "$summary" peak_memory_bytes)
    case "$peak" in '' | null) fail "$name: no peak device memory in the summary" ;; esac
    echo "  device (last rank)      : $device"
    echo "  wall time               : ${elapsed} s"
    echo "  mean step time (ms)     : $(field "$summary" mean_step_time_ms)"
    echo "  tokens/s                : $(field "$summary" tokens_per_sec)"
    echo "  TFLOP/s per rank        : $(field "$summary" throughput_tflops_per_rank)"
    echo "  peak device memory      : $peak bytes ($((peak / 1048576)) MiB, last rank's allocations)"
    # The startup line of the last rank: "MFU peak: <TFLOP/s>, the <precision>
    # figure of the row "<row>" of the known GPUs for GPU "<name>" (source:
    # ...)", or "MFU: none: <why>".
    peak_line=$(sed -n 's/^megatron-train-sim: \(MFU peak: .*\|MFU: none: .*\)$/\1/p' "$dir/log.txt" | head -n 1)
    [ -n "$peak_line" ] || fail "$name: the simulator did not say which MFU peak it uses (log: $dir/log.txt)"
    mfu=$(goodput_field "$summary" mfu)
    case "$peak_line" in
        "MFU peak:"*)
            echo "  MFU peak                : ${peak_line#MFU peak: }"
            case "$mfu" in '' | null) fail "$name: the simulator uses a peak but the summary has no MFU" ;; esac
            echo "  MFU (last log interval) : $mfu ($(awk -v m="$mfu" 'BEGIN { printf "%.4f%%", m * 100 }'))"
            ;;
        *)
            echo "  MFU peak                : ${peak_line#MFU: }"
            echo "  MFU (last log interval) : ${mfu:-null} (no peak)"
            ;;
    esac
    losses=$(sed -n '/^  "losses"/,/^  ]/p' "$summary" | sed -n 's/.*"loss": *\([^,]*\),*$/\1/p')
    first_loss=$(printf '%s\n' "$losses" | head -n 1)
    last_loss=$(printf '%s\n' "$losses" | tail -n 1)
    echo "  loss (first/last log)   : $first_loss -> $last_loss"
    found=0
    uuids=""
    for traces in "$dir"/telemetry/traces-rank*.jsonl; do
        [ -s "$traces" ] || continue
        echo "  resource of $(basename "$traces"):"
        attributes=$(identity "$traces")
        printf '%s\n' "$attributes"
        uuid=$(printf '%s\n' "$attributes" | sed -n 's/^ *dl\.gpu\.uuid = //p')
        [ -n "$uuid" ] || fail "$name: $(basename "$traces") has no dl.gpu.uuid in its resource"
        count=$(printf '%s\n' "$attributes" | sed -n 's/^ *host\.gpu\.count = //p')
        [ "$count" = "$gpus" ] || fail "$name: $(basename "$traces") has host.gpu.count '$count', expected $gpus"
        case " $uuids " in *" $uuid "*) fail "$name: two ranks report the same GPU $uuid (one GPU per local rank expected)" ;; esac
        uuids="$uuids $uuid"
        found=$((found + 1))
    done
    [ "$found" -eq "$nproc" ] || fail "$name: $found rank(s) exported telemetry, expected $nproc"
}

check_run one-rank 1
if [ "$ranks" -ge 2 ]; then
    check_run "$ranks-ranks" "$ranks"
else
    echo
    echo "== one GPU visible: the multi-rank run is skipped"
fi
echo
echo "gpu-check: PASS (files kept in $work)"
