#!/usr/bin/env python3
"""The class notebook, kept as text: jupytext's percent format (a Python file whose `# %%` lines start the cells)
turned into a Jupyter notebook, and run end to end. No jupytext needed (Debian 12 has none); running needs
Debian's python3-nbclient and python3-ipykernel.

    /usr/bin/python3 tools/notebook.py build docs/siamesenorm_class.py            # -> docs/siamesenorm_class.ipynb
    /usr/bin/python3 tools/notebook.py check docs/siamesenorm_class.py            # is the .ipynb beside it built from it?
    /usr/bin/python3 tools/notebook.py run docs/siamesenorm_class.py [--length class|test] [--figures DIR]
                                                                     [-o EXECUTED.ipynb] [--timeout S]

The percent format, as much of it as this needs: a line `# %%` starts a code cell, `# %% [markdown]` a markdown
cell whose lines are comments ("# " or "#" taken off each); what stands before the first marker is a code cell
of its own if it is not blank; blank lines at the ends of a cell are dropped. build writes the notebook without
outputs, cell ids numbered, keys sorted, so that the same text always gives the same bytes (check compares them).

run executes the notebook in a fresh kernel (the one named python3: Debian's runs /usr/bin/python3) in the file's
folder, with SIAMESE_CLASS set to --length (class: the 90-minute class's runs, minutes; test: every cell with
the shortest runs, what make test does) and SIAMESE_CLASS_FIGURES to --figures when given (the cells write their
figures there), prints each cell's time and the last line of its output, and exits 1 with the cell's error if one
fails. Errors are one line (error: ...) and exit status 1.
"""
import argparse
import json
import os
import sys
import tempfile
import time

MARKER = "# %%"


class Fail(Exception):
    pass


class Parser(argparse.ArgumentParser):
    def error(self, message):
        raise Fail(f"{message} (-h for the usage)")


def cells_of(text, path):
    """[(kind, source)] of a percent-format text"""
    cells, kind, lines = [], "code", []

    def close():
        while lines and not lines[-1].strip():
            lines.pop()
        while lines and not lines[0].strip():
            lines.pop(0)
        if lines or kind == "markdown":
            cells.append((kind, "\n".join(lines)))
    for n, line in enumerate(text.splitlines(), 1):
        if line == MARKER or line.startswith(MARKER + " "):
            close()
            rest = line[len(MARKER):].strip()
            if rest not in ("", "[markdown]"):
                raise Fail(f"{path}:{n}: a cell marker is '# %%' or '# %% [markdown]', not '{line}'")
            kind, lines = ("markdown" if rest == "[markdown]" else "code"), []
            continue
        if kind == "markdown":
            if line.strip() and not line.startswith("#"):
                raise Fail(f"{path}:{n}: a markdown cell's lines are comments ('# ...'), not '{line[:40]}'")
            line = line[2:] if line.startswith("# ") else line[1:]
        lines.append(line)
    close()
    if not any(kind == "code" for kind, _ in cells):
        raise Fail(f"{path}: no code cell (a cell starts with a line '# %%')")
    return cells


def notebook_json(cells):
    """nbformat 4.5's JSON, deterministic: what `jupyter nbconvert` would read, without outputs"""
    nb_cells = []
    for i, (kind, source) in enumerate(cells):
        lines = source.split("\n")
        cell = {"cell_type": kind, "id": f"cell-{i:03d}", "metadata": {},
                "source": [line + "\n" for line in lines[:-1]] + [lines[-1]] if source else []}
        if kind == "code":
            cell.update(execution_count=None, outputs=[])
        nb_cells.append(cell)
    nb = {"cells": nb_cells, "nbformat": 4, "nbformat_minor": 5,
          "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
                       "language_info": {"name": "python"},
                       "jupytext": {"formats": "ipynb,py:percent", "note": "built from the .py by tools/notebook.py; "
                                    "edit the .py and run: /usr/bin/python3 tools/notebook.py build FILE.py"}}}
    return json.dumps(nb, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def read_source(path):
    if not path.endswith(".py"):
        raise Fail(f"{path}: the notebook's text is a .py file (jupytext's percent format)")
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise Fail(f"cannot read '{path}' ({getattr(e, 'strerror', None) or e})")


def build(path, out):
    text = notebook_json(cells_of(read_source(path), path))
    tmp = f"{out}.tmp{os.getpid()}"
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, out)
    except OSError as e:
        raise Fail(f"cannot write '{out}' ({e.strerror or e})")
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    print(f"wrote {out} ({text.count(chr(34) + 'cell_type' + chr(34))} cells)")


def check(path, out):
    want = notebook_json(cells_of(read_source(path), path))
    try:
        with open(out, encoding="utf-8") as f:
            have = f.read()
    except OSError as e:
        raise Fail(f"cannot read '{out}' ({e.strerror or e}): build it with tools/notebook.py build {path}")
    if have != want:
        raise Fail(f"{out} is not what {path} builds (edited by hand, or the .py changed since): "
                   f"/usr/bin/python3 tools/notebook.py build {path}")
    print(f"{out} is built from {path}")


def last_line(cell):
    """the last line a code cell printed or showed, for the progress report"""
    for output in reversed(cell.get("outputs", [])):
        text = output.get("text") or output.get("data", {}).get("text/plain", "")
        text = "".join(text) if isinstance(text, list) else text
        if output.get("output_type") == "display_data" and "image/png" in output.get("data", {}):
            return "[a figure]"
        if text.strip():
            return text.strip().splitlines()[-1][:100]
    return ""


def execute(path, length, figures, out, timeout):
    try:
        import nbclient
        import nbformat
    except ImportError as e:
        raise Fail(f"{e} with {sys.executable}: Debian's python3-nbclient and python3-ipykernel run the notebook")
    nb = nbformat.reads(notebook_json(cells_of(read_source(path), path)), as_version=4)
    env = {"SIAMESE_CLASS": length, "PYDEVD_DISABLE_FILE_VALIDATION": "1"}  # (ipykernel's debugger's warning)
    if figures:
        if not os.path.isdir(figures):
            raise Fail(f"--figures {figures}: no such directory")
        env["SIAMESE_CLASS_FIGURES"] = os.path.abspath(figures)
    saved = {k: os.environ.get(k) for k in list(env) + ["JUPYTER_RUNTIME_DIR", "SIAMESE_CLASS_FIGURES"]}
    start = time.time()
    with tempfile.TemporaryDirectory(prefix="notebook_") as runtime:
        os.environ.update(env, JUPYTER_RUNTIME_DIR=runtime)  # the kernel's connection file: here, removed after
        if not figures:
            os.environ.pop("SIAMESE_CLASS_FIGURES", None)
        client = nbclient.NotebookClient(nb, timeout=timeout, kernel_name="python3", allow_errors=False,
                                         resources={"metadata": {"path": os.path.dirname(os.path.abspath(path))}})
        times = []

        def on_cell_executed(cell, cell_index, execute_reply):
            times.append(time.time())
            print(f"cell {cell_index:3d} {times[-1] - (times[-2] if len(times) > 1 else start):6.1f} s  "
                  f"{last_line(cell)}", flush=True)
        client.on_cell_executed = on_cell_executed
        try:
            client.execute()
        except nbclient.exceptions.CellExecutionError as e:
            lines = [line for line in str(e).splitlines() if line.strip()]
            raise Fail(f"a cell of {path} failed: {lines[-1][:300] if lines else e}")
        except nbclient.exceptions.CellTimeoutError:
            raise Fail(f"a cell of {path} ran longer than --timeout {timeout} s")
        except Exception as e:  # the kernel died, or did not start
            raise Fail(f"running {path}: {type(e).__name__}: {str(e).strip().splitlines()[-1] if str(e).strip() else ''}")
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
    cells = [c for c in nb.cells if c.cell_type == "code"]
    if any(c.execution_count is None for c in cells):
        raise Fail(f"{sum(c.execution_count is None for c in cells)} code cells of {path} did not run")
    if out:
        with open(out, "w", encoding="utf-8") as f:
            nbformat.write(nb, f)
    print(f"ran {len(cells)} code cells of {path} ({length} length) in {time.time() - start:.1f} s"
          + (f"; wrote {out}" if out else ""))


def main():
    ap = Parser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="command", required=True, parser_class=Parser)
    for name in ("build", "check", "run"):
        p = sub.add_parser(name)
        p.add_argument("source", metavar="FILE.py")
        if name in ("build", "check"):
            p.add_argument("-o", dest="out", metavar="FILE.ipynb", help="default: beside FILE.py")
        else:
            p.add_argument("--length", choices=("class", "test"), default="class")
            p.add_argument("--figures", metavar="DIR", help="where the cells write their figures (default: none)")
            p.add_argument("-o", dest="out", metavar="FILE.ipynb", help="the executed notebook, with its outputs")
            p.add_argument("--timeout", type=int, default=1800, help="seconds a cell may take (default 1800)")
    try:
        args = ap.parse_args()
        if args.command == "build":
            build(args.source, args.out or args.source[:-3] + ".ipynb")
        elif args.command == "check":
            check(args.source, args.out or args.source[:-3] + ".ipynb")
        else:
            if args.timeout < 1:
                raise Fail("--timeout must be at least 1 second")
            execute(args.source, args.length, args.figures, args.out, args.timeout)
    except Fail as e:
        sys.exit(f"error: {e}")
    except KeyboardInterrupt:
        sys.exit("error: interrupted")


if __name__ == "__main__":
    main()
