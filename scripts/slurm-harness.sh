#!/usr/bin/env bash
# A real one-node Slurm with accounting, for jobsight's integration tests (tests/test_slurm_integration.py).
#
#   scripts/slurm-harness.sh start    install if missing, start everything, wait until the node is idle
#   scripts/slurm-harness.sh status   what is up (exit 0 only when all of it is)
#   scripts/slurm-harness.sh stop     stop the daemons this harness runs (by their pid files)
#
# Root only, no systemd: munge, MariaDB (database slurm_acct_db, user slurm), slurmdbd, slurmctld and
# slurmd run as plain daemons on loopback. Cluster "$JOBSIGHT_SLURM_CLUSTER" (default jobsight), one
# node named after `hostname -s` with 2 CPUs and two fake A100s (GRES over /dev/nvidia0,1 character
# devices: a count-only gres.conf leaves the node INVALID), partitions `cpu` (default) and `gpu` with
# TRESBillingWeights, accounts proj-astro (user alice) and proj-bio (user bob). Partition `site` is
# the site-mode sidecar's: a Prolog and Epilog run `jobsight sidecar prolog|epilog` for its jobs
# only (spool /var/spool/jobsight), so the other partitions' jobs are sampled only by their own line.
#
# Idempotent: `start` on a running harness only checks it (a second or two); stale pid files from a
# session whose processes are gone are ignored; a changed configuration restarts the daemons it
# concerns. Logs: /var/log/jobsight-slurm/. On failure the tail of the failing daemon's log is printed.
set -euo pipefail

CLUSTER=${JOBSIGHT_SLURM_CLUSTER:-jobsight}
LOG=/var/log/jobsight-slurm
RUN=/run/jobsight-slurm
STATE=/var/lib/jobsight-slurm
CONF=/etc/slurm
NODE=$(hostname -s)
REPO=$(cd "$(dirname "$0")/.." && pwd)
SPOOL=/var/spool/jobsight
# user:account pairs, created as Unix users and Slurm associations
USERS=(alice:proj-astro bob:proj-bio)
PACKAGES=(slurmctld slurmd slurmdbd slurm-client mariadb-server munge)
T0=$(date +%s)

say() { echo "slurm-harness: $*" >&2; }

die() {  # die MESSAGE [LOGFILE...]: the message, then the tail of each log that exists
  local f
  say "FAILED: $1"; shift
  for f in "$@"; do
    [ -s "$f" ] || continue
    say "last lines of $f:"
    tail -n 25 "$f" >&2
  done
  exit 1
}

# wait_for SECONDS DESCRIPTION LOGFILE COMMAND...: poll COMMAND every 0.5 s until it succeeds.
wait_for() {
  local secs=$1 what=$2 log=$3; shift 3
  local deadline=$(( $(date +%s) + secs ))
  until "$@" >/dev/null 2>&1; do
    [ "$(date +%s)" -lt "$deadline" ] || die "$what not ready after ${secs}s" "$log"
    sleep 0.5
  done
}

# pid_of NAME PIDFILE: the pid of a running daemon, from its pid file when that names a live process
# with the right command name (a stale file from a finished session may name a reused pid), else
# the oldest process with that exact name (a daemon someone started without our pid file).
# A killed daemon can linger as a zombie until its parent reaps it: that does not count as running.
live() {  # live PID NAME
  local stat
  [ -n "$1" ] && [ "$(cat "/proc/$1/comm" 2>/dev/null)" = "$2" ] || return 1
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  stat=${stat##*) }
  [ "${stat%% *}" != Z ]
}

pid_of() {
  local name=$1 pidfile=$2 pid
  if [ -s "$pidfile" ]; then
    pid=$(tr -dc '0-9' <"$pidfile")
    if live "$pid" "$name"; then echo "$pid"; return 0; fi
  fi
  for pid in $(pgrep -x "$name" 2>/dev/null); do
    if live "$pid" "$name"; then echo "$pid"; return 0; fi
  done
  return 1
}

stop_pid() {  # stop_pid NAME PIDFILE: TERM, up to 15 s grace, then KILL
  local name=$1 pidfile=$2 pid i
  pid=$(pid_of "$name" "$pidfile") || { rm -f "$pidfile"; return 0; }
  kill -TERM "$pid" 2>/dev/null || true
  for i in $(seq 1 30); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.5
  done
  kill -0 "$pid" 2>/dev/null && { say "$name (pid $pid) ignored SIGTERM, killing"; kill -KILL "$pid" 2>/dev/null || true; }
  rm -f "$pidfile"
  say "stopped $name (pid $pid)"
}

# ---------------------------------------------------------------------------------------------- install
install_packages() {
  local missing=0 p
  for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing=1
  done
  [ "$missing" = 0 ] && return 0
  say "installing ${PACKAGES[*]}"
  export DEBIAN_FRONTEND=noninteractive
  local t=$(date +%s)
  # Refresh the package lists only when there are none or the install fails with the old ones.
  if ! ls /var/lib/apt/lists/*_Packages >/dev/null 2>&1; then apt-get update -qq; fi
  if ! apt-get install -y -qq "${PACKAGES[@]}" >"/tmp/jobsight-slurm-apt.log" 2>&1; then
    apt-get update -qq
    apt-get install -y -qq "${PACKAGES[@]}" >"/tmp/jobsight-slurm-apt.log" 2>&1 \
      || die "apt-get install ${PACKAGES[*]}" /tmp/jobsight-slurm-apt.log
  fi
  say "installed in $(( $(date +%s) - t ))s"
}

# ------------------------------------------------------------------------------------- configuration
CHANGED_SLURM=0
CHANGED_DBD=0

# install_file PATH OWNER MODE: move PATH.new over PATH when the content differs; returns 0 if changed.
install_file() {
  local f=$1 owner=$2 mode=$3
  chown "$owner" "$f.new"; chmod "$mode" "$f.new"
  if [ -f "$f" ] && cmp -s "$f" "$f.new"; then
    rm -f "$f.new"; chown "$owner" "$f"; chmod "$mode" "$f"; return 1
  fi
  mv -f "$f.new" "$f"
  return 0
}

write_configs() {
  mkdir -p "$LOG" "$RUN" "$STATE/ctld" "$STATE/d" "$CONF"
  chown slurm:slurm "$LOG" "$RUN" "$STATE/ctld"
  # RealMemory must stay below what the machine has, or slurmd marks the node invalid.
  local mem_mb real
  mem_mb=$(awk '/^MemTotal:/ {print int($2/1024)}' /proc/meminfo)
  real=$(( mem_mb / 2 )); [ "$real" -gt 4096 ] && real=4096

  cat >"$CONF/slurm.conf.new" <<EOF
# Written by jobsight scripts/slurm-harness.sh: a one-node test cluster. Do not edit by hand.
ClusterName=$CLUSTER
SlurmctldHost=$NODE(127.0.0.1)
SlurmUser=slurm
AuthType=auth/munge
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/d
SlurmctldPidFile=$RUN/slurmctld.pid
SlurmdPidFile=$RUN/slurmd.pid
SlurmctldLogFile=$LOG/slurmctld.log
SlurmdLogFile=$LOG/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
# No cgroups here (a container): track processes by parent pid, no task binding.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
PrologFlags=Contain
# The site-mode sidecar, for partition "site" only (the scripts check SLURM_JOB_PARTITION).
Prolog=$CONF/jobsight-prolog.sh
Epilog=$CONF/jobsight-epilog.sh
MpiDefault=none
SwitchType=switch/none
ReturnToService=2
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
# Jobs without --mem must not take the whole node's memory (that would run one job at a time).
DefMemPerCPU=200
GresTypes=gpu
# Sample every 5 s so short test jobs get usage figures; kill steps over their memory limit.
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=5
JobAcctGatherParams=OverMemoryKill
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
# The typed TRES too, so AllocTRES names the GPU model (gres/gpu:a100=1).
AccountingStorageTRES=gres/gpu,gres/gpu:a100
JobCompType=jobcomp/none
MailProg=/bin/true
# Short test turnarounds: forget finished jobs quickly, kill soon after SIGTERM, no grace on limits.
MinJobAge=5
KillWait=2
OverTimeLimit=0
InactiveLimit=0
SlurmdTimeout=300
NodeName=$NODE NodeAddr=127.0.0.1 CPUs=2 RealMemory=$real Gres=gpu:a100:2 State=UNKNOWN
PartitionName=cpu Nodes=$NODE Default=YES MaxTime=INFINITE State=UP TRESBillingWeights="CPU=1.0,Mem=0.25G"
PartitionName=gpu Nodes=$NODE MaxTime=INFINITE State=UP TRESBillingWeights="CPU=1.0,Mem=0.25G,GRES/gpu=32"
PartitionName=site Nodes=$NODE MaxTime=INFINITE State=UP TRESBillingWeights="CPU=1.0,Mem=0.25G,GRES/gpu=32"
EOF
  if install_file "$CONF/slurm.conf" root:root 644; then CHANGED_SLURM=1; fi
  write_site_scripts

  cat >"$CONF/gres.conf.new" <<EOF
# Written by jobsight scripts/slurm-harness.sh: two fake GPUs (character devices, no driver).
Name=gpu Type=a100 File=/dev/nvidia[0-1]
EOF
  if install_file "$CONF/gres.conf" root:root 644; then CHANGED_SLURM=1; fi

  # The database password is local to this machine; keep the one already written.
  local pass=""
  [ -f "$CONF/slurmdbd.conf" ] && pass=$(sed -n 's/^StoragePass=//p' "$CONF/slurmdbd.conf")
  [ -n "$pass" ] || pass=$(head -c 18 /dev/urandom | base64 | tr -dc 'A-Za-z0-9')
  DB_PASS=$pass
  cat >"$CONF/slurmdbd.conf.new" <<EOF
# Written by jobsight scripts/slurm-harness.sh. Must be owned by SlurmUser, mode 600.
AuthType=auth/munge
DbdAddr=127.0.0.1
DbdHost=$NODE
SlurmUser=slurm
PidFile=$RUN/slurmdbd.pid
LogFile=$LOG/slurmdbd.log
DebugLevel=info
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageLoc=slurm_acct_db
StorageUser=slurm
StoragePass=$pass
EOF
  if install_file "$CONF/slurmdbd.conf" slurm:slurm 600; then CHANGED_DBD=1; fi
}

# The Prolog and Epilog: this checkout's jobsight (else the plain-file sidecar), for partition "site".
# They always exit 0: a failing Prolog or Epilog drains the node.
write_site_scripts() {
  local cmd verb
  if [ -x "$REPO/.venv/bin/jobsight" ]; then cmd="$REPO/.venv/bin/jobsight sidecar"
  else cmd="/usr/bin/python3 $REPO/collector/sidecar.py"; fi
  for verb in prolog epilog; do
    # every second in the prolog: the test jobs last seconds
    cat >"$CONF/jobsight-$verb.sh.new" <<EOF
#!/bin/sh
# Written by jobsight scripts/slurm-harness.sh: the site-mode sidecar's $verb, partition "site" only.
[ "\$SLURM_JOB_PARTITION" = site ] || exit 0
$cmd $verb --spool $SPOOL$([ "$verb" = prolog ] && echo " --interval 1") >>$LOG/jobsight-$verb.log 2>&1 </dev/null
exit 0
EOF
    install_file "$CONF/jobsight-$verb.sh" root:root 755 || true
  done
}

make_devices_and_users() {
  local i pair user
  for i in 0 1; do
    [ -e "/dev/nvidia$i" ] || mknod "/dev/nvidia$i" c 195 "$i"
  done
  chmod 666 /dev/nvidia0 /dev/nvidia1 2>/dev/null || true
  for pair in "${USERS[@]}"; do
    user=${pair%%:*}
    id -u "$user" >/dev/null 2>&1 || useradd -m -s /bin/bash "$user"
  done
}

# ------------------------------------------------------------------------------------------- daemons
munge_up() { munge -n 2>/dev/null | unmunge >/dev/null 2>&1; }

start_munge() {
  if munge_up; then return 0; fi
  mkdir -p /run/munge /var/log/munge /var/lib/munge /etc/munge
  chown munge:munge /run/munge /var/log/munge /var/lib/munge /etc/munge
  chmod 755 /run/munge
  if [ ! -s /etc/munge/munge.key ]; then
    mungekey --create --keyfile=/etc/munge/munge.key
    chown munge:munge /etc/munge/munge.key; chmod 600 /etc/munge/munge.key
  fi
  stop_pid munged /run/munge/munged.pid  # a hung munged that does not answer
  rm -f /run/munge/munge.socket.2 /run/munge/munge.socket.2.lock
  # munged insists on a log file its own user owns: it keeps /var/log/munge/munged.log.
  runuser -u munge -- /usr/sbin/munged </dev/null >>"$LOG/munged.out" 2>&1 \
    || die "munged did not start" "$LOG/munged.out" /var/log/munge/munged.log
  wait_for 15 munge /var/log/munge/munged.log munge_up
  say "munge up"
}

mysql_up() { mysqladmin --no-defaults --socket=/run/mysqld/mysqld.sock ping >/dev/null 2>&1; }

start_mariadb() {
  if ! mysql_up; then
    mkdir -p /run/mysqld; chown mysql:mysql /run/mysqld
    touch "$LOG/mariadb.log"; chown mysql:mysql "$LOG/mariadb.log"
    if [ ! -d /var/lib/mysql/mysql ]; then
      mariadb-install-db --user=mysql --datadir=/var/lib/mysql >>"$LOG/mariadb.log" 2>&1 \
        || die "mariadb-install-db" "$LOG/mariadb.log"
    fi
    rm -f /run/mysqld/mysqld.sock /run/mysqld/mysqld.pid
    setsid mysqld_safe --user=mysql --bind-address=127.0.0.1 --log-error="$LOG/mariadb.log" \
      --pid-file=/run/mysqld/mysqld.pid --innodb-lock-wait-timeout=900 \
      </dev/null >>"$LOG/mariadb.log" 2>&1 &
    wait_for 60 MariaDB "$LOG/mariadb.log" mysql_up
    say "MariaDB up"
  fi
  # Idempotent: the slurm database user with the password slurmdbd.conf holds.
  mysql --no-defaults --socket=/run/mysqld/mysqld.sock -u root <<EOF || die "creating the slurm database user" "$LOG/mariadb.log"
CREATE DATABASE IF NOT EXISTS slurm_acct_db;
CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY '$DB_PASS';
ALTER USER 'slurm'@'localhost' IDENTIFIED BY '$DB_PASS';
GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';
FLUSH PRIVILEGES;
EOF
}

dbd_up() { sacctmgr -n -P show cluster format=cluster >/dev/null 2>&1; }

start_daemon() {  # start_daemon NAME: the Slurm daemons fork into the background and write their pid file
  local name=$1
  "/usr/sbin/$name" </dev/null >>"$LOG/$name.log" 2>&1 || die "$name exited at start" "$LOG/$name.log"
}

start_slurmdbd() {
  if pid_of slurmdbd "$RUN/slurmdbd.pid" >/dev/null; then
    if [ "$CHANGED_DBD" = 1 ]; then say "slurmdbd.conf changed: restarting slurmdbd"; stop_pid slurmdbd "$RUN/slurmdbd.pid"
    else return 0; fi
  fi
  rm -f "$RUN/slurmdbd.pid"
  start_daemon slurmdbd
  # The first start creates the accounting tables: allow it time.
  wait_for 60 slurmdbd "$LOG/slurmdbd.log" dbd_up
  say "slurmdbd up"
}

setup_accounts() {
  local assoc pair user account
  sacctmgr -n -P show cluster format=cluster | grep -qx "$CLUSTER" \
    || sacctmgr -i add cluster "$CLUSTER" >/dev/null || die "sacctmgr add cluster $CLUSTER" "$LOG/slurmdbd.log"
  assoc=$(sacctmgr -n -P show assoc cluster="$CLUSTER" format=account,user)
  for pair in "${USERS[@]}"; do
    user=${pair%%:*}; account=${pair#*:}
    grep -qx "$account|" <<<"$assoc" \
      || sacctmgr -i add account "$account" Cluster="$CLUSTER" Description="$account" Organization=jobsight >/dev/null \
      || die "sacctmgr add account $account" "$LOG/slurmdbd.log"
    grep -qx "$account|$user" <<<"$assoc" \
      || sacctmgr -i add user "$user" Account="$account" DefaultAccount="$account" Cluster="$CLUSTER" >/dev/null \
      || die "sacctmgr add user $user" "$LOG/slurmdbd.log"
  done
}

ctld_up() { scontrol ping 2>/dev/null | grep -q 'is UP'; }

node_state() { sinfo -h -N -n "$NODE" -o '%T' 2>/dev/null | head -n1; }
node_ready() { case "$(node_state)" in idle|mixed|allocated|completing) return 0;; *) return 1;; esac; }

start_slurmctld() {
  if pid_of slurmctld "$RUN/slurmctld.pid" >/dev/null; then
    if [ "$CHANGED_SLURM" = 1 ]; then say "slurm.conf changed: restarting slurmctld"; stop_pid slurmctld "$RUN/slurmctld.pid"
    else wait_for 30 slurmctld "$LOG/slurmctld.log" ctld_up; return 0; fi
  fi
  rm -f "$RUN/slurmctld.pid"
  start_daemon slurmctld
  wait_for 30 slurmctld "$LOG/slurmctld.log" ctld_up
  say "slurmctld up"
}

start_slurmd() {
  if pid_of slurmd "$RUN/slurmd.pid" >/dev/null; then
    if [ "$CHANGED_SLURM" = 1 ]; then say "slurm.conf changed: restarting slurmd"; stop_pid slurmd "$RUN/slurmd.pid"
    else return 0; fi
  fi
  rm -f "$RUN/slurmd.pid"
  start_daemon slurmd
  say "slurmd started"
}

wait_node() {
  local deadline=$(( $(date +%s) + 40 )) st
  while :; do
    st=$(node_state)
    case "$st" in
      idle|mixed|allocated|completing) return 0 ;;
      *drain*|*down*|*invalid*|*fail*)
        # A node left down or drained by an earlier run (or registering before its GRES were there).
        scontrol update nodename="$NODE" state=resume >/dev/null 2>&1 || true ;;
    esac
    [ "$(date +%s)" -lt "$deadline" ] || {
      scontrol show node "$NODE" 2>&1 | grep -iE 'State=|Reason=' >&2 || true
      die "node $NODE is '$st', not idle" "$LOG/slurmd.log"; }
    sleep 0.5
  done
}

# -------------------------------------------------------------------------------------------- verbs
cmd_start() {
  [ "$(id -u)" = 0 ] || die "must run as root (it installs packages and starts system daemons)"
  install_packages
  make_devices_and_users
  write_configs
  start_munge
  start_mariadb
  start_slurmdbd
  setup_accounts
  start_slurmctld
  start_slurmd
  wait_node
  say "up: cluster $CLUSTER, node $NODE ($(node_state)), partitions cpu gpu site; $(( $(date +%s) - T0 ))s"
}

cmd_status() {
  local ok=0 name pid
  munge_up && say "munge: up" || { say "munge: down"; ok=1; }
  mysql_up && say "mariadb: up" || { say "mariadb: down"; ok=1; }
  for name in slurmdbd slurmctld slurmd; do
    if pid=$(pid_of "$name" "$RUN/$name.pid"); then say "$name: up (pid $pid)"; else say "$name: down"; ok=1; fi
  done
  if [ "$ok" = 0 ]; then
    say "node $NODE: $(node_state)"
    node_ready || ok=1
    sinfo >&2 || ok=1
  fi
  return "$ok"
}

cmd_stop() {
  stop_pid slurmd "$RUN/slurmd.pid"
  stop_pid slurmctld "$RUN/slurmctld.pid"
  stop_pid slurmdbd "$RUN/slurmdbd.pid"
  if mysql_up; then
    mysqladmin --no-defaults --socket=/run/mysqld/mysqld.sock -u root shutdown && say "stopped MariaDB"
  fi
  stop_pid munged /run/munge/munged.pid
}

case "${1:-}" in
  start) cmd_start ;;
  status) cmd_status ;;
  stop) cmd_stop ;;
  *) echo "usage: $0 start|status|stop" >&2; exit 2 ;;
esac
