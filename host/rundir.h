/*
host/rundir.h: the run directory (-o): main.log and the checkpoints, model_<step>.bin and state_<step>.bin, each
pair complete once DONE_<step> exists.
*/
#pragma once
#include <string>
#include <glob.h>
#include "utils.h"

static int latest_checkpoint(const char* dir) {
    std::string pattern = std::string(dir) + "/DONE_*";
    glob_t g;
    int best = -1;
    if (glob(pattern.c_str(), 0, nullptr, &g) == 0) {
        for (size_t i = 0; i < g.gl_pathc; i++) {
            const char* name = strrchr(g.gl_pathv[i], '/') + 1;
            int step;
            if (sscanf(name, "DONE_%d", &step) == 1 && step > best) best = step;
        }
        globfree(&g);
    }
    return best;
}
