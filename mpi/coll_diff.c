/* coll_diff: a differential test of the interposer's collectives against
 * the MPI's own (issue 28). An ordinary MPI program (no mcd header): it
 * runs a seeded random sequence of MPI_Allreduce, MPI_Reduce and MPI_Bcast
 * calls, each followed by the same PMPI_ call on copies of the same
 * inputs, and compares the two results.
 *
 *   coll_diff SEED CALLS [MODE] [MAX_BYTES]
 *
 * MODE: "all" (default), "pairs-bcast" (broadcasts of the pair types
 * only, the same type on every rank) or "mixed" (every call mixes types of the same signature
 * across ranks, e.g. 2 x contiguous(3, MPI_INT) at one rank and 6 x MPI_INT
 * at another, which MPI allows) or "mismatch" (first two erroneous calls on
 * MPI_COMM_WORLD, allreduces whose count differs across ranks, with a right
 * one between them, then one whose operation and one whose type (of the
 * same size) differ across ranks, each rank printing what the five
 * returned; then
 * broadcasts whose root differs across ranks, each followed by a right
 * allreduce, every rank failing exactly once per broadcast; then as "all") or "nonblocking" (as "all", every call in its nonblocking form,
 * MPI_Iallreduce, MPI_Ireduce or MPI_Ibcast, started after an MPI_Ibarrier
 * on the same communicator, the two completed together by MPI_Wait,
 * MPI_Waitall, MPI_Testall, MPI_Waitany, MPI_Waitsome or MPI_Test, drawn
 * per call; no blocking call first: each communicator's first nonblocking
 * collective goes through mcd). MAX_BYTES: the largest call in bytes
 * (default 2048; set it beyond MCD_MPI_MAX_BYTES to cross the size limit).
 *
 * Each call draws (from SEED, the same on every rank): the collective, a
 * communicator (MPI_COMM_WORLD, a duplicate, a split by parity, a split
 * into halves with the ranks reversed, MPI_COMM_SELF, a create over the
 * world's ranks reversed, an idup, an inter-communicator between the parity
 * halves merged, a split by type; "all" only the first five; each rank
 * prints "coll_diff: communicators at rank R: NAME SIZE:RANK ..."), a type family (every predefined
 * type, the pair types, and derived ones: contiguous, vector, resized,
 * struct with its fields in reverse order; both MPIs refuse predefined
 * operations on derived types, so these are broadcast only), an operation
 * that applies to it, a count (0 to MAX_BYTES), a root and whether in place. In "all" one
 * call in four, and in "mixed" every call, lets each rank pick its own type
 * of the family's signature. The data is drawn per rank.
 *
 * Checks: every data field equal to PMPI's (bitwise for broadcasts; exact
 * for integer, logical and bitwise operations and MIN/MAX/MINLOC/MAXLOC,
 * whose inputs have no NaN; relative 1e-4 (float) or 1e-10 for float sums
 * and products), every other byte of the receive buffer (gaps inside
 * elements, bytes beyond the count) equal to PMPI's buffer, which starts
 * the same, send buffers unchanged, every rank's allreduce result the same
 * bits, and both calls return MPI_SUCCESS.
 * Last, MPI_Allgather and MPI_Gather on every communicator (small ones
 * through mcd, larger ones to PMPI), each compared byte for byte with
 * PMPI's.
 * Every rank prints "coll_diff: rank R: N calls, W wrong" (and the first
 * wrong ones), then exits 0, or 1 if anything was wrong. */
#include <mpi.h>
#include <complex.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <wchar.h>

/* ---- randomness: splitmix64 ---- */
typedef struct { uint64_t s; } rng;
static uint64_t next(rng *r) {
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}
static int below(rng *r, int n) { return n <= 0 ? 0 : (int)(next(r) % (uint64_t)n); }

/* ---- field kinds ---- */
enum kind { I8, U8, I16, U16, I32, U32, I64, U64, F32, F64, LD, BOOL, BYTE, CF, CD, CHAR, WCHAR };
static int kind_size(enum kind k) {
    switch (k) {
    case I8: case U8: case BOOL: case BYTE: case CHAR: return 1;
    case I16: case U16: return 2;
    case I32: case U32: case F32: return 4;
    case I64: case U64: case F64: case CF: return 8;
    case CD: return 16;
    case LD: return sizeof(long double);
    case WCHAR: return sizeof(wchar_t);
    }
    return 0;
}
/* Bytes of a field that carry its value (x86's long double: 10 of 16). */
static int kind_bytes(enum kind k) { return k == LD ? 10 : kind_size(k); }
static int is_float(enum kind k) { return k == F32 || k == F64 || k == LD || k == CF || k == CD; }

/* ---- operations ---- */
enum { SUM, PROD, MIN, MAX, LAND, LOR, LXOR, BAND, BOR, BXOR, MINLOC, MAXLOC, NOPS };
static const char *op_name[NOPS] = {"SUM", "PROD", "MIN", "MAX", "LAND", "LOR", "LXOR", "BAND", "BOR", "BXOR", "MINLOC", "MAXLOC"};
static MPI_Op op_handle(int op) {
    MPI_Op ops[NOPS] = {MPI_SUM, MPI_PROD, MPI_MIN, MPI_MAX, MPI_LAND, MPI_LOR, MPI_LXOR, MPI_BAND, MPI_BOR, MPI_BXOR, MPI_MINLOC, MPI_MAXLOC};
    return ops[op];
}
#define B(o) (1u << (o))
#define OPS_INT (B(SUM) | B(PROD) | B(MIN) | B(MAX) | B(LAND) | B(LOR) | B(LXOR) | B(BAND) | B(BOR) | B(BXOR))
#define OPS_FLOAT (B(SUM) | B(PROD) | B(MIN) | B(MAX))
#define OPS_BYTE (B(BAND) | B(BOR) | B(BXOR))
#define OPS_BOOL (B(LAND) | B(LOR) | B(LXOR))
#define OPS_COMPLEX (B(SUM) | B(PROD))
#define OPS_PAIR (B(MINLOC) | B(MAXLOC))

/* ---- types: a family is a signature unit; its members are types whose
 * signatures are whole numbers of units ---- */
typedef struct {
    const char *name;
    MPI_Datatype type;
    int units;            /* signature units per element */
    unsigned ops;         /* operations that apply */
    int nfields;
    int off[6];
    enum kind kind[6];
    MPI_Aint extent;
} member;
typedef struct {
    const char *name;
    int pair; /* a predefined pair type's family */
    int n;
    member m[5];
} family;

#define MAXFAM 40
static family fams[MAXFAM];
static int nfams;

static member named(const char *name, MPI_Datatype t, unsigned ops, enum kind k) {
    member m = {name, t, 1, ops, 1, {0}, {k}, 0};
    return m;
}
static void add_family(const char *name, int pair, member m) {
    family *f = &fams[nfams++];
    f->name = name;
    f->pair = pair;
    f->n = 1;
    f->m[0] = m;
}
static void add_member(member m) {
    family *f = &fams[nfams - 1];
    f->m[f->n++] = m;
}

/* A pair type's member: value of kind `k` at 0, int at `int_off`. */
static member pair_member(const char *name, MPI_Datatype t, enum kind k, int int_off) {
    member m = {name, t, 1, OPS_PAIR, 2, {0, int_off}, {k, I32}, 0};
    return m;
}

static void make_types(void) {
    add_family("char", 0, named("MPI_CHAR", MPI_CHAR, 0, CHAR));
    add_family("signed_char", 0, named("MPI_SIGNED_CHAR", MPI_SIGNED_CHAR, OPS_INT, I8));
    add_family("unsigned_char", 0, named("MPI_UNSIGNED_CHAR", MPI_UNSIGNED_CHAR, OPS_INT, U8));
    add_family("byte", 0, named("MPI_BYTE", MPI_BYTE, OPS_BYTE, BYTE));
    add_family("wchar", 0, named("MPI_WCHAR", MPI_WCHAR, 0, WCHAR));
    add_family("short", 0, named("MPI_SHORT", MPI_SHORT, OPS_INT, I16));
    add_family("unsigned_short", 0, named("MPI_UNSIGNED_SHORT", MPI_UNSIGNED_SHORT, OPS_INT, U16));
    /* int: with derived types and MPI_2INT of the same signature unit. */
    add_family("int", 0, named("MPI_INT", MPI_INT, OPS_INT, I32));
    {
        MPI_Datatype contig3, resized, reversed;
        MPI_Type_contiguous(3, MPI_INT, &contig3);
        MPI_Type_commit(&contig3);
        member c = {"contiguous(3,MPI_INT)", contig3, 3, 0, 3, {0, 4, 8}, {I32, I32, I32}, 0};
        add_member(c);
        MPI_Type_create_resized(MPI_INT, 0, 8, &resized);
        MPI_Type_commit(&resized);
        member r = {"resized(MPI_INT,0,8)", resized, 1, 0, 1, {0}, {I32}, 0};
        add_member(r);
        int lens[2] = {1, 1};
        MPI_Aint disp[2] = {4, 0};
        MPI_Datatype types[2] = {MPI_INT, MPI_INT};
        MPI_Type_create_struct(2, lens, disp, types, &reversed);
        MPI_Type_commit(&reversed);
        member s = {"struct{int@4,int@0}", reversed, 2, 0, 2, {4, 0}, {I32, I32}, 0};
        add_member(s);
        member two = {"MPI_2INT", MPI_2INT, 2, OPS_PAIR, 2, {0, 4}, {I32, I32}, 0};
        add_member(two);
    }
    add_family("unsigned", 0, named("MPI_UNSIGNED", MPI_UNSIGNED, OPS_INT, U32));
    add_family("long", 0, named("MPI_LONG", MPI_LONG, OPS_INT, sizeof(long) == 8 ? I64 : I32));
    add_family("unsigned_long", 0, named("MPI_UNSIGNED_LONG", MPI_UNSIGNED_LONG, OPS_INT, sizeof(long) == 8 ? U64 : U32));
    add_family("long_long", 0, named("MPI_LONG_LONG", MPI_LONG_LONG, OPS_INT, I64));
    add_family("unsigned_long_long", 0, named("MPI_UNSIGNED_LONG_LONG", MPI_UNSIGNED_LONG_LONG, OPS_INT, U64));
    add_family("int8", 0, named("MPI_INT8_T", MPI_INT8_T, OPS_INT, I8));
    add_family("uint8", 0, named("MPI_UINT8_T", MPI_UINT8_T, OPS_INT, U8));
    add_family("int16", 0, named("MPI_INT16_T", MPI_INT16_T, OPS_INT, I16));
    add_family("uint16", 0, named("MPI_UINT16_T", MPI_UINT16_T, OPS_INT, U16));
    add_family("int32", 0, named("MPI_INT32_T", MPI_INT32_T, OPS_INT, I32));
    add_family("uint32", 0, named("MPI_UINT32_T", MPI_UINT32_T, OPS_INT, U32));
    add_family("int64", 0, named("MPI_INT64_T", MPI_INT64_T, OPS_INT, I64));
    add_family("uint64", 0, named("MPI_UINT64_T", MPI_UINT64_T, OPS_INT, U64));
    add_family("float", 0, named("MPI_FLOAT", MPI_FLOAT, OPS_FLOAT, F32));
    /* double: with a vector (gaps) of the same unit. */
    add_family("double", 0, named("MPI_DOUBLE", MPI_DOUBLE, OPS_FLOAT, F64));
    {
        MPI_Datatype vec;
        MPI_Type_vector(2, 1, 2, MPI_DOUBLE, &vec);
        MPI_Type_commit(&vec);
        member v = {"vector(2,1,2,MPI_DOUBLE)", vec, 2, 0, 2, {0, 16}, {F64, F64}, 0};
        add_member(v);
    }
    add_family("long_double", 0, named("MPI_LONG_DOUBLE", MPI_LONG_DOUBLE, OPS_FLOAT, LD));
    add_family("c_bool", 0, named("MPI_C_BOOL", MPI_C_BOOL, OPS_BOOL, BOOL));
    add_family("c_float_complex", 0, named("MPI_C_FLOAT_COMPLEX", MPI_C_FLOAT_COMPLEX, OPS_COMPLEX, CF));
    add_family("c_double_complex", 0, named("MPI_C_DOUBLE_COMPLEX", MPI_C_DOUBLE_COMPLEX, OPS_COMPLEX, CD));
    /* The pair types (gaps: extent > size for most). */
    struct { float v; int i; } fi;
    struct { double v; int i; } di;
    struct { long v; int i; } li;
    struct { short v; int i; } si;
    struct { long double v; int i; } ldi;
    add_family("float_int", 1, pair_member("MPI_FLOAT_INT", MPI_FLOAT_INT, F32, (int)((char *)&fi.i - (char *)&fi)));
    add_family("double_int", 1, pair_member("MPI_DOUBLE_INT", MPI_DOUBLE_INT, F64, (int)((char *)&di.i - (char *)&di)));
    {
        /* The same signature as a struct of our own. */
        int lens[2] = {1, 1};
        MPI_Aint disp[2] = {0, (char *)&di.i - (char *)&di};
        MPI_Datatype types[2] = {MPI_DOUBLE, MPI_INT}, t, r;
        MPI_Type_create_struct(2, lens, disp, types, &t);
        MPI_Type_create_resized(t, 0, sizeof di, &r);
        MPI_Type_commit(&r);
        MPI_Type_free(&t);
        member s = pair_member("struct{double,int}", r, F64, (int)disp[1]);
        s.ops = 0; /* MINLOC needs the predefined pair type */
        add_member(s);
    }
    add_family("long_int", 1, pair_member("MPI_LONG_INT", MPI_LONG_INT, sizeof(long) == 8 ? I64 : I32, (int)((char *)&li.i - (char *)&li)));
    add_family("short_int", 1, pair_member("MPI_SHORT_INT", MPI_SHORT_INT, I16, (int)((char *)&si.i - (char *)&si)));
    add_family("long_double_int", 1, pair_member("MPI_LONG_DOUBLE_INT", MPI_LONG_DOUBLE_INT, LD, (int)((char *)&ldi.i - (char *)&ldi)));
    add_family("2int", 1, pair_member("MPI_2INT", MPI_2INT, I32, 4));
    for (int f = 0; f < nfams; f++)
        for (int i = 0; i < fams[f].n; i++) {
            MPI_Aint lb;
            MPI_Type_get_extent(fams[f].m[i].type, &lb, &fams[f].m[i].extent);
        }
}

/* ---- data ---- */
static void put_int(char *p, enum kind k, long long v) {
    switch (k) {
    case I8: case U8: case BYTE: case BOOL: case CHAR: { int8_t x = (int8_t)v; memcpy(p, &x, 1); break; }
    case I16: case U16: { int16_t x = (int16_t)v; memcpy(p, &x, 2); break; }
    case I32: case U32: { int32_t x = (int32_t)v; memcpy(p, &x, 4); break; }
    case I64: case U64: { int64_t x = v; memcpy(p, &x, 8); break; }
    case WCHAR: { wchar_t x = (wchar_t)v; memcpy(p, &x, sizeof x); break; }
    default: break;
    }
}
static void put_float(char *p, enum kind k, double v) {
    if (k == F32) { float x = (float)v; memcpy(p, &x, 4); }
    else if (k == F64) memcpy(p, &v, 8);
    else if (k == LD) { long double x = v; memset(p, 0, sizeof x); memcpy(p, &x, 10); }
    else if (k == CF) { float x[2] = {(float)v, (float)(v * 0.5 - 1)}; memcpy(p, x, 8); }
    else if (k == CD) { double x[2] = {v, v * 0.5 - 1}; memcpy(p, x, 16); }
}

/* A random value of kind `k` for operation `op` (-1: a broadcast). */
static void gen_field(char *p, enum kind k, int op, int field, rng *r) {
    if (op < 0) { /* any bits (long double: its value bytes) */
        for (int i = 0; i < kind_bytes(k); i++) p[i] = (char)next(r);
        return;
    }
    if (op == MINLOC || op == MAXLOC) { /* few distinct values: ties */
        if (field == 1) put_int(p, I32, below(r, 1000));
        else if (is_float(k)) put_float(p, k, below(r, 5) - 2);
        else put_int(p, k, below(r, 5) - 2);
        return;
    }
    if (is_float(k)) {
        double v;
        if (op == PROD) v = (0.5 + below(r, 1 << 20) / (double)(1 << 20) * 1.5) * (below(r, 2) ? 1 : -1);
        else if (op == SUM) v = (below(r, 1 << 24) - (1 << 23)) / (double)(1 << 20);
        else v = (below(r, 2000) - 1000) / 8.0 + 0.0625; /* MIN/MAX: no NaN, no zero */
        put_float(p, k, v);
        return;
    }
    int bytes = kind_size(k), sig = !(k == U8 || k == U16 || k == U32 || k == U64 || k == BYTE);
    long long v;
    switch (op) {
    case SUM: v = bytes == 1 ? below(r, 31) - 15 : bytes == 2 ? below(r, 2001) - 1000 : (long long)(next(r) >> 40) - (1LL << 23); break;
    case PROD: v = bytes == 1 ? 1 + below(r, 2) : below(r, 15) - 7; break;
    case LAND: case LOR: case LXOR: v = below(r, 4) == 0 ? 0 : below(r, 3); break;
    default: v = (long long)next(r); break; /* MIN/MAX and bitwise: any bits */
    }
    if (!sig && (op == SUM || op == PROD) && v < 0) v = -v;
    /* Unsigned MIN/MAX: the top bit clear. Both MPIs compare some unsigned
     * types as signed (this test found Open MPI 4.1 on 64-bit ones and
     * MPICH 4.0 on 32- and 64-bit ones returning the signed minimum), so
     * PMPI is no reference there; mcd compares them as unsigned. */
    if (!sig && (op == MIN || op == MAX)) v = (long long)((unsigned long long)v & ((bytes == 8 ? ~0ULL : (1ULL << (8 * bytes)) - 1) >> 1));
    if (k == BOOL) v = v != 0;
    put_int(p, k, v);
}

/* Whether two values of kind `k` agree for `op`; `what` gets a description. */
static int same_field(const char *a, const char *b, enum kind k, int op, char *what, size_t n) {
    if (!memcmp(a, b, kind_bytes(k))) return 1;
    if (op < 0 || !is_float(k) || op == MIN || op == MAX || op == MINLOC || op == MAXLOC) {
        if (is_float(k) && op >= 0) { /* by value: -0 == 0 */
            double x = 0, y = 0;
            if (k == F32) { float u, v; memcpy(&u, a, 4); memcpy(&v, b, 4); x = u, y = v; }
            else if (k == F64) { memcpy(&x, a, 8); memcpy(&y, b, 8); }
            else if (k == LD) { long double u, v; memcpy(&u, a, sizeof u); memcpy(&v, b, sizeof v); x = (double)u, y = (double)v; }
            if (x == y) return 1;
            snprintf(what, n, "%.17g, PMPI %.17g", x, y);
            return 0;
        }
        if (!memcmp(a, b, kind_bytes(k))) return 1;
        int m = snprintf(what, n, "bytes");
        for (int i = 0; i < kind_bytes(k) && m < (int)n - 8; i++) m += snprintf(what + m, n - m, " %02x", (unsigned char)a[i]);
        m += snprintf(what + m, n - m, ", PMPI");
        for (int i = 0; i < kind_bytes(k) && m < (int)n - 8; i++) m += snprintf(what + m, n - m, " %02x", (unsigned char)b[i]);
        return 0;
    }
    /* float sums and products: relative tolerance, per component */
    double tol = (k == F32 || k == CF) ? 1e-4 : 1e-10;
    int parts = (k == CF || k == CD) ? 2 : 1;
    for (int c = 0; c < parts; c++) {
        double x, y;
        if (k == F32 || k == CF) { float u, v; memcpy(&u, a + 4 * c, 4); memcpy(&v, b + 4 * c, 4); x = u, y = v; }
        else if (k == F64 || k == CD) { memcpy(&x, a + 8 * c, 8); memcpy(&y, b + 8 * c, 8); }
        else { long double u, v; memcpy(&u, a, sizeof u); memcpy(&v, b, sizeof v); x = (double)u, y = (double)v; }
        double scale = fabs(y) > 1 ? fabs(y) : 1;
        if (!(fabs(x - y) <= tol * scale)) {
            snprintf(what, n, "%.17g, PMPI %.17g", x, y);
            return 0;
        }
    }
    return 1;
}

/* A hash of the data fields of `count` elements of `m` at `buf`. */
static uint64_t fields_hash(const member *m, int count, const char *buf) {
    uint64_t h = 0xcbf29ce484222325ULL;
    for (int i = 0; i < count; i++)
        for (int f = 0; f < m->nfields; f++) {
            const unsigned char *p = (const unsigned char *)buf + (size_t)i * m->extent + m->off[f];
            for (int b = 0; b < kind_bytes(m->kind[f]); b++) h = (h ^ p[b]) * 0x100000001b3ULL;
        }
    return h;
}

/* Completes the two requests of a nonblocking call with form `form`. */
static int complete2(int form, MPI_Request reqs[2]) {
    MPI_Status st[2];
    int rc = MPI_SUCCESS, flag = 0, index, outcount, indices[2], left = 2;
    switch (form) {
    case 0:
        rc = MPI_Wait(&reqs[1], &st[1]);
        if (rc == MPI_SUCCESS) rc = MPI_Wait(&reqs[0], &st[0]);
        break;
    case 1:
        rc = MPI_Waitall(2, reqs, st);
        break;
    case 2:
        while (rc == MPI_SUCCESS && !flag) rc = MPI_Testall(2, reqs, &flag, st);
        break;
    case 3:
        while (rc == MPI_SUCCESS && left--) rc = MPI_Waitany(2, reqs, &index, &st[0]);
        break;
    case 4:
        while (rc == MPI_SUCCESS && left > 0) {
            rc = MPI_Waitsome(2, reqs, &outcount, indices, st);
            if (outcount == MPI_UNDEFINED) break;
            left -= outcount;
        }
        break;
    default:
        for (int i = 1; i >= 0 && rc == MPI_SUCCESS; i--) {
            flag = 0;
            while (rc == MPI_SUCCESS && !flag) rc = MPI_Test(&reqs[i], &flag, &st[0]);
        }
        break;
    }
    return rc;
}

/* ---- one call ---- */
enum { ALLREDUCE, REDUCE, BCAST };
static const char *coll_name[] = {"MPI_Allreduce", "MPI_Reduce", "MPI_Bcast"};
enum { C_WORLD, C_DUP, C_PARITY, C_HALVES, C_SELF, C_CREATE, C_IDUP, C_MERGED, C_SHARED, C_CART, C_GRAPH, C_DIST_GRAPH, C_CREATE_GROUP, NCOMMS };
static const char *comm_name[] = {"world",      "dup",        "parity-split",      "reversed-halves-split", "self",
                                  "reversed-create", "idup",   "merged-intercomm",  "split-type-shared",     "cart-ring",
                                  "graph-ring", "dist-graph-ring", "parity-create-group"};

static long wrong, printed;
static int rank;

static void report(long call, const char *fmt, const char *desc, const char *detail) {
    wrong++;
    if (printed++ < 12) fprintf(stderr, "coll_diff: rank %d: call %ld: %s: %s%s%s\n", rank, call, desc, fmt, *detail ? ": " : "", detail);
}

/* Compares a receive buffer `a` (the interposed call's) with `b` (PMPI's)
 * over `cap` bytes: fields of the first `count` elements of `m` by value,
 * every other byte exactly. */
static void compare(long call, const char *desc, const member *m, int count, const char *a, const char *b, size_t cap, int op) {
    char *is_field = calloc(cap, 1);
    char what[256];
    for (int i = 0; i < count; i++)
        for (int f = 0; f < m->nfields; f++) {
            size_t at = (size_t)i * m->extent + m->off[f];
            memset(is_field + at, 1, kind_size(m->kind[f]));
            if (!same_field(a + at, b + at, m->kind[f], op, what, sizeof what)) {
                char where[64];
                snprintf(where, sizeof where, "element %d field %d", i, f);
                report(call, where, desc, what);
                free(is_field);
                return;
            }
        }
    for (size_t i = 0; i < cap; i++)
        if (!is_field[i] && a[i] != b[i]) {
            snprintf(what, sizeof what, "0x%02x, PMPI 0x%02x", (unsigned char)a[i], (unsigned char)b[i]);
            char where[64];
            snprintf(where, sizeof where, "byte %zu (not data) differs", i);
            report(call, where, desc, what);
            break;
        }
    free(is_field);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    /* Whole lines per write (the tests read each rank's output from a
     * file of its own: MpiRun::output_per_rank). */
    setvbuf(stdout, NULL, _IOLBF, 1 << 14);
    if (argc < 3) {
        if (rank == 0) fprintf(stderr, "usage: coll_diff SEED CALLS [all|pairs-bcast|mixed|mismatch|nonblocking] [MAX_BYTES]\n");
        MPI_Finalize();
        return 2;
    }
    uint64_t seed = strtoull(argv[1], NULL, 0);
    long calls = atol(argv[2]);
    const char *mode = argc > 3 ? argv[3] : "all";
    long max_bytes = argc > 4 ? atol(argv[4]) : 2048;
    int pairs_only = !strcmp(mode, "pairs-bcast"), all_mixed = !strcmp(mode, "mixed"), nonblocking = !strcmp(mode, "nonblocking");
    make_types();

    MPI_Comm comms[NCOMMS];
    comms[C_WORLD] = MPI_COMM_WORLD;
    MPI_Comm_dup(MPI_COMM_WORLD, &comms[C_DUP]);
    MPI_Comm_split(MPI_COMM_WORLD, rank % 2, rank, &comms[C_PARITY]);
    MPI_Comm_split(MPI_COMM_WORLD, rank < size / 2, -rank, &comms[C_HALVES]);
    comms[C_SELF] = MPI_COMM_SELF;
    /* The other constructors: a create over the world's ranks in reverse
     * order, an idup, the merge of an inter-communicator between the
     * parity halves (the odd ranks first), a split by type (shared memory:
     * as the MPI sees the virtual cluster's hosts). */
    MPI_Group world_group, reversed;
    MPI_Comm_group(MPI_COMM_WORLD, &world_group);
    int *order = malloc(sizeof(int) * (size_t)size);
    for (int i = 0; i < size; i++) order[i] = size - 1 - i;
    MPI_Group_incl(world_group, size, order, &reversed);
    MPI_Comm_create(MPI_COMM_WORLD, reversed, &comms[C_CREATE]);
    MPI_Group_free(&reversed);
    MPI_Group_free(&world_group);
    free(order);
    MPI_Request idup;
    MPI_Comm_idup(MPI_COMM_WORLD, &comms[C_IDUP], &idup);
    MPI_Wait(&idup, MPI_STATUS_IGNORE);
    MPI_Comm inter;
    MPI_Intercomm_create(comms[C_PARITY], 0, MPI_COMM_WORLD, rank % 2 ? 0 : 1, 99, &inter);
    MPI_Intercomm_merge(inter, rank % 2 == 0, &comms[C_MERGED]);
    MPI_Comm_free(&inter);
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &comms[C_SHARED]);
    /* The topology constructors, each a ring of every rank (a periodic
     * 1-D Cartesian grid, a graph, a distributed graph of its neighbours),
     * and MPI_Comm_create_group, which only the group's members call: each
     * rank with its parity's ranks, highest first. */
    int dims[1] = {size}, periods[1] = {1};
    MPI_Cart_create(MPI_COMM_WORLD, 1, dims, periods, 0, &comms[C_CART]);
    int *index = malloc(sizeof(int) * (size_t)size), *edges = malloc(sizeof(int) * 2 * (size_t)size);
    for (int i = 0; i < size; i++) {
        index[i] = 2 * (i + 1);
        edges[2 * i] = (i + size - 1) % size;
        edges[2 * i + 1] = (i + 1) % size;
    }
    MPI_Graph_create(MPI_COMM_WORLD, size, index, edges, 0, &comms[C_GRAPH]);
    free(index), free(edges);
    /* (Weights of 1, not MPI_UNWEIGHTED: GCC takes Open MPI's marker
     * pointer for an empty array.) */
    int neighbours[2] = {(rank + size - 1) % size, (rank + 1) % size}, weights[2] = {1, 1};
    MPI_Dist_graph_create_adjacent(MPI_COMM_WORLD, 2, neighbours, weights, 2, neighbours, weights, MPI_INFO_NULL, 0, &comms[C_DIST_GRAPH]);
    MPI_Group all_ranks, same_parity;
    MPI_Comm_group(MPI_COMM_WORLD, &all_ranks);
    int *mates = malloc(sizeof(int) * (size_t)size), nmates = 0;
    for (int r = size - 1; r >= 0; r--)
        if (r % 2 == rank % 2) mates[nmates++] = r;
    MPI_Group_incl(all_ranks, nmates, mates, &same_parity);
    MPI_Comm_create_group(MPI_COMM_WORLD, same_parity, 7, &comms[C_CREATE_GROUP]);
    MPI_Group_free(&same_parity);
    MPI_Group_free(&all_ranks);
    free(mates);
    for (int c = 0; c < NCOMMS; c++) MPI_Comm_set_errhandler(comms[c], MPI_ERRORS_RETURN);
    /* The communicators the calls draw from: all but in "all", which keeps
     * the first five (its test reads every communicator's report lines on
     * stderr, and with nine, Open MPI's mpirun cut a line of rank 0's, whose
     * report then passed 4 KiB, with another rank's output). */
    int ncomms = strcmp(mode, "all") ? NCOMMS : C_SELF + 1;
    /* Each communicator's size and this rank's rank in it. */
    char line[1024];
    int at = snprintf(line, sizeof line, "coll_diff: communicators at rank %d:", rank);
    for (int c = 0; c < ncomms && at < (int)sizeof line; c++) {
        int csize, crank;
        MPI_Comm_size(comms[c], &csize);
        MPI_Comm_rank(comms[c], &crank);
        at += snprintf(line + at, sizeof line - (size_t)at, " %s %d:%d", comm_name[c], csize, crank);
    }
    if (at > (int)sizeof line - 2) at = (int)sizeof line - 2;
    line[at++] = '\n';
    fflush(stdout);
    fwrite(line, 1, (size_t)at, stdout);
    fflush(stdout);

    if (!strcmp(mode, "mismatch")) {
        /* Erroneous calls first: allreduces whose count differs across
         * ranks, with a right one between them. MPI promises nothing for
         * them; the interposer must fail them on every rank and serve every
         * later call. */
        int data[8] = {rank, rank, rank, rank, rank, rank, rank, rank}, sum = rank;
        int rc1 = MPI_Allreduce(MPI_IN_PLACE, data, rank == 0 ? 2 : 4, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        int rc2 = MPI_Allreduce(MPI_IN_PLACE, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        int rc3 = MPI_Allreduce(MPI_IN_PLACE, data, rank == size - 1 ? 8 : 3, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
        if (sum != size * (size - 1) / 2) wrong++;
        /* Then an operation and a type that differ across ranks, each
         * served by mcd where it is called, with the same count and bytes:
         * MPI_MAX at rank 0 where the others call MPI_SUM, and MPI_FLOAT at
         * the last rank where the others call MPI_INT. */
        int by_op[2] = {rank, 1}, by_type[2] = {rank, 1};
        int rc4 = MPI_Allreduce(MPI_IN_PLACE, by_op, 2, MPI_INT, rank == 0 ? MPI_MAX : MPI_SUM, MPI_COMM_WORLD);
        int rc5 = MPI_Allreduce(MPI_IN_PLACE, by_type, 2, rank == size - 1 ? MPI_FLOAT : MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        printf("coll_diff: rank %d: the calls returned %d %d %d %d %d\n", rank, rc1, rc2, rc3, rc4, rc5);
        /* Each failure's class, as MPI_Error_string tells it: a mismatch
         * has its own (the interposer's), not MPI_ERR_OTHER's. */
        int rcs[5] = {rc1, rc2, rc3, rc4, rc5};
        for (int i = 0; i < 5; i++) {
            if (rcs[i] == MPI_SUCCESS) continue;
            int cls, len;
            char text[MPI_MAX_ERROR_STRING];
            MPI_Error_class(rcs[i], &cls);
            MPI_Error_string(cls, text, &len);
            printf("coll_diff: rank %d: call %d failed: %s\n", rank, i + 1, text);
        }
        /* Then broadcasts whose root differs across ranks (rank r takes
         * root (r + k) % size: for k = 0 every rank is its own root), on
         * the world and on the duplicate, each followed by a right
         * allreduce on the same communicator. Each rank must get the
         * mismatch exactly once: from the broadcast, or (a rank whose
         * broadcast had returned before the mismatch showed: a root, or a
         * rank that had its root's data) from the allreduce after it, which
         * still runs and must be right. Then the random calls, compared
         * with PMPI's as in "all". */
        int bad_roots = 0;
        for (int k = 0; k < 2 * size; k++) {
            MPI_Comm comm = k % 2 ? comms[C_DUP] : MPI_COMM_WORLD;
            int buf[4] = {rank, rank, rank, rank}, one = 1;
            int rcb = MPI_Bcast(buf, 4, MPI_INT, (rank + k / 2) % size, comm);
            int rca = MPI_Allreduce(MPI_IN_PLACE, &one, 1, MPI_INT, MPI_SUM, comm);
            int cls = MPI_SUCCESS;
            MPI_Error_class(rcb != MPI_SUCCESS ? rcb : rca, &cls);
            if ((rcb == MPI_SUCCESS) == (rca == MPI_SUCCESS) || cls == MPI_ERR_OTHER || (rca == MPI_SUCCESS && one != size)) {
                printf("coll_diff: rank %d: broadcast %d from differing roots: bcast returned %d, the allreduce after %d (sum %d)\n", rank, k, rcb, rca, one);
                bad_roots++;
            }
        }
        printf("coll_diff: rank %d: %d broadcasts from differing roots, %d not failed exactly once\n", rank, 2 * size, bad_roots);
        wrong += bad_roots;
        fflush(stdout);
    }
    rng shared = {seed}, mine = {seed ^ (0x5851f42d4c957f2dULL * (uint64_t)(rank + 1))}, forms = {seed ^ 0x1234567ULL};
    long done = 0, by_coll[3] = {0}, by_comm[NCOMMS] = {0};
    for (long call = 0; call < calls; call++) {
        /* Drawn alike on every rank. */
        int coll = pairs_only ? BCAST : below(&shared, 3);
        int ci = below(&shared, ncomms);
        int fi;
        do fi = below(&shared, nfams);
        while (pairs_only && !fams[fi].pair);
        family *fam = &fams[fi];
        int op = -1;
        if (coll != BCAST) {
            unsigned ops = 0;
            for (int i = 0; i < fam->n; i++) ops |= fam->m[i].ops;
            if (!ops) coll = BCAST;
            else {
                do op = below(&shared, NOPS);
                while (!(ops & B(op)));
            }
        }
        /* The lead member (every rank's type unless mixed). */
        int lead;
        do lead = below(&shared, fam->n);
        while (op >= 0 && !(fam->m[lead].ops & B(op)));
        int unit_bytes = 0;
        PMPI_Type_size(fam->m[lead].type, &unit_bytes);
        unit_bytes /= fam->m[lead].units;
        long most = max_bytes / (unit_bytes * fam->m[lead].units);
        int r = below(&shared, 100);
        int n = r < 55 ? below(&shared, 9) : r < 80 ? below(&shared, 65) : below(&shared, (int)most + 1);
        if (n > most) n = (int)most;
        int units = n * fam->m[lead].units;
        int one_in_4 = below(&shared, 4) == 0, mixed = all_mixed || (one_in_4 && !pairs_only);
        MPI_Comm comm = comms[ci];
        int csize, crank;
        MPI_Comm_size(comm, &csize);
        MPI_Comm_rank(comm, &crank);
        int root = below(&shared, 1 << 20) % csize;
        int in_place = below(&shared, 3) == 0;

        /* This rank's type. */
        int mi = lead;
        if (mixed) {
            int options[5], k = 0;
            for (int i = 0; i < fam->n; i++)
                if ((op < 0 || (fam->m[i].ops & B(op))) && units % fam->m[i].units == 0) options[k++] = i;
            mi = options[below(&mine, k)];
        }
        member *m = &fam->m[mi];
        int count = units / m->units;
        size_t cap = (size_t)(count + 2) * m->extent + 16;
        char *in = malloc(cap), *send_a = malloc(cap), *send_b = malloc(cap), *recv_a = malloc(cap), *recv_b = malloc(cap);
        memset(in, 0x5a, cap);
        for (int i = 0; i < count; i++)
            for (int f = 0; f < m->nfields; f++) gen_field(in + (size_t)i * m->extent + m->off[f], m->kind[f], op, f, &mine);
        memcpy(send_a, in, cap);
        memcpy(send_b, in, cap);
        char desc[256];
        snprintf(desc, sizeof desc, "%s %d x %s%s%s root %d on %s%s", coll_name[coll], count, m->name, op >= 0 ? " " : "", op >= 0 ? op_name[op] : "",
                 root, comm_name[ci], in_place ? " in place" : "");
        int rc_a, rc_b, form = below(&forms, 6);
        MPI_Request reqs[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
        if (nonblocking) MPI_Ibarrier(comm, &reqs[0]);
        if (coll == BCAST) {
            if (crank == root) {
                memcpy(recv_a, in, cap);
                memcpy(recv_b, in, cap);
            } else {
                memset(recv_a, 0xa5, cap);
                memset(recv_b, 0xa5, cap);
            }
            if (nonblocking) {
                rc_a = MPI_Ibcast(recv_a, count, m->type, root, comm, &reqs[1]);
                if (rc_a == MPI_SUCCESS) rc_a = complete2(form, reqs);
            } else {
                rc_a = MPI_Bcast(recv_a, count, m->type, root, comm);
            }
            rc_b = PMPI_Bcast(recv_b, count, m->type, root, comm);
            if (crank == root && memcmp(recv_a, in, cap)) report(call, "the root's buffer changed", desc, "");
        } else {
            int here_in_place = in_place && (coll == ALLREDUCE || crank == root);
            if (here_in_place) {
                memcpy(recv_a, in, cap);
                memcpy(recv_b, in, cap);
            } else {
                memset(recv_a, 0xa5, cap);
                memset(recv_b, 0xa5, cap);
            }
            const void *sa = here_in_place ? MPI_IN_PLACE : send_a, *sb = here_in_place ? MPI_IN_PLACE : send_b;
            if (coll == ALLREDUCE) {
                if (nonblocking) {
                    rc_a = MPI_Iallreduce(sa, recv_a, count, m->type, op_handle(op), comm, &reqs[1]);
                    if (rc_a == MPI_SUCCESS) rc_a = complete2(form, reqs);
                } else {
                    rc_a = MPI_Allreduce(sa, recv_a, count, m->type, op_handle(op), comm);
                }
                rc_b = PMPI_Allreduce(sb, recv_b, count, m->type, op_handle(op), comm);
                /* The interposed result: the same bits on every rank. */
                uint64_t h = fields_hash(m, count, recv_a), lo = h, hi = h;
                PMPI_Allreduce(MPI_IN_PLACE, &lo, 1, MPI_UINT64_T, MPI_MIN, comm);
                PMPI_Allreduce(MPI_IN_PLACE, &hi, 1, MPI_UINT64_T, MPI_MAX, comm);
                if (lo != hi) report(call, "ranks got different bits", desc, "");
            } else {
                if (nonblocking) {
                    rc_a = MPI_Ireduce(sa, recv_a, count, m->type, op_handle(op), root, comm, &reqs[1]);
                    if (rc_a == MPI_SUCCESS) rc_a = complete2(form, reqs);
                } else {
                    rc_a = MPI_Reduce(sa, recv_a, count, m->type, op_handle(op), root, comm);
                }
                rc_b = PMPI_Reduce(sb, recv_b, count, m->type, op_handle(op), root, comm);
            }
            if (memcmp(send_a, in, cap)) report(call, "the send buffer changed", desc, "");
        }
        if (reqs[0] != MPI_REQUEST_NULL || reqs[1] != MPI_REQUEST_NULL) report(call, "a request left active", desc, "");
        if (rc_a != MPI_SUCCESS || rc_b != MPI_SUCCESS) {
            char detail[64];
            snprintf(detail, sizeof detail, "interposed %d, PMPI %d", rc_a, rc_b);
            report(call, "an error", desc, detail);
        } else {
            compare(call, desc, m, count, recv_a, recv_b, cap, op);
        }
        free(in), free(send_a), free(send_b), free(recv_a), free(recv_b);
        done++;
        by_coll[coll]++;
        by_comm[ci]++;
    }
    /* Gathers: MPI_Allgather and MPI_Gather (to a root that changes) on
     * every communicator, of 1, 2 and 5 MPI_INTs, 2 MPI_DOUBLE_INTs (a type
     * with gaps) and 300 MPI_BYTEs (beyond the interposer's gather limit on
     * 4 ranks), in place and not: each compared byte for byte (the whole
     * receive buffer, which starts the same) with PMPI's. The interposer
     * serves the small ones as a bitwise-or reduction and passes the rest
     * to PMPI; its report counts both. */
    long gathers = 0;
    for (int ci = 0; ci < ncomms; ci++) {
        MPI_Comm comm = comms[ci];
        int csize, crank;
        MPI_Comm_size(comm, &csize);
        MPI_Comm_rank(comm, &crank);
        struct { MPI_Datatype t; int count; const char *name; } cases[] = {
            {MPI_INT, 1, "MPI_INT"}, {MPI_INT, 2, "MPI_INT"}, {MPI_INT, 5, "MPI_INT"}, {MPI_DOUBLE_INT, 2, "MPI_DOUBLE_INT"}, {MPI_BYTE, 300, "MPI_BYTE"}};
        for (int c = 0; c < 5; c++)
            for (int in_place = 0; in_place < 2; in_place++)
                for (int allg = 0; allg < 2; allg++) {
                    MPI_Aint lb, extent;
                    MPI_Type_get_extent(cases[c].t, &lb, &extent);
                    size_t block = (size_t)cases[c].count * extent, cap = block * csize + 16;
                    unsigned char *send = malloc(block + 1), *a = malloc(cap), *b = malloc(cap);
                    for (size_t i = 0; i < block; i++) send[i] = (unsigned char)(next(&mine) | 1);
                    /* A pair's gap (bytes 12-15 of a double and an int)
                     * as the receive buffers' (an MPI may copy it or not). */
                    if (cases[c].t == MPI_DOUBLE_INT)
                        for (size_t i = 0; i < block; i++)
                            if (i % (size_t)extent >= sizeof(double) + sizeof(int)) send[i] = 0x5a;
                    memset(a, 0x5a, cap);
                    memset(b, 0x5a, cap);
                    int root = (ci + c) % csize, here = allg || crank == root;
                    int ip = in_place && here;
                    if (ip) {
                        memcpy(a + (size_t)crank * block, send, block);
                        memcpy(b + (size_t)crank * block, send, block);
                    }
                    const void *sa = ip ? MPI_IN_PLACE : send;
                    int rca, rcb;
                    if (allg) {
                        rca = MPI_Allgather(sa, cases[c].count, cases[c].t, a, cases[c].count, cases[c].t, comm);
                        rcb = PMPI_Allgather(sa, cases[c].count, cases[c].t, b, cases[c].count, cases[c].t, comm);
                    } else {
                        rca = MPI_Gather(sa, cases[c].count, cases[c].t, a, cases[c].count, cases[c].t, root, comm);
                        rcb = PMPI_Gather(sa, cases[c].count, cases[c].t, b, cases[c].count, cases[c].t, root, comm);
                    }
                    char desc[160];
                    snprintf(desc, sizeof desc, "%s %d x %s%s on %s", allg ? "allgather" : "gather to rank", cases[c].count, cases[c].name,
                             ip ? " in place" : "", comm_name[ci]);
                    if (rca != MPI_SUCCESS || rcb != MPI_SUCCESS) report(calls + gathers, "an error", desc, "");
                    else if (memcmp(a, b, cap)) report(calls + gathers, "differs from PMPI's", desc, "");
                    free(send), free(a), free(b);
                    gathers++;
                }
    }
    printf("coll_diff: gathers at rank %d: %ld compared with PMPI's\n", rank, gathers);
    printf("coll_diff: calls per communicator at rank %d:", rank);
    for (int c = 0; c < ncomms; c++) printf(" %s %ld", comm_name[c], by_comm[c]);
    printf("\n");
    printf("coll_diff: rank %d: %ld calls (%ld allreduce, %ld reduce, %ld bcast), %ld wrong\n", rank, done, by_coll[0], by_coll[1], by_coll[2], wrong);
    fflush(stdout);
    for (int c = 1; c < NCOMMS; c++)
        if (c != C_SELF) MPI_Comm_free(&comms[c]);
    MPI_Finalize();
    return wrong != 0;
}
