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
