/*
host/distributed.h: data parallelism, llm.c's design: `mpirun -np N ./trainer FLAGS` starts N processes (ranks),
each holding the whole model; every step, each rank trains on its own share of the step's micro-batches, the ranks'
gradients are summed, and every rank takes the same update. N ranks with micro-batch B are one process with N
times the accumulation steps (-d / (b*t) micro-batches a step in both), to the bit on the CPU:

  - the batches: a step's micro-batches m = 0..A-1 (A = -d / (b*t)) are dealt out in turn: rank r trains on
    m = k*N + r, its k-th of A/N. Every rank's data loader walks over all A, loading its own and skipping the
    others' (dataloader_next_batch_of), so all ranks stand where one process would, and a checkpoint records that.
  - the sum, in one fixed order: the step's gradient is the sum of each micro-batch's own gradient in micro-batch
    order, g = ((g_0 + g_1) + g_2) + ...  One process computes each g_m alone and adds it to the sum; after their
    k-th micro-batches the ranks add g_kN, g_kN+1, ... in rank order: the same additions in the same order, so the
    same bits. MPI's reductions promise no order, so the CPU back end below adds by hand: each rank owns a shard of
    the parameters (shard_begin), receives every rank's piece of that shard (MPI_Alltoallv) and adds the pieces in
    rank order; after the last micro-batch the summed shards are gathered (MPI_Allgatherv). The CUDA trainer's back
    end is NCCL (train_gpt2.cu): one ncclAllReduce of the locally accumulated gradients a step, in NCCL's order.
  - one trainer: losses and validation losses are gathered and added in batch order, so every rank has the same
    numbers, clips by the same norm and follows the one learning-rate schedule. Rank 0 alone prints (the others'
    stdout goes to /dev/null; errors still reach stderr, tagged "rank r:"), writes main.log, samples and owns the
    run directory (its lock, its checkpoints and markers); validation is split over the ranks batch by batch.
  - ZeRO-1 (-z 1, llm.c's -z 1): each rank keeps the AdamW moments (and, in the CUDA trainer's bf16 build, the
    float32 master weights) of its shard only, updates that shard, and the updated parameters are gathered.
    Checkpoints and state files are gathered to rank 0 and written as always, so a run moves between 1 and N
    processes, with or without -z 1, and between the CPU and the GPU trainer.
  - run without mpirun, a program is one rank and MPI is never started (so a plain run is exactly what it was, and
    works where the MPI runtime is missing). A build without MPI started by mpirun with several processes stops with
    an error instead of training N copies side by side.

Before any work the ranks compare a hash of their command line, and then of their data and the checkpoint they
resume (dist_check_same): a rank started differently stops the run with one error.
*/
#pragma once
#include <climits>
#include <vector>
#include "utils.h"
#ifdef USE_MPI
#define OMPI_SKIP_MPICXX 1  // MPI's C interface only
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#ifdef OPEN_MPI
#define MPI_VERSION_NAME "Open MPI"
#else
#define MPI_VERSION_NAME "not Open MPI"
#endif
#endif

typedef struct {
    int rank, size;              // this process, and how many there are (1 without mpirun)
    int local_rank, local_size;  // on this machine: rank r drives GPU local_rank
    int mpi;                     // MPI was started (by mpirun, also with -np 1)
    int zero;                    // -z 1: ZeRO-1, each rank keeps the optimizer state of its shard only
} Distributed;

static Distributed dist = {0, 1, 0, 1, 0, 0};

// what a launcher (mpirun, mpiexec, srun) tells the processes it starts: -1 when there is none
static int launcher_env(const char* const* names) {
    for (const char* const* n = names; *n; n++)
        if (const char* v = getenv(*n)) return atoi(v);
    return -1;
}
static int launcher_size() {
    static const char* const names[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS", nullptr};
    return launcher_env(names);
}
static int launcher_rank() {
    static const char* const names[] = {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", nullptr};
    return launcher_env(names);
}

#ifdef USE_MPI
// A refusal ends every rank at once: MPI_Abort. (Each rank's exit(1) would leave mpirun to find the failed rank and
// tear the others down: seconds a refusal, the most of a test suite that makes many.) Its status is mpirun's.
static void dist_abort(int status) {
    fflush(stdout);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, status);
}
#endif

// Starts MPI when a launcher started this process (else one rank, no MPI). From here on only rank 0 prints.
static void dist_init(int zero) {
    dist.zero = zero;
    int launched = launcher_rank() >= 0;
#ifdef USE_MPI
    if (launched) {
        MPI_Init(nullptr, nullptr);
        dist.mpi = 1;
        fail_exit = dist_abort;
        MPI_Comm_rank(MPI_COMM_WORLD, &dist.rank);
        MPI_Comm_size(MPI_COMM_WORLD, &dist.size);
        MPI_Comm local;
        MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, dist.rank, MPI_INFO_NULL, &local);
        MPI_Comm_rank(local, &dist.local_rank);
        MPI_Comm_size(local, &dist.local_size);
        MPI_Comm_free(&local);
        if (dist.size == 1 && launcher_size() > 1)
            fail("started by a launcher of %d processes, but MPI sees this one alone: that mpirun belongs to another "
                 "MPI than the one this program was built with (%s)", launcher_size(), MPI_VERSION_NAME);
    }
#else
    if (launched && (launcher_size() > 1 || launcher_rank() > 0))
        fail("this program was built without MPI but started by mpirun with several processes, which would train "
             "separate copies side by side: install OpenMPI (Debian: openmpi-bin libopenmpi-dev) and rebuild (make)");
#endif
    if (dist.size > 1 && dist.rank > 0) {
        snprintf(fail_tag, sizeof(fail_tag), "rank %d: ", dist.rank);
        if (!freopen("/dev/null", "w", stdout)) fail("cannot send stdout to /dev/null");
    }
}

static void dist_finalize() {
    fflush(stdout);
#ifdef USE_MPI
    if (dist.mpi) MPI_Finalize();
    dist.mpi = 0;
    fail_exit = exit;
#endif
}

// An error every rank found at the same point (flags, the batch split, disagreeing ranks): rank 0 says it once and
// ends every rank (MPI_Abort); the others wait for that, and end the run themselves only if it does not come. An
// error of one rank alone is fail(), which does the same from that rank.
[[noreturn]] static void dist_fail_together(const char* fmt, ...) {
    remove_debris();
    if (dist.rank == 0) {
        va_list ap;
        va_start(ap, fmt);
        fprintf(stderr, "error: ");
        vfprintf(stderr, fmt, ap);
        fprintf(stderr, "\n");
        va_end(ap);
        fflush(stderr);
    } else if (dist.mpi) {
        sleep(10);
    }
    if (dist.mpi) fail_exit(EXIT_FAILURE);
    dist_finalize();
    exit(EXIT_FAILURE);
}

#ifdef USE_MPI
inline MPI_Datatype mpi_type(const float*) { return MPI_FLOAT; }
inline MPI_Datatype mpi_type(const double*) { return MPI_DOUBLE; }
#endif

// every rank must bring the same hash of `what` (its command line, its data): else one error and all stop
static void dist_check_same(uint64_t hash, const char* what) {
#ifdef USE_MPI
    if (!dist.mpi) return;
    std::vector<uint64_t> all(dist.size);
    MPI_Allgather(&hash, 1, MPI_UINT64_T, all.data(), 1, MPI_UINT64_T, MPI_COMM_WORLD);
    for (int r = 1; r < dist.size; r++)
        if (all[r] != all[0])
            dist_fail_together("the ranks disagree on %s: rank %d's differs from rank 0's (every rank must be "
                               "started with the same flags and see the same files)", what, r);
#else
    (void)hash, (void)what;
#endif
}

static int dist_broadcast_int(int v) {  // rank 0's v, on every rank
#ifdef USE_MPI
    if (dist.mpi) MPI_Bcast(&v, 1, MPI_INT, 0, MPI_COMM_WORLD);
#endif
    return v;
}

static inline void dist_broadcast_bytes(void* p, size_t n) {  // rank 0's n bytes at p, on every rank (CUDA trainer)
#ifdef USE_MPI
    if (dist.mpi) MPI_Bcast(p, (int)n, MPI_BYTE, 0, MPI_COMM_WORLD);
#else
    (void)p, (void)n;
#endif
}

static inline bool dist_all(bool ok) {  // ok on every rank? (CUDA trainer)
#ifdef USE_MPI
    int v = ok, all = v;
    if (dist.mpi) MPI_Allreduce(&v, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    return all != 0;
#else
    return ok;
#endif
}

// Values of batches dealt out in turn (batch m = k*N + r on rank r, as its k-th value in `mine`), in batch order
// 0..total-1 on every rank.
static std::vector<double> dist_gather_batch_order(const std::vector<double>& mine, int total) {
    if (dist.size == 1) return std::vector<double>(mine.begin(), mine.begin() + std::min<size_t>(total, mine.size()));
    std::vector<double> out(total);
#ifdef USE_MPI
    int N = dist.size;
    std::vector<int> counts(N), displs(N);
    for (int r = 0, at = 0; r < N; r++) {
        counts[r] = total > r ? (total - 1 - r) / N + 1 : 0;
        displs[r] = at;
        at += counts[r];
    }
    std::vector<double> got(total);
    MPI_Allgatherv(mine.data(), counts[dist.rank], MPI_DOUBLE, got.data(), counts.data(), displs.data(), MPI_DOUBLE,
                   MPI_COMM_WORLD);
    for (int r = 0; r < N; r++)
        for (int k = 0; k < counts[r]; k++) out[(size_t)k * N + r] = got[displs[r] + k];
#endif
    return out;
}

// ----------------------------------------------------------------------------------------------------------------
// shards: the n parameters cut into dist.size contiguous pieces, rank r's [shard_begin(n, r), shard_begin(n, r+1))

static size_t shard_begin(size_t n, int r) { return n * (size_t)r / (size_t)dist.size; }
static size_t shard_end(size_t n, int r) { return shard_begin(n, r + 1); }

#ifdef USE_MPI
// MPI counts in int: the shards' sizes and offsets, or an error for a model beyond them
static void shard_counts(size_t n, std::vector<int>* counts, std::vector<int>* displs) {
    if (n > (size_t)INT_MAX) fail("%zu parameters: the MPI back end counts in int (at most %d)", n, INT_MAX);
    counts->resize(dist.size);
    displs->resize(dist.size);
    for (int r = 0; r < dist.size; r++) {
        (*displs)[r] = (int)shard_begin(n, r);
        (*counts)[r] = (int)(shard_end(n, r) - shard_begin(n, r));
    }
}
#endif

// The CPU back end of the gradient sum, exact: this rank's shard of the sum of every rank's buf[0..n), added in
// rank order: shard = (((add ? shard : first) + from rank 1) + from rank 2) ... with `first` rank 0's piece (not
// 0 + it, which would turn -0 into +0). pieces: scratch, kept between calls.
template <typename T>
static void dist_sum_into_shard(const T* buf, size_t n, T* shard, int add, std::vector<T>* pieces) {
    size_t lo = shard_begin(n, dist.rank), mine = shard_end(n, dist.rank) - lo;
    int N = dist.size;
#ifdef USE_MPI
    std::vector<int> send_counts, send_displs, recv_counts(N, (int)mine), recv_displs(N);
    shard_counts(n, &send_counts, &send_displs);
    for (int r = 0; r < N; r++) recv_displs[r] = (int)(r * mine);
    pieces->resize((size_t)N * mine);
    if (dist.mpi)
        MPI_Alltoallv(buf, send_counts.data(), send_displs.data(), mpi_type(buf), pieces->data(), recv_counts.data(),
                      recv_displs.data(), mpi_type(buf), MPI_COMM_WORLD);
    else
        memcpy(pieces->data(), buf + lo, mine * sizeof(T));
    const T* p = pieces->data();
#else
    (void)pieces;
    const T* p = buf + lo;
#endif
#pragma omp parallel for
    for (size_t i = 0; i < mine; i++) {
        T s = add ? shard[i] + p[i] : p[i];
        for (int r = 1; r < N; r++) s += p[(size_t)r * mine + i];
        shard[i] = s;
    }
}

// every rank's shard of buf[0..n) to every rank, in place
template <typename T>
static void dist_gather_shards(T* buf, size_t n) {
#ifdef USE_MPI
    if (!dist.mpi || dist.size == 1) return;
    std::vector<int> counts, displs;
    shard_counts(n, &counts, &displs);
    MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, counts.data(), displs.data(), mpi_type(buf),
                   MPI_COMM_WORLD);
#else
    (void)buf, (void)n;
#endif
}

// the whole of an array of n that each rank holds its shard of, on rank 0 (elsewhere empty)
template <typename T>
static std::vector<T> dist_gather_to_rank0(const T* shard, size_t n) {
    std::vector<T> all(dist.rank == 0 ? n : 0);
    size_t lo = shard_begin(n, dist.rank), mine = shard_end(n, dist.rank) - lo;
#ifdef USE_MPI
    if (dist.mpi && dist.size > 1) {
        std::vector<int> counts, displs;
        shard_counts(n, &counts, &displs);
        MPI_Gatherv(shard, (int)mine, mpi_type(shard), all.data(), counts.data(), displs.data(), mpi_type(shard), 0,
                    MPI_COMM_WORLD);
        return all;
    }
#endif
    memcpy(all.data(), shard, mine * sizeof(T));
    return all;
}
