#!/usr/bin/env bash
# munged for the tests that need it (Slurm's auth, morphbench's MUNGE trust).
#   munge.sh up     start munged unless one answers; wait until it does (prints "started"
#                   when this call started it, so the caller knows to stop it)
#   munge.sh down   stop munged and wait until it is gone and its socket removed
# Both wait for the state they promise: munged stops asynchronously, so a later script that
# only asked `pgrep` saw a munged that was exiting, started none, and found no socket (CI).
# Needs root.
set -euo pipefail
answers() { munge -n </dev/null >/dev/null 2>&1; }
case "${1:?usage: munge.sh up|down}" in
up)
  command -v munged >/dev/null || { apt-get update -qq; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq munge >&2; }
  answers && exit 0
  # One that is still exiting must be gone before a new one can take the socket and pid file.
  "$0" down
  [ -s /etc/munge/munge.key ] || mungekey -c
  mkdir -p /run/munge /var/log/munge /var/lib/munge
  chown -R munge:munge /run/munge /var/log/munge /var/lib/munge /etc/munge
  runuser -u munge -- /usr/sbin/munged
  for _ in $(seq 100); do answers && { echo started; exit 0; }; sleep 0.1; done
  echo "munge.sh: munged started but does not answer after 10 s; see /var/log/munge/munged.log" >&2
  exit 1 ;;
down)
  pkill -x munged 2>/dev/null || true
  for _ in $(seq 100); do pgrep -x munged >/dev/null || break; sleep 0.1; done
  pgrep -x munged >/dev/null && pkill -9 -x munged 2>/dev/null || true
  for _ in $(seq 20); do pgrep -x munged >/dev/null || break; sleep 0.1; done
  rm -f /run/munge/munge.socket.2 /run/munge/munge.socket.2.lock 2>/dev/null || true
  exit 0 ;;
*) echo "usage: munge.sh up|down" >&2; exit 2 ;;
esac
