"""comm_check.py: a third-party MPI client (mpi4py, which calls the installed
MPI's C functions) running barriers on MPI_COMM_WORLD, a duplicate of it and
its parity halves (Split), interleaved, with a communicator freed and made
again, and checking on the shared CLOCK_MONOTONIC that no member left
barrier k of a communicator before every member had entered it.

    python3 comm_check.py [ROUNDS]

Rank 0 prints "comm_check.py: OK ..." and exits 0, or the violation and 1.
"""
import random
import sys
import time

from mpi4py import MPI

world = MPI.COMM_WORLD
rank, size = world.Get_rank(), world.Get_size()
rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 50
random.seed(rank)


def leader(comm):
    """The world rank of the communicator's rank 0."""
    return MPI.Group.Translate_ranks(comm.Get_group(), [0], world.Get_group())[0]


dup = world.Dup()
halves = world.Split(rank % 2, rank)
records = []  # (round, slot, leader, enter, leave)
for k in range(rounds):
    if k and k % 10 == 0:
        dup.Free()
        dup = world.Dup()
    for slot, comm in enumerate((world, dup, halves)):
        if random.random() < 0.25:
            time.sleep(random.random() * 1e-4)
        enter = time.clock_gettime(time.CLOCK_MONOTONIC)
        comm.Barrier()
        records.append((k, slot, leader(comm), enter, time.clock_gettime(time.CLOCK_MONOTONIC)))
dup.Free()
halves.Free()

gathered = world.gather(records, root=0)
status = 0
if rank == 0:
    barriers = {}
    for per_rank in gathered:
        for k, slot, lead, enter, leave in per_rank:
            barriers.setdefault((k, slot, lead), []).append((enter, leave))
    violations = [key for key, times in barriers.items() if min(l for _, l in times) < max(e for e, _ in times)]
    if violations:
        print(f"comm_check.py: FAILED {len(violations)} violations, first {sorted(violations)[:5]}")
        status = 1
    else:
        print(f"comm_check.py: OK {size} ranks, {rounds} rounds, {len(barriers)} barriers checked")
    sys.stdout.flush()
MPI.Finalize()
sys.exit(status)
