# Sourced by the scripts: how Open MPI must run on these machines.
# As root, Open MPI refuses to start unless both variables are set.
export OMPI_ALLOW_RUN_AS_ROOT=${OMPI_ALLOW_RUN_AS_ROOT:-1}
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=${OMPI_ALLOW_RUN_AS_ROOT_CONFIRM:-1}
# More ranks than cores (4 ranks on 2 cores): allowed, and without a hostfile that would make
# ranks busy-poll on a core they do not have.
export OMPI_MCA_rmaps_base_oversubscribe=${OMPI_MCA_rmaps_base_oversubscribe:-1}
# Under srun (which never tells Open MPI the node is oversubscribed) Open MPI's own blocking calls
# busy-poll unless told to yield; fsdp's waits back off by themselves.
export OMPI_MCA_mpi_yield_when_idle=${OMPI_MCA_mpi_yield_when_idle:-1}
# PMIx authenticates its clients with munge when libmunge is installed (SLURM's packages bring it)
# and retries a munge socket whose daemon is not running for 2.25 s before it falls back to its
# native check: that delay struck every mpiexec and every singleton start (2.3 s of 2.4 for
# `mpiexec -n 1 /bin/true`). A process talks PMIx only to the daemon on its own node, which the
# native check authenticates by the socket's credentials.
export PMIX_MCA_psec=${PMIX_MCA_psec:-native}
# Without an InfiniBand or Omni-Path device, Open MPI's ofi and psm2 components cannot move a
# byte, yet opening them loads libpsm2, whose initialisation sleeps about 0.1 s in every process
# (`mpiexec -n 2 fsdp-solve --version`: 0.31 s with them, 0.12 s without). pml ob1 never opens the
# mtl components; ob1 over shared memory and TCP is what Open MPI picks there anyway. The tools
# apply the same rule themselves (apps/common/mpi_start.hpp).
if [ ! -e /dev/infiniband ] && [ ! -e /dev/hfi1_0 ] && [ ! -e /dev/ipath0 ]; then
  export OMPI_MCA_pml=${OMPI_MCA_pml:-ob1}
  export OMPI_MCA_btl=${OMPI_MCA_btl:-^ofi}
fi
