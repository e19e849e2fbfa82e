// What the launcher (Open MPI's mpirun, Slurm's srun, any PMI launcher) tells
// a process about its job through the environment, read in this one place:
// how many ranks it started, how many share this machine, and this rank's
// index among them (its GPU). A process started directly is a job of one.
#ifndef TETRA_COMM_LAUNCHER_H_
#define TETRA_COMM_LAUNCHER_H_

namespace tetra {

// Ranks in the job (OMPI_COMM_WORLD_SIZE, PMI_SIZE or SLURM_NTASKS), 1 when
// run directly.
int LaunchedWorldSize();
// This process's rank in the job (OMPI_COMM_WORLD_RANK, PMI_RANK or
// SLURM_PROCID), 0 when run directly.
int LaunchedRank();
// Ranks on this machine, which share its cores and memory
// (OMPI_COMM_WORLD_LOCAL_SIZE or SLURM_NTASKS_PER_NODE), 1 when run directly.
int RanksOnThisMachine();
// This rank's index among them (OMPI_COMM_WORLD_LOCAL_RANK or SLURM_LOCALID),
// 0 when run directly: the GPU it uses.
int LocalRank();

}  // namespace tetra

#endif  // TETRA_COMM_LAUNCHER_H_
