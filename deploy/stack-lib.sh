# Shell helpers both local stacks share (deploy/dev/stack.sh, deploy/cluster/stack.sh);
# sourced after the script sets HOST. Reads /proc, with no dependency on procps.

# port_open PORT: true when something accepts TCP connections on $HOST:PORT.
port_open() { (exec 3<>"/dev/tcp/$HOST/$1") 2>/dev/null; }

# alive PID: process exists and is not a zombie (a container whose PID 1 does not reap
# leaves exited daemons as zombies, which `kill -0` still reports as present).
alive() {
  local st
  { read -r st <"/proc/$1/stat"; } 2>/dev/null || return 1
  st="${st##*) }"
  [[ "${st%% *}" != Z ]]
}
