/*
host/rundir.h: the run directory (-o DIR): main.log and the checkpoints, model_<step>.bin and state_<step>.bin,
each pair complete once its marker DONE_<step> exists. What keeps two runs from ever mixing in one DIR:

  - a lock: DIR/.lock, held (flock) for the whole run, so a second trainer on the same DIR stops at once;
  - a fresh run (no -y 1) refuses a DIR that holds another run's checkpoints, unless --start-over, which removes
    that run's files (its markers, checkpoints, state files and main.log) once the new run has passed its checks;
  - a run refused before it starts leaves nothing in DIR: not the directory if it made it, not its .lock;
  - every run has an id (random, kept by a resumed run); each marker names the run that wrote it and the size and
    checksum of the two files it completes, so a resume checks that the model and the state it loads are the ones
    the marker vouches for, written together by one run;
  - temporary files are NAME.tmp.<pid> (host/utils.h); with the lock held, any left by a killed run are removed.

main.log is one record of the run: "s:N trl:..." for step N (the terminal's "step N/..."), "s:N tel:..." and
"s:N acc:..." for what was measured after N steps. A resume from step N first drops what the log holds past N, so
the steps that are run again are logged once.
*/
#pragma once
#include <string>
#include <vector>
#include <glob.h>
#include <sys/file.h>
#include "rand.h"
#include "utils.h"

typedef struct {
    std::string dir;
    int lock_fd;
    uint64_t run_id;
} RunDir;

static std::string run_file(const RunDir& r, const char* kind, int step) {  // model, state, DONE
    char name[64];
    snprintf(name, sizeof(name), strcmp(kind, "DONE") ? "%s_%08d.bin" : "%s_%08d", kind, step);
    return r.dir + "/" + name;
}

static std::vector<std::string> glob_paths(const std::string& pattern) {
    glob_t g;
    std::vector<std::string> out;
    if (glob(pattern.c_str(), 0, nullptr, &g) == 0) {
        out.assign(g.gl_pathv, g.gl_pathv + g.gl_pathc);
        globfree(&g);
    }
    return out;
}

// the latest step with a complete checkpoint (its marker exists), or -1
static int latest_checkpoint(const std::string& dir) {
    int best = -1;
    for (const std::string& p : glob_paths(dir + "/DONE_*")) {
        int step;
        char tail;
        if (sscanf(p.c_str() + p.rfind('/') + 1, "DONE_%d%c", &step, &tail) == 1 && step > best) best = step;
    }
    return best;
}

// the files a run of ours writes into its directory (what --start-over removes)
static std::vector<std::string> run_files(const std::string& dir) {
    std::vector<std::string> files;
    for (const char* pattern : {"/DONE_*", "/model_*.bin", "/state_*.bin", "/main.log"})
        for (const std::string& p : glob_paths(dir + pattern)) files.push_back(p);
    return files;
}

// Takes DIR for this run: creates it, locks it, removes what killed runs left half-written, and checks that a fresh
// run does not land on another run's checkpoints. Until rundir_start, a run that is refused (here or by any later
// check) leaves nothing: fail() removes the directories and the .lock made here (host/utils.h).
static void rundir_open(RunDir* r, const char* dir, int resume, int start_over) {
    if (!*dir) fail("-o needs a directory name");
    r->dir = dir;
    while (r->dir.size() > 1 && r->dir.back() == '/') r->dir.pop_back();
    if (r->dir.size() >= sizeof(unused_dir) - sizeof("/.lock")) fail("the path '%s' is too long", r->dir.c_str());
    size_t existed = make_dirs(r->dir.c_str());
    memcpy(unused_dir, r->dir.c_str(), r->dir.size() + 1);
    unused_dir_kept = existed;
    std::string lock = r->dir + "/.lock";
    for (int attempt = 0;; attempt++) {  // a refused run may remove a .lock it made: lock the one that is there
        int made = 1;
        r->lock_fd = open(lock.c_str(), O_RDWR | O_CREAT | O_EXCL, 0644);
        if (r->lock_fd < 0 && errno == EEXIST) made = 0, r->lock_fd = open(lock.c_str(), O_RDWR);
        if (r->lock_fd < 0) fail("cannot create '%s' (%s)", lock.c_str(), strerror(errno));
        if (flock(r->lock_fd, LOCK_EX | LOCK_NB) != 0)
            fail("'%s' is in use by another trainer (it holds %s); give each run its own -o", r->dir.c_str(),
                 lock.c_str());
        struct stat held, named;
        if (fstat(r->lock_fd, &held) == 0 && stat(lock.c_str(), &named) == 0 && held.st_ino == named.st_ino &&
            held.st_dev == named.st_dev) {
            unused_lock_made = made;
            break;
        }
        close(r->lock_fd);
        if (attempt == 100) fail("cannot lock '%s': it keeps being removed", lock.c_str());
    }
    for (const char* pattern : {"/*.tmp.*", "/*.tmp"})
        for (const std::string& p : glob_paths(r->dir + pattern)) remove(p.c_str());
    int has_checkpoints = latest_checkpoint(r->dir) >= 0 || !glob_paths(r->dir + "/model_*.bin").empty();
    if (!resume && !start_over && has_checkpoints)
        fail("'%s' holds the checkpoints of another run: resume it with -y 1, start it over with --start-over, or "
             "give this run its own -o", r->dir.c_str());
    uint64_t seed = (uint64_t)getpid() * 0x9E3779B97F4A7C15ull ^ (uint64_t)(now_seconds() * 1e9);
    r->run_id = splitmix64(&seed);  // a resume replaces it with the resumed run's
}

// The run starts: every check has passed. --start-over removes the previous run's files now (not before, so that a
// run refused by a later check keeps them), and from here on the directory and its lock are the run's.
static void rundir_start(RunDir* r, int start_over) {
    std::vector<std::string> old = run_files(r->dir);
    if (start_over && !old.empty()) {
        for (const std::string& p : old) remove(p.c_str());
        printf("--start-over: removed %zu files of the previous run in %s\n", old.size(), r->dir.c_str());
    }
    unused_dir[0] = 0;
    unused_lock_made = 0;
}

// DONE_<step>: written (whole or not at all) after the model and state files it names
static void write_marker(const RunDir& r, int step, const FileSum& model, const FileSum& state) {
    char text[512];
    int n = snprintf(text, sizeof(text),
                     "siamese-gpt checkpoint\nrun %016llx\nstep %d\nmodel_%08d.bin %lld %016llx\nstate_%08d.bin %lld %016llx\n",
                     (unsigned long long)r.run_id, step, step, model.bytes, (unsigned long long)model.hash, step,
                     state.bytes, (unsigned long long)state.hash);
    AtomicFile f;
    atomic_open(&f, run_file(r, "DONE", step));
    atomic_write(&f, text, 1, n);
    atomic_finish(&f);
}

// Before a resume from `step`: the marker's files are there, complete and the ones it was written for. Returns the
// run id the marker names (0 for a marker of an older version, which recorded nothing: then nothing is checked).
static uint64_t verify_checkpoint(const RunDir& r, int step) {
    std::string marker = run_file(r, "DONE", step);
    FILE* f = fopen_or_fail(marker.c_str(), "rb");
    char text[512] = {0};
    size_t n = fread(text, 1, sizeof(text) - 1, f);
    fclose(f);
    if (n == 0) {
        printf("note: %s is empty (an older version's marker): its files are not checked\n", marker.c_str());
        return 0;
    }
    unsigned long long id, hashes[2];
    long long bytes[2];
    int s, sm, ss;
    if (sscanf(text, "siamese-gpt checkpoint\nrun %llx\nstep %d\nmodel_%d.bin %lld %llx\nstate_%d.bin %lld %llx", &id, &s,
               &sm, &bytes[0], &hashes[0], &ss, &bytes[1], &hashes[1]) != 8 || s != step || sm != step || ss != step)
        fail("'%s' is not a checkpoint marker of step %d", marker.c_str(), step);
    const char* kinds[2] = {"model", "state"};
    for (int i = 0; i < 2; i++) {
        std::string path = run_file(r, kinds[i], step);
        FileSum sum = file_checksum(path);
        if (sum.bytes != bytes[i] || sum.hash != hashes[i])
            fail("'%s' is not the file that %s completes (%lld bytes, checksum %016llx; the marker says %lld, %016llx): "
                 "it was written by another run or changed since", path.c_str(), marker.c_str(), sum.bytes,
                 (unsigned long long)sum.hash, bytes[i], hashes[i]);
    }
    return id;
}

// main.log for appending; a fresh run starts it empty, a resume from `resume_step` first keeps only what happened
// up to there: the train losses of steps 1..N and what was measured after fewer than N steps (the resumed run
// measures step N again)
static FILE* open_main_log(const RunDir& r, int resume_step) {
    std::string path = r.dir + "/main.log";
    if (resume_step < 0) return fopen_or_fail(path.c_str(), "w");
    std::string kept;
    if (file_exists(path.c_str())) {
        FILE* f = fopen_or_fail(path.c_str(), "rb");
        char line[1024];
        while (fgets(line, sizeof(line), f)) {
            int s;
            char kind[8];
            if (sscanf(line, "s:%d %3s", &s, kind) == 2 && (s < resume_step || (s == resume_step && !strcmp(kind, "trl"))))
                kept += line;
        }
        fclose(f);
    }
    AtomicFile a;
    atomic_open(&a, path);
    atomic_write(&a, kept.data(), 1, kept.size());
    atomic_finish(&a);
    return fopen_or_fail(path.c_str(), "a");
}

// a line of main.log, flushed, or one error (a full disk)
static void log_line(FILE* log, const char* fmt, ...) {
    if (!log) return;
    va_list ap;
    va_start(ap, fmt);
    int ok = vfprintf(log, fmt, ap) >= 0 && fflush(log) == 0;
    va_end(ap);
    if (!ok) fail("cannot write main.log (%s)", strerror(errno));
}
