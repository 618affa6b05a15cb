#!/usr/bin/env python3
"""Every external command the project's scripts call is installed by .ci/deps or is part of every Debian system.

    python3 tests/test_commands.py [-v]

The scripts are the shell scripts under tests/, experiments/ and tools/ and .ci/'s two, the Makefile's recipes and
$(shell ...) calls, and the programs the Python scripts there and in data/ start (subprocess's first argument,
shutil.which). A small reader of the shell language finds
the commands: the first word of each simple command, also inside $(...), `...`, <(...), bash -c '...', a heredoc
that bash reads or that becomes a .sh file, and the command given to a wrapper (timeout, env, nice, xargs, find
-exec, mpirun, setpriv, unshare, ...) or to a function of the scripts that runs its arguments ("$@" after shift N:
check, run, expect_error, run_step, ...); $VAR and "${ARRAY[@]}" are read from the scripts' simple assignments.
A command that runs another one of its own counts that one too: tar given -J (--xz) runs xz.
Each command is then looked up here (the usual PATH of a Debian system) and the package that holds it (dpkg -S)
must be one that `.ci/deps --list train|test|gpu-prep` names, or one they depend on (apt installs those too), or
Debian's essential set (Essential: yes) with what it depends on. Project programs (a path: ./reference_cpu) are
not looked up. The few commands that are neither, each called only after the script checked that it is there, are
listed in ONLY_WHERE_PRESENT with the reason.

The check can fail, and shows it: a planted script that calls a command nobody installs, through a wrapper function
and through timeout, fails it; and so does the project's own check against .ci/deps's package lists without procps
and git (what .ci/deps installed before issue 20): it names pgrep and pkill (experiments/smoke_test.sh) and git;
and without xz-utils (which it lacked until a Debian 12 minbase root failed experiments/smoke_test.sh's tar -xJf):
it names xz.
Ends with the line "N passed, N failed".
"""
import ast
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SYSTEM_PATH = ["/usr/sbin", "/usr/bin", "/sbin", "/bin", "/usr/local/sbin", "/usr/local/bin"]

# Called only where present, and never installed by .ci/deps: the script tests for each first.
ONLY_WHERE_PRESENT = {
    "nvcc": "the CUDA toolkit: GPU code is compiled where it is (Makefile, tests/gpu_lib.sh)",
    "nvidia-smi": "the NVIDIA driver: the GPU scripts ask it first whether there is a GPU",
    "compute-sanitizer": "the CUDA toolkit's, on a lent GPU machine (tests/gpu_check.sh)",
    "cuobjdump": "the CUDA toolkit's, or .ci/deps's copy in .deps/cuobjdump where nvcc is (tests/test_archs.sh)",
    "sudo": ".ci/deps, for a user who is not root, where sudo is installed",
    "apt-get": ".ci/deps, where a package is missing and apt-get is there (it says so otherwise)",
}

BUILTINS = set("""
. : [ alias bg bind break builtin caller cd command compgen complete compopt continue declare dirs disown echo
enable eval exec exit export false fc fg getopts hash help history jobs kill let local logout mapfile popd printf
pushd pwd read readarray readonly return set shift shopt source suspend test times trap true type typeset ulimit
umask unalias unset wait
""".split())
KEYWORDS = {"if", "then", "elif", "else", "fi", "do", "done", "while", "until", "for", "in", "case", "esac",
            "function", "select", "time", "!", "{", "}", "[[", "]]", "coproc"}
STARTERS = {"if", "then", "elif", "else", "do", "while", "until", "!", "{", "time"}  # a command follows
ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\[[^]]*\])?\+?=")


# ----------------------------------------------------------------------------------------------------------------
# reading shell: tokens, then simple commands

class Word:
    def __init__(self, raw, literal, subs):
        self.raw = raw          # as written
        self.literal = literal  # the value when the word has no expansion, else None
        self.subs = subs        # the command substitutions inside it, as shell text


def read_balanced(text, i, open_ch, close_ch):
    """text[i] is just past open_ch; returns the index past the matching close_ch (quotes respected)."""
    depth = 1
    while i < len(text):
        c = text[i]
        if c == "\\":
            i += 2
            continue
        if c == "'":
            i = text.find("'", i + 1) + 1 or len(text)
            continue
        if c == '"':
            i = read_double_quoted(text, i + 1, [])
            continue
        if c == open_ch:
            depth += 1
        elif c == close_ch:
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return i


def read_dollar(text, i, subs):
    """text[i] == '$': returns the index past the expansion, appending any command substitution to subs."""
    if text.startswith("$((", i):
        return read_balanced(text, i + 3, "(", ")") + 1
    if text.startswith("$(", i):
        end = read_balanced(text, i + 2, "(", ")")
        subs.append(text[i + 2:end - 1])
        return end
    if text.startswith("${", i):
        end = read_balanced(text, i + 2, "{", "}")
        inner = text[i + 2:end - 1]
        for m in re.finditer(r"\$\((?!\()", inner):  # ${X:-$(cmd)}, not ${A[$((i - 2))]}
            e = read_balanced(inner, m.end(), "(", ")")
            subs.append(inner[m.end():e - 1])
        return end
    j = i + 1
    while j < len(text) and (text[j].isalnum() or text[j] == "_"):
        j += 1
    if j == i + 1 and j < len(text) and text[j] in "@*#?$!-0123456789":
        j += 1
    return j


def read_double_quoted(text, i, subs):
    """text[i] is just past the opening quote; returns the index past the closing one."""
    while i < len(text):
        c = text[i]
        if c == "\\":
            i += 2
        elif c == '"':
            return i + 1
        elif c == "$":
            i = read_dollar(text, i, subs)
        elif c == "`":
            end = text.find("`", i + 1)
            subs.append(text[i + 1:end])
            i = end + 1
        else:
            i += 1
    return i


OPERATORS = ["&&", "||", ";;", ";&", "|&", "|", "&", ";", "(", ")"]
REDIRECTS = ["<<<", "<<-", "<<", "&>>", "&>", ">>", ">&", "<&", ">|", "<>", ">", "<"]


def tokens(text):
    """Shell text -> a list of Word, ("op", x), ("redir", x), ("heredoc", body, command_word_index) tokens."""
    out, heredocs, i, n = [], [], 0, len(text)
    while i < n:
        c = text[i]
        if c in " \t":
            i += 1
            continue
        if text.startswith("\\\n", i):
            i += 2
            continue
        if c == "#":
            while i < n and text[i] != "\n":
                i += 1
            continue
        if c == "\n":
            out.append(("op", "\n"))
            i += 1
            for delim, strip in heredocs:  # the bodies of the heredocs opened on that line
                lines = []
                while i < n:
                    end = text.find("\n", i)
                    end = n if end < 0 else end
                    line = text[i:end]
                    i = end + 1
                    if (line.lstrip("\t") if strip else line) == delim:
                        break
                    lines.append(line)
                out.append(("heredoc", "\n".join(lines)))
            heredocs = []
            continue
        if text.startswith("((", i) and (not out or out[-1] == ("op", "\n") or
                                          (isinstance(out[-1], tuple) and out[-1][0] == "op")):
            i = read_balanced(text, i + 2, "(", ")") + 1  # arithmetic: no commands
            continue
        if text.startswith("<(", i) or text.startswith(">(", i):
            end = read_balanced(text, i + 2, "(", ")")
            out.append(Word(text[i:end], None, [text[i + 2:end - 1]]))
            i = end
            continue
        redir = next((r for r in REDIRECTS if text.startswith(r, i)), None)
        if redir:
            i += len(redir)
            out.append(("redir", redir))
            if redir in ("<<", "<<-"):
                while i < n and text[i] in " \t":
                    i += 1
                j = i
                while j < n and text[j] not in " \t\n;|&<>()":
                    j += 1
                heredocs.append((text[i:j].strip("'\"").replace("\\", ""), redir == "<<-"))
                out.append(Word(text[i:j], text[i:j], []))
                i = j
            continue
        op = next((o for o in OPERATORS if text.startswith(o, i)), None)
        if op:
            out.append(("op", op))
            i += len(op)
            continue
        # a word
        start, subs, literal = i, [], True
        while i < n and text[i] not in " \t\n;|&<>()":
            c = text[i]
            if c == "\\":
                i += 2
            elif c == "'":
                i = text.find("'", i + 1) + 1 or n
            elif c == '"':
                before = len(subs)
                j = read_double_quoted(text, i + 1, subs)
                if "$" in text[i:j] or "`" in text[i:j] or len(subs) > before:
                    literal = False
                i = j
            elif c == "$":
                literal = False
                i = read_dollar(text, i, subs)
            elif c == "`":
                literal = False
                end = text.find("`", i + 1)
                subs.append(text[i + 1:end])
                i = end + 1
            elif c == "=" and text.startswith("(", i + 1) and ASSIGNMENT.match(text[start:i + 1]):
                i = read_balanced(text, i + 2, "(", ")")  # NAME=( ... ): an array
            else:
                i += 1
        raw = text[start:i]
        if re.fullmatch(r"\d+", raw) and i < n and text[i] in "<>":
            continue  # 2> and the like: the redirection comes next
        out.append(Word(raw, unquote(raw) if literal else None, subs))
    return out


def unquote(raw):
    out, i = [], 0
    while i < len(raw):
        c = raw[i]
        if c == "\\" and i + 1 < len(raw):
            out.append(raw[i + 1])
            i += 2
        elif c == "'":
            j = raw.find("'", i + 1)
            out.append(raw[i + 1:j])
            i = j + 1
        elif c == '"':  # to the closing quote; a backslash before $ ` " \ keeps that character alone
            i += 1
            while i < len(raw) and raw[i] != '"':
                if raw[i] == "\\" and i + 1 < len(raw) and raw[i + 1] in '$`"\\':
                    i += 1
                out.append(raw[i])
                i += 1
            i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def simple_commands(toks):
    """Groups tokens into simple commands: lists of Word (redirection targets left out), plus the heredoc bodies
    that follow each (attached as the attribute .heredocs of the list)."""
    commands, current, skip_next, case_patterns = [], [], False, False
    in_for, brackets = False, False

    def finish():
        nonlocal current
        if current:
            commands.append(current)
        current = CommandList()
    current = CommandList()
    for t in toks:
        if isinstance(t, tuple):
            kind = t[0]
            if kind == "heredoc":
                (commands[-1] if not current and commands else current).heredocs.append(t[1])
                continue
            if kind == "redir":
                skip_next = True
                continue
            skip_next = False
            op = t[1]
            if case_patterns:
                if op == ")":
                    case_patterns = False
                continue
            if op in (";;", ";&"):
                finish()
                case_patterns = True
                continue
            if in_for and op in ("\n", ";"):
                in_for = False
            finish()
            continue
        if skip_next:
            skip_next = False
            current.redirect_words.append(t)
            continue
        if case_patterns:
            if t.raw == "esac":
                case_patterns = False
            continue
        if brackets:
            brackets = t.raw != "]]"
            continue
        if not current:
            if t.raw == "[[":
                brackets = True
                continue
            if t.raw in ("for", "select"):
                in_for = True
                continue
            if in_for:
                continue
            if t.raw == "case":
                current.case = True
                continue
        if getattr(current, "case", False):
            if t.raw == "in":
                current.case = False
                current.clear()
                case_patterns = True
            continue
        current.append(t)
    finish()
    return commands


class CommandList(list):
    def __init__(self):
        super().__init__()
        self.heredocs = []
        self.redirect_words = []


# ----------------------------------------------------------------------------------------------------------------
# which words are commands

def skip_options(words, with_arg=(), two_args=()):
    """Index of the first word that is not an option (nor an option's argument)."""
    i = 0
    while i < len(words):
        w = words[i].literal
        if w is None or not w.startswith("-") or w == "-":
            break
        if w == "--":
            return i + 1
        i += 2 if w in with_arg else 3 if w in two_args else 1
    return i


WRAPPERS = {
    # name: (options with an argument, a positional argument to skip first)
    "timeout": ({"-k", "--kill-after", "-s", "--signal"}, 1),
    "nice": ({"-n", "--adjustment"}, 0),
    "nohup": (set(), 0),
    "exec": ({"-a"}, 0),
    "builtin": (set(), 0),
    "sudo": ({"-u", "-g", "-C", "-D"}, 0),
    "setpriv": ({"--reuid", "--regid", "--groups", "--inh-caps", "--bounding-set"}, 0),
    "unshare": ({"--propagation", "--setgroups"}, 0),
    "xargs": ({"-n", "-I", "-P", "-d", "-L", "-s", "-a", "-E", "--max-args", "--delimiter"}, 0),
    "stdbuf": ({"-i", "-o", "-e"}, 0),
    "ionice": ({"-c", "-n"}, 0),
    "taskset": (set(), 1),
}
MPIRUN_ARGS = {"-np", "-n", "-c", "-x", "--bind-to", "-wdir", "--wdir", "--hostfile", "-hostfile", "-H", "--host",
               "--map-by", "--rank-by", "-N", "--npernode"}


class Scripts:
    """What the scripts define (functions, wrapper functions) and call."""

    def __init__(self):
        self.functions = set()
        self.wrappers = {}     # function name -> the index (1-based) of its argument that is a command
        self.wrappers_of = {}  # path -> the wrappers it defines or sources
        self.calls = []        # (command, where)
        self.variables = {}    # path -> {NAME: [words]}
        self.seen = []         # the wrappers (timeout, env, ...) the last command_index went through

    # -- definitions first: functions and which of them run their arguments
    def definitions(self, text, path):
        toks = tokens(text)
        for k in range(len(toks) - 2):
            a, b, c = toks[k], toks[k + 1], toks[k + 2]
            if isinstance(a, Word) and b == ("op", "(") and c == ("op", ")") and a.literal:
                self.functions.add(a.literal)
        for m in re.finditer(r"^\s*function\s+([A-Za-z_][\w-]*)", text, re.M):
            self.functions.add(m.group(1))
        variables = self.variables.setdefault(path, {})
        for cmd in simple_commands(toks):
            for w in cmd:
                m = ASSIGNMENT.match(w.raw)
                if not m:
                    break
                name, value = w.raw[:m.end()].rstrip("+=").split("[")[0], w.raw[m.end():]
                if value.startswith("(") and value.endswith(")"):
                    words = [x for x in tokens(value[1:-1]) if isinstance(x, Word)]
                else:
                    d = re.fullmatch(r"\$\{[A-Za-z_]\w*:-([^}$]*)\}", value)
                    words = tokens(d.group(1) if d else value)
                    words = [x for x in words if isinstance(x, Word)][:1]
                variables.setdefault(name, [])
                if words not in variables[name]:
                    variables[name].append(words)  # every value it is given: each may be the one in use

    def wrapper_offsets(self, text, path):
        """For each function whose body runs "$@": the argument index of the command (shift N, then "$@"). A
        file's wrappers are its own and those of the files it sources."""
        self.wrappers = dict(self.wrappers_of.get(path, {}))
        for m in re.finditer(r"^\s*(?:\.|source)\s+([\w./-]+\.sh)\s*$", text, re.M):
            self.wrappers.update(self.wrappers_of.get(os.path.join(ROOT, m.group(1)), {}))
        self.wrapper_bodies(text)
        self.wrappers_of[path] = dict(self.wrappers)

    def wrapper_bodies(self, text):
        toks = tokens(text)
        for k in range(len(toks) - 3):
            a = toks[k]
            if not (isinstance(a, Word) and a.literal and toks[k + 1] == ("op", "(") and toks[k + 2] == ("op", ")")):
                continue
            j = k + 3
            while j < len(toks) and toks[j] == ("op", "\n"):
                j += 1
            if not (j < len(toks) and isinstance(toks[j], Word) and toks[j].raw == "{"):
                continue
            depth, end = 0, j
            while end < len(toks):
                t = toks[end]
                if isinstance(t, Word) and t.raw in ("{", "}"):
                    depth += 1 if t.raw == "{" else -1
                    if depth == 0:
                        break
                end += 1
            self.wrapper_of_body(a.literal, toks[j + 1:end])

    def wrapper_of_body(self, name, body):
        shifts = 0
        for cmd in simple_commands(body):
            words = [w.raw for w in cmd]
            while words and ASSIGNMENT.match(words[0]):
                words.pop(0)
            while words and words[0] in STARTERS:
                words.pop(0)
            if words[:1] in (["local"], []):
                continue
            if words[:1] == ["shift"]:
                shifts += int(words[1]) if len(words) > 1 and words[1].isdigit() else 1
                continue
            at = [k for k, w in enumerate(words) if w in ('"$@"', "$@", '"${@}"')]
            if not at:
                continue
            head = self.command_index([Word(w, unquote(w) if "$" not in w else None, []) for w in words], {})
            if head is not None and head == at[0]:
                self.wrappers[name] = shifts + 1
                return
            if words[0] in self.wrappers and at[0] >= 1:
                self.wrappers[name] = shifts + self.wrappers[words[0]] - at[0] + 1
                return

    def command_index(self, words, variables):
        """The index of the word of a simple command that names the command run (after assignments, wrappers and
        the scripts' wrapper functions), or None."""
        i = 0
        self.seen = []
        while i < len(words) and ASSIGNMENT.match(words[i].raw):
            i += 1
        while i < len(words):
            w = words[i].literal
            if w is None:
                return i
            if w in ("command",) and i + 1 < len(words) and (words[i + 1].literal or "").startswith("-"):
                return None  # command -v NAME: a question, not a call
            if w in STARTERS:
                i += 1
                continue
            if w == "env":
                self.seen.append(w)
                i += 1
                i += skip_options(words[i:], {"-u", "--unset", "-C", "--chdir"})
                while i < len(words) and ASSIGNMENT.match(words[i].raw):
                    i += 1
                continue
            if w in WRAPPERS:
                self.seen.append(w)
                with_arg, positional = WRAPPERS[w]
                i += 1
                j = i
                while j < len(words) and (words[j].literal or "").startswith("-") and words[j].literal != "-":
                    opt = words[j].literal
                    j += 2 if opt in with_arg else 1
                i = j + positional
                continue
            if w in ("mpirun", "mpiexec"):
                return i  # mpirun itself; its programs are read in calls_of
            if w in self.wrappers:
                i += self.wrappers[w]
                continue
            return i
        return None

    # -- then the calls
    def scan_shell(self, text, path, depth=0):
        variables = self.variables.get(path, {})
        self.wrappers = self.wrappers_of.get(path, {})
        for cmd in simple_commands(tokens(text)):
            for w in list(cmd) + cmd.redirect_words:
                for sub in w.subs:
                    self.scan_shell(sub, path, depth + 1)
            for words in self.expand(list(cmd), variables):
                self.calls_of(words, path, variables, cmd, depth)

    def expand(self, words, variables, limit=16):
        """"${ARRAY[@]}" and $VAR replaced by what the scripts assign them (literal words): one list of words for
        each combination of the values they are given (at most `limit`)."""
        out = [[]]
        for w in words:
            m = re.fullmatch(r'"?\$\{?([A-Za-z_]\w*)(\[@\])?\}?"?', w.raw)
            values = variables.get(m.group(1)) if m else None
            if values:
                out = [o + v for o in out for v in values][:limit]
            else:
                out = [o + [w] for o in out]
        return out

    def calls_of(self, words, path, variables, cmd, depth):
        i = self.command_index(words, variables)
        self.calls.extend((w, path) for w in self.seen)
        if i is None or i >= len(words):
            return
        w = words[i]
        name = w.literal
        if not name or name in KEYWORDS:
            return
        self.calls.append((name, path))
        rest = words[i + 1:]
        if name == "tar" and any(tar_xz(k, x.literal or x.raw) for k, x in enumerate(rest)):
            self.calls.append(("xz", path))  # tar -J (--xz) runs xz, which not every Debian system has
        if name in ("bash", "sh"):
            k = next((k for k, x in enumerate(rest) if x.literal == "-c" or x.raw == "-c"), None)
            if k is not None and k + 1 < len(rest):
                self.scan_shell(unquote(rest[k + 1].raw), path, depth + 1)
            for body in cmd.heredocs:
                self.scan_shell(body, path, depth + 1)
        if name == "cat" and any((x.literal or x.raw).endswith('.sh"') or (x.literal or "").endswith(".sh")
                                 for x in cmd.redirect_words):
            for body in cmd.heredocs:  # a script written to be run
                self.scan_shell(body, path, depth + 1)
        if name == "trap" and rest:
            self.scan_shell(unquote(rest[0].raw), path, depth + 1)
        if name == "find":
            for k, x in enumerate(rest):
                if x.literal in ("-exec", "-execdir", "-ok") and k + 1 < len(rest):
                    self.calls_of(rest[k + 1:], path, variables, CommandList(), depth)
        if name in ("mpirun", "mpiexec"):  # its programs: after its options, and after each ':'
            k = 0
            while k < len(rest):
                k += skip_options(rest[k:], MPIRUN_ARGS, {"--mca", "-mca"})
                if k < len(rest):
                    self.calls_of(rest[k:], path, variables, CommandList(), depth)
                while k < len(rest) and rest[k].raw != ":":
                    k += 1
                k += 1
        if name in ("xargs",):  # handled by command_index
            pass

    def scan_python(self, text, path):
        """subprocess.*([...]) and os.exec*(..., [...]) with a literal program, and shutil.which("...")."""
        try:
            tree = ast.parse(text)
        except SyntaxError as e:
            raise AssertionError("%s does not parse: %s" % (path, e))
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
                continue
            owner = node.func.value.id if isinstance(node.func.value, ast.Name) else ""
            fn = node.func.attr
            args = node.args
            if owner == "shutil" and fn == "which" and args and isinstance(args[0], ast.Constant):
                self.calls.append((args[0].value, path))
            elif owner == "subprocess" and fn in ("run", "call", "check_call", "check_output", "Popen") and args:
                first = args[0]
                if isinstance(first, (ast.List, ast.Tuple)) and first.elts and \
                        isinstance(first.elts[0], ast.Constant) and isinstance(first.elts[0].value, str):
                    self.calls.append((first.elts[0].value, path))


def tar_xz(k, word):
    """Whether tar's k-th argument asks for xz: --xz, a short option cluster with J (-xJf), or the first argument
    in tar's old style, without its dash (xJf)."""
    if word == "--xz":
        return True
    return "J" in word and not word.startswith("--") and (word.startswith("-") or (k == 0 and word.isalpha()))


def makefile_shell(text):
    """The shell the Makefile runs: its recipe lines and its $(shell ...) calls, make's variables replaced by the
    first word of their value where that is a plain word (CXX -> g++, NVCC -> nvcc, PYTHON -> python3)."""
    values = {}
    for m in re.finditer(r"^([A-Za-z_]\w*)\s*[?:]?=\s*(\S*)", text, re.M):
        values.setdefault(m.group(1), m.group(2))
    values["MAKE"] = "make"

    def substitute(line):
        line = line.replace("$$", "\0")  # the shell's $, kept apart from make's
        line = re.sub(r"\$[@<^*?]", "MAKEVAR", line)  # $@, $<: file names
        while True:  # variables, then make's functions around them, innermost first: $(abspath $(DOCTEST))
            line, n = re.subn(r"\$[({]([A-Za-z_]\w*)[)}]", lambda m: values.get(m.group(1), "") if
                              re.fullmatch(r"[\w./+-]+", values.get(m.group(1), "")) else "MAKEVAR", line)
            line, k = re.subn(r"\$\((?!shell )[a-z-]+ [^()$]*\)", "MAKEVAR", line)
            if not n + k:
                return line.replace("\0", "$")
    pieces = []
    for line in text.replace("\\\n", " ").splitlines():
        if line.startswith("\t"):
            pieces.append(substitute(line.lstrip("\t").lstrip("@-")))
        for m in re.finditer(r"\$\(shell ", line):
            end = read_balanced(line, m.end(), "(", ")")
            pieces.append(substitute(line[m.end():end - 1]))
    return "\n".join(pieces) + "\n"


def script_files():
    """The shell scripts (by suffix or #!) and the Python scripts under tests/, experiments/, tools/, data/, .ci/."""
    shell, python = [], []
    for top in ("tests", "experiments", "tools", "data", ".ci"):
        for d, _, files in os.walk(os.path.join(ROOT, top)):
            if "__pycache__" in d:
                continue
            for f in sorted(files):
                p = os.path.join(d, f)
                try:
                    with open(p, "rb") as fh:
                        head = fh.read(128).split(b"\n")[0]
                except OSError:
                    continue
                if f.endswith(".sh") or (head.startswith(b"#!") and re.search(rb"\b(ba)?sh\b", head)):
                    shell.append(p)
                elif f.endswith(".py"):
                    python.append(p)
    return shell, python


def collect(shell, python):
    s = Scripts()
    texts = {p: open(p, encoding="utf-8").read() for p in shell}
    for p, t in texts.items():
        s.definitions(t, p)
    for _ in range(3):  # wrappers of wrappers, in any order of definition
        for p, t in texts.items():
            s.wrapper_offsets(t, p)
    for p, t in texts.items():
        s.scan_shell(t, p)
    makefile = os.path.join(ROOT, "Makefile")
    s.scan_shell(makefile_shell(open(makefile, encoding="utf-8").read()), makefile)
    for p in python:
        s.scan_python(open(p, encoding="utf-8").read(), p)
    calls = {}
    for name, where in s.calls:
        if name in BUILTINS or name in KEYWORDS or name in s.functions or name in ("-", "", "MAKEVAR"):
            continue  # the shell's own, a function of the scripts, or a make variable of no fixed value
        if not (re.fullmatch(r"[A-Za-z0-9_.+-]+", name) or re.fullmatch(r"/(usr/)?s?bin/[\w.+-]+", name)):
            continue  # a project program (./reference_cpu, tests/test_gpu), or a path made of variables
        calls.setdefault(name, set()).add(os.path.relpath(where, ROOT))
    return calls


# ----------------------------------------------------------------------------------------------------------------
# which packages hold them, and which packages every machine that ran .ci/deps has

def installed_packages():
    """{package: (essential, [dependency groups])}, providers {virtual: [package]}, from dpkg."""
    out = subprocess.run(["dpkg-query", "-W", "-f", "${db:Status-Abbrev}\t${Package}\t${Essential}\t"
                          "${Pre-Depends}\t${Depends}\t${Provides}\n"], capture_output=True, text=True).stdout
    packages, providers = {}, {}
    for line in out.splitlines():
        status, name, essential, pre, dep, provides = (line.split("\t") + [""] * 6)[:6]
        if not status.startswith("ii"):
            continue
        groups = [[re.sub(r"[\s(:].*", "", alt.strip()) for alt in g.split("|")]
                  for g in (pre + "," + dep).split(",") if g.strip()]
        packages[name] = (essential == "yes", groups)
        for p in provides.split(","):
            if p.strip():
                providers.setdefault(re.sub(r"[\s(:].*", "", p.strip()), []).append(name)
    return packages, providers


def closure(roots, packages, providers):
    """The packages `roots` bring with them: every installed alternative of each Depends and Pre-Depends."""
    seen, todo = set(), list(roots)
    while todo:
        p = todo.pop()
        for name in [p] + providers.get(p, []):
            if name in packages and name not in seen:
                seen.add(name)
                for group in packages[name][1]:
                    todo.extend(group)
    return seen


def deps_packages(drop=()):
    names = set()
    for target in ("train", "test", "gpu-prep"):
        out = subprocess.run(["bash", os.path.join(ROOT, ".ci", "deps"), "--list", target], capture_output=True,
                             text=True, check=True).stdout
        names.update(out.split())
    return names - set(drop)


def owners(commands):
    """{command: (path or None, package or None)}: where the command is on the system PATH, and whose it is."""
    found = {}
    for c in commands:
        dirs = [""] if c.startswith("/") else SYSTEM_PATH  # /usr/bin/python3: that file
        path = next((os.path.join(d, c) for d in dirs if os.access(os.path.join(d, c), os.X_OK)
                     and os.path.isfile(os.path.join(d, c))), None)
        found[c] = path
    candidates = {}
    for c, path in found.items():
        if path:
            real = os.path.realpath(path)
            forms = [path, real]
            for p in (path, real):  # merged /usr: dpkg may know /bin/X for /usr/bin/X, and the reverse
                if p.startswith("/usr/"):
                    forms.append(p[4:])
                else:
                    forms.append("/usr" + p)
            candidates[c] = list(dict.fromkeys(forms))
    query = sorted({p for forms in candidates.values() for p in forms})
    owner_of = {}
    if query:
        out = subprocess.run(["dpkg", "-S"] + query, capture_output=True, text=True).stdout
        for line in out.splitlines():
            if line.startswith("diversion"):
                continue
            pkgs, _, p = line.partition(": ")
            owner_of.setdefault(p.strip(), pkgs.split(",")[0].split(":")[0].strip())
    return {c: (found[c], next((owner_of[p] for p in candidates.get(c, []) if p in owner_of), None))
            for c in commands}


def problems(calls, allowed, owned):
    """The commands that are neither installed by .ci/deps nor essential, each with why and where."""
    bad = []
    for c in sorted(calls):
        where = ", ".join(sorted(calls[c]))
        if c in ONLY_WHERE_PRESENT:
            continue
        path, pkg = owned[c]
        if not path:
            bad.append("'%s' (%s) is not installed here" % (c, where))
        elif not pkg:
            bad.append("'%s' (%s) is %s, from no Debian package" % (c, where, path))
        elif pkg not in allowed:
            bad.append("'%s' (%s) is in the package %s, which neither .ci/deps installs nor every Debian system has"
                       % (c, where, pkg))
    return bad


def main():
    verbose = "-v" in sys.argv[1:]
    passed = failed = 0

    def check(what, ok, detail=""):
        nonlocal passed, failed
        if ok:
            passed += 1
            print("ok   - %s" % what)
        else:
            failed += 1
            print("FAIL - %s%s" % (what, (": " + detail) if detail else ""))

    if subprocess.run(["sh", "-c", "command -v dpkg-query"], capture_output=True).returncode != 0:
        print("skipped: not a Debian system (no dpkg-query): the packages cannot be asked")
        print("0 passed, 0 failed, 1 skipped")
        return 0
    packages, providers = installed_packages()
    essential = closure([p for p, (e, _) in packages.items() if e], packages, providers)
    deps = deps_packages()
    allowed = essential | closure(deps, packages, providers)
    check("Debian's essential set is known (%d packages with what they need)" % len(essential),
          {"coreutils", "bash", "grep", "sed"} <= essential, "dpkg-query lists no essential packages")
    check(".ci/deps names its packages (%d)" % len(deps), {"g++", "make", "python3"} <= deps)

    shell, python = script_files()
    calls = collect(shell, python)
    owned = owners(calls)
    if verbose:
        for c in sorted(calls):
            print("    %-18s %-40s %s" % (c, owned[c][1] or owned[c][0] or "-", ", ".join(sorted(calls[c]))))
    expected = {"make", "python3", "grep", "sed", "awk", "timeout", "mpirun", "pgrep", "git", "sha256sum", "g++",
                "cmp", "setpriv", "unshare", "mount", "bible", "nvidia-smi"}
    check("the reader finds the commands the scripts are known to call (%d in %d shell and %d Python scripts)"
          % (len(calls), len(shell), len(python)), expected <= set(calls),
          "missing: %s" % sorted(expected - set(calls)))
    bad = problems(calls, allowed, owned)
    check("every external command is installed by .ci/deps or is part of every Debian system", not bad,
          "; ".join(bad))

    # the check can fail: a planted script, and .ci/deps as it was before procps and git
    with tempfile.TemporaryDirectory() as d:
        planted = os.path.join(d, "planted.sh")
        with open(planted, "w") as f:
            f.write('check() { local what=$1; shift; "$@"; }\n'
                    'check "a planted call" planted-no-such-tool --flag\n'
                    'timeout 5 planted-other-tool 2> /dev/null || echo "planted-not-a-call"\n')
        s = Scripts()
        text = open(planted).read()
        s.definitions(text, planted)
        s.wrapper_offsets(text, planted)
        s.scan_shell(text, planted)
        names = {n for n, _ in s.calls if n not in BUILTINS and n not in s.functions}
        planted_calls = {n: {"planted.sh"} for n in names}
        bad_planted = problems(planted_calls, allowed, owners(planted_calls))
        check("a planted script's missing commands fail it (through a wrapper function and timeout)",
              sum("is not installed here" in b for b in bad_planted) == 2 and "planted-not-a-call" not in names,
              "found %s, reported %s" % (sorted(names), bad_planted))
    before = closure(deps_packages(drop=("procps", "git")), packages, providers) | essential
    bad_before = problems(calls, before, owned)
    named = {re.match(r"'([^']+)'", b).group(1) for b in bad_before}
    check(".ci/deps without procps and git (before issue 20) fails it, naming pgrep, pkill and git",
          {"pgrep", "pkill", "git"} <= named, "reported %s" % sorted(named))
    without_xz = closure(deps_packages(drop=("xz-utils",)), packages, providers) | essential
    named = {re.match(r"'([^']+)'", b).group(1) for b in problems(calls, without_xz, owned)}
    check(".ci/deps without xz-utils fails it, naming xz (experiments/smoke_test.sh's tar -xJf; a Debian 12 minbase "
          "root has no xz)", named == {"xz"}, "reported %s" % sorted(named))

    progress(check)
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


FAKE_APT = r"""#!/usr/bin/env bash
# a fake apt-get: the lines apt prints, slowly
case " $* " in
    *" update "*) exit 0 ;;
    *" --assume-no "*) echo "Need to get 1,234 kB of archives."; echo "After this operation, 5,678 kB"; exit 1 ;;
    *" -s "*) echo "Inst bible-kjv-text (1 Debian)"; echo "Inst bible-kjv (1 Debian)"; exit 0 ;;
esac
echo "Get:1 http://deb.debian.org bible-kjv-text"; sleep 1.5
echo "Get:2 http://deb.debian.org bible-kjv"; sleep 1.5
echo "Setting up bible-kjv-text (1) ..."; sleep 1.5
echo "Setting up bible-kjv (1) ..."
exit ${FAKE_APT_STATUS:-0}
"""


def progress(check):
    """What .ci/deps and tests/run_all.sh say while they work (issue 32: make test was silent for minutes): .ci/deps,
    with a fake apt-get and a dpkg that misses one package, says what it installs and how much it downloads before the
    install, a line every DEPS_HEARTBEAT seconds during it, and on a failed install one error line, leaving no file;
    run_all.sh's start line and heartbeat (its ONLY=selftest suite), its last line the plain summary; and every
    suite run_all.sh runs has its start line's description."""
    with tempfile.TemporaryDirectory() as d:
        bin_dir, tmp = os.path.join(d, "bin"), os.path.join(d, "tmp")
        os.makedirs(bin_dir)
        os.makedirs(tmp)
        fakes = {"apt-get": FAKE_APT,
                 "dpkg": '#!/usr/bin/env bash\n[ "$1 $2" = "-s bible-kjv" ] && exit 1; exit 0\n',
                 "id": '#!/usr/bin/env bash\necho 0\n'}
        for name, text in fakes.items():
            with open(os.path.join(bin_dir, name), "w") as f:
                f.write(text)
            os.chmod(os.path.join(bin_dir, name), 0o755)
        env = dict(os.environ, PATH=bin_dir + os.pathsep + os.environ["PATH"], DEPS_HEARTBEAT="1", TMPDIR=tmp)
        r = subprocess.run(["bash", os.path.join(ROOT, ".ci", "deps"), "train"], env=env, capture_output=True,
                           text=True)
        lines = r.stdout.splitlines()
        told = [i for i, l in enumerate(lines) if l.startswith("  then apt-get install: 2 packages with what they "
                                                                "need; Need to get 1,234 kB of archives.")]
        beats = [i for i, l in enumerate(lines) if re.match(r"  \.\.\. \d+ s: \d of 2 downloaded, \d set up$", l)]
        check(".ci/deps: what it installs and how much it downloads, before the install; then a line every "
              "DEPS_HEARTBEAT seconds (%d here)" % len(beats),
              r.returncode == 0 and lines[:1] == ["installing the Debian packages: bible-kjv"] and told and
              len(beats) >= 2 and told[0] < beats[0] and lines[-1].startswith("installed: bible-kjv (") and
              os.listdir(tmp) == [], "exit %d: %s %s" % (r.returncode, r.stdout[-600:], r.stderr[-300:]))
        env["FAKE_APT_STATUS"] = "100"
        r = subprocess.run(["bash", os.path.join(ROOT, ".ci", "deps"), "train"], env=env, capture_output=True,
                           text=True)
        errors = [l for l in r.stderr.splitlines() if l.startswith("error: ")]
        check(".ci/deps: a failed install is one error line with apt's last lines, exit 1, no file left",
              r.returncode == 1 and errors == ["error: apt-get install bible-kjv failed (exit status 100; its last "
                                               "lines above)"] and "Setting up bible-kjv" in r.stderr and
              os.listdir(tmp) == [], "exit %d: %s" % (r.returncode, r.stderr[-400:]))
    # (each run_all.sh in a temporary folder of its own: one that fails keeps its logs there, as it should)
    nested = tempfile.mkdtemp()
    r = subprocess.run(["bash", os.path.join(ROOT, "tests", "run_all.sh")], env=dict(os.environ, ONLY="selftest",
                       HEARTBEAT="1", TMPDIR=nested), capture_output=True, text=True)
    lines = r.stdout.splitlines()
    check("run_all.sh: a start line (what, how long), a heartbeat with the cases done, the plain summary last",
          r.returncode == 0 and any(re.match(r"selftest +started: .* \(about \d+ s on two idle cores\)$", l)
                                    for l in lines) and
          any(re.match(r"selftest +\.\.\. still running, \d+s: \d cases done of about 3$", l) for l in lines) and
          lines[-1:] == ["3 passed, 0 failed"], r.stdout[-600:] + r.stderr[-300:])
    # a suite whose log holds a summary line of a program it ran, and then ends (exit status 0) before its own: that
    # line is not its summary (run_all.sh took the last such line anywhere in the log)
    r = subprocess.run(["bash", os.path.join(ROOT, "tests", "run_all.sh")], capture_output=True, text=True,
                       env=dict(os.environ, ONLY="selftest", TMPDIR=nested,
                                SELFTEST_SCRIPT='echo "5 passed, 0 failed"; echo "and then it stopped"'))
    shutil.rmtree(nested, ignore_errors=True)
    check("run_all.sh: a summary line that is not the suite's last line is not its summary (a failure)",
          r.returncode == 1 and r.stdout.splitlines()[-1:] == ["0 passed, 1 failed"], r.stdout[-400:])
    with open(os.path.join(ROOT, "tests", "run_all.sh")) as f:
        text = f.read()
    suites = set(re.findall(r"run_suite (\w+) ", text))
    described = set(re.findall(r"^ +(\w+)\) +echo \"[^|\"]+\|\d+\|\d+\" ;;$", text, flags=re.M))
    check("run_all.sh: every suite it runs has its description and time (%d suites)" % len(suites),
          suites and suites <= described, "without: %s" % sorted(suites - described))


if __name__ == "__main__":
    sys.exit(main())
