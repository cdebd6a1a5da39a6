#!/usr/bin/env bash
# Installs what cpbench needs from Debian's packages and PyPI. Idempotent: does nothing when
# everything is already present. Needs root (or sudo) only when something is missing.
set -euo pipefail

debs=(
  build-essential cmake pkg-config
  openmpi-bin libopenmpi-dev            # MPI runtime and headers
  nlohmann-json3-dev                    # JSON reports, configs
  libcli11-dev                          # command line
  catch2                                # unit tests (Catch2 v3)
  libbenchmark-dev                      # micro-benchmarks
  libopenblas-dev                       # CPU GEMMs
  libsimgrid-dev                        # SimGrid SMPI: smpicxx/smpirun for cpbench-sim (simulated clusters)
  python3 python3-numpy python3-matplotlib python3-jsonschema  # dump checks, plots, schema validation
)

missing=()
for p in "${debs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if ((${#missing[@]})); then
  echo "deps.sh: installing ${missing[*]}"
  SUDO=""
  if [[ $(id -u) -ne 0 ]]; then SUDO=sudo; fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# The scripts run with the system python3 (Debian's numpy, matplotlib, jsonschema). If the python3
# on PATH is another interpreter (pyenv), make sure it has the modules too.
if ! python3 -c "import numpy, matplotlib, jsonschema" 2>/dev/null; then
  echo "deps.sh: installing numpy matplotlib jsonschema for $(command -v python3) from PyPI"
  python3 -m pip install -q numpy matplotlib jsonschema
fi
echo "deps.sh: all dependencies present"
