#!/usr/bin/env python3
"""The course's autograders can fail (docs/exercises.md): each exercise's grader FAILS on its stub and on planted
mistakes, naming the equation that is off, and PASSES on the reference's own function; and the tool's errors are one
line each. All the stubs, mistakes and solutions are built into ONE grader program (exercises/exercise.py's build:
each a variant of its exercise's region), so the suite compiles the reference twice in all (that program, and one
student-style `check` from the command line). Ends with "N passed, N failed". With -v it prints each grader's
verdict (what docs/exercises.md quotes).

The planted mistakes are edits of the reference's own function (the text of its marked region), so they follow it:
if the reference's line changes, the edit no longer applies and its case fails, saying so.
"""
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "exercises"))
import exercise  # noqa: E402

# (exercise, the mistake, the reference's text, what the student wrote instead, what the grader must say)
PLANTED = [
    (1, "dx without the - mean(g) term", "w[i] * g[i] - gmean - xhat * gxmean", "w[i] * g[i] - xhat * gxmean",
     "That is the - mean(g) term"),
    (1, "dx overwritten (=), not accumulated (+=)", "dx[i] += s *", "dx[i] = s *",
     "look at:  each adds (+=) to what the buffer holds"),
    (2, "x' without 1/c_l", "add_forward(t.x_out, t.xh, t.z, t.inv_c, t.n)",
     "add_forward(t.x_out, t.xh, t.z, 1, t.n)", "look at:  x' = xh + z / c_l"),
    (2, "y' from the normalized yh", "add_forward(t.y_out, t.y, t.z, 1, t.n)",
     "add_forward(t.y_out, t.yh, t.z, 1, t.n)", "look at:  y' = y + z"),
    (3, "dz without 1/c_l", "add_backward(t.dxh, t.dz, t.dx_out, t.inv_c, t.n)",
     "add_backward(t.dxh, t.dz, t.dx_out, 1, t.n)", "look at:  dz = dx' / c_l + dy'"),
    (3, "dy without dy' (the Y stream's identity path)", "add_backward(t.dy, t.dz, t.dy_out, 1, t.n);",
     "for (size_t i = 0; i < t.n; i++) t.dz[i] += t.dy_out[i];", "look at:  dy = dy' + LN_y'(dyh)"),
    (3, "dy's LN_y gradient into dx", "layernorm_backward(t.LN_y, t.dy, t.dyh, t.y)",
     "layernorm_backward(t.LN_y, t.dx, t.dyh, t.y)", "look at:  dy = dy' + LN_y'(dyh)"),
    (4, "sum from the raw streams", "add_forward(t.sum, t.xf, t.yf, 1, t.n)",
     "add_forward(t.sum, t.x, t.y, 1, t.n)", "look at:  sum = xf + yf"),
    (4, "LN_yf's backward reads x", "layernorm_backward(t.LN_yf, t.dy, t.dyf, t.y)",
     "layernorm_backward(t.LN_yf, t.dy, t.dyf, t.x)", "look at:  dyf += dsum;  dy += LN_yf'(dyf)"),
    (5, "x' = LN(x), not LN(sum)", "layernorm_forward(t.LN, t.x_out, t.sum)", "layernorm_forward(t.LN, t.x_out, t.x)",
     "look at:  x' = LN(sum)"),
    (5, "F's gradient not into dx", "F_backward(t, t.x, t.dx)", "F_backward(t, t.x, t.du)",
     "look at:  dx = dsum + F'(dz)"),
    (6, "x' without 1/c_l", "add_forward(t.x_out, t.x, t.z, t.inv_c, t.n)", "add_forward(t.x_out, t.x, t.z, 1, t.n)",
     "look at:  x' = x + z / c_l"),
    (6, "u without c1", "gain_add_forward(t.u, t.c1, t.x, t.yh, t.n, C)",
     "add_forward(t.u, t.x, t.yh, 1, t.n + 0 * C)", "look at:  u = c1 x + yh"),
    (6, "dc1 from u, not x", "gain_add_backward(t.dc1, t.dx, t.dyh, t.du, t.c1, t.x, t.n, C)",
     "gain_add_backward(t.dc1, t.dx, t.dyh, t.du, t.c1, t.u, t.n, C)", "look at:  dc1 += the sum over tokens of du x"),
    (6, "dx without dx' (X's identity path at the attention)", "add_backward(t.dx, t.dz, t.dx_out, t.inv_c, t.n);",
     "for (size_t i = 0; i < t.n; i++) t.dz[i] += t.inv_c * t.dx_out[i];", "look at:  dx = dx' + c1 du"),
    (7, "dx without the - mean(g) term", "w[j][i] * g[i] - gmean - xhat * gxmean", "w[j][i] * g[i] - xhat * gxmean",
     "The - mean(g) term, over the row's"),
    (7, "the gains' gradient without xhat", "pdw[i] += xhat * g[i];", "pdw[i] += g[i];",
     "look at:  dw_j += sum over the tokens and heads of xhat * dout_j"),
    (7, "the part of a row taken as r % 3", "int j = r / NH % 3;", "int j = r % 3;",
     "look at:  db_j += sum over the tokens and heads of dout_j"),
    (8, "x' = u + z (from the normalized stream)", "add_forward(t.x_out, t.x, t.z, 1, t.n)",
     "add_forward(t.x_out, t.u, t.z, 1, t.n)", "look at:  x' = x + z"),
    (8, "dx without dx' (the identity path)", "add_backward(t.dx, t.dz, t.dx_out, 1, t.n);",
     "for (size_t i = 0; i < t.n; i++) t.dz[i] += t.dx_out[i];", "look at:  dx = dx' + LN'(du)"),
    (8, "F's gradient into dx, not du", "F_backward(t, t.u, t.du)", "F_backward(t, t.u, t.dx)",
     "look at:  dx += LN'(du)"),
]
# The verdict comes only from the grader's completed report (exercise.run_grader), never from the exit status or the
# output of the process the student's function runs in: each of these, put at the start of the reference's own
# layernorm_backward (exercise 1) so that it runs during the checks, must FAIL, saying that the grader did not
# finish. (name, the code, what the verdict says)
CALLS_3 = "static int calls_ = 0; if (++calls_ == 3) "  # the third call: after 4 of the checks have passed
ESCAPES = [
    ("exit(0)", CALLS_3 + "exit(0);", "it exited (status 0) before its report was complete"),
    ("_exit(0)", CALLS_3 + "_exit(0);", "it exited (status 0) before its report was complete"),
    ("std::quick_exit(0)", CALLS_3 + "std::quick_exit(0);", "it exited (status 0) before its report was complete"),
    ("abort()", CALLS_3 + "abort();", "it stopped on SIGABRT"),
    ("an exception thrown out of it", CALLS_3 + "throw 1;", "it stopped on SIGABRT"),
    ("closing every file descriptor", CALLS_3 + "for (int fd_ = 0; fd_ < 1024; fd_++) close(fd_);",
     "it exited (status 0) before its report was complete"),
]
# a wrong function that closes stdout and stderr, or floods stdout with a fake verdict, still FAILs, with the
# grader's own verdict as the last line; the reference's own that closes them still PASSes (its report is complete)
QUIET = "static int closed_ = 0; if (!closed_++) { fclose(stdout); fclose(stderr); close(1); close(2); }"
FLOOD = ('static int flooded_ = 0; if (!flooded_++) for (int i_ = 0; i_ < 200000; i_++) '
         'printf("PASS: exercise 1, all 5 checks\\n");')

# what each grader says first on its stub
STUB_SAYS = {1: "look at:  db += sum over the rows of dout", 2: "look at:  xh = LN_x(x)",
             3: "look at:  dz = dx' / c_l + dy'", 4: "look at:  xf = LN_xf(x)", 5: "look at:  z = F(x)",
             6: "look at:  yh = LN_y(y)", 7: "look at:  db_j += sum over the tokens and heads of dout_j",
             8: "look at:  u = LN(x)"}

# what docs/exercises.md says of the statuses (tested below on a stub: FAIL)
BATCH_STATUSES = "exit status 0 PASS, 1 FAIL, 2 an error"
MAKE_STATUSES = "exit status 0 PASS, 2 FAIL or an error"

passed = failed = 0
VERBOSE = "-v" in sys.argv[1:]  # print each grader's verdict too (docs/exercises.md's table of planted mistakes)


def case(name, ok, detail=""):
    global passed, failed
    if ok:
        passed += 1
        print("ok    %s" % name)
    else:
        failed += 1
        print("FAIL  %s%s" % (name, "\n" + detail if detail else ""))


def tool(*args, env=None):
    r = subprocess.run([sys.executable, os.path.join(ROOT, "exercises", "exercise.py")] + list(args),
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    return r.returncode, r.stdout, r.stderr


def one_error_line(name, result, says):
    """exit status 2, and stderr exactly one line `error: ...` containing `says`"""
    rc, out, err = result
    lines = err.strip().split("\n")
    case(name, rc == 2 and len(lines) == 1 and lines[0].startswith("error: ") and says in lines[0],
         "exit status %d, stderr %r" % (rc, err[-400:]))


def body_prefix(text, function, code):
    """text with `code` at the start of the body of `function`"""
    at = text.index("{", text.index("void %s(" % function)) + 1
    return text[:at] + "\n    " + code + text[at:]


def graders(folder):
    variants, cases = {}, []
    for n in exercise.EXERCISES:
        solution, _ = exercise.solution(n)
        variants[n] = [("stub", exercise.stub(n))]
        cases.append((n, 0, "stub", 1, STUB_SAYS[n]))
        for m, mistake, right, wrong, says in PLANTED:
            if m != n:
                continue
            if solution.count(right) != 1:
                case("exercise %d, planted: %s" % (n, mistake), False,
                     "  %r is not once in the reference's region: update PLANTED" % right)
                continue
            cases.append((n, len(variants[n]), mistake, 1, says))
            variants[n].append((mistake, solution.replace(right, wrong)))
        cases.append((n, len(variants[n]), "the reference's own", 0, "PASS: exercise %d, all" % n))
        variants[n].append(("the reference's own", solution))
    variants[5].append(("crash", exercise.solution(5)[0].replace("F_forward(t, t.x);", "abort();")))
    cases.append((5, len(variants[5]) - 1, "crash", 1, "it stopped on SIGABRT"))
    own, wrong = exercise.solution(1)[0], None
    for m, mistake, right, bad, says in PLANTED[:1]:
        wrong = (own.replace(right, bad), says)
    for name, code, says in ESCAPES:
        cases.append((1, len(variants[1]), "the reference's own, then " + name, 1,
                      "the grader did not finish its checks (4 done, the last: dx, dw, db accumulate): " + says))
        variants[1].append((name, body_prefix(own, "layernorm_backward", code)))
    cases.append((1, len(variants[1]), "a mistake that closes stdout and stderr", 1, wrong[1]))
    variants[1].append(("quiet", body_prefix(wrong[0], "layernorm_backward", QUIET)))
    cases.append((1, len(variants[1]), "the reference's own that closes stdout and stderr", 0, "PASS: exercise 1"))
    variants[1].append(("quiet", body_prefix(own, "layernorm_backward", QUIET)))
    cases.append((1, len(variants[1]), "a mistake that floods stdout with PASS lines", 1, wrong[1]))
    variants[1].append(("flood", body_prefix(wrong[0], "layernorm_backward", FLOOD)))
    binary = exercise.build(variants, folder)
    for n, v, name, want, says in cases:
        rc, out = exercise.run_grader(binary, n, v, name, capture=True)
        verdict = out[max(out.rfind("\nPASS: "), out.rfind("\nFAIL: ")) + 1:]
        # the verdict is the last thing said: PASS or FAIL as wanted, and what it must say
        ok = rc == want and verdict.startswith("PASS: " if want == 0 else "FAIL: ") and says in verdict
        case("exercise %d, %s: %s" % (n, name, "PASS" if want == 0 else "FAIL, " + says.replace("look at:  ", "")),
             ok, "  exit status %d, wanted %d; the grader said:\n%s" % (rc, want, out[-1500:]))
        if VERBOSE:  # the grader's verdict: its lines from PASS: or FAIL: on
            print("".join("      " + line + "\n" for line in verdict.rstrip("\n").split("\n")))


def command_line(tmp):
    env = dict(os.environ, TMPDIR=os.path.join(tmp, "tmp"))
    os.makedirs(env["TMPDIR"])
    one_error_line("no exercise 9", tool("check", "9", env=env), "there is no exercise '9'")
    one_error_line("no N", tool("check", "", env=env), "which exercise?")
    one_error_line("a missing file", tool("check", "2", os.path.join(tmp, "nothing.cpp"), env=env), "no such file")
    one_error_line("a folder, not a file", tool("check", "2", tmp, env=env), "not a regular file")
    bad = os.path.join(tmp, "bad.cpp")
    with open(bad, "w") as f:
        f.write("static void post_sublayer_forward(const SubLayer& t) { this is not C++ }\n"
                "static void post_sublayer_backward(const SubLayer& t) {}\n")
    rc, out, err = tool("check", "5", bad, env=env)
    one_error_line("a file that does not compile", (rc, out, err), "does not compile")
    case("... and the compiler's message names the student's file", "bad.cpp:1:" in out, out[-600:])
    with open(bad, "w") as f:
        f.write("static void siamese_head_forward(const Head& t) {}\n")
    one_error_line("a file without the exercise's function", tool("check", "4", bad, env=env),
                   "does not define siamese_head_backward")
    mine = os.path.join(tmp, "mine")
    os.makedirs(mine)
    rc, out, err = tool("start", "3", "--into", mine, env=env)
    path = os.path.join(mine, exercise.EXERCISES[3][0])
    with open(path) as f:
        case("start writes the stub", rc == 0 and f.read() == exercise.stub(3), err)
    one_error_line("start again: the file is kept", tool("start", "3", "--into", mine, env=env), "exists (your work)")
    with open(path, "w") as f:
        f.write("mine")
    rc, out, err = tool("reset", "3", "--into", mine, env=env)
    with open(path) as f:
        case("reset writes the stub over it", rc == 0 and f.read() == exercise.stub(3), err)
    solution = os.path.join(tmp, "solution.cpp")
    with open(solution, "w") as f:
        f.write(exercise.solution(5)[0])
    rc, out, err = tool("check", "5", solution, env=env)
    case("check N=5 on the reference's own function: PASS, exit status 0", rc == 0 and "PASS: exercise 5" in out,
         out[-800:] + err[-400:])
    # the exit statuses docs/exercises.md gives for a lecturer's batch, for the commands it gives them for
    with open(os.path.join(ROOT, "docs", "exercises.md"), encoding="utf-8") as f:
        docs = f.read()
    stub = os.path.join(tmp, "stub.cpp")
    with open(stub, "w") as f:
        f.write(exercise.stub(1))
    rc, out, err = tool("check", "1", stub, env=env)
    case("exercise.py check N FILE on a stub: FAIL as its last line, exit status 1 (docs: %s)" % BATCH_STATUSES,
         rc == 1 and out.rfind("\nFAIL: ") > out.rfind("\nPASS: ") and BATCH_STATUSES in docs,
         "exit status %d; %s" % (rc, out[-300:] + err[-300:]))
    plain = {k: v for k, v in env.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}  # not make test's
    r = subprocess.run(["make", "--no-print-directory", "-s", "exercise", "N=1", "FILE=" + stub], cwd=ROOT, env=plain,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    case("make exercise N=1 FILE=stub: FAIL, exit status 2, make's own for any failure (docs: %s)" % MAKE_STATUSES,
         r.returncode == 2 and "\nFAIL: " in r.stdout and MAKE_STATUSES in docs, "exit status %d" % r.returncode)
    rc, out, err = tool("solution", "2", env=env)
    case("solution prints the reference's function", rc == 0 and exercise.solution(2)[0] in out, err)
    rc = subprocess.run(["make", "--no-print-directory", "-s", "exercise", "N=9"], cwd=ROOT, env=plain,
                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    case("make exercise N=9: an error line, non-zero exit", rc.returncode != 0 and
         "error: there is no exercise '9'" in rc.stderr, rc.stderr[-400:])
    case("no temporary folders left", os.listdir(env["TMPDIR"]) == [], str(os.listdir(env["TMPDIR"])))


def background_outputs():
    """what make test's CUDA build in the background (tests/run_all.sh --build-cuda: make cuda-bins) may write while
    this suite runs: its programs (make print-cuda-bins), none of them this suite's"""
    r = subprocess.run(["make", "-s", "--no-print-directory", "print-cuda-bins"], cwd=ROOT, capture_output=True,
                       text=True)
    return set(r.stdout.split()) if r.returncode == 0 else set()


def tree_listing(root=ROOT, ignore=frozenset()):
    """every file and folder under exercises/ and tests/ (but the paths in `ignore`, relative to root), with its
    size and modification time: what the suite must leave as it found it (without git, as in a tarball, too)"""
    listing = []
    for top in ("exercises", "tests"):
        for folder, dirs, files in os.walk(os.path.join(root, top)):
            for name in sorted(dirs + files):
                path = os.path.join(folder, name)
                rel = os.path.relpath(path, root)
                if rel in ignore:
                    continue
                st = os.lstat(path)
                listing.append("%s %d %d" % (rel, st.st_size, st.st_mtime_ns))
    return sorted(listing)


def listing_cases(tmp):
    """the tree check sees what a grader leaves, and not what the background build writes beside this suite (it
    once failed make test on tests/test_gpu_cudnn, finished by that build during this suite)"""
    root = os.path.join(tmp, "tree")
    os.makedirs(os.path.join(root, "tests"))
    os.makedirs(os.path.join(root, "exercises"))
    built = background_outputs()
    case("make print-cuda-bins names the background build's programs",
         "tests/test_gpu_cudnn" in built or not shutil.which("nvcc"), str(sorted(built)))
    before = tree_listing(root, built)
    for rel in sorted(built):
        if rel.startswith(("tests/", "exercises/")):
            with open(os.path.join(root, rel), "w") as f:
                f.write("built meanwhile")
    case("a program the background build finishes meanwhile is not a leftover", tree_listing(root, built) == before)
    with open(os.path.join(root, "exercises", "1_layernorm_backward.cpp"), "w") as f:
        f.write("a stub left behind")
    case("a file a grader leaves is one", tree_listing(root, built) != before)


def main():
    built = background_outputs()
    before = tree_listing(ignore=built)
    tmp = tempfile.mkdtemp(prefix="test-exercises-")
    try:
        listing_cases(tmp)
        try:
            graders(tmp)
        except exercise.Error as e:
            case("the graders build", False, "  error: %s" % e)
        command_line(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    after = tree_listing(ignore=built)
    case("nothing left in exercises/ or tests/", after == before,
         "\n".join("  + " + x for x in sorted(set(after) - set(before))) + "\n" +
         "\n".join("  - " + x for x in sorted(set(before) - set(after))))
    print("%d passed, %d failed" % (passed, failed))
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
