#!/usr/bin/env bash
# A private single-node Slurm (slurmctld + slurmd on this host, munge auth, no cgroups, no systemd),
# for CI and the integration tests. Needs root (slurmd starts jobs as their users) and Debian packages.
#
# Usage: scripts/slurm.sh [install|start|stop|conf]
#   install  apt-get the packages (slurm-wlm, munge) unless they are already there
#   start    install if needed, write a fresh slurm.conf under $SLURM_BASE, start a munged of its own
#            (socket under $MUNGE_DIR), slurmctld and slurmd, wait until the node is idle; prints
#            `export SLURM_CONF=...` and writes the same line to $SLURM_BASE/slurm.env
#   stop     cancel every job of this cluster, then stop the daemons this script started
#   conf     print the path of slurm.conf (what SLURM_CONF must name for sbatch, squeue, scancel)
#
# Everything is a variable, so two clusters (say, CI's and a test's own) never share a port or folder:
#   SLURM_BASE       folder for config, state, spool, logs and job output (default ${TMPDIR:-/tmp}/fluksio-slurm)
#   SLURMCTLD_PORT   slurmctld's port (default 6817)
#   SLURMD_PORT      slurmd's port (default 6818)
#   SLURM_PARTITION  the one partition's name (default debug)
#   MUNGE_DIR        its munged's socket, pid, seed and log (default /run/fluksio-munge-$SLURMCTLD_PORT)
#   SLURM_SMOKE=1    after start, run one short job and wait for it to complete
#   SLURM_WAIT_S     how long start waits for the node to be idle, in seconds (default 60)
set -euo pipefail
BASE=${SLURM_BASE:-${TMPDIR:-/tmp}/fluksio-slurm}
CTLD_PORT=${SLURMCTLD_PORT:-6817}
SLURMD_PORT=${SLURMD_PORT:-6818}
PARTITION=${SLURM_PARTITION:-debug}
WAIT_S=${SLURM_WAIT_S:-60}
export SLURM_CONF=$BASE/slurm.conf
# munged checks that every folder above its socket is root's and not world-writable: not under /tmp.
MUNGE_DIR=${MUNGE_DIR:-/run/fluksio-munge-$CTLD_PORT}
MUNGE_SOCKET=$MUNGE_DIR/munge.socket
t0=$(date +%s)
say() { echo "[slurm.sh +$(( $(date +%s) - t0 ))s] $*" >&2; }

stop_pidfile() {
  local pid; pid=$(cat "$1" 2>/dev/null || true); [ -n "$pid" ] || return 0
  kill "$pid" 2>/dev/null || true
  for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || { rm -f "$1"; return 0; }; sleep 0.1; done
  echo "pid $pid (from $1) is still alive after 10 s" >&2
}

install_packages() {
  if command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v sbatch >/dev/null \
      && command -v munged >/dev/null; then
    return 0
  fi
  [ "$(id -u)" = 0 ] || { echo "installing Slurm needs root" >&2; exit 1; }
  say "installing slurm-wlm munge"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends slurm-wlm munge >/dev/null
}

start_munge() {
  # A munged of this cluster's own, on its own socket: stopping it can never pull authentication from
  # under another cluster (CI's, or a parallel test session's) that uses the system's munged.
  [ -s /etc/munge/munge.key ] || runuser -u munge -- mungekey --create
  install -d -o munge -g munge -m 755 "$MUNGE_DIR"
  runuser -u munge -- "$(command -v munged)" --socket="$MUNGE_SOCKET" --pid-file="$MUNGE_DIR/munged.pid" \
    --seed-file="$MUNGE_DIR/munged.seed" --log-file="$MUNGE_DIR/munged.log"
  for _ in $(seq 50); do munge -S "$MUNGE_SOCKET" -n >/dev/null 2>&1 && break; sleep 0.1; done
  munge -S "$MUNGE_SOCKET" -n | unmunge -S "$MUNGE_SOCKET" >/dev/null
}

write_conf() {
  local host node
  host=$(hostname -s)
  node=$(slurmd -C | head -1)  # NodeName=… CPUs=… RealMemory=…, as this machine really is
  cat > "$SLURM_CONF" <<CONF
ClusterName=fluksio
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
SlurmUser=root
AuthType=auth/munge
AuthInfo=socket=$MUNGE_SOCKET
CredType=cred/munge
StateSaveLocation=$BASE/state
SlurmdSpoolDir=$BASE/spool
SlurmctldPidFile=$BASE/slurmctld.pid
SlurmdPidFile=$BASE/slurmd.pid
SlurmctldLogFile=$BASE/log/slurmctld.log
SlurmdLogFile=$BASE/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
MpiDefault=none
MailProg=/bin/true
ReturnToService=2
# scancel's SIGKILL follows its SIGTERM after this many seconds (Slurm's default, 30, slows every stop).
KillWait=5
$node NodeAddr=127.0.0.1 State=UNKNOWN
PartitionName=$PARTITION Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF
}

start() {
  [ "$(id -u)" = 0 ] || { echo "slurmd needs root" >&2; exit 1; }
  install_packages
  stop_daemons 2>/dev/null || true  # a previous start in the same folder
  rm -rf "$BASE/state" "$BASE/spool" "$BASE/log"
  mkdir -p "$BASE"/{state,spool,log,jobs}
  start_munge
  say "munge answers"
  write_conf
  slurmctld
  slurmd  # both daemonize; their pid files are under $BASE
  local deadline=$(( $(date +%s) + WAIT_S ))
  until sinfo -h -o %T 2>/dev/null | grep -qx idle; do
    if [ "$(date +%s)" -ge "$deadline" ]; then
      echo "the node did not become idle within ${WAIT_S}s; see $BASE/log" >&2
      tail -n 20 "$BASE"/log/*.log >&2 || true
      exit 1
    fi
    sleep 0.2
  done
  say "slurmctld (port $CTLD_PORT) and slurmd (port $SLURMD_PORT) up, node idle"
  if [ "${SLURM_SMOKE:-0}" = 1 ]; then
    local job state=""
    job=$(sbatch --parsable -o "$BASE/jobs/smoke-%j.out" --wrap 'hostname')
    for _ in $(seq 150); do
      state=$(scontrol -o show job "$job" | grep -o 'JobState=[A-Z_]*' | cut -d= -f2)
      case $state in COMPLETED) break ;; FAILED|CANCELLED|TIMEOUT|NODE_FAIL) break ;; esac
      sleep 0.2
    done
    [ "$state" = COMPLETED ] || { echo "smoke job $job ended $state" >&2; exit 1; }
    say "smoke job $job completed on $(cat "$BASE/jobs/smoke-$job.out")"
  fi
  echo "export SLURM_CONF=$SLURM_CONF" | tee "$BASE/slurm.env"
}

stop_daemons() {
  stop_pidfile "$BASE/slurmd.pid"
  stop_pidfile "$BASE/slurmctld.pid"
  stop_pidfile "$MUNGE_DIR/munged.pid"
  rm -rf "$MUNGE_DIR"
}

stop() {
  if [ -f "$SLURM_CONF" ] && [ -f "$BASE/slurmctld.pid" ]; then
    # Jobs outlive slurmd (slurmstepd runs them): cancel them while the controller still answers.
    local jobs
    jobs=$(squeue -h -o %i 2>/dev/null || true)
    if [ -n "$jobs" ]; then
      # shellcheck disable=SC2086 # one id per word
      scancel $jobs 2>/dev/null || true
      for _ in $(seq 150); do [ -z "$(squeue -h -o %i 2>/dev/null || true)" ] && break; sleep 0.2; done
    fi
  fi
  stop_daemons
}

case "${1:-start}" in
  install) install_packages ;;
  start) start ;;
  stop) stop ;;
  conf) echo "$SLURM_CONF" ;;
  *) echo "usage: $0 [install|start|stop|conf]" >&2; exit 2 ;;
esac
