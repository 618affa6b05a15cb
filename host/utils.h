/*
host/utils.h: errors and checked calls. Every failure is one line on stderr ("error: ...") and a non-zero exit,
never a crash: file and allocation calls are wrapped so that they either succeed or say what failed and where.
Also the small file-system helpers (mkdir -p, files written whole or not at all, a checksum) and the clock.
*/
#pragma once
#include <cerrno>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <csignal>
#include <ctime>
#include <algorithm>
#include <string>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

// every file of ours and of llm.c's (checkpoint, token shard, tokenizer, optimizer state) opens with 256 int32
static const int HEADER_INTS = 256;

// ----------------------------------------------------------------------------------------------------------------
// errors: every failure is one line on stderr and a non-zero exit, never a crash. What the process made and has not
// finished is removed first, by fail() and by a fatal signal alike, so an error leaves no debris: the temporary file
// being written (see AtomicFile below), and the run directory and .lock made for a run that has not started yet
// (host/rundir.h), so that a run refused before it starts (no checkpoint to resume, bad data, ...) creates nothing.

static char pending_tmp[8192];  // plain C strings, so that the signal handler may unlink them
static char unused_dir[8192];   // a run directory this process made or locked for a run that has not started
static size_t unused_dir_kept;  // the length of the part of unused_dir that existed before (mkdir -p made the rest)
static int unused_lock_made;    // this process created unused_dir/.lock (and holds it)
static char fail_tag[32];       // "rank 1: " in a run of several processes (host/distributed.h), else empty
// how fail() ends the process: exit, or in a run started by mpirun (host/distributed.h) MPI_Abort, which ends every
// rank at once; a rank's exit(1) instead leaves mpirun to notice it and tear the others down, seconds later
static void (*fail_exit)(int status) = exit;

// only calls that are safe in a signal handler: unlink, rmdir, and plain C strings
static void remove_debris() {
    if (pending_tmp[0]) unlink(pending_tmp);
    pending_tmp[0] = 0;
    size_t n = strlen(unused_dir);
    if (n == 0) return;
    if (unused_lock_made && n + sizeof("/.lock") <= sizeof(unused_dir)) {
        memcpy(unused_dir + n, "/.lock", sizeof("/.lock"));
        unlink(unused_dir);
        unused_dir[n] = 0;
    }
    while (n > unused_dir_kept && rmdir(unused_dir) == 0) {  // each directory made, deepest first, while empty
        while (n > 0 && unused_dir[n - 1] != '/') n--;
        while (n > 0 && unused_dir[n - 1] == '/') n--;
        unused_dir[n] = 0;
    }
    unused_dir[0] = 0;
}

[[noreturn]] static void fail(const char* fmt, ...) {
    remove_debris();
    // the line in one write, so that the lines of several ranks cannot interleave (whole, however long its paths)
    va_list ap, ap2;
    va_start(ap, fmt);
    va_copy(ap2, ap);
    int n = vsnprintf(nullptr, 0, fmt, ap);
    va_end(ap);
    std::string line = std::string("error: ") + fail_tag;
    size_t head = line.size();
    line.resize(head + (n > 0 ? n : 0) + 1);
    vsnprintf(&line[head], line.size() - head, fmt, ap2);
    va_end(ap2);
    line.back() = '\n';
    // A rank other than 0 waits before it speaks: an error every rank meets (a bad flag found by each) is then said
    // once, by rank 0, whose exit makes mpirun stop the others; an error of this rank alone is said 2 s later.
    if (fail_tag[0]) sleep(2);
    fputs(line.c_str(), stderr);
    fflush(stderr);
    fail_exit(EXIT_FAILURE);
    exit(EXIT_FAILURE);
}

static void on_fatal_signal(int sig) {
    remove_debris();
    signal(sig, SIG_DFL);
    raise(sig);
}

// The trainers call this first: ^C, kill and a lost terminal remove what remove_debris() removes; beyond a file
// size limit (ulimit -f) a write fails with EFBIG and says so, instead of SIGXFSZ killing the process silently.
static void catch_fatal_signals() {
    for (int sig : {SIGINT, SIGTERM, SIGHUP}) signal(sig, on_fatal_signal);
    signal(SIGXFSZ, SIG_IGN);
}

// fopen, for a regular file only: a FIFO, a device or a directory would block or read as nonsense
static FILE* fopen_or_fail(const char* path, const char* mode) {
    struct stat st;
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) fail("'%s' is not a regular file", path);
    FILE* f = fopen(path, mode);
    if (!f) fail("cannot open '%s' (%s)", path, strerror(errno));
    return f;
}

static void fread_or_fail(void* dst, size_t size, size_t n, FILE* f, const char* path) {
    if (fread(dst, size, n, f) != n) fail("'%s' is truncated or unreadable", path);
}

static long long file_size_or_fail(const char* path) {
    struct stat st;
    if (stat(path, &st) != 0) fail("cannot open '%s' (%s)", path, strerror(errno));
    if (!S_ISREG(st.st_mode)) fail("'%s' is not a regular file", path);
    return (long long)st.st_size;
}

static void* calloc_or_fail(size_t n, size_t size) {
    void* p = calloc(n, size);
    if (!p && n > 0) fail("out of memory allocating %.1f MiB", (double)n * size / (1 << 20));
    return p;
}

static int file_exists(const char* path) {
    struct stat st;
    return stat(path, &st) == 0;
}

// mkdir -p; returns the length of the longest prefix of `dir` that existed before (its whole length: none was made)
static size_t make_dirs(const char* dir) {
    std::string path = dir;
    size_t existed = 0;
    bool made = false;
    for (size_t i = 1; i <= path.size(); i++) {
        if (i < path.size() && path[i] != '/') continue;
        std::string prefix = path.substr(0, i);
        if (mkdir(prefix.c_str(), 0755) == 0) made = true;
        else if (errno != EEXIST) fail("cannot create directory '%s' (%s)", prefix.c_str(), strerror(errno));
        else if (!made) existed = i;
    }
    return existed;
}

// ----------------------------------------------------------------------------------------------------------------
// files written whole or not at all, and checksummed

// A 64-bit checksum of a byte stream: four multiply-rotate lanes over 8-byte words (xxHash's construction; not
// cryptographic, and about as fast as memory). DONE_<step> records it for the files it completes (host/rundir.h).
struct Checksum {
    uint64_t lane[4] = {0x60EA27EEADC0B5D6ull, 0xC2B2AE3D27D4EB4Full, 0, 0x61C8864E7A143579ull};
    uint64_t bytes = 0;
    unsigned char tail[32];
    size_t used = 0;  // bytes waiting in tail

    static uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
    void block(const unsigned char* p) {
        for (int i = 0; i < 4; i++) {
            uint64_t w;
            memcpy(&w, p + 8 * i, 8);
            lane[i] = rotl(lane[i] + w * 0xC2B2AE3D27D4EB4Full, 31) * 0x9E3779B185EBCA87ull;
        }
    }
    void update(const void* data, size_t n) {
        const unsigned char* p = (const unsigned char*)data;
        bytes += n;
        while (n > 0 && (used > 0 || n < 32)) {
            size_t k = std::min(n, 32 - used);
            memcpy(tail + used, p, k);
            used += k, p += k, n -= k;
            if (used == 32) block(tail), used = 0;
        }
        for (; n >= 32; p += 32, n -= 32) block(p);
        if (n) memcpy(tail, p, n), used = n;
    }
    uint64_t digest() const {
        uint64_t h = rotl(lane[0], 1) + rotl(lane[1], 7) + rotl(lane[2], 12) + rotl(lane[3], 18) + bytes;
        for (size_t i = 0; i < used; i++) h = rotl(h ^ (tail[i] * 0x27D4EB2F165667C5ull), 11) * 0x9E3779B185EBCA87ull;
        h ^= h >> 33, h *= 0xC2B2AE3D27D4EB4Full, h ^= h >> 29, h *= 0x165667B19E3779F9ull, h ^= h >> 32;
        return h;
    }
};

// the size and checksum of a file as written (or as read back)
struct FileSum {
    long long bytes;
    uint64_t hash;
};

// A file written under a temporary name beside its real one (NAME.tmp.<pid>, which no other process uses) and
// renamed over it once complete and flushed to disk: a crash, a full disk or a size limit never leaves a half-written
// file under the real name, and fail() or a fatal signal removes the temporary one. Every byte goes through
// atomic_write, which also checksums it.
struct AtomicFile {
    std::string path, tmp;
    FILE* f;
    Checksum sum;
};

static void atomic_open(AtomicFile* a, const std::string& path) {
    a->path = path;
    a->tmp = path + ".tmp." + std::to_string(getpid());
    a->sum = Checksum();
    if (a->tmp.size() >= sizeof(pending_tmp)) fail("the path '%s' is too long", path.c_str());
    a->f = fopen_or_fail(a->tmp.c_str(), "wb");
    memcpy(pending_tmp, a->tmp.c_str(), a->tmp.size() + 1);
}

static void atomic_write(AtomicFile* a, const void* src, size_t size, size_t n) {
    if (fwrite(src, size, n, a->f) != n) fail("cannot write '%s' (%s)", a->path.c_str(), strerror(errno));
    a->sum.update(src, size * n);
}

static FileSum atomic_finish(AtomicFile* a) {
    if (fflush(a->f) != 0 || fsync(fileno(a->f)) != 0) fail("cannot write '%s' (%s)", a->path.c_str(), strerror(errno));
    if (fclose(a->f) != 0) fail("cannot write '%s' (%s)", a->path.c_str(), strerror(errno));
    if (rename(a->tmp.c_str(), a->path.c_str()) != 0)
        fail("cannot rename '%s' to '%s' (%s)", a->tmp.c_str(), a->path.c_str(), strerror(errno));
    pending_tmp[0] = 0;
    std::string dir = a->path.substr(0, a->path.rfind('/') == std::string::npos ? 0 : a->path.rfind('/'));
    int fd = open(dir.empty() ? "." : dir.c_str(), O_RDONLY);  // the rename itself on disk too
    if (fd >= 0) fsync(fd), close(fd);
    return {(long long)a->sum.bytes, a->sum.digest()};
}

// the size and checksum of a file on disk, read in 1 MiB pieces
static FileSum file_checksum(const std::string& path) {
    FILE* f = fopen_or_fail(path.c_str(), "rb");
    std::string buf(1 << 20, '\0');
    Checksum sum;
    size_t k;
    while ((k = fread(&buf[0], 1, buf.size(), f)) > 0) sum.update(buf.data(), k);
    if (ferror(f)) fail("cannot read '%s'", path.c_str());
    fclose(f);
    return {(long long)sum.bytes, sum.digest()};
}

// a number as it was given: the shortest decimal that reads back as the same double (1.0000001, not %g's 1)
static std::string shortest(double v) {
    char s[32];
    for (int digits = 1; digits <= 17; digits++) {
        snprintf(s, sizeof(s), "%.*g", digits, v);
        if (strtod(s, nullptr) == v) break;
    }
    return s;
}

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}
