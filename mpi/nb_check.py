"""nb_check.py: nonblocking collectives from a third-party MPI client
(mpi4py, which calls the installed MPI's C functions): comm.Ibarrier,
comm.Iallreduce, comm.Ibcast and comm.Ireduce on MPI_COMM_WORLD, a
duplicate and its parity halves (comm.Split), each through mcd from its
first call (the interposer makes a communicator's mcd state in its
constructor), several in flight with an Irecv/Isend ring in one
MPI.Request.Waitall, results checked, and the blocking comm.Allreduce
(also in place), comm.Bcast and comm.Reduce after them; then computing with nothing called
while an Ibarrier and an Iallreduce complete, found complete by one
MPI.Request.Testall.

    python3 nb_check.py [ROUNDS]

Every rank prints "nb_check.py: rank R: N checks, W wrong"; exits 1 if any
was wrong.
"""
import math
import sys
import time

from array import array
from mpi4py import MPI

world = MPI.COMM_WORLD
rank, size = world.Get_rank(), world.Get_size()
rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 10
checks = wrong = 0


def expect(ok, what):
    global checks, wrong
    checks += 1
    if not ok:
        wrong += 1
        print(f"nb_check.py: rank {rank}: {what}", file=sys.stderr, flush=True)


comms = [world, world.Dup(), world.Split(rank % 2, rank)]
for r in range(rounds):
    for c, comm in enumerate(comms):
        cs, cr = comm.Get_size(), comm.Get_rank()
        total = array("q", [0, 0])
        data = array("d", [r + i for i in range(4)] if cr == r % cs else [0.0] * 4)
        mx = array("i", [0])
        got = array("i", [-1])
        reqs = [
            comm.Ibarrier(),
            comm.Iallreduce(array("q", [cr + r, 1]), total, op=MPI.SUM),
            comm.Irecv(got, source=(cr - 1) % cs, tag=r),
            comm.Ibcast(data, root=r % cs),
            comm.Ireduce(array("i", [cr * 3]), mx, op=MPI.MAX, root=0),
            comm.Isend(array("i", [100 * r + cr]), dest=(cr + 1) % cs, tag=r),
        ]
        MPI.Request.Waitall(reqs)
        expect(list(total) == [cs * (cs - 1) // 2 + cs * r, cs], f"Iallreduce on comm {c}: {total}")
        expect(list(data) == [r, r + 1, r + 2, r + 3], f"Ibcast on comm {c}: {data}")
        expect(cr != 0 or mx[0] == 3 * (cs - 1), f"Ireduce on comm {c}: {mx}")
        expect(got[0] == 100 * r + (cr - 1) % cs, f"the ring on comm {c}: {got}")
        # The blocking forms, each root changing with the round.
        total = array("q", [0, 0])
        comm.Allreduce(array("q", [cr + r, 1]), total, op=MPI.SUM)
        expect(list(total) == [cs * (cs - 1) // 2 + cs * r, cs], f"Allreduce on comm {c}: {total}")
        high = array("d", [float(cr), -float(cr)])
        comm.Allreduce(MPI.IN_PLACE, high, op=MPI.MAX)
        expect(list(high) == [float(cs - 1), 0.0], f"Allreduce in place on comm {c}: {high}")
        root = (r + 1) % cs
        data = array("i", [7 * r + i for i in range(5)] if cr == root else [-1] * 5)
        comm.Bcast(data, root=root)
        expect(list(data) == [7 * r + i for i in range(5)], f"Bcast from {root} on comm {c}: {data}")
        product = array("q", [-1])
        comm.Reduce(array("q", [cr + 1]), product, op=MPI.PROD, root=(r + 2) % cs)
        expect(cr != (r + 2) % cs or product[0] == math.factorial(cs), f"Reduce to {(r + 2) % cs} on comm {c}: {product}")
# Progress while computing, no MPI call.
total = array("q", [0])
reqs = [world.Ibarrier(), world.Iallreduce(array("q", [1]), total, op=MPI.SUM)]
until = time.monotonic() + 0.5
while time.monotonic() < until:
    pass
expect(MPI.Request.Testall(reqs), "not complete after computing")
MPI.Request.Waitall(reqs)
expect(total[0] == size, f"the sum after computing: {total}")
print(f"nb_check.py: rank {rank}: {checks} checks, {wrong} wrong", flush=True)
for comm in comms[1:]:
    comm.Free()
sys.exit(1 if wrong else 0)
