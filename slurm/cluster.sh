#!/usr/bin/env bash
# Stand up / tear down a real multi-node SLURM cluster on this one host (tests, CI, demos).
#
#   slurm/cluster.sh up     [--nodes N] [--cpus-per-node C] [--dir DIR] [--port-base P] [--timeout S]
#   slurm/cluster.sh down   [--dir DIR]
#   slurm/cluster.sh status [--dir DIR]
#
# Several `slurmd -N nodeK` share the host (Debian's Slurm is built with multiple-slurmd
# support), each on its own port. Everything lives under DIR (default /tmp/dali-launch-slurm);
# clients find the cluster through `source DIR/env.sh` (SLURM_CONF, PATH). Outside DIR it only
# appends missing `127.0.0.1 nodeK` lines to /etc/hosts and may start munged (/run/munge).
# Ports: slurmctld on P, nodeK on P+K; P defaults to a free slot picked from a hash of DIR,
# so clusters in different DIRs run side by side; an explicit --port-base must be free.
# Needs root and Debian 12's slurmctld, slurmd, slurm-client and munge packages.
set -euo pipefail

PROG=${0##*/}
DIR=/tmp/dali-launch-slurm
NODES=2
CPUS=2
MEM_MB=4000          # RealMemory per node; only checked against --mem, never enforced
PORT_BASE=""         # empty: derived from DIR
TIMEOUT=30           # seconds `up` waits for idle nodes
MARKER=cluster.env   # its presence means "this DIR was made by cluster.sh"
MUNGE_RUN=/run/munge

say() { printf '%s: %s\n' "$PROG" "$*" >&2; }
die() { say "error: $*"; exit 1; }

usage() {
  sed -n '2,7p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

parse_args() {
  while (($#)); do
    case $1 in
      --nodes) NODES=${2:?--nodes needs a value}; shift ;;
      --cpus-per-node) CPUS=${2:?--cpus-per-node needs a value}; shift ;;
      --dir) DIR=${2:?--dir needs a value}; shift ;;
      --port-base) PORT_BASE=${2:?--port-base needs a value}; shift ;;
      --timeout) TIMEOUT=${2:?--timeout needs a value}; shift ;;
      -h | --help) usage ;;
      *) say "unknown argument: $1"; usage ;;
    esac
    shift
  done
  [[ $NODES =~ ^[1-9][0-9]*$ ]] || die "--nodes must be a positive integer, got '$NODES'"
  [[ $CPUS =~ ^[1-9][0-9]*$ ]] || die "--cpus-per-node must be a positive integer, got '$CPUS'"
  [[ $TIMEOUT =~ ^[1-9][0-9]*$ ]] || die "--timeout must be a positive integer, got '$TIMEOUT'"
  [[ -z $PORT_BASE || $PORT_BASE =~ ^[1-9][0-9]*$ ]] || die "--port-base must be a number"
  [[ $DIR == /* ]] || DIR="$PWD/$DIR"
  DIR=${DIR%/}
  [[ -n $DIR ]] || die "--dir must not be /"
  # slurm.conf takes quoted paths with spaces, but has no escape for these.
  [[ $DIR != *[\"\#%\\]* && $DIR != *[[:cntrl:]]* ]] ||
    die "--dir must not contain \" # % \\ or control characters: '$DIR'"
  CONF="$DIR/slurm.conf"
}

require_root() { ((EUID == 0)) || die "must run as root (slurmd and munged need it)"; }

# One clear line naming the Debian package of the first missing binary.
require_bins() {
  local pair bin pkg
  for pair in slurmctld:slurmctld slurmd:slurmd sinfo:slurm-client srun:slurm-client \
    squeue:slurm-client scancel:slurm-client munged:munge munge:munge unmunge:munge; do
    bin=${pair%%:*} pkg=${pair#*:}
    command -v "$bin" >/dev/null 2>&1 || [[ -x /usr/sbin/$bin ]] ||
      die "'$bin' not found: install the Debian package '$pkg'"
  done
  PATH="$PATH:/usr/sbin"
}

# ---------------------------------------------------------------- processes

# Alive and not a zombie (daemons get reparented to a PID 1 that may never reap them).
alive() {
  local st
  [[ -n ${1:-} ]] && { st=$(<"/proc/$1/stat"); } 2>/dev/null || return 1
  st=${st##*) } st=${st%% *}
  [[ $st != Z && $st != X ]]
}

comm_of() { { local c; read -r c <"/proc/$1/comm" && echo "$c"; } 2>/dev/null || true; }

# PIDs of slurmctld/slurmd started with this DIR's slurm.conf; argv is checked, not
# just pid files, so stale pid files or recycled PIDs never make us kill a stranger.
daemon_pids() { # [slurmctld|slurmd]
  local want=${1:-} p comm arg found
  for p in /proc/[0-9]*; do
    p=${p#/proc/}
    comm=$(comm_of "$p")
    [[ $comm == slurmctld || $comm == slurmd ]] || continue
    [[ -z $want || $comm == "$want" ]] || continue
    found=0
    while IFS= read -r -d '' arg; do [[ $arg == "$CONF" ]] && found=1; done 2>/dev/null <"/proc/$p/cmdline" || true
    ((found)) && alive "$p" && echo "$p"
  done
  return 0
}

# slurmstepd's of this cluster (they keep running when slurmd dies): they hold its log open.
stepd_pids() {
  local p fd
  for p in /proc/[0-9]*; do
    p=${p#/proc/}
    [[ $(comm_of "$p") == slurmstepd ]] || continue
    for fd in "/proc/$p/fd/"*; do
      [[ $(readlink "$fd" 2>/dev/null) == "$DIR/"* ]] && { echo "$p"; break; }
    done
  done
  return 0
}

descendants() { # PID... -> those PIDs and all their descendants
  local -A kids=()
  local p ppid queue=("$@") out=()
  for p in /proc/[0-9]*/stat; do
    { ppid=$(<"$p"); } 2>/dev/null || continue
    ppid=${ppid##*) } ppid=${ppid#* } ppid=${ppid%% *}
    p=${p#/proc/} p=${p%/stat}
    kids[$ppid]+=" $p"
  done
  while ((${#queue[@]})); do
    p=${queue[0]}; queue=("${queue[@]:1}")
    out+=("$p")
    # shellcheck disable=SC2206
    [[ -n ${kids[$p]:-} ]] && queue+=(${kids[$p]})
  done
  printf '%s\n' "${out[@]}"
}

# TERM, wait up to $1 seconds, then KILL whatever is left.
terminate() { # SECONDS PID...
  local secs=$1 p left i
  shift
  (($#)) || return 0
  kill -TERM "$@" 2>/dev/null || true
  for ((i = 0; i < secs * 10; i++)); do
    left=()
    for p in "$@"; do alive "$p" && left+=("$p"); done
    ((${#left[@]})) || return 0
    sleep 0.1
  done
  say "killing stubborn processes: ${left[*]}"
  kill -KILL "${left[@]}" 2>/dev/null || true
}

# ---------------------------------------------------------------- munge

munge_ok() { timeout 5 munge -n </dev/null 2>/dev/null | timeout 5 unmunge >/dev/null 2>&1; }

# Reuse a running munged; otherwise start one as the munge user and remember that we did.
ensure_munge() {
  local ours="$DIR/run/munged.pid" i
  if munge_ok; then
    [[ -f $ours ]] && ! alive "$(cat "$ours")" && rm -f "$ours"
    return 0
  fi
  rm -f "$ours"
  if [[ ! -s /etc/munge/munge.key ]]; then
    say "creating /etc/munge/munge.key"
    mkdir -p /etc/munge
    if command -v mungekey >/dev/null 2>&1 || [[ -x /usr/sbin/mungekey ]]; then
      mungekey --create --force --keyfile=/etc/munge/munge.key
    else
      dd if=/dev/urandom of=/etc/munge/munge.key bs=1 count=1024 status=none
    fi
    chown munge:munge /etc/munge/munge.key
    chmod 0400 /etc/munge/munge.key
  fi
  # No systemd, so nobody made munge's run dir; --force clears a dead daemon's socket.
  install -d -o munge -g munge -m 0755 "$MUNGE_RUN"
  runuser -u munge -- munged --force </dev/null >/dev/null 2>&1 9>&- ||
    die "munged failed to start: $(tail -n 3 /var/log/munge/munged.log 2>/dev/null | tr '\n' ' ')"
  for ((i = 0; i < 50; i++)); do munge_ok && break; sleep 0.1; done
  munge_ok || die "munged does not answer; see /var/log/munge/munged.log"
  cp "$MUNGE_RUN/munged.pid" "$ours"
}

# Stop munged only if this DIR started it; if another cluster.sh cluster still runs,
# hand the pid file over so that cluster's `down` stops it instead.
release_munge() {
  local ours="$DIR/run/munged.pid" pid p arg prev other
  [[ -f $ours ]] || return 0
  pid=$(cat "$ours")
  rm -f "$ours"
  alive "$pid" && [[ $(comm_of "$pid") == munged ]] || return 0
  for p in /proc/[0-9]*; do
    p=${p#/proc/}
    [[ $(comm_of "$p") == slurmctld ]] || continue
    prev="" other=""
    while IFS= read -r -d '' arg; do
      [[ $prev == -f ]] && other=${arg%/slurm.conf}
      prev=$arg
    done 2>/dev/null <"/proc/$p/cmdline" || true
    if [[ -n $other && $other != "$DIR" && -f $other/$MARKER && -d $other/run ]]; then
      echo "$pid" >"$other/run/munged.pid"
      say "munged left running for the cluster in '$other'"
      return 0
    fi
  done
  terminate 10 "$pid"
}

# ---------------------------------------------------------------- config

port_in_use() { timeout 2 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$1"' _ "$1" 2>/dev/null; }

ports_free() { # BASE: are BASE..BASE+NODES all free?
  local k
  for ((k = 0; k <= NODES; k++)); do ! port_in_use $(($1 + k)) || return 1; done
}

# 64-port slots below the ephemeral range (32768+), starting at a hash of DIR so a DIR keeps
# its ports; a busy slot (another cluster) moves on to the next one.
default_port_base() {
  local h i base
  h=$(printf '%s' "$DIR" | cksum | cut -d' ' -f1)
  for ((i = 0; i < 350; i++)); do
    base=$((10000 + ((h + i) % 350) * 64))
    ports_free "$base" && { echo "$base"; return 0; }
  done
  die "no free 64-port slot in 10000-32399; pass --port-base"
}

# srun and submitit (via SLURM_JOB_NODELIST) connect to nodes by name.
ensure_hosts() {
  local k missing=()
  for ((k = 1; k <= NODES; k++)); do
    awk -v n="node$k" '!/^[[:space:]]*#/ { for (i = 2; i <= NF; i++) if ($i == n) f = 1 } END { exit !f }' \
      /etc/hosts 2>/dev/null || missing+=("node$k")
  done
  ((${#missing[@]})) || return 0
  printf '127.0.0.1 %s  # dali-launch slurm/cluster.sh\n' "${missing[@]}" >>/etc/hosts 2>/dev/null ||
    say "warning: cannot append ${missing[*]} to /etc/hosts; node names will not resolve"
}

write_config() {
  local k
  mkdir -p "$DIR/state" "$DIR/log" "$DIR/run" "$DIR/bin"
  for ((k = 1; k <= NODES; k++)); do mkdir -p "$DIR/spool/node$k"; done
  printf 'NODES=%s\nCPUS=%s\nMEM_MB=%s\nPORT_BASE=%s\n' "$NODES" "$CPUS" "$MEM_MB" "$PORT_BASE" >"$DIR/$MARKER"
  : >"$DIR/plugstack.conf" # keep /etc/slurm's SPANK plugins out
  {
    cat <<EOF
# Written by slurm/cluster.sh; regenerated on every fresh \`up\`.
ClusterName=dalilaunch
SlurmctldHost=localhost
SlurmctldPort=$PORT_BASE
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
# CPUs only: --mem is checked against RealMemory but never tracked, so it cannot block jobs.
SelectTypeParameters=CR_CPU
SchedulerParameters=batch_sched_delay=0,sched_min_interval=0
# Declared CPUs/RealMemory may exceed the host's (CI has 2 cores): trust slurm.conf.
SlurmdParameters=config_overrides
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
ReturnToService=2
KillWait=5
# Job ids start in a window of 128 of their own, from the port slot: a task derives jax.distributed's
# coordinator port from its job id (trainer/topology.py), and clusters side by side on one host would
# otherwise number their jobs 1, 2, 3... alike, and a job's tasks register with another's coordinator.
FirstJobId=$(((((PORT_BASE - 10000) / 64 % 32 + 32) % 32) * 128 + 1))
# Finished jobs stay visible to squeue (and bin/sacct) this long.
MinJobAge=3600
MailProg=/bin/true
StateSaveLocation="$DIR/state"
SlurmdSpoolDir="$DIR/spool/%n"
SlurmctldPidFile="$DIR/run/slurmctld.pid"
SlurmdPidFile="$DIR/run/slurmd-%n.pid"
SlurmctldLogFile="$DIR/log/slurmctld.log"
SlurmdLogFile="$DIR/log/slurmd-%n.log"
PlugStackConfig="$DIR/plugstack.conf"
EOF
    for ((k = 1; k <= NODES; k++)); do
      echo "NodeName=node$k NodeHostname=localhost NodeAddr=127.0.0.1 Port=$((PORT_BASE + k)) CPUs=$CPUS RealMemory=$MEM_MB State=UNKNOWN"
    done
    echo "PartitionName=debug Nodes=node[1-$NODES] Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4"
  } >"$CONF"
  {
    echo "# Written by slurm/cluster.sh: \`source\` it to use the cluster in this directory."
    printf '_dali_slurm_dir=%q\n' "$DIR"
    cat <<'EOF'
export SLURM_CONF="$_dali_slurm_dir/slurm.conf"
export DALI_LAUNCH_SLURM_DIR="$_dali_slurm_dir"
case ":$PATH:" in *":$_dali_slurm_dir/bin:"*) ;; *) export PATH="$_dali_slurm_dir/bin:$PATH" ;; esac
unset _dali_slurm_dir
EOF
  } >"$DIR/env.sh"
  write_sacct_shim
}

# No slurmdbd means the real sacct always fails; submitit polls it and, without an answer,
# waits forever for a job that died before writing its result (scancel, timeout).
# This stand-in answers from slurmctld's memory via squeue (--parsable2 style only).
write_sacct_shim() {
  cat >"$DIR/bin/sacct" <<'EOF'
#!/usr/bin/env bash
# sacct stand-in from slurm/cluster.sh: answers from squeue (jobs younger than MinJobAge).
set -euo pipefail
fields=JobID,JobName,Partition,State,NodeList ids=() header=1 trail=""
while (($#)); do
  case $1 in
    -o | --format) fields=$2; shift ;;
    --format=*) fields=${1#*=} ;;
    -j | --jobs) IFS=, read -ra more <<<"$2"; ids+=("${more[@]}"); shift ;;
    --jobs=*) IFS=, read -ra more <<<"${1#*=}"; ids+=("${more[@]}") ;;
    -n | --noheader) header=0 ;;
    -p | --parsable) trail="|" ;;
    -P | --parsable2) trail="" ;;
    -M | --clusters | -u | --user | -S | --starttime | -E | --endtime | -s | --state) shift ;;
    *) ;;
  esac
  shift
done
fmt="" names=""
IFS=, read -ra cols <<<"$fields"
for c in "${cols[@]}"; do
  name=${c%%%*}
  case ${name,,} in
    jobid) f=%i ;; jobidraw) f=%A ;; jobname) f=%j ;; state) f=%T ;; nodelist) f=%N ;;
    partition) f=%P ;; user) f=%u ;; nnodes) f=%D ;; ncpus | alloccpus) f=%C ;;
    elapsed) f=%M ;; start) f=%S ;; end) f=%e ;; submit) f=%V ;; timelimit) f=%l ;;
    workdir) f=%Z ;; reason) f=%r ;; *) f="" ;;
  esac
  fmt+="${fmt:+|}$f" names+="${names:+|}$name"
done
((header)) && echo "$names$trail"
args=(-h --states=all -o "$fmt$trail")
((${#ids[@]})) && args+=(-j "$(IFS=,; echo "${ids[*]}")")
squeue "${args[@]}" 2>/dev/null || true
EOF
  chmod +x "$DIR/bin/sacct"
}

load_marker() { # sets NODES/CPUS/MEM_MB/PORT_BASE as recorded by `up`
  local line
  while IFS= read -r line; do
    case $line in
      NODES=* | CPUS=* | MEM_MB=* | PORT_BASE=*) printf -v "${line%%=*}" '%s' "${line#*=}" ;;
    esac
  done <"$DIR/$MARKER"
}

# ---------------------------------------------------------------- cluster state

slurm() { SLURM_CONF="$CONF" timeout 10 "$@"; }

node_states() { slurm sinfo -h -N -o '%N %t' 2>/dev/null | sort -u; }

# Healthy: controller and all N slurmd's alive, every node answering (no *, not down/drain).
healthy() {
  [[ -f $DIR/$MARKER && -f $CONF ]] || return 1
  [[ -n $(daemon_pids slurmctld) ]] || return 1
  (($(daemon_pids slurmd | wc -l) == NODES)) || return 1
  local states
  states=$(node_states) || return 1
  (($(grep -cE ' (idle|alloc|mix|comp)$' <<<"$states") == NODES))
}

show_logs() {
  local f
  say "sinfo: $(node_states | tr '\n' ' ')"
  for f in "$DIR"/log/*; do
    [[ -s $f ]] || continue
    printf '%s: ---- tail of %s\n' "$PROG" "$f" >&2
    tail -n 15 "$f" >&2
  done
}

stop_cluster() {
  local pids=() p
  if [[ -n $(daemon_pids slurmctld) ]]; then
    slurm scancel --quiet --partition=debug >/dev/null 2>&1 || true
    for ((p = 0; p < 50; p++)); do
      [[ -z $(slurm squeue -h -t running,completing -o %i 2>/dev/null) ]] && break
      sleep 0.2
    done
  fi
  mapfile -t pids < <(daemon_pids)
  terminate 15 "${pids[@]}"
  # Steps outliving their slurmd (KILL above, crash): take their tasks down too.
  mapfile -t pids < <(stepd_pids)
  if ((${#pids[@]})); then
    mapfile -t pids < <(descendants "${pids[@]}")
    kill -KILL "${pids[@]}" 2>/dev/null || true
  fi
  return 0
}

start_cluster() {
  local k
  slurmctld -f "$CONF" </dev/null >>"$DIR/log/slurmctld.out" 2>&1 9>&- ||
    { show_logs; return 1; }
  for ((k = 1; k <= NODES; k++)); do
    slurmd -f "$CONF" -N "node$k" </dev/null >>"$DIR/log/slurmd-node$k.out" 2>&1 9>&- ||
      { show_logs; return 1; }
  done
}

wait_idle() {
  local deadline=$((SECONDS + TIMEOUT)) i
  for ((i = 0; SECONDS < deadline; i++)); do
    (($(node_states | grep -c ' idle$') == NODES)) && return 0
    # Daemons fork before they can fail (bad node name, port taken): do not wait for nothing.
    if ((i % 5 == 4)) && [[ -z $(daemon_pids slurmctld) || $(daemon_pids slurmd | wc -l) -lt $NODES ]]; then
      say "a slurm daemon exited during start-up"
      show_logs
      return 1
    fi
    sleep 0.2
  done
  say "nodes not idle after ${TIMEOUT}s"
  show_logs
  return 1
}

elapsed() { LC_ALL=C awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }'; }

summary() { # PREFIX
  echo "$1: $NODES nodes x $CPUS CPUs (node[1-$NODES], partition debug), ports $PORT_BASE-$((PORT_BASE + NODES)), dir '$DIR'; use: source '$DIR/env.sh'"
}

# Refuse to manage (and later delete things in) a directory we did not make.
guard_dir() {
  [[ -f $DIR/$MARKER ]] && return 0
  [[ ! -e $DIR ]] && return 0
  [[ -d $DIR && -z $(ls -A "$DIR") ]] && return 0
  [[ -d $DIR && $(ls -A "$DIR") == .lock ]] && return 0
  die "'$DIR' exists and was not made by $PROG; pick an empty or new --dir"
}

lock_dir() { # serialise up/down on one DIR; daemons get `9>&-` so they do not inherit it
  [[ -e $DIR ]] || trap 'rm -f "$DIR/.lock"; rmdir "$DIR" 2>/dev/null || true' EXIT # failed first up
  mkdir -p "$DIR"
  exec 9>>"$DIR/.lock"
  flock -w 60 9 || die "another $PROG holds '$DIR/.lock'"
}

clean_dir() {
  rm -rf "$DIR/state" "$DIR/spool" "$DIR/log" "$DIR/run" "$DIR/bin" \
    "$CONF" "$DIR/plugstack.conf" "$DIR/env.sh" "$DIR/$MARKER"
}

# ---------------------------------------------------------------- commands

cmd_up() {
  local want_nodes=$NODES want_cpus=$CPUS want_port=$PORT_BASE t0=$EPOCHREALTIME p
  require_root
  require_bins
  guard_dir
  lock_dir
  if [[ -f $DIR/$MARKER ]]; then
    load_marker
    if healthy; then
      [[ $want_nodes == "$NODES" && $want_cpus == "$CPUS" && (-z $want_port || $want_port == "$PORT_BASE") ]] ||
        die "'$DIR' is already up with $NODES nodes x $CPUS CPUs, port base $PORT_BASE; run '$PROG down --dir \"$DIR\"' first"
      ensure_hosts
      summary "already up"
      return 0
    fi
    say "stale or partial cluster in '$DIR': restarting it"
    stop_cluster
    rm -rf "$DIR/state" "$DIR/spool" "$DIR/log"
  fi
  NODES=$want_nodes CPUS=$want_cpus
  ((NODES <= 63)) || [[ -n $want_port ]] || die "more than 63 nodes needs an explicit --port-base"
  PORT_BASE=${want_port:-$(default_port_base)}
  ((PORT_BASE + NODES <= 65535)) || die "ports $PORT_BASE-$((PORT_BASE + NODES)) out of range"
  ports_free "$PORT_BASE" || die "ports $PORT_BASE-$((PORT_BASE + NODES)) are not all free; pass another --port-base"
  # slurmstepd's unix sockets (spool/nodeK/nodeK_JOB.STEP) must fit sun_path, else every
  # job fails with "Unix socket path ... is too long"; allow 7-digit job ids.
  p="$DIR/spool/node$NODES/node${NODES}_9999999.4294967294"
  ((${#p} <= 107)) || die "--dir too long for slurmstepd's unix sockets (${#p} > 107 bytes): '$DIR'"
  ensure_hosts
  mkdir -p "$DIR/run"
  ensure_munge
  write_config
  if ! start_cluster || ! wait_idle; then
    stop_cluster
    die "cluster did not come up; logs kept in '$DIR/log' ('$PROG down' removes them)"
  fi
  trap - EXIT
  summary "up in $(elapsed "$t0")s"
}

cmd_down() {
  local n
  require_root
  PATH="$PATH:/usr/sbin"
  if [[ ! -e $DIR ]]; then
    echo "not up: '$DIR' does not exist"
    return 0
  fi
  guard_dir
  lock_dir
  n=$(daemon_pids | wc -l)
  stop_cluster
  release_munge
  clean_dir
  rm -f "$DIR/.lock"
  rmdir "$DIR" 2>/dev/null || true
  echo "down: stopped $n slurm daemons, cleaned '$DIR'"
}

cmd_status() {
  PATH="$PATH:/usr/sbin"
  if [[ ! -f $DIR/$MARKER ]]; then
    echo "not up: no cluster in '$DIR'"
    return 3
  fi
  load_marker
  echo "dir: $DIR (ports $PORT_BASE-$((PORT_BASE + NODES)))"
  echo "slurmctld: $(daemon_pids slurmctld | tr '\n' ' ')"
  echo "slurmd:    $(daemon_pids slurmd | tr '\n' ' ')"
  echo "munged:    $([[ -f $DIR/run/munged.pid ]] && echo "started here, pid $(cat "$DIR/run/munged.pid")" || echo "not ours")"
  slurm sinfo 2>&1 || true
  if healthy; then summary "up"; else
    echo "unhealthy: run '$PROG up --dir \"$DIR\"' to restart"
    return 1
  fi
}

main() {
  local cmd=${1:-}
  (($#)) && shift
  case $cmd in
    up | down | status) parse_args "$@"; "cmd_$cmd" ;;
    -h | --help | help) usage ;;
    *) usage ;;
  esac
}

main "$@"
