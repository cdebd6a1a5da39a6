#!/usr/bin/env bash
# Runs cpbench on a simulated cluster: cpbench-sim (the SimGrid SMPI build) under smpirun on a
# platform from configs/platforms/ (docs/SIMULATION.md).
#
#   scripts/simulate.sh --platform dgx-h100 -np 256 -- run --model llama3-70b --seq 1048576 \
#       --strategies usp --mesh all --warmup 0 --iters 1 --out out/sim_256.json
#
# --platform NAME|FILE  configs/platforms/NAME.json, or a platform JSON file
# -np P                 simulated ranks (GPUs), placed by node (rank r on node r / gpus_per_node)
# --exe PATH            cpbench-sim (default: $BUILD_DIR/sim/bench/cpbench-sim, BUILD_DIR=build)
# --keep DIR            keep the generated platform.xml and hostfile in DIR
# --smpi ARG            an extra argument for smpirun (repeatable), e.g. --smpi --cfg=tracing:yes
# --ram-tmp             run smpirun in a private mount namespace with a RAM /tmp (needs root and
#                       unshare): SMPI keeps its shared-allocation file in /tmp, and on a disk-backed
#                       /tmp hundreds of ranks stall in page-cache writeback. The simulation then
#                       cannot see the real /tmp: do not write --out/--trace there.
# Everything after `--` goes to cpbench-sim; `--backend sim` and, unless given, `--peak-tflops`
# (the platform's peak for the run's dtype) and `--ranks-per-node` (the platform's GPUs per node,
# so that bytes per tier follow the platform's nodes) are added. The run's times are simulated seconds of
# the platform; the compute is not executed (only its declared cost advances the clock).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
platform="" np="" exe="" keep="" ram_tmp=0
smpi_extra=()
while (($#)); do
  case "$1" in
    --platform) platform="$2"; shift 2 ;;
    -np|--np) np="$2"; shift 2 ;;
    --exe) exe="$2"; shift 2 ;;
    --keep) keep="$2"; shift 2 ;;
    --smpi) smpi_extra+=("$2"); shift 2 ;;
    --ram-tmp) ram_tmp=1; shift ;;
    --) shift; break ;;
    -h|--help) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; exit 0 ;;
    *) echo "simulate.sh: unknown option '$1' (cpbench's own flags go after --)" >&2; exit 2 ;;
  esac
done
[[ -n "$platform" ]] || { echo "simulate.sh: --platform NAME|FILE is required" >&2; exit 2; }
[[ "$np" =~ ^[1-9][0-9]*$ ]] || { echo "simulate.sh: -np P needs a positive integer, got '${np}'" >&2; exit 2; }
(($#)) || { echo "simulate.sh: nothing to run: give cpbench's command after -- (e.g. -- run --model tiny)" >&2; exit 2; }

plat_json="$platform"
[[ -f "$plat_json" ]] || plat_json="$root/configs/platforms/$platform.json"
if [[ ! -f "$plat_json" ]]; then
  avail=$(cd "$root/configs/platforms" && ls *.json 2>/dev/null | sed 's/\.json$//' | tr '\n' ' ')
  echo "simulate.sh: no platform '$platform' (a file, or one of: $avail)" >&2
  exit 2
fi
plat_json="$(cd "$(dirname "$plat_json")" && pwd)/$(basename "$plat_json")"
exe="${exe:-$root/${BUILD_DIR:-build}/sim/bench/cpbench-sim}"
[[ -x "$exe" ]] || { echo "simulate.sh: $exe not found; build with SimGrid installed (scripts/deps.sh; CPBENCH_SIMGRID=AUTO|ON)" >&2; exit 2; }
command -v smpirun >/dev/null || { echo "simulate.sh: smpirun not found (apt-get install libsimgrid-dev)" >&2; exit 2; }

work="${keep:-$(mktemp -d -p "$([[ -w /dev/shm ]] && echo /dev/shm || echo "${TMPDIR:-/tmp}")")}"
mkdir -p "$work"
[[ -n "$keep" ]] || trap 'rm -rf "$work"' EXIT
python3 "$root/scripts/sim_platform.py" "$plat_json" "$np" "$work"

# The peak for MFU: the platform's, for the run's dtype (fp32 unless --dtype is given).
args=("$@")
dtype=fp32 have_peak=0 have_rpn=0
for ((i = 0; i < ${#args[@]}; ++i)); do
  case "${args[i]}" in
    --dtype) dtype="${args[i + 1]:-fp32}" ;;
    --dtype=*) dtype="${args[i]#--dtype=}" ;;
    --peak-tflops|--peak-tflops=*) have_peak=1 ;;
    --ranks-per-node|--ranks-per-node=*) have_rpn=1 ;;
  esac
done
extra=()
if [[ "${args[0]}" == run || "${args[0]}" == verify ]]; then
  extra+=(--backend sim)
  if ((!have_peak)); then
    peak=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["peak_tflops"].get(sys.argv[2], ""))' "$plat_json" "$dtype")
    [[ -n "$peak" ]] || { echo "simulate.sh: platform $plat_json has no peak_tflops for dtype $dtype" >&2; exit 2; }
    extra+=(--peak-tflops "$peak")
  fi
  # Nodes as the platform has them (sim_platform.py): SMPI would group ranks by simulated host.
  rpn=$(cat "$work/ranks_per_node")
  if ((!have_rpn)) && [[ -n "$rpn" ]]; then extra+=(--ranks-per-node "$rpn"); fi
fi

# SMPI's shared-allocation file and the per-rank copies of the binary go to a RAM file system:
# on a disk-backed /tmp, mapping the shared file stalls in writeback at hundreds of ranks.
# (Through TMPDIR: smpirun 3.32's -tmpdir option does not consume its argument.)
tmpdir="${CPBENCH_SIM_TMPDIR:-/dev/shm}"
[[ -d "$tmpdir" && -w "$tmpdir" ]] || tmpdir="${TMPDIR:-/tmp}"

export CPBENCH_SIM_PLATFORM="$plat_json"
# simulate-computation:no   only the backend's declared work advances the clock, not host time
# shared-malloc:local       the sim backend's shared tensors all come from one call site, so they
#                           map one file lazily (global mode maps and populates every block: at
#                           256 ranks x GiBs that alone took longer than the simulation)
# shared-malloc-blocksize   64 MiB folding blocks (global mode, for other programs): few mappings per tensor (vm.max_map_count), and
#                           a small shared file (SMPI keeps it in /tmp, where copies into it are
#                           written back to disk)
# privatization dlopen      each rank its own copy of the globals (the deferred clock of
#                           kernels/tensor.h is one per rank)
# wtime 0                   reading the clock (MPI_Wtime: every logged op reads it twice) does not
#                           advance it (SMPI's default injects 10 ns per call, each a SimGrid
#                           activity: millions of them at thousands of ranks)
# bw-factor/lat-factor 1, crosstraffic 0: the platform's link numbers are the effective rates
# coll-selector ompi        Open MPI's choice of collective algorithms, except:
# bcast binomial_tree       the ompi selector's broadcast on an SMP-aware communicator (every
#                           MPI_Comm_split builds one) runs a ring allgather among all P ranks
#                           per split: P^2 messages per communicator made at 1,024 ranks the
#                           setup cost more than the run. cpbench broadcasts only small setup
#                           values (mesh agreement), never in a timed step.
launcher=()
if ((ram_tmp)); then
  launcher=(unshare -m --propagation private sh -c 'mount -t tmpfs -o size=50% tmpfs /tmp && exec "$@"' sh)
fi
TMPDIR="$tmpdir" "${launcher[@]}" smpirun -np "$np" -platform "$work/platform.xml" -hostfile "$work/hostfile" \
  --cfg=smpi/simulate-computation:no --cfg=smpi/privatization:dlopen --cfg=smpi/wtime:0 \
  --cfg=smpi/shared-malloc:local --cfg=smpi/shared-malloc-blocksize:67108864 \
  --cfg=smpi/bw-factor:0:1 --cfg=smpi/lat-factor:0:1 --cfg=network/crosstraffic:0 \
  --cfg=smpi/coll-selector:ompi --cfg=smpi/bcast:binomial_tree \
  --log=root.thresh:warning \
  "${smpi_extra[@]}" \
  "$exe" "${args[0]}" "${extra[@]}" "${args[@]:1}"
