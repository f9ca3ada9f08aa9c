# The script guard's lean form (slurm_fsm/scriptguard.py says what a guard does and
# when this form is used). Started, by the orchestrator, as
#
#   setpriv --pdeathsig TERM -- /bin/sh scriptguard.sh PARENT PYTHON GUARD_PY ENV CMD...
#
# setpriv arms the death signal (PR_SET_PDEATHSIG) and execs this shell, the leader of
# the script's session and process group: a POSIX shell starts in about a millisecond of
# CPU where a Python guard takes twenty (issue 28: every job's script pays it).
# Running, it only waits for CMD and exits with its status (128 + N when killed by
# signal N). Asked to stop (SIGTERM from the kernel when the orchestrator dies, or from
# the orchestrator's killpg; SIGHUP; SIGINT) it execs the Python guard's stop
# (`scriptguard.py --stop CHILD SIGNUM`: the one stop policy, as the same process, the
# group's leader, with the same environment and so the same token).
# SLURM_FSM_GUARD_STATUS (the guard's, taken out of CMD's environment) names the file
# where the exit status is written (a temp file renamed) once CMD ended by itself.
parent=$1 python=$2 guardpy=$3 envcmd=$4
shift 4
status=${SLURM_FSM_GUARD_STATUS-}
unset SLURM_FSM_GUARD_STATUS
child=0
stop() {
    trap '' TERM HUP INT
    exec "$python" -I -S "$guardpy" --stop "$child" "$1"
}
trap 'stop 15' TERM
trap 'stop 1' HUP
trap 'stop 2' INT
# the death signal is armed before this check: the orchestrator is alive now, or gone
[ "$PPID" = "$parent" ] || stop 15
# a shell starts an asynchronous command with SIGINT and SIGQUIT ignored: the command
# gets them back as it would get them from the Python guard (default)
"$envcmd" --default-signal=INT,QUIT "$@" &
child=$!
wait "$child" 2>/dev/null  # dash would print "Killed" to the job's log
code=$?
if [ -n "$status" ]; then
    { printf '%s\n' "$code" > "$status.$$.tmp" && mv -f "$status.$$.tmp" "$status"; } \
        2>/dev/null || rm -f "$status.$$.tmp"
fi
exit $code
