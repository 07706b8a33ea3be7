#!/usr/bin/env bash
# Copy exactly the files git tracks (working-tree contents) into .cluster/src/, the
# folder cluster.yaml and cluster.local.yaml mount as ~/qkgeom. Untracked files
# (a local .env, data/, runs/, .venv) never reach the cluster. Run before `ray up`.
set -euo pipefail
repo="$(git -C "$(dirname "${BASH_SOURCE[0]}")" rev-parse --show-toplevel)"
out="$repo/.cluster/src"
rm -rf "$out"
mkdir -p "$out"
cd "$repo"
# --ignore-failed-read: a tracked file deleted in the working tree is simply not sent
git ls-files -z --cached | tar --null --ignore-failed-read -T - -cf - 2>/dev/null | tar -xf - -C "$out"
echo "cluster/stage.sh: $(find "$out" -type f | wc -l) git-tracked files in $out ($(git rev-parse --short HEAD)$(git diff --quiet HEAD || echo ', with uncommitted changes'))"
