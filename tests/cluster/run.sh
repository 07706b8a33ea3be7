#!/usr/bin/env bash
# `make cluster-test`: cluster.local.yaml and slurm/qkgeom.sbatch end to end on this machine.
#
# Needs a Debian machine where it may install packages (root, apt-get): it installs
# openssh-server, slurmctld, slurmd, slurm-client, munge, rsync and netcat-openbsd, then starts,
# each with its own files under one temporary directory:
#   sshd on 127.0.0.1 (key auth, one throw-away user that the launcher logs in as),
#   munged, slurmctld and slurmd (a one-node SLURM, Slurm 22.05 config).
# Then (a) `ray up` a copy of cluster.local.yaml aimed at 127.0.0.1, a smoke sweep through
# `ray exec`, a client without the token refused, `ray down`; (b) the smoke sweep through
# `sbatch slurm/qkgeom.sbatch`, its store read back, a failing job seen as FAILED; (c) every
# process it started stopped by process id at the end, pass or fail. Prints each part's time.
set -uo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$repo"
PKGS=(openssh-server slurmctld slurmd slurm-client munge rsync netcat-openbsd)
CI_USER=qkgeomci
say() { printf '\n== cluster-test: %s\n' "$*"; }
die() { printf '\n== cluster-test: FAILED: %s\n' "$*" >&2; exit 1; }

if [[ ! -r /etc/debian_version ]] || ! command -v apt-get >/dev/null || [[ "$(id -u)" != 0 ]]; then
    echo "cluster-test: needs a Debian machine and root: it installs ${PKGS[*]} with apt-get," >&2
    echo "cluster-test: adds a user '$CI_USER' and starts sshd (127.0.0.1), munged, slurmctld, slurmd. Stopping." >&2
    exit 2
fi
echo "cluster-test: this installs ${PKGS[*]} (apt-get) if missing, adds a throw-away user '$CI_USER',"
echo "cluster-test: and starts sshd on 127.0.0.1, munged, slurmctld and slurmd with their own files; all stopped at the end."

T0=$SECONDS; declare -a TIMES=()
lap() { TIMES+=("$(printf '%-44s %4d s' "$1" $((SECONDS - LAP)))"); LAP=$SECONDS; }
LAP=$SECONDS

# ---------------------------------------------------------------- install
missing=()
for p in "${PKGS[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if ((${#missing[@]})); then
    say "apt-get install ${missing[*]}"
    apt-get update -qq || die "apt-get update"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null \
        || die "apt-get install ${missing[*]}"
fi
lap "install packages (${#missing[@]} missing)"
make -s venv || die "make venv"
VENV="$repo/.venv"; PY="$VENV/bin/python"; RAY="$VENV/bin/ray"
lap "make venv"

# ---------------------------------------------------------------- scratch + cleanup
T="$(mktemp -d /tmp/qkct.XXXX)"   # short: Ray's socket paths must stay < 108 characters
chmod 755 "$T"
touch "$T/started"
declare -a PIDS=()     # daemons we started, stopped in reverse order
RAY_UP=0; JOBS=(); CREATED_USER=0
free_port() { "$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    LAP=$SECONDS
    say "cleanup"
    if ((RAY_UP)); then
        timeout 120 "$RAY" down -y "$T/cluster.test.yaml" >"$T/ray-down-cleanup.log" 2>&1 || true
    fi
    for j in "${JOBS[@]}"; do SLURM_CONF="$T/slurm/slurm.conf" scancel "$j" 2>/dev/null || true; done
    local i p
    for ((i = ${#PIDS[@]} - 1; i >= 0; i--)); do
        p="${PIDS[i]}"; kill -TERM "$p" 2>/dev/null && echo "stopped pid $p ($(cat "$T/pid-$p.name" 2>/dev/null))"
    done
    sleep 2
    for p in "${PIDS[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
    # processes of the throw-away user (Ray of `ray up`, ssh sessions), by pid
    if id "$CI_USER" >/dev/null 2>&1; then
        for p in $(pgrep -u "$CI_USER"); do kill -KILL "$p" 2>/dev/null && echo "killed leftover pid $p of $CI_USER"; done
    fi
    # anything else still running from our scratch dir (slurm job steps, ssh masters of ray up), by pid
    for p in $(pgrep -f "$T"); do
        [[ "$p" == "$$" ]] && continue
        kill -KILL "$p" 2>/dev/null && echo "killed leftover pid $p: $(tr '\0' ' ' </proc/$p/cmdline 2>/dev/null | cut -c1-100)"
    done
    sleep 1
    if ((CREATED_USER)); then userdel "$CI_USER" 2>/dev/null || true; fi
    # what the launcher (root) left in /tmp for our cluster: config cache, SSH control sockets, state
    rm -f "/tmp/cluster-$CLUSTER_NAME.state" "/tmp/cluster-$CLUSTER_NAME.lock"
    grep -l -s "$CLUSTER_NAME" /tmp/ray-config-* | xargs -r rm -f
    find /tmp -maxdepth 2 -path '/tmp/ray_ssh_*/*' -type d -newer "$T/started" -exec rm -rf {} + 2>/dev/null
    find /tmp -maxdepth 1 -name 'ray_ssh_*' -type d -empty -delete 2>/dev/null
    [[ -n "${KEEP_SCRATCH:-}" ]] || rm -rf "$T"
    lap "cleanup"
    echo
    echo "== cluster-test: times"
    printf '   %s\n' "${TIMES[@]}"
    printf '   %-44s %4d s\n' "total" $((SECONDS - T0))
    if ((rc == 0)); then echo "== cluster-test: PASSED"; else echo "== cluster-test: FAILED (exit $rc; logs were in $T)"; fi
    exit "$rc"
}
CLUSTER_NAME="qkgeom-ct-$$"
trap cleanup EXIT
trap 'exit 130' INT TERM

start() {  # name, log, command...: run in the background, remember the pid
    local name="$1" log="$2"; shift 2
    "$@" >"$log" 2>&1 &
    PIDS+=($!); echo "$name" >"$T/pid-$!.name"
    echo "started $name (pid $!)"
}

wait_for() {  # seconds, description, command...
    local n="$1" what="$2"; shift 2
    for ((i = 0; i < n; i++)); do "$@" >/dev/null 2>&1 && return 0; sleep 1; done
    die "$what not ready after $n s"
}

# ---------------------------------------------------------------- sshd + user
say "sshd on 127.0.0.1"
mkdir -p "$T/ssh" "$T/home" /run/sshd
if ! id "$CI_USER" >/dev/null 2>&1; then
    useradd --no-create-home --home-dir "$T/home" --shell /bin/bash "$CI_USER" || die "useradd"
    CREATED_USER=1
else
    usermod --home "$T/home" "$CI_USER" || die "usermod"
    CREATED_USER=1
fi
usermod -p '*' "$CI_USER"   # no password, not locked (sshd refuses locked accounts)
mkdir -p "$T/r"; touch "$T/home/.bashrc"
chown -R "$CI_USER:" "$T/home" "$T/r"
ssh-keygen -q -t ed25519 -N '' -f "$T/ssh/host_key"
ssh-keygen -q -t ed25519 -N '' -f "$T/ssh/id"
cp "$T/ssh/id.pub" "$T/ssh/authorized_keys"; chmod 644 "$T/ssh/authorized_keys"
SSH_PORT="$(free_port)"
cat >"$T/ssh/sshd_config" <<EOF
Port $SSH_PORT
ListenAddress 127.0.0.1
HostKey $T/ssh/host_key
PidFile $T/ssh/sshd.pid
AuthorizedKeysFile $T/ssh/authorized_keys
StrictModes no
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
PermitRootLogin no
AllowUsers $CI_USER
Subsystem sftp internal-sftp
EOF
start sshd "$T/ssh/sshd.log" /usr/sbin/sshd -D -e -f "$T/ssh/sshd_config"
SSH=(ssh -q -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o BatchMode=yes -i "$T/ssh/id" -p "$SSH_PORT")
wait_for 20 "sshd" "${SSH[@]}" "$CI_USER@127.0.0.1" true
lap "sshd + user"

# ---------------------------------------------------------------- munge + slurm
say "munged, slurmctld, slurmd"
mkdir -p "$T/munge" "$T/slurm/state" "$T/slurm/spool" "$T/slurm-home"
chmod 700 "$T/munge"
dd if=/dev/urandom of="$T/munge/munge.key" bs=1024 count=1 status=none; chmod 400 "$T/munge/munge.key"
start munged "$T/munge/munged.out" munged -F --force --key-file="$T/munge/munge.key" \
    --socket="$T/munge/munge.sock" --pid-file="$T/munge/munged.pid" --log-file="$T/munge/munged.log" \
    --seed-file="$T/munge/munged.seed"
wait_for 20 "munged" test -S "$T/munge/munge.sock"
HOST="$(hostname -s)"
NODE_LINE="$(slurmd -C | head -1)"   # NodeName=<host> CPUs=… RealMemory=…
export SLURM_CONF="$T/slurm/slurm.conf"
cat >"$SLURM_CONF" <<EOF
ClusterName=qkct
SlurmctldHost=$HOST
SlurmctldPort=$(free_port)
SlurmdPort=$(free_port)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CryptoType=crypto/munge
AuthInfo=socket=$T/munge/munge.sock
StateSaveLocation=$T/slurm/state
SlurmdSpoolDir=$T/slurm/spool
SlurmctldPidFile=$T/slurm/slurmctld.pid
SlurmdPidFile=$T/slurm/slurmd.pid
SlurmctldLogFile=$T/slurm/slurmctld.log
SlurmdLogFile=$T/slurm/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SwitchType=switch/none
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=$T/slurm/jobcomp.log
MinJobAge=3600
ReturnToService=2
SlurmdTimeout=60
$NODE_LINE State=UNKNOWN
PartitionName=debug Nodes=$HOST Default=YES MaxTime=INFINITE State=UP
EOF
start slurmctld "$T/slurm/slurmctld.out" slurmctld -D -i -f "$SLURM_CONF"
start slurmd "$T/slurm/slurmd.out" slurmd -D -f "$SLURM_CONF"
node_idle() { sinfo -h -N -o '%T' | grep -qx idle; }
wait_for 90 "SLURM node (sinfo idle)" node_idle
sinfo
lap "munged + slurmctld + slurmd up"

# ---------------------------------------------------------------- (a) ray up over SSH
say "(a) ray up a copy of cluster.local.yaml aimed at 127.0.0.1"
bash cluster/stage.sh || die "cluster/stage.sh"
# The throw-away user needs a Python it may run: the project venv's interpreter may live where it
# cannot reach (pyenv under /root, mode 700). Then it gets a venv of the system's python3 (same
# minor version) that reads the project venv's packages; ray_node.sh checks the pinned versions.
CI_VENV="$VENV"
if ! runuser -u "$CI_USER" -- "$PY" -c 'import ray' >/dev/null 2>&1; then
    CI_VENV="$T/ci-venv"
    want="$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
    [[ "$(/usr/bin/python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)" == "$want" ]] \
        || die "user $CI_USER cannot run $PY and /usr/bin/python3 is not Python $want"
    /usr/bin/python3 -m venv --without-pip "$CI_VENV" || die "venv for $CI_USER"
    site_dir="$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
    echo "import site; site.addsitedir('$site_dir')" >"$CI_VENV/lib/python$want/site-packages/qkgeom-project-venv.pth"
    printf '#!%s\nimport sys\nfrom ray.scripts.scripts import main\nsys.exit(main())\n' "$CI_VENV/bin/python" >"$CI_VENV/bin/ray"
    chmod -R a+rX "$CI_VENV"; chmod a+x "$CI_VENV/bin/ray"
    runuser -u "$CI_USER" -- "$CI_VENV/bin/python" -c 'import ray, torch, sweep' || die "venv for $CI_USER"
    echo "   $CI_USER runs $CI_VENV (/usr/bin/python3 + the packages of $VENV)"
fi
P_GCS="$(free_port)"
"$PY" - "$T" "$CI_USER" "$SSH_PORT" "$CLUSTER_NAME" "$CI_VENV" "$P_GCS" $(for _ in 1 2 3 4 5 6 7; do free_port; done) <<'EOF' || die "writing the test cluster file"
import re, sys, yaml
t, user, ssh_port, name, venv, gcs, *p = sys.argv[1:]
c = yaml.safe_load(open("cluster.local.yaml"))
c["cluster_name"] = name
c["provider"].update(head_ip="127.0.0.1", worker_ips=[])
c["auth"] = {"ssh_user": user, "ssh_private_key": f"{t}/ssh/id",
             "ssh_proxy_command": f"nc 127.0.0.1 {ssh_port}"}   # Ray's launcher has no ssh port option
# The throw-away user's Ray lives under the scratch dir (RAY_TMPDIR) and the prebuilt venv is linked
# instead of installed (ray_node.sh still checks the pinned versions).
c["setup_commands"] = [f"grep -q RAY_TMPDIR ~/.bashrc || echo 'export RAY_TMPDIR={t}/r' >> ~/.bashrc",
                       ] + [
    cmd.replace("bash ~/qkgeom/cluster/ray_node.sh setup",
                f"QKGEOM_VENV_PREBUILT={venv} bash ~/qkgeom/cluster/ray_node.sh setup")
    for cmd in c["setup_commands"]]
ports = (f" --dashboard-port={p[0]} --dashboard-agent-listen-port={p[1]} --dashboard-agent-grpc-port={p[2]}"
         f" --metrics-export-port={p[3]} --runtime-env-agent-port={p[4]} --disable-usage-stats")
head = []
for cmd in c["head_start_ray_commands"]:
    cmd = cmd.replace("--port=6379", f"--port={gcs}")
    cmd = re.sub(r"--object-manager-port=\d+", f"--object-manager-port={p[5]}", cmd)
    cmd = re.sub(r"--node-manager-port=\d+", f"--node-manager-port={p[6]}", cmd)
    if "ray_node.sh head" in cmd:
        cmd += ports + " --num-cpus=2"
    head.append(cmd)
c["head_start_ray_commands"] = head
yaml.safe_dump(c, open(f"{t}/cluster.test.yaml", "w"), sort_keys=False)
EOF
RAY_UP=1
timeout 300 "$RAY" up -y --no-config-cache "$T/cluster.test.yaml" >"$T/ray-up.log" 2>&1 \
    || { tail -40 "$T/ray-up.log"; die "ray up"; }
grep -E "Ray runtime started|ray_node.sh: .* ready|versions differ" "$T/ray-up.log" | sed 's/^/   /'
lap "(a) ray up (stage, rsync, setup, head start)"

rexec() { timeout 300 "$RAY" exec "$T/cluster.test.yaml" "$1"; }
rexec 'cd ~/qkgeom && python -m sweep.baseline --preset smoke --address auto --store ~/store --storage ~/ray-results' \
    >"$T/ray-exec.log" 2>&1 || { tail -40 "$T/ray-exec.log"; die "smoke sweep through ray exec"; }
tail -5 "$T/ray-exec.log" | sed 's/^/   /'
lap "(a) ray exec: smoke sweep"
rexec 'cd ~/qkgeom && python -m sweep.store validate --store ~/store' >"$T/ray-validate.log" 2>&1 \
    || { cat "$T/ray-validate.log"; die "store of the ray up sweep"; }
tail -3 "$T/ray-validate.log" | sed 's/^/   /'
rexec 'test "$RAY_AUTH_MODE" = token && test "$(stat -c %a ~/.ray/auth_token)" = 600' >/dev/null 2>&1 \
    || die "RAY_AUTH_MODE=token / private token on the head"

# a client without the token (root, empty HOME, RAY_AUTH_MODE unset): refused by GCS
mkdir -p "$T/notoken"
env -u RAY_AUTH_MODE -u RAY_AUTH_TOKEN -u RAY_AUTH_TOKEN_PATH -u RAY_ADDRESS HOME="$T/notoken" \
    "$PY" -c "import ray; ray.init(address='127.0.0.1:$P_GCS'); print('CONNECTED')" >"$T/notoken.log" 2>&1 &
client=$!
# ray.init retries ~20 s before it gives up; the first refusal by GCS is the evidence
for _ in $(seq 60); do
    grep -qE "InvalidAuthToken|AuthenticationError|CONNECTED" "$T/notoken.log" || ! kill -0 $client 2>/dev/null && break
    sleep 0.5
done
kill -KILL $client 2>/dev/null; wait $client 2>/dev/null
grep -m1 -E "InvalidAuthToken|AuthenticationError" "$T/notoken.log" | sed 's/^/   refused client: /' \
    || { tail -20 "$T/notoken.log"; die "a client without the token was not refused"; }
lap "(a) store check + client without token refused"

timeout 120 "$RAY" down -y "$T/cluster.test.yaml" >"$T/ray-down.log" 2>&1 || { tail -20 "$T/ray-down.log"; die "ray down"; }
RAY_UP=0
for _ in $(seq 20); do pgrep -u "$CI_USER" -f raylet >/dev/null || break; sleep 1; done
pgrep -u "$CI_USER" -f "raylet|gcs_server" >/dev/null && die "Ray still running after ray down"
lap "(a) ray down"

# ---------------------------------------------------------------- (b) SLURM
say "(b) sbatch slurm/qkgeom.sbatch (smoke sweep)"
submit() {  # sbatch as root with a scratch HOME (the token goes there), job port of its own
    sbatch --parsable --output="$T/slurm/job-%j.out" \
        --export=ALL,HOME="$T/slurm-home",QKGEOM_RAY_PORT="$(free_port)",TMPDIR="$T/t" "$@"
}
mkdir -p "$T/t"
job_state() { scontrol show job "$1" -o 2>/dev/null | grep -o 'JobState=[A-Z_]*' | cut -d= -f2; }
wait_job() {  # job, seconds → final state on stdout
    local s
    for ((i = 0; i < $2; i++)); do
        s="$(job_state "$1")"
        case "$s" in COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY|BOOT_FAIL|DEADLINE) echo "$s"; return 0 ;; esac
        sleep 2
    done
    echo "TIMEOUT-WAITING($s)"
}
ok_job="$(submit --cpus-per-task=2 slurm/qkgeom.sbatch python -m sweep.baseline --preset smoke --address auto \
    --store "$T/slurm/store" --storage "$T/slurm/ray")" || die "sbatch"
JOBS+=("$ok_job")
state="$(wait_job "$ok_job" 200)"
sed 's/^/   /' "$T/slurm/job-$ok_job.out" | grep -E "qkgeom.sbatch|trials in|Error"
[[ "$state" == COMPLETED ]] || { tail -40 "$T/slurm/job-$ok_job.out"; die "job $ok_job ended $state"; }
scontrol show job "$ok_job" -o | grep -o 'JobState=[A-Z]* .*ExitCode=[0-9:]*' | sed -E 's/ .* / /; s/^/   /'
lap "(b) sbatch smoke sweep (job $ok_job)"

"$PY" -m sweep.store validate --store "$T/slurm/store" | tail -3 | sed 's/^/   /'
[[ ${PIPESTATUS[0]} == 0 ]] || die "sweep.store validate"
"$PY" - "$T/slurm/store" <<'EOF' || die "store read-back"
import sys
import pandas as pd
from sweep.presets import BASELINE_PRESETS
p = BASELINE_PRESETS["smoke"]
ep = pd.read_parquet(f"{sys.argv[1]}/epochs")
runs = ep.groupby("run_id")["epoch"].agg(list)
want = len(p.depths) * len(p.inits) * len(p.seeds)
dups = int(ep.duplicated(["run_id", "epoch"]).sum())
# every run: each epoch once, up to the preset's last (epoch 0 is the evaluation before training)
complete = all(sorted(e) == list(range(min(e), p.train.epochs + 1)) and min(e) in (0, 1) for e in runs)
print(f"   store: {len(runs)} runs (want {want}), {len(ep)} epoch rows, {dups} duplicates, "
      f"every run has epochs {{0 or 1}}..{p.train.epochs} once: {complete}")
assert len(runs) == want and dups == 0 and complete
EOF
lap "(b) store read back"

fail_job="$(submit slurm/qkgeom.sbatch python -c 'import sys; print("failing on purpose"); sys.exit(3)')" || die "sbatch"
JOBS+=("$fail_job")
state="$(wait_job "$fail_job" 120)"
info="$(scontrol show job "$fail_job" -o | grep -o 'ExitCode=[0-9:]*')"
echo "   job $fail_job: JobState=$state $info; jobcomp: $(grep -o "JobId=$fail_job .*JobState=[A-Z]*" "$T/slurm/jobcomp.log" | grep -o 'JobState=[A-Z]*')"
grep -E "qkgeom.sbatch" "$T/slurm/job-$fail_job.out" | sed 's/^/   /'
[[ "$state" == FAILED && "$info" == "ExitCode=3:0" ]] || { tail -30 "$T/slurm/job-$fail_job.out"; die "failing job shows $state $info"; }
for j in "$ok_job" "$fail_job"; do
    pgrep -f "ray-$j/" >/dev/null && die "Ray of job $j still running after the job"
    grep -q "Ray stopped" "$T/slurm/job-$j.out" || die "job $j did not report stopping Ray"
done
lap "(b) failing job seen as FAILED"
