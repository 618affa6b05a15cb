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
    (4, "h from the raw streams", "add_forward(t.h, t.xf, t.yf, 1, t.n)",
     "add_forward(t.h, t.x, t.y, 1, t.n)", "look at:  h = xf + yf"),
    (4, "LN_yf's backward reads x", "layernorm_backward(t.LN_yf, t.dy, t.dyf, t.y)",
     "layernorm_backward(t.LN_yf, t.dy, t.dyf, t.x)", "look at:  dyf += dh;  dy += LN_yf'(dyf)"),
    (5, "x' = LN(x), not LN(h)", "layernorm_forward(t.LN, t.x_out, t.h)", "layernorm_forward(t.LN, t.x_out, t.x)",
     "look at:  x' = LN(h)"),
    (5, "F's gradient not into dx", "F_backward(t, t.x, t.dx)", "F_backward(t, t.x, t.du)",
     "look at:  dx = dh + F'(dz)"),
]
# what each grader says first on its stub
STUB_SAYS = {1: "look at:  db += sum over the rows of dout", 2: "look at:  xh = LN_x(x)",
             3: "look at:  dz = dx' / c_l + dy'", 4: "look at:  xf = LN_xf(x)", 5: "look at:  z = F(x)"}

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
    binary = exercise.build(variants, folder)
    for n, v, name, want, says in cases:
        rc, out = exercise.run_grader(binary, n, v, name, capture=True)
        ok = rc == want and says in out and (want == 0 or "FAIL: " in out)
        case("exercise %d, %s: %s" % (n, name, "PASS" if want == 0 else "FAIL, " + says.replace("look at:  ", "")),
             ok, "  exit status %d, wanted %d; the grader said:\n%s" % (rc, want, out[-1500:]))
        if VERBOSE:  # the grader's verdict: its lines from PASS: or FAIL: on
            verdict = out[max(out.rfind("\nPASS: "), out.rfind("\nFAIL: ")) + 1:]
            print("".join("      " + line + "\n" for line in verdict.rstrip("\n").split("\n")))
    try:
        exercise.run_grader(binary, 5, len(variants[5]) - 1, "crash", capture=True)
        case("a function that crashes: one error line", False, "  no error")
    except exercise.Error as e:
        case("a function that crashes: one error line", "stopped on SIGABRT" in str(e), "  " + str(e))


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
    rc, out, err = tool("solution", "2", env=env)
    case("solution prints the reference's function", rc == 0 and exercise.solution(2)[0] in out, err)
    plain = {k: v for k, v in env.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}  # not make test's
    rc = subprocess.run(["make", "--no-print-directory", "-s", "exercise", "N=7"], cwd=ROOT, env=plain,
                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    case("make exercise N=7: an error line, non-zero exit", rc.returncode != 0 and
         "error: there is no exercise '7'" in rc.stderr, rc.stderr[-400:])
    case("no temporary folders left", os.listdir(env["TMPDIR"]) == [], str(os.listdir(env["TMPDIR"])))


def main():
    git_status = ["git", "status", "--porcelain", "--untracked-files=all", "--ignored", "--", "exercises", "tests"]
    status = subprocess.run(git_status, cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    tmp = tempfile.mkdtemp(prefix="test-exercises-")
    try:
        try:
            graders(tmp)
        except exercise.Error as e:
            case("the graders build", False, "  error: %s" % e)
        command_line(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if status.returncode == 0:
        after = subprocess.run(git_status, cwd=ROOT,
                               stdout=subprocess.PIPE, text=True).stdout
        case("nothing left in the working tree", after == status.stdout, after)
    print("%d passed, %d failed" % (passed, failed))
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
