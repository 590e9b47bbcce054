#!/usr/bin/env bash
# Installs what the end-to-end tests and benchmarks need on a fresh Debian machine.
# Idempotent: packages already present are skipped quickly.
set -euo pipefail
need=()
for p in mpich libmpich-dev libpmi2-0-dev hwloc-nox openssh-server openssh-client iproute2 procps \
  make man-db groff-base slurmctld slurmd slurm-client munge sshfs fuse3; do
  dpkg -s "$p" >/dev/null 2>&1 || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "test/setup.sh: missing packages ${need[*]}; run as root or install them" >&2
    exit 0
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
