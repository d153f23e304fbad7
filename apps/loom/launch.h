// `loom launch -n N [--hostfile FILE] -- COMMAND ARGS...`: runs `loom COMMAND ARGS...` as N
// processes through OpenMPI's mpirun (oversubscribing cores when N exceeds them, and allowed
// to run as root). Plain `mpirun -np N loom train ...` (or srun) works just as well.
#pragma once

namespace loom::cli {

int launch(int argc, char** argv);  // argc/argv after "launch"; returns only on error

}  // namespace loom::cli
