#!/usr/bin/env python3
"""The course unit's tool (docs/exercises.md): the exercises are reference_cpu.cpp with holes.

    python3 exercises/exercise.py start N      make exercises/N_*.cpp, the stub (make exercise-start N=...)
    python3 exercises/exercise.py check N [FILE]   build the reference with FILE's function in place of its own and
                                               grade it (make exercise N=... [FILE=...]); exit 0 PASS, 1 FAIL
    python3 exercises/exercise.py reset N      the stub again, over your file (make exercise-reset N=...)
    python3 exercises/exercise.py solution N   print the reference's own function (make exercise-solution N=...)
    python3 exercises/exercise.py stub N       print the stub
    python3 exercises/exercise.py list         the exercises, and the state of your files

Exercise N is the region of reference_cpu.cpp between the lines `// EXERCISE N BEGIN` and `// EXERCISE N END`: one
or two whole functions. The stub is that region with each function's body cut out, so stub and solution cannot
drift apart. To grade a file, a copy of reference_cpu.cpp (in a temporary folder, removed after) gets, in the
region's place: the file (its functions renamed by #define), the reference's own functions (renamed too), and under
the region's names functions that call one or the other as exercise_variant[N][i] says; exercises/grader.cpp is
built against it (float64, -DREAL=double) and runs the finite-difference checks. Only the standard library is needed.
The verdict (exit status 0 PASS, 1 FAIL) comes only from the grader's own completed report, sent on a pipe of its own
and tagged with a nonce (run_grader), never from the exit status or the output of the process that the student's
function runs in: a function that ends it (exit, abort, a crash) or closes or floods its output FAILs, saying so.
Every error of the tool or the setup is one line `error: ...` and exit status 2. (`make exercise` turns both 1 and 2
into make's own 2.)
"""
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REFERENCE = os.path.join(ROOT, "reference_cpu.cpp")
GRADER = os.path.join(ROOT, "exercises", "grader.cpp")
# float64 (the finite differences need it); -O1: the checks run several times faster than at -O0 for a somewhat
# longer build (make test runs some twenty graders on one build). No OpenMP: one thread, as the tiny model wants.
# The stubs leave parameters unused: no warning for that.
CXXFLAGS = ["-O1", "-march=native", "-std=c++17", "-Wall", "-Wextra", "-Wno-unused-function", "-Wno-unused-parameter",
            "-Wno-unknown-pragmas", "-DREAL=double"]
GRADE_TIMEOUT = 300  # seconds: far more than the checks take; a loop that does not end
REPORT_LIMIT = 1 << 20  # bytes: the grader's report is a line a check (some thousands of bytes)

# number: (file under exercises/, the functions of its region in order, what the student's file begins with)
EXERCISES = {
    1: ("1_layernorm_backward.cpp", ["layernorm_backward"], """\
// Exercise 1: LayerNorm's backward pass. The lesson and the hints: docs/exercises.md, exercise 1.
//
// The forward (layernorm_forward in reference_cpu.cpp), for each of the N rows x of C channels:
//     mean = sum(x) / C;  rstd = 1 / sqrt(sum((x - mean)^2) / C + 1e-5);  xhat = (x - mean) rstd;  out = w xhat + b
// It kept mean[n] and rstd[n] for you. From dout = dL/dout, ADD (+=) the gradients into dinp = dL/dx (N rows of C),
// dw = dL/dw and db = dL/db (C each).
//
// Check it: make exercise N=1    the stub again: make exercise-reset N=1    the reference's: make exercise-solution N=1
"""),
    2: ("2_siamese_sublayer_forward.cpp", ["siamese_sublayer_forward"], """\
// Exercise 2: SiameseNorm's sub-layer boundary, forward. The lesson and the hints: docs/exercises.md, exercise 2.
//
// Sub-layer F (the attention or the MLP) of block l, c_l = sqrt(2(l+1)):
//     xh = LN_x(x);  yh = LN_y(y);  sum = xh + yh;  u = LN_in(sum);  z = F(u);  x' = xh + z / c_l;  y' = y + z
// Write each into its tensor of t: t.xh, t.yh, t.sum, t.u, t.z, t.x_out (x'), t.y_out (y'); the backward reads them.
// The pieces: layernorm_forward(t.LN_x, out, inp), add_forward(out, a, b, scale, t.n) (out = a + scale b, t.n
// elements), F_forward(t, u) (z = F(u) into t.z). t.inv_c is 1/c_l. Under --no-ln-in t.has_ln_in is 0: then u = sum.
//
// Check it: make exercise N=2    the stub again: make exercise-reset N=2    the reference's: make exercise-solution N=2
"""),
    3: ("3_siamese_sublayer_backward.cpp", ["siamese_sublayer_backward"], """\
// Exercise 3: SiameseNorm's sub-layer boundary, backward. The lesson and the hints: docs/exercises.md, exercise 3.
//
// The forward (exercise 2), c_l = sqrt(2(l+1)):
//     xh = LN_x(x);  yh = LN_y(y);  sum = xh + yh;  u = LN_in(sum);  z = F(u);  x' = xh + z / c_l;  y' = y + z
// From t.dx_out = dL/dx' and t.dy_out = dL/dy', ADD (+=) dL/dx into t.dx and dL/dy into t.dy, by way of t.dxh,
// t.dyh, t.dsum, t.du, t.dz (all start at 0), and the LayerNorms' and F's parameter gradients. The pieces:
// add_backward(da, db, dout, scale, t.n) (the backward of out = a + scale b: da += dout, db += scale dout),
// F_backward(t, u, du) (du += F'(dz) from t.dz, and F's weights), layernorm_backward(t.LN_x, dinp, dout, inp).
// Under --no-ln-in t.has_ln_in is 0: then u = sum, so F's input is t.sum and its gradient goes to t.dsum.
//
// Check it: make exercise N=3    the stub again: make exercise-reset N=3    the reference's: make exercise-solution N=3
"""),
    4: ("4_siamese_head.cpp", ["siamese_head_forward", "siamese_head_backward"], """\
// Exercise 4: SiameseNorm's head, forward and backward. The lesson and the hints: docs/exercises.md, exercise 4.
//
//     xf = LN_xf(x);  yf = LN_yf(y);  sum = xf + yf;  hf = LN_f(sum);  logits = hf wte^T
// Forward: each into its tensor of t (t.xf, t.yf, t.sum, t.hf); classifier_forward(t, hf) makes the logits.
// Backward: classifier_backward(t, hf, dhf) adds dL/dhf into dhf (and wte's gradient); from there ADD (+=) into
// t.dx and t.dy, by way of t.dsum, t.dxf, t.dyf (all start at 0). The pieces as in exercises 2 and 3.
//
// Check it: make exercise N=4    the stub again: make exercise-reset N=4    the reference's: make exercise-solution N=4
"""),
    5: ("5_post_sublayer.cpp", ["post_sublayer_forward", "post_sublayer_backward"], """\
// Exercise 5: Post-Norm's sub-layer boundary from the same pieces, forward and backward. The lesson and the hints:
// docs/exercises.md, exercise 5.
//
//     z = F(x);  sum = x + z;  x' = LN(sum)      (GPT-1, the original Transformer: the LayerNorm after the sum)
// Forward: F_forward(t, t.x) makes t.z from the stream itself; then t.sum and t.x_out (x'). Backward: from
// t.dx_out, ADD (+=) into t.dx by way of t.dsum and t.dz (start at 0); F_backward(t, u, du) adds F's input gradient
// into du. The sub-layer's LayerNorm is t.LN.
//
// Check it: make exercise N=5    the stub again: make exercise-reset N=5    the reference's: make exercise-solution N=5
"""),
    6: ("6_siamese_c1_sublayer.cpp", ["siamese_c1_sublayer_forward", "siamese_c1_sublayer_backward"], """\
// Exercise 6: siamese-hybrid's attention sub-layer (SiameseNorm's language-model form: HybridNorm's X stream, a
// learned gain c1), forward and backward. The lesson and the hints: docs/exercises.md, exercise 6.
//
// Block l, c_l = sqrt(2(l+1)); no LN_x, no LN_in; c1 a gain of C channels per block (t.c1, its gradient t.dc1):
//     yh = LN_y(y);  u = c1 x + yh;  z = F(u);  x' = x + z / c_l;  y' = y + z
// Forward: each into its tensor of t (t.yh, t.u, t.z, t.x_out, t.y_out). Backward: from t.dx_out and t.dy_out, ADD
// (+=) into t.dx, t.dy and t.dc1 by way of t.du, t.dyh, t.dz (all start at 0). New pieces: gain_add_forward(out, g,
// a, b, t.n, C) (out = g a + b, g of C channels) and gain_add_backward(dg, da, db, dout, g, a, t.n, C) (dg += the sum
// over rows of dout a, da += g dout, db += dout); C is t.m->config.channels. The others as in exercises 2 and 3.
//
// Check it: make exercise N=6    the stub again: make exercise-reset N=6    the reference's: make exercise-solution N=6
"""),
    7: ("7_qkv_norm_backward.cpp", ["qkv_norm_backward"], """\
// Exercise 7: the QKV-norm's backward pass (HybridNorm's attention: q, k and v LayerNorm-ed per head). The lesson
// and the hints: docs/exercises.md, exercise 7.
//
// The forward (qkv_norm_forward in reference_cpu.cpp): inp (N tokens, 3C) holds q, k, v, each NH heads of hs = C/NH
// channels, so N * 3 * NH rows of hs; row r is token r / (3 NH), part j = (r / NH) % 3 (0 q, 1 k, 2 v), head r % NH:
//     mean, rstd over the row's hs channels;  xhat = (x - mean) rstd;  out = w[j] xhat + b[j]
// w[j], b[j] (hs each) are shared by every head and token of part j. It kept mean[r] and rstd[r] for you. From
// dout, ADD (+=) the gradients into dinp (N, 3C) and dw[j], db[j] (hs each, j = 0, 1, 2).
//
// Check it: make exercise N=7    the stub again: make exercise-reset N=7    the reference's: make exercise-solution N=7
"""),
    8: ("8_pre_sublayer.cpp", ["pre_sublayer_forward", "pre_sublayer_backward"], """\
// Exercise 8: Pre-Norm's sub-layer (GPT-2) from the same pieces, forward and backward. The lesson and the hints:
// docs/exercises.md, exercise 8.
//
//     u = LN(x);  z = F(u);  x' = x + z          (the LayerNorm before F; the stream itself is never normalized)
// Forward: t.u, t.z (F_forward(t, u)), t.x_out (x'). Backward: from t.dx_out, ADD (+=) into t.dx by way of t.dz and
// t.du (start at 0); F_backward(t, u, du) adds F's input gradient into du. The sub-layer's LayerNorm is t.LN.
//
// Check it: make exercise N=8    the stub again: make exercise-reset N=8    the reference's: make exercise-solution N=8
"""),
}
STUB_BODY = "    // your code here\n"


class Error(Exception):
    """One line for the user: the tool prints it as `error: ...` and exits 2."""


def rel(path):
    """path as the user sees it: relative to the current folder where that is shorter"""
    r = os.path.relpath(path)
    return r if not r.startswith("../..") else path


def exercise(n_text):
    names = ", ".join("%d %s" % (n, " and ".join(e[1])) for n, e in EXERCISES.items())
    if n_text in ("", None):
        raise Error("which exercise? N=1 to %d (%s)" % (len(EXERCISES), names))
    if not re.fullmatch(r"[0-9]+", n_text) or int(n_text) not in EXERCISES:
        raise Error("there is no exercise '%s': N=1 to %d (%s)" % (n_text, len(EXERCISES), names))
    return int(n_text)


def student_path(n, folder=None):
    return os.path.join(folder or os.path.join(ROOT, "exercises"), EXERCISES[n][0])


# ------------------------------------------------------------------------------------------------------------------
# the regions of reference_cpu.cpp and the functions in them

def read_reference():
    try:
        with open(REFERENCE, encoding="utf-8") as f:
            return f.read().split("\n")
    except OSError as e:
        raise Error("cannot read %s: %s" % (rel(REFERENCE), e.strerror))


def region(lines, n):
    """(index of the BEGIN line, index of the END line) of exercise n's region"""
    begin = [i for i, l in enumerate(lines) if re.match(r"\s*// EXERCISE %d BEGIN\b" % n, l)]
    end = [i for i, l in enumerate(lines) if re.match(r"\s*// EXERCISE %d END\b" % n, l)]
    if len(begin) != 1 or len(end) != 1 or end[0] < begin[0]:
        raise Error("%s: exercise %d's region is not one `// EXERCISE %d BEGIN` line and then one "
                    "`// EXERCISE %d END` line" % (rel(REFERENCE), n, n, n))
    return begin[0], end[0]


def strip_comments(text):
    """text with its comments and string literals blanked (same length, newlines kept)"""
    def blank(m):
        return re.sub(r"[^\n]", " ", m.group(0))
    return re.sub(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', blank, text, flags=re.S)


def functions(text, where):
    """the void functions defined in text: (name, parameters, arguments, start of the definition, index of its body's
    '{', index just past its '}')"""
    code = strip_comments(text)
    found = []
    for m in re.finditer(r"^[ \t]*static[ \t]+void[ \t]+(\w+)[ \t]*\(", code, flags=re.M):
        depth, i = 1, m.end()
        while depth and i < len(code):
            depth += {"(": 1, ")": -1}.get(code[i], 0)
            i += 1
        params = " ".join(code[m.end():i - 1].split())
        brace = code.find("{", i)
        if brace < 0 or code[i:brace].strip():
            raise Error("%s: %s is declared, not defined, in exercise's region" % (where, m.group(1)))
        depth, j = 1, brace + 1
        while depth and j < len(code):
            depth += {"{": 1, "}": -1}.get(code[j], 0)
            j += 1
        args = [re.search(r"(\w+)\s*(\[\w*\]\s*)*$", p).group(1) for p in params.split(",")] if params else []
        found.append((m.group(1), params, args, m.start(), brace, j))
    return found


def solution(n):
    """(the region's text, the line number of its first line in reference_cpu.cpp)"""
    lines = read_reference()
    b, e = region(lines, n)
    text = "\n".join(lines[b + 1:e]) + "\n"
    names = [f[0] for f in functions(text, rel(REFERENCE))]
    if names != EXERCISES[n][1]:
        raise Error("%s: exercise %d's region defines %s, not %s (exercises/exercise.py's table)" % (
            rel(REFERENCE), n, ", ".join(names) or "nothing", ", ".join(EXERCISES[n][1])))
    return text, b + 2


def stub(n):
    """the region with each function's body cut out, under the exercise's header"""
    text, _ = solution(n)
    parts = [text[f[3]:f[4] + 1] + "\n" + STUB_BODY + "}\n" for f in functions(text, rel(REFERENCE))]
    return EXERCISES[n][2] + "\n" + "\n".join(parts)


# ------------------------------------------------------------------------------------------------------------------
# building and running the grader

def patched_reference(variants):
    """reference_cpu.cpp with each exercise n of `variants` ({n: [(file name, text), ...]}) in its region's place"""
    lines = read_reference()
    out = ['#line 1 "%s"' % rel(REFERENCE)]
    cuts = sorted((region(lines, n), n) for n in variants)
    at = 0
    for (b, e), n in cuts:
        out += lines[at:b + 1]
        text, first_line = solution(n)
        defs = functions(text, rel(REFERENCE))
        for k, (name, text_k) in enumerate(variants[n]):
            out += ["#define %s exercise_%d_variant_%d_%s" % (f[0], n, k, f[0]) for f in defs]
            out += ['#line 1 "%s"' % name.replace("\\", "\\\\").replace('"', '\\"'), text_k, ""]
            out += ["#undef %s" % f[0] for f in defs]
        out += ["#define %s exercise_%d_reference_%s" % (f[0], n, f[0]) for f in defs]
        out += ['#line %d "%s"' % (first_line, rel(REFERENCE)), text]
        out += ["#undef %s" % f[0] for f in defs]
        out.append('#line 1 "(exercise %d: the functions that call yours or the reference\'s)"' % n)
        for i, (name, params, args, *_) in enumerate(defs):
            call = "(%s)" % ", ".join(args)
            cases = " ".join("case %d: exercise_%d_variant_%d_%s%s; return;" % (k, n, k, name, call)
                             for k in range(len(variants[n])))
            out.append("static void %s(%s) {" % (name, params))
            out.append("    switch (exercise_variant[%d][%d]) { %s default: exercise_%d_reference_%s%s; }" % (
                n, i, cases, n, name, call))
            out.append("}")
        out.append('#line %d "%s"' % (e + 1, rel(REFERENCE)))
        at = e
    out += lines[at:]
    return "\n".join(out)


def read_student(n, path):
    if not os.path.exists(path):
        if os.path.abspath(path) == os.path.abspath(student_path(n)):
            raise Error("%s does not exist yet: make exercise-start N=%d makes it (the stub)" % (rel(path), n))
        raise Error("%s: no such file" % rel(path))
    if not os.path.isfile(path):
        raise Error("%s is not a regular file" % rel(path))
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise Error("cannot read %s: %s" % (rel(path), getattr(e, "strerror", None) or e))
    code = strip_comments(text)
    for name in EXERCISES[n][1]:
        if not re.search(r"\bvoid\s+%s\s*\(" % name, code):
            raise Error("%s does not define %s (exercise %d is %s; make exercise-reset N=%d gives the stub)" % (
                rel(path), name, n, " and ".join(EXERCISES[n][1]), n))
    return text


def build(variants, folder):
    """the grader with `variants` ({n: [(file name, text), ...]}) compiled in `folder`; its path"""
    source = patched_reference(variants)
    with open(os.path.join(folder, "reference_exercise.cpp"), "w", encoding="utf-8") as f:
        f.write(source)
    binary = os.path.join(folder, "grader")
    cxx = os.environ.get("CXX") or "g++"
    command = [cxx] + CXXFLAGS + ["-I", folder, "-I", ROOT, "-o", binary, GRADER]
    try:
        r = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           cwd=os.getcwd())
    except OSError as e:
        raise Error("cannot run the compiler %s: %s" % (cxx, e.strerror))
    if r.returncode != 0:
        sys.stdout.write(r.stdout)
        names = sorted({name for files in variants.values() for name, _ in files})
        raise Error("%s does not compile (%s's messages above)" % (", ".join(names), cxx))
    if r.stdout.strip():
        sys.stdout.write(r.stdout)  # the warnings: worth reading
    return binary


def read_report(fd, into):
    """the lines of the grader's report (its pipe's read end fd), into the list `into`, until the pipe closes"""
    with os.fdopen(fd, "rb") as f:
        data = f.read(REPORT_LIMIT)
        while f.read(1 << 16):  # a report past the limit is not the grader's: drain it, keep nothing more
            data = b""
    into.extend(data.decode("utf-8", "replace").splitlines())


def verdict_of(report, nonce):
    """(status 0 PASS or 1 FAIL, the verdict's lines) from a complete report; None if the report is not complete:
    its last line `NONCE end CHECKS FAILED`, after one line a check (CHECKS of them, FAILED of them FAIL) and the
    verdict, every line tagged with the nonce. Raises Error for the grader's own internal error."""
    lines = [l.split(" ", 2) for l in report]
    if any(len(l) < 2 or l[0] != nonce for l in lines):
        return None
    for l in lines:
        if l[1] == "internal":
            raise Error("the grader failed (not your function): %s" % (l[2] if len(l) > 2 else "?"))
    if not lines or lines[-1][1] != "end" or any(l[1] == "end" for l in lines[:-1]):
        return None
    counts = (lines[-1][2] if len(lines[-1]) > 2 else "").split()
    checks = [l for l in lines if l[1] in ("PASS", "FAIL")]
    failed = sum(l[1] == "FAIL" for l in checks)
    verdict = [l[2] if len(l) > 2 else "" for l in lines if l[1] == "verdict"]
    if counts != [str(len(checks)), str(failed)] or not checks or not verdict:
        return None
    if not verdict[0].startswith("PASS: " if failed == 0 else "FAIL: "):
        return None
    return (0 if failed == 0 else 1), verdict


def run_grader(binary, n, variant, label, capture=False):
    """The verdict (0 PASS, 1 FAIL) from the grader's own completed report, never from its exit status or its
    output, which the student's function, running inside the grader, can end, close or flood (exit(0), abort(), a
    crash, fclose(stdout), ...): the report comes on a pipe of its own (GRADER_REPORT_FD), every line tagged with a
    nonce written to the grader's stdin, and ends with the number of checks and failures. A report cut short is a
    FAIL that says how the grader ended. The grader's output goes to ours and the verdict is printed last, by this
    function; with capture both come back: (status, output)."""
    sys.stdout.flush()
    nonce = secrets.token_hex(16)
    read_end, write_end = os.pipe()
    report = []
    reader = threading.Thread(target=read_report, args=(read_end, report), daemon=True)
    pipe = dict(stdout=subprocess.PIPE, stderr=subprocess.STDOUT) if capture else {}
    try:
        proc = subprocess.Popen([binary, str(n), str(variant), label], stdin=subprocess.PIPE, pass_fds=(write_end,),
                                env=dict(os.environ, GRADER_REPORT_FD=str(write_end)), **pipe)
    except OSError as e:
        os.close(read_end)
        os.close(write_end)
        raise Error("cannot run the grader %s: %s" % (binary, e.strerror))
    os.close(write_end)
    reader.start()
    timed_out = False
    try:  # (a grader that ends before it reads the nonce leaves an incomplete report)
        output, _ = proc.communicate((nonce + "\n").encode(), timeout=GRADE_TIMEOUT)
    except subprocess.TimeoutExpired:
        timed_out = True
        proc.kill()
        output, _ = proc.communicate()
    reader.join(10)
    output = (output or b"").decode("utf-8", "replace")
    ended = verdict_of(report, nonce)
    if ended is not None:
        status, lines = ended
    else:
        done = [l.split(" ", 2) for l in report if l.startswith(nonce + " PASS ") or l.startswith(nonce + " FAIL ")]
        if timed_out:
            how = "it ran more than %d s (the checks take seconds): a loop in your function that does not end?" % (
                GRADE_TIMEOUT)
        elif proc.returncode < 0:
            how = "it stopped on %s: your function wrote or read outside its tensors, or called abort()?" % (
                signal.Signals(-proc.returncode).name)
        else:
            how = ("it exited (status %d) before its report was complete: does your function call exit, _exit, "
                   "quick_exit, or close the grader's files?" % proc.returncode)
        status, lines = 1, ["FAIL: exercise %d: the grader did not finish its checks (%d done%s): %s" % (
            n, len(done), ", the last: " + done[-1][2] if done and len(done[-1]) > 2 else "", how)]
    text = "".join(line + "\n" for line in lines)
    if capture:
        return status, output + text
    sys.stdout.write(text)
    return status


def check(n, path):
    text = read_student(n, path)
    folder = tempfile.mkdtemp(prefix="siamese-exercise-")
    try:
        binary = build({n: [(rel(path), text)]}, folder)
        return run_grader(binary, n, 0, rel(path))
    finally:
        shutil.rmtree(folder, ignore_errors=True)


# ------------------------------------------------------------------------------------------------------------------

def main(argv):
    usage = ("usage: exercise.py start N [--into DIR] | check N [FILE] | reset N [--into DIR] | solution N | "
             "stub N | list")
    if not argv:
        raise Error(usage)
    command, args = argv[0], argv[1:]
    into = None
    if "--into" in args:
        i = args.index("--into")
        if i + 1 >= len(args):
            raise Error(usage)
        into = args[i + 1]
        del args[i:i + 2]
    if command == "list" and not args:
        for n, (name, funcs, _) in EXERCISES.items():
            path = student_path(n)
            state = "not started (make exercise-start N=%d)" % n
            if os.path.isfile(path):
                with open(path, encoding="utf-8", errors="replace") as f:
                    state = "the stub" if f.read() == stub(n) else "yours"
            width = max(len(" and ".join(e[1])) for e in EXERCISES.values())
            print("%d  %-*s  exercises/%-31s %s" % (n, width, " and ".join(funcs), name, state))
        return 0
    if command not in ("start", "check", "reset", "solution", "stub") or not 1 <= len(args) <= 2:
        raise Error(usage)
    n = exercise(args[0])
    if len(args) == 2 and command != "check":
        raise Error(usage)
    if command == "check":
        file = args[1] if len(args) == 2 and args[1] else student_path(n)
        return check(n, file)
    if command == "stub":
        sys.stdout.write(stub(n))
        return 0
    if command == "solution":
        text, first = solution(n)
        print("// the reference's own, reference_cpu.cpp lines %d-%d:" % (first, first + text.count("\n") - 1))
        sys.stdout.write(text)
        return 0
    path = student_path(n, into)
    if command == "start" and os.path.exists(path):
        raise Error("%s exists (your work); make exercise-reset N=%d replaces it with the stub" % (rel(path), n))
    text = stub(n)
    try:
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
    except OSError as e:
        raise Error("cannot write %s: %s" % (rel(path), e.strerror))
    print("%s: the stub of exercise %d; fill it in, then: make exercise N=%d" % (rel(path), n, n))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except Error as e:
        sys.stdout.flush()
        print("error: %s" % e, file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        sys.exit(130)
