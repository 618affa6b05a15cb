/*
host/utils.h: errors and checked calls. Every failure is one line on stderr ("error: ...") and a non-zero exit,
never a crash: file and allocation calls are wrapped so that they either succeed or say what failed and where.
Also the small file-system helpers (mkdir -p, atomic replacement of a file) and the clock.
*/
#pragma once
#include <cerrno>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <sys/stat.h>
#include <unistd.h>

// every file of ours and of llm.c's (checkpoint, token shard, tokenizer, optimizer state) opens with 256 int32
static const int HEADER_INTS = 256;

// ----------------------------------------------------------------------------------------------------------------
// errors: every failure is one line on stderr and a non-zero exit, never a crash

[[noreturn]] static void fail(const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "error: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(EXIT_FAILURE);
}

static FILE* fopen_or_fail(const char* path, const char* mode) {
    FILE* f = fopen(path, mode);
    if (!f) fail("cannot open '%s' (%s)", path, strerror(errno));
    return f;
}

static void fread_or_fail(void* dst, size_t size, size_t n, FILE* f, const char* path) {
    if (fread(dst, size, n, f) != n) fail("'%s' is truncated or unreadable", path);
}

static void fwrite_or_fail(const void* src, size_t size, size_t n, FILE* f, const char* path) {
    if (fwrite(src, size, n, f) != n) fail("cannot write '%s' (%s)", path, strerror(errno));
}

static long long file_size_or_fail(const char* path) {
    struct stat st;
    if (stat(path, &st) != 0) fail("cannot open '%s' (%s)", path, strerror(errno));
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

// mkdir -p
static void make_dirs(const char* dir) {
    std::string path = dir;
    for (size_t i = 1; i <= path.size(); i++) {
        if (i < path.size() && path[i] != '/') continue;
        std::string prefix = path.substr(0, i);
        if (mkdir(prefix.c_str(), 0755) != 0 && errno != EEXIST)
            fail("cannot create directory '%s' (%s)", prefix.c_str(), strerror(errno));
    }
}

// ----------------------------------------------------------------------------------------------------------------
// files: atomic replacement

// Write to path.tmp, then rename over path: a crash or a full disk never leaves a half-written file behind.
static FILE* open_for_atomic_write(const char* path, std::string* tmp) {
    *tmp = std::string(path) + ".tmp";
    return fopen_or_fail(tmp->c_str(), "wb");
}
static void finish_atomic_write(FILE* f, const char* path, const std::string& tmp) {
    if (fflush(f) != 0 || fsync(fileno(f)) != 0 || fclose(f) != 0) {
        remove(tmp.c_str());
        fail("cannot write '%s' (%s)", path, strerror(errno));
    }
    if (rename(tmp.c_str(), path) != 0) fail("cannot rename '%s' to '%s' (%s)", tmp.c_str(), path, strerror(errno));
}

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}
