/*
tests/nccl_shim/nccl.h: the few NCCL calls train_gpt2.cu makes, done with MPI on host memory, for
tests/emulate_nccl.sh: there the CUDA trainer runs in the CPU emulator (tools/cuda_emulator), where "device" memory is
host memory, so several emulated ranks can run the CUDA trainer's data-parallel code (ZeRO-1's sharded master weights
and moments, its gathers) on a machine without GPUs. Not NCCL: its sum is MPI_Allreduce's, its group a sequence of
blocking calls (every rank makes them in the same order). cuda_runtime.h beside it gives the emulator 8 devices.
*/
#pragma once
#include <cstring>
#include <mpi.h>

typedef enum { ncclSuccess = 0, ncclSystemError = 2 } ncclResult_t;
typedef enum { ncclFloat = 7, ncclBfloat16 = 9 } ncclDataType_t;
typedef enum { ncclSum = 0 } ncclRedOp_t;
typedef struct { char internal[128]; } ncclUniqueId;
struct ncclComm { int rank, size; };
typedef ncclComm* ncclComm_t;
typedef void* ncclStream_t;  // the emulator has no streams: the trainer passes 0

inline const char* ncclGetErrorString(ncclResult_t r) { return r == ncclSuccess ? "no error" : "MPI error (shim)"; }
inline ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
    memset(id, 0, sizeof(*id));
    return ncclSuccess;
}
inline ncclResult_t ncclCommInitRank(ncclComm_t* comm, int size, ncclUniqueId, int rank) {
    *comm = new ncclComm{rank, size};
    return ncclSuccess;
}
inline ncclResult_t ncclCommDestroy(ncclComm_t comm) {
    delete comm;
    return ncclSuccess;
}
inline ncclResult_t ncclGroupStart() { return ncclSuccess; }
inline ncclResult_t ncclGroupEnd() { return ncclSuccess; }

inline ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count, ncclDataType_t type, ncclRedOp_t,
                                  ncclComm_t, ncclStream_t) {
    if (type != ncclFloat) return ncclSystemError;
    int r = MPI_Allreduce(send == recv ? MPI_IN_PLACE : send, recv, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    return r == MPI_SUCCESS ? ncclSuccess : ncclSystemError;
}

inline ncclResult_t ncclBroadcast(const void* send, void* recv, size_t count, ncclDataType_t type, int root,
                                  ncclComm_t comm, ncclStream_t) {
    size_t bytes = count * (type == ncclFloat ? 4 : 2);
    if (comm->rank == root && send != recv) memcpy(recv, send, bytes);
    int r = MPI_Bcast(recv, (int)bytes, MPI_BYTE, root, MPI_COMM_WORLD);
    return r == MPI_SUCCESS ? ncclSuccess : ncclSystemError;
}
