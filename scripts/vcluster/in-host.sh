#!/usr/bin/env bash
# Runs "$@" on vcluster host i: inside its network namespace ${VCLUSTER_PREFIX}h$i and a UTS
# namespace named after it, so each rank has its own address and its own hostname. i is the
# launcher's rank (SLURM_PROCID, OMPI_COMM_WORLD_RANK) or VCLUSTER_HOST when set.
#   srun -n 4 --overcommit scripts/vcluster/in-host.sh morphbench links ...
#   VCLUSTER_HOST=2 scripts/vcluster/in-host.sh morphbench links --rank 1 --world 2 ...
set -euo pipefail
PREFIX=${VCLUSTER_PREFIX:-mb}
i=${VCLUSTER_HOST:-${SLURM_PROCID:-${OMPI_COMM_WORLD_RANK:?no rank: run under srun or mpirun, or set VCLUSTER_HOST}}}
exec ip netns exec "${PREFIX}h$i" unshare --uts sh -c 'hostname "$0" && exec "$@"' "${PREFIX}h$i" "$@"
