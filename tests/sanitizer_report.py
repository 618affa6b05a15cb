#!/usr/bin/env python3
"""compute-sanitizer's findings, told apart: the project's own kernels, or the libraries' (cuBLAS, cuBLASLt, cuDNN).

    python3 tests/sanitizer_report.py LOG [LOG ...]
    python3 tests/sanitizer_report.py --kernel-filters
    python3 tests/sanitizer_report.py --check-filters PROGRAM

tests/gpu_check.sh runs compute-sanitizer (memcheck, racecheck, synccheck, initcheck) on the bf16 test program,
whose products run in cuBLAS and cuBLASLt and whose cuDNN attention runs in cuDNN: a finding in one of their kernels
is theirs to fix, or a false positive, and must not read as a bug of ours; one in our kernels is ours. Our kernels are the __global__ functions of the sources (SOURCES below);
a finding is ours when one of them is where it happened (the device frame, "at <kernel>(...)"), the libraries' when
another kernel is, and for an API error (no device frame) when the first host frame past the CUDA runtime and driver
lies in libcublas, libcublasLt or libcudnn. A finding that names no kernel and no library counts as ours: nothing
is excused unless it is shown to be a library's. For each log one line:

    SANITIZER <log> ours=N libraries=M warnings=W | ours: <kernel> xK, ... | libraries: <kernel or library> xK, ...
      | <the tool's own summary line>

(warnings: racecheck's "Warning" hazards, counted apart and in neither column). Errors the tool counted in its
summary but did not print (past --print-limit) cannot be told apart and count as ours. The exit status is 0 unless a
log cannot be read.

--kernel-filters prints, one argument a line, compute-sanitizer's options that make a tool check our kernels alone
(tests/gpu_check.sh gives them to racecheck and synccheck, whose time would otherwise go on cuBLAS's kernels): one
`--kernel-name kns=<length><name>` for each of the kernels above. compute-sanitizer matches a filter against the
kernel's mangled name (kns: a substring of it), and the filters of several options add up (any one matching is
checked). A C++ name is mangled as its length followed by the name, `_Z10foo_kernelPf` (`_ZL...` static, `I...E` after
it for a template's arguments, `N...E` around it in a namespace), so "10foo_kernel" is in every mangling of
foo_kernel, and in another kernel's only where that one's name begins with foo_kernel and is 110, 210, ... long.

--check-filters PROGRAM holds that to what nvcc compiled into a built program (nm's symbols; no GPU needed): nvcc
writes a host stub for every __global__ function (__device_stub__Z<mangled name>, or __wrapper__device_stub_<name>
for a template) and a host function of the kernel's own mangled name; each of those kernels must be one of ours
above (or it would be counted a library's and left out of the filters), and each of its mangled names must hold
its filter. One line; exit status 1 when a kernel fails either.
"""
import os
import re
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
SOURCES = ["train_gpt2.cu", "siamese.cuh", "hc.cuh", "attention.cuh", "cuda_common.cuh", "tests/test_gpu.cu",
           "tools/profile_gpu.cu"]
LIBRARIES = re.compile(r"lib(cublasLt|cublas|cudnn\w*)\.so")
RUNTIME = re.compile(r"lib(cuda|cudart)\.so|\bcuda\w*Launch|\[0x[0-9a-f]+\] in libcuda")
IGNORED = ("COMPUTE-SANITIZER", "ERROR SUMMARY", "RACECHECK SUMMARY", "LEAK SUMMARY", "Target application returned",
           "Error: process didn't terminate successfully", "Saved host backtrace")


def our_kernels():
    names = set()
    pattern = re.compile(r"__global__\s+(?:static\s+)?void\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?(\w+)\s*\(")
    for source in SOURCES:
        path = os.path.join(ROOT, source)
        if os.path.exists(path):
            with open(path) as f:
                names.update(pattern.findall(f.read()))
    return names


def base_name(function):
    """'void ns::kernel<8>(float*, int)' -> 'kernel'"""
    f = function.strip()
    f = re.sub(r"^(void|static|__global__)\s+", "", f)
    depth, out = 0, ""
    for ch in f:  # drop template arguments, then everything from the parameter list on
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif depth == 0:
            if ch == "(":
                break
            out += ch
    return out.split("::")[-1].strip()


def device_function(line):
    """the function of a device frame "at <function>+0x.. in file:line", or "at 0x.. in [file:line:]<function>" """
    m = re.search(r"\bat (?:0x[0-9a-f]+ in )?(.+?)(?:\+0x[0-9a-f]+)?(?: in [^ ]+)?(?: \[\d+ hazards?\])?$", line)
    if not m:
        return None
    text = m.group(1)
    if re.match(r"^[^ ]+:\d+:", text):  # file:line:function
        text = text.split(":", 2)[2]
    name = base_name(text)
    return name or None


def records(lines):
    """compute-sanitizer's findings: a line "========= <text>" and its indented "=========     ..." lines"""
    current = None
    for line in lines:
        if not line.startswith("========="):
            continue
        body = line[9:].rstrip("\n")
        if body.startswith(" ") and not body.startswith("  ") and body.strip():  # a header: one space, then text
            text = body.strip()
            if current:
                yield current
            current = None if any(text.startswith(i) for i in IGNORED) else [text]
        elif current is not None and body.strip():
            current.append(body.strip())
    if current:
        yield current


def classify(record, ours):
    """('ours' | 'libraries' | 'warning', what) for one finding"""
    if record[0].startswith("Warning"):
        return "warning", (device_function(record[0]) or record[0][:60])
    host, frames = False, []
    for line in record:
        if line.startswith("Saved host backtrace") or "Host Frame" in line:
            host = True
        if host:
            if "Host Frame" in line:
                frames.append(line)
            continue
        for part in re.split(r"\band (?=\w+ access at)", line):  # racecheck names two accesses on one line
            name = device_function(part) if " at " in " " + part else None
            if name:
                return ("ours", name) if name in ours else ("libraries", name)
    for frame in frames:  # an API error: the first frame past the driver and the runtime
        if RUNTIME.search(frame):
            continue
        m = LIBRARIES.search(frame)
        return ("libraries", m.group(0)) if m else ("ours", record[0][:60])
    return "ours", record[0][:60]


def report(path, ours):
    with open(path, errors="replace") as f:
        lines = f.readlines()
    counts = {"ours": {}, "libraries": {}, "warning": {}}
    for record in records(lines):
        kind, what = classify(record, ours)
        counts[kind][what] = counts[kind].get(what, 0) + 1
    summary = [l.strip("= \n") for l in lines if re.search(r"(ERROR|RACECHECK) SUMMARY", l)]

    def listing(kind):
        items = sorted(counts[kind].items(), key=lambda kv: -kv[1])
        return ", ".join("%s x%d" % (name[:60], n) for name, n in items[:4]) + (", ..." if len(items) > 4 else "")

    total = {k: sum(v.values()) for k, v in counts.items()}
    # memcheck, initcheck and synccheck count every error in their summary but print --print-limit of them: those
    # not printed cannot be told apart, and count as ours
    m = re.search(r"ERROR SUMMARY: (\d+) error", summary[-1]) if summary else None
    unshown = max(0, int(m.group(1)) - total["ours"] - total["libraries"]) if m else 0
    if unshown:
        counts["ours"]["(not printed: past --print-limit)"] = unshown
        total["ours"] += unshown
    line = "SANITIZER %s ours=%d libraries=%d warnings=%d" % (os.path.basename(path), total["ours"],
                                                               total["libraries"], total["warning"])
    if total["ours"]:
        line += " | ours: " + listing("ours")
    if total["libraries"]:
        line += " | libraries: " + listing("libraries")
    if summary:
        line += " | " + summary[-1]
    return line


def kernel_filters(ours):
    """compute-sanitizer's arguments that select our kernels (see the top of the file)"""
    args = []
    for name in sorted(ours):
        args += ["--kernel-name", "kns=%d%s" % (len(name), name)]
    return args


def check_filters(program, ours):
    """the filters against the kernels compiled into `program` (see the top of the file): (ok, line)"""
    import subprocess
    try:
        symbols = subprocess.run(["nm", program], capture_output=True, text=True, check=True).stdout.split()
    except (OSError, subprocess.CalledProcessError) as e:
        return False, "error: nm cannot list the symbols of '%s' (%s)" % (program, e)
    filters = [a[4:] for a in kernel_filters(ours) if a.startswith("kns=")]
    compiled = set()
    for s in symbols:
        m = re.match(r"_Z\d+__device_stub__ZL?(\d+)", s)
        if m:
            compiled.add(s[m.end():m.end() + int(m.group(1))])
        m = re.match(r"_Z(\d+)__wrapper__device_stub_", s)
        if m:
            compiled.add(s[m.end(1):m.end(1) + int(m.group(1))][len("__wrapper__device_stub_"):])
    mangled = [s for s in symbols if re.match(r"_ZL?\d", s) and "device_stub" not in s]
    problems = []
    for name in sorted(compiled):
        if name not in ours:
            problems.append("%s is compiled in but is not one of ours (no filter; its findings would count as a "
                            "library's)" % name)
        kernels = [s for s in mangled if re.match(r"_ZL?%d%s" % (len(name), name), s)]
        if not kernels or not all(any(f in k for f in filters) for k in kernels):
            problems.append("%s: no filter matches its mangled name %s" % (name, (kernels or ["(none)"])[0]))
    if not compiled:
        problems.append("no kernel stub found")
    if problems:
        return False, "FILTERS %s: %s" % (program, "; ".join(problems[:4]) + (" ..." if len(problems) > 4 else ""))
    return True, "FILTERS %s: its %d kernels are ours, each matched by its filter (%d filters)" % (
        program, len(compiled), len(filters))


def main():
    if len(sys.argv) < 2:
        sys.exit("usage: python3 tests/sanitizer_report.py LOG [LOG ...] | --kernel-filters")
    ours = our_kernels()
    if sys.argv[1:] == ["--kernel-filters"]:
        if not ours:
            sys.exit("error: no __global__ function found in %s" % ", ".join(SOURCES))
        print("\n".join(kernel_filters(ours)))
        return
    if sys.argv[1] == "--check-filters" and len(sys.argv) == 3:
        ok, line = check_filters(sys.argv[2], ours)
        print(line)
        sys.exit(0 if ok else 1)
    rc = 0
    for path in sys.argv[1:]:
        try:
            print(report(path, ours))
        except OSError as e:
            print("error: cannot read '%s' (%s)" % (path, e.strerror))
            rc = 1
    sys.exit(rc)


if __name__ == "__main__":
    main()
