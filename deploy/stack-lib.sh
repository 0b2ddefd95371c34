# Shell helpers both local stacks share (deploy/dev/stack.sh, deploy/cluster/stack.sh);
# sourced after the script sets HOST. Reads /proc, with no dependency on procps.

# apt_install PACKAGE...: install Debian packages, with sudo when not root.
apt_install() {
  local sudo=""; [[ "$(id -u)" == 0 ]] || sudo="sudo"
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null \
    && $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

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
