"""Mutation testing of ``dualbroadcast/`` with cosmic-ray: a seeded sample, each mutant against the tests that run it.

Usage, from the repository root (about an hour on 2 cores)::

    python -m pip install -e '.[mutation]'
    nice -n 19 python -m benchmarks.mutation           # run the sample (resumes an interrupted run)
    python -m benchmarks.mutation --report             # print the last run's report again
    python -m benchmarks.mutation --list               # the sampled mutations, without running them

Options: ``--ref REV`` (default ``HEAD``), ``--seed N`` and ``--size N`` (defaults in
``[tool.cosmic-ray.sample]`` of ``pyproject.toml``), ``--workdir DIR``, ``--fresh``.

What it measures: cosmic-ray enumerates every mutation its core operators make in
``dualbroadcast/`` (an operator swapped, a comparison changed, a number moved by
one, a ``not`` added, ``and``/``or`` swapped, a loop made empty, a decorator removed,
...), module-level code included (the ``DERIVATIVES`` table, the rules' lambdas).
A full run is ~10^4 mutants; this script tests a sample of them:

1. ``git archive REV`` is unpacked into the work directory (default
   ``/tmp/dualbroadcast-mutation``).  cosmic-ray mutates files in place, so it only
   ever touches that copy, never the checkout; ``PYTHONPATH`` points every test
   process (and the notebook kernels they start) at the copy.
2. ``cosmic-ray init`` makes the session (``session.sqlite``).  The sample is drawn
   with ``random.Random(seed)`` from the mutations sorted by (module, operator,
   occurrence), per module in proportion to its number of mutations (at least one
   each): the same ref, seed and size give the same sample.  The mutations outside
   the sample are marked skipped in the session, so ``cr-report session.sqlite``
   shows the sample alone.
3. The suite runs once under coverage with one context per test: each line of the
   package gets the tests that execute it, and each test its duration.  Tests that
   fail on the unmutated copy (rerun without coverage to confirm) are left out.
4. Each sampled mutation is applied to the copy and ``pytest -x`` runs the tests
   that execute its statement (the innermost statement or lambda around it), fastest
   first; a mutation in code that runs at import time (module or class level,
   default values, decorators) runs the whole suite.  Timeout: ``timeout-factor``
   times those tests' durations under coverage, plus ``timeout-constant`` seconds,
   at most ``timeout``.  The mutants run in a seeded random order, so a run stopped early (a deadline, a
   busy machine; ``--report`` prints it) has tested a sample spread over the whole package.  Hypothesis
   runs with ``--hypothesis-seed=0`` and an empty example database, so every mutant sees the same examples.

Outcomes: ``killed`` (a test failed), ``killed (error)`` (the mutant does not import
or collect), ``timeout`` (counted as killed, as cosmic-ray does), ``survived`` (the
tests passed), ``not run`` (no test executes the line: a survivor).  The survivors
are listed with their line and diff.  Which of them are *equivalent* mutations (the
behaviour cannot change) is a judgement the script does not make: the kill rate the
project tracks is killed / (sampled - equivalent), with the equivalent survivors
named in the report that quotes it.
"""

from __future__ import annotations

import argparse
import ast
import collections
import contextlib
import difflib
import io
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tarfile
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MARKER = "dualbroadcast-mutation.json"
DEFAULTS = {
    "seed": 13,
    "size": 300,
    "timeout-factor": 3.0,
    "timeout-constant": 60.0,
    "workdir": "/tmp/dualbroadcast-mutation",
}


# --------------------------------------------------------------------------- configuration


def load_config():
    """``[tool.cosmic-ray]`` of pyproject.toml, with the sample's defaults filled in."""
    with open(ROOT / "pyproject.toml", "rb") as f:
        cfg = tomllib.load(f)["tool"]["cosmic-ray"]
    sample = dict(DEFAULTS)
    sample.update(cfg.get("sample", {}))
    return cfg, sample


def pytest_base(cfg):
    """The test command, as an argument list run by this Python."""
    words = cfg["test-command"].split()
    if words[:3] != ["python", "-m", "pytest"]:
        raise SystemExit("[tool.cosmic-ray] test-command must start with 'python -m pytest'")
    return [sys.executable, "-m", "pytest", *words[3:]]


def test_env(tree):
    env = dict(os.environ)
    env["PYTHONPATH"] = str(tree) + os.pathsep + env.get("PYTHONPATH", "")
    env["PYTHONDONTWRITEBYTECODE"] = "1"  # a mutated file must never be shadowed by a stale .pyc
    return env


def be_nice():
    with contextlib.suppress(OSError):
        os.nice(max(0, 19 - os.nice(0)))


# --------------------------------------------------------------------------- the copy and the session


def export(ref, workdir):
    """Unpack ``git archive ref`` into ``workdir/tree``; return the commit."""
    commit = subprocess.run(
        ["git", "rev-parse", "--verify", ref + "^{commit}"], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout.strip()
    archive = subprocess.run(["git", "archive", commit], cwd=ROOT, check=True, capture_output=True).stdout
    tree = workdir / "tree"
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(tree, filter="data")
    return commit


def init_session(cfg, tree, session):
    from cosmic_ray.commands import init
    from cosmic_ray.modules import filter_paths, find_modules
    from cosmic_ray.work_db import WorkDB, use_db

    paths = filter_paths(find_modules([Path(cfg["module-path"])]), cfg.get("excluded-modules", []))
    with use_db(str(session), WorkDB.Mode.create) as db:
        init(sorted(paths), db, cfg.get("operators", {}))


def key(item):
    m = item.mutations[0]
    return (str(m.module_path), m.operator_name, m.occurrence)


def draw_sample(items, seed, size):
    """``size`` mutations, per module in proportion to its count (at least one), seeded."""
    by_module = collections.defaultdict(list)
    for item in sorted(items, key=key):
        by_module[key(item)[0]].append(item)
    total = sum(len(v) for v in by_module.values())
    rng = random.Random(seed)
    chosen = []
    for module in sorted(by_module):
        pool = by_module[module]
        n = min(len(pool), max(1, round(size * len(pool) / total)))
        chosen.extend(rng.sample(pool, n))
    return sorted(chosen, key=key)


def apply_sample(session, seed, size):
    from cosmic_ray.work_db import WorkDB, use_db
    from cosmic_ray.work_item import WorkerOutcome, WorkResult

    with use_db(str(session), WorkDB.Mode.open) as db:
        items = list(db.work_items)
        chosen = draw_sample(items, seed, size)
        ids = {i.job_id for i in chosen}
        db.set_multiple_results(
            [i.job_id for i in items if i.job_id not in ids],
            WorkResult(worker_outcome=WorkerOutcome.SKIPPED, output="not in the sample"),
        )
    return len(items), len(chosen)


# --------------------------------------------------------------------------- coverage: which tests run which line


def coverage_phase(tree, out, args):
    """Run in a child process: the suite under coverage, one context per test."""
    import coverage

    cov = coverage.Coverage(data_file=None, source=[str(Path(tree) / "dualbroadcast")])
    cov.start()
    import pytest

    durations = collections.defaultdict(float)
    failed = set()

    class Contexts:
        @pytest.hookimpl(hookwrapper=True)
        def pytest_runtest_protocol(self, item, nextitem):
            cov.switch_context(item.nodeid)
            yield
            cov.switch_context("")

        def pytest_runtest_logreport(self, report):
            durations[report.nodeid] += report.duration
            if report.failed:
                failed.add(report.nodeid)

    code = pytest.main([*args, "tests"], plugins=[Contexts()])
    cov.stop()
    import dualbroadcast

    assert Path(dualbroadcast.__file__).resolve().is_relative_to(Path(tree).resolve()), dualbroadcast.__file__
    data = cov.get_data()
    tests = sorted(durations)
    index = {t: i for i, t in enumerate(tests)}
    lines = {}
    for f in data.measured_files():
        rel = os.path.relpath(f, tree)
        lines[rel] = {
            ln: sorted({index[c] if c else -1 for c in ctxs if not c or c in index})
            for ln, ctxs in data.contexts_by_lineno(f).items()
        }
    with open(out, "w") as fh:
        json.dump({"exit": int(code), "tests": tests, "durations": [durations[t] for t in tests],
                   "failed": sorted(failed), "lines": lines}, fh)


def collect_coverage(cfg, tree, workdir):
    out = workdir / "coverage.json"
    args = pytest_base(cfg)[3:]
    args = [a for a in args if a not in ("-x", "--exitfirst")]
    t = time.time()
    print(f"coverage: the suite under coverage, one context per test ({tree})", flush=True)
    subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--coverage-phase", str(tree), str(out), *args],
        cwd=tree, env=test_env(tree), check=True, stdout=subprocess.DEVNULL,
    )
    cov = json.loads(out.read_text())
    # a failure under tracing may be the tracer's doing: a test is left out if it fails alone without it too
    broken = [t for t in cov["failed"] if not _passes_alone(cfg, tree, t)]
    cov["broken"] = broken
    out.write_text(json.dumps(cov))
    print(f"coverage: {len(cov['tests'])} tests in {time.time() - t:.0f} s; failing on the unmutated copy"
          f" (left out): {broken or 'none'}", flush=True)
    return cov


def _passes_alone(cfg, tree, test):
    r = subprocess.run([*pytest_base(cfg), test], cwd=tree, env=test_env(tree), capture_output=True, check=False)
    return r.returncode == 0


# --------------------------------------------------------------------------- which tests a mutation needs


class Scopes:
    """Where a position of a module's source sits: its statement's lines, and whether it runs at import time."""

    def __init__(self, source):
        self.lines = source.split("\n")
        self.nodes = []  # (start, end, node) of statements and lambdas, positions as (line, character)
        self.bodies = []  # (start, end) of function and lambda bodies
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, (ast.stmt, ast.Lambda)):
                self.nodes.append((self._pos(node.lineno, node.col_offset),
                                   self._pos(node.end_lineno, node.end_col_offset), node))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                first = node.body[0]
                self.bodies.append((self._pos(first.lineno, first.col_offset),
                                    self._pos(node.end_lineno, node.end_col_offset)))
            if isinstance(node, ast.Lambda):
                self.bodies.append((self._pos(node.body.lineno, node.body.col_offset),
                                    self._pos(node.body.end_lineno, node.body.end_col_offset)))

    def _pos(self, line, byte_col):
        text = self.lines[line - 1].encode()
        return (line, len(text[:byte_col].decode(errors="ignore")))

    def of(self, start, end):
        """(lines to look up in the coverage, runs at call time?) for a mutation from ``start`` to ``end``."""
        start, end = tuple(start), tuple(end)
        around = [n for n in self.nodes if n[0] <= start and end <= n[1]]  # nested: the innermost starts last
        inner = max(around, key=lambda n: (n[0], (-n[1][0], -n[1][1])), default=None)
        call_time = any(b[0] <= start and end <= b[1] for b in self.bodies)
        if inner is None:
            return set(range(start[0], end[0] + 1)), call_time
        node = inner[2]
        last = end[0] if getattr(node, "body", None) and isinstance(node.body, list) else node.end_lineno
        return set(range(min(node.lineno, start[0]), max(last, end[0]) + 1)), call_time


def select_tests(mutation, cov, scopes_by_module):
    """(test node ids fastest first, 'lines' | 'all' | 'none') for one mutation."""
    module = str(mutation.module_path)
    if module not in scopes_by_module:
        scopes_by_module[module] = Scopes(Path(module).read_text(encoding="utf-8"))
    lines, call_time = scopes_by_module[module].of(mutation.start_pos, mutation.end_pos)
    measured = cov["lines"].get(module, {})
    hits = set()
    for ln in lines:
        hits.update(measured.get(str(ln), ()))
    broken = set(cov["broken"])
    usable = [i for i, t in enumerate(cov["tests"]) if t not in broken]
    if call_time and hits - {-1}:
        chosen, how = [i for i in usable if i in hits], "lines"
    elif hits or not call_time:
        chosen, how = usable, "all"  # import-time code, or code run only while tests are collected
    else:
        return [], "none", 0.0
    chosen.sort(key=lambda i: (cov["durations"][i], i))
    return [cov["tests"][i] for i in chosen], how, sum(cov["durations"][i] for i in chosen)


# --------------------------------------------------------------------------- running the mutants


def run_mutant(cfg, sample, tree, workdir, item, cov, scopes):
    import cosmic_ray.plugins
    from cosmic_ray.mutating import use_mutation
    from cosmic_ray.work_item import TestOutcome, WorkerOutcome, WorkResult

    m = item.mutations[0]
    tests, how, estimate = select_tests(m, cov, scopes)
    if not tests:
        return WorkResult(worker_outcome=WorkerOutcome.NORMAL, test_outcome=TestOutcome.SURVIVED,
                          output="not run\nno test executes this line", diff=_diff(m)), "not run", 0.0
    timeout = min(float(cfg.get("timeout", 3600)), sample["timeout-factor"] * estimate + sample["timeout-constant"])
    argsfile = workdir / "tests.txt"
    argsfile.write_text("\n".join(tests) + "\n")
    shutil.rmtree(tree / ".hypothesis", ignore_errors=True)
    operator = cosmic_ray.plugins.get_operator(m.operator_name)(**(m.operator_args or {}))
    t = time.time()
    with use_mutation(Path(m.module_path), operator, m.occurrence) as (original, mutated):
        if mutated is None:
            return WorkResult(worker_outcome=WorkerOutcome.NO_TEST, output="no mutation"), "no mutation", 0.0
        diff = _diff(m, original, mutated)
        proc = subprocess.Popen([*pytest_base(cfg), f"@{argsfile}"], cwd=tree, env=test_env(tree),
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            out, _ = proc.communicate(timeout=timeout)
            code = proc.returncode
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except OSError:
                proc.kill()
            out, _ = proc.communicate()
            code = None
    elapsed = time.time() - t
    text = out.decode(errors="replace")
    lines = text.strip().split("\n")
    failed = [ln for ln in lines if ln.startswith(("FAILED ", "ERROR "))][:3]  # which test killed it
    tail = "\n".join(failed + lines[-15:])
    if code is None:
        kind, outcome = "timeout", TestOutcome.KILLED
    elif code == 0:
        kind, outcome = "survived", TestOutcome.SURVIVED
    elif code == 1:
        kind, outcome = "killed", TestOutcome.KILLED
    elif code in (2, 3) or any(ln.startswith("ERROR tests/") for ln in lines):
        # the mutant breaks an import or a test module's collection (with -x, pytest then says "found no
        # collectors" for the test ids after it: exit 4)
        kind, outcome = "killed (error)", TestOutcome.KILLED
    else:  # 4: usage error, 5: nothing collected: the driver's fault, not the tests'
        kind, outcome = "error", TestOutcome.INCOMPETENT
    header = f"{kind}\n{len(tests)} tests ({how}), {elapsed:.1f} s, timeout {timeout:.0f} s, exit {code}\n"
    return WorkResult(worker_outcome=WorkerOutcome.NORMAL, test_outcome=outcome, output=header + tail,
                      diff=diff), kind, elapsed


def _diff(m, original=None, mutated=None):
    if original is None:
        import cosmic_ray.plugins
        from cosmic_ray.mutating import mutate_code

        original = Path(m.module_path).read_text(encoding="utf-8")
        operator = cosmic_ray.plugins.get_operator(m.operator_name)(**(m.operator_args or {}))
        mutated = mutate_code(original, operator, m.occurrence) or original
    return "\n".join(difflib.unified_diff(original.split("\n"), mutated.split("\n"), f"a/{m.module_path}",
                                          f"b/{m.module_path}", lineterm="", n=0))


def run(cfg, sample, workdir):
    from cosmic_ray.work_db import WorkDB, use_db

    tree = workdir / "tree"
    session = workdir / "session.sqlite"
    cov = json.loads((workdir / "coverage.json").read_text())
    with use_db(str(session), WorkDB.Mode.open) as db:
        pending = sorted(db.pending_work_items, key=key)
    random.Random(sample["seed"]).shuffle(pending)  # interrupted, the mutants run are a sample of every module too
    total = len(pending)
    print(f"mutants: {total} to run", flush=True)
    scopes = {}
    t0 = time.time()
    for n, item in enumerate(pending, 1):
        result, kind, elapsed = run_mutant(cfg, sample, tree, workdir, item, cov, scopes)
        with use_db(str(session), WorkDB.Mode.open) as db:
            db.set_result(item.job_id, result)
        m = item.mutations[0]
        print(f"[{n}/{total} {time.time() - t0:6.0f} s] {kind:15} {elapsed:5.1f} s  {m.module_path}:{m.start_pos[0]}"
              f"  {m.operator_name.removeprefix('core/')}", flush=True)


# --------------------------------------------------------------------------- report


def report(workdir, state):
    from cosmic_ray.work_db import WorkDB, use_db

    with use_db(str(workdir / "session.sqlite"), WorkDB.Mode.open) as db:
        done = [(i, r) for i, r in db.completed_work_items if r.worker_outcome.value != "skipped"]
    done.sort(key=lambda p: key(p[0]))
    counts = collections.Counter()
    per_module = collections.defaultdict(collections.Counter)
    survivors = []
    for item, result in done:
        kind = (result.output or "").split("\n", 1)[0] if result.worker_outcome.value == "normal" else "no mutation"
        module = str(item.mutations[0].module_path)
        counts[kind] += 1
        per_module[module][kind] += 1
        if kind in ("survived", "not run"):
            survivors.append((item, result, kind))
    kinds = ["killed", "killed (error)", "timeout", "survived", "not run", "error", "no mutation"]
    lines = [(f"# Mutation run: {state['commit'][:12]} seed {state['seed']} sample {state['size']}"
              f" of {state.get('universe', '?')} mutations"), ""]
    if state.get("seconds"):
        coverage = state.get("coverage_seconds", 0)
        lines.append(f"time: {state['seconds'] / 60:.0f} min (coverage {coverage / 60:.0f} min)")
    if state.get("broken"):
        lines.append(f"tests failing on the unmutated copy, left out: {', '.join(state['broken'])}")
    lines += ["", "| module | " + " | ".join(kinds) + " |", "|---" * (len(kinds) + 1) + "|"]
    for module in sorted(per_module):
        lines.append(f"| {module} | " + " | ".join(str(per_module[module][k]) for k in kinds) + " |")
    lines.append("| **total** | " + " | ".join(str(counts[k]) for k in kinds) + " |")
    killed = counts["killed"] + counts["killed (error)"] + counts["timeout"]
    alive = counts["survived"] + counts["not run"]
    if killed + alive:
        lines += ["", (f"killed {killed} of {killed + alive} run ({100 * killed / (killed + alive):.1f}%), "
                       f"{alive} survivors; kill rate of behaviour-changing mutations = killed / "
                       f"({killed + alive} - equivalent survivors)")]
    lines += ["", "## Survivors", ""]
    for item, result, kind in survivors:
        m = item.mutations[0]
        diff = [d for d in (result.diff or "").split("\n") if d[:1] in "+-" and d[:3] not in ("---", "+++")]
        lines.append(f"- {m.module_path}:{m.start_pos[0]} `{m.operator_name.removeprefix('core/')}`"
                     f" in {m.definition_name} ({kind})")
        lines += [f"      {d}" for d in diff]
    text = "\n".join(lines) + "\n"
    (workdir / "report.md").write_text(text)
    return text


# --------------------------------------------------------------------------- main


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--ref", default="HEAD")
    p.add_argument("--seed", type=int)
    p.add_argument("--size", type=int)
    p.add_argument("--workdir")
    p.add_argument("--fresh", action="store_true", help="start over even if the work directory holds this run")
    p.add_argument("--list", action="store_true", help="print the sample and stop")
    p.add_argument("--report", action="store_true", help="print the report of the run in the work directory")
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--coverage-phase"]:  # the child process of collect_coverage
        coverage_phase(argv[1], argv[2], argv[3:])
        return 0
    args = p.parse_args(argv)
    be_nice()
    cfg, sample = load_config()
    for name in ("seed", "size", "workdir"):
        if getattr(args, name) is not None:
            sample[name] = getattr(args, name)
    workdir = Path(sample["workdir"]).resolve()
    if args.report:
        print(report(workdir, json.loads((workdir / MARKER).read_text())))
        return 0
    commit = subprocess.run(["git", "rev-parse", "--verify", args.ref + "^{commit}"], cwd=ROOT, check=True,
                            capture_output=True, text=True).stdout.strip()
    want = {"commit": commit, "seed": sample["seed"], "size": sample["size"], "config": cfg}
    state = json.loads((workdir / MARKER).read_text()) if (workdir / MARKER).exists() else None
    same = state is not None and all(state.get(k) == v for k, v in want.items())
    if workdir.exists() and (args.fresh or not same):
        if state is None and any(workdir.iterdir()):
            raise SystemExit(f"{workdir} exists and is not a mutation work directory: choose another --workdir")
        shutil.rmtree(workdir)
    t0 = time.time()
    if not same or args.fresh:
        workdir.mkdir(parents=True)
        state = dict(want)
        (workdir / MARKER).write_text(json.dumps(state))
        export(commit, workdir)
        os.chdir(workdir / "tree")
        print(f"cosmic-ray init: {commit[:12]} {cfg['module-path']}", flush=True)
        init_session(cfg, workdir / "tree", workdir / "session.sqlite")
        state["universe"], _ = apply_sample(workdir / "session.sqlite", sample["seed"], sample["size"])
        (workdir / MARKER).write_text(json.dumps(state))
    os.chdir(workdir / "tree")
    if args.list:
        from cosmic_ray.work_db import WorkDB, use_db

        with use_db(str(workdir / "session.sqlite"), WorkDB.Mode.open) as db:
            sampled = [i for i, r in db.completed_work_items if r.worker_outcome.value != "skipped"]
            sampled += list(db.pending_work_items)
        for item in sorted(sampled, key=key):
            m = item.mutations[0]
            print(f"{m.module_path}:{m.start_pos[0]}:{m.start_pos[1]} {m.operator_name} #{m.occurrence}")
        print(f"{len(sampled)} of {state['universe']} mutations")
        return 0
    if not (workdir / "coverage.json").exists():
        tc = time.time()
        cov = collect_coverage(cfg, workdir / "tree", workdir)
        state["broken"] = cov["broken"]
        state["coverage_seconds"] = time.time() - tc
        for d in (workdir / "tree" / cfg["module-path"]).rglob("__pycache__"):
            shutil.rmtree(d)
        (workdir / MARKER).write_text(json.dumps(state))
    run(cfg, sample, workdir)
    state["seconds"] = state.get("seconds", 0) + time.time() - t0
    (workdir / MARKER).write_text(json.dumps(state))
    print(report(workdir, state))
    return 0


if __name__ == "__main__":
    sys.exit(main())
