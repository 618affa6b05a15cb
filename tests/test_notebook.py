#!/usr/bin/env python3
"""The class notebook (docs/siamesenorm_class.py, and the .ipynb built from it) and tools/notebook.py:

  - the committed docs/siamesenorm_class.ipynb is what tools/notebook.py builds from the .py (so the two never
    drift apart), and nbformat validates it;
  - the notebook runs end to end in a fresh kernel (Debian's python3-nbclient and python3-ipykernel) at the test
    length (SIAMESE_CLASS=test: every cell, the race and the training a few steps), with no C++ toolchain needed:
    each of its own checks passes (cover one stream to float64 rounding, the hand-written backward against
    autograd, Post-Norm's stream at RMS 1), every code cell ran, it has cells that ask for a prediction before the
    cell that measures, and it leaves no file in the repository or the temporary folder;
  - the tool's errors: a cell that fails, a malformed cell marker, a file that is not .py, a missing file, an
    .ipynb edited by hand: one `error:` line, exit status 1, nothing written.

Ends with "N passed, N failed".

    /usr/bin/python3 tests/test_notebook.py
"""
import json
import os
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOOL = os.path.join(REPO, "tools", "notebook.py")
SOURCE = os.path.join(REPO, "docs", "siamesenorm_class.py")
NOTEBOOK = os.path.join(REPO, "docs", "siamesenorm_class.ipynb")
passed = failed = 0


def check(ok, what, detail=""):
    global passed, failed
    passed, failed = passed + bool(ok), failed + (not ok)
    print(f"{'ok  ' if ok else 'FAIL'}  {what}")
    if not ok and detail:
        print("      " + detail.strip().replace("\n", "\n      ")[-1500:])
    return ok


def tool(*args, env=None):
    return subprocess.run([sys.executable, TOOL] + list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, env=env, cwd=REPO)


def repo_state():
    """the repository's files that git does not ignore and that are not committed as they are (the run's debris)"""
    r = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=REPO, stdout=subprocess.PIPE,
                       stderr=subprocess.DEVNULL, universal_newlines=True)
    return r.stdout if r.returncode == 0 else None


def one_error_line(r, said):
    lines = r.stderr.strip().splitlines()
    return r.returncode == 1 and len(lines) == 1 and lines[0].startswith("error: ") and said in lines[0]


def main():
    start = time.time()
    try:
        import nbclient  # noqa: F401
        import nbformat
    except ImportError as e:
        print(f"test_notebook: {e} with {sys.executable}: install python3-nbclient python3-ipykernel (.ci/deps test)")
        print("0 passed, 1 failed")
        sys.exit(1)

    r = tool("check", SOURCE)
    check(r.returncode == 0, "docs/siamesenorm_class.ipynb is what tools/notebook.py builds from the .py", r.stderr)
    nb = nbformat.read(NOTEBOOK, as_version=4)
    try:
        nbformat.validate(nb)
        check(True, "nbformat validates docs/siamesenorm_class.ipynb")
    except nbformat.ValidationError as e:
        check(False, "nbformat validates docs/siamesenorm_class.ipynb", str(e))
    code = [c.source for c in nb.cells if c.cell_type == "code"]
    predictions = [i for i, s in enumerate(code) if s.startswith("prediction_")]
    check(len(predictions) >= 2 and all(i + 1 < len(code) and code[i].split("=")[0].strip() in code[i + 1]
                                        for i in predictions),
          f"{len(predictions)} cells ask for a prediction, each read by the cell after it, which measures")
    check(not any("reference_cpu" in s and ("subprocess" in s or "os.system" in s) for s in code),
          "no cell runs the C++ (the notebook needs no toolchain; it only reads reference_cpu.cpp's text)")

    before = repo_state()
    with tempfile.TemporaryDirectory(prefix="test_notebook_") as tmp:
        env = dict(os.environ, IPYTHONDIR=os.path.join(tmp, "ipython"), MPLCONFIGDIR=os.path.join(tmp, "mpl"))
        executed = os.path.join(tmp, "executed.ipynb")
        t0 = time.time()
        r = tool("run", SOURCE, "--length", "test", "-o", executed, "--timeout", "600", env=env)
        ran = check(r.returncode == 0 and os.path.isfile(executed),
                    f"the notebook runs end to end at the test length ({time.time() - t0:.0f} s)", r.stdout + r.stderr)
        if ran:
            out = nbformat.read(executed, as_version=4)
            cells = [c for c in out.cells if c.cell_type == "code"]
            check(all(c.execution_count for c in cells) and not any(o.get("output_type") == "error" for c in cells
                                                                     for o in c.outputs),
                  f"all {len(cells)} code cells ran, none with an error")
            text = "\n".join("".join(o.get("text", "")) for c in cells for o in c.outputs)
            figures = sum("image/png" in o.get("data", {}) for c in cells for o in c.outputs)
            check("with the named differences" in text and "relative error of each gradient" in text
                  and "validation loss at the end" in text and figures >= 2,
                  f"its outputs: the cover-one-stream table, the backward's errors, the race's losses, {figures} figures")
        # a failing cell, in a notebook of the tool's own making (a fresh kernel, no PyTorch)
        bad = os.path.join(tmp, "bad.py")
        with open(bad, "w") as f:
            f.write("# %% [markdown]\n# # a notebook\n\n# %%\nx = 1\n\n# %%\nassert x == 2, 'x is not 2'\n")
        r = tool("run", bad, "--length", "test", env=env)
        check(one_error_line(r, "x is not 2"), "a failing cell: one error line with its message, exit 1", r.stderr)
        for name, text, said in (("marker.py", "# %% [raw]\nx = 1\n", "a cell marker is"),
                                 ("markdown.py", "# %% [markdown]\nnot a comment\n# %%\nx = 1\n", "are comments"),
                                 ("empty.py", "# %% [markdown]\n# only words\n", "no code cell")):
            path = os.path.join(tmp, name)
            with open(path, "w") as f:
                f.write(text)
            r = tool("build", path)
            check(one_error_line(r, said) and not os.path.exists(path[:-3] + ".ipynb"),
                  f"build {name}: one error line ('{said}'), nothing written", r.stderr)
        r = tool("build", os.path.join(tmp, "missing.py"))
        check(one_error_line(r, "cannot read"), "build of a missing file: one error line", r.stderr)
        r = tool("build", NOTEBOOK)
        check(one_error_line(r, "a .py file"), "build of a .ipynb: one error line", r.stderr)
        edited = os.path.join(tmp, "edited.ipynb")
        with open(NOTEBOOK) as f:
            data = json.load(f)
        data["cells"][0]["source"].append("\nan edit by hand")
        with open(edited, "w") as f:
            json.dump(data, f, indent=1, sort_keys=True)
        r = tool("check", SOURCE, "-o", edited)
        check(one_error_line(r, "is not what"), "check of an .ipynb edited by hand: one error line", r.stderr)
        written = set(os.listdir(tmp)) - {"ipython", "mpl"}  # IPython's and matplotlib's own folders, if made
        expected = {"bad.py", "marker.py", "markdown.py", "empty.py", "edited.ipynb"} | ({"executed.ipynb"} if ran
                                                                                        else set())
        check(written == expected, "nothing else written beside them (the kernel's connection file removed)",
              str(sorted(written - expected)))
    after = repo_state()
    check(before is None or before == after, "the run left no file in the repository",
          f"git status before:\n{before}\nafter:\n{after}")
    print(f"({time.time() - start:.1f} s)")
    print(f"{passed} passed, {failed} failed")
    sys.exit(0 if failed == 0 else 1)


if __name__ == "__main__":
    main()
