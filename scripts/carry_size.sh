#!/usr/bin/env bash
# carry_size.sh: what a `device` run sends, against its 64 MiB limit: the working tree that travels
# (tracked files plus untracked files git does not ignore) and each carried (ignored) path.
#
#   scripts/carry_size.sh [--limit-mib 64] [PATH...]     (default PATH: third_party_debs)
#
# Exit status: 0 within the limit, 1 over it, 2 bad arguments or a carried path that is missing.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
LIMIT_MIB=64
paths=()
while (($#)); do
  case $1 in
    --limit-mib) LIMIT_MIB=$2; shift 2 ;;
    -h|--help) sed -n '2,7p' "$0"; exit 0 ;;
    *) paths+=("$1"); shift ;;
  esac
done
((${#paths[@]})) || paths=(third_party_debs)
cd "$ROOT" || exit 2
tree=$(git ls-files -z -co --exclude-standard | xargs -0 -r stat -c %s -- 2>/dev/null | awk '{s += $1} END {print s + 0}')
total=$tree
printf '%-28s %10.2f MiB\n' "working tree" "$(echo "$tree" | awk '{print $1 / 1048576}')"
missing=0
for p in "${paths[@]}"; do
  if [[ ! -e $p ]]; then echo "carry_size: $p does not exist (fetch it first)" >&2; missing=1; continue; fi
  s=$(du -sb -- "$p" | awk '{print $1}')
  total=$((total + s))
  printf '%-28s %10.2f MiB\n' "$p" "$(echo "$s" | awk '{print $1 / 1048576}')"
done
limit=$((LIMIT_MIB * 1048576))
printf '%-28s %10.2f MiB of %d MiB\n' total "$(echo "$total" | awk '{print $1 / 1048576}')" "$LIMIT_MIB"
((missing)) && exit 2
((total <= limit)) || { echo "carry_size: over the limit by $(( (total - limit) / 1048576 + 1 )) MiB" >&2; exit 1; }
exit 0
