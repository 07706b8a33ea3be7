#!/usr/bin/env bash
# One implementation of a qkgeom Ray node, called by cluster.yaml (AWS),
# cluster.local.yaml (SSH machines) and slurm/qkgeom.sbatch:
#
#   cluster/ray_node.sh setup               venv with the locked versions (requirements.lock),
#                                           ~/.bashrc activates it and exports RAY_AUTH_MODE=token
#   cluster/ray_node.sh head  [ray start …] token (generated once, mode 600), then
#                                           RAY_AUTH_MODE=token ray start --head --dashboard-host=127.0.0.1 …
#   cluster/ray_node.sh worker ADDR [ray start …]   needs the head's token already on this node, then
#                                           RAY_AUTH_MODE=token ray start --address=ADDR …
#   cluster/ray_node.sh mps-start | mps-stop  the CUDA MPS control daemon of this node (head and
#                                           worker run mps-start before `ray start`)
#
# CUDA MPS: Ray's fractional GPUs are bookkeeping only; without MPS the processes of several
# trials on one GPU time-slice it, with MPS their kernels overlap (several packs share one GPU).
# On a node with an NVIDIA GPU, head and worker start `nvidia-cuda-mps-control -d` when it is
# installed (and keep one already running); otherwise, or with QKGEOM_MPS=0, they print one line
# saying why not. The pipe and log folders are CUDA_MPS_PIPE_DIRECTORY / CUDA_MPS_LOG_DIRECTORY
# (default /tmp/nvidia-mps-$USER and /tmp/nvidia-mps-log-$USER), exported to `ray start`, so
# every trial process finds the daemon.
#
# Ray 2.60's `ray start --head` turns token authentication on only when a token
# already exists (ray/scripts/scripts.py: maybe_enable_token_auth_if_token_available)
# and `ray up` creates none: without the first step the cluster accepts any client.
# The token lives where Ray looks for it: $RAY_AUTH_TOKEN_PATH if set, else ~/.ray/auth_token.
# The autoscaler copies ~/.ray/auth_token from the head to every worker (cluster_synced_files);
# on SLURM the home directory (or $RAY_AUTH_TOKEN_PATH) is shared.
#
# Environment: QKGEOM_SRC (project checkout, default: this script's repository),
# QKGEOM_VENV (default ~/qkgeom-venv), QKGEOM_PYTHON (interpreter for a new venv, default python3). QKGEOM_VENV_PREBUILT=DIR links an existing venv
# instead of installing (the end-to-end test uses it); its versions are still checked.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
src="${QKGEOM_SRC:-$(dirname "$here")}"
venv="${QKGEOM_VENV:-$HOME/qkgeom-venv}"
token_path="${RAY_AUTH_TOKEN_PATH:-$HOME/.ray/auth_token}"
lock="$src/requirements.lock"  # the one lock of tested versions (make demo, make test, CI, every node)

die() { echo "ray_node.sh: $*" >&2; exit 1; }

export CUDA_MPS_PIPE_DIRECTORY="${CUDA_MPS_PIPE_DIRECTORY:-/tmp/nvidia-mps-${USER:-$(id -un)}}"
export CUDA_MPS_LOG_DIRECTORY="${CUDA_MPS_LOG_DIRECTORY:-/tmp/nvidia-mps-log-${USER:-$(id -un)}}"

has_gpu() { command -v nvidia-smi > /dev/null 2>&1 && nvidia-smi -L 2> /dev/null | grep -q '^GPU'; }
mps_running() { echo get_server_list | nvidia-cuda-mps-control > /dev/null 2>&1; }

start_mps() {  # one line, whatever happens; never fails the node
    if [[ "${QKGEOM_MPS:-1}" == 0 ]]; then
        echo "ray_node.sh: CUDA MPS not started (QKGEOM_MPS=0): trials sharing a GPU time-slice it"
    elif ! has_gpu; then
        echo "ray_node.sh: no NVIDIA GPU on this node: CUDA MPS not started"
    elif ! command -v nvidia-cuda-mps-control > /dev/null 2>&1; then
        echo "ray_node.sh: CUDA MPS not available (no nvidia-cuda-mps-control): trials sharing a GPU time-slice it"
    elif mps_running; then
        echo "ray_node.sh: CUDA MPS already running (pipe $CUDA_MPS_PIPE_DIRECTORY)"
    else
        mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
        if nvidia-cuda-mps-control -d; then
            echo "ray_node.sh: CUDA MPS started (pipe $CUDA_MPS_PIPE_DIRECTORY): trials sharing a GPU overlap"
        else
            echo "ray_node.sh: CUDA MPS failed to start (see $CUDA_MPS_LOG_DIRECTORY): trials sharing a GPU time-slice it"
        fi
    fi
}

stop_mps() {  # after Ray has stopped: `quit` waits for the daemon's clients to exit
    if command -v nvidia-cuda-mps-control > /dev/null 2>&1 && mps_running; then
        echo quit | nvidia-cuda-mps-control && echo "ray_node.sh: CUDA MPS stopped"
    fi
    return 0
}

check_pins() {  # every pinned package installed at its pinned version
    "$venv/bin/python" - "$lock" <<'EOF'
import sys
from importlib.metadata import version, PackageNotFoundError
bad = []
for line in open(sys.argv[1]):
    line = line.split("#")[0].strip()
    if not line or "==" not in line:
        continue
    name, want = line.split("==")
    name = name.split("[")[0]
    try:
        have = version(name)
    except PackageNotFoundError:
        continue  # optional extra not installed here (checked by pip when it is)
    if have.split("+")[0] != want:
        bad.append(f"{name} {have} (pinned {want})")
if bad:
    sys.exit("ray_node.sh: versions differ from requirements.lock: " + ", ".join(bad))
EOF
}

setup() {
    if [[ -n "${QKGEOM_VENV_PREBUILT:-}" ]]; then
        [[ -x "$QKGEOM_VENV_PREBUILT/bin/python" ]] || die "no venv at $QKGEOM_VENV_PREBUILT"
        ln -sfn "$QKGEOM_VENV_PREBUILT" "$venv"
    else
        local py="${QKGEOM_PYTHON:-python3}"
        "$py" -c 'import sys; sys.exit(sys.version_info < (3, 11))' ||
            die "$py is not Python >= 3.11: set QKGEOM_PYTHON (e.g. in setup_commands) to one that is"
        if [[ ! -x "$venv/bin/python" ]]; then  # images without python3-venv: virtualenv instead
            "$py" -m venv "$venv" 2>/dev/null || { rm -rf "$venv"; "$py" -m pip install --quiet --user virtualenv &&
                "$py" -m virtualenv --quiet "$venv"; } || die "cannot create a venv with $py"
        fi
        "$venv/bin/pip" install --quiet --upgrade pip
        # torch first, on its own (the CUDA wheel from PyPI on Linux), then the project
        "$venv/bin/pip" install --quiet -c "$lock" torch
        "$venv/bin/pip" install --quiet -c "$lock" -e "$src[hf,tb]"
    fi
    check_pins
    local rc="$HOME/.bashrc"
    touch "$rc"
    # Ray's launcher runs every command through an interactive login bash, which reads ~/.bashrc
    grep -qxF "export RAY_AUTH_MODE=token" "$rc" ||
        printf '%s\n' "# qkgeom (cluster/ray_node.sh)" "source $venv/bin/activate" "export RAY_AUTH_MODE=token" >> "$rc"
    echo "ray_node.sh: $venv ready ($("$venv/bin/python" -c 'import ray, torch; print("ray", ray.__version__, "torch", torch.__version__)'))"
}

ray_bin() {
    if [[ -x "$venv/bin/ray" ]]; then echo "$venv/bin/ray"; else command -v ray || die "no ray on PATH and none in $venv"; fi
}

start_head() {
    local ray; ray="$(ray_bin)"
    umask 077
    # Creates the token if there is none; an existing token is kept, so workers stay valid.
    if [[ ! -s "$token_path" ]]; then
        local tmp; tmp="$(mktemp -d)"
        # `get-auth-token --generate` writes ~/.ray/auth_token: generate under a scratch HOME, then move
        env -u RAY_AUTH_TOKEN_PATH HOME="$tmp" "$ray" get-auth-token --generate > /dev/null
        mkdir -p "$(dirname "$token_path")"
        mv "$tmp/.ray/auth_token" "$token_path"
        rm -rf "$tmp"
    fi
    chmod 600 "$token_path"
    start_mps
    RAY_AUTH_MODE=token exec "$ray" start --head --dashboard-host=127.0.0.1 "$@"
}

start_worker() {
    [[ $# -ge 1 ]] || die "usage: ray_node.sh worker HEAD_IP:PORT [ray start args]"
    local ray address="$1"; shift
    ray="$(ray_bin)"
    [[ -s "$token_path" ]] || die "no Ray auth token at $token_path: copy the head's ~/.ray/auth_token here"
    chmod 600 "$token_path"
    start_mps
    RAY_AUTH_MODE=token exec "$ray" start --address="$address" "$@"
}

cmd="${1:-}"; shift || true
case "$cmd" in
    setup) setup "$@" ;;
    head) start_head "$@" ;;
    worker) start_worker "$@" ;;
    mps-start) start_mps ;;
    mps-stop) stop_mps ;;
    *) die "usage: ray_node.sh {setup|head|worker HEAD_IP:PORT|mps-start|mps-stop} [ray start args]" ;;
esac
